"""How exactly-once replays a partition after a failure (pure logic of replication.txn_failures, and what
Acks.collect does with a failed batch of a transactional producer)."""

from __future__ import annotations

from typing import Any

from confluent_kafka import KafkaError

from mirror_core.replication.acks import Acks
from mirror_core.replication.batch import Batch, PartitionState
from mirror_core.replication.txn_failures import TransientFailures, cause


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
    assert producer.purges == [{"in_queue": True, "in_flight": False, "blocking": False}] and handled == [], \
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
