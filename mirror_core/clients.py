"""Kafka clients for a cluster and a role, with the settings replication needs.

User settings from mm2.properties are applied last except for the few that the replication
guarantees depend on (manual offset control, idempotence, ack semantics); those are enforced here.
"""

from __future__ import annotations

import contextlib
import logging
import re
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient

from mirror_core.config.client_defaults import (
    CONSUMER_DEFAULTS,
    CONSUMER_ENFORCED,
    PRODUCER_DEFAULTS,
    PRODUCER_ENFORCED,
    STANDING_CONSUMER_DEFAULTS,
)
from mirror_core.config.model import ClusterConfig
from mirror_core.config.sasl import client_conf
from mirror_core.errors import FencedInstance, MirrorError

log = logging.getLogger(__name__)


class _RepeatFilter(logging.Filter):
    """Lets one copy of a repeated librdkafka message through per window: a broker that rejects every
    reconnect (wrong password, unknown host) would otherwise log the same line several times a second,
    and a client polled after a while hands over its whole backlog at once."""

    _VARYING = re.compile(r"\(after \d+ms in state \w+[^)]*\)|rdkafka#\w+-\d+")

    def __init__(self, window_s: float = 30.0) -> None:
        super().__init__()
        self.window_s = window_s
        self._seen: dict[str, float] = {}
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        key = self._VARYING.sub("", record.getMessage())
        now = time.monotonic()
        with self._lock:
            last = self._seen.get(key)
            if last is not None and now - last < self.window_s:
                return False
            if len(self._seen) > 1000:
                self._seen.clear()
            self._seen[key] = now
        return True


logging.getLogger("librdkafka").addFilter(_RepeatFilter())

def error_code(exc: BaseException) -> int | None:
    """The librdkafka error code a KafkaException carries, or None."""
    err = exc.args[0] if exc.args else None
    return err.code() if isinstance(err, KafkaError) else None


def fatal_consumer_error(err: KafkaError, group: str, cluster: str, memberid: Callable[[], str]) -> MirrorError | None:
    """What a fatal error of a consumer (of ``group`` on ``cluster``; ``memberid``: its member id) means, or None if
    ``err`` is not fatal. librdkafka reports a fenced static member as a generic _FATAL whose text names
    group.instance.id."""
    if err.code() != KafkaError._FATAL and not err.fatal():
        return None
    text = err.str()
    if "group.instance.id" in text or "FENCED_INSTANCE_ID" in text:
        try:
            member_id = memberid() or ""
        except RuntimeError:  # closed already
            member_id = ""
        return FencedInstance(f"group {group} on {cluster} fenced this process's instance id (FENCED_INSTANCE_ID)",
                              group, member_id)
    return MirrorError(f"consumer of group {group} failed fatally: {text}")


# What an operator should check, per librdkafka error code that says why a cluster cannot be used.
_CAUSES: dict[int, str] = {
    KafkaError._AUTHENTICATION: "authentication failed (check sasl.mechanism and the credentials in "
                                "sasl.jaas.config: username/password, clientId/clientSecret with the token "
                                "endpoint, or the Kerberos principal and keytab)",
    KafkaError._SSL: "TLS handshake failed (check ssl.truststore.location and the broker certificate)",
    KafkaError._RESOLVE: "unknown host (a name in bootstrap.servers does not resolve)",
    KafkaError._TRANSPORT: "cannot connect",
}


class ClusterHealth:
    """Tracks whether a cluster answers, from librdkafka's error callbacks and the mirror's own client
    (wire/metadata.py Reachability: mark_down, mark_ok); thread-safe.

    Callbacks arrive only while a client is polled; :func:`explain_failure` polls before reading.
    """

    def __init__(self, alias: str, on_change: Callable[[str, bool], None] | None = None) -> None:
        self.alias = alias
        self._lock = threading.Lock()
        self.reachable = True
        self.last_error: str | None = None
        self.last_error_at: float | None = None
        #: The last error that says *why* (not just "all brokers down"): (librdkafka code, message).
        self.cause: tuple[int, str] | None = None
        self._on_change = on_change
        self._last_logged = 0.0

    def error_cb(self, err: KafkaError) -> None:
        code = err.code()
        down = code in (KafkaError._ALL_BROKERS_DOWN, KafkaError._TRANSPORT, KafkaError._RESOLVE,
                        KafkaError._AUTHENTICATION, KafkaError._SSL)
        with self._lock:
            self.last_error = err.str()
            self.last_error_at = time.time()
            if code != KafkaError._ALL_BROKERS_DOWN:
                self.cause = (code, err.str())
            if down:
                self._down()
            now = time.monotonic()
            if now - self._last_logged > 10:
                self._last_logged = now
                log.warning("cluster %s: %s", self.alias, err.str())

    def describe(self, specific_only: bool = False) -> str | None:
        """``cluster <alias>: <what is wrong>: <librdkafka's words>``, or None if no error was seen
        (or, with ``specific_only``, none more telling than "all brokers are down")."""
        with self._lock:
            cause = self.cause
            if cause is None and self.last_error is not None and not specific_only:
                cause = (KafkaError._ALL_BROKERS_DOWN, self.last_error)
        if cause is None:
            return None
        code, message = cause
        what = _CAUSES.get(code)
        return f"cluster {self.alias}: {what}: {message}" if what else f"cluster {self.alias}: {message}"

    def mark_down(self, why: str) -> None:
        """The mirror's own client could not set up a connection (wire/metadata.py Reachability): the cluster is
        down, as for librdkafka's transport errors (``why`` is that client's line, said by it already)."""
        with self._lock:
            self.last_error, self.last_error_at = why, time.time()
            self._down()

    def _down(self) -> None:
        """(under the lock) Not reachable: said to ``on_change`` when it was."""
        if self.reachable:
            self.reachable = False
            if self._on_change:
                self._on_change(self.alias, False)

    def mark_ok(self) -> None:
        with self._lock:
            self.cause = None
            if not self.reachable:
                self.reachable = True
                log.info("cluster %s reachable again", self.alias)
                if self._on_change:
                    self._on_change(self.alias, True)


def explain_failure(exc: BaseException, *clients: tuple[Any, ClusterHealth]) -> str:
    """A clear, secret-free reason a call on these clients failed, naming the cluster.

    ``clients`` are (client, its health) pairs, most likely culprit first. librdkafka reports a failed
    metadata request only as a "transport failure"; the real cause (wrong password, TLS, unknown host)
    arrives through the error callback, which is served here.
    """
    for client, _ in clients:
        with contextlib.suppress(Exception):  # a closed client has nothing more to say
            client.poll(0)
    for _, health in clients:
        if described := health.describe(specific_only=True):
            return described
    return next((d for _, h in clients if (d := h.describe())), str(exc))


def _with_callbacks(settings: dict[str, Any], health: ClusterHealth | None) -> dict[str, Any]:
    settings = client_conf(settings)
    if health is not None:
        settings["error_cb"] = health.error_cb
    settings.setdefault("logger", logging.getLogger("librdkafka"))
    return settings


_warned: set[tuple[str, str]] = set()


def _warn_overridden(settings: Mapping[str, Any], enforced: Mapping[str, str], who: str) -> None:
    """Say (once) that a configured value of a setting mirror_core must control is not used."""
    for key, value in enforced.items():
        if key in settings and str(settings[key]).lower() != value and (who, key) not in _warned:
            _warned.add((who, key))
            log.warning("%s: %s=%s is not used: mirror_core needs %s=%s for its guarantees", who, key,
                        settings[key], key, value)


def consumer_settings(cluster: ClusterConfig, group_id: str, overrides: Mapping[str, str] | None = None,
                      enforced: Mapping[str, str] | None = None, standing: bool = False) -> dict[str, Any]:
    """Defaults, then the user's settings, then what the guarantees need. ``standing``: the consumer
    keeps its partitions for the life of the process (STANDING_CONSUMER_DEFAULTS)."""
    settings: dict[str, Any] = {**CONSUMER_DEFAULTS, **(STANDING_CONSUMER_DEFAULTS if standing else {})}
    settings.update(cluster.client_settings("consumer", overrides))
    settings["group.id"] = group_id
    _warn_overridden(settings, CONSUMER_ENFORCED, f"{cluster.alias} consumer")
    settings.update(CONSUMER_ENFORCED)
    settings.update(enforced or {})
    return settings


def make_consumer(cluster: ClusterConfig, group_id: str, overrides: Mapping[str, str] | None = None,
                  health: ClusterHealth | None = None, enforced: Mapping[str, str] | None = None,
                  standing: bool = False) -> Consumer:
    return Consumer(_with_callbacks(consumer_settings(cluster, group_id, overrides, enforced, standing), health))


def producer_settings(cluster: ClusterConfig, overrides: Mapping[str, str] | None = None,
                      enforced: Mapping[str, str] | None = None, warn: bool = False,
                      defaults: Mapping[str, str] | None = None, fits: int | None = None) -> dict[str, Any]:
    """Defaults (``defaults`` over the usual ones), then the user's settings, then what the guarantees need
    (``warn``: say which of the user's settings the guarantees override). ``fits``: the largest batch the
    topics it writes take (internal_topics.internal_topics_limit): batch.size is lowered to it when the
    batches could outgrow it (librdkafka counts the produce request's own headers against batch.size, and
    still sends a single larger record alone, up to message.max.bytes)."""
    settings: dict[str, Any] = {**PRODUCER_DEFAULTS, **(defaults or {})}
    settings.update(cluster.client_settings("producer", overrides))
    if warn:
        _warn_overridden(settings, PRODUCER_ENFORCED, f"{cluster.alias} producer")
    settings.update(PRODUCER_ENFORCED)
    settings.update(enforced or {})
    if fits is not None and batch_limit_bytes(settings) > fits:
        settings["batch.size"] = str(fits)
    return settings


def batch_limit_bytes(settings: Mapping[str, Any]) -> int:
    """The most bytes librdkafka puts in one produce request's batch: min(batch.size, message.max.bytes)."""
    return min(int(settings.get("batch.size", 1_000_000)), int(settings.get("message.max.bytes", 1_000_000)))


def make_producer(cluster: ClusterConfig, overrides: Mapping[str, str] | None = None,
                  health: ClusterHealth | None = None, enforced: Mapping[str, str] | None = None,
                  defaults: Mapping[str, str] | None = None, fits: int | None = None) -> Producer:
    """``fits``: see producer_settings."""
    return Producer(_with_callbacks(producer_settings(cluster, overrides, enforced, True, defaults, fits), health))


def purge_unsent(producer: Producer) -> None:
    """Purge what ``producer`` holds and has not sent (each reported as _PURGE_QUEUE at its next poll or flush),
    without waiting for its broker threads. confluent-kafka's ``blocking=True`` is what sets librdkafka's
    RD_KAFKA_PURGE_F_NON_BLOCKING (the flag is inverted in its Producer.c, 2.16 included); a blocking purge would
    hold the GIL until every broker thread of the producer answered (one stuck resolving an address, in an outage)."""
    with contextlib.suppress(KafkaException):
        producer.purge(in_queue=True, in_flight=False, blocking=True)


def make_admin(cluster: ClusterConfig, health: ClusterHealth | None = None,
               overrides: Mapping[str, str] | None = None) -> AdminClient:
    settings: dict[str, Any] = cluster.client_settings("admin", overrides)
    return AdminClient(_with_callbacks(settings, health))
