"""Small Kafka reading helpers shared by the tools (offsets, workflows, status): one of each."""

from __future__ import annotations

from typing import Any

from confluent_kafka import KafkaException, TopicPartition

#: Client settings of short-lived tool clients: librdkafka logs errors only (causes are reported through
#: ClusterHealth / explain_failure, not through librdkafka's own chatter).
QUIET = {"log_level": "3"}


def log_end(consumer: Any, topic: str, partition: int, timeout: float = 10) -> int | None:
    """A partition's log end offset (the next offset to be written), or None when the cluster does not say."""
    try:
        return int(consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=timeout)[1])
    except KafkaException:
        return None
