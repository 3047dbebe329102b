"""Batches with offset gaps (a compacted source) rewritten with contiguous offset deltas
(mirror_core/wire/recode.py), for every codec: the records' other bytes unchanged, the gaps reported where
the offset map needs a new run."""

from __future__ import annotations

import struct

import google_crc32c
import pytest

from mirror_core.wire import recode
from mirror_core.wire.codec import ProtocolError
from mirror_core.wire.recode import compress, contiguous_copy, decompress, varint
from mirror_core.wire.records import contiguous, next_offset, read_varint, record_count, restamp


def record(offset_delta: int, key: bytes, value: bytes, ts_delta: int = 3) -> bytes:
    body = (b"\x00" + varint(ts_delta) + varint(offset_delta) + varint(len(key)) + key + varint(len(value)) + value
            + varint(1) + varint(1) + b"h" + varint(2) + b"hv")
    return varint(len(body)) + body


def gapped(codec: int, deltas: list[int], base: int = 1000) -> bytes:
    records = compress(codec, b"".join(record(d, b"k%d" % d, b"value-%d" % d * 3) for d in deltas))
    tail = struct.pack(">hiqqqhii", codec, 9, 1, 2, -1, -1, -1, len(deltas)) + records  # last offset delta 9
    return struct.pack(">qiibI", base, 4 + 1 + 4 + len(tail), 0, 2, google_crc32c.value(tail)) + tail


def parsed(batch: bytes | bytearray) -> list[tuple[int, bytes]]:
    """(offset delta, the record's bytes after it) of each record."""
    raw = decompress(struct.unpack_from(">h", batch, 21)[0] & 7, bytes(batch[61:]))
    out, at = [], 0
    for _ in range(record_count(batch)):
        length, body = read_varint(raw, at)
        _, after_ts = read_varint(raw, body + 1)
        delta, after = read_varint(raw, after_ts)
        out.append((delta, raw[after:body + length]))
        at = body + length
    return out


@pytest.mark.parametrize("codec", sorted(recode.CODECS))
def test_a_gapped_batch_gets_deltas_0_to_n_minus_1_and_keeps_every_records_content(codec: int) -> None:
    original = gapped(codec, [1, 2, 5, 9])  # offsets 1000 and 1003-1004, 1006-1008 compacted away
    assert not contiguous(original)
    copy, gaps = contiguous_copy(original)
    assert contiguous(copy) and next_offset(copy) == 1004 and record_count(copy) == 4
    assert [d for d, _ in parsed(copy)] == [0, 1, 2, 3]
    assert [rest for _, rest in parsed(copy)] == [rest for _, rest in parsed(original)]
    assert gaps == [(0, 1001), (2, 1005), (3, 1009)]  # where the offset map needs a new run
    assert copy[:8] == original[:8] and copy[12:17] == original[12:17] and copy[27:61] == original[27:61]
    assert struct.unpack_from(">I", copy, 17)[0] == google_crc32c.value(bytes(copy[21:]))  # a CRC of its own


def test_a_recoded_batch_leaves_with_a_valid_crc_and_a_damaged_one_is_refused_not_given_a_valid_one() -> None:
    """A recoded batch gets a CRC of its own, so its source's CRC is checked first: a batch damaged on the source
    must not leave with a CRC that vouches for it (its partition pauses on the error instead)."""
    head, rest = restamp(contiguous_copy(gapped(0, [1, 2, 5, 9]))[0], 77, 1, 0)
    assert struct.unpack_from(">I", head, 17)[0] == google_crc32c.value(head[21:] + bytes(rest))
    damaged = bytearray(gapped(0, [1, 2, 5, 9]))
    damaged[damaged.index(b"value-5") + 2] ^= 0x01
    with pytest.raises(ProtocolError, match="CRC does not match"):
        contiguous_copy(damaged)


def test_records_below_the_start_are_left_out_and_the_first_kept_follows_a_gap_only_when_the_start_is_missing() -> None:
    original = gapped(0, [1, 2, 5, 9])  # records at 1001, 1002, 1005, 1009
    copy, gaps = contiguous_copy(original, start=1002)
    assert record_count(copy) == 3 and [d for d, _ in parsed(copy)] == [0, 1, 2]
    assert [rest for _, rest in parsed(copy)] == [rest for _, rest in parsed(original)][1:]
    assert gaps == [(1, 1005), (2, 1009)]
    copy, gaps = contiguous_copy(original, start=1003)  # 1003 was compacted away: the copy starts at 1005
    assert record_count(copy) == 2 and gaps == [(0, 1005), (1, 1009)]
    assert contiguous_copy(original, start=1010) == (bytearray(), [])


def test_lz4_frames_are_written_with_independent_blocks_as_kafka_requires() -> None:
    frame = compress(3, b"x" * 100_000)
    assert frame[:4] == b"\x04\x22\x4d\x18" and frame[4] & 0x20  # FLG: block independence


def test_java_clients_framed_snappy_is_read() -> None:
    raw = b"".join(record(d, b"k", b"v" * 50) for d in (0, 2))
    framed = recode.XERIAL_MAGIC + struct.pack(">ii", 1, 1)
    for half in (raw[:40], raw[40:]):
        block = bytes(recode.cramjam.snappy.compress_raw(half))
        framed += struct.pack(">i", len(block)) + block
    assert decompress(2, framed) == raw


def test_records_that_do_not_fill_the_batch_exactly_are_a_protocol_error() -> None:
    broken = bytearray(gapped(0, [0, 2]))
    struct.pack_into(">i", broken, 57, 1)  # says one record, holds two
    struct.pack_into(">I", broken, 17, google_crc32c.value(bytes(broken[21:])))  # as its producer wrote it
    with pytest.raises(ProtocolError, match="bytes after its 1 records"):
        contiguous_copy(broken)
