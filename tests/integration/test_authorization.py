"""Authorization for real, and security on both sides.

Two clusters with a strict authorizer (no ACL, no access; only the harness's PLAINTEXT admin is a super
user). The mirror is the non-super SCRAM user ``mirror`` over SASL_SSL on both sides, and the target's
SASL_SSL listener also requires a client certificate (mutual TLS). It gets exactly the ACLs the README
section "ACLs the mirror needs" lists (:func:`mirror_acls`), and with them replicates at-least-once and
exactly-once, heartbeats, checkpoints and group offset sync. With one of them missing (Write on the remote
topics), it copies nothing, advances no progress, says which ACL to grant in one line, and resumes once
it is granted.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from mirror_core.offsets.groups import committed_offsets
from mirror_core.stores.progress import decode_key, ensure_progress_topic
from mirror_core.stores.records import decode_checkpoint_key
from tests.integration.conftest import DATA_PATHS, data_path, flow_lines, ran_on
from tests.integration.test_replication import topic_config
from tests.kafka_harness import (
    MirrorProcess,
    admin,
    create_topic,
    end_offsets,
    produce_sequence,
    read_all,
    topics,
    wait_until,
    write_config,
)
from tests.security_harness import (
    SCRAM_USER,
    ClientCert,
    SecureCluster,
    make_client_cert,
    make_pki,
    running_secure_cluster,
)

PASSWORD = "Authz-scram-pw-9137"
SRC, TGT = "dc1z", "dc2z"
FLOW = f"{SRC}->{TGT}"
PRINCIPAL = f"User:{SCRAM_USER}"
Op, Res = AclOperation, ResourceType
PREFIXED, LITERAL = ResourcePatternType.PREFIXED, ResourcePatternType.LITERAL


@dataclass(frozen=True)
class Sides:
    source: SecureCluster
    target: SecureCluster
    cert: ClientCert  # the mirror's client certificate for the target


@pytest.fixture(scope="module")
def sides(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sides]:
    root = tmp_path_factory.mktemp("kafka-authz")
    pki = make_pki(root / "pki")
    with running_secure_cluster(SRC, root, PASSWORD, pki=pki, strict_acls=True) as source, \
            running_secure_cluster(TGT, root, PASSWORD, pki=pki, strict_acls=True, sasl_client_auth=True) as target:
        yield Sides(source, target, make_client_cert(pki, root / "client", cn=SCRAM_USER))


def acl(resource: ResourceType, name: str, pattern: ResourcePatternType, op: AclOperation) -> AclBinding:
    return AclBinding(resource, name, pattern, PRINCIPAL, "*", op, AclPermissionType.ALLOW)


def mirror_acls(topics_prefix: str, exactly_once: bool) -> tuple[list[AclBinding], list[AclBinding]]:
    """(source, target) ACLs of README "ACLs the mirror needs" for a flow replicating ``<topics_prefix>*``
    with heartbeats, checkpoints and group offset sync: exactly those, nothing for the other guarantee."""
    source = [
        acl(Res.TOPIC, topics_prefix, PREFIXED, Op.READ),  # replicated topics (Read implies Describe)
        acl(Res.TOPIC, topics_prefix, PREFIXED, Op.DESCRIBE_CONFIGS),  # their configs, copied to the remote topics
        acl(Res.GROUP, "*", LITERAL, Op.DESCRIBE),  # the groups to checkpoint: their committed offsets
        *(acl(Res.TOPIC, "heartbeats", LITERAL, op)  # heartbeats: emitted, and replicated like data
          for op in (Op.CREATE, Op.WRITE, Op.READ, Op.DESCRIBE_CONFIGS)),
    ]
    target = [
        # remote topics and checkpoints: create, write, read (group offset sync), sync configs, add partitions
        *(acl(Res.TOPIC, f"{SRC}.", PREFIXED, op)
          for op in (Op.CREATE, Op.WRITE, Op.READ, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS, Op.ALTER)),
        *(acl(Res.TOPIC, "mirror-core.", PREFIXED, op)  # progress, offset syncs (exactly-once: slots); their limits
          for op in (Op.CREATE, Op.WRITE, Op.READ, Op.DESCRIBE_CONFIGS)),
        acl(Res.GROUP, "*", LITERAL, Op.READ),  # group offset sync: commit to the same groups
    ]
    if exactly_once:
        target += [acl(Res.GROUP, "mirror-core.", PREFIXED, Op.READ),  # the slot group
                   acl(Res.TRANSACTIONAL_ID, f"mirror-core.{SRC}-{TGT}.", PREFIXED, Op.WRITE)]
    else:
        source += [acl(Res.GROUP, "mirror-core.", PREFIXED, Op.READ)]  # the worker group
    return source, target


def set_acls(bootstrap: str, bindings: list[AclBinding]) -> None:
    """Replace the mirror user's ACLs on a cluster (as the harness's super user)."""
    a = admin(bootstrap)
    for fut in a.delete_acls([AclBindingFilter(Res.ANY, None, ResourcePatternType.ANY, PRINCIPAL, None, Op.ANY,
                                               AclPermissionType.ANY)]).values():
        fut.result(15)
    for fut in a.create_acls(bindings).values():
        fut.result(15)


def client_lines(sides: Sides) -> list[str]:
    """The mirror's settings: SCRAM over TLS on both clusters, plus its certificate for the target."""
    return [*sides.source.lines(SRC), *sides.target.lines(TGT),
            f"{TGT}.ssl.certificate.location = {sides.cert.cert_pem}", f"{TGT}.ssl.key.location = {sides.cert.key_pem}"]


def mirror_config(sides: Sides, name: str, path: Path, *extra: str) -> Path:
    # Every feature that needs an ACL: heartbeats, checkpoints, group offset sync; the worker group
    # under the documented prefix.
    ours = [f"{FLOW}.consumer.group.id = mirror-core.{name}", "emit.heartbeats.enabled = true",
            "emit.heartbeats.interval.seconds = 1", "emit.checkpoints.interval.seconds = 1",
            "sync.group.offsets.enabled = true", "sync.group.offsets.interval.seconds = 1", *extra]
    keys = {line.split("=")[0] for line in ours}
    lines = [line for line in flow_lines(name, flow=FLOW) if line.split("=")[0] not in keys] + ours
    return write_config(path, {SRC: sides.source.sasl_bootstrap, TGT: sides.target.sasl_bootstrap},
                        client_lines(sides) + lines)


def as_mirror(cluster: SecureCluster, cert: ClientCert | None = None) -> dict[str, str]:
    """librdkafka settings of the mirror's principal (for the preconditions the tests check)."""
    conf = {"bootstrap.servers": cluster.sasl_bootstrap, "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": SCRAM_USER, "sasl.password": PASSWORD,
            "ssl.ca.location": str(cluster.pki.ca_pem), "log_level": "0"}
    if cert is not None:
        conf |= {"ssl.certificate.location": str(cert.cert_pem), "ssl.key.location": str(cert.key_pem)}
    return conf


def progress(sides: Sides, topic: str) -> dict[int, int]:
    """The mirror's stored progress (next offset to read) per partition of a source topic."""
    internal = f"mirror-core.progress.{SRC}.internal"
    if internal not in admin(sides.target.plain_bootstrap).list_topics(timeout=10).topics:
        return {}
    out = {}
    for r in read_all(sides.target.plain_bootstrap, internal, timeout=10):
        if r.key and r.value and decode_key(r.key)[0] == topic:
            out[decode_key(r.key)[1]] = int(json.loads(r.value)["next"])
    return out


def seed(sides: Sides, name: str, count: int) -> tuple[str, str]:
    topic, group = f"{name}.orders", f"{name}-app"
    create_topic(sides.source.plain_bootstrap, topic, 2)
    produce_sequence(sides.source.plain_bootstrap, topic, 2, count)
    c = Consumer({"bootstrap.servers": sides.source.plain_bootstrap, "group.id": group, "log_level": "3"})
    c.commit(offsets=[TopicPartition(topic, 0, 5), TopicPartition(topic, 1, 7)], asynchronous=False)
    c.close()
    return topic, group


@DATA_PATHS
@pytest.mark.parametrize("guarantee", ["at-least-once", "exactly-once"])
def test_replication_with_exactly_the_documented_acls(sides: Sides, name: str, tmp_path: Path,
                                                      mirrors: list[MirrorProcess], guarantee: str, path: str) -> None:
    topic, group = seed(sides, name, 40)
    source_acls, target_acls = mirror_acls(f"{name}.", guarantee == "exactly-once")
    set_acls(sides.source.plain_bootstrap, source_acls)
    set_acls(sides.target.plain_bootstrap, target_acls)

    # Preconditions: the authorizer really refuses what is not granted (the mirror may read, not write,
    # the source topic), and the target's listener really wants a certificate besides the password.
    errors: list[KafkaError | None] = []
    p = Producer({**as_mirror(sides.source), "enable.idempotence": False, "message.timeout.ms": 15000})
    p.produce(topic, b"not allowed", on_delivery=lambda err, _msg: errors.append(err))
    p.flush(20)
    assert [e.code() if e else None for e in errors] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    no_cert = AdminClient(as_mirror(sides.target))
    with pytest.raises(KafkaException):
        no_cert.list_topics(timeout=5)
    assert AdminClient(as_mirror(sides.target, sides.cert)).list_topics(timeout=15).brokers  # with it: in
    assert end_offsets(sides.source.plain_bootstrap, topic) == {0: 20, 1: 20}

    # (One slot as in the missing-ACL tests: these clusters' slot topic is shared, and slots cannot shrink.)
    eos = ["exactly.once.enabled = true", "exactly.once.slots = 1"] if guarantee == "exactly-once" else []
    m = MirrorProcess(mirror_config(sides, name, tmp_path / "mm2.properties", *eos, data_path(path)), tmp_path,
                      "authz").start()
    mirrors.append(m)
    remote = f"{SRC}.{topic}"

    wait_until(lambda: len(read_all(sides.target.plain_bootstrap, remote, timeout=10)) == 40, 90,
               what="40 records replicated")
    values = sorted(r.value for r in read_all(sides.target.plain_bootstrap, remote) if r.value)
    assert values == sorted(b"seq-%d" % i for i in range(40))  # each exactly once

    def checkpointed() -> bool:
        rows = read_all(sides.target.plain_bootstrap, f"{SRC}.checkpoints.internal", timeout=10)
        return {(group, remote, 0), (group, remote, 1)} <= {decode_checkpoint_key(r.key) for r in rows if r.key}

    wait_until(checkpointed, 60, interval=1, what="checkpoints of the source group")
    wait_until(lambda: committed_offsets(admin(sides.target.plain_bootstrap), group) == {(remote, 0): 5,
                                                                                          (remote, 1): 7},
               60, interval=1, what="group offsets synced to the target")
    wait_until(lambda: len(read_all(sides.target.plain_bootstrap, f"{SRC}.heartbeats", timeout=10)) > 0, 60,
               interval=1, what="heartbeats replicated")
    assert m.stop() == 0
    log = m.log()
    assert ran_on(log, path, FLOW)
    assert "not authorized" not in log and "AUTHORIZATION_FAILED" not in log and "Traceback" not in log, log[-3000:]


MISSING = {
    # (side, exactly-once, the ACL left out, (operation, resource, name)); {name}: the test's topic prefix
    "target Write": ("target", False, acl(Res.TOPIC, f"{SRC}.", PREFIXED, Op.WRITE), ("Write", "topic", "{remote}")),
    "source group Read": ("source", False, acl(Res.GROUP, "mirror-core.", PREFIXED, Op.READ),
                          ("Read", "group", "mirror-core.{name}")),
    "transactional id Write": ("target", True,
                               acl(Res.TRANSACTIONAL_ID, f"mirror-core.{SRC}-{TGT}.", PREFIXED, Op.WRITE),
                               ("Write", "transactional id", f"mirror-core.{SRC}-{TGT}.slot-0")),
}
CODES = {"topic": ("TOPIC_AUTHORIZATION_FAILED", "Topic"), "group": ("GROUP_AUTHORIZATION_FAILED", "Group"),
         "transactional id": ("TRANSACTIONAL_ID_AUTHORIZATION_FAILED", "TransactionalId")}


@DATA_PATHS
@pytest.mark.parametrize("missing", list(MISSING))
def test_a_missing_acl_is_named_and_nothing_moves(sides: Sides, name: str, tmp_path: Path,
                                                  mirrors: list[MirrorProcess], missing: str, path: str) -> None:
    topic, _ = seed(sides, name, 30)
    remote = f"{SRC}.{topic}"
    side, eos, left_out, (operation, noun, resource) = MISSING[missing]
    resource = resource.format(remote=remote, name=name)
    acls = dict(zip(("source", "target"), mirror_acls(f"{name}.", exactly_once=eos), strict=True))
    assert left_out in acls[side]
    acls[side].remove(left_out)
    set_acls(sides.source.plain_bootstrap, acls["source"])
    set_acls(sides.target.plain_bootstrap, acls["target"])
    # One slot: the transactional id refused is slot 0's.
    eos_lines = ["exactly.once.enabled = true", "exactly.once.slots = 1"] if eos else []
    m = MirrorProcess(mirror_config(sides, name, tmp_path / "mm2.properties", *eos_lines, data_path(path)), tmp_path,
                      "missing-acl").start()
    mirrors.append(m)

    alias = TGT if side == "target" else SRC
    code, kind = CODES[noun]
    line = (f"flow {FLOW}: not authorized to {operation} {noun} '{resource}' on cluster {alias} ({code}): "
            f"grant {PRINCIPAL} {operation.upper()} on {kind}:{resource} (see README 'ACLs the mirror needs')")
    wait_until(lambda: line in m.log(), 90, interval=1, what="the missing ACL named in the mirror log")
    assert ran_on(m.log(), path, FLOW)
    # Nothing was copied and no progress moved past the start.
    assert sum(end_offsets(sides.target.plain_bootstrap, remote).values()) == 0
    assert all(n == 0 for n in progress(sides, topic).values()), progress(sides, topic)
    assert m.alive() and "Traceback" not in m.log()

    # Granting it is enough: the mirror resumes without a restart.
    grant = admin(sides.target.plain_bootstrap if side == "target" else sides.source.plain_bootstrap)
    grant.create_acls([left_out])[left_out].result(15)
    wait_until(lambda: len(read_all(sides.target.plain_bootstrap, remote, timeout=10)) == 30, 90, interval=1,
               what="replication once the ACL is granted")  # (counted: transaction markers take offsets)
    wait_until(lambda: progress(sides, topic) == {0: 15, 1: 15}, 30, interval=1, what="progress")


NAMED_ONLY = {
    # The heartbeat producer is refused its producer id (IdempotentWrite comes with Write on a topic):
    # librdkafka fails it fatally and names the cause only when flushed.
    "heartbeats Write": ("source", acl(Res.TOPIC, "heartbeats", LITERAL, Op.WRITE),
                         f"not authorized to write topic 'heartbeats' on cluster {SRC} (CLUSTER_AUTHORIZATION_FAILED: "
                         f"no IdempotentWrite): grant {PRINCIPAL} WRITE on Topic:heartbeats"),
    # Group offset sync may not touch the application's group on the target; replication goes on.
    "synced group Read": ("target", acl(Res.GROUP, "*", LITERAL, Op.READ),
                          f"not authorized to Read group '{{name}}-app' on cluster {TGT} (GROUP_AUTHORIZATION_FAILED): "
                          f"grant {PRINCIPAL} READ on Group:{{name}}-app"),
}


@pytest.mark.parametrize("missing", list(NAMED_ONLY))
def test_a_missing_acl_of_a_side_task_is_named(sides: Sides, name: str, tmp_path: Path,
                                               mirrors: list[MirrorProcess], missing: str) -> None:
    seed(sides, name, 30)
    side, left_out, expected = NAMED_ONLY[missing]
    acls = dict(zip(("source", "target"), mirror_acls(f"{name}.", exactly_once=False), strict=True))
    acls[side].remove(left_out)
    set_acls(sides.source.plain_bootstrap, acls["source"])
    set_acls(sides.target.plain_bootstrap, acls["target"])
    m = MirrorProcess(mirror_config(sides, name, tmp_path / "mm2.properties"), tmp_path, "side-task").start()
    mirrors.append(m)
    line = f"flow {FLOW}: {expected.format(name=name)} (see README 'ACLs the mirror needs')"
    wait_until(lambda: line in m.log(), 60, interval=1, what="the missing ACL named in the mirror log")
    if missing == "synced group Read":
        assert len(read_all(sides.target.plain_bootstrap, f"{SRC}.{name}.orders")) == 30
    assert m.alive() and "Traceback" not in m.log()


def test_one_topic_refused_is_named_and_the_others_go_on(sides: Sides, name: str, tmp_path: Path,
                                                         mirrors: list[MirrorProcess]) -> None:
    """A topic the mirror may see (Describe) but neither read nor read the configs of: named in one line,
    not created on the target (its configs are unknown), while the flow's other topics replicate."""
    ok, secret = f"{name}.ok", f"{name}.secret"
    for t in (ok, secret):
        create_topic(sides.source.plain_bootstrap, t, 1)
        produce_sequence(sides.source.plain_bootstrap, t, 1, 20)
    source_acls, target_acls = mirror_acls(ok, False)
    set_acls(sides.source.plain_bootstrap, [*source_acls, acl(Res.TOPIC, secret, LITERAL, Op.DESCRIBE)])
    set_acls(sides.target.plain_bootstrap, target_acls)
    m = MirrorProcess(mirror_config(sides, name, tmp_path / "mm2.properties"), tmp_path, "one-refused").start()
    mirrors.append(m)
    wait_until(lambda: len(read_all(sides.target.plain_bootstrap, f"{SRC}.{ok}", timeout=10)) == 20, 90,
               what="the allowed topic replicated")
    wait_until(lambda: f"grant {PRINCIPAL} DESCRIBE_CONFIGS on Topic:{secret}" in m.log(), 30,
               what="the refused topic named")
    assert f"{SRC}.{secret}" not in topics(sides.target.plain_bootstrap)
    log = m.log()
    assert "restarting after error" not in log and "Traceback" not in log, log[-3000:]


def test_an_internal_topic_the_mirror_may_not_alter_is_named_with_the_command(
        sides: Sides, name: str, caplog: pytest.LogCaptureFixture) -> None:
    """AlterConfigs on ``mirror-core.`` is optional (README): without it, a progress topic an older version created
    keeps its settings, one line names it with the ``kafka-configs.sh`` command, and nothing fails."""
    set_acls(sides.target.plain_bootstrap, mirror_acls(f"{name}.", exactly_once=False)[1])
    topic = f"mirror-core.progress.{name}.internal"
    create_topic(sides.target.plain_bootstrap, topic, 1, {"cleanup.policy": "compact", "segment.ms": "3600000"})
    with caplog.at_level(logging.WARNING, logger="mirror_core.stores.internal_topics"):
        ensure_progress_topic(AdminClient(as_mirror(sides.target, sides.cert)), topic, 1)
    lines = [r.getMessage() for r in caplog.records if topic in r.getMessage()]
    assert len(lines) == 1 and "AUTHORIZATION" in lines[0].upper()  # really refused, and said once
    assert f"--entity-type topics --entity-name {topic} --add-config " in lines[0] and "segment.ms=600000" in lines[0]
    assert topic_config(sides.target.plain_bootstrap, topic)["segment.ms"] == "3600000"
