"""The batch sender's ordering rules (mirror_core/wire/sender.py), driven without a broker: what it may put in
flight for a partition, and what it sends again after a lost connection (the same batches, the same sequences)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from mirror_core.wire.metadata import Brokers
from mirror_core.wire.sender import NOT_SENT, BatchSender, Outgoing
from tests.unit.record_batches import batch

TP = ("r", 0)


@pytest.fixture
def sender() -> Iterator[BatchSender]:
    s = BatchSender(Brokers("127.0.0.1:1", {}, "dc2"))
    s.producer_id, s.epoch, s._renew = 7, 0, False  # as if InitProducerId had answered
    s._leaders.leaders[TP] = 1  # broker 1 leads the partition
    try:
        yield s
        # What a request is taken from: exactly the partitions with queued batches, whatever each test did to them
        assert set(s._queued) == {tp for tp, p in s._parts.items() if p.queue}, (s._queued, s._parts)
    finally:
        s.close()


def _queue(sender: BatchSender, *counts: int) -> list[Outgoing]:
    batches = [Outgoing(*TP, batch(0, n - 1)) for n in counts]  # n records each
    sender.send(batches)
    return batches


def _land(sender: BatchSender, b: Outgoing) -> None:
    """``b`` goes to broker 1 and lands at offset 0: the broker knows the producer now."""
    with sender._cond:
        assert sender._take(1, 0) == {TP: b}
    sender._answered({TP: b}, {TP: (0, 0, None)})


def test_a_partition_has_one_batch_in_flight_until_the_broker_knows_the_producer(sender: BatchSender) -> None:
    first, second, third = _queue(sender, 3, 2, 4)
    with sender._cond:
        assert sender._take(1, 0) == {TP: first} and first.sequence == 0
        assert sender._take(1, 0) == {}  # the broker would take any first sequence from an unknown producer id
        assert sender._take(2, 0) == {}  # another broker does not lead it
    sender._answered({TP: first}, {TP: (0, 100, None)})
    with sender._cond:
        assert sender._take(1, 0) == {TP: second} and second.sequence == 3
        assert sender._take(1, 0) == {TP: third} and third.sequence == 5  # pipelined now: sequences are checked
    landed = sender.poll(0)
    assert [(r.batch, r.error, r.base_offset) for r in landed] == [(first, 0, 100)]


def test_a_lost_connection_sends_the_same_batches_again_in_order_with_the_same_sequences(sender: BatchSender) -> None:
    first, second, third = _queue(sender, 3, 2, 4)
    _land(sender, first)
    with sender._cond:
        sender._take(1, 0)
        sender._take(1, 0)
    sender._answered({TP: second}, {})  # the connection was lost: outcome unknown
    with sender._cond:
        assert sender._take(1, 0) == {}  # the third is still in flight: it answers first
    sender._answered({TP: third}, {TP: (45, -1, None)})  # OUT_OF_ORDER_SEQUENCE behind the lost one
    assert sender.retried == 2 and not sender._renew  # behind a failure, not a broker that forgot the producer
    assert TP not in sender._leaders.leaders  # a lost connection: the leader is looked up again
    sender._leaders.leaders[TP] = 1
    with sender._cond:
        assert sender._take(1, 0) == {TP: second} and second.sequence == 3
        assert sender._take(1, 0) == {TP: third} and third.sequence == 5
    assert [r.batch for r in sender.poll(0)] == [first]  # nothing reported for what is sent again


def test_a_refusal_is_the_callers_and_voids_the_partitions_later_batches_until_it_rewinds(sender: BatchSender) -> None:
    first, second, third = _queue(sender, 1, 1, 1)
    with sender._cond:
        sender._take(1, 0)
    sender._answered({TP: first}, {TP: (10, -1, "too big")})  # MESSAGE_TOO_LARGE
    assert [(r.batch, r.error) for r in sender.poll(0)] == [(first, 10), (second, NOT_SENT), (third, NOT_SENT)]
    # Nothing of the partition waits to be sent again: the sequences are the broker's, the producer id stays
    # (a new one would write other partitions' batches waiting to be sent again a second time).
    assert not sender._renew
    late = Outgoing(*TP, batch(0, 0))
    sender.send([late])
    assert [(r.batch, r.error) for r in sender.poll(0)] == [(late, NOT_SENT)]
    sender.rewind(TP)
    sender.send([first])
    with sender._cond:
        assert sender._take(1, 0) == {TP: first} and first.sequence == 0


def test_an_unknown_outcome_of_a_batch_voided_by_a_rewind_takes_a_new_producer_id(sender: BatchSender) -> None:
    first, second, third = _queue(sender, 1, 1, 1)
    _land(sender, first)
    sender.rewind(TP)  # nothing failed: a rewind without a failure changes nothing
    with sender._cond:
        sender._take(1, 0)
        sender._take(1, 0)
    sender._answered({TP: second}, {TP: (10, -1, None)})
    sender._renew = False  # (as if renewed already)
    sender.rewind(TP)
    sender._answered({TP: third}, {})  # void now; it may have landed: its sequence must never be reused
    assert sender._renew
    assert [(r.batch, r.error) for r in sender.poll(0)][-1] == (third, NOT_SENT)


def test_a_refused_producer_id_is_the_callers_and_not_asked_again_until_more_is_sent(sender: BatchSender) -> None:
    first, second = _queue(sender, 1, 1)
    sender._renew = True
    assert sender._claim_renewal()
    sender._renewing = False
    sender._refused_producer_id(31)  # CLUSTER_AUTHORIZATION_FAILED
    got = sender.poll(0)
    assert [(r.batch, r.error) for r in got] == [(first, 31), (second, NOT_SENT)]
    assert got[0].describe() == "r[0]: CLUSTER_AUTHORIZATION_FAILED: no producer id: CLUSTER_AUTHORIZATION_FAILED"
    assert not sender._claim_renewal()  # nothing waits: no request, no line, until the caller sends again
    sender.rewind(TP)
    _queue(sender, 1)
    assert sender._claim_renewal()


def test_batches_in_flight_to_a_broker_that_no_longer_leads_answer_before_the_new_leader_gets_more(
        sender: BatchSender) -> None:
    first, second, third = _queue(sender, 1, 1, 1)
    _land(sender, first)
    with sender._cond:
        sender._take(1, 0)
        sender._leaders.leaders[TP] = 2  # a metadata refresh: broker 2 leads it now
        assert sender._take(2, 0) == {}  # the second, in flight to broker 1, answers first
    sender._answered({TP: second}, {TP: (6, -1, None)})  # NOT_LEADER_OR_FOLLOWER
    sender._leaders.leaders[TP] = 2
    with sender._cond:
        assert sender._take(2, 0) == {TP: second} and second.sequence == 1
        assert sender._take(2, 0) == {TP: third} and third.sequence == 2


def test_a_batch_no_leader_takes_fails_after_the_delivery_timeout(sender: BatchSender) -> None:
    sender._leaders.leaders.clear()  # the leader is unknown and stays so
    first, second = _queue(sender, 1, 1)
    sender._expire(first.handed + sender.delivery_timeout_s - 1)
    assert sender.poll(0) == []
    sender._expire(first.handed + sender.delivery_timeout_s + 1)
    got = sender.poll(0)
    assert [(r.batch, r.error) for r in got] == [(first, 7), (second, NOT_SENT)]
    assert "no reachable leader took it" in got[0].describe()


def test_a_retried_batch_that_times_out_takes_a_new_producer_id_it_may_have_landed(sender: BatchSender) -> None:
    (first,) = _queue(sender, 1)
    with sender._cond:
        sender._take(1, 0)
    first.first_sent -= sender.delivery_timeout_s + 1
    sender._answered({TP: first}, {})  # the connection was lost, long after it was first sent
    assert [(r.batch, r.error) for r in sender.poll(0)] == [(first, -101)]
    assert sender._renew


def test_a_batch_sent_before_that_no_leader_takes_in_time_takes_a_new_producer_id(sender: BatchSender) -> None:
    """A lost connection sends it back to the queue (it may have landed); its leader then stays unknown until the
    delivery timeout: the next batch after the rewind must not reuse its sequence under the same producer id."""
    first, second = _queue(sender, 1, 1)
    _land(sender, first)
    with sender._cond:
        assert sender._take(1, 0) == {TP: second}
    sender._answered({TP: second}, {})  # connection lost: outcome unknown, back to the queue
    sender.poll(0)
    assert not sender._renew and second.first_sent  # the precondition: it was sent, and no renewal yet
    sender._leaders.leaders.clear()
    sender._expire(second.handed + sender.delivery_timeout_s + 1)
    assert [(r.batch, r.error) for r in sender.poll(0)] == [(second, 7)]
    assert sender._renew


def test_an_answer_behind_a_returned_batch_past_the_timeout_is_a_failure_not_a_landing(sender: BatchSender) -> None:
    first, second, third = _queue(sender, 1, 1, 1)
    _land(sender, first)
    with sender._cond:
        assert sender._take(1, 0) == {TP: second}
        assert sender._take(1, 0) == {TP: third}
    sender._answered({TP: second}, {TP: (6, -1, None)})  # NOT_LEADER_OR_FOLLOWER: sent again later
    third.first_sent -= sender.delivery_timeout_s + 1
    sender._answered({TP: third}, {TP: (0, 5, None)})  # written, behind a batch to be sent again, too late
    got = [(r.batch, r.error, r.base_offset) for r in sender.poll(0)]
    assert (third, 0, -1) not in got and got[0][0] is first and (third, 7, -1) in got, got


def test_with_two_connections_a_partition_always_goes_on_the_same_one_and_each_carries_half() -> None:
    """BatchSender(connections=2): a broker handles one request per connection at a time, so its partitions are
    dealt over two in turn; each partition's batches all go on one of them (in order), whatever is waiting."""
    s = BatchSender(Brokers("127.0.0.1:1", {}, "dc2"), connections=2)
    try:
        s.producer_id, s.epoch, s._renew = 7, 0, False
        tps = [("r", p) for p in range(16)]
        for tp in tps:
            s._leaders.leaders[tp] = 1
            s.send([Outgoing(*tp, batch(0, 1)), Outgoing(*tp, batch(0, 1))])
        with s._cond:
            lanes = [set(s._take(1, lane)) for lane in (0, 1)]
            assert len(lanes[0]) == len(lanes[1]) == 8 and lanes[0] | lanes[1] == set(tps)
            for tp in tps:  # known to the broker now: the second batch may go too, on the same connection only
                s._parts[tp].known = True
            again = [set(s._take(1, lane)) for lane in (0, 1)]
        assert again == lanes
    finally:
        s.close()


def test_a_partition_whose_leader_moved_is_dealt_a_connection_of_the_new_one_once_its_old_ones_answered(
        sender: BatchSender) -> None:
    first, second = _queue(sender, 2, 2)
    with sender._cond:
        assert sender._take(1, 0) == {TP: first}
        sender._leaders.leaders[TP] = 2
        assert sender._take(2, 0) == {}  # the first is still in flight to broker 1: it answers first
    sender._answered({TP: first}, {TP: (0, 0, None)})
    with sender._cond:
        assert sender._take(2, 0) == {TP: second} and sender._parts[TP].route == (2, 0)


def test_a_brokers_connections_are_started_once_each_and_none_is_refused() -> None:
    s = BatchSender(Brokers("127.0.0.1:1", {}, "dc2"), connections=3)
    try:
        started: list[tuple[int, int]] = []
        s._produce_to = lambda node, lane: started.append((node, lane))  # type: ignore[method-assign]
        s._start(1)
        s._start(1)  # (a lookup round that starts the broker again after a start failed part way)
        for _ in range(50):
            if len(started) == 3:
                break
            time.sleep(0.01)
        assert sorted(started) == [(1, 0), (1, 1), (1, 2)]
    finally:
        s.close()
    with pytest.raises(ValueError):
        BatchSender(Brokers("127.0.0.1:1", {}, "dc2"), connections=0)


class SlowConnection:
    """A broker across a WAN: it takes every request, and answers none for a long while."""

    where, carried = "dc2 broker 1", True

    def __init__(self) -> None:
        self.requests = 0

    def expiring(self) -> bool:
        return False

    def version(self, api: int, spoken: tuple[int, ...]) -> int:
        return spoken[0]

    def send(self, api: int, version: int, body: object) -> None:
        self.requests += 1

    def answer_ready(self, timeout: float) -> bool:
        time.sleep(timeout)
        return False

    def receive(self, *args: object, **kwargs: object) -> memoryview:
        time.sleep(5)  # (a blocking read: the answer to the oldest request, a round trip away)
        raise OSError("timed out")

    def close(self) -> None:
        pass


def test_batches_handed_over_while_a_request_is_out_go_before_its_answer() -> None:
    """A connection with room in its window sends what is handed over meanwhile: one blocked on the oldest answer
    sent nothing new for a round trip (across a WAN, the batches then queued went out together, late)."""
    conn = SlowConnection()
    brokers = Brokers("127.0.0.1:1", {}, "dc2")
    brokers.connect = lambda node, wait_s=0.0: conn  # type: ignore[assignment,method-assign,return-value]
    s = BatchSender(brokers)
    try:
        s.producer_id, s.epoch, s._renew = 7, 0, False
        s._leaders.leaders.update({("r", 0): 1, ("r", 1): 1})
        s._started.add((1, 0))  # (the one worker is this test's)
        worker = threading.Thread(target=s._produce_to, args=(1, 0), daemon=True)
        worker.start()
        s.send([Outgoing("r", 0, batch(0, 1))])
        deadline = time.monotonic() + 2
        while conn.requests < 1 and time.monotonic() < deadline:
            time.sleep(0.005)
        assert conn.requests == 1  # the precondition: a request out, unanswered
        s.send([Outgoing("r", 1, batch(0, 1))])
        deadline = time.monotonic() + 2
        while conn.requests < 2 and time.monotonic() < deadline:
            time.sleep(0.005)
        assert conn.requests == 2, "the second batch waited for the first one's answer"
    finally:
        s.close()
