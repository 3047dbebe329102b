"""Batches sized to what each remote topic accepts (its max.message.bytes on the target), against real brokers.

librdkafka does not split a batch the target refuses as too large: before, a remote topic whose limit was below
the producer's batch limit had every full batch refused and replayed record by record ("careful mode")."""

from __future__ import annotations

from confluent_kafka import Producer

from mirror_core.config.client_defaults import PARKED_PRODUCER_DEFAULTS, PRODUCER_DEFAULTS
from tests.integration.conftest import flow_lines
from tests.integration.test_replication import caught_up, topic_config
from tests.kafka_harness import assert_same_records, batch_sizes, create_topic, wait_until

REFUSED = "Message size too large"


def fill(bootstrap: str, topic: str, partitions: int, count: int, batch_size: int) -> None:
    """``count`` records of ~1 KiB with keys and headers, in batches the source topic accepts."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": batch_size,
                  "enable.idempotence": True, "queue.buffering.max.messages": 1_000_000})
    for i in range(count):
        value = (b"%08d " % i) * 114
        p.produce(topic, value=value, key=b"k%d" % i, partition=i % partitions, headers=[("seq", b"%d" % i)])
        if i % 10_000 == 0:
            p.poll(0)
    assert p.flush(60) == 0


def test_a_remote_topic_that_takes_less_than_a_producer_batch_is_copied_in_batches_it_accepts(
        dc1, dc2, clusters, name, start_mirror):
    small = f"{name}.small"
    create_topic(dc1, small, 2, {"max.message.bytes": "65536"})
    fill(dc1, small, 2, 20_000, 32_768)
    # The precondition: the mirror's producer builds batches up to 1 MiB, 16 times what the remote topic takes.
    assert int(PRODUCER_DEFAULTS["batch.size"]) >= 16 * 65536
    m = start_mirror(flow_lines(name))
    wait_until(lambda: caught_up(dc1, dc2, {small: f"dc1.{small}"}), 120, what="small-limit topic copied")
    assert topic_config(dc2, f"dc1.{small}")["max.message.bytes"] == "65536"
    assert_same_records(dc1, dc2, small, f"dc1.{small}")
    sizes = batch_sizes(clusters["dc2"], f"dc1.{small}")
    assert 50_000 < max(sizes) <= 65536 and len(sizes) < 20_000 / 10, "batches of what it takes, not record by record"
    assert REFUSED not in m.log() and "careful mode" not in m.log()


def test_with_one_batch_per_partition_batches_grow_to_what_each_remote_topic_takes(
        dc1, dc2, clusters, name, start_mirror):
    """Parked producers (2 here; auto's 4 over a WAN) get librdkafka's limit raised to 8 MiB: a remote topic that
    takes 4 MB gets batches over 1 MiB, one at the broker's default 1 MiB is not sent more than it takes."""
    big, usual = f"{name}.big", f"{name}.usual"
    create_topic(dc1, big, 2, {"max.message.bytes": "4000000"})
    create_topic(dc1, usual, 2)
    fill(dc1, big, 2, 12_000, 1 << 20)
    fill(dc1, usual, 2, 12_000, 1 << 20)
    m = start_mirror(flow_lines(name, "replication.producers = 2"))
    wait_until(lambda: caught_up(dc1, dc2, {big: f"dc1.{big}", usual: f"dc1.{usual}"}), 120,
               what="both topics copied")
    assert "one batch per partition on" in m.log() and int(PARKED_PRODUCER_DEFAULTS["batch.size"]) > 4_000_000
    for topic in (big, usual):
        assert_same_records(dc1, dc2, topic, f"dc1.{topic}")
    big_sizes, usual_sizes = batch_sizes(clusters["dc2"], f"dc1.{big}"), batch_sizes(clusters["dc2"], f"dc1.{usual}")
    assert 1 << 20 < max(big_sizes) <= 4_000_000, "batches beyond librdkafka's usual 1 MiB where the topic takes them"
    assert 900_000 < max(usual_sizes) <= 1_048_588, "as much as the broker's default message.max.bytes takes"
    assert REFUSED not in m.log() and "careful mode" not in m.log()
