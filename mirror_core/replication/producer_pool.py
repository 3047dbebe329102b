"""Which target producer carries a partition, when a flow has several (``replication.producers``).

librdkafka sends one partition's batch per produce request, at most five requests in flight per connection
(per target broker) and, with idempotence, one per partition once a batch holds five or more records: it
counts a partition's in-flight *records* against the limit of five requests (librdkafka 2.15;
confluentinc/librdkafka#4989 is open). Over a long round trip one producer therefore carries at most five
batches per target broker per round trip, however much bandwidth the link has. Each producer has its own
connections, so N producers have up to N times that window; but while all of a producer's partitions wait
for their responses with records queued behind, its broker thread polls without sleeping (the linger
wake-up is set before the in-flight check turns the partition away): 0.12-0.27 of a core per producer over
80 ms on a saturated 2-core machine, more when cores are free (``python -m bench.wan_threads``). So with
several producers the records behind wait in the mirror instead (``replication.one.batch.per.partition``,
produce.py), and the threads sleep. A partition always goes through
the same producer (its order and the idempotent producer's sequence numbers are per producer); progress and
offset-map records go through the first.
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
