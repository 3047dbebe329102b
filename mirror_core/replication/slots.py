"""The slots of exactly-once replication (exactly_once.py): which slot a source partition belongs to, and the slot
topic on the target, one partition per slot, through whose consumer group mirror processes share the slots."""

from __future__ import annotations

import zlib

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewPartitions

from mirror_core import authorization
from mirror_core.authorization import Access
from mirror_core.clients import error_code
from mirror_core.config.model import ClusterConfig
from mirror_core.errors import MirrorError
from mirror_core.stores.internal_topics import ensure_internal_topic


def slot_of(topic: str, partition: int, slots: int) -> int:
    """Stable across processes and restarts (unlike Python's salted hash)."""
    return zlib.crc32(f"{topic}\x00{partition}".encode()) % slots


def slot_topic(source: str, target: str) -> str:
    return f"mirror-core.slots.{source}-{target}.internal"


def ensure_slot_topic(admin: AdminClient, topic: str, slots: int, replication_factor: int, flow: str,
                      target: ClusterConfig) -> None:
    with authorization.guard(flow, Access("Create", topic, target)):
        ensure_internal_topic(admin, topic, replication_factor, {"cleanup.policy": "delete"}, partitions=slots)
    md = admin.list_topics(topic=topic, timeout=15).topics[topic]
    if len(md.partitions) > slots:  # each partition is a slot: instances would own slots that hold nothing
        raise fewer_slots(topic, len(md.partitions), slots, target.alias)
    # More slots configured than before: grow. A topic just created may show no
    # partitions yet: that is not a smaller topic (growing it would need the Alter ACL for nothing).
    if 0 < len(md.partitions) < slots:
        try:
            with authorization.guard(flow, Access("Alter", topic, target)):
                admin.create_partitions([NewPartitions(topic, slots)])[topic].result(15)
        except KafkaException as exc:
            if error_code(exc) != KafkaError.INVALID_PARTITIONS:
                raise  # INVALID_PARTITIONS: another instance (or a stale metadata view) got there


def fewer_slots(topic: str, partitions: int, slots: int, alias: str) -> MirrorError:
    return MirrorError(f"exactly.once.slots = {slots}, but the slot topic {topic} on {alias} has {partitions} "
                       f"partitions (slots cannot be fewer than before in place; every instance of a flow needs the "
                       f"same count): set exactly.once.slots = {partitions}, or stop every instance of the flow and "
                       f"delete {topic} (it holds no records)")
