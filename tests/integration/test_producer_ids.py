"""The batches sender records each producer id on the cluster it writes before any batch goes with it
(stores/producer_ids.py, BatchSender.on_producer_id), and a reader of that cluster learns it (the identity policy's
cycle prevention on whole batches: replication/mirror_writes.py)."""

from __future__ import annotations

import time

from confluent_kafka import Consumer, Producer

from mirror_core.stores.producer_ids import MirrorProducerIds, ensure_producer_ids_topic, register
from mirror_core.wire.metadata import Brokers
from mirror_core.wire.sender import BatchSender, Outgoing, Sent
from tests.integration.test_target_answers import records
from tests.kafka_harness import admin, create_topic, end_offsets, producer_ids
from tests.unit.record_batches import KEPT, batch


def test_each_producer_id_is_recorded_durably_before_its_first_batch_and_a_reader_learns_it(
        dc2: str, clusters, name: str) -> None:  # type: ignore[no-untyped-def]
    topic = f"{name}.pids"
    create_topic(dc2, topic, 1, KEPT)
    ensure_producer_ids_topic(admin(dc2), 1)
    registrar = Producer({"bootstrap.servers": dc2, "acks": "all", "enable.idempotence": "true"})
    calls: list[tuple[int, int]] = []  # (producer id, records of the topic when it was being recorded)

    def on_producer_id(pid: int, timeout: float) -> None:
        calls.append((pid, sum(end_offsets(dc2, topic).values())))
        if len(calls) == 1:
            raise RuntimeError("the registry did not answer")  # a failure to record: asked again, nothing sent
        register(registrar, pid, "dc1", "dc2", "test", timeout)

    sender = BatchSender(Brokers(dc2, {}, "dc2"))
    sender.on_producer_id = on_producer_id
    reader = MirrorProducerIds(Consumer({"bootstrap.servers": dc2, "group.id": f"{name}-reader",
                                         "enable.auto.commit": "false"}))

    def sent(n: int) -> list[Sent]:
        out: list[Sent] = []
        deadline = time.monotonic() + 30
        while len(out) < n and time.monotonic() < deadline:
            out += sender.poll(0.5)
        return out

    try:
        sender.send([Outgoing(topic, 0, batch(0, 4, records(5)), token=1)])
        assert [r.error for r in sent(1)] == [0]
        first = sender.producer_id
        # Asked twice (the first record failed), recorded before anything was written with it.
        assert [c[1] for c in calls] == [0, 0] and calls[1][0] == first
        assert producer_ids(clusters["dc2"], topic) == {0: {first}}
        assert reader.source_of(first) == "dc1" and reader.reads == 1
        # An application's producer id: one read of the topic, then remembered as not a mirror's.
        assert reader.source_of(first + 1000) is None and reader.reads == 2
        assert reader.source_of(first + 1000) is None and reader.reads == 2
        # A new producer id (the broker lost the sender's sequence): recorded before its first batch too.
        part = sender._parts[(topic, 0)]
        part.acked_seq = part.next_seq = 50
        sender.send([Outgoing(topic, 0, batch(0, 4, records(5)), token=2)])
        assert [r.error for r in sent(1)] == [0]
        second = sender.producer_id
        assert second != first and calls[-1] == (second, 5)  # the first batch's records only
        assert producer_ids(clusters["dc2"], topic) == {0: {first, second}}
        assert reader.source_of(second) == "dc1" and reader.reads == 3
    finally:
        sender.close()
