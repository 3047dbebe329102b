"""The wire client against real brokers (mirror_core/wire): the batch fetcher hands out every committed
record batch of many partitions exactly once and in order, drops what it fetched before a seek, and reports
a position beyond the log instead of guessing; the batch sender lands them in order, says where each landed
(target offsets one after another: an exact offset map per batch), and hands a refusal to the caller with
the partition's later batches not written. (TLS and SASL: test_security.py.)"""

from __future__ import annotations

import os
import time
from typing import Any

import pytest
from confluent_kafka import Producer

from mirror_core.devcluster.toxiproxy import Toxic
from mirror_core.wire import fetcher as fetcher_module
from mirror_core.wire.errors import NAMES
from mirror_core.wire.fetch import FetchedPartition, fetch_request
from mirror_core.wire.fetcher import BatchFetcher, FetchLimits
from mirror_core.wire.metadata import Brokers
from mirror_core.wire.recode import CODEC_MASK, CODECS, contiguous_copy, decompress
from mirror_core.wire.records import (
    BATCH_HEADER,
    attributes,
    base_offset,
    committed,
    contiguous,
    next_offset,
    producer_id,
    read_varint,
    record_count,
)
from mirror_core.wire.sender import NOT_SENT, BatchSender, Outgoing, Sent
from tests.kafka_harness import (
    alter_topic,
    create_topic,
    end_offsets,
    produce_sequence,
    produce_transactions,
    producer,
    read_all,
    wait_until,
)
from tests.wan_harness import WanLink

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
    # One batch per fetch (the broker serves the first partition with records its first batch whatever the limits;
    # no room to grow the others' sizes): many results per partition, so order and resumption are exercised.
    fetcher = BatchFetcher(brokers, FetchLimits(max_wait_ms=100, max_bytes=1, partition_max_bytes=1))
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


def _copy(fetcher: BatchFetcher, sender: BatchSender, topic: str, remote: str, ends: dict[int, int],
          timeout: float = 60) -> list[Sent]:
    """Every committed batch of ``topic`` up to ``ends`` sent to the same partition of ``remote``, each
    partition resumed as soon as its batches are handed over; every result, once all have answered."""
    return _copy_from(fetcher, sender, topic, remote, ends, dict.fromkeys(ends, 0), 0, timeout)


def _copy_from(fetcher: BatchFetcher, sender: BatchSender, topic: str, remote: str, ends: dict[int, int],
               positions: dict[int, int], handed: int, timeout: float = 60) -> list[Sent]:
    """:func:`_copy` from ``positions``, with ``handed`` batches already sent and not yet answered."""
    results: list[Sent] = []
    deadline = time.monotonic() + timeout
    while any(positions[p] < ends[p] for p in ends) or len(results) < handed:
        assert time.monotonic() < deadline, f"copied up to {positions} of {ends}; {len(results)}/{handed} answered"
        for part in fetcher.poll(0.05):
            kept = committed(part.batches, part.aborted)
            sender.send([Outgoing(remote, part.partition, b, token=base_offset(b)) for b in kept])
            handed += len(kept)
            positions[part.partition] = next_offset(part.batches[-1])
            fetcher.resume((topic, part.partition), positions[part.partition])
        results += sender.poll(0.05)
    return results


def test_a_full_caller_gets_nothing_more_fetched_until_it_has_room(dc1: str, name: str) -> None:
    """BatchFetcher.throttle: while the caller has as much in flight as it takes, no fetch is sent, for the
    partitions not fetched yet either. (Holding only each partition handed over let the fetcher go on to every
    other one: at 2,000 partitions the mirror held 3.69 GB of a backlog.)"""
    topic = f"{name}.throttle"
    partitions = 40
    create_topic(dc1, topic, partitions)
    produce_sequence(dc1, topic, partitions, 400)
    # One partition per answer (a fetch returns its first batch whatever the limits): many fetches to reach all.
    fetcher = BatchFetcher(Brokers(dc1, {}, "dc1"), FetchLimits(max_wait_ms=100, max_bytes=1, partition_max_bytes=1))
    try:
        fetcher.throttle(True)
        fetcher.assign({(topic, p): 0 for p in range(partitions)})
        assert fetcher.poll(2.0) == []  # full from the start: nothing fetched
        fetcher.throttle(False)
        got = fetcher.poll(10.0)
        assert got  # room again: fetched
        fetcher.throttle(True)
        time.sleep(3.0)  # (a loaded broker may take a while to answer the fetch on its way)
        got += fetcher.poll(0)  # answers on their way when the caller filled up are still handed over
        assert fetcher.poll(2.0) == []  # then nothing, though no partition is resumed and most are not fetched
        assert len(got) < partitions // 2
        fetcher.throttle(False)
        deadline = time.monotonic() + 30
        while len({part.partition for part in got}) < partitions:  # none resumed: each fetched once, all of them
            assert time.monotonic() < deadline, f"{len(got)} of {partitions} partitions fetched"
            got += fetcher.poll(0.5)
        assert len(got) == partitions and all(not part.error and part.batches for part in got)
    finally:
        fetcher.close()


def test_partitions_whose_batches_outgrow_the_fetch_size_are_asked_for_more_and_all_move_on(
        dc1: str, name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The broker serves a batch larger than max.partition.fetch.bytes only to the first partition with records in
    its answer, and none of it to the others: one batch per fetch, whatever the partitions. Those that came back
    empty though behind, in an answer with room, are asked first next time, for twice as much."""
    topic, partitions, batches = f"{name}.outgrown", 20, 10
    create_topic(dc1, topic, partitions)
    p = producer(dc1, **{"batch.size": 16384, "linger.ms": 0})
    for i in range(partitions * batches):  # 20 kB records, over batch.size: a batch each
        p.produce(topic, value=os.urandom(20_000), partition=i % partitions)
    assert p.flush(30) == 0
    brokers = Brokers(dc1, {}, "dc1")
    ends = {q: part.high_watermark for q, part in _log_ends(brokers, topic).items()}
    assert ends == dict.fromkeys(range(partitions), batches)  # precondition: one record, one batch
    fetches = [0]

    def counted(*args: Any, **kwargs: Any) -> bytes:
        fetches[0] += 1
        return fetch_request(*args, **kwargs)

    monkeypatch.setattr(fetcher_module, "fetch_request", counted)
    fetcher = BatchFetcher(brokers, FetchLimits(max_wait_ms=100, partition_max_bytes=4096))
    try:
        fetcher.assign({(topic, q): 0 for q in range(partitions)})
        counts, _ = _drain(fetcher, ends, topic)
        assert counts == ends
        # Grown 4 → 8 → 16 → 32 kB in three answers, then a batch of each partition per fetch: 23 fetches here,
        # where a batch per fetch took one per batch (207 with the growth removed).
        assert fetches[0] <= partitions * batches // 4, fetches[0]
    finally:
        fetcher.close()


def test_the_sender_lands_every_batch_in_order_and_says_where_for_an_exact_offset_map(dc1: str, dc2: str,
                                                                                       name: str) -> None:
    topic, remote = f"{name}.send", f"{name}.send.copy"
    create_topic(dc1, topic, PARTITIONS)
    create_topic(dc2, remote, PARTITIONS)
    for start in (0, 3_000):
        produce_sequence(dc1, topic, PARTITIONS, 3_000, start=start)
    produce_transactions(dc1, topic, PARTITIONS, 6, 60)
    source = read_all(dc1, topic)
    brokers = Brokers(dc1, {}, "dc1")
    ends = {p: part.high_watermark for p, part in _log_ends(brokers, topic).items()}
    fetcher = BatchFetcher(brokers, FetchLimits(max_wait_ms=100, max_bytes=1, partition_max_bytes=1))
    sender = BatchSender(Brokers(dc2, {}, "dc2"))
    try:
        fetcher.assign({(topic, p): 0 for p in range(PARTITIONS)})
        results = _copy(fetcher, sender, topic, remote, ends)
    finally:
        fetcher.close()
        sender.close()
    assert [r.describe() for r in results if r.error] == []
    target = read_all(dc2, remote)
    for p in range(PARTITIONS):
        mine = sorted((r for r in results if r.batch.partition == p), key=lambda r: r.base_offset)
        # One batch after another on the target: each lands where the previous one ended, in source order.
        assert [r.base_offset for r in mine] == [0, *(r.base_offset + record_count(r.batch.data) for r in mine[:-1])]
        assert [r.batch.token for r in mine] == sorted(r.batch.token for r in mine)  # type: ignore[type-var]
        assert [(r.key, r.value, r.headers, r.timestamp) for r in target if r.partition == p] == \
            [(r.key, r.value, r.headers, r.timestamp) for r in source if r.partition == p], p
    written = _log_ends(Brokers(dc2, {}, "dc2"), remote)
    assert sum(part.high_watermark for part in written.values()) == len(source)  # nothing written twice


def test_a_refused_batch_is_the_callers_with_the_partitions_later_batches_not_written(dc1: str, dc2: str,
                                                                                     name: str) -> None:
    topic, remote = f"{name}.refuse", f"{name}.refuse.copy"
    create_topic(dc1, topic, 2)
    create_topic(dc2, remote, 2, {"max.message.bytes": "2000"})
    for start in (0, 40, 80):  # three small batches per partition (20 records each)...
        produce_sequence(dc1, topic, 2, 40, start=start)
    produce_sequence(dc1, topic, 2, 2, start=120, value_size=3000)  # ...then one the target refuses
    produce_sequence(dc1, topic, 2, 40, start=122)  # and one behind it
    brokers = Brokers(dc1, {}, "dc1")
    ends = {p: part.high_watermark for p, part in _log_ends(brokers, topic).items()}
    fetcher = BatchFetcher(brokers, FetchLimits(max_wait_ms=100, max_bytes=1, partition_max_bytes=1))
    sender = BatchSender(Brokers(dc2, {}, "dc2"))
    try:
        fetcher.assign({(topic, p): 0 for p in range(2)})
        results = _copy(fetcher, sender, topic, remote, ends)
        for p in range(2):
            mine = [r for r in results if r.batch.partition == p]
            assert [r.error for r in mine] == [0, 0, 0, 10, NOT_SENT], mine  # MESSAGE_TOO_LARGE, then not sent
            assert "MESSAGE_TOO_LARGE" in mine[3].describe()
        assert sum(part.high_watermark for part in _log_ends(Brokers(dc2, {}, "dc2"), remote).values()) == 120
        # The operator raises the limit; the caller rewinds and sends the refused batch and the next again.
        alter_topic(dc2, remote, {"max.message.bytes": "1048588"})
        again = [r.batch for r in results if r.error]
        for p in range(2):
            sender.rewind((remote, p))
        sender.send(Outgoing(b.topic, b.partition, b.data, b.token) for b in again)
        deadline = time.monotonic() + 30
        retried: list[Sent] = []
        while len(retried) < len(again) and time.monotonic() < deadline:
            retried += sender.poll(0.5)
        assert [r.describe() for r in retried if r.error] == []
    finally:
        fetcher.close()
        sender.close()
    target = read_all(dc2, remote)
    assert len(target) == len(read_all(dc1, topic)) == 162
    # One producer id throughout: after a refusal with nothing waiting to be sent again, the sequences are the
    # broker's, and the refused batch lands with the sequence it was refused with.
    assert len({producer_id(b) for bs in _raw_batches(dc2, remote, 2).values() for b in bs}) == 1


def _raw_batches(bootstrap: str, topic: str, partitions: int) -> dict[int, list[memoryview]]:
    """Each partition's batches as stored, up to its log end (a fetch reads one log segment: resumed until
    then)."""
    brokers = Brokers(bootstrap, {}, bootstrap)
    ends = {p: part.high_watermark for p, part in _log_ends(brokers, topic).items()}
    fetcher = BatchFetcher(brokers, FetchLimits(max_wait_ms=10))
    out: dict[int, list[memoryview]] = {p: [] for p in range(partitions)}
    try:
        fetcher.assign({(topic, p): 0 for p in range(partitions)})
        deadline = time.monotonic() + 30
        while any(not out[p] or next_offset(out[p][-1]) < ends[p] for p in out if ends[p]):
            assert time.monotonic() < deadline, f"{topic}: batches up to {ends} not fetched"
            for part in fetcher.poll(0.5):
                out[part.partition] += part.batches
                if part.batches:
                    fetcher.resume((topic, part.partition), next_offset(part.batches[-1]))
    finally:
        fetcher.close()
    return out


def test_batches_whose_answers_are_lost_are_sent_again_and_not_written_twice(dc1: str, dc2: str, name: str,
                                                                            wan: WanLink) -> None:
    """The link to the target drops the broker's answers (the requests still arrive and are written), then
    closes: the outcome of what was in flight is unknown, so it is sent again with the same sequences, and
    the broker recognises what it already has."""
    topic, remote = f"{name}.lost", f"{name}.lost.copy"
    create_topic(dc1, topic, 4)
    create_topic(dc2, remote, 4)
    for start in range(0, 40_000, 4_000):  # ten batches per partition
        produce_sequence(dc1, topic, 4, 4_000, start=start)
    brokers = Brokers(dc1, {}, "dc1")
    ends = {p: part.high_watermark for p, part in _log_ends(brokers, topic).items()}
    fetcher = BatchFetcher(brokers, FetchLimits(max_wait_ms=100, max_bytes=1, partition_max_bytes=1))
    # Socket waits of 5 + 5 s: an answer that does not come within them is a lost connection.
    sender = BatchSender(Brokers(wan.bootstrap, {}, "dc2", timeout=5), timeout_ms=5_000)
    results: list[Sent] = []
    try:
        fetcher.assign({(topic, p): 0 for p in range(4)})
        # A first batch per partition lands, then the answers stop coming.
        positions = dict.fromkeys(range(4), 0)
        while len(positions) and len(results) < 4:
            for part in fetcher.poll(0.05):
                if positions[part.partition] == 0:
                    sender.send([Outgoing(remote, part.partition, b) for b in part.batches])
                    positions[part.partition] = next_offset(part.batches[-1])
            results += sender.poll(0.05)
        wan.toxic(Toxic.timeout(3_000))  # answers held, then the connection closed
        for p in range(4):
            fetcher.resume((topic, p), positions[p])
        acked = sum(record_count(r.batch.data) for r in results if not r.error)
        handed = 4
        while handed < 16:  # three more batches per partition go out into the cut
            for part in fetcher.poll(0.05):
                if handed < 16:
                    sender.send([Outgoing(remote, part.partition, b) for b in part.batches])
                    handed += len(part.batches)
                    positions[part.partition] = next_offset(part.batches[-1])
                    if handed < 16:
                        fetcher.resume((topic, part.partition), positions[part.partition])
        # Precondition: written on the target, not acknowledged to the sender.
        wait_until(lambda: sum(end_offsets(dc2, remote, "read_uncommitted").values()) > acked, 20,
                   what="records written whose answers were lost")
        assert not [r for r in sender.poll(0) if not r.error]
        wait_until(lambda: sender.retried > 0, 30, what="a lost connection's batches sent again")
        wan.clear()
        for p in range(4):
            fetcher.resume((topic, p), positions[p])
        results += _copy_from(fetcher, sender, topic, remote, ends, positions, handed - len(results))
    finally:
        fetcher.close()
        sender.close()
    assert [r.describe() for r in results if r.error] == []
    assert sum(end_offsets(dc2, remote, "read_uncommitted").values()) == 40_000  # nothing written twice
    source, target = read_all(dc1, topic), read_all(dc2, remote)
    for p in range(4):
        assert [r.value for r in target if r.partition == p] == [r.value for r in source if r.partition == p], p


def test_a_compacted_sources_gapped_batches_are_rewritten_for_every_codec_and_land_record_for_record(
        dc1: str, dc2: str, name: str) -> None:
    """Compaction leaves batches with offsets missing inside them, which a Kafka 4 broker refuses from a
    producer: each is rewritten with contiguous offset deltas (decompressed and compressed again with its own
    codec), and lands with every surviving record, in order."""
    topic, remote = f"{name}.compacted", f"{name}.compacted.copy"
    codecs = [c for c in CODECS.values() if c != "none"]
    create_topic(dc1, topic, len(codecs), {"cleanup.policy": "compact", "segment.ms": "100",
                                           "min.cleanable.dirty.ratio": "0.01"})
    create_topic(dc2, remote, len(codecs))
    for partition, codec in enumerate(codecs):
        p = Producer({"bootstrap.servers": dc1, "compression.type": codec, "linger.ms": 50})
        for wave in range(6):  # one batch per wave: a "hot" key between unique ones, overwritten by the next wave
            for k in range(6):
                key = f"unique-{wave}-{k}" if k % 2 else "hot"
                p.produce(topic, key=key.encode(), value=f"{codec}-{wave}-{k}".encode() * 20, partition=partition)
            p.flush(10)
            time.sleep(0.3)
    dc1_brokers = Brokers(dc1, {}, "dc1")

    def gapped() -> dict[int, list[memoryview]]:
        batches = _raw_batches(dc1, topic, len(codecs))
        return batches if all(any(not contiguous(b) for b in bs) for bs in batches.values()) else {}

    source_batches = wait_until(gapped, 90, interval=1, what="compaction to leave gaps inside batches of every codec")
    ends = {p: part.high_watermark for p, part in _log_ends(dc1_brokers, topic).items()}
    sender = BatchSender(Brokers(dc2, {}, "dc2"))
    try:
        # Precondition: the broker refuses a gapped batch as it is.
        raw = next(b for b in source_batches[0] if not contiguous(b))
        sender.send([Outgoing(remote, 0, raw)])
        refused = wait_until(lambda: sender.poll(0.5), 30, what="the raw gapped batch answered")
        assert NAMES.get(refused[0].error) == "INVALID_RECORD", refused[0].describe()
        sender.rewind((remote, 0))
        outgoing = []
        for p, batches in source_batches.items():
            assert next_offset(batches[-1]) == ends[p]
            outgoing += [Outgoing(remote, p, b if contiguous(b) else contiguous_copy(b)[0])
                         for b in committed(batches, [])]  # (compaction may leave empty batches)
        sender.send(outgoing)
        results: list[Sent] = []
        deadline = time.monotonic() + 30
        while len(results) < len(outgoing) and time.monotonic() < deadline:
            results += sender.poll(0.5)
    finally:
        sender.close()
    assert [r.describe() for r in results if r.error] == []
    target = read_all(dc2, remote)
    # The source as copied (the cleaner may go on compacting it after the copy was fetched).
    copied = {p: [kv for b in committed(batches, []) for kv in _key_values(b)] for p, batches in source_batches.items()}
    assert sum(map(len, copied.values())) < 36 * len(codecs)  # compacted
    for p in range(len(codecs)):
        assert [(r.key, r.value) for r in target if r.partition == p] == copied[p], codecs[p]
        assert [r.offset for r in target if r.partition == p] == list(range(len(copied[p])))  # contiguous


def _key_values(batch: memoryview) -> list[tuple[bytes | None, bytes | None]]:
    """The (key, value) of each record of a data batch, decoded here (not by the code under test's rewrite)."""
    raw = decompress(attributes(batch) & CODEC_MASK, bytes(batch[BATCH_HEADER:]))
    out: list[tuple[bytes | None, bytes | None]] = []
    at = 0
    for _ in range(record_count(batch)):
        length, body = read_varint(raw, at)
        at = read_varint(raw, read_varint(raw, body + 1)[1])[1]  # attributes, timestamp delta, offset delta
        fields: list[bytes | None] = []
        for _field in range(2):  # key, then value
            size, at = read_varint(raw, at)
            fields.append(None if size < 0 else raw[at:at + size])
            at += max(size, 0)
        out.append((fields[0], fields[1]))
        at = body + length
    return out
