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
    errors: list[KafkaError | None] = []
    p = Producer({**app_client(cluster), "enable.idempotence": False, "message.timeout.ms": 10000,
                  "log_level": "3"})
    p.produce(topic, b"from app", on_delivery=lambda err, _msg: errors.append(err))
    p.flush(15)
    return "ok" if errors == [None] else (str(errors[0].name()) if errors and errors[0] else f"no answer {errors}")


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
