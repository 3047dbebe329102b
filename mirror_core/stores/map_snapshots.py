"""Snapshots of the offset map: ``mirror-core.offset-map.<source>.internal`` on the target (compacted).

The offset-sync log (``mirror-core.offset-syncs.<source>.internal``) stays the append-only record of
runs that the replicator writes. Snapshots make reading it bounded: a *round* (offsets/pruning.py)
reads the map, prunes it below the source log starts, and writes in one transaction
- per partition whose runs changed, its live runs as chunks: key ``["topic", partition, chunk]``,
  value ``INT16 version (1), INT64 position, INT64 horizon, INT32 chunks, INT32 runs`` then the runs'
  source offsets and target offsets (INT64 each, big-endian); stale higher chunks get tombstones;
- a round marker: key ``["__round__"]``, value JSON ``{"position": P, "ts": ms, "by": instance}``.
``position`` means "every offset-sync entry below this log offset is reflected here". A reader loads
the snapshots, then reads the offset-sync log from the round's position only, skipping a partition's
entries below its snapshot's position. Only after the round committed does the pruner delete the
offset-sync log below the round's position (DeleteRecords): a crash anywhere leaves either the old
round (and the log it needs) or the new one. No snapshot topic (maps written before it existed) means
the log is read from its start, as before.
"""

from __future__ import annotations

import json
import struct
import sys
from array import array
from dataclasses import dataclass, field

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

from mirror_core.config.client_defaults import KAFKA_DEFAULT_MESSAGE_MAX_BYTES
from mirror_core.errors import ProgressError
from mirror_core.stores.internal_topics import TopicTail, ensure_internal_topic
from mirror_core.stores.offset_map import PartitionMap

SNAPSHOT_TOPIC_CONFIG = {"cleanup.policy": "compact", "min.compaction.lag.ms": "60000", "segment.ms": "3600000",
                         "max.message.bytes": str(KAFKA_DEFAULT_MESSAGE_MAX_BYTES)}
#: Runs per chunk: 16 bytes each, so a record stays well under the default 1 MB message limit.
CHUNK_RUNS = 32_768
_HEADER = struct.Struct(">hqqii")
_VERSION = 1
ROUND_KEY = b'["__round__"]'

Key = tuple[str, int]


def snapshot_topic(source_alias: str) -> str:
    return f"mirror-core.offset-map.{source_alias}.internal"


def ensure_snapshot_topic(admin: AdminClient, topic: str, replication_factor: int) -> None:
    ensure_internal_topic(admin, topic, replication_factor, SNAPSHOT_TOPIC_CONFIG)


def _chunk_key(topic: str, partition: int, chunk: int) -> bytes:
    return json.dumps([topic, partition, chunk], separators=(",", ":")).encode()


def _big_endian(values: array) -> bytes:  # type: ignore[type-arg]
    if sys.byteorder == "little":
        values = array("q", values)
        values.byteswap()
    return values.tobytes()


def _from_big_endian(raw: bytes) -> array:  # type: ignore[type-arg]
    values = array("q")
    values.frombytes(raw)
    if sys.byteorder == "little":
        values.byteswap()
    return values


def encode_chunks(pm: PartitionMap, position: int) -> list[bytes]:
    """The values of one partition's snapshot (at least one chunk, even for an empty map)."""
    n = len(pm)
    count = max(1, -(-n // CHUNK_RUNS))
    out = []
    for c in range(count):
        lo, hi = c * CHUNK_RUNS, min(n, (c + 1) * CHUNK_RUNS)
        out.append(_HEADER.pack(_VERSION, position, pm.horizon, count, hi - lo)
                   + _big_endian(pm.sources[lo:hi]) + _big_endian(pm.targets[lo:hi]))
    return out


@dataclass
class _Chunk:
    position: int
    horizon: int
    count: int
    sources: array  # type: ignore[type-arg]
    targets: array  # type: ignore[type-arg]


def decode_chunk(raw: bytes) -> _Chunk:
    version, position, horizon, count, runs = _HEADER.unpack_from(raw, 0)
    if version != _VERSION:
        raise ProgressError(f"offset-map snapshot of version {version} not understood (this mirror_core reads "
                            f"version {_VERSION}); upgrade mirror_core")
    body = raw[_HEADER.size:]
    return _Chunk(position, horizon, count, _from_big_endian(body[:8 * runs]), _from_big_endian(body[8 * runs:]))


@dataclass
class Snapshots:
    """The newest committed round: per partition, its runs and the log position they reflect."""

    round_position: int = 0
    maps: dict[Key, PartitionMap] = field(default_factory=dict)
    positions: dict[Key, int] = field(default_factory=dict)
    chunks: dict[Key, int] = field(default_factory=dict)


def load_snapshots(consumer: Consumer, topic: str, timeout: float = 30.0) -> Snapshots:
    """Read the snapshot topic (compacted: about one record per partition) into runs."""
    md = consumer.list_topics(topic, timeout=timeout).topics.get(topic)
    if md is None or md.error is not None:
        return Snapshots()  # no round yet (or a map written before snapshots existed)
    tail = TopicTail(consumer, topic)
    parts: dict[Key, dict[int, _Chunk]] = {}
    out = Snapshots()
    for key, value in tail.read_new(timeout):
        if key == ROUND_KEY:
            if value is not None:
                out.round_position = int(json.loads(value)["position"])
            continue
        t, p, c = json.loads(key)
        chunks = parts.setdefault((str(t), int(p)), {})
        if value is None:
            chunks.pop(int(c), None)
        else:
            chunks[int(c)] = decode_chunk(value)
    for k, chunks in parts.items():
        if not chunks:
            continue
        first = chunks.get(0)
        if first is None or any(i not in chunks or chunks[i].position != first.position
                                for i in range(first.count)):
            raise ProgressError(f"{topic}: the snapshot of {k[0]}[{k[1]}] is incomplete (chunks {sorted(chunks)}); "
                                "the topic was altered outside mirror_core — delete it and the offset-syncs "
                                "topic's trimmed history cannot be recovered")
        pm = PartitionMap()
        for i in range(first.count):
            pm.sources.extend(chunks[i].sources)
            pm.targets.extend(chunks[i].targets)
        pm.horizon = first.horizon
        out.maps[k], out.positions[k], out.chunks[k] = pm, first.position, first.count
    return out


def write_round(producer: Producer, topic: str, changed: dict[Key, PartitionMap], previous_chunks: dict[Key, int],
                position: int, instance: str, now_ms: int) -> None:
    """Queue one round's records (the caller's transaction makes them atomic): the changed partitions'
    chunks, tombstones for their stale chunks, then the round marker."""
    for (t, p), pm in changed.items():
        values = encode_chunks(pm, position)
        for c, value in enumerate(values):
            producer.produce(topic, key=_chunk_key(t, p, c), value=value, partition=0)
        for c in range(len(values), previous_chunks.get((t, p), 0)):
            producer.produce(topic, key=_chunk_key(t, p, c), value=None, partition=0)
    marker = {"position": position, "ts": now_ms, "by": instance}
    producer.produce(topic, key=ROUND_KEY, value=json.dumps(marker).encode(), partition=0)
