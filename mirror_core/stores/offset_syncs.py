"""The offset map on the target: ``mirror-core.offset-syncs.<source>.internal``, MM2's OffsetSync layout.

Entries are written by the replicator only for acknowledged (or, exactly-once, committed) records,
before the progress that covers them. The topic's own retention is infinite (``retention.ms=-1``):
what is no longer needed is removed by the pruner, only below a committed snapshot round
(stores/map_snapshots.py), so the log holds the runs written since the last round. It stays in MM2's
layout (MM2 tooling reads it) rather than the snapshots' compact one: a reader folds what it loads.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

from mirror_core.clients import make_consumer
from mirror_core.config.client_defaults import KAFKA_DEFAULT_MESSAGE_MAX_BYTES
from mirror_core.config.model import ClusterConfig
from mirror_core.kafka_io import QUIET
from mirror_core.stores.internal_topics import TopicTail, ensure_internal_topic
from mirror_core.stores.map_snapshots import Key, Snapshots, load_snapshots, snapshot_topic
from mirror_core.stores.offset_map import OffsetMap
from mirror_core.stores.records import decode_sync_key, decode_sync_value, encode_sync_key, encode_sync_value

log = logging.getLogger(__name__)
#: max.message.bytes explicit (Kafka's default): what a writer assumes where the target does not say
#: (internal_topics.internal_topics_limit), so a smaller broker default does not apply to them
OFFSET_SYNCS_TOPIC_CONFIG = {"cleanup.policy": "delete", "retention.ms": "-1", "retention.bytes": "-1",
                             "max.message.bytes": str(KAFKA_DEFAULT_MESSAGE_MAX_BYTES)}


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


def flow_map_reader(target: ClusterConfig, group: str, source_alias: str) -> OffsetSyncReader:
    """The reader every tool and thread uses: snapshots first, then the log after them."""
    return OffsetSyncReader(make_consumer(target, group, QUIET), offset_syncs_topic(source_alias),
                            snapshot_topic(source_alias), make_consumer(target, group, QUIET))


class OffsetSyncReader:
    """Loads the offset map of one flow — the newest snapshot round plus the log after it —
    incrementally on repeated calls.

    ``snapshots`` names the snapshot topic (None: the log alone, from its start). ``touched`` collects
    the partitions that got entries from the log since the last load (the pruner's changed set).
    """

    def __init__(self, consumer: Consumer, topic: str, snapshots: str | None = None,
                 snapshot_consumer: Consumer | None = None) -> None:
        self._tail = TopicTail(consumer, topic)
        self._snapshot_topic = snapshots
        self._snapshot_consumer = snapshot_consumer
        self.map = OffsetMap()
        self.loaded = Snapshots()
        self.touched: set[Key] = set()
        self._loaded = False

    def _load(self, timeout: float) -> None:
        self.map, self.touched = OffsetMap(), set()
        self.loaded = Snapshots()
        if self._snapshot_topic is not None and self._snapshot_consumer is not None:
            self.loaded = load_snapshots(self._snapshot_consumer, self._snapshot_topic, timeout)
        self.map.partitions = dict(self.loaded.maps)
        self._tail.seek(self.loaded.round_position)
        self._loaded = True

    @property
    def position(self) -> int:
        """Every offset-sync entry below this log offset is in :attr:`map`."""
        return self._tail.position

    def refresh(self, timeout: float = 30.0) -> OffsetMap:
        for attempt in range(3):
            if not self._loaded:
                self._load(timeout)
            for msg in self._tail.read_new_messages(timeout):
                value = msg.value()
                if value is None:
                    continue
                key = decode_sync_key(msg.key())
                if msg.offset() < self.loaded.positions.get(key, 0):
                    continue  # already in the snapshot
                upstream, downstream = decode_sync_value(value)
                self.map.add(key[0], key[1], upstream, downstream)
                self.touched.add(key)
            if self._tail.log_start(timeout) <= self.loaded.round_position:
                return self.map
            # A newer round trimmed the log: load again from it — entries this read skipped are in
            # it, and its map is pruned (a long-lived reader's map stays bounded too).
            if attempt < 2:
                self._loaded = False
        log.warning("%s: the log starts after the offset map's newest snapshot (trimmed outside mirror_core?); "
                    "offsets below it have no exact translation", self._tail.topic)
        return self.map

    def close(self) -> None:
        self._tail.close()
        if self._snapshot_consumer is not None:
            self._snapshot_consumer.close()
