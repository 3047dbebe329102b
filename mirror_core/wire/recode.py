"""Record batches with offset gaps inside them, rewritten so their records' offset deltas run 0..n-1.

Compaction removes records but keeps each batch's range, so a compacted source serves batches with offsets
missing inside them; a Kafka 4 broker refuses such a batch from a producer (INVALID_RECORD). The records are
decompressed, each one's offset delta rewritten (the rest of the record is copied as it is), and compressed
again with the batch's own codec. The source offset of every record that follows a gap is returned: where the
offset map needs a new run.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

import cramjam

from mirror_core.wire.codec import ProtocolError
from mirror_core.wire.records import BATCH_HEADER, base_offset, computed_crc, read_varint, record_count

CODEC_MASK = 0x07
CODECS = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
XERIAL_MAGIC = b"\x82SNAPPY\x00"  # Java clients frame snappy data in blocks behind this header


def varint(value: int) -> bytes:
    """A zigzag varint, as records encode their fields."""
    raw = (value << 1) ^ (value >> 63)
    out = bytearray()
    while raw >= 0x80:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)
    return bytes(out)


def _snappy_decompress(data: bytes) -> bytes:
    if not data.startswith(XERIAL_MAGIC):
        return bytes(cramjam.snappy.decompress_raw(data))
    out, at = bytearray(), 16  # magic, version, compatible version
    while at < len(data):
        (size,) = struct.unpack_from(">i", data, at)
        out += cramjam.snappy.decompress_raw(data[at + 4:at + 4 + size])
        at += 4 + size
    return bytes(out)


def _lz4_compress(data: bytes) -> bytes:
    """A frame of independent blocks: Kafka reads no other (its broker: "Dependent block stream is unsupported")."""
    lz4 = cramjam.lz4.Compressor(content_checksum=False, block_linked=False)
    lz4.compress(data)
    return bytes(lz4.finish())


#: codec id (attributes bits 0-2) -> (decompress, compress as a Kafka client does; snappy: raw blocks, which every
#: client reads)
_CODECS: dict[int, tuple[Callable[[bytes], Any], Callable[[bytes], Any]]] = {
    0: (bytes, bytes),
    1: (cramjam.gzip.decompress, cramjam.gzip.compress),
    2: (_snappy_decompress, cramjam.snappy.compress_raw),
    3: (cramjam.lz4.decompress, _lz4_compress),
    4: (cramjam.zstd.decompress, cramjam.zstd.compress),
}


def _codec(codec: int) -> tuple[Callable[[bytes], Any], Callable[[bytes], Any]]:
    if codec not in _CODECS:
        raise ProtocolError(f"record batch compressed with codec {codec}: not one of {', '.join(CODECS.values())}")
    return _CODECS[codec]


def decompress(codec: int, data: bytes) -> bytes:
    return bytes(_codec(codec)[0](data))


def compress(codec: int, data: bytes) -> bytes:
    return bytes(_codec(codec)[1](data))


def contiguous_copy(batch: memoryview | bytes | bytearray,
                    start: int = -1) -> tuple[bytearray, list[tuple[int, int]]]:
    """``batch`` with its records' offset deltas 0..n-1 and its last offset delta n-1 (a CRC of its own:
    :func:`mirror_core.wire.records.restamp` corrects a batch's CRC, it does not compute it), and (index, source
    offset) of each record after a gap. Records below ``start`` are left out (a fetch serves the whole batch
    holding its position): the first record kept follows a gap only when ``start`` itself is missing. Empty when
    none is kept."""
    head = bytes(batch[:BATCH_HEADER])
    base, count = base_offset(head), record_count(head)
    # Checked before the copy is given a CRC of its own: a batch damaged on the source would otherwise leave
    # with a CRC that vouches for it (a batch copied whole keeps its mismatch, which the target refuses).
    if computed_crc(batch) != struct.unpack_from(">I", head, 17)[0]:
        raise ProtocolError(f"record batch at offset {base}: its CRC does not match its bytes (damaged on the "
                            "source)")
    codec = struct.unpack_from(">h", head, 21)[0] & CODEC_MASK
    raw = decompress(codec, bytes(batch[BATCH_HEADER:]))
    if not count:
        raise ProtocolError(f"record batch at offset {base} holds no record: nothing to copy (records.committed "
                            "drops such batches)")
    out = bytearray()
    gaps: list[tuple[int, int]] = []
    at, previous, kept = 0, max(base, start) - 1, 0
    for _ in range(count):
        length, body = read_varint(raw, at)
        end = body + length
        _, after_ts = read_varint(raw, body + 1)  # attributes (1 byte), then the timestamp delta
        delta, after_delta = read_varint(raw, after_ts)
        at = end
        if base + delta < start:
            continue
        if base + delta != previous + 1:
            gaps.append((kept, base + delta))
        previous = base + delta
        record = raw[body:after_ts] + varint(kept) + raw[after_delta:end]
        out += varint(len(record)) + record
        kept += 1
    if at != len(raw):
        raise ProtocolError(f"record batch at offset {base}: {len(raw) - at} bytes after its {count} records")
    if not kept:
        return bytearray(), []
    records = compress(codec, bytes(out))
    copy = bytearray(head) + records
    struct.pack_into(">i", copy, 8, len(copy) - 12)  # batch length
    struct.pack_into(">i", copy, 23, kept - 1)  # last offset delta
    struct.pack_into(">i", copy, 57, kept)  # record count
    struct.pack_into(">I", copy, 17, computed_crc(copy))
    return copy, gaps
