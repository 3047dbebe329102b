"""Active-active with both replication policies (no loops), and hub-and-spoke aggregation."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mirror_core.devcluster.local_cluster import LocalCluster
from mirror_core.replication.heartbeats import decode_key, decode_value
from mirror_core.replication.slots import slot_topic
from mirror_core.stores.producer_ids import PRODUCER_IDS_TOPIC
from tests.integration.conftest import DATA_PATHS, data_path, flow_lines, ran_on
from tests.kafka_harness import (
    MirrorProcess,
    create_topic,
    end_offsets,
    new_cluster,
    produce_sequence,
    producer,
    producer_ids,
    read_all,
    slot_topic_of,
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


@DATA_PATHS
def test_active_active_default_policy_no_loop(dc1, dc2, name, start_mirror, path):
    t, late = f"{name}.aa", f"{name}.late"
    create_topic(dc1, t, 2)
    create_topic(dc2, t, 2)
    produce_labelled(dc1, t, "dc1", 100)
    produce_labelled(dc2, t, "dc2", 50)
    # Both filters accept every topic containing the test's name, remote ones included (dc1.<name>.aa on
    # dc2, dc2.<name>.aa on dc1): only the policy's cycle check keeps them from coming back.
    lines = flow_lines(name, data_path(path), flow="dc1->dc2") + flow_lines(name, flow="dc2->dc1")[:3]
    wide = [line.replace(f".topics = {name}.*", f".topics = .*{name}.*") for line in lines]
    assert sum(line.endswith(f".topics = .*{name}.*") for line in wide) == 2
    m = start_mirror(wide)
    assert wait_until(lambda: ran_on(m.log(), path) and ran_on(m.log(), path, "dc2->dc1"), 30,
                      what="both flows on the path asked")
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
    # The records path's provenance header (whole batches: test_active_active_identity_policy_on_batches_...).
    lines = flow_lines(name, "replication.policy.class = IdentityReplicationPolicy", "replication.data.path = records",
                       flow="dc1->dc2")
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


IDENTITY = "replication.policy.class = IdentityReplicationPolicy"


def caught_up(mirrors: list[MirrorProcess], topic: str, flows: int) -> bool:
    """Every flow's partitions of ``topic`` are reported by the running mirrors with no lag: each has read its
    source up to the end (the batches it skipped included)."""
    parts = [p for m in mirrors for p in m.partitions() if p["topic"] == topic]
    return len(parts) == 2 * flows and all(p["lag"] == 0 for p in parts)


def registered(bootstrap: str) -> dict[int, str]:
    """The producer ids recorded on a cluster (stores/producer_ids.py) and the source each one copies from."""
    return {int.from_bytes(r.key, "big", signed=True): json.loads(r.value)["source"]
            for r in read_all(bootstrap, PRODUCER_IDS_TOPIC) if r.value is not None}


@pytest.mark.parametrize("topology", ["one process", "a process per direction"])
def test_active_active_identity_policy_on_batches_no_loop_across_restarts(dc1, dc2, clusters, name, start_mirror,
                                                                           topology):
    """Both directions copy whole batches with the identity policy: each recognises the batches the other wrote by
    their producer ids, recorded on the cluster they land on, and skips them; restarts (new producer ids) too."""
    t = f"{name}.orders"
    create_topic(dc1, t, 2)
    create_topic(dc2, t, 2)
    produce_labelled(dc1, t, "dc1", 100)
    produce_labelled(dc2, t, "dc2", 60)
    forward = flow_lines(name, IDENTITY, "replication.data.path = batches", flow="dc1->dc2")
    reverse = flow_lines(name, IDENTITY, "replication.data.path = batches", flow="dc2->dc1")[:3]
    specs = [forward + reverse] if topology == "one process" else [forward, reverse[:3] + forward[3:]]
    started = [start_mirror(lines, name=f"m{i}") for i, lines in enumerate(specs)]
    total = 160
    for round_ in range(3):
        # While the mirrors run, local producers keep writing into the same (shared) topics.
        produce_labelled(dc1, t, f"dc1-live{round_}", 40)
        produce_labelled(dc2, t, f"dc2-live{round_}", 40)
        total += 80
        wait_until(lambda ms=started, n=total: caught_up(ms, t, 2) and sum(end_offsets(dc1, t).values()) == n
                   and sum(end_offsets(dc2, t).values()) == n, 90, what=f"round {round_}: both sides hold all")
        for m in started:
            assert "data path: batches" in m.log()
        # Nothing comes back: after both flows read past everything, the ends stay put.
        assert stable_total(dc1, t, total) and stable_total(dc2, t, total)
        assert caught_up(started, t, 2)
        for bootstrap in (dc1, dc2):
            values = [r.value for r in read_all(bootstrap, t)]
            assert len(values) == len(set(values)) == total  # each record exactly once: no loop, no duplicate
            # Copied whole: no provenance header on either side.
            assert not [r for r in read_all(bootstrap, t) if "mirror-core.provenance" in dict(r.headers or [])]
        # Each restart gives each flow's sender a new producer id, recorded before its first batch.
        assert sorted(registered(dc2).values()).count("dc1") >= round_ + 1
        assert sorted(registered(dc1).values()).count("dc2") >= round_ + 1
        for m in started:  # a graceful restart: progress committed, nothing copied twice
            assert m.stop() == 0, m.log()[-3000:]
        started = [start_mirror(lines, config=m.config, name=f"m{i}-again") for i, (lines, m)
                   in enumerate(zip(specs, started, strict=True))]


def held(bootstrap: str, topic: str, expected: int, settle: float = 4.0) -> bool:
    """The topic holds exactly ``expected`` committed records, and still does after ``settle`` s (no loop). Records,
    not offsets: transaction markers take offsets."""
    if len(read_all(bootstrap, topic)) != expected:
        return False
    time.sleep(settle)
    return len(read_all(bootstrap, topic)) == expected


def test_active_active_identity_policy_exactly_once_on_batches_no_loop(dc1, dc2, clusters, name, start_mirror):
    """Exactly-once both ways on whole batches with the identity policy: each slot's transactional producer id is
    recorded on the cluster it writes before its first batch, so the reverse flow skips the batches of those
    transactions; a SIGKILL between rounds (the slots taken again) copies nothing twice and nothing back."""
    t = f"{name}.orders"
    slot_topic_of(dc2, 2)
    slot_topic_of(dc1, 2, slot_topic("dc2", "dc1"))
    create_topic(dc1, t, 2)
    create_topic(dc2, t, 2)
    produce_labelled(dc1, t, "dc1", 100)
    produce_labelled(dc2, t, "dc2", 60)
    eos = ["exactly.once.enabled = true", "exactly.once.slots = 2"] + [
        f"{c}.consumer.{k}" for c in ("dc1", "dc2") for k in ("session.timeout.ms = 6000",
                                                             "heartbeat.interval.ms = 1000")]
    lines = flow_lines(name, IDENTITY, "replication.data.path = batches", *eos, flow="dc1->dc2")
    lines += flow_lines(name, flow="dc2->dc1")[:3]
    m = start_mirror(lines)
    total = 160
    for round_ in range(2):
        produce_labelled(dc1, t, f"dc1-live{round_}", 40)
        produce_labelled(dc2, t, f"dc2-live{round_}", 40)
        total += 80
        wait_until(lambda n=total, ms=[m]: caught_up(ms, t, 2) and held(dc1, t, n, 0) and held(dc2, t, n, 0), 120,
                   what=f"round {round_}: both sides hold all")
        assert ran_on(m.log(), "batches") and ran_on(m.log(), "batches", "dc2->dc1")
        assert "took exactly-once slot" in m.log()  # the precondition: transactions, each slot's producer
        assert held(dc1, t, total) and held(dc2, t, total)  # nothing comes back
        for bootstrap in (dc1, dc2):
            values = [r.value for r in read_all(bootstrap, t)]
            assert len(values) == len(set(values)) == total  # each record exactly once: no loop, no duplicate
        # The producer ids of the copies' batches (each slot's) were recorded on the cluster they landed on, for the
        # flow that wrote them (the registry is the session's: other tests' ids are there too)
        for side, source in (("dc2", "dc1"), ("dc1", "dc2")):
            written = {pid for pids in producer_ids(clusters[side], t).values() for pid in pids}
            assert {pid for pid, src in registered(clusters[side].bootstrap).items() if src == source} & written
        if round_ == 0:
            m.kill()  # mid-stream: its slots are taken again by the next process (fencing the killed one's)
            m = start_mirror(lines, config=m.config, name="again")
    assert m.stop() == 0, m.log()[-3000:]


def test_active_active_identity_policy_one_direction_on_records_the_other_on_batches(dc1, dc2, name, start_mirror):
    """dc1->dc2 on records (provenance header, a producer id librdkafka does not say), dc2->dc1 on batches: the
    batches flow skips the records flow's copies by their header, and tags its own copies' records with it (a
    rewrite of each batch) because the records flow knows a record's provenance only by it."""
    t = f"{name}.orders"
    create_topic(dc1, t, 2)
    create_topic(dc2, t, 2)
    produce_labelled(dc1, t, "dc1", 100)
    produce_labelled(dc2, t, "dc2", 60)
    lines = flow_lines(name, IDENTITY, "dc1->dc2.replication.data.path = records",
                       "dc2->dc1.replication.data.path = batches", flow="dc1->dc2")
    lines += flow_lines(name, flow="dc2->dc1")[:3]
    started = [start_mirror(lines)]
    total = 160
    for round_ in range(2):
        produce_labelled(dc1, t, f"dc1-live{round_}", 40)
        produce_labelled(dc2, t, f"dc2-live{round_}", 40)
        total += 80
        wait_until(lambda ms=started, n=total: caught_up(ms, t, 2) and sum(end_offsets(dc1, t).values()) == n
                   and sum(end_offsets(dc2, t).values()) == n, 90, what=f"round {round_}: both sides hold all")
        said = {line.split(": replicating")[0].split("flow ")[-1]: line for line in started[0].log().splitlines()
                if ": replicating (" in line}
        assert "data path: records" in said["dc1->dc2"] and "data path: batches" in said["dc2->dc1"]
        assert stable_total(dc1, t, total) and stable_total(dc2, t, total)
        assert caught_up(started, t, 2)
        for bootstrap, other in ((dc1, b"dc2"), (dc2, b"dc1")):
            records = read_all(bootstrap, t)
            values = [r.value for r in records]
            assert len(values) == len(set(values)) == total  # each record exactly once: no loop, no duplicate
            # Each side's copies of the other's records carry the chain of where they came from.
            copies = [r for r in records if r.value is not None and r.value.startswith(other)]
            assert copies and all(dict(r.headers)["mirror-core.provenance"] == other for r in copies)
        assert started[0].stop() == 0, started[0].log()[-3000:]
        started = [start_mirror(lines, config=started[0].config, name="again")]
