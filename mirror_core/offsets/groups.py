"""Consumer-group offsets on one cluster: read, check for members, commit (AdminClient only)."""

from __future__ import annotations

from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient

Offsets = dict[tuple[str, int], int]  # (topic, partition) -> next offset to read


def committed_offsets(admin: AdminClient, group: str, timeout: float = 15) -> Offsets:
    """A group's committed offsets on one cluster; empty if it has none."""
    futures = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)], request_timeout=timeout)
    result = futures[group].result(timeout)
    return {(tp.topic, tp.partition): tp.offset for tp in result.topic_partitions or [] if tp.offset >= 0}


def active_members(admin: AdminClient, group: str, timeout: float = 15) -> int:
    desc = admin.describe_consumer_groups([group], request_timeout=timeout)[group].result(timeout)
    return len(desc.members or [])


def commit_offsets(admin: AdminClient, group: str, offsets: Offsets, timeout: float = 15) -> None:
    tps = [TopicPartition(t, p, o) for (t, p), o in sorted(offsets.items())]
    admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, tps)])[group].result(timeout)
