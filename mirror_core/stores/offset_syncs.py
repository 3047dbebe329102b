"""The offset map on the target: ``mirror-core.offset-syncs.<source>.internal``, MM2's OffsetSync layout.

Entries are written by the replicator only for acknowledged (or, exactly-once, committed) records,
before the progress that covers them. Retention is infinite by default (``retention.ms=-1``): the
map is small (an entry per change of delta, not per record) and must outlive the source data.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

from mirror_core.stores.internal_topics import TopicTail, ensure_internal_topic
from mirror_core.stores.offset_map import OffsetMap
from mirror_core.stores.records import decode_sync_key, decode_sync_value, encode_sync_key, encode_sync_value

OFFSET_SYNCS_TOPIC_CONFIG = {"cleanup.policy": "delete", "retention.ms": "-1", "retention.bytes": "-1"}


def offset_syncs_topic(source_alias: str) -> str:
    return f"mirror-core.offset-syncs.{source_alias}.internal"


def ensure_offset_syncs_topic(admin: AdminClient, topic: str, replication_factor: int) -> None:
    ensure_internal_topic(admin, topic, replication_factor, OFFSET_SYNCS_TOPIC_CONFIG)


def write_sync(producer: Producer, topic: str, source_topic: str, partition: int, upstream: int,
               downstream: int, on_delivery: Callable[[Any, Any], None] | None = None) -> None:
    if on_delivery is None:
        producer.produce(topic, key=encode_sync_key(source_topic, partition),
                         value=encode_sync_value(upstream, downstream), partition=0)
    else:
        producer.produce(topic, key=encode_sync_key(source_topic, partition),
                         value=encode_sync_value(upstream, downstream), partition=0, on_delivery=on_delivery)


class OffsetSyncReader:
    """Loads the whole offset map of one flow, incrementally on repeated calls."""

    def __init__(self, consumer: Consumer, topic: str) -> None:
        self._tail = TopicTail(consumer, topic)
        self.map = OffsetMap()

    def refresh(self, timeout: float = 30.0) -> OffsetMap:
        for key, value in self._tail.read_new(timeout):
            if value is None:
                continue
            topic, partition = decode_sync_key(key)
            upstream, downstream = decode_sync_value(value)
            self.map.add(topic, partition, upstream, downstream)
        return self.map

    def close(self) -> None:
        self._tail.close()
