"""A partition released while paused for a retry backoff is fetched again when it is taken again.

Found by the WAN suite (tests/wan/test_partitions.py, a 5-minute partition with exactly-once): the
slot group on the target lost its slots during the outage, one partition was paused for a delivery
backoff at that moment, and after the heal the slot was taken again but that partition was never read
again (lag > 0, no error), because librdkafka keeps an application pause across unassign and assign.
"""

from __future__ import annotations

import time

from confluent_kafka import Consumer, TopicPartition

from mirror_core.replication.assignment import unassign
from tests.kafka_harness import create_topic, produce_sequence


def _read_for(consumer: Consumer, seconds: float, enough: int | None = None) -> int:
    """Records read in ``seconds``, or as soon as ``enough`` have come (a loaded machine may be slow)."""
    got, deadline = 0, time.monotonic() + seconds
    while time.monotonic() < deadline and (enough is None or got < enough):
        got += sum(1 for m in consumer.consume(100, 0.2) if m.error() is None)
    return got


def _paused_then_reassigned(bootstrap: str, topic: str, release, expect_any: bool) -> int:  # type: ignore[no-untyped-def]
    """Assign, pause (as acks.rewind does for a backoff), release with ``release``, assign again from
    the beginning: how many records are read (up to 50, within 30 s; a fixed 6 s when none are expected)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-g", "enable.auto.commit": False})
    try:
        tp = [TopicPartition(topic, 0, 0)]
        c.incremental_assign(tp)
        assert _read_for(c, 30, enough=50) == 50, "the partition was readable before the pause"
        c.pause([TopicPartition(topic, 0)])
        release(c, [TopicPartition(topic, 0)])
        c.incremental_assign([TopicPartition(topic, 0, 0)])
        return _read_for(c, 30, enough=50) if expect_any else _read_for(c, 6)
    finally:
        c.close()


def test_a_partition_released_while_paused_is_read_when_taken_again(dc1: str, name: str) -> None:
    topic = f"{name}.paused"
    create_topic(dc1, topic, 1)
    produce_sequence(dc1, topic, 1, 50)
    # The precondition the product relies on being handled: a plain unassign keeps the pause.
    assert _paused_then_reassigned(dc1, topic, lambda c, tps: c.incremental_unassign(tps), False) == 0, \
        "librdkafka no longer keeps a pause across unassign/assign: this test no longer proves the fix"
    # The replicator's release path (Assignment.release) clears it.
    assert _paused_then_reassigned(dc1, topic, unassign, True) == 50
