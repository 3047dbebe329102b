"""Coverage-guided fuzzing (Atheris, libFuzzer) of the wire client's frame and batch parsers: an answer's framing
(Connection.receive), Fetch, Metadata and Produce answers, record sets (split, read_committed filter, control
markers), the gap recode of a CRC-valid batch, and decompression of every codec. Any exception other than a
MirrorError is a crash: libFuzzer writes the input to ``crash-<sha1>`` and exits non-zero.

The first byte of an input chooses the parser; the rest is its bytes. ``tests/fuzz/corpus/`` holds a seed of
each (``--write-corpus`` writes them again). Runs: docs/fuzzing.md; a bounded one is part of the test suite
(tests/fuzz/test_fuzz_wire.py).

    .venv/bin/python tests/fuzz/fuzz_wire.py tests/fuzz/corpus -runs=2000
"""

from __future__ import annotations

import contextlib
import socket
import struct
import sys
from collections import deque
from collections.abc import Callable
from pathlib import Path

import atheris

with atheris.instrument_imports(include=["mirror_core"]):
    import google_crc32c

    from mirror_core.errors import MirrorError
    from mirror_core.wire import recode, records
    from mirror_core.wire.codec import array, blob, int16, int32, int64, string
    from mirror_core.wire.connection import Connection
    from mirror_core.wire.fetch import parse_fetch
    from mirror_core.wire.headers import header_values, with_hop
    from mirror_core.wire.metadata import parse_metadata
    from mirror_core.wire.produce import parse_produce

#: what a fuzzed answer or batch may grow to (the parsers' caps are what is tested, not the machine's memory)
LIMIT = 1 << 16


def frame(data: bytes) -> None:
    """An answer's framing as read from a socket: size prefix, correlation id, body."""
    left, right = socket.socketpair()
    with left, right:
        conn = Connection.__new__(Connection)
        conn.sock, conn.where, conn._answers, conn._small_answers = left, "fuzz", None, 0
        conn._set_up, conn.max_answer_bytes, conn.sent = True, LIMIT, deque([1])
        right.sendall(data)
        right.shutdown(socket.SHUT_WR)
        conn.receive(reuse=bool(data and data[-1] & 1))


def record_set(data: bytes) -> None:
    batches = records.split_batches(memoryview(data))
    records.committed(batches, [(7, 0), (-1, 5)])
    for b in batches:
        if records.attributes(b) & records.CONTROL:
            records.control_type(b)


def recoded(data: bytes) -> None:
    """The gap recode of a batch whose CRC matches (a producer that wrote bad records), from offset 3 on."""
    if len(data) >= records.BATCH_HEADER:
        batch = bytearray(data)
        struct.pack_into(">I", batch, 17, google_crc32c.value(bytes(batch[21:])))
        recode.contiguous_copy(batch, 3, LIMIT)


def headers(data: bytes) -> None:
    """The identity policy's provenance header read from, and added to, a batch (wire/headers.py)."""
    header_values(data, b"h", LIMIT)
    with_hop(data, b"h", b"dc9", LIMIT)


def decompressed(data: bytes) -> None:
    if data:
        recode.decompress(data[0] % 5, data[1:], LIMIT)


TARGETS: list[Callable[[bytes], object]] = [
    frame,
    lambda data: parse_fetch(memoryview(data), "fuzz"),
    lambda data: parse_metadata(memoryview(data)),
    lambda data: parse_produce(memoryview(data)),
    record_set,
    recoded,
    decompressed,
    headers,
]


def test_one_input(data: bytes) -> None:
    if not data:
        return
    with contextlib.suppress(MirrorError):  # typed: what the callers expect of bad bytes
        TARGETS[data[0] % len(TARGETS)](data[1:])


def _batch(base: int, records_: bytes, count: int, attributes: int = 0, producer_id: int = -1) -> bytes:
    tail = struct.pack(">hiqqqhii", attributes, count, 1, 1, producer_id, -1, -1, count) + records_
    return struct.pack(">qiibI", base, 9 + len(tail), 0, 2, google_crc32c.value(tail)) + tail


def seeds() -> dict[str, bytes]:
    """One real-shaped input per target (the corpus the fuzzer starts from)."""
    v = recode.varint
    rec = b"".join(v(len(r)) + r for r in (b"\x00\x02" + v(d) + v(1) + b"k" + v(2) + b"vv" + v(0) for d in (0, 2)))
    plain = _batch(10, rec, 2)
    marker_key, marker_value = struct.pack(">hh", 0, 0), struct.pack(">hi", 0, 3)
    body = b"\x00" + v(0) + v(0) + v(4) + marker_key + v(6) + marker_value + v(0)
    abort = _batch(13, v(len(body)) + body, 1, attributes=0x30, producer_id=7)
    partition = int32(0) + int16(0) + int64(14) + int64(14) + int64(0) + array([int64(7) + int64(10)]) + int32(-1) \
        + blob(plain + abort + plain[:30])
    fetch = int32(0) + int16(0) + int32(0) + array([string("orders") + array([partition])])
    metadata = int32(0) + array([int32(1) + string("b1") + int32(9092) + string(None)]) + string("c") + int32(1) \
        + array([int16(0) + string("orders") + b"\x00" + array([int16(0) + int32(0) + int32(1) + array([int32(1)])
                                                               + array([int32(1)])])])
    produce = array([string("orders") + array([int32(0) + int16(0) + int64(42) + int64(-1) + int64(0)
                                               + array([int32(0) + string("bad")]) + string("why")])]) + int32(0)
    out = {"frame": bytes([0]) + struct.pack(">ii", 12, 1) + b"answer..",
           "fetch": bytes([1]) + fetch, "metadata": bytes([2]) + metadata, "produce": bytes([3]) + produce,
           "record-set": bytes([4]) + plain + abort}
    for codec in range(5):
        out[f"recode-{recode.CODECS[codec]}"] = bytes([5]) + _batch(10, recode.compress(codec, rec), 2, codec)
        out[f"decompress-{recode.CODECS[codec]}"] = bytes([6, codec]) + recode.compress(codec, rec * 4)
        out[f"headers-{recode.CODECS[codec]}"] = bytes([7]) + _batch(10, recode.compress(codec, rec), 2, codec)
    return out


def main() -> None:
    if sys.argv[1:2] == ["--write-corpus"]:
        corpus = Path(__file__).parent / "corpus"
        corpus.mkdir(exist_ok=True)
        for name, data in seeds().items():
            (corpus / name).write_bytes(data)
        return
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
