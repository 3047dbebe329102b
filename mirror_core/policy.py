"""Replication policies: how a source topic is named on the target (MirrorMaker 2 semantics)."""

from __future__ import annotations

from dataclasses import dataclass

HEARTBEATS_TOPIC = "heartbeats"

DEFAULT_POLICY_NAMES = frozenset({
    "DefaultReplicationPolicy",
    "org.apache.kafka.connect.mirror.DefaultReplicationPolicy",
    "default",
})
IDENTITY_POLICY_NAMES = frozenset({
    "IdentityReplicationPolicy",
    "org.apache.kafka.connect.mirror.IdentityReplicationPolicy",
    "identity",
    # Older third-party implementation many MM2 users copied before Kafka 3.0 shipped its own.
    "com.amazonaws.kafka.samples.CustomMM2ReplicationPolicy",
})


@dataclass(frozen=True)
class ReplicationPolicy:
    """Default policy: ``<source><sep><topic>``. Prevents cycles by name (see :meth:`is_cycle`)."""

    separator: str = "."

    #: True when records must carry the provenance header for cycle prevention.
    uses_provenance = False

    def format_remote_topic(self, source_alias: str, topic: str) -> str:
        return f"{source_alias}{self.separator}{topic}"

    def topic_source(self, topic: str) -> str | None:
        """The cluster alias a remote topic came from, or None for a local topic."""
        head, sep, _ = topic.partition(self.separator)
        return head if sep and head else None

    def upstream_topic(self, topic: str) -> str | None:
        head, sep, tail = topic.partition(self.separator)
        return tail if sep and head else None

    def is_heartbeats_topic(self, topic: str) -> bool:
        return topic == HEARTBEATS_TOPIC or topic.endswith(self.separator + HEARTBEATS_TOPIC)

    def is_internal_topic(self, topic: str) -> bool:
        """Kafka, Connect, MM2 and mirror_core internal topics are never replicated."""
        return (
            topic.startswith("__")
            or topic.startswith(".")
            or topic.endswith(".internal")
            or topic.endswith("-internal")
        )

    def is_cycle(self, topic: str, target_alias: str) -> bool:
        """True when ``topic`` (possibly multi-hop) already came from ``target_alias``."""
        current: str | None = topic
        while current:
            source = self.topic_source(current)
            if source is None:
                return False
            if source == target_alias:
                return True
            current = self.upstream_topic(current)
        return False

    @property
    def name(self) -> str:
        return "DefaultReplicationPolicy"


@dataclass(frozen=True)
class IdentityReplicationPolicy(ReplicationPolicy):
    """Remote topic keeps the source name; cycles are prevented by the provenance header.

    Heartbeats topics keep the default naming, as in MirrorMaker 2, so liveness stays traceable.
    """

    uses_provenance = True

    def format_remote_topic(self, source_alias: str, topic: str) -> str:
        if self.is_heartbeats_topic(topic):
            return super().format_remote_topic(source_alias, topic)
        return topic

    def topic_source(self, topic: str) -> str | None:
        if self.is_heartbeats_topic(topic):
            return super().topic_source(topic)
        return None

    def upstream_topic(self, topic: str) -> str | None:
        if self.is_heartbeats_topic(topic):
            return super().upstream_topic(topic)
        return None

    @property
    def name(self) -> str:
        return "IdentityReplicationPolicy"


def policy_from_name(name: str, separator: str) -> ReplicationPolicy:
    """Build a policy from a MirrorMaker 2 class name (or short name); ValueError when unknown."""
    if name in DEFAULT_POLICY_NAMES:
        return ReplicationPolicy(separator)
    if name in IDENTITY_POLICY_NAMES:
        return IdentityReplicationPolicy(separator)
    raise ValueError(
        f"unknown replication policy '{name}' (supported: DefaultReplicationPolicy, "
        "IdentityReplicationPolicy, with or without the org.apache.kafka.connect.mirror. prefix)"
    )
