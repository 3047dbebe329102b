"""One header of each record of a record batch (v2): read (what the batches data path needs to know of records the
records path tagged with the identity policy's provenance header), or added to (where a records-path flow reads what
the batches path writes, and knows a record's provenance only by that header)."""

from __future__ import annotations

import struct

from mirror_core.wire.codec import ProtocolError
from mirror_core.wire.recode import CODEC_MASK, MAX_DECOMPRESSED, MIN_RECORD, compress, decompress, varint
from mirror_core.wire.records import BATCH_HEADER, base_offset, computed_crc, read_varint, record_count


def header_values(batch: memoryview | bytes | bytearray, key: bytes,
                  limit: int = MAX_DECOMPRESSED) -> list[bytes | None]:
    """Each record's value of header ``key`` (its last one), None for a record without it. The batch's CRC is the
    caller's to have checked (the fetcher does); every length is checked against the bytes left."""
    base = base_offset(batch)
    codec = struct.unpack_from(">h", batch, 21)[0] & CODEC_MASK
    raw: memoryview | bytes = decompress(codec, bytes(batch[BATCH_HEADER:]), limit) if codec else \
        memoryview(batch)[BATCH_HEADER:]
    count = record_count(batch)
    if count < 0 or count > len(raw) // MIN_RECORD:
        raise ProtocolError(f"record batch at offset {base} claims {count} records in {len(raw)} bytes")
    out: list[bytes | None] = []
    at = 0
    for i in range(count):
        length, body = read_varint(raw, at)
        end = body + length
        if length < MIN_RECORD - 1 or end > len(raw):
            raise ProtocolError(f"record batch at offset {base}: record {i} is {length} bytes long, with "
                                f"{len(raw) - body} left")
        p = read_varint(raw, body + 1)[1]  # attributes (1 byte), then the timestamp delta
        p = read_varint(raw, p)[1]  # offset delta
        for _ in range(2):  # key, value
            size, p = read_varint(raw, p)
            p += max(size, 0)
        headers, p = read_varint(raw, p)
        found: bytes | None = None
        for _ in range(max(headers, 0)):
            size, p = read_varint(raw, p)
            name = bytes(raw[p:p + size])
            p += size
            size, p = read_varint(raw, p)
            if name == key:
                found = bytes(raw[p:p + size]) if size >= 0 else None
            p += max(size, 0)
        if p > end:
            raise ProtocolError(f"record batch at offset {base}: record {i}'s headers run past its end")
        out.append(found)
        at = end
    return out


def with_hop(batch: memoryview | bytes | bytearray, key: bytes, hop: bytes,
             limit: int = MAX_DECOMPRESSED) -> bytearray:
    """``batch`` with ``hop`` added to each record's header ``key`` (a comma-separated chain: ``a,b`` becomes
    ``a,b,hop``; a record without it gets it), every other byte of each record as it was, compressed again with the
    batch's codec and given its own CRC. Offsets, count and timestamps are unchanged."""
    head = bytearray(batch[:BATCH_HEADER])
    base, count = base_offset(head), record_count(head)
    codec = struct.unpack_from(">h", head, 21)[0] & CODEC_MASK
    raw = decompress(codec, bytes(batch[BATCH_HEADER:]), limit) if codec else bytes(batch[BATCH_HEADER:])
    if count < 0 or count > len(raw) // MIN_RECORD:
        raise ProtocolError(f"record batch at offset {base} claims {count} records in {len(raw)} bytes")
    out = bytearray()
    at = 0
    for i in range(count):
        length, body = read_varint(raw, at)
        end = body + length
        if length < MIN_RECORD - 1 or end > len(raw):
            raise ProtocolError(f"record batch at offset {base}: record {i} is {length} bytes long, with "
                                f"{len(raw) - body} left")
        p = read_varint(raw, body + 1)[1]
        p = read_varint(raw, p)[1]
        for _ in range(2):  # key, value
            size, p = read_varint(raw, p)
            p += max(size, 0)
        fixed = raw[body:p]  # attributes .. value: copied as they are
        headers, p = read_varint(raw, p)
        kept: list[bytes] = []
        chain = b""
        for _ in range(max(headers, 0)):
            start = p
            size, p = read_varint(raw, p)
            name = raw[p:p + size]
            p += size
            size, p = read_varint(raw, p)
            if name == key:
                chain = raw[p:p + size] if size >= 0 else b""
            else:
                kept.append(raw[start:p + max(size, 0)])
            p += max(size, 0)
        if p != end:
            raise ProtocolError(f"record batch at offset {base}: record {i}'s headers do not end where it does")
        value = chain + b"," + hop if chain else hop
        kept.append(varint(len(key)) + key + varint(len(value)) + value)
        record = fixed + varint(len(kept)) + b"".join(kept)
        out += varint(len(record)) + record
        at = end
    copy = head + (compress(codec, bytes(out)) if codec else out)
    struct.pack_into(">i", copy, 8, len(copy) - 12)  # batch length
    struct.pack_into(">I", copy, 17, computed_crc(copy))
    return copy
