"""ACL sync that converges (sync.topic.acls.enabled) and read-only remote topics, against real brokers.

The flow runs dc2 -> dc1 here: dc1 has the non-super SCRAM user ``app`` (kafka_harness.app_client), so what
the target's ACLs allow is proved by really reading and writing as ``app`` on the target.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
)

from mirror_core.devcluster.local_cluster import LocalCluster
from mirror_core.replication.acls import AclRule, all_acls
from mirror_core.state.store import StateStore
from tests.integration.test_topic_sync import run_sync
from tests.kafka_harness import admin, app_client, create_topic, write_config

ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
LIT, PRE = ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED


def acl(restype: ResourceType, name: str, pattern: ResourcePatternType, who: str, op: AclOperation,
        perm: AclPermissionType = ALLOW) -> AclBinding:
    return AclBinding(restype, name, pattern, who, "*", op, perm)


def grant(bootstrap: str, *bindings: AclBinding) -> None:
    client = admin(bootstrap)
    for fut in client.create_acls(list(bindings), request_timeout=15).values():
        fut.result(15)


def revoke(bootstrap: str, *bindings: AclBinding) -> None:
    client = admin(bootstrap)
    filters = [AclBindingFilter(b.restype, b.name, b.resource_pattern_type, b.principal, b.host, b.operation,
                                b.permission_type) for b in bindings]
    for fut in client.delete_acls(filters, request_timeout=15).values():
        fut.result(15)


def on(bootstrap: str, binding: AclBinding) -> bool:
    return AclRule.of(binding) in all_acls(admin(bootstrap))


def read_as_app(cluster: LocalCluster, topic: str, group: str, expect: int, timeout: float = 20) -> str:
    """``ok`` once ``expect`` records were read as ``app``, else the broker's error name."""
    c = Consumer({**app_client(cluster), "group.id": group, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False, "log_level": "3"})
    try:
        c.subscribe([topic])
        got, deadline = 0, time.monotonic() + timeout
        while time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() in (KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.GROUP_AUTHORIZATION_FAILED):
                    return str(msg.error().name())
                continue
            got += 1
            if got >= expect:
                return "ok"
        return f"timeout ({got} records)"
    finally:
        c.close()


def write_as_app(cluster: LocalCluster, topic: str) -> str:
    """``ok`` when the target took a record written as ``app``, else the broker's error name."""
    errors: list[str] = []

    def delivered(err: KafkaError | None, _msg: object) -> None:
        denied = err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
        errors.append("ok" if err is None else "TOPIC_AUTHORIZATION_FAILED" if denied else err.str())

    p = Producer({**app_client(cluster), "enable.idempotence": False, "message.timeout.ms": 10000,
                  "log_level": "3"})
    p.produce(topic, b"from app", on_delivery=delivered)
    p.flush(15)
    return errors[0] if errors else "no answer"


def produce_plain(bootstrap: str, topic: str, count: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap})
    for i in range(count):
        p.produce(topic, b"r%d" % i)
    assert p.flush(15) == 0


def test_acls_converge_and_a_revocation_reaches_the_target(clusters: dict[str, LocalCluster], name: str,
                                                           tmp_path: Path) -> None:
    dc1, dc2 = clusters["dc1"].bootstrap, clusters["dc2"].bootstrap
    t, remote, group, local_group = f"{name}.orders", f"dc2.{name}.orders", f"{name}.g", f"{name}.local"
    create_topic(dc2, t)
    app_topic = acl(ResourceType.TOPIC, f"{name}.", PRE, "User:app", AclOperation.READ)  # PREFIXED, source
    other_topic = acl(ResourceType.TOPIC, t, LIT, "User:other", AclOperation.DESCRIBE)
    app_group = acl(ResourceType.GROUP, group, LIT, "User:app", AclOperation.READ)
    other_group = acl(ResourceType.GROUP, f"{name}.", PRE, "User:other", AclOperation.READ)
    writer = acl(ResourceType.TOPIC, t, LIT, "User:app", AclOperation.WRITE)  # never copied: read-only
    grant(dc2, app_topic, other_topic, app_group, other_group, writer)
    # On the target, ACLs the sync must never take away: the mirror's own (User:ANONYMOUS, from its
    # PLAINTEXT settings), a WRITE grant for producers, a target-local group's.
    own = acl(ResourceType.TOPIC, remote, LIT, "User:ANONYMOUS", AclOperation.DESCRIBE)
    local = acl(ResourceType.GROUP, local_group, LIT, "User:zed", AclOperation.READ)
    grant(dc1, own, local)
    config = write_config(tmp_path / "mm2.properties", {"dc1": dc1, "dc2": dc2},
                          ["dc2->dc1.enabled = true", f"dc2->dc1.topics = {name}.*", f"dc2->dc1.groups = {name}.*"])
    db = f"sqlite:///{tmp_path / 'state.db'}"
    mapped = {"PREFIXED topic": acl(ResourceType.TOPIC, f"dc2.{name}.", PRE, "User:app", AclOperation.READ),
              "literal topic": acl(ResourceType.TOPIC, remote, LIT, "User:other", AclOperation.DESCRIBE),
              "literal group": app_group, "PREFIXED group": other_group}
    try:
        first = run_sync(config, db)
        assert first.returncode == 0, first.stderr
        assert {k for k, b in mapped.items() if not on(dc1, b)} == set()
        assert not on(dc1, acl(ResourceType.TOPIC, remote, LIT, "User:app", AclOperation.WRITE))
        produce_plain(dc1, remote, 3)

        # Before the revocation: app really reads the remote topic on the target (group and topic ACLs).
        assert read_as_app(clusters["dc1"], remote, group, 3) == "ok"
        assert json.loads(run_sync(config, db).stdout)[0]["changes"] == []  # converged: nothing to do

        revoke(dc2, app_topic, other_group)
        dry = run_sync(config, db, "--dry-run")
        assert dry.returncode == 0, dry.stderr
        proposed = {(c["topic"], c["kind"]) for c in json.loads(dry.stdout)[0]["changes"]}
        assert proposed == {(f"topic-prefix:dc2.{name}.", "acl-removed"), (f"group-prefix:{name}.", "acl-removed")}
        assert on(dc1, mapped["PREFIXED topic"])  # a dry run changes nothing

        applied = run_sync(config, db)
        assert applied.returncode == 0, applied.stderr
        assert not on(dc1, mapped["PREFIXED topic"]) and not on(dc1, other_group)
        # After: app is refused on the target as on the source; the rest converged and untouched.
        assert read_as_app(clusters["dc1"], remote, group, 3) == "TOPIC_AUTHORIZATION_FAILED"
        assert on(dc1, mapped["literal topic"]) and on(dc1, app_group)
        assert on(dc1, own) and on(dc1, local)
        rows = [(d.topic, d.kind, d.action) for d in StateStore(db).recent_drift("dc2->dc1", limit=100)]
        assert (f"topic-prefix:dc2.{name}.", "acl-removed", "applied") in rows
        assert (f"topic-prefix:dc2.{name}.", "acl-removed", "proposed") in rows
        assert (remote, "acl", "applied") in rows
    finally:
        revoke(dc2, app_topic, other_topic, app_group, other_group, writer)
        revoke(dc1, own, local, *mapped.values())


def test_sync_topic_acls_disabled_leaves_acls_alone(clusters: dict[str, LocalCluster], name: str,
                                                    tmp_path: Path) -> None:
    dc1, dc2 = clusters["dc1"].bootstrap, clusters["dc2"].bootstrap
    t = f"{name}.quiet"
    create_topic(dc2, t)
    reader = acl(ResourceType.TOPIC, t, LIT, "User:app", AclOperation.READ)
    grant(dc2, reader)
    config = write_config(tmp_path / "mm2.properties", {"dc1": dc1, "dc2": dc2},
                          ["dc2->dc1.enabled = true", f"dc2->dc1.topics = {name}.*",
                           "dc2->dc1.sync.topic.acls.enabled = false"])
    try:
        result = run_sync(config, f"sqlite:///{tmp_path / 'state.db'}")
        assert result.returncode == 0, result.stderr
        assert [c["kind"] for c in json.loads(result.stdout)[0]["changes"]] == ["created"]
        assert not on(dc1, acl(ResourceType.TOPIC, f"dc2.{t}", LIT, "User:app", AclOperation.READ))
    finally:
        revoke(dc2, reader)


def test_read_only_remote_topics_refuse_applications_until_promoted(clusters: dict[str, LocalCluster], name: str,
                                                                    tmp_path: Path) -> None:
    from mirror_core.config.loader import load_config
    from mirror_core.topic_sync import lift_remote_read_only

    dc1, dc2 = clusters["dc1"].bootstrap, clusters["dc2"].bootstrap
    a, b = f"{name}.a", f"{name}.b"
    ra, rb = f"dc2.{a}", f"dc2.{b}"
    for t in (a, b):
        create_topic(dc2, t)
    lines = ["dc2->dc1.enabled = true", f"dc2->dc1.topics = {name}.*"]
    plain = write_config(tmp_path / "plain.properties", {"dc1": dc1, "dc2": dc2}, lines)
    guarded = write_config(tmp_path / "ro.properties", {"dc1": dc1, "dc2": dc2},
                           [*lines, "dc2->dc1.remote.topics.read.only = true"])
    db = f"sqlite:///{tmp_path / 'state.db'}"
    try:
        assert run_sync(plain, db).returncode == 0
        assert write_as_app(clusters["dc1"], ra) == "ok"  # precondition: without the guard, app may write

        first = run_sync(guarded, db)
        assert first.returncode == 0, first.stderr
        assert {(c["topic"], c["kind"]) for c in json.loads(first.stdout)[0]["changes"]} == {
            (ra, "read-only"), (rb, "read-only")}
        assert write_as_app(clusters["dc1"], ra) == "TOPIC_AUTHORIZATION_FAILED"
        produce_plain(dc1, ra, 1)  # the mirror's principal (a super user) still writes
        assert json.loads(run_sync(guarded, db).stdout)[0]["changes"] == []  # kept, not added twice

        # A promotion (the cutover's switch, a failover) lifts it for exactly the promoted topics.
        store = StateStore(db)
        config = load_config(guarded)
        assert lift_remote_read_only(config, config.flow("dc2->dc1"), [a], store) == [ra]
        assert write_as_app(clusters["dc1"], ra) == "ok"
        assert write_as_app(clusters["dc1"], rb) == "TOPIC_AUTHORIZATION_FAILED"
        assert ("read-only-lifted", "applied") in {(d.kind, d.action) for d in store.recent_drift("dc2->dc1")
                                                   if d.topic == ra}
        # The promoted flow is stopped by the workflow: the sync does not put the guard back.
        store.set_flow_desired("dc2->dc1", "stopped", "test", "promoted")
        assert json.loads(run_sync(guarded, db).stdout)[0]["changes"] == []
        assert write_as_app(clusters["dc1"], ra) == "ok"
    finally:
        client = admin(dc1)
        for fut in client.delete_acls([AclRule("TOPIC", r, "LITERAL", "User:*", "*", "WRITE", "DENY").binding_filter()
                                       for r in (ra, rb)]).values():
            fut.result(15)


def test_a_guard_that_would_stop_the_mirror_is_refused_and_nothing_changes(clusters: dict[str, LocalCluster],
                                                                           name: str, tmp_path: Path) -> None:
    """The mirror as the non-super ``app`` on the target (allowed to alter ACLs): a DENY WRITE for User:*
    would refuse its own writes, so the sync takes it away again and says so in one line."""
    from tests.kafka_harness import APP_PASSWORD, APP_USER

    dc1, dc2 = clusters["dc1"].bootstrap, clusters["dc2"].bootstrap
    t, remote = f"{name}.c", f"dc2.{name}.c"
    create_topic(dc2, t)
    create_topic(dc1, remote)
    cluster_ops = [acl(ResourceType.BROKER, "kafka-cluster", LIT, "User:app", op)
                   for op in (AclOperation.ALTER, AclOperation.DESCRIBE)]
    grant(dc1, *cluster_ops)
    jaas = f'org.apache.kafka.common.security.scram.ScramLoginModule required username="{APP_USER}" ' \
           f'password="{APP_PASSWORD}";'
    config = write_config(tmp_path / "mm2.properties",
                          {"dc1": clusters["dc1"].bootstrap_for("SASL_PLAINTEXT"), "dc2": dc2},
                          ["dc1.security.protocol = SASL_PLAINTEXT", "dc1.sasl.mechanism = SCRAM-SHA-512",
                           f"dc1.sasl.jaas.config = {jaas}", "dc2->dc1.enabled = true", f"dc2->dc1.topics = {name}.*",
                           "dc2->dc1.remote.topics.read.only = true"])
    try:
        proc = run_sync(config, f"sqlite:///{tmp_path / 'state.db'}")
        assert proc.returncode == 1
        assert proc.stderr.strip().splitlines() == [
            f"mirror-core: topics sync: flow dc2->dc1: remote.topics.read.only: the mirror is not exempt from the DENY "
            f"WRITE on {remote} on dc1 (it is not a super user there), so the guard would stop the mirror too; nothing "
            "was changed: add the mirror's principal to super.users on dc1, or set remote.topics.read.only = false "
            "for this flow"], proc.stderr
        assert not on(dc1, AclRule("TOPIC", remote, "LITERAL", "User:*", "*", "WRITE", "DENY").binding())
        assert write_as_app(clusters["dc1"], remote) == "ok"
    finally:
        revoke(dc1, *cluster_ops)


def test_the_running_mirror_keeps_acls_converged_and_remote_topics_read_only(  # type: ignore[no-untyped-def]
        clusters: dict[str, LocalCluster], name: str, start_mirror) -> None:
    from tests.integration.conftest import flow_lines
    from tests.kafka_harness import produce_sequence, read_all, wait_until

    dc1, dc2 = clusters["dc1"].bootstrap, clusters["dc2"].bootstrap
    t, remote = f"{name}.live", f"dc2.{name}.live"
    create_topic(dc2, t)
    reader = acl(ResourceType.TOPIC, t, LIT, "User:app", AclOperation.READ)
    grant(dc2, reader)
    guard = AclRule("TOPIC", remote, "LITERAL", "User:*", "*", "WRITE", "DENY").binding()
    copied = acl(ResourceType.TOPIC, remote, LIT, "User:app", AclOperation.READ)
    m = start_mirror(flow_lines(name, "remote.topics.read.only = true", "sync.topic.acls.interval.seconds = 1",
                                flow="dc2->dc1"))
    try:
        wait_until(lambda: on(dc1, guard) and on(dc1, copied), 60, what="guard and copied ACL on the target")
        assert write_as_app(clusters["dc1"], remote) == "TOPIC_AUTHORIZATION_FAILED"
        produce_sequence(dc2, t, 1, 20)
        wait_until(lambda: len(read_all(dc1, remote, timeout=5)) == 20, 60, what="records copied under the guard")
        revoke(dc2, reader)  # revoked on the source: gone from the target at the next round
        wait_until(lambda: not on(dc1, copied), 30, what="the revocation propagated")
        assert on(dc1, guard)
        assert m.stop() == 0
        assert "Traceback" not in m.log()
    finally:
        revoke(dc2, reader)
        revoke(dc1, copied, guard)
