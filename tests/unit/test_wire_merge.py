"""Consecutive small source batches merged into one (mirror_core/wire/recode.py ``merged``): every record once, in
order, with its key, value, headers and timestamp; offset deltas 0..n-1; the gaps between the batches reported
where the offset map needs a new run; only batches a merge may take (uncompressed, CreateTime, contiguous)."""

from __future__ import annotations

import struct

import google_crc32c
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mirror_core.wire.codec import ProtocolError
from mirror_core.wire.recode import contiguous_copy, mergeable, merged, records_of
from mirror_core.wire.records import HEADER, computed_crc, read_varint, record_count
from tests.unit.test_wire_recode import record


def source_batch(base: int, base_ts: int, records: list[tuple[int, bytes, bytes]], attributes: int = 0) -> bytes:
    """A v2 batch at ``base`` of (timestamp delta, key, value) records with offset deltas 0..n-1."""
    body = b"".join(record(i, key, value, ts) for i, (ts, key, value) in enumerate(records))
    max_ts = base_ts + max(ts for ts, _, _ in records)
    tail = struct.pack(">hiqqqhii", attributes, len(records) - 1, base_ts, max_ts, 77, 1, 5, len(records)) + body
    return struct.pack(">qiibI", base, 4 + 1 + 4 + len(tail), 0, 2, google_crc32c.value(tail)) + tail


def contents(batch: bytes | bytearray) -> list[tuple[int, int, bytes]]:
    """(offset delta, absolute timestamp, the record's bytes after its offset delta) of each record."""
    h = HEADER.unpack_from(batch)
    raw = bytes(batch[61:])
    out = []
    for body, end, _, after_delta, delta in records_of(raw, h[12]):
        ts_delta = read_varint(raw, body + 1)[0]
        out.append((delta, h[7] + ts_delta, raw[after_delta:end]))
    return out


def test_merged_batches_keep_every_record_in_order_with_its_timestamp_and_report_the_gaps() -> None:
    a = source_batch(100, 1_000, [(0, b"a0", b"x"), (5, b"a1", b"y")])
    b = source_batch(102, 900, [(50, b"b0", b"z")])  # contiguous with a; an earlier base timestamp
    c = source_batch(110, 2_000, [(0, b"c0", b"w"), (1, b"c1", b"v"), (2, b"c2", b"u")])  # 103-109: a marker, aborted
    out, gaps = merged([memoryview(x) for x in (a, b, c)])
    h = HEADER.unpack_from(out)
    assert (h[0], h[6], h[12]) == (100, 5, 6) and h[7] == 1_000 and h[8] == 2_002
    assert struct.unpack_from(">I", out, 17)[0] == computed_crc(out) and len(out) == h[1] + 12
    assert gaps == [(3, 110)]
    want = [(ts, rest) for x in (a, b, c) for _, ts, rest in contents(x)]
    got = contents(out)
    assert [d for d, _, _ in got] == list(range(6))
    assert [(ts, rest) for _, ts, rest in got] == want
    assert contiguous_copy(out)[0] == out, "a valid batch whose deltas are contiguous already"


def test_only_uncompressed_contiguous_batches_stamped_by_their_producer_are_merged() -> None:
    plain = HEADER.unpack_from(source_batch(0, 1, [(0, b"k", b"v"), (0, b"k", b"v")]))
    assert mergeable(plain)
    assert mergeable(HEADER.unpack_from(source_batch(0, 1, [(0, b"k", b"v")], attributes=0x10)))  # transactional
    for attributes in (1, 4, 0x08, 0x20, 0x40):  # gzip, zstd, LogAppendTime, control, delete horizon
        assert not mergeable(HEADER.unpack_from(source_batch(0, 1, [(0, b"k", b"v")], attributes=attributes)))
    compacted = bytearray(source_batch(0, 1, [(0, b"k", b"v")]))
    struct.pack_into(">i", compacted, 23, 4)  # last offset delta 4 with one record: compaction left a gap
    assert not mergeable(HEADER.unpack_from(compacted))


def test_a_record_running_past_its_batch_is_refused_naming_the_batch() -> None:
    good = source_batch(0, 1, [(0, b"k", b"v")])
    bad = bytearray(source_batch(1, 1, [(0, b"k", b"v"), (0, b"k", b"v")]))
    bad[61] = 0x7E  # the first record claims 63 bytes
    with pytest.raises(ProtocolError, match="record batch at offset 1"):
        merged([memoryview(good), memoryview(bytes(bad))])


@given(st.lists(st.tuples(st.integers(0, 5), st.integers(-10**6, 10**6),
                          st.lists(st.tuples(st.integers(0, 10**4), st.binary(max_size=8)), min_size=1, max_size=5)),
                min_size=1, max_size=6))
def test_any_run_of_batches_merges_to_their_records_and_gaps(spec: list[tuple[int, int, list[tuple[int, bytes]]]]
                                                             ) -> None:
    batches, at, want, gaps, kept = [], 1_000, [], [], 0
    for gap, base_ts, records in spec:
        at += gap
        if gap and batches:
            gaps.append((kept, at))
        x = source_batch(at, 10**9 + base_ts, [(ts, b"k", v) for ts, v in records])
        batches.append(memoryview(x))
        want += [(ts, rest) for _, ts, rest in contents(x)]
        at += len(records)
        kept += len(records)
    out, got_gaps = merged(batches)
    assert got_gaps == gaps and record_count(out) == kept
    assert [(ts, rest) for _, ts, rest in contents(out)] == want


def test_a_damaged_batch_is_refused_not_given_a_valid_crc() -> None:
    good = source_batch(0, 1, [(0, b"k", b"v")])
    damaged = bytearray(source_batch(1, 1, [(0, b"k", b"value")]))
    damaged[-3] ^= 1  # a flipped bit in a value: only the CRC tells
    with pytest.raises(ProtocolError, match="record batch at offset 1: its CRC does not match"):
        merged([memoryview(good), memoryview(bytes(damaged))])
