"""One header of each record of a record batch (v2): read (what the batches data path needs to know of records the
records path tagged with the identity policy's provenance header), or added to (where a records-path flow reads what
the batches path writes, and knows a record's provenance only by that header)."""

from __future__ import annotations

import struct
from collections.abc import Iterator

from mirror_core.wire.codec import ProtocolError
from mirror_core.wire.recode import CODEC_MASK, MAX_DECOMPRESSED, compress, decompress, records_of, varint
from mirror_core.wire.records import BATCH_HEADER, base_offset, computed_crc, read_varint, record_count


def _headers(raw: bytes | memoryview, p: int, end: int) -> Iterator[tuple[int, bytes, int, int]]:
    """The headers of one record whose header count starts at ``p``: (where the header starts, its name, where its
    value starts, the value's size: -1 for null). Each checked to end inside the record."""
    count, p = read_varint(raw, p)
    for _ in range(max(count, 0)):
        start = p
        size, p = read_varint(raw, p)
        name = bytes(raw[p:p + max(size, 0)])
        p += max(size, 0)
        size, p = read_varint(raw, p)
        if p + max(size, 0) > end:
            raise ProtocolError("a record's headers run past its end")
        yield start, name, p, size
        p += max(size, 0)
    if p != end:
        raise ProtocolError("a record's headers do not end where it does")


def _after_value(raw: bytes | memoryview, p: int) -> int:
    """Where a record's header count starts, ``p`` being where its key starts."""
    for _ in range(2):  # key, value
        size, p = read_varint(raw, p)
        p += max(size, 0)
    return p


def _records(batch: memoryview | bytes | bytearray, limit: int) -> tuple[bytes | memoryview, int, int, int]:
    """(the decompressed records, base offset, record count, codec) of ``batch``."""
    if len(batch) < BATCH_HEADER:
        raise ProtocolError(f"record batch of {len(batch)} bytes, shorter than its header of {BATCH_HEADER}")
    base, count = base_offset(batch), record_count(batch)
    codec = struct.unpack_from(">h", batch, 21)[0] & CODEC_MASK
    raw: memoryview | bytes = decompress(codec, bytes(batch[BATCH_HEADER:]), limit) if codec else \
        memoryview(batch)[BATCH_HEADER:]
    return raw, base, count, codec


def header_values(batch: memoryview | bytes | bytearray, key: bytes,
                  limit: int = MAX_DECOMPRESSED) -> list[bytes | None]:
    """Each record's value of header ``key`` (its last one), None for a record without it. The batch's CRC is the
    caller's to have checked (the fetcher does); every length is checked against the bytes left."""
    raw, base, count, _ = _records(batch, limit)
    out: list[bytes | None] = []
    try:
        for _, end, _, after_delta, _ in records_of(raw, count):
            found: bytes | None = None
            for _, name, value, size in _headers(raw, _after_value(raw, after_delta), end):
                if name == key:
                    found = bytes(raw[value:value + size]) if size >= 0 else None
            out.append(found)
    except ProtocolError as exc:
        raise ProtocolError(f"record batch at offset {base}: {exc}") from None
    return out


def with_hop(batch: memoryview | bytes | bytearray, key: bytes, hop: bytes,
             limit: int = MAX_DECOMPRESSED) -> bytearray:
    """``batch`` with ``hop`` added to each record's header ``key`` (a comma-separated chain: ``a,b`` becomes
    ``a,b,hop``; a record without it gets it), every other byte of each record as it was, compressed again with the
    batch's codec and given its own CRC. Offsets, count and timestamps are unchanged."""
    raw, base, count, codec = _records(batch, limit)
    out = bytearray()
    try:
        for body, end, _, after_delta, _ in records_of(raw, count):
            p = _after_value(raw, after_delta)
            kept: list[bytes] = []
            chain = b""
            for start, name, value, size in _headers(raw, p, end):
                if name == key:
                    chain = bytes(raw[value:value + size]) if size >= 0 else b""
                else:
                    kept.append(bytes(raw[start:value + max(size, 0)]))
            chained = chain + b"," + hop if chain else hop
            kept.append(varint(len(key)) + key + varint(len(chained)) + chained)
            record = bytes(raw[body:p]) + varint(len(kept)) + b"".join(kept)  # attributes .. value: as they are
            out += varint(len(record)) + record
    except ProtocolError as exc:
        raise ProtocolError(f"record batch at offset {base}: {exc}") from None
    copy = bytearray(batch[:BATCH_HEADER]) + (compress(codec, bytes(out)) if codec else out)
    struct.pack_into(">i", copy, 8, len(copy) - 12)  # batch length
    struct.pack_into(">I", copy, 17, computed_crc(copy))
    return copy
