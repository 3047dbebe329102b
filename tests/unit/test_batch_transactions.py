"""The mirror's own records in an exactly-once transaction on the batches path (replication/batch_transactions.py):
what commit.py produces is sent as batches of at most OWN_BATCH_BYTES per partition, every record once, in order."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, cast

from mirror_core.replication.batch_transactions import OWN_BATCH_BYTES, SlotProducer
from mirror_core.wire.metadata import Brokers
from mirror_core.wire.recode import contiguous_copy
from mirror_core.wire.records import record_count
from mirror_core.wire.sender import Outgoing


def test_the_mirrors_own_records_go_in_bounded_batches_each_once_in_order() -> None:
    producer = SlotProducer(Brokers("127.0.0.1:1", {}, "dc2"), "mirror-core.dc1-dc2.slot-0", lambda _: None, 30.0)
    sent: list[Outgoing] = []
    producer.send = sent.extend  # type: ignore[method-assign]  # (no broker: what would be sent is kept)
    for i in range(12_000):
        producer.produce("progress", value=b"v%06d" % i + b"x" * 100, key=b"k%06d" % i, partition=i % 2)
    assert len(producer) == 12_000
    assert producer.flush(0) == 0 and not producer._own
    assert len(sent) > 2, "more than one batch per partition: the records outgrow one"
    assert all(len(b.data) <= OWN_BATCH_BYTES + 4096 for b in sent)
    for partition in (0, 1):
        mine = [b for b in sent if b.partition == partition]
        assert sum(record_count(b.data) for b in mine) == 6_000
        # Each batch is a valid v2 batch (contiguous_copy parses every record and checks the layout).
        assert all(contiguous_copy(b.data, 0)[0] for b in mine)


class _Sender:
    """Adds the partitions of what the slot hands over to its transaction, as the batch sender does, and keeps the
    batches (no broker)."""

    def __init__(self, add: Callable[[Iterable[tuple[str, int]]], None]) -> None:
        self.add = add
        self.sent: list[Outgoing] = []

    def send(self, batches: list[Outgoing]) -> None:
        self.add((b.topic, b.partition) for b in batches)
        self.sent.extend(batches)

    def use_producer(self, producer_id: int, epoch: int) -> None:
        pass

    def rewind(self, tp: tuple[str, int]) -> None:
        pass

    def poll(self, timeout: float) -> list[object]:
        return []


def test_a_transaction_adds_its_first_batches_partitions_and_where_its_own_records_went_last_in_one_request() -> None:
    producer = SlotProducer(Brokers("127.0.0.1:1", {}, "dc2"), "mirror-core.dc1-dc2.slot-0", lambda _: None, 30.0)
    producer.sender.close()
    asked: list[set[tuple[str, int]]] = []

    def add(tps: Iterable[tuple[str, int]]) -> None:  # as the coordinator's: only what the transaction lacks
        new = set(tps) - producer.txn.partitions
        if new:
            asked.append(new)
            producer.txn.partitions |= new

    producer.txn.add = add  # type: ignore[method-assign]
    producer.sender = cast(Any, _Sender(add))
    producer.txn.init = lambda: (7, 0)  # type: ignore[method-assign]
    data = [Outgoing("dc1.t", 0, b"", token=None), Outgoing("dc1.t", 1, b"", token=None)]
    producer.send(data)
    producer.produce("progress", value=b"v", key=b"k", partition=3)
    producer.flush(0)
    assert asked == [{("dc1.t", 0), ("dc1.t", 1)}, {("progress", 3)}]
    producer.txn.partitions.clear()  # committed
    asked.clear()
    producer.send(data[:1])
    producer.produce("progress", value=b"v", key=b"k", partition=3)
    producer.flush(0)
    assert asked == [{("dc1.t", 0), ("progress", 3)}], "one request for the data and the progress partitions"
    producer.txn.partitions.clear()
    asked.clear()
    producer.init_transactions(1.0)  # a new epoch (after an abort): a partition refused is not asked for again
    producer.send(data[:1])
    assert asked == [{("dc1.t", 0)}]


def test_a_refused_add_fails_only_the_partition_refused_and_the_mirrors_own_records_say_so() -> None:
    """One AddPartitionsToTxn adds all its partitions or none: refused, each partition is asked for alone, so that
    only the refused one's batches fail, with its reason; the mirror's own records refused call their callbacks."""
    from mirror_core.wire.errors import WireError
    from mirror_core.wire.sender import Sent

    failed: list[Sent] = []
    producer = SlotProducer(Brokers("127.0.0.1:1", {}, "dc2"), "mirror-core.dc1-dc2.slot-0", failed.extend, 30.0)
    producer.sender.close()

    def add(tps: Iterable[tuple[str, int]]) -> None:
        tps = set(tps)
        if ("gone", 0) in tps or ("progress", 3) in tps:
            raise WireError("the coordinator refused: UNKNOWN_TOPIC_OR_PARTITION")
        producer.txn.partitions |= tps

    producer.txn.add = add  # type: ignore[method-assign]
    sender = _Sender(add)
    producer.sender = cast(Any, sender)
    producer.send([Outgoing("dc1.t", 0, b"", token=None), Outgoing("gone", 0, b"", token=None)])
    assert [(b.topic, b.partition) for b in sender.sent] == [("dc1.t", 0)]
    assert [(r.batch.topic, r.error) for r in failed] == [("gone", -195)]  # (_TRANSPORT)
    assert "UNKNOWN_TOPIC_OR_PARTITION" in failed[0].describe()
    errors: list[object] = []
    producer.produce("progress", value=b"v", key=b"k", partition=3, on_delivery=lambda err, _: errors.append(err))
    assert producer.flush(0) == 1  # the data batch sent, unanswered here; the own batch answered at once
    assert len(errors) == 1 and errors[0] is not None and len(producer) == 0
    assert len(failed) == 1  # (the own batch not handed to the copier)
