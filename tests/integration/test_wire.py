"""The wire client against real brokers (mirror_core/wire): the batch fetcher hands out every committed
record batch of many partitions exactly once and in order, drops what it fetched before a seek, and reports
a position beyond the log instead of guessing. (TLS and SASL: test_security.py.)"""

from __future__ import annotations

import time

from mirror_core.wire.errors import NAMES
from mirror_core.wire.fetch import FetchedPartition
from mirror_core.wire.fetcher import BatchFetcher, FetchLimits
from mirror_core.wire.metadata import Brokers
from mirror_core.wire.records import committed, next_offset, record_count
from tests.kafka_harness import create_topic, produce_sequence, produce_transactions, read_all

PARTITIONS = 6


def _drain(fetcher: BatchFetcher, ends: dict[int, int], topic: str, start: dict[int, int] | None = None,
           timeout: float = 60) -> tuple[dict[int, int], list[FetchedPartition]]:
    """Committed records per partition from ``start`` (0), resuming each partition after its last batch, until
    every partition reached ``ends``; and every result seen."""
    counts = dict.fromkeys(ends, 0)
    positions = {p: (start or {}).get(p, 0) for p in ends}
    seen: list[FetchedPartition] = []
    deadline = time.monotonic() + timeout
    while any(positions[p] < ends[p] for p in ends):
        assert time.monotonic() < deadline, f"fetched up to {positions}, log ends {ends}"
        for part in fetcher.poll(0.5):
            seen.append(part)
            assert not part.error, NAMES.get(part.error)
            assert next_offset(part.batches[0]) > positions[part.partition]  # in order, nothing twice
            counts[part.partition] += sum(record_count(b) for b in committed(part.batches, part.aborted))
            positions[part.partition] = next_offset(part.batches[-1])
            fetcher.resume((topic, part.partition), positions[part.partition])
    return counts, seen


def test_the_fetcher_hands_out_every_committed_batch_once_in_order_and_forgets_what_a_seek_replaces(
        dc1: str, name: str) -> None:
    topic = f"{name}.fetch"
    create_topic(dc1, topic, PARTITIONS)
    for start in (0, 2_000, 4_000):  # three flushes: at least three batches per partition
        produce_sequence(dc1, topic, PARTITIONS, 2_000, start=start)
    produce_transactions(dc1, topic, PARTITIONS, 6, 60)  # 3 of 6 transactions aborted, markers in every partition
    expected = {p: sum(1 for r in read_all(dc1, topic) if r.partition == p) for p in range(PARTITIONS)}
    brokers = Brokers(dc1, {}, "dc1")
    ends = {p: part.high_watermark for p, part in _log_ends(brokers, topic).items()}
    assert sum(ends.values()) > sum(expected.values())  # precondition: markers and aborted records take offsets
    # One batch per partition and fetch (a fetch returns a partition's first batch whatever its size): many
    # results per partition, so order and resumption are exercised.
    fetcher = BatchFetcher(brokers, FetchLimits(max_wait_ms=100, partition_max_bytes=1))
    try:
        fetcher.assign({(topic, p): 0 for p in range(PARTITIONS)})
        counts, seen = _drain(fetcher, ends, topic)
        assert counts == expected
        assert len(seen) >= 6 * PARTITIONS  # 3 of data, 3 of transactions (their markers come along)
        # A seek while a result is held: that result never reaches the caller.
        first = next(p for p in seen if p.partition == 0).batches[0]
        fetcher.assign({(topic, 0): 0})
        time.sleep(1)  # the result for offset 0 (its first batch) is now held: not resumed
        fetcher.assign({(topic, 0): next_offset(first)})  # seek past it: that result is stale now
        again, _ = _drain(fetcher, {0: ends[0]}, topic, start={0: next_offset(first)})
        assert again == {0: expected[0] - record_count(first)}
        # Beyond the log: reported (the caller decides), not skipped or clamped.
        fetcher.assign({(topic, 1): ends[1] + 1000})
        deadline = time.monotonic() + 30
        errors: list[int] = []
        while not errors and time.monotonic() < deadline:
            errors = [p.error for p in fetcher.poll(0.5) if p.partition == 1]
        assert errors and NAMES[errors[0]] == "OFFSET_OUT_OF_RANGE"
    finally:
        fetcher.close()


def _log_ends(brokers: Brokers, topic: str) -> dict[int, FetchedPartition]:
    """Each partition's bounds, read with one fetch at offset 0 (its high watermark, log start)."""
    meta = brokers.metadata([topic])
    out: dict[int, FetchedPartition] = {}
    fetcher = BatchFetcher(brokers, FetchLimits(max_wait_ms=10, partition_max_bytes=1))
    try:
        fetcher.assign({(topic, p): 0 for p in meta.topics[topic].leaders})
        deadline = time.monotonic() + 30
        while len(out) < len(meta.topics[topic].leaders) and time.monotonic() < deadline:
            out.update((p.partition, p) for p in fetcher.poll(0.5))
    finally:
        fetcher.close()
    return out
