"""Property-based fuzzing of the wire client's parsers (mirror_core/wire/): whatever bytes a broker, a token
endpoint or a damaged disk hands them, only typed errors (MirrorError subclasses: ProtocolError, WireError,
SaslError) come out, never an IndexError, struct.error, UnicodeDecodeError, ValueError or a codec's own
exception; and the batch rewriting (records.restamp, recode.contiguous_copy) always re-parses to the same
records with a valid CRC. Inputs are random bytes and valid answers mutated (bytes flipped, cut, inserted), so
that the parsers get past their first field. The coverage-guided counterpart is tests/fuzz/fuzz_wire.py."""

from __future__ import annotations

import contextlib
import struct
from collections.abc import Callable
from typing import Any, NamedTuple

import google_crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mirror_core.errors import MirrorError
from mirror_core.wire import recode, records
from mirror_core.wire.codec import Reader, array, blob, int16, int32, int64, string
from mirror_core.wire.fetch import parse_fetch
from mirror_core.wire.metadata import parse_metadata
from mirror_core.wire.produce import parse_produce
from mirror_core.wire.recode import varint
from mirror_core.wire.sasl import ScramClient
from tests.unit.record_batches import batch, marker
from tests.unit.wire_messages import metadata_answer

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
ROUND_TRIPS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def typed_only(parse: Callable[..., Any], *args: Any) -> None:
    """``parse(*args)`` returns, or raises a MirrorError; anything else fails the test."""
    with contextlib.suppress(MirrorError):
        parse(*args)


@st.composite
def mutated(draw: st.DrawFn, valid: bytes) -> bytes:
    """``valid`` with a few bytes flipped, cut out or inserted, or cut short."""
    data = bytearray(valid)
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(("flip", "set", "cut", "insert", "truncate")))
        at = draw(st.integers(0, max(len(data) - 1, 0)))
        if kind == "flip" and data:
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif kind == "set" and data:
            data[at] = draw(st.sampled_from((0x00, 0x7F, 0x80, 0xFF)))
        elif kind == "cut":
            del data[at:at + draw(st.integers(1, 8))]
        elif kind == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=8))
        else:
            del data[at:]
    return bytes(data)


def answers(valid: bytes) -> st.SearchStrategy[bytes]:
    return st.one_of(st.binary(max_size=300), mutated(valid))


# -- valid answers, mutated by the properties --------------------------------------------------------------------

def produce_answer() -> bytes:
    plain = int32(0) + int16(0) + int64(42) + int64(-1) + int64(0) + int32(0) + string(None)
    failed = int32(1) + int16(10) + int64(-1) + int64(-1) + int64(0) + array([int32(0) + string("too big")]) \
        + string("MESSAGE_TOO_LARGE")
    return array([string("orders") + array([plain, failed])]) + int32(0)


def fetch_answer() -> bytes:
    stored = batch(100, 2) + marker(103, 7, 0) + batch(104, 0)[:40]  # a trailing partial batch too
    partition = int32(0) + int16(0) + int64(105) + int64(105) + int64(0) + array([int64(7) + int64(100)]) \
        + int32(-1) + blob(stored)
    return int32(0) + int16(0) + int32(0) + array([string("orders") + array([partition])])


def test_the_valid_answers_parse() -> None:
    assert parse_metadata(memoryview(metadata_answer())).topics["orders"].leaders == {0: 1, 1: 1}
    assert [p.error for p in parse_produce(memoryview(produce_answer()))] == [0, 10]
    assert [len(p.batches) for p in parse_fetch(memoryview(fetch_answer()), "dc1")] == [2]


# -- only typed errors -------------------------------------------------------------------------------------------

@FUZZ
@given(st.binary(max_size=200), st.lists(st.sampled_from(("int8", "int16", "int32", "string", "blob", "count",
                                                           "skip", "take")), max_size=12))
def test_a_reader_over_any_bytes_raises_only_protocol_errors(data: bytes, reads: list[str]) -> None:
    r = Reader(data)

    def run() -> None:
        for op in reads:
            if op == "skip":
                r.skip(r.int16())
            elif op == "take":
                r.take(">hq")
            else:
                getattr(r, op)()
            assert 0 <= r.at <= len(data)

    typed_only(run)


@FUZZ
@given(answers(metadata_answer()))
def test_metadata_answers(data: bytes) -> None:
    typed_only(parse_metadata, memoryview(data))


@FUZZ
@given(answers(produce_answer()))
def test_produce_answers(data: bytes) -> None:
    typed_only(parse_produce, memoryview(data))


@FUZZ
@given(answers(fetch_answer()))
def test_fetch_answers(data: bytes) -> None:
    typed_only(parse_fetch, memoryview(data), "dc1")


@FUZZ
@given(st.one_of(st.binary(max_size=300), mutated(batch(100, 2) + marker(103, 7, 1) + batch(104, 1))),
       st.lists(st.tuples(st.integers(-1, 9), st.integers(0, 110)), max_size=3))
def test_record_sets_split_filter_and_control_markers(data: bytes, aborted: list[tuple[int, int]]) -> None:
    def run() -> None:
        batches = records.split_batches(memoryview(data))
        records.committed(batches, aborted)
        for b in batches:
            records.control_type(b)

    typed_only(run)


@FUZZ
@given(st.binary(max_size=40), st.integers(0, 45))
def test_varints_past_the_end_or_too_long_are_protocol_errors(data: bytes, at: int) -> None:
    typed_only(records.read_varint, data, at)


def with_crc(data: bytes) -> bytes:
    """``data`` with its batch CRC made to match (as a producer that wrote bad records would send it), so the
    parsers behind the CRC check get the bytes."""
    if len(data) < records.BATCH_HEADER:
        return data
    out = bytearray(data)
    struct.pack_into(">I", out, 17, google_crc32c.value(bytes(out[21:])))
    return bytes(out)


def compressed_gapped(codec: int) -> bytes:
    raw = b"".join(varint(len(r)) + r for r in (
        b"\x00\x06" + varint(d) + varint(1) + b"k" + varint(3) + b"val" + varint(1) + varint(1) + b"h" + varint(0)
        for d in (1, 2, 5, 9)))
    return batch(1000, 9, recode.compress(codec, raw), attributes=codec, count=4)


@FUZZ
@given(st.sampled_from(sorted(recode.CODECS)).flatmap(
    lambda codec: st.tuples(st.just(codec), st.one_of(st.binary(max_size=120).map(
        lambda b: compressed_gapped(codec)[:61] + b), mutated(compressed_gapped(codec))))),
    st.booleans(), st.integers(990, 1012))
def test_a_recode_of_any_batch_crc_valid_or_not_raises_only_protocol_errors(case: tuple[int, bytes], fix_crc: bool,
                                                                           start: int) -> None:
    _, data = case
    typed_only(recode.contiguous_copy, with_crc(data) if fix_crc else data, start, 1 << 16)


@FUZZ
@given(st.sampled_from(sorted(recode.CODECS)).flatmap(
    lambda codec: st.one_of(st.binary(max_size=120).map(lambda b: compressed_gapped(codec)[:61] + b),
                            mutated(compressed_gapped(codec)))))
def test_reading_or_adding_a_header_of_any_batch_raises_only_protocol_errors(data: bytes) -> None:
    from mirror_core.wire.headers import header_values, with_hop

    typed_only(header_values, data, b"h", 1 << 16)
    typed_only(with_hop, data, b"h", b"dc9", 1 << 16)


def test_a_hop_added_is_read_back_and_every_other_header_kept() -> None:
    from mirror_core.wire.headers import header_values, with_hop

    for codec in sorted(recode.CODECS):
        original = compressed_gapped(codec)
        assert header_values(original, b"h") == [b""] * 4 and header_values(original, b"x") == [None] * 4
        once = with_hop(original, b"x", b"dc1")
        twice = with_hop(once, b"x", b"dc2")
        assert header_values(twice, b"x") == [b"dc1,dc2"] * 4 and header_values(twice, b"h") == [b""] * 4
        assert records.record_count(twice) == 4 and recode.contiguous_copy(twice)[1] == \
            recode.contiguous_copy(original)[1]  # the same offsets


@FUZZ
@given(st.sampled_from(sorted(recode.CODECS)), st.binary(max_size=200))
def test_decompressing_any_bytes_raises_only_protocol_errors(codec: int, data: bytes) -> None:
    typed_only(recode.decompress, codec, data, 1 << 16)


@FUZZ
@given(st.sampled_from(sorted(recode.CODECS)).flatmap(lambda codec: st.tuples(st.just(codec), mutated(
    recode.compress(codec, b"record bytes " * 20)))))
def test_decompressing_damaged_frames_raises_only_protocol_errors(case: tuple[int, bytes]) -> None:
    typed_only(recode.decompress, case[0], case[1], 1 << 16)


NONCE = "client-nonce"
SERVER_FIRST = b"r=" + NONCE.encode() + b"server,s=c2FsdA==,i=4096"


@FUZZ
@given(st.one_of(st.binary(max_size=80), mutated(SERVER_FIRST),
                 st.integers(-10, 10**30).map(lambda i: b"r=" + NONCE.encode() + b"s,s=c2FsdA==,i=%d" % i)),
       st.one_of(st.binary(max_size=80), mutated(b"v=c2lnbmF0dXJl")))
def test_scram_server_messages(server_first: bytes, server_final: bytes) -> None:
    client = ScramClient("SCRAM-SHA-256", "mirror", "secret", nonce=NONCE)
    typed_only(client.final, server_first)
    typed_only(client.verify, server_final)


# -- round trips of the batch rewriting --------------------------------------------------------------------------

class Rec(NamedTuple):
    attributes: int
    ts_delta: int
    offset_delta: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]


def encode(rec: Rec) -> bytes:
    def field(b: bytes | None) -> bytes:
        return varint(-1) if b is None else varint(len(b)) + b

    body = (bytes([rec.attributes]) + varint(rec.ts_delta) + varint(rec.offset_delta) + field(rec.key)
            + field(rec.value) + varint(len(rec.headers))
            + b"".join(field(k.encode()) + field(v) for k, v in rec.headers))
    return varint(len(body)) + body


def decode(data: bytes | bytearray) -> list[Rec]:
    """Every record of a v2 batch, read independently of the code under test (but for the varint reader)."""
    raw = recode.decompress(struct.unpack_from(">h", data, 21)[0] & 7, bytes(data[61:]))
    out, at = [], 0

    def field(at: int) -> tuple[bytes | None, int]:
        n, at = records.read_varint(raw, at)
        return (None, at) if n < 0 else (raw[at:at + n], at + n)

    for _ in range(records.record_count(data)):
        length, at = records.read_varint(raw, at)
        end, attributes = at + length, raw[at]
        ts_delta, at = records.read_varint(raw, at + 1)
        offset_delta, at = records.read_varint(raw, at)
        key, at = field(at)
        value, at = field(at)
        n, at = records.read_varint(raw, at)
        headers = []
        for _ in range(n):
            k, at = field(at)
            v, at = field(at)
            headers.append(((k or b"").decode(), v))
        assert at == end
        out.append(Rec(attributes, ts_delta, offset_delta, key, value, tuple(headers)))
    assert at == len(raw)
    return out


def crc_ok(data: bytes | bytearray) -> bool:
    return bool(struct.unpack_from(">I", data, 17)[0] == google_crc32c.value(bytes(data[21:])))


maybe_bytes = st.one_of(st.none(), st.binary(max_size=20))
record_contents = st.tuples(st.integers(-(2**40), 2**40), maybe_bytes, maybe_bytes,
                            st.lists(st.tuples(st.text(max_size=5), maybe_bytes), max_size=3))


@st.composite
def batches(draw: st.DrawFn) -> tuple[bytes, list[Rec], int]:
    """A valid v2 batch (any codec) whose records' offset deltas may leave gaps (compaction), its records, and
    its base offset."""
    contents = draw(st.lists(record_contents, min_size=1, max_size=8))
    # offset deltas rising by 1 (no gap) to 3 (two offsets compacted away), the first one 0 to 2
    steps = draw(st.lists(st.integers(1, 3), min_size=len(contents), max_size=len(contents)))
    deltas = [sum(steps[:i + 1]) - 1 for i in range(len(contents))]
    recs = [Rec(0, ts, d, k, v, tuple(h)) for (ts, k, v, h), d in zip(contents, deltas, strict=True)]
    codec = draw(st.sampled_from(sorted(recode.CODECS)))
    base = draw(st.integers(0, 2**40))
    raw = b"".join(map(encode, recs))
    last_delta = recs[-1].offset_delta + draw(st.integers(0, 2))
    return batch(base, last_delta, recode.compress(codec, raw), attributes=codec, count=len(recs)), recs, base


@ROUND_TRIPS
@given(batches(), st.integers(-2, 30))
def test_a_contiguous_copy_reparses_to_the_same_records_with_deltas_0_to_n_minus_1_and_a_valid_crc(
        case: tuple[bytes, list[Rec], int], start_after: int) -> None:
    original, recs, base = case
    assert decode(original) == recs
    start = base + start_after
    copy, gaps = recode.contiguous_copy(original, start)
    kept = [r for r in recs if base + r.offset_delta >= start]
    if not kept:
        assert (copy, gaps) == (bytearray(), [])
        return
    assert crc_ok(copy)
    assert decode(copy) == [r._replace(offset_delta=i) for i, r in enumerate(kept)]
    assert records.record_count(copy) == len(kept) and records.next_offset(copy) == base + len(kept)
    previous = max(base, start) - 1
    expected_gaps = []
    for i, r in enumerate(kept):
        if base + r.offset_delta != previous + 1:
            expected_gaps.append((i, base + r.offset_delta))
        previous = base + r.offset_delta
    assert gaps == expected_gaps
    assert copy[:8] == original[:8] and copy[27:57] == original[27:57]  # base offset; timestamps, producer


@ROUND_TRIPS
@given(batches(), st.integers(0, 2**63 - 1), st.integers(0, 2**15 - 1), st.integers(0, 2**31 - 1), st.booleans(),
       st.booleans())
def test_a_restamped_batch_keeps_its_records_and_a_valid_crc_and_a_damaged_one_stays_damaged(
        case: tuple[bytes, list[Rec], int], producer_id: int, epoch: int, sequence: int, transactional: bool,
        damage: bool) -> None:
    original, recs, _ = case
    if damage:
        flipped = bytearray(original)
        flipped[-1] ^= 0x01
        original = bytes(flipped)
    head, rest = records.restamp(original, producer_id, epoch, sequence, transactional)
    whole = head + bytes(rest)
    assert len(whole) == len(original) and whole[61:] == original[61:]
    assert crc_ok(whole) is not damage
    h = records.HEADER.unpack_from(whole)
    assert (h[records.PRODUCER_ID], h[10], h[11]) == (producer_id, epoch, sequence)
    assert bool(h[records.ATTRIBUTES] & records.TRANSACTIONAL) is transactional
    assert h[records.ATTRIBUTES] & ~records.TRANSACTIONAL == records.attributes(original) & ~records.TRANSACTIONAL
    if not damage:
        assert decode(whole) == recs
