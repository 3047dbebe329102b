"""A cooperative round that assigns this process nothing returns at once: preparing for it read the
progress topic (0.5-0.8 s at 2,000 partitions) while the group waited, because the old owner rejoins for
the round that hands revoked partitions over only once its callbacks return (bench/results, scale join)."""
from __future__ import annotations

import threading
from unittest.mock import MagicMock

from confluent_kafka import TopicPartition

from mirror_core.clients import ClusterHealth
from mirror_core.replication.assignment import Assignment


def test_an_empty_assignment_is_acknowledged_without_preparing_anything() -> None:
    consumer, topics, progress = MagicMock(), MagicMock(), MagicMock()
    a = Assignment(MagicMock(), consumer, topics, progress, MagicMock(), MagicMock(), MagicMock(),
                   ClusterHealth("dc1"), ClusterHealth("dc2"), threading.Event())
    a.take([], [MagicMock()])
    consumer.incremental_assign.assert_called_once_with([])
    progress.refresh.assert_not_called()
    topics.ensure_remote.assert_not_called()

    a.take([TopicPartition("orders", 0)], [MagicMock()])  # a real one still prepares (and is assigned)
    progress.refresh.assert_called_once()
    assert ("orders", 0) in a.states
