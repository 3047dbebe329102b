"""The producer ids mirrors write a cluster with, kept on that cluster: how the batches data path recognises the
batches a mirror copied there, which it copies whole and cannot mark with the identity policy's provenance header.

Invariant (owned here): a mirror's producer id is in ``mirror-core.producer-ids.internal`` of the cluster it writes,
acknowledged by every in-sync replica (acks=all), *before* any batch is written with it (:func:`register`, called
by the wire sender between InitProducerId and its first batch). So a reader that meets a batch with a producer id it
does not know reads this topic up to its end (the high watermark, which the registration's acks=all already
passed) and then knows for sure: a producer id missing there is not a mirror's, and never will be (the cluster
never gives a producer id out twice).

Storage: one compacted topic of one partition per cluster, key the producer id (8 bytes, big-endian), value
``{"source": alias, "target": alias, "by": instance, "ts": ms}`` as JSON: the flow that writes with it.
"""

from __future__ import annotations

import json
import struct
import time

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

from mirror_core.config.client_defaults import KAFKA_DEFAULT_MESSAGE_MAX_BYTES
from mirror_core.errors import ProgressError
from mirror_core.stores.internal_topics import BOUNDED_COMPACTION, TopicTail, ensure_internal_topic

PRODUCER_IDS_TOPIC = "mirror-core.producer-ids.internal"
PRODUCER_IDS_TOPIC_CONFIG = {"cleanup.policy": "compact", **BOUNDED_COMPACTION,
                             "max.message.bytes": str(KAFKA_DEFAULT_MESSAGE_MAX_BYTES)}
_KEY = struct.Struct(">q")
#: producer ids found not to be a mirror's that a reader remembers; past it, it forgets them all (each is looked up
#: again: a read of what the topic got since)
MAX_FOREIGN = 100_000


def ensure_producer_ids_topic(admin: AdminClient, replication_factor: int) -> None:
    ensure_internal_topic(admin, PRODUCER_IDS_TOPIC, replication_factor, PRODUCER_IDS_TOPIC_CONFIG)


def register(producer: Producer, producer_id: int, source: str, target: str, instance: str,
             timeout: float = 30.0) -> None:
    """Record that flow ``source->target`` writes its cluster with ``producer_id``; returns once every in-sync
    replica has it (the producer must be acks=all, as make_producer's are), else a ProgressError."""
    value = json.dumps({"source": source, "target": target, "by": instance, "ts": int(time.time() * 1000)},
                       separators=(",", ":")).encode()
    failed: list[str] = []

    def done(err: object, _msg: object) -> None:
        if err is not None:
            failed.append(str(err))

    producer.produce(PRODUCER_IDS_TOPIC, key=_KEY.pack(producer_id), value=value, partition=0, on_delivery=done)
    if producer.flush(timeout) or failed:
        raise ProgressError(f"producer id {producer_id} not recorded in {PRODUCER_IDS_TOPIC}: "
                            f"{failed[0] if failed else f'no acknowledgement within {timeout:.0f} s'}")


class MirrorProducerIds:
    """A reader's view of one cluster's mirror producer ids: which flow's source each one copies from."""

    def __init__(self, consumer: Consumer) -> None:
        self._tail = TopicTail(consumer, PRODUCER_IDS_TOPIC)
        self._sources: dict[int, str] = {}
        self._foreign: set[int] = set()
        #: reads of the topic so far (each one for a producer id not known then)
        self.reads = 0

    def source_of(self, producer_id: int) -> str | None:
        """The source cluster of the mirror flow that wrote with ``producer_id``, or None when no mirror did (an
        application's producer, or a batch without a producer id). Reads the topic to its end when it does not
        know the producer id yet (a ProgressError when it cannot)."""
        if producer_id < 0 or producer_id in self._foreign:
            return None
        found = self._sources.get(producer_id)
        if found is None:
            self.refresh()
            found = self._sources.get(producer_id)
            if found is None:
                if len(self._foreign) >= MAX_FOREIGN:
                    self._foreign.clear()
                self._foreign.add(producer_id)
        return found

    def forget(self, producer_id: int) -> None:
        """Ask the topic about ``producer_id`` again at its next :meth:`source_of` (known not to be a mirror's so far:
        a producer id can be recorded after its first batches, when a transactional id changes hands)."""
        self._foreign.discard(producer_id)

    def refresh(self, timeout: float = 30.0) -> None:
        """What the topic got since the last read, up to its current end."""
        self.reads += 1
        for key, value in self._tail.read_new(timeout):
            if value is None or len(key) != _KEY.size:
                continue
            try:
                self._sources[_KEY.unpack(key)[0]] = str(json.loads(value)["source"])
            except (ValueError, KeyError, TypeError) as exc:
                raise ProgressError(f"{PRODUCER_IDS_TOPIC}: a record that is not a producer id's: {exc}") from exc
