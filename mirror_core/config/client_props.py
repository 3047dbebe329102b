"""The one place where Kafka (Java) client settings become librdkafka settings.

mm2.properties files carry Java client names (``sasl.jaas.config``, ``ssl.truststore.location``,
``max.request.size``...). librdkafka spells several of them differently or cannot read the Java
formats: TLS stores are read by :mod:`tls_stores`, SASL/JAAS by :mod:`sasl`, renames and Java-only
settings are handled here. :func:`translate` takes one client's settings after precedence has been
applied (several Java keys work together: a store's location, type and passwords); anything not
listed passes through unchanged and is validated by librdkafka itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from mirror_core.config.errors import SettingError
from mirror_core.config.sasl import SASL_KEYS, translate_sasl
from mirror_core.config.tls_stores import STORE_KEYS, read_stores
from mirror_core.redaction import is_secret, register_secret

ClientKind = Literal["consumer", "producer", "admin"]

# Java name -> librdkafka name, when only the name differs.
_RENAMES: dict[str, str] = {
    "fetch.max.wait.ms": "fetch.wait.max.ms",
    "max.request.size": "message.max.bytes",
    "delivery.timeout.ms": "message.timeout.ms",
    "send.buffer.bytes": "socket.send.buffer.bytes",
    "receive.buffer.bytes": "socket.receive.buffer.bytes",
}

# Java client settings with no librdkafka meaning (serialisers, JVM-only tuning): dropped, with a warning.
JAVA_ONLY = frozenset({
    "key.serializer", "value.serializer", "key.deserializer", "value.deserializer",
    "max.poll.records", "interceptor.classes", "metric.reporters", "client.dns.lookup",
    "ssl.enabled.protocols", "ssl.protocol", "ssl.trustmanager.algorithm", "ssl.keymanager.algorithm",
    "ssl.secure.random.implementation", "ssl.engine.factory.class", "ssl.provider",
    "security.providers", "auto.include.jmx.reporter", "metrics.recording.level", "metrics.num.samples",
    "metrics.sample.window.ms", "max.block.ms", "default.api.timeout.ms", "exclude.internal.topics",
    "metadata.max.idle.ms", "socket.connection.setup.timeout.max.ms", "retry.backoff.max.ms.java",
    "sasl.login.refresh.window.factor", "sasl.login.refresh.window.jitter", "sasl.login.refresh.min.period.seconds",
    "sasl.login.refresh.buffer.seconds", "sasl.login.connect.timeout.ms", "sasl.login.read.timeout.ms",
    "sasl.login.retry.backoff.ms", "sasl.login.retry.backoff.max.ms", "sasl.login.class",
    "sasl.kerberos.ticket.renew.window.factor", "sasl.kerberos.ticket.renew.jitter",
    "sasl.oauthbearer.scope.claim.name", "sasl.oauthbearer.expected.audience",
    "sasl.oauthbearer.expected.issuer", "sasl.oauthbearer.clock.skew.seconds", "sasl.oauthbearer.jwks.endpoint.url",
    "sasl.oauthbearer.jwks.endpoint.refresh.ms", "sasl.oauthbearer.jwks.endpoint.retry.backoff.ms",
    "sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms", "sasl.oauthbearer.header.urlencode",
    "enable.metrics.push", "partitioner.class", "partitioner.ignore.keys", "partitioner.adaptive.partitioning.enable",
    "partitioner.availability.timeout.ms",
})

_CONSUMER_ONLY = frozenset({
    "group.id", "group.instance.id", "group.protocol", "group.remote.assignor",
    "partition.assignment.strategy", "session.timeout.ms", "heartbeat.interval.ms",
    "max.poll.interval.ms", "auto.offset.reset", "enable.auto.commit", "auto.commit.interval.ms",
    "enable.auto.offset.store", "isolation.level", "fetch.min.bytes", "fetch.wait.max.ms",
    "fetch.max.bytes", "max.partition.fetch.bytes", "fetch.message.max.bytes",
    "queued.max.messages.kbytes", "queued.min.messages", "fetch.queue.backoff.ms", "check.crcs",
    "enable.partition.eof",
})
_PRODUCER_ONLY = frozenset({
    "acks", "request.required.acks", "linger.ms", "queue.buffering.max.ms", "batch.size",
    "batch.num.messages", "compression.type", "compression.codec", "enable.idempotence",
    "message.timeout.ms", "queue.buffering.max.kbytes", "queue.buffering.max.messages",
    "transactional.id", "transaction.timeout.ms", "retries", "retry.backoff.ms",
    "max.in.flight.requests.per.connection", "max.in.flight", "partitioner", "sticky.partitioning.linger.ms",
    "delivery.report.only.error",
})
_ASSIGNORS = {
    "org.apache.kafka.clients.consumer.CooperativeStickyAssignor": "cooperative-sticky",
    "org.apache.kafka.clients.consumer.RangeAssignor": "range",
    "org.apache.kafka.clients.consumer.RoundRobinAssignor": "roundrobin",
}
#: Java client names this module understands (beyond librdkafka's own), for "did you mean".
KNOWN_JAVA_KEYS = frozenset(_RENAMES) | JAVA_ONLY | STORE_KEYS | SASL_KEYS | frozenset({
    "ssl.endpoint.identification.algorithm", "partition.assignment.strategy", "buffer.memory", "isolation.level",
    "security.protocol", "bootstrap.servers", "client.id", "sasl.kerberos.service.name",
}) | _CONSUMER_ONLY | _PRODUCER_ONLY




@dataclass
class Translation:
    settings: dict[str, str] = field(default_factory=dict)
    #: librdkafka key -> the Java key it was made from (for error messages naming the file line)
    sources: dict[str, str] = field(default_factory=dict)
    #: (Java key, warning)
    warnings: list[tuple[str, str]] = field(default_factory=list)


def applies_to(key: str, kind: ClientKind) -> bool:
    """Whether a (translated) setting belongs to this kind of client."""
    if key in _CONSUMER_ONLY:
        return kind == "consumer"
    if key in _PRODUCER_ONLY:
        return kind == "producer"
    return True


def _bytes(key: str, value: str) -> int:
    try:
        return int(value.strip())
    except ValueError:
        raise SettingError(key, f"expected a number of bytes, got '{value.strip()}' (Java's {key} takes a "
                                      "plain number, e.g. 33554432 for 32 MiB)") from None


def translate(java: Mapping[str, str]) -> Translation:
    """Translate one client's Java settings into librdkafka ones.

    Raises :class:`SettingError` naming the Java key when a value cannot be expressed for
    librdkafka (an unreadable trust store, a malformed JAAS line...). Secret values are registered
    with :mod:`mirror_core.redaction` on the way.
    """
    out = Translation()
    for key, value in java.items():
        if is_secret(key):
            register_secret(value)
    if any(k in STORE_KEYS for k in java):
        tls = read_stores(java)
        out.settings.update(tls.settings)
        out.sources.update(tls.sources)
        out.warnings += [(next(iter(tls.sources.values()), "ssl.truststore.location"), w) for w in tls.warnings]
        register_secret(tls.settings.get("ssl.key.pem", ""))
    if any(k in SASL_KEYS for k in java):
        warnings: list[str] = []
        sasl, sources = translate_sasl(java, warnings.append)
        out.settings.update(sasl)
        out.sources.update(sources)
        out.warnings += [("sasl.jaas.config", w) for w in warnings]
        for k, v in sasl.items():
            if is_secret(k):
                register_secret(v)
    for key, value in java.items():
        if key in STORE_KEYS or key in SASL_KEYS:
            continue
        if key in JAVA_ONLY:
            out.warnings.append((key, f"'{key}' is a Java-client setting with no effect here; ignored"))
            continue
        lib_key, lib_value = _RENAMES.get(key, key), value
        if key == "ssl.endpoint.identification.algorithm":
            lib_value = "none" if value.strip() == "" else value.strip().lower()
        elif key == "partition.assignment.strategy":
            lib_value = ",".join(_ASSIGNORS.get(v.strip(), v.strip()) for v in value.split(","))
        elif key == "buffer.memory":
            lib_key, lib_value = "queue.buffering.max.kbytes", str(max(1, _bytes(key, value) // 1024))
        elif key == "isolation.level":
            lib_value = value.strip().lower()
        elif key == "sasl.mechanisms":
            lib_value = value.strip().upper()
        out.settings[lib_key] = lib_value
        out.sources[lib_key] = key
    return out
