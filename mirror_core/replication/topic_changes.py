"""What a TopicManager reports about a flow's remote topics: the changes it makes (or, in a dry run,
proposes), and the problems it meets. Whatever the target rejects (a config, a topic) is a problem of
that topic alone: it is reported, and the other topics go on.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from confluent_kafka import KafkaError, KafkaException

#: Errors about one topic's request (its configs, its name, a policy, its ACLs): the other topics of
#: the same request are unaffected, so these are reported per topic instead of failing the refresh.
PER_TOPIC_ERRORS = frozenset({
    KafkaError.INVALID_CONFIG, KafkaError.POLICY_VIOLATION, KafkaError.INVALID_REQUEST,
    KafkaError.TOPIC_EXCEPTION, KafkaError.TOPIC_AUTHORIZATION_FAILED,
    KafkaError.INVALID_REPLICATION_FACTOR, KafkaError.INVALID_PARTITIONS, KafkaError.INVALID_REPLICA_ASSIGNMENT,
})
#: Creation errors that other configs may cure (the topic is then created without the rejected ones).
CONFIG_ERRORS = frozenset({KafkaError.INVALID_CONFIG, KafkaError.POLICY_VIOLATION})

#: Problems (not changes) a TopicManager reports: kind -> (metric error kind, /status event name).
PROBLEMS = {
    "config-rejected": ("topic_config", "topic config rejected by the target"),
    "create-failed": ("remote_topic_create", "remote topic cannot be created"),
}


@dataclass
class TopicChange:
    """One action taken (or, in a dry run, proposed) on a remote topic, or a problem met doing it."""

    kind: str  # created | partitions | config | missing-source; problems: config-rejected | create-failed
    topic: str
    detail: str

    @property
    def error_kind(self) -> str:
        """The ``kind`` label of the errors metric for a problem."""
        return PROBLEMS[self.kind][0]

    def event(self) -> dict[str, object]:
        """A problem as an entry of a flow's recent events (/status)."""
        return {"at": time.time(), "topic": self.topic, "event": PROBLEMS[self.kind][1], "detail": self.detail}


def error_reason(exc: KafkaException) -> str:
    """The target's own words for a refused request."""
    err = exc.args[0] if exc.args else None
    return err.str() if isinstance(err, KafkaError) else str(exc)


class TopicProblems:
    """Problems met since the caller last took them; a config value the target rejected is reported once."""

    def __init__(self) -> None:
        self._problems: list[TopicChange] = []
        #: (remote topic, config) -> the value (None: the deletion) the target rejected, reported once
        self.rejected: dict[tuple[str, str], str | None] = {}

    def add(self, problem: TopicChange) -> None:
        """Note a problem (a ``config-rejected`` or ``create-failed`` change) for the next :meth:`take`."""
        self._problems.append(problem)

    def take(self) -> list[TopicChange]:
        """Problems met since the last call, once each."""
        problems, self._problems = self._problems, []
        return problems
