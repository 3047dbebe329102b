"""``replication.one.batch.per.partition``: a partition's next records wait in the mirror until its batch in
flight is acknowledged, and go to the producer in pieces that fit one produce request. Pure logic: a fake
producer records what it was handed; the WAN suite runs it against brokers (tests/wan/test_flaky_link.py)."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME

from mirror_core.config.errors import ConfigError
from mirror_core.config.loader import parse_text
from mirror_core.config.model import FlowConfig
from mirror_core.replication.batch import Parked, PartitionState
from mirror_core.replication.commit import advance_idle
from mirror_core.replication.consuming import IDLE_WAIT_S
from mirror_core.replication.produce import RECORD_OVERHEAD, Producing, _fitting
from mirror_core.replication.producer_pool import choose_producers
from mirror_core.replication.replicator import PARKED_WAIT_S, next_parked_wait
from mirror_core.replication.topic_limits import REQUEST_SLACK

#: records large enough that a piece of 5 or more is over 16 KiB (the full REQUEST_SLACK applies)
SIZE = 3000
PER = SIZE + RECORD_OVERHEAD
# The records path's producing (the batches path hands whole batches to its own sender).
BASE = ("clusters = dc1, dc2\ndc1.bootstrap.servers = a:1\ndc2.bootstrap.servers = b:2\ndc1->dc2.enabled = true\n"
        "replication.data.path = records\n")


def flow(extra: str = "") -> FlowConfig:
    return parse_text(BASE + extra, validate_clients=False).flows[0]


class Rec:
    """A consumed record, as much of confluent_kafka.Message as producing reads."""

    def __init__(self, offset: int, size: int, headers: list[tuple[str, bytes]] | None = None) -> None:
        self._offset, self._value, self._headers = offset, str(offset).encode().ljust(size, b"v"), headers

    def offset(self) -> int:
        return self._offset

    def value(self) -> bytes:
        return self._value

    def key(self) -> None:
        return None

    def headers(self) -> list[tuple[str, bytes]] | None:
        return self._headers

    def timestamp(self) -> tuple[int, int]:
        return TIMESTAMP_CREATE_TIME, 1_700_000_000_000 + self._offset


class Report:
    def __init__(self, offset: int) -> None:
        self._offset = offset

    def offset(self) -> int:
        return self._offset


class FakeProducer:
    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def produce(self, *args: Any) -> None:
        self.calls.append(args)

    def deliver(self) -> None:
        """Acknowledge everything handed over so far, at target offsets 0, 1, ..."""
        for i, call in enumerate(self.calls):
            if call[4] is not None:
                call[4](None, Report(i))


class Hooks:
    def __init__(self) -> None:
        self.opened = 0

    def before_produce(self, st: PartitionState) -> None:
        self.opened += 1

    def after_careful_record(self, st: PartitionState) -> bool:
        return True


def producing(batch_bytes: int, extra: str = "replication.producers = 2\n") -> tuple[Producing, PartitionState,
                                                                                      FakeProducer]:
    producer = FakeProducer()
    st = PartitionState("t", 0, "dc1.t", 0, False, producer=producer)
    f = flow(extra)
    one_batch = choose_producers(f, 0.0).one_batch_per_partition  # 0.0: auto chooses as on loopback
    p = Producing(f, lambda _: None, None, Hooks(), batch_bytes, one_batch)  # type: ignore[arg-type]
    return p, st, producer


def test_auto_is_on_with_several_producers_at_least_once_only() -> None:
    def on(extra: str, round_trip_s: float = 0.0) -> bool:
        return choose_producers(flow(extra), round_trip_s).one_batch_per_partition

    assert on("replication.producers = 2\n") and not on("")
    assert on("", round_trip_s=0.08)  # auto chose 4 producers over a WAN
    assert not on("replication.producers = 2\nexactly.once.enabled = true\n")
    assert on("replication.one.batch.per.partition = true\n")
    assert not on("replication.producers = 4\nreplication.one.batch.per.partition = false\n")
    with pytest.raises(ConfigError) as err:
        flow("replication.one.batch.per.partition = sometimes\n")
    assert "replication.one.batch.per.partition" in str(err.value) and "line 6" in str(err.value)


def test_a_piece_fits_the_budget_as_librdkafka_counts_and_holds_at_least_one_record() -> None:
    run = [Rec(i, 100) for i in range(10)]
    one = 100 + RECORD_OVERHEAD
    assert _fitting(run, 10 * one) == (10, 10 * one)
    assert _fitting(run, 3 * one + 1) == (3, 3 * one)
    assert _fitting([Rec(0, 5000)], 1000) == (1, 5000 + RECORD_OVERHEAD)  # larger than the budget: alone
    assert _fitting([Rec(0, 5000)], 1000, at_least_one=False) == (0, 0)
    with_headers = [Rec(i, 100, [("origin", b"dc1")]) for i in range(4)]
    assert _fitting(with_headers, 4 * one) == (3, 3 * (one + 10 + 6 + 3))  # headers count too


def test_records_wait_for_the_batch_in_flight_then_go_in_order_one_request_at_a_time() -> None:
    p, st, producer = producing(REQUEST_SLACK + 6 * PER)  # six records a request
    tagged = [Rec(i, SIZE) for i in range(15)]
    p.produce_run(st, tagged[:8])  # type: ignore[arg-type]
    assert len(producer.calls) == 6 and len(st.parked) == 2 and st.next == 6 and st.in_flight_full
    p.produce_run(st, tagged[8:])  # type: ignore[arg-type]
    assert len(producer.calls) == 6 and len(st.parked) == 9, "produced past a batch in flight"
    assert p.parked_records() == 9
    assert p.release() == 0
    assert len(producer.calls) == 6, "released before the acknowledgement"
    producer.deliver()
    assert not st.in_flight_full
    assert p.release() == 1
    assert len(producer.calls) == 12 and len(st.parked) == 3 and st.next == 12
    producer.deliver()
    p.release()
    assert len(producer.calls) == 15 and not st.parked and not p.parked and st.next == 15
    produced = [call[1] for call in producer.calls]
    assert produced == [r.value() for r in tagged]
    assert [b.first for b in st.pending] == [0, 6, 12] and [b.count for b in st.pending] == [6, 6, 3]


def test_a_few_records_in_flight_do_not_hold_the_next_ones() -> None:
    """librdkafka lets a partition with fewer than 5 records in flight send another batch: so does the mirror
    (a light load keeps several small batches in flight, as without parking)."""
    p, st, producer = producing(REQUEST_SLACK + 100 * PER)
    p.produce_run(st, [Rec(0, SIZE), Rec(1, SIZE)])  # type: ignore[arg-type]
    p.produce_run(st, [Rec(2, SIZE), Rec(3, SIZE)])  # type: ignore[arg-type]
    assert len(producer.calls) == 4 and not st.parked and not st.in_flight_full
    p.produce_run(st, [Rec(4, SIZE)])  # type: ignore[arg-type]
    assert len(producer.calls) == 5 and st.in_flight_full
    p.produce_run(st, [Rec(5, SIZE)])  # type: ignore[arg-type]
    assert len(producer.calls) == 5 and len(st.parked) == 1


def test_a_rewind_or_a_release_drops_what_is_parked() -> None:
    p, st, producer = producing(REQUEST_SLACK + 5 * PER)
    p.produce_run(st, [Rec(i, SIZE) for i in range(8)])  # type: ignore[arg-type]
    assert len(st.parked) == 3
    st.drop_unsent()  # what acks.py does on a rewind or pause, and on losing the partition
    producer.deliver()
    p.release()
    assert len(producer.calls) == 5 and not p.parked and p.parked_records() == 0


def test_off_hands_everything_over_at_once() -> None:
    p, st, producer = producing(REQUEST_SLACK + 2 * PER, extra="")
    p.produce_run(st, [Rec(i, SIZE) for i in range(5)])  # type: ignore[arg-type]
    p.produce_run(st, [Rec(i, SIZE) for i in range(5, 9)])  # type: ignore[arg-type]
    assert len(producer.calls) == 9 and not st.parked


class Positions:
    def __init__(self, offset: int) -> None:
        self.offset = offset
        self.asked = 0

    def position(self, tps: list[Any]) -> list[Any]:
        self.asked += 1
        return [type("TP", (), {"offset": self.offset})() for _ in tps]


def test_a_partition_with_parked_records_is_not_idle() -> None:
    """advance_idle moves an idle partition's progress to the consumer's position: with records parked
    that position is past records not yet copied, so it must not."""
    p, st, producer = producing(REQUEST_SLACK + 5 * PER)
    p.produce_run(st, [Rec(i, SIZE) for i in range(8)])  # type: ignore[arg-type]
    producer.deliver()
    st.pending.clear()
    st.acked = st.next = 5  # the first batch landed; three records parked
    consumer = Positions(5)
    advance_idle(consumer, [st], None)  # type: ignore[arg-type]
    assert st.acked == 5 and consumer.asked == 0


def test_parked_records_come_off_the_front_in_order_and_stop_holding_memory() -> None:
    parked = Parked()
    parked.extend(list(range(10_000)))
    taken: list[int] = []
    while parked:
        taken.extend(parked.take(960))
        assert len(parked.records) <= 10_000 and (parked.start <= 4096 or 2 * parked.start <= len(parked.records))
    assert taken == list(range(10_000)) and parked.records == [] and parked.start == 0


def test_a_small_batch_size_still_takes_several_records_a_piece() -> None:
    p, st, producer = producing(2000)  # batch.size 2,000: the request's slack is a quarter of it, not 4 KiB
    p.produce_run(st, [Rec(i, 100) for i in range(20)])  # type: ignore[arg-type]
    assert len(producer.calls) == 1500 // (100 + RECORD_OVERHEAD) and len(st.parked) == 20 - len(producer.calls)


def test_the_loops_wait_while_parked_grows_only_while_nothing_moves() -> None:
    wait = PARKED_WAIT_S
    for _ in range(10):  # records parked, nothing released (a target that does not answer): up to the idle wait
        wait = next_parked_wait(wait, parked=100, released=0)
    assert wait == IDLE_WAIT_S
    assert next_parked_wait(wait, parked=100, released=3) == PARKED_WAIT_S  # an acknowledgement released some
    # Nothing parked: short again, so the first records parked later are not served 20 ms late.
    assert next_parked_wait(IDLE_WAIT_S, parked=0, released=0) == PARKED_WAIT_S


def test_a_remote_topic_that_takes_less_than_a_librdkafka_batch_gets_pieces_of_its_limit() -> None:
    """librdkafka does not split a batch the target refuses as too large: a remote topic whose max.message.bytes
    is below the producer's batch limit has its partitions' records handed over a batch at a time, cut to it."""
    p, st, producer = producing(1 << 20, extra="")  # one producer on loopback: no parking of its own
    p.produce_run(st, [Rec(i, SIZE) for i in range(5)])  # type: ignore[arg-type]
    assert len(producer.calls) == 5 and not st.parked, "no limit known yet: everything handed over"
    producer.deliver()
    st.pending.clear()
    p.topic_limits.set({"dc1.t": 65536, "dc1.big": 2 << 20})
    assert p.topic_limits.budget("dc1.big") is None and p.topic_limits.budget("dc1.other") is None
    assert p.topic_limits.budget("dc1.t") == 65536 - REQUEST_SLACK
    p.produce_run(st, [Rec(i, SIZE) for i in range(5, 105)])  # type: ignore[arg-type]
    per_piece = (65536 - REQUEST_SLACK) // PER
    assert len(producer.calls) == 5 + per_piece and len(st.parked) == 100 - per_piece
    producer.deliver()
    assert p.release() == 1 and len(producer.calls) == 5 + 2 * per_piece
    sent = [call[1] for call in producer.calls]
    assert sent == [Rec(i, SIZE).value() for i in range(5 + 2 * per_piece)]


def test_records_in_flight_count_against_the_limit() -> None:
    """A few records in flight do not hold the next ones (librdkafka may send another batch), but librdkafka
    may put them in one batch with the next: the piece handed over beside them is cut so that both fit."""
    p, st, producer = producing(1 << 20, extra="")
    p.topic_limits.set({"dc1.t": 5 * PER + REQUEST_SLACK})  # five records a batch
    p.produce_run(st, [Rec(0, SIZE), Rec(1, SIZE)])  # type: ignore[arg-type]
    assert len(producer.calls) == 2 and not st.in_flight_full
    p.produce_run(st, [Rec(i, SIZE) for i in range(2, 8)])  # type: ignore[arg-type]
    assert len(producer.calls) == 5 and len(st.parked) == 3, "three more fit beside the two in flight"
    p2, st2, producer2 = producing(1 << 20, extra="")
    p2.topic_limits.set({"dc1.t": 2 * PER + REQUEST_SLACK // 2 + 100})  # a quarter at most is slack: 2 records
    p2.produce_run(st2, [Rec(0, SIZE), Rec(1, SIZE)])  # type: ignore[arg-type]
    p2.produce_run(st2, [Rec(2, SIZE)])  # type: ignore[arg-type]
    assert len(producer2.calls) == 2 and len(st2.parked) == 1, "a record that does not fit beside them waits"
    assert p2.release() == 0
    producer2.deliver()
    assert p2.release() == 1 and len(producer2.calls) == 3


def test_records_parked_under_a_limit_go_before_newer_ones_once_the_limit_is_raised() -> None:
    p, st, producer = producing(1 << 20, extra="")
    p.topic_limits.set({"dc1.t": 2 * PER + REQUEST_SLACK})
    p.produce_run(st, [Rec(i, SIZE) for i in range(6)])  # type: ignore[arg-type]
    assert len(producer.calls) == 2 and len(st.parked) == 4
    p.topic_limits.set({"dc1.t": 2 << 20})  # the topic takes more now: no budget any more
    producer.deliver()
    p.produce_run(st, [Rec(i, SIZE) for i in range(6, 9)])  # type: ignore[arg-type]
    assert len(producer.calls) == 2, "newer records went ahead of the parked ones"
    p.release()
    assert [call[1] for call in producer.calls] == [Rec(i, SIZE).value() for i in range(9)]


def test_parked_batches_grow_to_the_topics_limit_and_stay_at_a_brokers_default_until_it_is_known() -> None:
    p, _, _ = producing(8 << 20)  # parked producers: librdkafka's limit raised to 8 MiB (PARKED_PRODUCER_DEFAULTS)
    assert p.topic_limits.budget("dc1.x") == 1048588 - REQUEST_SLACK, "unknown: what a broker takes by default"
    p.topic_limits.set({"dc1.x": 4_000_000, "dc1.y": 16 << 20, "dc1.z": 65536})
    assert p.topic_limits.budget("dc1.x") == 4_000_000 - REQUEST_SLACK
    assert p.topic_limits.budget("dc1.y") == (8 << 20) - REQUEST_SLACK, "never past librdkafka's own limit"
    assert p.topic_limits.budget("dc1.z") == 65536 - REQUEST_SLACK


def test_headers_of_records_in_flight_count_against_the_limit() -> None:
    """librdkafka counts a record's headers: records in flight with big headers leave less room beside them."""
    p, st, producer = producing(1 << 20, extra="")
    heavy = [("trace", b"t" * 2000)]
    heavy_per = PER + 10 + 5 + 2000  # HEADER_OVERHEAD, the name, the value
    # Room for two heavy and two plain records, less one byte: the second plain record does not fit.
    p.topic_limits.set({"dc1.t": 2 * heavy_per + 2 * PER - 1 + REQUEST_SLACK})
    p.produce_run(st, [Rec(0, SIZE, heavy), Rec(1, SIZE, heavy)])  # type: ignore[arg-type]
    assert len(producer.calls) == 2 and st.pending[-1].wire == 2 * heavy_per
    p.produce_run(st, [Rec(i, SIZE) for i in range(2, 6)])  # type: ignore[arg-type]
    assert len(producer.calls) == 3 and len(st.parked) == 3, "without the headers two plain records would fit"
