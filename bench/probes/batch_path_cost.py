"""The Python work the batches data path does per source batch, without brokers: each thread's steps timed on
the same synthetic backlog, so that a change to them is measured without the noise of a copy on shared cores.

    python -m bench.probes.batch_path_cost [assigned] [fetched] [batches] [records] [rounds]

Defaults 2,000 / 60 / 100 / 100 / 5: 2,000 partitions assigned, of which a fetch answer carries 60, each with
100 batches of 100 records. That is the shape of a 2,000-partition backlog of 100 B records here: a partition's
whole backlog (about 1 MB) fits its 4 MiB share of an answer, a 64 MiB answer holds about 60 of them, and the
source's batches hold 60-130 records. A round copies the answers of every assigned partition; it times, on one
thread:

- fetch: ``parse_fetch`` of each answer (the fetch thread's work);
- take: ``BatchCopier.take`` of each of its partitions (the flow thread hands the batches to the sender);
- send: the sender's ``_take`` (one batch per partition per request, from the partitions with batches queued),
  ``restamp`` and ``produce_request`` for every request, then ``parse_produce`` of its answer and ``_answered``
  (the sender's connection thread);
- ack: ``BatchCopier.answer`` of every ``Sent`` and ``Acks.collect`` (the flow thread again).

Prints the median over the rounds of each step in microseconds per batch, and their sum. No socket is
opened: the sender's leaders are set by hand, its connections never start.
"""

from __future__ import annotations

import statistics
import struct
import sys
import time
from collections.abc import Callable
from typing import Any, cast

import google_crc32c

from mirror_core.config.model import ClusterConfig
from mirror_core.metrics import Metrics
from mirror_core.replication.acks import Acks
from mirror_core.replication.batch import PartitionState
from mirror_core.replication.batch_path import BatchCopier
from mirror_core.replication.wire_reader import WireReader
from mirror_core.wire.codec import array, int16, int32, int64, string
from mirror_core.wire.fetch import parse_fetch
from mirror_core.wire.metadata import Brokers
from mirror_core.wire.produce import parse_produce, produce_request
from mirror_core.wire.recode import varint
from mirror_core.wire.records import restamp
from mirror_core.wire.sender import BatchSender

TOPIC, REMOTE = "t", "src.t"


def batch(base: int, records: int, value: bytes = b"v" * 100) -> bytes:
    """An uncompressed v2 batch of ``records`` records at ``base``, as an idempotent producer writes it."""
    body = b"".join(varint(len(rec)) + rec for rec in (
        b"\x00" + varint(i) + varint(i) + varint(-1) + varint(len(value)) + value + varint(0)
        for i in range(records)))
    tail = struct.pack(">hiqqqhii", 0, records - 1, 1_700_000_000_000, 1_700_000_000_000 + records, 42, 0, base,
                       records) + body
    return struct.pack(">qiibI", base, 4 + 1 + 4 + len(tail), 0, 2, google_crc32c.value(tail)) + tail


def fetch_answer(partitions: range, batches: int, records: int) -> bytes:
    """A Fetch v11 answer with ``batches`` batches of each of ``partitions`` of topic t, from offset 0."""
    data = b"".join(batch(i * records, records) for i in range(batches))
    parts = (int32(p) + int16(0) + int64(batches * records) * 3 + int32(-1) + int32(-1) + int32(len(data)) + data
             for p in partitions)
    return int32(0) + int16(0) + int32(0) + array([string(TOPIC) + array(parts)])


def produce_answer(request: dict[tuple[str, int], Any], bases: dict[int, int], records: int) -> bytes:
    """The target's answer to one request: each batch landed after the partition's earlier ones."""
    parts = []
    for (_, p) in request:
        parts.append(int32(p) + int16(0) + int64(bases[p]) + int64(-1) + int64(0) + int32(0) + int16(-1))
        bases[p] += records
    return array([string(REMOTE) + array(parts)]) + int32(0)


class _Fetcher:
    watermarks: dict[tuple[str, int], tuple[int, int]] = {}

    def throttle(self, full: bool) -> None:
        pass

    def resume(self, key: tuple[str, int], offset: int) -> None:
        pass


def one_round(answers: list[memoryview], partitions: int, records: int) -> dict[str, float]:
    """Each step's seconds for the answers' batches, on fresh state (the backlog from offset 0)."""
    reader = WireReader(cast(Any, None), cast(Any, _Fetcher()), None, "earliest")
    states = {(TOPIC, p): PartitionState(TOPIC, p, REMOTE, 0, False) for p in range(partitions)}
    reader.positions.update({key: 0 for key in states})
    metrics = Metrics()
    acks = Acks("src->target", cast(Any, reader), metrics, lambda: None)
    sender = BatchSender(Brokers("127.0.0.1:1", {}, "bench"))
    sender.producer_id, sender.epoch, sender._renew = 7, 0, False
    sender._leaders.leaders.update({(REMOTE, p): 1 for p in range(partitions)})
    sender._leaders.want = lambda tps: None  # type: ignore[method-assign]  # (no metadata, no connection)
    copier = BatchCopier("src->target", reader, sender, states, acks, metrics, None, 1 << 40,
                         ClusterConfig("src", "127.0.0.1:1", {}))
    timings: dict[str, float] = {}

    def timed(step: str, work: Callable[[], Any]) -> Any:
        t0 = time.perf_counter()
        out = work()
        timings[step] = timings.get(step, 0.0) + time.perf_counter() - t0
        return out

    bases = dict.fromkeys(range(partitions), 0)

    def request() -> tuple[dict[tuple[str, int], Any], list[Any]] | None:
        with sender._cond:
            chosen = sender._take(1, 0)
        if not chosen:
            return None
        body = produce_request({tp: restamp(b.data, b.producer_id, b.epoch, b.sequence) for tp, b in chosen.items()},
                               30_000)
        return chosen, body

    for answer in answers:
        parts = timed("fetch", lambda answer=answer: parse_fetch(answer, "bench"))  # type: ignore[misc]
        timed("take", lambda parts=parts: [copier.take(part) for part in parts])  # type: ignore[misc]
        while True:
            made = timed("send", request)
            if made is None:
                break
            chosen = made[0]
            raw = memoryview(produce_answer(chosen, bases, records))  # (not timed: the target's)

            def answered(chosen: dict[tuple[str, int], Any] = chosen, raw: memoryview = raw) -> None:
                sender._answered(chosen, {(a.topic, a.partition): (a.error, a.base_offset, a.message)
                                          for a in parse_produce(raw)})

            timed("send", answered)
            def acked() -> None:
                copier.answer(sender.poll(0))
                acks.collect()

            timed("ack", acked)
    assert all(st.acked == st.next for st in states.values()), "not every batch was acknowledged"
    return timings


def main(assigned: int = 2000, fetched: int = 60, batches: int = 100, records: int = 100, rounds: int = 5) -> None:
    answers = [memoryview(fetch_answer(range(at, min(at + fetched, assigned)), batches, records))
               for at in range(0, assigned, fetched)]
    n = assigned * batches
    print(f"{assigned} partitions assigned, {fetched} per fetch answer ({len(answers[0]) / 1e6:.1f} MB), {batches} "
          f"batches x {records} records each, {rounds} rounds; microseconds per batch, median (min-max):", flush=True)
    per_step: dict[str, list[float]] = {}
    for _ in range(rounds):
        for step, seconds in one_round(answers, assigned, records).items():
            per_step.setdefault(step, []).append(seconds / n * 1e6)
    totals = [sum(values[i] for values in per_step.values()) for i in range(rounds)]
    for step, values in [*per_step.items(), ("all", totals)]:
        print(f"  {step:6} {statistics.median(values):7.2f} ({min(values):.2f}-{max(values):.2f})", flush=True)


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:6]))
