"""`mirror-core topics sync` (the logic behind the topic_config_sync DAG) against real brokers."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    ConfigResource,
    NewPartitions,
    ResourcePatternType,
    ResourceType,
)

from mirror_core.devcluster.local_cluster import free_port
from mirror_core.replication.acls import topic_acls
from mirror_core.state.store import StateStore
from tests.kafka_harness import REPO, admin, alter_topic, create_topic, partition_count, topics, write_config


def run_sync(config: Path, db: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mirror_core", "topics", "sync", "--config", str(config),
                           "--db-url", db, "--json", *extra], capture_output=True, text=True, cwd=REPO, timeout=120)


def describe(bootstrap: str, topic: str) -> dict[str, str]:
    client = admin(bootstrap)
    res = ConfigResource(ResourceType.TOPIC, topic)
    return {k: e.value for k, e in client.describe_configs([res])[res].result(10).items()}


def explicit(bootstrap: str, topic: str) -> set[str]:
    """Config names set on the topic itself (not broker defaults)."""
    from confluent_kafka.admin import ConfigSource

    client = admin(bootstrap)
    res = ConfigResource(ResourceType.TOPIC, topic)
    entries = client.describe_configs([res])[res].result(10)
    return {k for k, e in entries.items() if e.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value}


def test_topic_config_sync_end_to_end(dc1, dc2, name, tmp_path: Path) -> None:
    a, b = f"{name}.accounts", f"{name}.ledger"
    create_topic(dc1, a, 3, {"retention.ms": "123456789", "cleanup.policy": "compact"})
    create_topic(dc1, b, 2, {"max.message.bytes": "2000000", "min.insync.replicas": "1"})
    src = admin(dc1)
    acls = [AclBinding(ResourceType.TOPIC, a, ResourcePatternType.LITERAL, f"User:{who}", "*", op,
                       AclPermissionType.ALLOW)
            for who, op in (("alice", AclOperation.READ), ("bob", AclOperation.WRITE), ("carol", AclOperation.ALL))]
    for fut in src.create_acls(acls).values():
        fut.result(10)
    config = write_config(tmp_path / "mm2.properties", {"dc1": dc1, "dc2": dc2},
                          ["dc1->dc2.enabled = true", f"dc1->dc2.topics = {name}.*"])
    db = f"sqlite:///{tmp_path / 'state.db'}"

    # Dry run: reports everything, changes nothing.
    dry = run_sync(config, db, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    kinds = {(c["topic"], c["kind"]) for r in json.loads(dry.stdout) for c in r["changes"]}
    assert {(f"dc1.{a}", "created"), (f"dc1.{b}", "created"), (f"dc1.{a}", "acl")} <= kinds
    assert f"dc1.{a}" not in topics(dc2)
    store = StateStore(db)
    assert {d.action for d in store.recent_drift("dc1->dc2")} == {"proposed"}

    # Real run: topics identical (partitions, explicitly set configs minus excluded ones), ACLs read-only.
    applied = run_sync(config, db)
    assert applied.returncode == 0, applied.stderr
    assert partition_count(dc2, f"dc1.{a}") == 3 and partition_count(dc2, f"dc1.{b}") == 2
    ra, rb = describe(dc2, f"dc1.{a}"), describe(dc2, f"dc1.{b}")
    assert ra["retention.ms"] == "123456789" and ra["cleanup.policy"] == "compact"
    assert rb["max.message.bytes"] == "2000000"
    assert "min.insync.replicas" not in explicit(dc2, f"dc1.{b}")  # excluded by config.properties.exclude
    remote_acls = {(e.principal, e.operation, e.permission) for e in topic_acls(admin(dc2), f"dc1.{a}")}
    assert remote_acls == {("User:alice", AclOperation.READ, AclPermissionType.ALLOW),
                           ("User:carol", AclOperation.READ, AclPermissionType.ALLOW)}  # never WRITE
    assert run_sync(config, db).stdout.count('"kind"') == 0  # idempotent: nothing left to do

    # A config change and a partition increase on the source are applied on the next run.
    alter_topic(dc1, a, {"retention.ms": "999999"})
    src.create_partitions([NewPartitions(b, 5)])[b].result(10)
    again = run_sync(config, db)
    assert again.returncode == 0
    assert describe(dc2, f"dc1.{a}")["retention.ms"] == "999999" and partition_count(dc2, f"dc1.{b}") == 5
    applied_rows = [d for d in store.recent_drift("dc1->dc2", limit=200) if d.action == "applied"]
    assert {(d.topic, d.kind) for d in applied_rows} >= {(f"dc1.{a}", "config"), (f"dc1.{b}", "partitions")}

    # A remote topic with MORE partitions than its source: reported, refused, the run fails loudly.
    c = f"{name}.odd"
    create_topic(dc1, c, 2)
    create_topic(dc2, f"dc1.{c}", 4)
    bad = run_sync(config, db)
    assert bad.returncode == 1 and f"dc1.{c}" in bad.stderr and "never decreased" in bad.stderr
    assert partition_count(dc2, f"dc1.{c}") == 4
    refused = [d for d in store.recent_drift("dc1->dc2") if d.action == "refused"]
    assert refused and refused[0].topic == f"dc1.{c}" and refused[0].kind == "target-has-more-partitions"
    assert store.sync_runs("dc1->dc2")[0].status == "failed"


def test_override_default_on_source_is_reset_on_target(dc1, dc2, name, tmp_path: Path) -> None:
    """KIP-894: a config set on the remote topic but default on the source is drift; applying it
    deletes the override (the target's default applies). Excluded properties are never touched."""
    t, remote = f"{name}.cfg", f"dc1.{name}.cfg"
    create_topic(dc1, t, 1, {"retention.ms": "3600000", "max.message.bytes": "2000000"})
    config = write_config(tmp_path / "mm2.properties", {"dc1": dc1, "dc2": dc2},
                          ["dc1->dc2.enabled = true", f"dc1->dc2.topics = {name}.*"])
    db = f"sqlite:///{tmp_path / 'state.db'}"
    assert run_sync(config, db).returncode == 0
    assert explicit(dc2, remote) == {"retention.ms", "max.message.bytes"}

    alter_topic(dc1, t, {"retention.ms": None})  # removed on the source
    alter_topic(dc2, remote, {"segment.ms": "7200000", "min.insync.replicas": "1"})  # set on the target only

    dry = run_sync(config, db, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    changes = [c for r in json.loads(dry.stdout) for c in r["changes"]]
    assert changes == [{"kind": "config", "topic": remote,
                        "detail": "retention.ms: 3600000 -> (default), segment.ms: 7200000 -> (default)"}]
    assert explicit(dc2, remote) == {"retention.ms", "max.message.bytes", "segment.ms", "min.insync.replicas"}

    applied = run_sync(config, db)
    assert applied.returncode == 0, applied.stderr
    assert [c["detail"] for r in json.loads(applied.stdout) for c in r["changes"]] == [changes[0]["detail"]]
    # min.insync.replicas is in config.properties.exclude by default: the target's own setting stays.
    assert explicit(dc2, remote) == {"max.message.bytes", "min.insync.replicas"}
    assert describe(dc2, remote)["retention.ms"] == describe(dc1, t)["retention.ms"]
    assert json.loads(run_sync(config, db).stdout)[0]["changes"] == []  # idempotent
    rows = StateStore(db).recent_drift("dc1->dc2", limit=50)
    resets = [(d.kind, d.action) for d in rows if "(default)" in d.detail]
    assert resets == [("config", "applied"), ("config", "proposed")]


def test_deny_acls_are_copied_unchanged(dc1, dc2, name, tmp_path: Path) -> None:
    """MM2 narrows only ALLOW ALL (to READ) and never copies ALLOW WRITE: a DENY is safe to copy as
    it is, DENY ALL included — except DENY WRITE: who writes a remote topic is not the source's
    business (a cutover's DENY WRITE on the old source would block applications on the new one)."""
    t, remote = f"{name}.guarded", f"dc1.{name}.guarded"
    create_topic(dc1, t, 1)
    src = admin(dc1)
    allow, deny = AclPermissionType.ALLOW, AclPermissionType.DENY
    entries = [("alice", AclOperation.ALL, allow), ("mallory", AclOperation.ALL, deny),
               ("eve", AclOperation.WRITE, deny), ("bob", AclOperation.WRITE, allow),
               ("carol", AclOperation.DESCRIBE, deny)]
    bindings = [AclBinding(ResourceType.TOPIC, t, ResourcePatternType.LITERAL, f"User:{who}", "*", op, perm)
                for who, op, perm in entries]
    for fut in src.create_acls(bindings).values():
        fut.result(10)
    config = write_config(tmp_path / "mm2.properties", {"dc1": dc1, "dc2": dc2},
                          ["dc1->dc2.enabled = true", f"dc1->dc2.topics = {name}.*"])
    db = f"sqlite:///{tmp_path / 'state.db'}"
    result = run_sync(config, db)
    assert result.returncode == 0, result.stderr
    remote_acls = {(e.principal, e.operation, e.permission) for e in topic_acls(admin(dc2), remote)}
    assert remote_acls == {("User:alice", AclOperation.READ, AclPermissionType.ALLOW),
                           ("User:mallory", AclOperation.ALL, AclPermissionType.DENY),
                           ("User:carol", AclOperation.DESCRIBE, AclPermissionType.DENY)}
    assert json.loads(run_sync(config, db).stdout)[0]["changes"] == []  # idempotent


def test_sync_with_the_source_down_says_so_in_one_line(dc2, name, tmp_path: Path) -> None:
    down = f"127.0.0.1:{free_port()}"  # nothing listens there: the source cluster is down
    config = write_config(tmp_path / "mm2.properties", {"dc1": down, "dc2": dc2},
                          ["dc1->dc2.enabled = true", f"dc1->dc2.topics = {name}.*"])
    db = f"sqlite:///{tmp_path / 'state.db'}"
    proc = run_sync(config, db)
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [
        "mirror-core: topics sync: flow dc1->dc2: source cluster dc1 is unreachable (Failed to get metadata: Local: "
        "Broker transport failure); check that the cluster is up and reachable from here, then sync again (nothing "
        "was changed)"], proc.stderr
    run = StateStore(db).sync_runs("dc1->dc2")[0]  # the failed run is recorded with its reason
    assert run.status == "failed" and "source cluster dc1 is unreachable" in run.summary["error"]
