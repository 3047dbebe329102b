"""The one place where Kafka (Java) client settings become librdkafka settings.

mm2.properties files carry Java client names (``sasl.jaas.config``, ``ssl.truststore.location``,
``max.request.size``...). librdkafka spells several of them differently or cannot read the Java
formats (JKS). Every translation lives here; anything not listed passes through unchanged and is
validated by librdkafka itself when the configuration is loaded.
"""

from __future__ import annotations

import re
from typing import Literal

ClientKind = Literal["consumer", "producer", "admin"]

# Java name -> librdkafka name, when only the name differs.
_RENAMES: dict[str, str] = {
    "fetch.max.wait.ms": "fetch.wait.max.ms",
    "max.request.size": "message.max.bytes",
    "delivery.timeout.ms": "message.timeout.ms",
    "ssl.key.password": "ssl.key.password",
    "ssl.keystore.password": "ssl.keystore.password",
}

# Java client settings with no librdkafka meaning (serialisers, JVM-only tuning): dropped, with a warning.
_JAVA_ONLY = frozenset({
    "key.serializer", "value.serializer", "key.deserializer", "value.deserializer",
    "max.poll.records", "max.poll.interval.ms.java", "interceptor.classes", "metric.reporters",
    "ssl.truststore.type", "ssl.keystore.type", "ssl.truststore.password", "send.buffer.bytes.java",
    "sasl.login.callback.handler.class", "sasl.client.callback.handler.class", "client.dns.lookup",
    "ssl.enabled.protocols", "ssl.protocol", "ssl.trustmanager.algorithm", "ssl.keymanager.algorithm",
    "security.providers", "auto.include.jmx.reporter", "metrics.recording.level",
})

_CONSUMER_ONLY = frozenset({
    "group.id", "group.instance.id", "group.protocol", "group.remote.assignor",
    "partition.assignment.strategy", "session.timeout.ms", "heartbeat.interval.ms",
    "max.poll.interval.ms", "auto.offset.reset", "enable.auto.commit", "auto.commit.interval.ms",
    "enable.auto.offset.store", "isolation.level", "fetch.min.bytes", "fetch.wait.max.ms",
    "fetch.max.bytes", "max.partition.fetch.bytes", "fetch.message.max.bytes",
    "queued.max.messages.kbytes", "queued.min.messages", "check.crcs", "enable.partition.eof",
})
_PRODUCER_ONLY = frozenset({
    "acks", "request.required.acks", "linger.ms", "queue.buffering.max.ms", "batch.size",
    "batch.num.messages", "compression.type", "compression.codec", "enable.idempotence",
    "message.timeout.ms", "queue.buffering.max.kbytes", "queue.buffering.max.messages",
    "transactional.id", "transaction.timeout.ms", "retries", "retry.backoff.ms",
    "max.in.flight.requests.per.connection", "max.in.flight", "partitioner", "sticky.partitioning.linger.ms",
    "delivery.report.only.error",
})

_JAAS = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')
_ASSIGNORS = {
    "org.apache.kafka.clients.consumer.CooperativeStickyAssignor": "cooperative-sticky",
    "org.apache.kafka.clients.consumer.RangeAssignor": "range",
    "org.apache.kafka.clients.consumer.RoundRobinAssignor": "roundrobin",
}

SECRET_PATTERN = re.compile(r"password|secret|jaas|token|credential|private", re.IGNORECASE)


def is_secret(key: str) -> bool:
    return bool(SECRET_PATTERN.search(key))


def redact(props: dict[str, str]) -> dict[str, str]:
    """A copy safe to log or display: secret values replaced."""
    return {k: ("********" if is_secret(k) else v) for k, v in props.items()}


def applies_to(key: str, kind: ClientKind) -> bool:
    """Whether a (translated) setting belongs to this kind of client."""
    if key in _CONSUMER_ONLY:
        return kind == "consumer"
    if key in _PRODUCER_ONLY:
        return kind == "producer"
    return True


def translate(props: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    """Translate Java client settings into librdkafka ones; return (settings, warnings).

    Raises ValueError naming the offending setting when a value cannot be expressed for librdkafka.
    """
    out: dict[str, str] = {}
    warnings: list[str] = []
    for key, value in props.items():
        if key in _JAVA_ONLY:
            if key == "ssl.truststore.type" and value.upper() not in ("PEM", ""):
                raise ValueError(
                    f"{key}={value}: librdkafka cannot read {value} trust stores; "
                    "convert to PEM and set ssl.truststore.type=PEM (or ssl.ca.location)")
            if key == "ssl.keystore.type" and value.upper() not in ("PKCS12", "PEM", ""):
                raise ValueError(
                    f"{key}={value}: librdkafka reads PKCS12 key stores or PEM files, not {value}")
            if key not in ("ssl.truststore.type", "ssl.keystore.type", "ssl.truststore.password"):
                warnings.append(f"'{key}' is a Java-client setting with no effect here; ignored")
            continue
        if key == "sasl.jaas.config":
            fields = dict(_JAAS.findall(value))
            if "username" not in fields or "password" not in fields:
                raise ValueError("sasl.jaas.config: expected username=\"...\" and password=\"...\"")
            out["sasl.username"] = fields["username"]
            out["sasl.password"] = fields["password"]
            continue
        if key == "ssl.truststore.location":
            out["ssl.ca.location"] = value
            continue
        if key == "ssl.endpoint.identification.algorithm":
            out[key] = "none" if value.strip() == "" else value.strip().lower()
            continue
        if key == "partition.assignment.strategy":
            out[key] = ",".join(_ASSIGNORS.get(v.strip(), v.strip()) for v in value.split(","))
            continue
        if key == "buffer.memory":
            out["queue.buffering.max.kbytes"] = str(max(1, int(value) // 1024))
            continue
        if key == "isolation.level":
            out[key] = value.strip().lower()
            continue
        out[_RENAMES.get(key, key)] = value
    return out, warnings
