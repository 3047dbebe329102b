"""The batches data path (replication.data.path = batches) as a flow runs it: whole source batches on the target,
the offset map exact at every position across offset gaps, nothing lost under kills and rebalances, and a batch the
target refuses pausing its partition in one line."""

from __future__ import annotations

import time

from tests.integration.conftest import flow_lines
from tests.integration.test_offsets import assert_exact_at_every_position, compacted_data, has_gaps, transactional_data
from tests.integration.test_resilience import BackgroundProducer, assert_complete_in_order
from tests.kafka_harness import (
    assert_same_records,
    create_topic,
    end_offsets,
    metric,
    owns_and_copies,
    producer,
    read_all,
    stored_batches,
    wait_until,
    write_config,
)

BATCHES = "replication.data.path = batches"


def record_counts(cluster, topic: str) -> dict[int, list[int]]:  # type: ignore[no-untyped-def]
    """Per partition, the record count of each data batch the broker stored (control batches left out)."""
    out: dict[int, list[int]] = {}
    for partition, batch in stored_batches(cluster, topic):
        if not batch[22] & 0x20:
            out.setdefault(partition, []).append(int.from_bytes(batch[57:61], "big"))
    return out


def test_whole_batches_land_with_every_record_identical_and_the_offset_map_exact_across_gaps(
        clusters, dc1, dc2, name, start_mirror):  # type: ignore[no-untyped-def]
    plain, txn, compact, empty = f"{name}.plain", f"{name}.txn", f"{name}.compact", f"{name}.empty"
    create_topic(dc1, plain, 3)
    create_topic(dc1, empty, 1)  # nothing to fetch: its lag is known all the same (0)
    create_topic(dc1, txn, 2)
    create_topic(dc1, compact, 1, {"cleanup.policy": "compact", "segment.ms": "100",
                                   "min.cleanable.dirty.ratio": "0.001", "delete.retention.ms": "100"})
    p = producer(dc1, **{"linger.ms": 1000, "compression.type": "lz4"})
    base_ts = int(time.time() * 1000) - 60_000
    for i in range(3000):
        headers = [("seq", str(i).encode()), ("dup", b"1"), ("dup", b"2")] if i % 5 else None
        p.produce(plain, value=b"seq-%d-" % i + b"v" * (i % 300), key=None if i % 7 == 0 else b"k%d" % i,
                  partition=i % 3, timestamp=base_ts + i, headers=headers)
        if i % 97 == 96:
            p.flush(10)  # batches of 97 records over the 3 partitions: a size of the source's own
    assert p.flush(30) == 0
    transactional_data(dc1, txn, 2)
    compacted_data(dc1, compact)
    wait_until(lambda: has_gaps(dc1, compact), 90, interval=1, what="compaction to remove older values")

    m = start_mirror(flow_lines(name, BATCHES, "emit.checkpoints.enabled = false"))
    mine = (plain, txn, compact, empty)
    wait_until(lambda: len([p for p in m.partitions() if p["topic"] in mine]) == 7
               and all(p["lag"] == 0 for p in m.partitions() if p["topic"] in mine), 90, what="caught up")
    assert "data path: batches" in m.log()
    assert_same_records(dc1, dc2, plain, f"dc1.{plain}")  # key, value, headers, timestamp, partition, order
    # The precondition that this was the batch path: the target stores the source's batches, record for record
    # (the records path's producer cuts its own batches: one per consumed run).
    source_counts = record_counts(clusters["dc1"], plain)
    assert source_counts == record_counts(clusters["dc2"], f"dc1.{plain}")
    assert len(source_counts[0]) > 5
    checked = assert_exact_at_every_position(m, dc1, dc2, (txn, compact))
    assert checked > 50


def test_kills_and_a_second_process_joining_lose_nothing(dc1, dc2, name, start_mirror):  # type: ignore[no-untyped-def]
    t = f"{name}.load"
    create_topic(dc1, t, 6)
    lines = flow_lines(name, BATCHES)
    a = start_mirror(lines, name="a")
    with BackgroundProducer(dc1, t, 6):
        wait_until(lambda: owns_and_copies(a, t), 60, what="a copies")
        b = start_mirror(lines, config=a.config, name="b")

        def owned(m):  # type: ignore[no-untyped-def]
            return {p["partition"] for p in m.partitions() if p["topic"] == t}

        wait_until(lambda: owned(a) and owned(b) and len(owned(a) | owned(b)) == 6 and owns_and_copies(b, t), 90,
                   what="the joined process owns and copies a share")
        assert owns_and_copies(a, t)  # the victim owned partitions and copied since it got them
        a.kill()
        wait_until(lambda: len(owned(b)) == 6, 90, what="survivor owns every partition")
        time.sleep(2)
        assert b.stop() == 0, b.log()[-3000:]
        b = start_mirror(lines, config=a.config, name="b2")
        time.sleep(2)
    wait_until(lambda: sum(end_offsets(dc2, f"dc1.{t}").values()) >= sum(end_offsets(dc1, t).values())
               and len(owned(b)) == 6 and all(p["lag"] == 0 for p in b.partitions() if p["topic"] == t), 120,
               what="caught up after the kill and the restart")
    dups = assert_complete_in_order(read_all(dc1, t), read_all(dc2, f"dc1.{t}"))
    print(f"duplicates after a SIGKILL and a graceful restart on the batch path: {dups}")


def test_a_batch_the_target_refuses_pauses_its_partition_naming_the_batch(dc1, dc2, name, start_mirror):  # type: ignore[no-untyped-def]
    t = f"{name}.big"
    create_topic(dc1, t, 2, {"max.message.bytes": "3000000"})
    p = producer(dc1, **{"message.max.bytes": 3_000_000, "batch.size": 3_000_000, "linger.ms": 500})
    for i in range(10):
        p.produce(t, value=b"seq-%d" % i, partition=0)
        p.produce(t, value=b"seq-%d" % i, partition=1)
    assert p.flush(30) == 0
    for i in range(10, 40):  # one batch of 30 records of 50 kB: 1.5 MB, larger than the remote topic takes
        p.produce(t, value=b"seq-%d-" % i + bytes(i % 256 for i in range(50_000)), partition=0)
    assert p.flush(30) == 0
    for i in range(40, 50):
        p.produce(t, value=b"seq-%d" % i, partition=0)
        p.produce(t, value=b"seq-%d" % i, partition=1)
    assert p.flush(30) == 0
    # The remote topic keeps the broker default max.message.bytes (1 MB): the big batch cannot land.
    m = start_mirror(flow_lines(name, BATCHES, "config.properties.exclude = max\\.message\\.bytes"))

    def state():  # type: ignore[no-untyped-def]
        return {p["partition"]: p for p in m.partitions() if p["topic"] == t}

    wait_until(lambda: state().get(0, {}).get("paused") and state().get(1, {}).get("lag") == 0, 90,
               what="partition 0 paused, partition 1 complete")
    paused = state()[0]
    assert "batch at offset 10 (30 records" in paused["paused"] and "max.message.bytes" in paused["paused"]
    assert paused["position"] == 10  # everything before the big batch is replicated, nothing after
    target = read_all(dc2, f"dc1.{t}")
    assert [r.value for r in target if r.partition == 0] == [b"seq-%d" % i for i in range(10)]
    assert len([r for r in target if r.partition == 1]) == 20
    assert m.log().count("batch at offset 10 (30 records") == 1


def test_a_flow_switches_data_path_with_a_restart_and_nothing_else(dc1, dc2, name, start_mirror):  # type: ignore[no-untyped-def]
    t = f"{name}.switch"
    create_topic(dc1, t, 2)
    quiet = "emit.checkpoints.enabled = false"
    records, batches = flow_lines(name, "replication.data.path = records", quiet), flow_lines(name, BATCHES, quiet)
    m = None
    for step, lines in enumerate((records, batches, records)):
        transactional_data(dc1, t, 2)  # each step copies what the last left, across markers and aborts
        m = start_mirror(lines, name=f"step{step}")  # a config of its own: the same flow, group and topics
        wait_until(lambda m=m: len([p for p in m.partitions() if p["topic"] == t]) == 2
                   and all(p["lag"] == 0 for p in m.partitions() if p["topic"] == t), 90, what=f"step {step} caught up")
        assert m.stop() == 0
        assert ("data path: batches" in m.log()) == (lines is batches)
    assert m is not None
    assert [r.value for r in read_all(dc1, t)] == [r.value for r in read_all(dc2, f"dc1.{t}")]  # nothing twice
    assert assert_exact_at_every_position(m, dc1, dc2, (t,)) > 50



def test_what_is_in_flight_stays_within_its_bytes_while_the_target_is_cut_off_and_all_lands_after(
        dc1, dc2, name, wan, start_mirror, tmp_path):  # type: ignore[no-untyped-def]
    """replication.max.in.flight.bytes bounds what the batches path holds whatever the record size (a count of
    500,000 records alone let 100 kB records fill the mirror's memory: 50 GB). While the link to the target is
    down and the source's backlog grows, the batches in flight stop at the bound plus at most one fetch answer;
    once the link heals, everything lands, in order."""
    t, remote = f"{name}.large", f"dc1.{name}.large"
    create_topic(dc1, t, 4)
    p = producer(dc1, **{"batch.size": 400_000, "linger.ms": 50})
    for i in range(4):
        p.produce(t, value=b"seq-%d" % i, partition=i)
    assert p.flush(30) == 0
    # A fetch answer: 4 partitions of 1 MiB at most. (A partition whose batches wait in the sender is not fetched
    # again until they leave: with the target cut off that alone stops at about one answer, so the bound is below.)
    bound, answer = 2 << 20, 4 << 20
    config = write_config(tmp_path / "mm2-wan.properties", {"dc1": dc1, "dc2": wan.bootstrap}, flow_lines(
        name, BATCHES, "emit.checkpoints.enabled = false", f"replication.max.in.flight.bytes = {bound}",
        "dc1->dc2.consumer.max.partition.fetch.bytes = 1048576"))
    m = start_mirror([], config=config)

    def caught_up() -> bool:
        mine = [p for p in m.partitions() if p["topic"] == t]
        return len(mine) == 4 and all(p["lag"] == 0 for p in mine)

    wait_until(caught_up, 90, what="the first records copied")
    flow = {"flow": "dc1->dc2"}
    with wan.partitioned():
        for i in range(4, 484):  # 48 MB, 12 of each partition
            p.produce(t, value=b"seq-%d-" % i + bytes(100_000), partition=i % 4)
        assert p.flush(60) == 0
        # The precondition: it is the bound that stops fetching, not the end of the backlog.
        wait_until(lambda: (metric(m, "mirror_in_flight_bytes", **flow) or 0) >= bound, 60, what="the bound in flight")
        held = []
        for _ in range(40):  # 8 s of a target out of reach
            held.append(metric(m, "mirror_in_flight_bytes", **flow) or 0)
            time.sleep(0.2)
        assert max(held) <= bound + answer + 64 * 1024, held
        assert end_offsets(dc2, remote) == {0: 1, 1: 1, 2: 1, 3: 1}  # nothing more landed meanwhile
    wait_until(caught_up, 120, what="caught up after the link healed")
    assert_same_records(dc1, dc2, t, remote)
    assert metric(m, "mirror_in_flight_bytes", **flow) == 0


def test_auto_copies_on_batches_when_nothing_stands_in_the_way_and_says_so(dc1, dc2, clusters, name, start_mirror):  # type: ignore[no-untyped-def]
    """replication.data.path = auto on a flow with no obstacle (at-least-once, the default policy, nothing its
    clients set that the mirror's own client does not honour): the source's batches land whole, and the start line
    and /status say batches and why."""
    t = f"{name}.auto"
    create_topic(dc1, t, 2)
    p = producer(dc1, **{"linger.ms": 1000})
    for i in range(600):
        p.produce(t, value=b"auto-%d" % i, partition=i % 2)
        if i % 50 == 49:
            p.flush(10)
    assert p.flush(30) == 0
    m = start_mirror(flow_lines(name, "replication.data.path = auto", "emit.checkpoints.enabled = false"))
    wait_until(lambda: len([p for p in m.partitions() if p["topic"] == t]) == 2
               and all(p["lag"] == 0 for p in m.partitions() if p["topic"] == t), 30, what="caught up")
    assert "data path: batches (auto: batches)" in m.log()
    flow = (m.status() or {})["flows"][0]
    assert (flow["data_path"], flow["data_path_reason"]) == ("batches", "auto: batches")
    assert_same_records(dc1, dc2, t, f"dc1.{t}")
    assert record_counts(clusters["dc1"], t) == record_counts(clusters["dc2"], f"dc1.{t}")  # whole batches


def test_a_backlog_of_small_batches_lands_merged_record_for_record_with_the_offset_map_exact(
        clusters, dc1, dc2, name, start_mirror):  # type: ignore[no-untyped-def]
    """Consecutive source batches of a few records fetched together go out as one (a partition takes one batch per
    produce request): fewer batches on the target, every record identical, the offset map exact at every position
    across the gaps that transaction markers and aborted transactions leave between them."""
    small, txn = f"{name}.small", f"{name}.smalltxn"
    create_topic(dc1, small, 2)
    create_topic(dc1, txn, 1)
    p = producer(dc1, **{"linger.ms": 1000})
    for i in range(1000):
        p.produce(small, value=b"small-%d" % i, key=b"k%d" % i, partition=i % 2, headers=[("seq", str(i).encode())])
        if i % 10 == 9:
            p.flush(10)  # batches of 5 records
    assert p.flush(30) == 0
    transactional_data(dc1, txn, 1)  # transactions of 5 records, every third aborted
    source = record_counts(clusters["dc1"], small)
    assert {n for counts in source.values() for n in counts} == {5}  # the precondition: small source batches
    m = start_mirror(flow_lines(name, BATCHES, "emit.checkpoints.enabled = false"))
    wait_until(lambda: len([p for p in m.partitions() if p["topic"] in (small, txn)]) == 3
               and all(p["lag"] == 0 for p in m.partitions() if p["topic"] in (small, txn)), 90, what="caught up")
    assert_same_records(dc1, dc2, small, f"dc1.{small}")
    target = record_counts(clusters["dc2"], f"dc1.{small}")
    assert sum(map(len, target.values())) * 4 < sum(map(len, source.values())), (source, target)
    # 8 committed transactions of 5 records (12 batches with the aborted ones) fetched in one answer: one batch, two
    # if the answer was cut
    assert len(record_counts(clusters["dc2"], f"dc1.{txn}")[0]) <= 2
    assert assert_exact_at_every_position(m, dc1, dc2, (small, txn)) > 1000
