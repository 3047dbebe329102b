"""Which target producer carries a partition, when a flow has several (``replication.producers``).

librdkafka sends one partition's batch per produce request, and with idempotence at most five requests
are in flight per connection: over a long round trip that caps one producer at about five partition
batches per round trip, however much bandwidth the link has. Each producer has its own connections, so
N producers have N times that window. A partition always goes through the same producer (its order and
the idempotent producer's sequence numbers are per producer); progress and offset-map records go through
the first.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from typing import TypeVar

P = TypeVar("P")


def producer_for(producers: Sequence[P], topic: str, partition: int) -> P:
    """The same producer for a partition for the life of the process; consecutive partitions of a topic
    go to consecutive producers (a topic's partitions spread evenly)."""
    if len(producers) == 1:
        return producers[0]
    return producers[(zlib.crc32(topic.encode()) + partition) % len(producers)]
