"""Replication progress, stored on the target cluster.

Invariant (owned here): a progress entry ``(topic, partition) -> next`` is written only for source
offsets whose records the target has acknowledged (or committed, in exactly-once mode), and ``next``
is always *the next source offset to read*. Progress lives on the target so that a mirror restarted
anywhere, even after the loss of the source datacenter, resumes exactly where the target's data ends.

Storage: one compacted topic per source cluster on the target (``mirror-core.progress.<source>.internal``),
key ``["topic", partition]`` and value ``{"next": N, "ts": ms, "by": instance, "tid": topic id}`` as
JSON. The source topic's ID tells a recreated topic (same name, new ID) from the one the position
belongs to; entries written before IDs were recorded have none.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import AdminClient

from mirror_core.config.client_defaults import KAFKA_DEFAULT_MESSAGE_MAX_BYTES
from mirror_core.stores.internal_topics import BOUNDED_COMPACTION, TopicTail, ensure_internal_topic

Key = tuple[str, int]
#: max.message.bytes explicit (Kafka's default): what a writer assumes where the target does not say
#: (internal_topics.internal_topics_limit), so a smaller broker default does not apply to them
PROGRESS_TOPIC_CONFIG = {"cleanup.policy": "compact", **BOUNDED_COMPACTION,
                         "max.message.bytes": str(KAFKA_DEFAULT_MESSAGE_MAX_BYTES)}


def encode_key(topic: str, partition: int) -> bytes:
    return json.dumps([topic, partition], separators=(",", ":")).encode()


def decode_key(raw: bytes) -> Key:
    topic, partition = json.loads(raw)
    return str(topic), int(partition)


def ensure_progress_topic(admin: AdminClient, topic: str, replication_factor: int, timeout: float = 30) -> None:
    ensure_internal_topic(admin, topic, replication_factor, PROGRESS_TOPIC_CONFIG, timeout)


class ProgressStore:
    """Reads and writes replication progress for one flow (one source cluster) on the target."""

    def __init__(self, topic: str, reader: Consumer, instance_id: str) -> None:
        self.topic = topic
        self._tail = TopicTail(reader, topic)
        self._instance = instance_id
        self._entries: dict[Key, int] = {}
        self._ids: dict[Key, str] = {}

    def refresh(self, timeout: float = 30.0) -> dict[Key, int]:
        """Read every progress record written since the last refresh; return all entries."""
        for key, value in self._tail.read_new(timeout):
            if value is not None:
                data = json.loads(value)
                k = decode_key(key)
                self._entries[k] = int(data["next"])
                if data.get("tid"):
                    self._ids[k] = str(data["tid"])
        return dict(self._entries)

    def topic_id(self, topic: str, partition: int) -> str | None:
        """The source topic ID the stored position belongs to (None if not recorded)."""
        return self._ids.get((topic, partition))

    def write(self, producer: Producer, topic: str, partition: int, next_offset: int,
              on_delivery: Callable[[KafkaError | None, object], None] | None = None,
              topic_id: str | None = None) -> None:
        """Queue a progress record. Callers must only pass offsets the target already acknowledged."""
        record: dict[str, object] = {"next": next_offset, "ts": int(time.time() * 1000), "by": self._instance}
        if topic_id:
            record["tid"] = topic_id
            self._ids[(topic, partition)] = topic_id
        value = json.dumps(record, separators=(",", ":")).encode()
        producer.produce(self.topic, value=value, key=encode_key(topic, partition), partition=0,
                         on_delivery=on_delivery)
        self._entries[(topic, partition)] = next_offset

    def close(self) -> None:
        self._tail.close()
