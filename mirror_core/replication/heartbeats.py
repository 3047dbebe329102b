"""Heartbeats in MirrorMaker 2's record layout.

For a flow ``A->B`` the mirror writes a heartbeat into the ``heartbeats`` topic of the *source*
cluster A every interval; the flow replicates it (heartbeats topics are always replicated) to
``A.heartbeats`` on B. A heartbeat arriving on B proves the whole path (source readable, mirror
alive, target writable); its age and latency are exported as metrics.

Layout (Kafka protocol types, big-endian): key = STRING sourceClusterAlias, STRING targetClusterAlias;
value = INT16 version (0), INT64 timestamp (ms). STRING is an INT16 length followed by UTF-8 bytes.
"""

from __future__ import annotations

import contextlib
import struct
import time

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from mirror_core.policy import HEARTBEATS_TOPIC
from mirror_core.stores.internal_topics import ensure_internal_topic


def _string(value: str) -> bytes:
    raw = value.encode()
    return struct.pack(">h", len(raw)) + raw


def encode_key(source: str, target: str) -> bytes:
    return _string(source) + _string(target)


def encode_value(timestamp_ms: int) -> bytes:
    return struct.pack(">hq", 0, timestamp_ms)


def decode_key(raw: bytes) -> tuple[str, str]:
    (n,) = struct.unpack_from(">h", raw, 0)
    source = raw[2 : 2 + n].decode()
    (m,) = struct.unpack_from(">h", raw, 2 + n)
    target = raw[4 + n : 4 + n + m].decode()
    return source, target


def decode_value(raw: bytes) -> int:
    _version, ts = struct.unpack(">hq", raw[:10])
    return int(ts)


def ensure_heartbeats_topic(admin: AdminClient, replication_factor: int, timeout: float = 15) -> None:
    ensure_internal_topic(admin, HEARTBEATS_TOPIC, replication_factor, {"cleanup.policy": "compact"}, timeout)


class HeartbeatEmitter:
    def __init__(self, producer: Producer, source: str, target: str, interval_s: float) -> None:
        self._producer = producer
        self._key = encode_key(source, target)
        self._interval = interval_s
        self._next = 0.0

    def maybe_emit(self, now: float) -> None:
        if now < self._next:
            return
        self._next = now + self._interval
        ts = int(time.time() * 1000)
        # A full queue means the source is unreachable; the next heartbeat tries again.
        with contextlib.suppress(BufferError):
            self._producer.produce(HEARTBEATS_TOPIC, key=self._key, value=encode_value(ts), timestamp=ts)
        self._producer.poll(0)
