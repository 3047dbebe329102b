"""Replication progress, stored on the target cluster.

Invariant (owned here): a progress entry ``(topic, partition) -> next`` is written only for source
offsets whose records the target has acknowledged, and ``next`` is always *the next source offset to
read*. Progress lives on the target so that a mirror restarted anywhere, even after the loss of the
source datacenter, resumes exactly where the target's data ends.

Storage: one compacted topic per source cluster on the target (``mirror-core.progress.<source>.internal``),
key ``["topic", partition]`` and value ``{"next": N, "ts": ms, "by": instance}`` as JSON. One partition:
the topic is small, and a single log gives a total order of writes.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from mirror_core.errors import ProgressError

log = logging.getLogger(__name__)

Key = tuple[str, int]


def encode_key(topic: str, partition: int) -> bytes:
    return json.dumps([topic, partition], separators=(",", ":")).encode()


def decode_key(raw: bytes) -> Key:
    topic, partition = json.loads(raw)
    return str(topic), int(partition)


def ensure_progress_topic(admin: AdminClient, topic: str, replication_factor: int, timeout: float = 30) -> None:
    """Create the compacted progress topic if it does not exist (idempotent across instances)."""
    md = admin.list_topics(topic=topic, timeout=timeout)
    t = md.topics.get(topic)
    if t is not None and t.error is None:
        return
    futures = admin.create_topics([NewTopic(topic, 1, replication_factor, config={
        "cleanup.policy": "compact", "min.compaction.lag.ms": "60000", "segment.ms": "3600000"})],
        operation_timeout=timeout)
    try:
        futures[topic].result(timeout)
    except Exception as exc:
        err = exc.args[0] if exc.args else None
        if not (isinstance(err, KafkaError) and err.code() == KafkaError.TOPIC_ALREADY_EXISTS):
            raise ProgressError(f"cannot create progress topic {topic}: {exc}") from exc


class ProgressStore:
    """Reads and writes replication progress for one flow (one source cluster) on the target."""

    def __init__(self, topic: str, reader: Consumer, instance_id: str) -> None:
        self.topic = topic
        self._reader = reader
        self._instance = instance_id
        self._position = 0  # next offset of the progress topic to read
        self._entries: dict[Key, int] = {}
        self._assigned = False

    def refresh(self, timeout: float = 30.0) -> dict[Key, int]:
        """Read every progress record written since the last refresh; return all entries."""
        tp = TopicPartition(self.topic, 0)
        try:
            low, high = self._reader.get_watermark_offsets(tp, timeout=timeout)
        except Exception as exc:
            raise ProgressError(f"cannot read progress topic {self.topic}: {exc}") from exc
        if self._position < low:
            self._position = low
        if self._position >= high:
            return dict(self._entries)
        start = self._position if self._position > 0 else OFFSET_BEGINNING
        self._reader.assign([TopicPartition(self.topic, 0, start)])
        deadline = time.monotonic() + timeout
        while self._position < high:
            if time.monotonic() > deadline:
                raise ProgressError(f"timed out reading progress topic {self.topic} "
                                    f"at {self._position}/{high}")
            for msg in self._reader.consume(10000, timeout=0.5):
                if msg.error():
                    if msg.error().code() == KafkaError._PARTITION_EOF:
                        continue
                    raise ProgressError(f"progress topic {self.topic}: {msg.error().str()}")
                key, value = msg.key(), msg.value()
                if key is not None and value is not None:
                    self._entries[decode_key(key)] = int(json.loads(value)["next"])
                self._position = msg.offset() + 1
            if self._position < high:
                # Transaction markers / compaction leave gaps: trust the consumer's position.
                pos = self._reader.position([TopicPartition(self.topic, 0)])[0].offset
                if pos is not None and pos >= 0:
                    self._position = max(self._position, pos)
        self._reader.unassign()
        return dict(self._entries)

    def get(self, topic: str, partition: int) -> int | None:
        return self._entries.get((topic, partition))

    def write(self, producer: Producer, topic: str, partition: int, next_offset: int,
              on_delivery: Callable[[KafkaError | None, object], None] | None = None) -> None:
        """Queue a progress record. Callers must only pass offsets the target already acknowledged."""
        value = json.dumps({"next": next_offset, "ts": int(time.time() * 1000), "by": self._instance},
                           separators=(",", ":")).encode()
        producer.produce(self.topic, value=value, key=encode_key(topic, partition), partition=0,
                         on_delivery=on_delivery)
        self._entries[(topic, partition)] = next_offset

    def close(self) -> None:
        self._reader.close()
