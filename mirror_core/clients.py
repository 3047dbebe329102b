"""Kafka clients for a cluster and a role, with the settings replication needs.

User settings from mm2.properties are applied last except for the few that the replication
guarantees depend on (manual offset control, idempotence, ack semantics); those are enforced here.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import AdminClient

from mirror_core.config.model import ClusterConfig

log = logging.getLogger(__name__)

# Throughput-oriented defaults; users can override them with <alias>.consumer.* / producer.*.
CONSUMER_DEFAULTS = {
    "fetch.min.bytes": "65536",
    "fetch.wait.max.ms": "20",
    "max.partition.fetch.bytes": "4194304",
    "fetch.max.bytes": "67108864",
    "queued.max.messages.kbytes": "131072",
    "session.timeout.ms": "20000",
    "heartbeat.interval.ms": "2000",
    "max.poll.interval.ms": "300000",
    "partition.assignment.strategy": "cooperative-sticky",
    "topic.metadata.refresh.interval.ms": "30000",
    # Aborted transactions on the source must never become visible data on the target.
    "isolation.level": "read_committed",
}
CONSUMER_ENFORCED = {
    "enable.auto.commit": "false",
    "enable.auto.offset.store": "false",
    "enable.partition.eof": "false",
}
PRODUCER_DEFAULTS = {
    "linger.ms": "10",
    "batch.size": "1048576",
    "batch.num.messages": "100000",
    "queue.buffering.max.messages": "2000000",
    "queue.buffering.max.kbytes": "1048576",
    "message.timeout.ms": "120000",
    "compression.type": "none",
}
PRODUCER_ENFORCED = {
    # Nothing is acknowledged to the progress store before every in-sync replica has it, and the
    # producer never reorders or duplicates on retry.
    "acks": "all",
    "enable.idempotence": "true",
}


def error_code(exc: BaseException) -> int | None:
    """The librdkafka error code a KafkaException carries, or None."""
    err = exc.args[0] if exc.args else None
    return err.code() if isinstance(err, KafkaError) else None


class ClusterHealth:
    """Tracks whether a cluster answers, from librdkafka's error callbacks; thread-safe."""

    def __init__(self, alias: str, on_change: Callable[[str, bool], None] | None = None) -> None:
        self.alias = alias
        self._lock = threading.Lock()
        self.reachable = True
        self.last_error: str | None = None
        self.last_error_at: float | None = None
        self._on_change = on_change
        self._last_logged = 0.0

    def error_cb(self, err: KafkaError) -> None:
        code = err.code()
        down = code in (KafkaError._ALL_BROKERS_DOWN, KafkaError._TRANSPORT, KafkaError._RESOLVE,
                        KafkaError._AUTHENTICATION, KafkaError._SSL)
        with self._lock:
            self.last_error = err.str()
            self.last_error_at = time.time()
            if down and self.reachable:
                self.reachable = False
                if self._on_change:
                    self._on_change(self.alias, False)
            now = time.monotonic()
            if now - self._last_logged > 10:
                self._last_logged = now
                log.warning("cluster %s: %s", self.alias, err.str())

    def mark_ok(self) -> None:
        with self._lock:
            if not self.reachable:
                self.reachable = True
                log.info("cluster %s reachable again", self.alias)
                if self._on_change:
                    self._on_change(self.alias, True)


def _with_callbacks(settings: dict[str, Any], health: ClusterHealth | None) -> dict[str, Any]:
    if health is not None:
        settings["error_cb"] = health.error_cb
    settings.setdefault("logger", logging.getLogger("librdkafka"))
    return settings


def make_consumer(cluster: ClusterConfig, group_id: str, overrides: Mapping[str, str] | None = None,
                  health: ClusterHealth | None = None, enforced: Mapping[str, str] | None = None) -> Consumer:
    settings: dict[str, Any] = dict(CONSUMER_DEFAULTS)
    settings.update(cluster.client_settings("consumer", overrides))
    settings["group.id"] = group_id
    settings.update(CONSUMER_ENFORCED)
    settings.update(enforced or {})
    return Consumer(_with_callbacks(settings, health))


def make_producer(cluster: ClusterConfig, overrides: Mapping[str, str] | None = None,
                  health: ClusterHealth | None = None, enforced: Mapping[str, str] | None = None) -> Producer:
    settings: dict[str, Any] = dict(PRODUCER_DEFAULTS)
    settings.update(cluster.client_settings("producer", overrides))
    settings.update(PRODUCER_ENFORCED)
    settings.update(enforced or {})
    return Producer(_with_callbacks(settings, health))


def make_admin(cluster: ClusterConfig, health: ClusterHealth | None = None) -> AdminClient:
    settings: dict[str, Any] = cluster.client_settings("admin")
    return AdminClient(_with_callbacks(settings, health))
