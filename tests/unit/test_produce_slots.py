"""The hot path calls ``Producer.produce`` positionally (keyword parsing was 40-55 % of each call). The
slot order is confluent-kafka's C signature, not its docstring: this pins it against the installed
version, so an upgrade that moves a slot fails here instead of mis-stamping copied records.

It writes to librdkafka's in-process mock cluster (``test.mock.num.brokers``) and reads the record back:
the library's calling convention is what is under test, not a broker."""

from __future__ import annotations

from confluent_kafka import TIMESTAMP_CREATE_TIME, Consumer, KafkaError, Message, Producer, TopicPartition


def test_each_positional_slot_lands_where_the_hot_path_expects() -> None:
    producer = Producer({"test.mock.num.brokers": 1, "log_level": 0})
    broker = next(iter(producer.list_topics(timeout=10).brokers.values()))
    reports: list[tuple[KafkaError | None, Message]] = []
    # The hot path's call: produce(remote, value, key, partition, cb, None, stamp, m.headers()). An explicit
    # None in the 6th slot (on_delivery) is fine only while the callback is in the 5th.
    producer.produce("slots", b"value", b"key", 1, lambda err, msg: reports.append((err, msg)), None,
                     1_700_000_000_123, [("h", b"x")])
    producer.produce("slots", b"plain", None, 1, None, None, 0, None)  # no callback, no stamp, no headers
    assert producer.flush(10) == 0
    assert len(reports) == 1, "the 5th slot is not the delivery callback"
    assert reports[0][0] is None and reports[0][1].partition() == 1, "the 4th slot is not the partition"

    consumer = Consumer({"bootstrap.servers": f"{broker.host}:{broker.port}", "group.id": "slots",
                         "log_level": 0})
    try:
        consumer.assign([TopicPartition("slots", 1, 0)])
        got: list[Message] = []
        for _ in range(50):
            m = consumer.poll(0.2)
            if m is not None and m.error() is None:
                got.append(m)
            if len(got) == 2:
                break
    finally:
        consumer.close()
    assert len(got) == 2
    first, second = got
    assert (first.value(), first.key()) == (b"value", b"key")
    assert first.timestamp() == (TIMESTAMP_CREATE_TIME, 1_700_000_000_123), "the 7th slot is not the timestamp"
    assert first.headers() == [("h", b"x")], "the 8th slot is not the headers"
    assert (second.value(), second.key(), second.headers()) == (b"plain", None, None)
    assert second.timestamp()[1] > 1_700_000_000_123  # 0: stamped by the producer at send time
