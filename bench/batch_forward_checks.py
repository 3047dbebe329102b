"""Two checks behind bench/results/batch-forward-2026-11-26.md, on fresh local clusters:

    TMPDIR=/dev/shm python -m bench.batch_forward_checks fidelity   # the prototype copies records exactly
    TMPDIR=/dev/shm python -m bench.batch_forward_checks gaps       # what a broker does with a gappy batch

``fidelity``: 40,000 records over 8 partitions copied by the prototype, then read back from both clusters
(key, value, timestamp, headers, partition by partition). ``gaps``: v2 batches built by hand (CRC32C in pure
Python) produced to a fresh topic: contiguous offset deltas, then deltas 0, 2, 5 with lastOffsetDelta 5 (what a
compacted source's batch looks like: the cleaner keeps the batch's offset span).
"""

from __future__ import annotations

import struct
import subprocess
import sys
import time

from confluent_kafka import Consumer, TopicPartition

import bench.run as bench_run
from bench import ab_partitions, batch_forward
from bench.scale import Cluster, EndWatcher

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


def varint(n: int) -> bytes:
    n, out = (n << 1) ^ (n >> 63), bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    return bytes(out) + bytes([n])


def batch(deltas: list[int]) -> bytes:
    records = b""
    for d in deltas:
        value = f"v{d}".encode()
        body = b"\x00" + varint(0) + varint(d) + varint(-1) + varint(len(value)) + value + varint(0)
        records += varint(len(body)) + body
    ts = int(time.time() * 1000)
    tail = struct.pack(">hiqqqhii", 0, deltas[-1], ts, ts, -1, -1, -1, len(deltas)) + records
    return struct.pack(">qiibI", 0, 4 + 1 + 4 + len(tail), -1, 2, crc32c(tail)) + tail


def read_all(bootstrap: str, topic: str, partitions: int) -> dict[int, list[tuple[object, ...]]]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "check", "enable.partition.eof": True})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out: dict[int, list[tuple[object, ...]]] = {p: [] for p in range(partitions)}
    ended: set[int] = set()
    while len(ended) < partitions:
        for m in c.consume(1000, 1):
            if m.error():
                ended.add(m.partition() or 0)
            else:
                out[m.partition() or 0].append((m.key(), m.value(), m.timestamp(), m.headers()))
    c.close()
    return out


def fidelity(partitions: int = 8, records: int = 40_000) -> None:
    with ab_partitions.fresh_backlog("fwd-check-", "t", partitions, records) as b:
        b.dst.create("r.t", partitions)
        proc = subprocess.Popen([sys.executable, "-m", "bench.copy_ceiling", "--forward", b.src.bootstrap,
                                 b.dst.bootstrap, "t", "r.t", str(partitions)], cwd=bench_run.REPO)
        try:
            ends = EndWatcher(b.dst.bootstrap, "r.t", partitions)
            while ends() < records:
                if proc.poll() is not None:
                    raise RuntimeError("the prototype exited before copying everything")
                time.sleep(0.5)
        finally:
            proc.kill()
        source, target = read_all(b.src.bootstrap, "t", partitions), read_all(b.dst.bootstrap, "r.t", partitions)
        print(f"identical: {source == target}; source {sum(map(len, source.values()))} records, "
              f"target {sum(map(len, target.values()))}", flush=True)


def gaps() -> None:
    with bench_run.local_clusters("fwd-gaps-") as (_work, clusters):
        Cluster(clusters[1].bootstrap).create("g", 1)
        host, port = clusters[1].bootstrap.rsplit(":", 1)
        wire = batch_forward.Wire(host, int(port))
        batch_forward.await_leadership(wire, "g", 1)
        for deltas in ([0, 1, 2], [0, 2, 5]):
            b = batch(deltas)
            r = batch_forward.Reader(wire.call(batch_forward.API_PRODUCE, 8, struct.pack(">hhii", -1, -1, 30_000, 1)
                                               + batch_forward.string("g") + struct.pack(">iii", 1, 0, len(b)) + b))
            r.int(">i")
            r.string()
            r.int(">i")
            _index, error, base = r.take(">ihq")
            print(f"offset deltas {deltas}: error {error}, base offset {base}", flush=True)


if __name__ == "__main__":
    {"fidelity": fidelity, "gaps": gaps}[sys.argv[1]]()
