"""MirrorMaker 2's binary record layouts for offset syncs and checkpoints.

Kafka protocol types, big-endian; STRING is an INT16 length followed by UTF-8 bytes.
- OffsetSync  key: STRING topic, INT32 partition; value: INT64 upstreamOffset, INT64 downstreamOffset.
- Checkpoint  key: STRING consumerGroupId, STRING topic, INT32 partition;
              value: INT16 version (0), INT64 upstreamOffset, INT64 downstreamOffset, STRING metadata.
Using MM2's layouts lets existing MM2 tooling (RemoteClusterUtils.translateOffsets, Connect's
MirrorClient) read what mirror_core writes.
"""

from __future__ import annotations

import struct


def _string(value: str) -> bytes:
    raw = value.encode()
    return struct.pack(">h", len(raw)) + raw


def _read_string(raw: bytes, pos: int) -> tuple[str, int]:
    (n,) = struct.unpack_from(">h", raw, pos)
    return raw[pos + 2 : pos + 2 + n].decode(), pos + 2 + n


def encode_sync_key(topic: str, partition: int) -> bytes:
    return _string(topic) + struct.pack(">i", partition)


def decode_sync_key(raw: bytes) -> tuple[str, int]:
    topic, pos = _read_string(raw, 0)
    (partition,) = struct.unpack_from(">i", raw, pos)
    return topic, int(partition)


def encode_sync_value(upstream: int, downstream: int) -> bytes:
    return struct.pack(">qq", upstream, downstream)


def decode_sync_value(raw: bytes) -> tuple[int, int]:
    upstream, downstream = struct.unpack(">qq", raw[:16])
    return int(upstream), int(downstream)


def encode_checkpoint_key(group: str, topic: str, partition: int) -> bytes:
    return _string(group) + _string(topic) + struct.pack(">i", partition)


def decode_checkpoint_key(raw: bytes) -> tuple[str, str, int]:
    group, pos = _read_string(raw, 0)
    topic, pos = _read_string(raw, pos)
    (partition,) = struct.unpack_from(">i", raw, pos)
    return group, topic, int(partition)


def encode_checkpoint_value(upstream: int, downstream: int, metadata: str = "") -> bytes:
    return struct.pack(">hqq", 0, upstream, downstream) + _string(metadata)


def decode_checkpoint_value(raw: bytes) -> tuple[int, int, str]:
    _version, upstream, downstream = struct.unpack_from(">hqq", raw, 0)
    metadata, _ = _read_string(raw, 18)
    return int(upstream), int(downstream), metadata
