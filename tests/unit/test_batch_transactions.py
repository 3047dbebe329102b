"""The mirror's own records in an exactly-once transaction on the batches path (replication/batch_transactions.py):
what commit.py produces is sent as batches of at most OWN_BATCH_BYTES per partition, every record once, in order."""

from __future__ import annotations

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
