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
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    ResourcePatternType,
    ResourceType,
)

from mirror_core.replication.acls import topic_acls
from mirror_core.state.store import StateStore
from tests.kafka_harness import REPO, admin, create_topic, partition_count, topics, write_config


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
    src.incremental_alter_configs([ConfigResource(ResourceType.TOPIC, a, incremental_configs=[
        ConfigEntry("retention.ms", "999999", incremental_operation=AlterConfigOpType.SET)])])[
        ConfigResource(ResourceType.TOPIC, a)].result(10)
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
