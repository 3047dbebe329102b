"""What the target broker takes of the source's own batches with nothing else running: the ceiling of any copier
that keeps the source's batches whole (``replication.data.path = batches``) on these brokers.

    CONNECTIONS=1,2 TMPDIR=/dev/shm python -m bench.probes.target_ceiling <partitions> <records> [rounds]

Fresh clusters with the backlog ``bench.probes.ab_partitions`` copies (``SOURCE_LINGER_MS`` sets how many records share
a source batch), every batch fetched into memory first with the mirror's own fetcher (not timed, the source then
idle). Then, each round, for each count in ``CONNECTIONS`` in turn, all of them handed at once to the mirror's own
sender with that many connections to the broker (mirror_core.wire.sender: one batch per partition per produce
request, as the copier sends them), to a fresh topic: the same batches every time. Prints records/s from 10 % to
90 % of the records acknowledged and the cores of the target broker and of this process over the same span.
No fetch, offset map, progress or metric runs meanwhile: a copier of these batches cannot beat this rate here,
and its rate over this one is what everything else costs it.
"""

from __future__ import annotations

import os
import sys
import time

from bench.harness import cpu_seconds
from bench.probes.ab_partitions import fresh_backlog
from mirror_core.wire.fetcher import BatchFetcher
from mirror_core.wire.metadata import Brokers
from mirror_core.wire.records import next_offset, record_count
from mirror_core.wire.sender import BatchSender, Outgoing


def fetch_all(bootstrap: str, topic: str, partitions: int, records: int) -> list[list[memoryview]]:
    """Every batch of every partition, in order (the whole backlog held in memory)."""
    fetcher = BatchFetcher(Brokers(bootstrap, {}, "source"))
    out: list[list[memoryview]] = [[] for _ in range(partitions)]
    fetched = 0
    try:
        fetcher.assign({(topic, p): 0 for p in range(partitions)})
        deadline = time.monotonic() + 600
        while fetched < records:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{fetched:,} of {records:,} records fetched in 600 s")
            for part in fetcher.poll(1.0):
                if part.error or part.problem:
                    raise RuntimeError(f"{topic}[{part.partition}]: error {part.error} {part.problem or ''}")
                out[part.partition].extend(part.batches)
                fetched += sum(map(record_count, part.batches))
                fetcher.resume((topic, part.partition), next_offset(part.batches[-1]))
    finally:
        fetcher.close()
    return out


def send_all(bootstrap: str, topic: str, batches: list[list[memoryview]], target_pid: int, connections: int
             ) -> dict[str, float]:
    """Every batch to ``topic`` on the target through one sender with ``connections`` to the broker (as the batches
    path's replication.producers sets it), at once; the rate and cores over 10-90 % of the records acknowledged."""
    sender = BatchSender(Brokers(bootstrap, {}, "target"), connections=connections)
    total = sum(record_count(b) for part in batches for b in part)
    samples: list[tuple[float, int, float, float]] = []
    done = 0
    try:
        sender.send([Outgoing(topic, p, b, token=record_count(b)) for p, part in enumerate(batches) for b in part])
        deadline = time.monotonic() + 900
        while done < total:
            for r in sender.poll(0.05):
                if r.error:
                    raise RuntimeError(r.describe())
                done += int(r.batch.token)  # type: ignore[call-overload]
            samples.append((time.monotonic(), done, cpu_seconds([target_pid]),
                            cpu_seconds([os.getpid()])))
            if time.monotonic() > deadline:
                raise RuntimeError(f"{done:,} of {total:,} records acknowledged in 900 s")
    finally:
        sender.close()
    lo = next(s for s in samples if s[1] >= total * 0.1)
    hi = next(s for s in samples if s[1] >= total * 0.9)
    span = max(hi[0] - lo[0], 1e-3)
    return {"records_per_s": round((hi[1] - lo[1]) / span), "target_cores": round((hi[2] - lo[2]) / span, 2),
            "sender_cores": round((hi[3] - lo[3]) / span, 2)}


def main(partitions: int, records: int, rounds: int = 1) -> None:
    linger_ms = int(os.environ.get("SOURCE_LINGER_MS", "20"))
    variants = [int(n) for n in os.environ.get("CONNECTIONS", "1").split(",")]
    topic = f"ceiling{partitions}"
    with fresh_backlog("mirror-ceiling-", topic, partitions, records, linger_ms) as backlog:
        batches = fetch_all(backlog.src.bootstrap, topic, partitions, records)
        count = sum(map(len, batches))
        print({"partitions": partitions, "batches": count, "records_per_batch": round(records / count, 1)})
        for r in range(rounds):  # the same batches each time, to a topic of their own; the variants taking turns
            for connections in variants:
                remote = f"{topic}.{r}.{connections}"
                backlog.dst.create(remote, partitions)
                print({"round": r + 1, "connections": connections, **send_all(
                    backlog.dst.bootstrap, remote, batches, backlog.clusters[1].pid() or 0, connections)}, flush=True)


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) > 3 else 1)
