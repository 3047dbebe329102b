"""Kafka's error codes as the wire client meets them: a name for every line that reports one, and which of
them a client asks again for (after finding the partition's leader again, where the leader moved)."""

from __future__ import annotations

from mirror_core.errors import MirrorError

NAMES = {
    -1: "UNKNOWN_SERVER_ERROR", 1: "OFFSET_OUT_OF_RANGE", 2: "CORRUPT_MESSAGE", 3: "UNKNOWN_TOPIC_OR_PARTITION",
    5: "LEADER_NOT_AVAILABLE", 6: "NOT_LEADER_OR_FOLLOWER", 7: "REQUEST_TIMED_OUT", 10: "MESSAGE_TOO_LARGE",
    14: "COORDINATOR_LOAD_IN_PROGRESS", 15: "COORDINATOR_NOT_AVAILABLE", 16: "NOT_COORDINATOR",
    18: "RECORD_LIST_TOO_LARGE", 19: "NOT_ENOUGH_REPLICAS", 20: "NOT_ENOUGH_REPLICAS_AFTER_APPEND",
    29: "TOPIC_AUTHORIZATION_FAILED", 31: "CLUSTER_AUTHORIZATION_FAILED", 32: "INVALID_TIMESTAMP",
    35: "UNSUPPORTED_VERSION", 45: "OUT_OF_ORDER_SEQUENCE_NUMBER", 46: "DUPLICATE_SEQUENCE_NUMBER",
    47: "INVALID_PRODUCER_EPOCH", 48: "INVALID_TXN_STATE", 49: "INVALID_PRODUCER_ID_MAPPING",
    50: "INVALID_TRANSACTION_TIMEOUT", 51: "CONCURRENT_TRANSACTIONS", 52: "TRANSACTION_COORDINATOR_FENCED",
    53: "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
    56: "KAFKA_STORAGE_ERROR", 59: "UNKNOWN_PRODUCER_ID", 74: "FENCED_LEADER_EPOCH", 75: "UNKNOWN_LEADER_EPOCH",
    87: "INVALID_RECORD", 90: "PRODUCER_FENCED", 100: "UNKNOWN_TOPIC_ID",
}
#: asked again: the partition moved, the broker is busy or still loading, or replicas are catching up
RETRIABLE = frozenset({3, 5, 6, 7, 14, 15, 16, 19, 20, 51, 56, 74, 75})
#: the principal lacks an ACL: no retry helps until it is granted (topic, cluster, transactional id)
AUTHORIZATION = frozenset({29, 31, 53})
#: the leader moved or is unknown: find it again before asking again
STALE_LEADER = frozenset({3, 5, 6, 74, 75})


def name(code: int) -> str:
    return NAMES.get(code, f"error {code}")


class WireError(MirrorError):
    """A broker connection that cannot be set up or used as asked: one line naming the cluster and broker."""


class BrokerRefused(WireError):
    """A broker answered an error no retry changes (:data:`AUTHORIZATION`): ``code`` is Kafka's error code, which
    librdkafka's KafkaError codes share, so callers sort it as the records path does."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


class ProducerFenced(WireError):
    """A newer producer took the transactional id over (its InitProducerId bumped the epoch): this one must stop
    writing; its open transaction is the new owner's to abort."""
