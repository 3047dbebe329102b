"""What a re-batching copier would pay in Python per record: ``python -m bench.rebatch_cost``.

The batches path copies each source batch whole, so at 2,000 partitions the target broker makes one append per
small source batch (bench/target_ceiling.py: that alone holds the target to 0.49-0.57 of its 8-partition rate on
72-record batches). A copier that merged a partition's consecutive batches into one would have to rewrite every
record's offset and timestamp deltas (varints, so each record's length too) and compute a new CRC. This times
the least such a merge can do in Python (uncompressed batches: no decompression, no per-record objects), 14
batches at a time (about what one fetch answer holds per partition), to set against the broker's own cost per
record (0.6-0.9 microseconds at 2,000 partitions, bench/results/source-batching-2026-12-04.md)."""

from __future__ import annotations

import os
import struct
import time

import google_crc32c

from mirror_core.wire.recode import varint
from mirror_core.wire.records import BATCH_HEADER, HEADER

#: the encodings of small values, looked up rather than computed per record
VARINTS = [varint(i) for i in range(1 << 16)]


def _varint(b: memoryview, at: int) -> tuple[int, int]:
    v = b[at]
    at += 1
    if v < 0x80:
        return (v >> 1) ^ -(v & 1), at
    shift, r = 7, v & 0x7F
    while True:
        v = b[at]
        at += 1
        r |= (v & 0x7F) << shift
        if v < 0x80:
            return (r >> 1) ^ -(r & 1), at
        shift += 7


def make_batch(records: int, base_ts: int, value_bytes: int = 100) -> bytes:
    """An uncompressed v2 batch of ``records`` records with no key, random values and no headers."""
    body = bytearray()
    for i in range(records):
        record = b"\x00" + varint(i * 3) + varint(i) + varint(-1) + varint(value_bytes) + os.urandom(value_bytes) \
            + varint(0)
        body += varint(len(record)) + record
    header = HEADER.pack(0, BATCH_HEADER - 12 + len(body), 0, 2, 0, 0, records - 1, base_ts,
                         base_ts + 3 * (records - 1), -1, -1, -1, records)
    return header + bytes(body)


def merge(batches: list[memoryview]) -> bytearray:
    """One batch of the records of ``batches`` (consecutive, of one partition), deltas rewritten, CRC new."""
    first_ts = HEADER.unpack_from(batches[0])[7]
    parts: list[bytes | memoryview] = []
    k, max_ts = 0, first_ts
    for b in batches:
        fields = HEADER.unpack_from(b)
        shift, max_ts = fields[7] - first_ts, max(max_ts, fields[8])
        at = BATCH_HEADER
        for _ in range(fields[12]):
            length, body = _varint(b, at)
            end = body + length
            ts_delta, p = _varint(b, body + 1)
            _, p = _varint(b, p)
            head = b"\x00" + VARINTS[ts_delta + shift] + VARINTS[k]
            rest = b[p:end]
            parts += (VARINTS[len(head) + len(rest)], head, rest)
            k += 1
            at = end
    out = bytearray(BATCH_HEADER) + b"".join(parts)
    HEADER.pack_into(out, 0, 0, len(out) - 12, 0, 2, 0, 0, k - 1, first_ts, max_ts, -1, -1, -1, k)
    struct.pack_into(">I", out, 17, google_crc32c.value(bytes(out[21:])))
    return out


def check(merged: bytearray, batches: list[memoryview]) -> None:
    """The merge is a real one: its records carry offset deltas 0..n-1, their timestamps, and its CRC holds."""
    view, fields = memoryview(merged), HEADER.unpack_from(merged)
    assert fields[4] == google_crc32c.value(bytes(merged[21:])) & 0xFFFFFFFF
    stamps = [HEADER.unpack_from(b)[7] + 3 * i for b in batches for i in range(HEADER.unpack_from(b)[12])]
    at = BATCH_HEADER
    for k, stamp in enumerate(stamps):
        length, body = _varint(view, at)
        ts_delta, p = _varint(view, body + 1)
        offset_delta, _ = _varint(view, p)
        assert (offset_delta, fields[7] + ts_delta) == (k, stamp), (k, offset_delta, ts_delta)
        at = body + length
    assert at == len(merged) and fields[12] == len(stamps)


def main() -> None:
    for per_batch in (72, 313, 1060):
        batches = [memoryview(make_batch(per_batch, 1_700_000_000_000 + 100 * j)) for j in range(14)]
        check(merge(batches), batches)
        records, rounds = per_batch * len(batches), max(10, 200_000 // (per_batch * len(batches)))
        for _ in range(3):
            t0 = time.perf_counter()
            for _ in range(rounds):
                merge(batches)
            us = (time.perf_counter() - t0) / (rounds * records) * 1e6
            print(f"{per_batch:>5} records per source batch, 14 merged: {us:.2f} microseconds per record", flush=True)


if __name__ == "__main__":
    main()
