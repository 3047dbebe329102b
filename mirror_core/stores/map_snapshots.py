"""Snapshots of the offset map: ``mirror-core.offset-map.<source>.internal`` on the target (compacted).

The offset-sync log (``mirror-core.offset-syncs.<source>.internal``) stays the append-only record of
runs that the replicator writes. Snapshots make reading it bounded: a *round* (offsets/pruning.py)
reads the map, prunes it below the source log starts, and writes in one transaction
- per partition whose map changed, its pieces (stores/offset_map.py) as chunks: key
  ``["topic", partition, chunk]``, value ``INT16 version (2), INT64 position, INT64 horizon, INT32 chunks,
  INT32 pieces``, the pieces' source starts and target starts (INT64 each, big-endian), then
  ``INT32 blocks`` and per block ``INT32 piece (in the chunk), INT64 records, INT32 source bytes,
  INT32 target bytes (-1: contiguous)`` and the two bitmaps in roaring's portable format; a chunk holds
  up to 512 KiB of pieces; stale higher chunks get tombstones;
- a round marker: key ``["__round__"]``, value JSON ``{"position": P, "ts": ms, "by": instance}``.
``position`` means "every offset-sync entry below this log offset is reflected here". A reader loads
the snapshots, then reads the offset-sync log from the round's position only, skipping a partition's
entries below its snapshot's position. Only after the round committed does the pruner delete the
offset-sync log below the round's position (DeleteRecords): a crash anywhere leaves either the old
round (and the log it needs) or the new one. No snapshot topic (maps written before it existed) means
the log is read from its start, as before.

Versions: 1 (runs only, before issue 62) is still read, and a partition read in it is written again in
version 2 by the next round. A process older than version 2 refuses a version-2 snapshot in one line
("version 2 not understood ... upgrade mirror_core") and keeps copying (docs/guarantees.md, "Compact
offset map": a mixed rollout is refused, not supported).
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
from mirror_core.stores.offset_blocks import Block
from mirror_core.stores.offset_map import PartitionMap

SNAPSHOT_TOPIC_CONFIG = {"cleanup.policy": "compact", "min.compaction.lag.ms": "60000", "segment.ms": "3600000",
                         "max.message.bytes": str(KAFKA_DEFAULT_MESSAGE_MAX_BYTES)}
#: Bytes of pieces per chunk: a record stays well under the default 1 MB message limit.
CHUNK_BYTES = 512 * 1024
_HEADER = struct.Struct(">hqqii")
_INT32 = struct.Struct(">i")
_VERSION = 2
_READS = (1, 2)  # 1: runs only, written before blocks existed
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
    groups: list[tuple[int, int, list[bytes]]] = []  # pieces lo..hi and their blocks
    lo, size = 0, 0
    blocks: list[bytes] = []
    for i, source in enumerate(pm.sources):
        block = pm.blocks.get(source)
        raw = b"" if block is None else _INT32.pack(i - lo) + block.encode()
        if i > lo and size + 16 + len(raw) > CHUNK_BYTES:
            groups.append((lo, i, blocks))
            lo, size, blocks = i, 0, []
            raw = b"" if block is None else _INT32.pack(0) + block.encode()
        if raw:
            blocks.append(raw)
        size += 16 + len(raw)
    groups.append((lo, len(pm), blocks))
    return [_HEADER.pack(_VERSION, position, pm.horizon, len(groups), hi - lo) + _big_endian(pm.sources[lo:hi])
            + _big_endian(pm.targets[lo:hi]) + _INT32.pack(len(raws)) + b"".join(raws)
            for lo, hi, raws in groups]


@dataclass
class _Chunk:
    position: int
    horizon: int
    count: int
    sources: array  # type: ignore[type-arg]
    targets: array  # type: ignore[type-arg]
    blocks: dict[int, Block] = field(default_factory=dict)  # by piece index in the chunk
    version: int = _VERSION


def decode_chunk(raw: bytes) -> _Chunk:
    version, position, horizon, count, pieces = _HEADER.unpack_from(raw, 0)
    if version not in _READS:
        raise ProgressError(f"offset-map snapshot of version {version} not understood (this mirror_core reads "
                            f"versions {', '.join(map(str, _READS))}); upgrade mirror_core")
    body = memoryview(raw)[_HEADER.size:]
    chunk = _Chunk(position, horizon, count, _from_big_endian(bytes(body[:8 * pieces])),
                   _from_big_endian(bytes(body[8 * pieces:16 * pieces])), version=version)
    if version == 1:
        return chunk
    try:
        (blocks,), pos = _INT32.unpack_from(body, 16 * pieces), 16 * pieces + 4
        for _ in range(blocks):
            (index,) = _INT32.unpack_from(body, pos)
            chunk.blocks[index], pos = Block.decode(body, pos + 4)
    except (struct.error, ValueError) as exc:
        raise ProgressError(f"an offset-map snapshot chunk is damaged ({exc})") from exc
    return chunk


def partition_from_chunks(chunks: list[_Chunk]) -> PartitionMap:
    """One partition's map from its chunks, in order (a map of version 1 is folded as it loads)."""
    pm = PartitionMap()
    for chunk in chunks:
        base = len(pm.sources)
        pm.sources.extend(chunk.sources)
        pm.targets.extend(chunk.targets)
        for index, block in chunk.blocks.items():
            pm.blocks[pm.sources[base + index]] = block
    pm.horizon = chunks[0].horizon
    if any(c.version == 1 for c in chunks):
        pm.compact()
    return pm


@dataclass
class Snapshots:
    """The newest committed round: per partition, its runs and the log position they reflect."""

    round_position: int = 0
    maps: dict[Key, PartitionMap] = field(default_factory=dict)
    positions: dict[Key, int] = field(default_factory=dict)
    chunks: dict[Key, int] = field(default_factory=dict)
    #: Partitions read in an older version: the next round writes them again in this one.
    legacy: set[Key] = field(default_factory=set)


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
        out.maps[k] = partition_from_chunks([chunks[i] for i in range(first.count)])
        out.positions[k], out.chunks[k] = first.position, first.count
        if any(chunks[i].version != _VERSION for i in range(first.count)):
            out.legacy.add(k)
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
