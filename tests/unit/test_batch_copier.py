"""What the batches data path acknowledges for a fetched batch (replication/batch_path.py): the records it copies
from the position on, and the offset-map runs their landing gives (PartitionState.map_landed, as on the records
path)."""

from __future__ import annotations

import time
from typing import Any, cast

from confluent_kafka import KafkaError, TopicPartition

from mirror_core.config.model import ClusterConfig
from mirror_core.metrics import Metrics
from mirror_core.replication.acks import Acks
from mirror_core.replication.batch import PartitionState, WholeBatch
from mirror_core.replication.batch_path import (
    BATCH_BOOKKEEPING_BYTES,
    CORRUPT_RETRIES,
    BatchCopier,
    BatchDelivery,
)
from mirror_core.replication.damage import RESUME, SKIP, PartitionAction
from mirror_core.replication.wire_reader import QUEUED_MAX_S, WireReader
from mirror_core.wire.fetch import FetchedPartition
from mirror_core.wire.integrity import intact
from mirror_core.wire.records import contiguous, record_count
from mirror_core.wire.sender import NOT_SENT, Outgoing, Sent
from tests.unit.test_wire_recode import gapped


def landed(st: PartitionState, raw: bytes, start: int, target: int) -> tuple[object, list[tuple[int, int]]]:
    """The batch's copy, and the map entries once it lands at ``target``."""
    made = BatchCopier._batch(st, memoryview(raw), start)
    assert made is not None
    data, b = made
    b.t_first, b.t_last, b.pending = target, target + b.count - 1, 0
    assert b.landed and st.pending[-1] is b
    st.map_landed(b)
    return data, st.syncs


def test_a_contiguous_batch_at_the_position_goes_as_it_is_in_one_run() -> None:
    raw = gapped(0, list(range(10)))  # offsets 1000-1009
    st = PartitionState("t", 0, "dc1.t", 1000, False)
    data, syncs = landed(st, raw, 1000, 500)
    assert isinstance(data, memoryview) and bytes(data) == raw  # not rewritten
    b = st.pending[-1]
    assert (b.first, b.next, b.count, b.size) == (1000, 1010, 10, len(raw))
    assert syncs == [(1000, 500)]


def test_records_before_the_position_are_not_copied_again() -> None:
    raw = gapped(0, list(range(10)))
    st = PartitionState("t", 0, "dc1.t", 1004, False)
    data, syncs = landed(st, raw, 1004, 500)
    assert record_count(data) == 6 and contiguous(data)
    assert (st.pending[-1].first, st.pending[-1].next) == (1004, 1010)
    assert syncs == [(1004, 500)]


def test_a_compacted_batch_maps_every_record_that_follows_a_gap() -> None:
    raw = gapped(0, [1, 2, 5, 9])  # records at 1001, 1002, 1005, 1009: 1000 and the others compacted away
    st = PartitionState("t", 0, "dc1.t", 1000, False)
    data, syncs = landed(st, raw, 1000, 500)
    assert record_count(data) == 4 and contiguous(data)
    assert (st.pending[-1].first, st.pending[-1].next) == (1001, 1010)
    # Each source offset maps to the target offset of the record a group committed there reads next.
    assert syncs == [(1001, 500), (1005, 502), (1009, 503)]
    assert BatchCopier._batch(st, memoryview(raw), 1010) is None


def test_offsets_compacted_away_at_a_batchs_end_are_not_acknowledged_with_it() -> None:
    raw = gapped(0, [0, 1, 2])  # records at 1000-1002; the batch's last offset is 1009
    st = PartitionState("t", 0, "dc1.t", 1000, False)
    _, syncs = landed(st, raw, 1000, 500)
    # As on the records path: progress stops after the last record; commit.advance_idle passes the rest once idle
    # (with an entry where the next record lands), or the next batch's run begins past them.
    assert (st.pending[-1].first, st.pending[-1].next, st.pending[-1].count) == (1000, 1003, 3)
    assert syncs == [(1000, 500)]


class Fetcher:
    """Where the copier asked the fetcher to go (stands in for the wire fetcher: no broker here)."""

    def __init__(self) -> None:
        self.resumed: list[tuple[tuple[str, int], int]] = []
        self.assigned: list[dict[tuple[str, int], int]] = []
        self.watermarks: dict[tuple[str, int], tuple[int, int]] = {}
        self.full: list[bool] = []

    def throttle(self, full: bool) -> None:
        self.full.append(full)

    def resume(self, key: tuple[str, int], offset: int) -> None:
        self.resumed.append((key, offset))

    def assign(self, positions: dict[tuple[str, int], int]) -> None:
        self.assigned.append(dict(positions))

    def revoke(self, keys: object) -> None:
        pass

    def close(self) -> None:
        pass


class Sender:
    def __init__(self) -> None:
        self.answers: list[Sent] = []
        self.sent: list[Outgoing] = []
        self.queued: dict[tuple[str, int], int] = {}  # batches of a target partition waiting behind its window

    def waiting(self, tp: tuple[str, int]) -> int:
        return self.queued.get(tp, 0)

    def send(self, batches: list[Outgoing]) -> None:
        self.sent.extend(batches)

    def rewind(self, tp: tuple[str, int]) -> None:
        pass

    def poll(self, timeout: float) -> list[Sent]:
        out, self.answers = self.answers, []
        return out

    def close(self) -> None:
        pass


def copier_with_batches_in_flight() -> tuple[BatchCopier, WireReader, PartitionState, Fetcher]:
    """Partition t[0] with two batches handed over (offsets 1000-1019) and not answered yet; at most 1,000 records
    and 1 GiB in flight."""
    fetcher = Fetcher()
    reader = WireReader(cast(Any, None), cast(Any, fetcher), None, "latest")
    reader.resolve = lambda keys, earliest: {k: 5000 for k in keys}  # type: ignore[method-assign]
    st = PartitionState("t", 0, "dc1.t", 1000, False)
    acks = Acks("dc1->dc2", cast(Any, reader), Metrics(), lambda: None)
    copier = BatchCopier("dc1->dc2", reader, cast(Any, Sender()), {("t", 0): st}, acks, Metrics(), 1000, 1 << 30,
                         ClusterConfig("dc1", "a:1", {}))
    for start in (1000, 1010):
        BatchCopier._batch(st, memoryview(gapped(0, list(range(10)), base=start)), start)
    copier.in_flight = 20
    copier.in_flight_bytes = sum(b.size + BATCH_BOOKKEEPING_BYTES for b in st.pending)
    reader.positions[("t", 0)] = 1020
    return copier, reader, st, fetcher


def test_a_fetch_error_delays_the_next_fetch_and_leaves_what_is_in_flight_counted() -> None:
    copier, reader, st, fetcher = copier_with_batches_in_flight()
    copier.take(FetchedPartition("t", 0, 56, -1, -1, -1))  # KAFKA_STORAGE_ERROR
    # The batches in flight stay the partition's to acknowledge: progress cannot pass them unanswered.
    assert [b.first for b in st.pending] == [1000, 1010] and st.gen == 0 and st.acked == 1000
    assert ("t", 0) in reader.delayed and not fetcher.resumed
    reader.due(reader.delayed[("t", 0)])
    assert fetcher.resumed == [(("t", 0), 1020)] and not reader.delayed


def test_an_offset_no_longer_on_the_source_moves_the_fetch_only() -> None:
    copier, reader, st, fetcher = copier_with_batches_in_flight()
    copier.take(FetchedPartition("t", 0, 1, -1, -1, -1))  # OFFSET_OUT_OF_RANGE; the end is 5000 ("latest")
    assert fetcher.assigned == [{("t", 0): 5000}] and reader.positions[("t", 0)] == 5000
    assert [b.first for b in st.pending] == [1000, 1010] and st.next == 1000 and st.acked == 1000


def test_nothing_is_in_flight_once_the_copier_is_closed() -> None:
    copier, _, _, _ = copier_with_batches_in_flight()
    copier.close()  # its answers will never come: a flush after it must not wait for them
    assert copier.in_flight == copier.in_flight_bytes == 0


def test_no_fetch_is_sent_while_the_limit_is_in_flight_and_fetching_goes_on_below_it() -> None:
    """replication.max.in.flight.records bounds what the flow holds: at the limit the whole fetcher is held (not
    only the partitions handed over since), and once answers bring it below, fetching goes on."""
    copier, _, st, fetcher = copier_with_batches_in_flight()
    copier.in_flight = 1010
    copier.collect(0)
    assert fetcher.full == [True]
    sender = cast(Sender, copier.sender)
    sender.answers = [Sent(Outgoing(st.remote, 0, b"", token=b), 0, 500 + i * 10) for i, b in enumerate(st.pending)]
    copier.collect(0)  # the two batches (20 records) answered: below the limit
    assert copier.in_flight == 990 and fetcher.full == [True, False]


def test_the_bytes_in_flight_bound_the_copier_whatever_the_record_count() -> None:
    """replication.max.in.flight.bytes: a partition's batches that take the bytes in flight past the bound are
    handed over, then nothing more is fetched (that partition held, the fetcher throttled) until answers bring
    the bytes below it; the record count (20 + 10, far under its 1,000) plays no part."""
    copier, reader, st, fetcher = copier_with_batches_in_flight()
    copier.max_bytes = copier.in_flight_bytes + 100  # room for less than one more batch
    raw = gapped(0, list(range(10)), base=1020)
    assert copier.take(FetchedPartition("t", 0, 0, 5000, 5000, 0, batches=[memoryview(raw)])) == 10
    assert copier.in_flight == 30 and copier.in_flight_bytes == 3 * (len(raw) + BATCH_BOOKKEEPING_BYTES)
    assert copier.full and ("t", 0) in reader.held and not fetcher.resumed
    assert fetcher.full == [True]  # at once, before the round of answers ends
    copier.collect(0)
    assert fetcher.full == [True, True]
    sender = cast(Sender, copier.sender)
    first = st.pending[0]
    sender.answers = [Sent(Outgoing(st.remote, 0, b"", token=first), 0, 500)]
    copier.collect(0)  # one batch answered: below the bound again
    assert copier.in_flight == 20 and copier.in_flight_bytes == 2 * (len(raw) + BATCH_BOOKKEEPING_BYTES)
    assert fetcher.full[-1] is False and fetcher.resumed == [(("t", 0), 1030)] and not reader.held


def test_failed_and_unsent_batches_leave_the_bytes_in_flight_as_answered_ones_do() -> None:
    """A batch counts until its one answer, whatever it says (an error, NOT_SENT behind one)."""
    copier, _, st, _ = copier_with_batches_in_flight()
    first, second = st.pending
    cast(Sender, copier.sender).answers = [Sent(Outgoing(st.remote, 0, b"", token=first), 10),  # MESSAGE_TOO_LARGE
                                           Sent(Outgoing(st.remote, 0, b"", token=second), NOT_SENT)]
    copier.collect(0)
    assert copier.in_flight == 0 and copier.in_flight_bytes == 0 and not copier.full


def damaged_copy_of(raw: bytes) -> bytes:
    return raw[:-3] + bytes([raw[-3] ^ 1]) + raw[-2:]


def test_a_damaged_batch_pauses_its_partition_at_it_and_what_is_in_flight_before_it_still_lands() -> None:
    copier, _reader, st, fetcher = copier_with_batches_in_flight()
    good, bad = gapped(0, list(range(10)), base=1020), damaged_copy_of(gapped(0, list(range(10)), base=1030))
    part = FetchedPartition("t", 0, 0, 5000, 5000, 0)
    part.batches, part.damaged = intact([memoryview(good), memoryview(bad)], 5000)
    assert copier.take(part) == 10  # the good batch before it goes; the next fetch starts at the damage
    assert fetcher.resumed == [(("t", 0), 1030)] and st.copying
    part = FetchedPartition("t", 0, 0, 5000, 5000, 0)
    part.batches, part.damaged = intact([memoryview(bad)], 5000)
    assert copier.take(part) == 0
    assert not st.copying and st.paused_reason is not None
    assert "source cluster dc1: record batch at offset 1030 (" in st.paused_reason
    assert "--offsets 1030-<the batch's last offset>" in st.paused_reason  # (no batch after it: not known)
    assert [b.first for b in st.pending] == [1000, 1010, 1020] and st.gen == 0  # in flight: still counted
    assert copier.acks.metrics.damaged.labels("dc1->dc2", "t", "0")._value.get() == 1


def test_a_batch_past_its_answers_high_watermark_is_asked_for_again_before_it_counts_as_damage() -> None:
    """A broker takes an answer's high watermark before it reads the log: under writes a sound batch can end past
    it. Asked again it lands (the next answer's watermark covers it); a base offset really wrong says the same
    twice and pauses the partition."""
    copier, reader, st, _fetcher = copier_with_batches_in_flight()
    sound = gapped(0, list(range(10)), base=1020)
    part = FetchedPartition("t", 0, 0, 1025, 1025, 0)  # the watermark taken before the batch was appended
    part.batches, part.damaged = intact([memoryview(sound)], 1025)
    assert part.damaged is not None and part.damaged.settles and not part.batches
    assert copier.take(part) == 0 and st.copying and ("t", 0) in reader.delayed  # asked again, not paused
    reader.due(reader.delayed[("t", 0)])
    part = FetchedPartition("t", 0, 0, 1040, 1040, 0)
    part.batches, part.damaged = intact([memoryview(sound)], 1040)
    assert copier.take(part) == 10 and st.copying
    # A base offset far past the log: the same damage twice, then paused.
    wrong = gapped(0, list(range(10)), base=1 << 40)
    for _ in range(2):
        part = FetchedPartition("t", 0, 0, 1040, 1040, 0)
        part.batches, part.damaged = intact([memoryview(wrong)], 1040)
        copier.take(part)
    assert not st.copying and "past the partition's end" in (st.paused_reason or "")


def test_an_operators_skip_is_checked_against_the_damage_and_taken_only_there() -> None:
    copier, _reader, st, fetcher = copier_with_batches_in_flight()
    acks, operator = copier.acks, copier.acks.operator
    bad = damaged_copy_of(gapped(0, list(range(10)), base=1020))
    part = FetchedPartition("t", 0, 0, 5000, 5000, 0)
    part.batches, part.damaged = intact([memoryview(bad)], 5000)
    copier.take(part)
    assert not st.copying
    states = {("t", 0): st}
    operator.offer([PartitionAction(1, "t", 0, SKIP, 1021, 1029, "alice", "short")])
    operator.apply(states, acks)
    assert not operator.outcomes() and operator.pending  # applied once nothing of the partition is in flight
    st.pending.clear()  # (acknowledged; the position stays before the damage, as after a transaction marker)
    operator.apply(states, acks)
    (refused,) = operator.outcomes()
    assert not refused.ok and "does not cover the damaged batch" in refused.line and not st.copying
    operator.offer([PartitionAction(2, "t", 0, SKIP, 1020, 1029, "alice", "bit rot")])
    operator.apply(states, acks)
    assert st.copying and not operator.outcomes()  # resumed from the last acknowledged offset; the skip is armed
    assert fetcher.assigned[-1] == {("t", 0): 1000}
    copier.take(part)  # the damage met again, at the armed range: gone past, reported
    (taken,) = operator.outcomes()
    assert taken.ok and "skipped offsets 1020-1029 (10 offsets" in taken.line and "alice" in taken.line
    assert st.copying and fetcher.assigned[-1] == {("t", 0): 1030}
    assert copier.acks.metrics.skipped.labels("dc1->dc2", "t", "0")._value.get() == 10
    acks.collect()
    assert st.acked == 1030 and not st.pending  # the range acknowledged at once
    operator.offer([PartitionAction(3, "t", 0, RESUME, None, None, "bob", "again")])
    operator.apply(states, acks)
    (nothing,) = operator.outcomes()
    assert not nothing.ok and "is not paused" in nothing.line


def test_a_skip_of_the_damage_at_the_acknowledged_position_is_taken_at_once_without_fetching_it_again() -> None:
    """Everything before the damaged batch landed: the skip is taken when applied (reported, counted, acknowledged
    in order) and reading goes on after the range; the damaged batch is never asked for again."""
    copier, _reader, st, fetcher = copier_with_batches_in_flight()
    acks, operator = copier.acks, copier.acks.operator
    part = FetchedPartition("t", 0, 0, 5000, 5000, 0)
    part.batches, part.damaged = intact([memoryview(damaged_copy_of(gapped(0, list(range(10)), base=1020)))], 5000)
    copier.take(part)
    assert not st.copying
    st.pending.clear()
    st.acked = 1020  # (what was in flight before it landed)
    asked = len(fetcher.assigned)
    operator.offer([PartitionAction(1, "t", 0, SKIP, 1020, 1029, "alice", "bit rot")])
    operator.apply({("t", 0): st}, acks)
    (taken,) = operator.outcomes()
    assert taken.ok and "skipped offsets 1020-1029 (10 offsets" in taken.line
    assert st.copying and st.next == 1030 and fetcher.assigned[asked:] == [{("t", 0): 1030}]
    assert acks.metrics.skipped.labels("dc1->dc2", "t", "0")._value.get() == 10
    acks.collect()
    assert st.acked == 1030 and not st.pending


def test_a_skip_taken_is_acknowledged_in_order_and_the_same_damage_met_again_is_passed_over_once_reported() -> None:
    """The skipped range is acknowledged in order with the batches around it (an offset-map entry where the next
    copy lands); met again after a rewind before it, it is passed over again without a second report; met again
    from past the skip's start (a skip shorter than the batch), or once durable progress passed the range, the
    partition pauses again."""
    copier, _reader, st, fetcher = copier_with_batches_in_flight()
    acks, operator = copier.acks, copier.acks.operator
    part = FetchedPartition("t", 0, 0, 5000, 5000, 0)
    part.batches, part.damaged = intact([memoryview(damaged_copy_of(gapped(0, list(range(10)), base=1020)))], 5000)
    copier.take(part)
    st.pending.clear()  # (the position stays before the damage: the skip is armed, taken when met again)
    states = {("t", 0): st}
    operator.offer([PartitionAction(1, "t", 0, SKIP, 1020, 1029, "alice", "bit rot")])
    operator.apply(states, acks)
    copier.take(part)
    (taken,) = operator.outcomes()
    assert taken.ok and st.copying and st.next == 1030
    skipped = st.pending[-1]
    assert skipped.first == 1020 and skipped.skipped and skipped.next == 1030 and skipped.count == 0
    acks.rewind_to(st, 1000, careful=False, backoff=False)  # (a delivery failed before the skip was acknowledged)
    assert not st.pending and st.next == 1000
    copier.take(part)
    assert st.copying and st.next == 1030 and st.pending[-1].skipped and fetcher.assigned[-1] == {("t", 0): 1030}
    assert not operator.outcomes() and acks.metrics.skipped.labels("dc1->dc2", "t", "0")._value.get() == 10
    copier.take(part)  # met from past the skip's start: the damage goes on past the range skipped
    assert not st.copying and "record batch at offset 1020" in (st.paused_reason or "")
    assert acks.metrics.skipped.labels("dc1->dc2", "t", "0")._value.get() == 10
    st.pending.clear()
    st.acked = st.committed = 1030  # durable progress passed the range: damage met there now is another batch
    operator.offer([PartitionAction(2, "t", 0, RESUME, None, None, "bob", "replica fixed")])
    operator.apply(states, acks)
    acks.rewind_to(st, 1020, careful=False, backoff=False)
    copier.take(part)
    assert not st.copying and "record batch at offset 1020" in (st.paused_reason or "")


def test_a_batch_the_target_finds_corrupt_is_read_again_then_pauses_with_what_to_look_at() -> None:
    copier, _reader, st, _fetcher = copier_with_batches_in_flight()
    delivery = BatchDelivery.__new__(BatchDelivery)  # (only what a failure needs: the copier and acks)
    delivery.copier, delivery.acks = copier, copier.acks
    for attempt in range(CORRUPT_RETRIES):
        b = st.pending[0] if st.pending else None
        if b is None:
            BatchCopier._batch(st, memoryview(gapped(0, list(range(10)), base=1000)), 1000)
            b = st.pending[0]
        b.err, b.pending = KafkaError(KafkaError.INVALID_MSG, "CORRUPT_MESSAGE"), 0
        delivery.on_failure(st, b)
        if attempt < CORRUPT_RETRIES - 1:
            assert st.copying or st.retry_at, attempt  # rewound, read again after a backoff
            assert not st.pending
    assert not st.copying and st.paused_reason is not None
    assert "CORRUPT_MESSAGE) 3 times in a row" in st.paused_reason and "records" not in st.paused_reason


def test_the_batches_of_one_polls_answers_go_to_the_sender_together() -> None:
    """An exactly-once slot adds the partitions of what it is handed to its transaction in one request: every
    partition's batches taken from one poll of the fetcher are handed over in one send, in the order taken."""
    fetcher = Fetcher()
    reader = WireReader(cast(Any, None), cast(Any, fetcher), None, "latest")
    states = {("t", p): PartitionState("t", p, "dc1.t", 1000, False) for p in (0, 1)}
    acks = Acks("dc1->dc2", cast(Any, reader), Metrics(), lambda: None)
    sender = Sender()
    calls: list[list[tuple[str, int]]] = []
    sender.send = lambda batches: calls.append([(b.topic, b.partition) for b in batches])  # type: ignore[method-assign]
    copier = BatchCopier("dc1->dc2", reader, cast(Any, sender), states, acks, Metrics(), 1000, 1 << 30,
                         ClusterConfig("dc1", "a:1", {}))
    parts = []
    for p in (0, 1):
        reader.positions[("t", p)] = 1000
        raws = [memoryview(gapped(0, list(range(10)), base=base)) for base in (1000, 1010)]
        parts.append(FetchedPartition("t", p, 0, 5000, 5000, 0, batches=raws))
    fetcher.poll = lambda timeout: parts  # type: ignore[attr-defined]
    assert copier.pump(0) == 40
    # (each partition's two small batches are merged: one batch each)
    assert calls == [[("dc1.t", 0), ("dc1.t", 1)]]
    assert copier.in_flight == 40


def copier_of(st: PartitionState) -> tuple[BatchCopier, Sender]:
    """A copier of ``st``'s partition alone, reading it from its position, its sender keeping what it is handed."""
    reader = WireReader(cast(Any, None), cast(Any, Fetcher()), None, "latest")
    reader.positions[(st.topic, st.partition)] = cast(int, st.next)
    acks = Acks("dc1->dc2", cast(Any, reader), Metrics(), lambda: None)
    sender = Sender()
    return BatchCopier("dc1->dc2", reader, cast(Any, sender), {(st.topic, st.partition): st}, acks, Metrics(), 1000,
                       1 << 30, ClusterConfig("dc1", "a:1", {})), sender


def small_batches() -> FetchedPartition:
    """Three small batches of 10 records: 1000-1009, 1010-1019 and, after a gap (a transaction's marker and an
    aborted one), 1025-1034."""
    return FetchedPartition("t", 0, 0, 5000, 5000, 0,
                            batches=[memoryview(gapped(0, list(range(10)), base=b)) for b in (1000, 1010, 1025)])


def test_consecutive_small_batches_go_as_one_and_map_as_they_would_have_one_by_one() -> None:
    st = PartitionState("t", 0, "dc1.t", 1000, False)
    copier, sender = copier_of(st)
    assert copier.take(small_batches()) == 30
    copier._send_taken()
    [out] = sender.sent
    b = cast(WholeBatch, out.token)
    assert (b.first, b.next, b.count, b.sources, b.gaps) == (1000, 1035, 30, 3, [(20, 1025)])
    assert record_count(out.data) == 30 and contiguous(out.data) and intact([memoryview(bytes(out.data))], 5000)[1] \
        is None
    b.t_first, b.t_last, b.pending = 500, 529, 0
    st.map_landed(b)
    assert st.syncs == [(1000, 500), (1025, 520)]  # one run each side of the gap, as the three batches would give


def test_a_merged_batch_refused_as_too_large_is_read_again_and_sent_one_by_one() -> None:
    st = PartitionState("t", 0, "dc1.t", 1000, False)
    copier, sender = copier_of(st)
    copier.take(small_batches())
    copier._send_taken()
    delivery = BatchDelivery.__new__(BatchDelivery)  # (only what a failure needs: the copier and acks)
    delivery.copier, delivery.acks = copier, copier.acks
    b = st.pending[0]
    b.err, b.pending = KafkaError(KafkaError.MSG_SIZE_TOO_LARGE, "MESSAGE_TOO_LARGE"), 0
    delivery.on_failure(st, b)
    assert st.paused_reason is None and not st.pending, "not paused: read again"
    assert copier.reader.positions[("t", 0)] == 1000
    sender.sent.clear()
    assert copier.take(small_batches()) == 30
    copier._send_taken()
    assert [cast(WholeBatch, o.token).sources for o in sender.sent] == [1, 1, 1]
    assert [bytes(o.data) for o in sender.sent] == [bytes(r) for r in small_batches().batches]


def test_a_partition_whose_batches_still_wait_in_the_sender_is_fetched_again_once_they_left() -> None:
    """Across a WAN a target partition takes MAX_IN_FLIGHT batches a round trip: a partition fetched again at once
    queued its small batches one per request behind that window (a minute behind at 2,000 records/s, 80 ms). Its
    next records gather at the source instead, and come merged."""
    fetcher = Fetcher()
    reader = WireReader(cast(Any, None), cast(Any, fetcher), None, "latest")
    states = {("t", p): PartitionState("t", p, "dc1.t", 1000, False) for p in (0, 1)}
    acks = Acks("dc1->dc2", cast(Any, reader), Metrics(), lambda: None)
    sender = Sender()
    copier = BatchCopier("dc1->dc2", reader, sender, states, acks, Metrics(), 1000, 1 << 30,
                         ClusterConfig("dc1", "a:1", {}))
    parts = []
    for p in (0, 1):
        reader.positions[("t", p)] = 1000
        parts.append(FetchedPartition("t", p, 0, 5000, 5000, 0, batches=[memoryview(gapped(0, list(range(10)),
                                                                                            base=1000))]))
    fetcher.poll = lambda timeout: parts  # type: ignore[attr-defined]
    sender.queued[("dc1.t", 0)] = 1  # t[0]'s earlier batches still wait; t[1]'s all left
    assert copier.pump(0) == 20 and len(sender.sent) == 2  # (the precondition: both handed over)
    assert fetcher.resumed == [(("t", 1), 1010)]
    assert list(reader.queued) == [("t", 0)] and reader.queued[("t", 0)][0] == ("dc1.t", 0)
    fetcher.poll = lambda timeout: []  # type: ignore[attr-defined]
    copier.pump(0)
    assert fetcher.resumed == [(("t", 1), 1010)]  # still waiting behind the window
    sender.queued.clear()
    copier.pump(0)
    assert fetcher.resumed == [(("t", 1), 1010), (("t", 0), 1010)] and not reader.queued
    sender.queued[("dc1.t", 0)] = 1
    parts[0].batches[:] = [memoryview(gapped(0, list(range(10)), base=1010))]
    fetcher.poll = lambda timeout: parts[:1]  # type: ignore[attr-defined]
    copier.pump(0)
    assert list(reader.queued) == [("t", 0)]
    # Not for longer than QUEUED_MAX_S: its watermark (the lag gauge) comes from its fetches
    reader.queued[("t", 0)] = (("dc1.t", 0), time.monotonic() - QUEUED_MAX_S)
    fetcher.poll = lambda timeout: []  # type: ignore[attr-defined]
    copier.pump(0)
    assert fetcher.resumed[-1] == (("t", 0), 1020) and not reader.queued
    # A pause or a seek forgets it
    reader.queued[("t", 0)] = (("dc1.t", 0), time.monotonic())
    reader.seek(TopicPartition("t", 0, 1010))
    assert not reader.queued
