"""Active-active with both replication policies (no loops), and hub-and-spoke aggregation."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mirror_core.devcluster.local_cluster import LocalCluster
from mirror_core.replication.heartbeats import decode_key, decode_value
from tests.integration.conftest import flow_lines
from tests.kafka_harness import (
    create_topic,
    end_offsets,
    new_cluster,
    produce_sequence,
    producer,
    read_all,
    topics,
    wait_until,
    write_config,
)


def produce_labelled(bootstrap: str, topic: str, label: str, count: int) -> None:
    p = producer(bootstrap)
    for i in range(count):
        p.produce(topic, value=f"{label}-{i}".encode(), partition=i % 2)
    assert p.flush(30) == 0


def stable_total(bootstrap: str, topic: str, expected: int, settle: float = 4.0) -> bool:
    """The topic holds exactly ``expected`` records and keeps holding that many (no loop)."""
    if sum(end_offsets(bootstrap, topic).values()) != expected:
        return False
    time.sleep(settle)
    return sum(end_offsets(bootstrap, topic).values()) == expected


def test_active_active_default_policy_no_loop(dc1, dc2, name, start_mirror):
    t, late = f"{name}.aa", f"{name}.late"
    create_topic(dc1, t, 2)
    create_topic(dc2, t, 2)
    produce_labelled(dc1, t, "dc1", 100)
    produce_labelled(dc2, t, "dc2", 50)
    # Both filters accept every topic containing the test's name, remote ones included (dc1.<name>.aa on
    # dc2, dc2.<name>.aa on dc1): only the policy's cycle check keeps them from coming back.
    lines = flow_lines(name, flow="dc1->dc2") + flow_lines(name, flow="dc2->dc1")[:3]
    wide = [line.replace(f".topics = {name}.*", f".topics = .*{name}.*") for line in lines]
    assert sum(line.endswith(f".topics = .*{name}.*") for line in wide) == 2
    start_mirror(wide)
    wait_until(lambda: stable_total(dc2, f"dc1.{t}", 100), 60, what="dc1 data on dc2")
    wait_until(lambda: stable_total(dc1, f"dc2.{t}", 50), 60, what="dc2 data on dc1")
    # A topic created now is discovered by a refresh that also sees the remote topics above: once it is
    # replicated both ways, each flow has looked at the other's remote topic and rejected it.
    for bootstrap, label in ((dc1, "dc1"), (dc2, "dc2")):
        create_topic(bootstrap, late, 1)
        produce_labelled(bootstrap, late, f"{label}-late", 1)
    wait_until(lambda: stable_total(dc2, f"dc1.{late}", 1) and stable_total(dc1, f"dc2.{late}", 1), 60,
               what="topics created later replicated both ways")
    # No dc2.dc1.* on dc1, no dc1.dc2.* on dc2: exactly the local and the remote topics, each record once.
    assert {x for x in topics(dc1) if name in x} == {t, late, f"dc2.{t}", f"dc2.{late}"}
    assert {x for x in topics(dc2) if name in x} == {t, late, f"dc1.{t}", f"dc1.{late}"}
    assert sum(end_offsets(dc1, t).values()) == 100 and sum(end_offsets(dc2, t).values()) == 50
    assert stable_total(dc2, f"dc1.{t}", 100) and stable_total(dc1, f"dc2.{t}", 50)
    assert sorted(r.value for r in read_all(dc2, f"dc1.{t}")) == sorted(f"dc1-{i}".encode() for i in range(100))
    assert sorted(r.value for r in read_all(dc1, f"dc2.{t}")) == sorted(f"dc2-{i}".encode() for i in range(50))


def test_active_active_identity_policy_no_loop(dc1, dc2, name, start_mirror):
    t = f"{name}.orders"
    create_topic(dc1, t, 2)
    create_topic(dc2, t, 2)
    produce_labelled(dc1, t, "dc1", 100)
    produce_labelled(dc2, t, "dc2", 60)
    lines = flow_lines(name, "replication.policy.class = IdentityReplicationPolicy", flow="dc1->dc2")
    lines += flow_lines(name, flow="dc2->dc1")[:3]
    m = start_mirror(lines)
    # While the mirror runs, local producers keep writing into the same (shared) topics.
    produce_labelled(dc1, t, "dc1-live", 40)
    produce_labelled(dc2, t, "dc2-live", 40)
    wait_until(lambda: stable_total(dc1, t, 240), 90, what="dc1 holds its own and dc2's records once")
    wait_until(lambda: stable_total(dc2, t, 240), 90, what="dc2 holds its own and dc1's records once")
    for bootstrap in (dc1, dc2):
        values = [r.value for r in read_all(bootstrap, t)]
        assert len(values) == len(set(values)) == 240  # each record exactly once: no loop, no duplicate
    mirrored = [r for r in read_all(dc2, t) if r.value.startswith(b"dc1")]
    assert all(dict(r.headers)["mirror-core.provenance"] == b"dc1" for r in mirrored)
    assert not [x for x in topics(dc2) if x.startswith(f"dc1.{name}")]
    assert m.alive()


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    c = new_cluster("hub", tmp_path_factory.mktemp("hub"))
    c.start()
    yield c
    c.stop()


def test_hub_and_spoke_aggregation_with_heartbeats(dc1, dc2, hub, name, start_mirror, tmp_path: Path):
    t = f"{name}.events"
    create_topic(dc1, t, 2)
    create_topic(dc2, t, 3)
    produce_sequence(dc1, t, 2, 300)
    produce_sequence(dc2, t, 3, 200)
    lines = []
    for spoke in ("dc1", "dc2"):
        flow = f"{spoke}->hub"
        lines += [f"{flow}.enabled = true", f"{flow}.topics = {name}.*",
                  f"{flow}.consumer.group.id = {name}-{spoke}-hub"]
    lines += ["refresh.topics.interval.seconds = 2", "offset.flush.interval.ms = 200",
              "emit.heartbeats.enabled = true", "emit.heartbeats.interval.seconds = 0.5"]
    config = write_config(tmp_path / "hub.properties",
                          {"dc1": dc1, "dc2": dc2, "hub": hub.bootstrap}, lines)
    m = start_mirror(lines, config=config)
    wait_until(lambda: end_offsets(hub.bootstrap, f"dc1.{t}") == end_offsets(dc1, t)
               and end_offsets(hub.bootstrap, f"dc2.{t}") == end_offsets(dc2, t), 90, what="aggregated on hub")
    # Heartbeats in MirrorMaker 2's layout reach the hub through each flow.
    wait_until(lambda: {"dc1.heartbeats", "dc2.heartbeats"} <= topics(hub.bootstrap), 60, what="heartbeats")
    wait_until(lambda: read_all(hub.bootstrap, "dc1.heartbeats"), 30, what="heartbeat records")
    beats = read_all(hub.bootstrap, "dc1.heartbeats")
    assert ("dc1", "hub") in {decode_key(r.key) for r in beats}
    assert abs(decode_value(beats[-1].value) - time.time() * 1000) < 120_000
    wait_until(lambda: 'mirror_heartbeat_age_seconds{flow="dc1->hub"}' in m.metrics(), 30, what="heartbeat metric")
