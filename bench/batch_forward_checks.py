"""What a broker does with a gappy batch (bench/results/batch-forward-2026-11-26.md), on fresh local clusters:

    TMPDIR=/dev/shm python -m bench.batch_forward_checks

v2 batches built by hand (CRC32C in pure Python) produced to a fresh topic: contiguous offset deltas, then
deltas 0, 2, 5 with lastOffsetDelta 5 (what a compacted source's batch looks like: the cleaner keeps the
batch's offset span). That the prototype copies records exactly is tests/integration/test_batch_forward.py.
"""

from __future__ import annotations

import struct
import time

import bench.run as bench_run
from bench import batch_forward
from bench.scale import Cluster
from mirror_core.wire.codec import Reader, string
from mirror_core.wire.connection import Connection
from mirror_core.wire.produce import API_PRODUCE
from mirror_core.wire.recode import varint

_TABLE = []
for _i in range(256):
    _c = _i
    for _ in range(8):
        _c = (_c >> 1) ^ 0x82F63B78 if _c & 1 else _c >> 1
    _TABLE.append(_c)


def crc32c(data: bytes) -> int:
    c = 0xFFFFFFFF
    for x in data:
        c = _TABLE[(c ^ x) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def batch(deltas: list[int]) -> bytes:
    records = b""
    for d in deltas:
        value = f"v{d}".encode()
        body = b"\x00" + varint(0) + varint(d) + varint(-1) + varint(len(value)) + value + varint(0)
        records += varint(len(body)) + body
    ts = int(time.time() * 1000)
    tail = struct.pack(">hiqqqhii", 0, deltas[-1], ts, ts, -1, -1, -1, len(deltas)) + records
    return struct.pack(">qiibI", 0, 4 + 1 + 4 + len(tail), -1, 2, crc32c(tail)) + tail


def gaps() -> None:
    with bench_run.local_clusters("fwd-gaps-") as (_work, clusters):
        Cluster(clusters[1].bootstrap).create("g", 1)
        host, port = clusters[1].bootstrap.rsplit(":", 1)
        wire = Connection(host, int(port), {}, "the target")
        batch_forward.await_leadership(wire, "g", 1)
        for deltas in ([0, 1, 2], [0, 2, 5]):
            b = batch(deltas)
            r = Reader(wire.call(API_PRODUCE, 8, struct.pack(">hhii", -1, -1, 30_000, 1)
                                 + string("g") + struct.pack(">iii", 1, 0, len(b)) + b))
            r.int32()
            r.string()
            r.int32()
            _index, error, base = r.take(">ihq")
            print(f"offset deltas {deltas}: error {error}, base offset {base}", flush=True)


if __name__ == "__main__":
    gaps()
