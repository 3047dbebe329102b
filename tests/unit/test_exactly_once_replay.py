"""How exactly-once replays a partition after a failure (pure logic of replication.txn_failures, and what
Acks.collect does with a failed batch of a transactional producer)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from mirror_core.errors import MirrorError
from mirror_core.replication.acks import Acks
from mirror_core.replication.batch import Batch, PartitionState
from mirror_core.replication.exactly_once import SlotManager
from mirror_core.replication.produce import Producing
from mirror_core.replication.txn_failures import TransientFailures, cause
from tests.unit.test_one_batch_per_partition import Hooks, flow


def test_a_transient_failure_replays_in_batches_once_then_carefully_if_it_fails_again_at_the_same_place() -> None:
    """Careful mode (a transaction per record) for a whole read was the price of every purged batch; but a record
    refused in the middle of a batch may surface only as such a failure, so a second one there goes careful."""
    failures = TransientFailures()
    st, other = PartitionState("t", 0, "dc1.t", 0, False), PartitionState("t", 1, "dc1.t", 0, False)
    assert not failures.again(st, 100)
    assert not failures.again(other, 100), "another partition"
    assert failures.again(st, 100), "again before moving past it"
    assert not failures.again(st, 250), "moved on since"


def failed(err: int, first: int = 0, reported: bool = True) -> Batch:
    b = Batch(0, first)
    b.count, b.pending = 100, 2 if reported else 1
    b.on_first(KafkaError(err), None)
    return b


def test_the_batch_the_target_refused_is_the_cause_whichever_of_the_slot_comes_back_first() -> None:
    """A refusal dooms the slot's transaction: librdkafka purges what its producer holds, so another partition's
    batch may come back (purged) first; acting on it would replay the refused partition without reading its limit
    again, and a second purge there would send it to careful mode."""
    p0, p1 = PartitionState("t", 0, "dc1.t", 0, False, slot=3), PartitionState("t", 1, "dc1.t", 0, False, slot=3)
    purged, refused = failed(KafkaError._PURGE_QUEUE), failed(KafkaError.MSG_SIZE_TOO_LARGE)
    p0.pending.append(purged)
    p1.pending.extend([refused, failed(KafkaError._PURGE_QUEUE, 100)])
    assert cause([p0, p1], p0, purged) == (p1, refused)
    assert cause([p0, p1], p1, refused) == (p1, refused)
    p1.pending.clear()
    assert cause([p0, p1], p0, purged) == (p0, purged), "no refusal anywhere: the batch itself"
    # No refusal, but a batch that failed otherwise than purged (a sequence gap, a timeout): that one is the cause,
    # not the partition whose batch was only purged with it (it would get the backoff, then careful mode).
    timed_out = failed(KafkaError._MSG_TIMED_OUT)
    p1.pending.append(timed_out)
    assert cause([p0, p1], p0, purged) == (p1, timed_out)
    contiguous_not = Batch(0, 0)
    assert cause([p0, p1], p0, contiguous_not) == (p0, contiguous_not), "offsets not contiguous: a cause itself"


class HeldProducer:
    """A transactional producer whose transaction failed: what it queued again after the failure is held until
    purged (librdkafka keeps it until message.timeout.ms)."""

    def __init__(self, held: Batch) -> None:
        self.held = held
        self.purges: list[dict[str, Any]] = []

    def purge(self, **flags: Any) -> None:
        self.purges.append(flags)
        self.held.on_last(KafkaError(KafkaError._PURGE_QUEUE), None)  # reported at the next poll


def test_a_failed_batch_of_a_transactional_producer_has_what_its_producer_holds_purged_once() -> None:
    handled: list[Batch] = []
    acks = Acks("f", None, None, lambda: None)  # type: ignore[arg-type]
    acks.on_failure = lambda st, b: handled.append(b)
    b = failed(KafkaError.MSG_SIZE_TOO_LARGE)
    producer = HeldProducer(b)
    st = PartitionState("t", 0, "dc1.t", 0, False, producer=producer, slot=3)
    st.pending.append(b)
    acks.active.add(st)
    acks.collect()
    # (blocking=True is librdkafka's NON_BLOCKING: confluent-kafka inverts the flag, clients.purge_unsent)
    assert producer.purges == [{"in_queue": True, "in_flight": False, "blocking": True}] and handled == [], \
        "purged at once, handled once its other report is in"
    acks.collect()
    assert handled == [b] and b.err is not None and b.err.code() == KafkaError.MSG_SIZE_TOO_LARGE
    assert len(producer.purges) == 1

    at_least_once = failed(KafkaError.MSG_SIZE_TOO_LARGE)
    plain = PartitionState("t", 1, "dc1.t", 0, False, producer=HeldProducer(at_least_once))
    plain.pending.append(at_least_once)
    acks.active.add(plain)
    acks.collect()
    assert plain.producer.purges == [], "at-least-once: nothing is doomed, the rest of the batch may land"


class Refusing:
    """A transactional producer that takes ``k`` records and refuses the next with ``code``; no flush (exactly-once
    must not call one: a producer whose transaction failed holds what it queued until message.timeout.ms)."""

    def __init__(self, k: int, code: int) -> None:
        self.k, self.code, self.taken = k, code, 0

    def produce(self, *args: Any, **kwargs: Any) -> None:
        if self.taken == self.k:
            raise KafkaException(KafkaError(self.code))
        self.taken += 1


class Record:
    def __init__(self, offset: int) -> None:
        self._offset = offset

    def offset(self) -> int:
        return self._offset

    def value(self) -> bytes:
        return b"v"

    def key(self) -> None:
        return None

    def timestamp(self) -> tuple[int, int]:
        return (1, 1000)

    def headers(self) -> None:
        return None


def test_a_record_produce_refuses_mid_batch_exactly_once_pauses_right_there_without_a_flush() -> None:
    """Too large for the producer (MSG_SIZE_TOO_LARGE from produce()): the prefix stays in the transaction, the
    refused record is the cause the slot acts on (paused at its offset, not replayed record by record from the
    committed position); refused because the transaction already failed (_STATE): the prefix fails now."""
    for code, prefix_failed in ((KafkaError.MSG_SIZE_TOO_LARGE, False), (KafkaError._STATE, True)):
        st = PartitionState("t", 0, "dc1.t", 0, False, producer=Refusing(3, code), slot=0)
        p = Producing(flow(), lambda _: None, None, Hooks())  # type: ignore[arg-type]
        p.produce_run(st, [Record(o) for o in range(10, 20)])  # type: ignore[list-item]
        prefix = st.pending[0]
        assert prefix.count == 3 and (prefix.err is not None) == prefix_failed, code
        if not prefix_failed:
            refused = st.pending[1]
            assert len(st.pending) == 2 and refused.first == 13 and refused.done and st.careful
            assert cause([st], st, prefix) == (st, refused)
        else:
            assert len(st.pending) == 1


class Listing:
    def list_topics(self, topic: str, timeout: float) -> Any:
        return SimpleNamespace(topics={topic: SimpleNamespace(partitions=dict.fromkeys(range(8)))})


def test_a_slot_beyond_the_count_assigned_while_running_is_refused_before_its_transactional_id_is_taken() -> None:
    """Another instance grew the slot topic (it counts more slots): this one would map partitions to other
    transactional ids than it, so neither fences the other. Refused, naming both counts."""
    slots = SlotManager.__new__(SlotManager)
    slots.slots, slots.topic, slots.target = 4, "mirror-core.slots.dc1-dc2.internal", SimpleNamespace(alias="dc2")
    with pytest.raises(MirrorError) as exc:
        slots._on_assign(Listing(), [TopicPartition(slots.topic, 1), TopicPartition(slots.topic, 6)])  # type: ignore
    assert "exactly.once.slots = 4, but the slot topic mirror-core.slots.dc1-dc2.internal on dc2 has 8" in \
        str(exc.value)
