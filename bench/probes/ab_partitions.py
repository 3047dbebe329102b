"""A/B of source trees copying one backlog over N partitions, optionally under py-spy.

    TREE=<source tree> EXTRA='<config line>;...' [WORKERS=2] [EVERY=3] \
        python -m bench.probes.ab_partitions <partitions> <records> [<py-spy out>]

Fresh source and target clusters per run; prints records/s (10 %-90 % of the backlog on the target), CPU
per million records and the time to the first record. Run it for each tree in turn (the trees taking
turns meet the same machine load). ``WORKERS`` mirror processes share the flow (default 1, with a static
instance id). ``EVERY=<s>`` also prints, every that many seconds, the rate over the last interval and the
cores used by the mirror processes, the source broker and the target broker: whether a long copy slows
down, and who is busy. A py-spy output whose name contains "native" samples C frames too (py-spy is not
a project dependency: ``pip install py-spy``), one whose name contains "idle" samples waiting threads too, and
one whose name contains "gil" only the thread holding the GIL; sampling starts 4 s after the start and lasts
25 s. ``SOURCE_LINGER_MS`` (default 20) is the source producer's linger.ms: how many records share a source
batch (printed, from partition 0), which is what the batches data path's cost and the target broker's follow.
``VALUE_BYTES`` (default 100) is the records' value size.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import bench.harness as harness
from bench.scale import STATIC, Cluster, EndWatcher, copy_rate, plain_source, records_per_batch
from mirror_core.devcluster.local_cluster import LocalCluster


def print_intervals(every: float, ends: EndWatcher, groups: dict[str, list[int]], done: threading.Event) -> None:
    """Every ``every`` seconds: records on the target, the rate since the last line, cores per group. The rate
    and the cores each have their own clock: reading 2,000 log ends from a busy target can take seconds, and
    CPU read after it over a span timed before it made busy intervals look idle and idle ones over-busy."""

    def sample() -> tuple[float, dict[str, float], float, int, float]:
        t_cpu, cpu = time.monotonic(), {k: harness.cpu_seconds(v) for k, v in groups.items()}
        asked = time.monotonic()
        n = ends()
        t_n = time.monotonic()
        return t_cpu, cpu, t_n, n, t_n - asked

    before = sample()
    while not done.wait(every):
        now = sample()
        if done.is_set():  # the copy ended while this sample was taken: the processes may be gone
            return
        cpu_span, span = max(now[0] - before[0], 1e-3), max(now[2] - before[2], 1e-3)
        cores = " ".join(f"{k} {(now[1][k] - before[1][k]) / cpu_span:.2f}" for k in groups)
        print(f"  {now[3] / 1e6:7.2f} M  {(now[3] - before[3]) / span:9,.0f} records/s over {span:.1f} s  "
              f"cores: {cores} (log ends read in {now[4]:.2f} s)", flush=True)
        before = now


@dataclass(frozen=True)
class Backlog:
    """Fresh clusters: a source holding the backlog, an empty target; ``work``: their directory."""

    work: Path
    clusters: list[LocalCluster]
    src: Cluster
    dst: Cluster


@contextmanager
def fresh_backlog(prefix: str, topic: str, partitions: int, records: int, linger_ms: int = 20,
                  value_bytes: int = 100) -> Iterator[Backlog]:
    """Fresh clusters (stopped and removed on exit) with the backlog every copier of these benches copies."""
    with harness.local_clusters(prefix) as (work, clusters):
        src, dst = Cluster(clusters[0].bootstrap), Cluster(clusters[1].bootstrap)
        src.create(topic, partitions)
        plain_source(src.bootstrap, topic, records, partitions, linger_ms, value_bytes)
        yield Backlog(work, clusters, src, dst)


def copy(partitions: int, records: int, extra_lines: str = "", workers: int = 1, every: float = 0.0,
         spy_out: str = "") -> dict[str, float | None]:
    """One copy of a fresh ``records``-record backlog over ``partitions`` partitions by mirror_core."""
    topic, alias = f"ab{partitions}", "ab"
    linger_ms = int(os.environ.get("SOURCE_LINGER_MS", "20"))
    with fresh_backlog("mirror-ab-", topic, partitions, records, linger_ms,
                       int(os.environ.get("VALUE_BYTES", "100"))) as backlog:
        work, clusters, src, dst = backlog.work, backlog.clusters, backlog.src, backlog.dst
        print(f"source linger.ms {linger_ms}: {records_per_batch(src.bootstrap, topic):.1f} records per batch "
              "(partition 0)", flush=True)
        extra = ["offset.map.snapshot.interval.seconds = 5", "emit.checkpoints.enabled = false",
                 *(x.strip() for x in extra_lines.split(";") if x.strip())]
        t0 = time.monotonic()
        procs, _ = harness.start_mirror_core(src.bootstrap, dst.bootstrap, topic, workers, alias, work, extra,
                                               STATIC if workers == 1 else ())
        done, sampler = threading.Event(), None
        try:  # the mirror is stopped even when py-spy is missing or the copy fails (it outlived such runs)
            spy = None
            if every:
                groups = {"mirror": [p.pid for p in procs], "source": [clusters[0].pid() or 0],
                          "target": [clusters[1].pid() or 0]}
                sampler = threading.Thread(target=print_intervals, daemon=True, args=(
                    every, EndWatcher(dst.bootstrap, f"{alias}.{topic}", partitions), groups, done))
                sampler.start()
            if spy_out:
                time.sleep(4)  # past start-up
                spy = subprocess.Popen(["py-spy", "record", "-p", str(procs[0].pid), "-o", spy_out, "-f", "raw",
                                        "-d", "25", "-r", "50", *(["--native"] if "native" in spy_out else []),
                                        *(["--idle"] if "idle" in spy_out else []),
                                        *(["--gil"] if "gil" in spy_out else [])])
            rate = copy_rate(procs, EndWatcher(dst.bootstrap, f"{alias}.{topic}", partitions), records, t0)
            if spy is not None:
                spy.wait()
            return rate
        finally:
            done.set()
            if sampler is not None:
                sampler.join(30)
            harness.stop(procs)


def main(partitions: int, records: int, spy_out: str = "") -> None:
    if os.environ.get("TREE"):
        harness.REPO = Path(os.environ["TREE"])  # the tree whose ``python -m mirror_core`` runs
    print(copy(partitions, records, os.environ.get("EXTRA", ""), int(os.environ.get("WORKERS", "1")),
               float(os.environ.get("EVERY", "0")), spy_out), flush=True)


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] if len(sys.argv) > 3 else "")
