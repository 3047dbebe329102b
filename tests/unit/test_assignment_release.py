"""Assignment.release (the caller every revocation, loss and exactly-once slot release goes through)
clears a partition's pause before unassigning it: librdkafka keeps a pause across unassign/assign, so a
partition released while paused for a retry backoff would come back paused and never be fetched.
(tests/integration/test_reassign_paused.py shows librdkafka's behaviour on a real broker.)"""
from __future__ import annotations

import threading
from typing import Any
from unittest.mock import MagicMock

from confluent_kafka import TopicPartition

from mirror_core.clients import ClusterHealth
from mirror_core.replication.assignment import Assignment
from mirror_core.replication.batch import PartitionState


class RecordingConsumer:
    def __init__(self) -> None:
        self.calls: list[tuple[str, list[tuple[str, int]]]] = []

    def _note(self, what: str, partitions: list[TopicPartition]) -> None:
        self.calls.append((what, [(tp.topic, tp.partition) for tp in partitions]))

    def resume(self, partitions: list[TopicPartition]) -> None:
        self._note("resume", partitions)

    def incremental_unassign(self, partitions: list[TopicPartition]) -> None:
        self._note("unassign", partitions)


def assignment(consumer: Any) -> Assignment:
    flow = MagicMock()
    flow.name = "dc1->dc2"
    a = Assignment(flow, consumer, MagicMock(), MagicMock(), MagicMock(), MagicMock(), MagicMock(),
                   ClusterHealth("dc1"), ClusterHealth("dc2"), threading.Event())
    for p in range(3):
        a.states[("orders", p)] = PartitionState("orders", p, "dc1.orders", None, False, None, None)
    return a


def test_revoked_and_lost_partitions_are_resumed_before_they_are_unassigned() -> None:
    for how in ("revoked", "lost"):
        consumer = RecordingConsumer()
        a = assignment(consumer)
        a.release([TopicPartition("orders", 0), TopicPartition("orders", 2)], how)
        assert consumer.calls == [("resume", [("orders", 0), ("orders", 2)]),
                                  ("unassign", [("orders", 0), ("orders", 2)])]
        assert set(a.states) == {("orders", 1)}


def test_released_slot_states_are_resumed_before_they_are_unassigned() -> None:
    consumer = RecordingConsumer()
    a = assignment(consumer)
    a.release_states([a.states[("orders", 1)]])
    assert consumer.calls == [("resume", [("orders", 1)]), ("unassign", [("orders", 1)])]
