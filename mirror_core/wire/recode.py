"""Record batches with offset gaps inside them, rewritten so their records' offset deltas run 0..n-1.

Compaction removes records but keeps each batch's range, so a compacted source serves batches with offsets
missing inside them; a Kafka 4 broker refuses such a batch from a producer (INVALID_RECORD). The records are
decompressed, each one's offset delta rewritten (the rest of the record is copied as it is), and compressed
again with the batch's own codec. The source offset of every record that follows a gap is returned: where the
offset map needs a new run.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable, Iterator
from typing import Any

import cramjam

from mirror_core.wire.codec import ProtocolError
from mirror_core.wire.records import (
    ATTRIBUTES,
    BASE,
    BASE_TIMESTAMP,
    BATCH_HEADER,
    COUNT,
    CRC,
    HEADER,
    LAST_DELTA,
    MAX_TIMESTAMP,
    base_offset,
    computed_crc,
    read_varint,
    record_count,
)

CODEC_MASK = 0x07
CODECS = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
XERIAL_MAGIC = b"\x82SNAPPY\x00"  # Java clients frame snappy data in blocks behind this header
#: what one batch's records may decompress to by default: a producer closes a batch at batch.size (16 KiB in Java,
#: 1 MB in librdkafka) unless one record is larger, and a record is at most max.request.size / message.max.bytes
#: (1 MiB by default): 128 MiB leaves room for clusters that raise those a hundredfold, and bounds what a hostile or
#: damaged batch (a compression bomb) can make this process allocate. A caller that knows more passes ``limit``.
MAX_DECOMPRESSED = 128 << 20
#: the smallest record: length, attributes, timestamp delta, offset delta, key length, value length and header
#: count, one byte each (a null key and value, no header)
MIN_RECORD = 7


def varint(value: int) -> bytes:
    """A zigzag varint, as records encode their fields."""
    raw = (value << 1) ^ (value >> 63)
    out = bytearray()
    while raw >= 0x80:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)
    return bytes(out)


def _too_large(what: str, size: int, limit: int) -> ProtocolError:
    return ProtocolError(f"{what} decompresses to {size} bytes or more, over the limit of {limit} (a compression "
                         "bomb or a damaged batch)")


def _gzip_decompress(data: bytes, limit: int) -> bytes:
    """Every gzip member in turn, each read to at most what is left of ``limit``."""
    out = bytearray()
    while data:
        d = zlib.decompressobj(wbits=31)
        out += d.decompress(data, limit + 1 - len(out))
        if len(out) > limit:
            raise _too_large("gzip data", len(out), limit)
        if not d.eof:
            raise ProtocolError(f"gzip data ends inside its stream ({len(out)} bytes decompressed)")
        data = d.unused_data
    return bytes(out)


def _snappy_block(data: bytes, limit: int) -> bytes:
    """A raw snappy block: its preamble says how long it decompresses to, which the decoder holds it to."""
    size = cramjam.snappy.decompress_raw_len(data)
    if size > limit:
        raise _too_large("a snappy block", size, limit)
    return bytes(cramjam.snappy.decompress_raw(data))


def _snappy_decompress(data: bytes, limit: int) -> bytes:
    if not data.startswith(XERIAL_MAGIC):
        return _snappy_block(data, limit)
    out, at = bytearray(), 16  # magic, version, compatible version
    while at < len(data):
        (size,) = struct.unpack_from(">i", data, at)
        if size < 0 or at + 4 + size > len(data):
            raise ProtocolError(f"xerial snappy block of {size} bytes at byte {at} of {len(data)}")
        out += _snappy_block(data[at + 4:at + 4 + size], limit - len(out))
        at += 4 + size
    return bytes(out)


#: LZ4 frame (lz4 frame format 1.6): magic, then FLG (bits: version 01, block independence, block checksum, content
#: size, content checksum, reserved, dictionary id), BD (block max size 64 KiB << 2 * (id - 4)), options, header
#: checksum; blocks (uint32 LE size, high bit: stored uncompressed) up to an end mark of 0; skippable frames between
LZ4_MAGIC, SKIPPABLE_MAGIC, SKIPPABLE_MASK = 0x184D2204, 0x184D2A50, 0xFFFFFFF0
ZSTD_MAGIC = 0xFD2FB528
#: a zstd block decompresses to at most this much (Block_Maximum_Size, RFC 8878 3.1.1.2.3)
ZSTD_BLOCK_MAX = 128 << 10
_U32 = struct.Struct("<I")


def _lz4_bound(data: bytes) -> int:
    """What an LZ4 frame sequence decompresses to at most: each block's maximum, read from the frame headers
    without decompressing anything (the decoder refuses a block larger than its frame's block maximum)."""
    at, bound = 0, 0
    while at < len(data):
        (magic,) = _U32.unpack_from(data, at)
        if magic & SKIPPABLE_MASK == SKIPPABLE_MAGIC:
            at += 8 + _U32.unpack_from(data, at + 4)[0]
            continue
        if magic != LZ4_MAGIC:
            raise ProtocolError(f"lz4 data: no frame magic at byte {at}")
        flg, bd = data[at + 4], data[at + 5]
        block_max = 1 << (8 + 2 * ((bd >> 4) & 7))
        if flg >> 6 != 1 or block_max < 1 << 16:
            raise ProtocolError(f"lz4 frame at byte {at}: version or block size not of the lz4 frame format")
        at += 7 + (8 if flg & 0x08 else 0) + (4 if flg & 0x01 else 0)
        while True:
            (size,) = _U32.unpack_from(data, at)
            at += 4
            if not size:
                break
            stored = size & 0x80000000
            size &= 0x7FFFFFFF
            bound += size if stored else block_max
            at += size + (4 if flg & 0x10 else 0)
        at += 4 if flg & 0x04 else 0
    return bound


def _zstd_bound(data: bytes) -> int:
    """What a zstd frame sequence decompresses to at most: each block's own size (raw and RLE blocks) or the block
    maximum (compressed ones), read from the block headers without decompressing anything."""
    at, bound = 0, 0
    while at < len(data):
        (magic,) = _U32.unpack_from(data, at)
        if magic & SKIPPABLE_MASK == SKIPPABLE_MAGIC:
            at += 8 + _U32.unpack_from(data, at + 4)[0]
            continue
        if magic != ZSTD_MAGIC:
            raise ProtocolError(f"zstd data: no frame magic at byte {at}")
        fhd = data[at + 4]
        single_segment = fhd >> 5 & 1
        fcs_size = (1 if single_segment else 0, 2, 4, 8)[fhd >> 6]
        at += 5 + (0 if single_segment else 1) + (0, 1, 2, 4)[fhd & 3] + fcs_size
        last = 0
        while not last:
            header = data[at] | data[at + 1] << 8 | data[at + 2] << 16
            last, kind, size = header & 1, header >> 1 & 3, header >> 3
            if kind == 3:
                raise ProtocolError(f"zstd block at byte {at}: reserved block type")
            bound += ZSTD_BLOCK_MAX if kind == 2 else size
            at += 3 + (1 if kind == 1 else size)
        at += 4 if fhd & 0x04 else 0  # content checksum
    return bound


def _bounded(name: str, bound: Callable[[bytes], int],
             decompress: Callable[[bytes], Any]) -> Callable[[bytes, int], bytes]:
    """``decompress`` run only once the frames' headers show the output stays within the limit."""

    def run(data: bytes, limit: int) -> bytes:
        try:
            most = bound(data)
        except (IndexError, struct.error):
            raise ProtocolError(f"{name} data of {len(data)} bytes ends inside a frame header") from None
        if most > limit:
            raise _too_large(f"{name} data", most, limit)
        return bytes(decompress(data))

    return run


def _lz4_compress(data: bytes) -> bytes:
    """A frame of independent blocks: Kafka reads no other (its broker: "Dependent block stream is unsupported")."""
    lz4 = cramjam.lz4.Compressor(content_checksum=False, block_linked=False)
    lz4.compress(data)
    return bytes(lz4.finish())


def _none(data: bytes, limit: int) -> bytes:
    return data


#: codec id (attributes bits 0-2) -> (decompress to at most a limit, compress as a Kafka client does; snappy: raw
#: blocks, which every client reads)
_CODECS: dict[int, tuple[Callable[[bytes, int], bytes], Callable[[bytes], Any]]] = {
    0: (_none, bytes),
    1: (_gzip_decompress, cramjam.gzip.compress),
    2: (_snappy_decompress, cramjam.snappy.compress_raw),
    3: (_bounded("lz4", _lz4_bound, cramjam.lz4.decompress), _lz4_compress),
    4: (_bounded("zstd", _zstd_bound, cramjam.zstd.decompress), cramjam.zstd.compress),
}


def _codec(codec: int) -> tuple[Callable[[bytes, int], bytes], Callable[[bytes], Any]]:
    if codec not in _CODECS:
        raise ProtocolError(f"record batch compressed with codec {codec}: not one of {', '.join(CODECS.values())}")
    return _CODECS[codec]


def decompress(codec: int, data: bytes, limit: int = MAX_DECOMPRESSED) -> bytes:
    """``data`` decompressed, to at most ``limit`` bytes: more (a compression bomb), or data the codec does not
    read, is a ProtocolError (never the codec library's own exception, nor a MemoryError)."""
    run = _codec(codec)[0]
    try:
        return run(data, limit)
    except (cramjam.DecompressionError, zlib.error, ValueError, struct.error) as exc:
        raise ProtocolError(f"{CODECS[codec]} data of {len(data)} bytes does not decompress: {exc}") from None


def compress(codec: int, data: bytes) -> bytes:
    return bytes(_codec(codec)[1](data))


def records_of(raw: bytes | memoryview, count: int) -> Iterator[tuple[int, int, int, int, int]]:
    """Each of the ``count`` records in the decompressed records ``raw``, checked to lie inside them: (where its body
    starts, where it ends, where its offset delta starts, where its key starts, its offset delta). The count is
    checked against what the bytes can hold before anything is looped over, and no byte may follow the last record.
    One walk for every reader of a batch's records (contiguous_copy here, wire/headers.py)."""
    if count < 0 or count > len(raw) // MIN_RECORD:
        raise ProtocolError(f"claims {count} records; its {len(raw)} bytes of records hold {len(raw) // MIN_RECORD} "
                            "at most")
    at = 0
    for i in range(count):
        length, body = read_varint(raw, at)
        end = body + length
        if length < MIN_RECORD - 1 or end > len(raw):
            raise ProtocolError(f"record {i} at byte {at} of its records is {length} bytes long, with "
                                f"{len(raw) - body} left")
        after_ts = read_varint(raw, body + 1)[1]  # attributes (1 byte), then the timestamp delta
        delta, after_delta = read_varint(raw, after_ts)
        if after_delta > end:
            raise ProtocolError(f"record {i} at byte {at} of its records ends inside its offset delta")
        yield body, end, after_ts, after_delta, delta
        at = end
    if at != len(raw):
        raise ProtocolError(f"{len(raw) - at} bytes after its {count} records")


def contiguous_copy(batch: memoryview | bytes | bytearray, start: int = -1,
                    limit: int = MAX_DECOMPRESSED) -> tuple[bytearray, list[tuple[int, int]]]:
    """``batch`` with its records' offset deltas 0..n-1 and its last offset delta n-1 (a CRC of its own:
    :func:`mirror_core.wire.records.restamp` corrects a batch's CRC, it does not compute it), and (index, source
    offset) of each record after a gap. Records below ``start`` are left out (a fetch serves the whole batch
    holding its position): the first record kept follows a gap only when ``start`` itself is missing. Empty when
    none is kept. ``limit``: what its records may decompress to (:data:`MAX_DECOMPRESSED`).

    Nothing the batch says is trusted before it is checked: its CRC first, then its record count against what
    its records' bytes can hold, and each record's length against the bytes left (a damaged or hostile batch is
    a ProtocolError naming its offset, before anything is allocated or looped over)."""
    if len(batch) < BATCH_HEADER:
        raise ProtocolError(f"record batch of {len(batch)} bytes, shorter than its header of {BATCH_HEADER}")
    head = bytes(batch[:BATCH_HEADER])
    base, count = base_offset(head), record_count(head)
    # Checked before the copy is given a CRC of its own: a batch damaged on the source would otherwise leave
    # with a CRC that vouches for it (a batch copied whole keeps its mismatch, which the target refuses).
    if computed_crc(batch) != struct.unpack_from(">I", head, 17)[0]:
        raise ProtocolError(f"record batch at offset {base}: its CRC does not match its bytes (damaged on the "
                            "source)")
    codec = struct.unpack_from(">h", head, 21)[0] & CODEC_MASK
    if not count:
        raise ProtocolError(f"record batch at offset {base} holds no record: nothing to copy (records.committed "
                            "drops such batches)")
    try:
        raw = decompress(codec, bytes(batch[BATCH_HEADER:]), limit)
    except ProtocolError as exc:
        raise ProtocolError(f"record batch at offset {base}: {exc}") from None
    try:
        return _recoded(head, raw, base, count, codec, start)
    except ProtocolError as exc:
        raise ProtocolError(f"record batch at offset {base}: {exc}") from None


def _recoded(head: bytes, raw: bytes, base: int, count: int, codec: int,
             start: int) -> tuple[bytearray, list[tuple[int, int]]]:
    """contiguous_copy's rewrite of the decompressed records ``raw``, each checked to lie inside them."""
    out = bytearray()
    gaps: list[tuple[int, int]] = []
    previous, kept = max(base, start) - 1, 0
    for body, end, after_ts, after_delta, delta in records_of(raw, count):
        if base + delta < start:
            continue
        if base + delta != previous + 1:
            gaps.append((kept, base + delta))
        previous = base + delta
        record = raw[body:after_ts] + varint(kept) + raw[after_delta:end]
        out += varint(len(record)) + record
        kept += 1
    if not kept:
        return bytearray(), []
    records = compress(codec, bytes(out))
    copy = bytearray(head) + records
    struct.pack_into(">i", copy, 8, len(copy) - 12)  # batch length
    struct.pack_into(">i", copy, 23, kept - 1)  # last offset delta
    struct.pack_into(">i", copy, 57, kept)  # record count
    struct.pack_into(">I", copy, 17, computed_crc(copy))
    return copy, gaps


def encode_batch(records: list[tuple[bytes | None, bytes | None]], timestamp_ms: int) -> bytearray:
    """An uncompressed v2 batch of ``records`` (key, value; no headers), all stamped ``timestamp_ms``, for a
    producer of the wire client to restamp and send (the mirror's own progress and offset-map records, written in
    its transactions). Producer id, epoch and base sequence -1: :func:`~mirror_core.wire.records.restamp` sets them."""
    out = bytearray()
    for i, (key, value) in enumerate(records):
        body = b"\x00" + varint(0) + varint(i)  # attributes, timestamp delta, offset delta
        for part in (key, value):
            body += varint(-1) if part is None else varint(len(part)) + part
        body += varint(0)  # no headers
        out += varint(len(body)) + body
    tail = struct.pack(">hiqqqhii", 0, len(records) - 1, timestamp_ms, timestamp_ms, -1, -1, -1, len(records)) + out
    batch = bytearray(struct.pack(">qiibI", 0, len(tail) + 9, 0, 2, 0)) + tail
    struct.pack_into(">I", batch, 17, computed_crc(batch))
    return batch


#: a batch's attributes a merge keeps: the transactional bit alone (restamped on the way out); any other (a codec,
#: LogAppendTime, a control batch, a delete horizon) leaves the batch as it is
MERGEABLE_ATTRIBUTES = 0x10


def mergeable(h: tuple[int, ...]) -> bool:
    """Whether the batch of header ``h`` (records.HEADER) may go in a :func:`merged` batch: uncompressed, stamped by
    its producer, not a control batch, its offset deltas 0..n-1."""
    return not h[ATTRIBUTES] & ~MERGEABLE_ATTRIBUTES and h[LAST_DELTA] + 1 == h[COUNT] > 0


def merged(batches: list[memoryview]) -> tuple[bytearray, list[tuple[int, int]]]:
    """One batch holding the records of ``batches`` (consecutive source batches, each :func:`mergeable`), in order:
    offset deltas 0..n-1, timestamp deltas from the first batch's base timestamp, the first batch's header (a CRC of
    its own, producer fields restamped on the way out); and (index, source offset) of each record that follows a gap
    between them, as :func:`contiguous_copy` gives. Each batch's CRC is checked first (the merged batch's CRC would
    otherwise vouch for damaged bytes, with check.crcs off), and each record checked to lie inside its batch: a
    ProtocolError naming the batch's offset."""
    head = batches[0]
    base_ts = HEADER.unpack_from(head)[BASE_TIMESTAMP]
    out = bytearray(head[:BATCH_HEADER])
    gaps: list[tuple[int, int]] = []
    kept, expected, max_ts = 0, base_offset(head), -1
    for batch in batches:
        h = HEADER.unpack_from(batch)
        if computed_crc(batch) != h[CRC]:
            raise ProtocolError(f"record batch at offset {h[BASE]}: its CRC does not match its bytes (damaged on "
                                "the source)")
        if h[BASE] != expected:
            gaps.append((kept, h[BASE]))
        shift = h[BASE_TIMESTAMP] - base_ts
        raw = bytes(batch[BATCH_HEADER:])
        try:
            for body, end, _, after_delta, _ in records_of(raw, h[COUNT]):
                ts_delta, _ = read_varint(raw, body + 1)
                record = raw[body:body + 1] + varint(ts_delta + shift) + varint(kept) + raw[after_delta:end]
                out += varint(len(record)) + record
                kept += 1
        except ProtocolError as exc:
            raise ProtocolError(f"record batch at offset {h[BASE]}: {exc}") from None
        expected = h[BASE] + h[COUNT]
        max_ts = max(max_ts, h[MAX_TIMESTAMP])
    struct.pack_into(">i", out, 8, len(out) - 12)  # batch length
    struct.pack_into(">i", out, 23, kept - 1)  # last offset delta
    struct.pack_into(">q", out, 35, max_ts)
    struct.pack_into(">i", out, 57, kept)  # record count
    struct.pack_into(">I", out, 17, computed_crc(out))
    return out, gaps
