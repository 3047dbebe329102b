"""Replication fidelity against real brokers: every record identical, same partition, topics in shape."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from confluent_kafka.admin import ConfigResource, ResourceType

from tests.integration.conftest import flow_lines
from tests.kafka_harness import (
    REPO,
    admin,
    alter_topic,
    assert_same_records,
    create_topic,
    end_offsets,
    partition_count,
    produce_sequence,
    producer,
    read_all,
    topics,
    wait_until,
)


def topic_config(bootstrap: str, topic: str) -> dict[str, str]:
    res = ConfigResource(ResourceType.TOPIC, topic)
    client = admin(bootstrap)
    entries = client.describe_configs([res])[res].result(10)
    return {k: e.value for k, e in entries.items()}


def caught_up(dc1: str, dc2: str, pairs: dict[str, str]) -> bool:
    for src, dst in pairs.items():
        if dst not in topics(dc2) or end_offsets(dc2, dst) != end_offsets(dc1, src):
            return False
    return True


def test_every_record_is_replicated_identically(dc1, dc2, name, start_mirror):
    a, b, skipped = f"{name}.orders", f"{name}.payments", f"{name}.scratch"
    create_topic(dc1, a, 3, {"retention.ms": "3600000", "cleanup.policy": "delete"})
    create_topic(dc1, b, 2, {"max.message.bytes": "2000000", "segment.bytes": "10485760"})
    create_topic(dc1, skipped, 1)
    p = producer(dc1)
    base_ts = int(time.time() * 1000) - 600_000  # explicit, recent (retention.ms is 1 h on this topic)
    for i in range(3000):
        topic, parts = (a, 3) if i % 2 else (b, 2)
        headers = [("seq", str(i).encode()), ("dup", b"1"), ("dup", b"2"), ("empty", None)] if i % 5 else None
        key = None if i % 7 == 0 else f"key-{i}".encode()
        value = None if i % 11 == 0 else (f"value-{i}-".encode() + bytes(range(256)) * (i % 4))
        p.produce(topic, value=value, key=key, partition=i % parts, timestamp=base_ts + i, headers=headers)
        p.produce(skipped, value=b"never", partition=0)
    assert p.flush(30) == 0

    start_mirror(flow_lines(name, "dc1->dc2.topics.exclude = .*\\.scratch"))
    pairs = {a: f"dc1.{a}", b: f"dc1.{b}"}
    wait_until(lambda: caught_up(dc1, dc2, pairs), 90, what="remote topics caught up")

    for src, dst in pairs.items():
        assert partition_count(dc2, dst) == partition_count(dc1, src)
        assert_same_records(dc1, dc2, src, dst)
    # Topic configs explicitly set on the source are copied; excluded topics never appear.
    assert topic_config(dc2, f"dc1.{a}")["retention.ms"] == "3600000"
    assert topic_config(dc2, f"dc1.{b}")["max.message.bytes"] == "2000000"
    assert f"dc1.{skipped}" not in topics(dc2)


def test_new_topic_partition_increase_and_config_change_propagate(dc1, dc2, name, start_mirror):
    first = f"{name}.first"
    create_topic(dc1, first, 2)
    produce_sequence(dc1, first, 2, 200)
    start_mirror(flow_lines(name))
    wait_until(lambda: caught_up(dc1, dc2, {first: f"dc1.{first}"}), 60, what="first topic replicated")

    # A topic created mid-run is picked up within the refresh interval, without a restart.
    late = f"{name}.late"
    create_topic(dc1, late, 3)
    produce_sequence(dc1, late, 3, 300)
    wait_until(lambda: caught_up(dc1, dc2, {late: f"dc1.{late}"}), 60, what="late topic replicated")

    # Partition increase on the source: the remote grows, and records in new partitions keep their number.
    from confluent_kafka.admin import NewPartitions

    client = admin(dc1)
    client.create_partitions([NewPartitions(first, 4)])[first].result(10)
    produce_sequence(dc1, first, 4, 400, start=1000)
    wait_until(lambda: partition_count(dc2, f"dc1.{first}") == 4, 60, what="remote partitions grown to 4")
    wait_until(lambda: caught_up(dc1, dc2, {first: f"dc1.{first}"}), 90, what="new partitions replicated")
    assert {r.partition for r in read_all(dc2, f"dc1.{first}")} == {0, 1, 2, 3}

    # Config change on the source propagates.
    alter_topic(dc1, first, {"retention.ms": "7200000"})
    wait_until(lambda: topic_config(dc2, f"dc1.{first}")["retention.ms"] == "7200000", 60,
               what="retention.ms synced")


def test_status_command_reports_positions_and_lag(dc1, dc2, name, start_mirror, tmp_path):
    t = f"{name}.s"
    create_topic(dc1, t, 2)
    produce_sequence(dc1, t, 2, 500)
    m = start_mirror(flow_lines(name))
    wait_until(lambda: caught_up(dc1, dc2, {t: f"dc1.{t}"}), 60, what="replicated")
    wait_until(lambda: all(p["lag"] == 0 for p in m.partitions() if p["topic"] == t)
               and any(p["topic"] == t for p in m.partitions()), 30, what="/status lag 0")
    out = subprocess.run([sys.executable, "-m", "mirror_core", "status", "--config", str(m.config), "--json"],
                         capture_output=True, text=True, cwd=REPO, timeout=60)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    rows = [p for f in data["flows"] for p in f["partitions"] if p["topic"] == t]
    assert sorted(r["partition"] for r in rows) == [0, 1]
    for r in rows:
        assert r["position"] == r["source_end"] == r["remote_end"] == 250
        assert r["lag"] == 0
    table = subprocess.run([sys.executable, "-m", "mirror_core", "status", "--config", str(m.config)],
                           capture_output=True, text=True, cwd=REPO, timeout=60)
    assert t in table.stdout and "lag" in table.stdout

    # Metrics and health.
    text = m.metrics()
    assert 'mirror_records_replicated_total{flow="dc1->dc2"' in text
    assert "mirror_replication_latency_seconds_count" in text
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{m.port}/healthz", timeout=5) as r:
        assert r.status == 200 and json.load(r)["healthy"] is True
    assert m.stop() == 0


@pytest.mark.parametrize("path", ["records", "batches"])
def test_latency_histogram_counts_every_record_at_its_own_age(dc1, dc2, name, start_mirror, path):
    """Records 3 s and 8 s old (source CreateTime set by the producer), interleaved in one partition so
    every produce batch mixes them: each is counted in the bucket of its own age, none is left out. On batches,
    which reads no record, each is counted at its batch's newest timestamp: all in the 3 s records' bucket."""
    t = f"{name}.aged"
    create_topic(dc1, t, 1)
    m = start_mirror(flow_lines(name, f"replication.data.path = {path}"))
    wait_until(lambda: any(p["topic"] == t for p in m.partitions()), 60, what="the mirror owns the topic")
    now_ms = int(time.time() * 1000)
    p = producer(dc1)
    for i in range(400):
        p.produce(t, value=b"v%d" % i, partition=0, timestamp=now_ms - (3000 if i % 2 else 8000))
    assert p.flush(30) == 0
    wait_until(lambda: end_offsets(dc2, f"dc1.{t}") == {0: 400}, 60, what="replicated", interval=0.05)
    delay = time.time() - now_ms / 1000  # every acknowledgement came before this

    def bucket(le: str) -> float | None:
        """None until the mirror has a series for the topic (a record can be readable on the target before
        the mirror has handled its delivery report)."""
        line = f'mirror_replication_latency_seconds_bucket{{flow="dc1->dc2",le="{le}",topic="{t}"}} '
        found = next((x for x in m.metrics().splitlines() if x.startswith(line)), None)
        return None if found is None else float(found.rsplit(" ", 1)[1])

    wait_until(lambda: bucket("+Inf") == 400, 30, what="every record observed")
    assert bucket("2.5") == 0, "no record is younger than 3 s"
    if path == "batches":
        assert delay >= 2 or bucket("5.0") == 400, "each at its batch's newest timestamp (a 3 s record's)"
        m.stop()
        return
    assert bucket("5.0") <= 200, "an 8 s record counted as younger than 5 s"
    if delay < 2:  # the 3 s records were at most 5 s old when acknowledged, the 8 s ones at most 10 s
        assert bucket("5.0") == 200 and bucket("10.0") == 400
    m.stop()


def test_config_override_removed_on_source_is_reset_on_target(dc1, dc2, name, start_mirror):
    """KIP-894: a config set on the remote topic but default on the source goes back to the target's
    default (incremental DELETE); excluded properties set on the target are left alone."""
    from confluent_kafka.admin import ConfigSource

    def explicit(bootstrap: str, topic: str) -> dict[str, str]:
        res = ConfigResource(ResourceType.TOPIC, topic)
        client = admin(bootstrap)
        entries = client.describe_configs([res])[res].result(10)
        return {k: e.value for k, e in entries.items() if e.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value}

    t, remote = f"{name}.reset", f"dc1.{name}.reset"
    create_topic(dc1, t, 2, {"retention.ms": "3600000", "cleanup.policy": "compact,delete"})
    produce_sequence(dc1, t, 2, 100)
    start_mirror(flow_lines(name))
    wait_until(lambda: caught_up(dc1, dc2, {t: remote}), 60, what="replicated")
    assert explicit(dc2, remote) == {"retention.ms": "3600000", "cleanup.policy": "compact,delete"}

    # Set on the target only: segment.ms is drift, min.insync.replicas is excluded by default.
    alter_topic(dc2, remote, {"segment.ms": "7200000", "min.insync.replicas": "1"})
    alter_topic(dc1, t, {"retention.ms": None})  # the override is removed on the source
    wait_until(lambda: explicit(dc2, remote) == {"cleanup.policy": "compact,delete", "min.insync.replicas": "1"},
               60, what="retention.ms and segment.ms reset on the target, min.insync.replicas kept")
    assert topic_config(dc2, remote)["retention.ms"] == topic_config(dc1, t)["retention.ms"] == "604800000"
    produce_sequence(dc1, t, 2, 20, start=100)
    wait_until(lambda: caught_up(dc1, dc2, {t: remote}), 60, what="still replicating")
