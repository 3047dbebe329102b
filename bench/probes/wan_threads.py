"""Where the CPU goes when mirror_core runs next to the source over a WAN: records/s, the mirror's threads and
every process on the machine, while one backlog is copied across a toxiproxy link.

    python -m bench.probes.wan_threads <rtt_ms> <records> <value_bytes> <partitions> ['<config line>' ...]

One run per call (fresh clusters): a backlog of text records over ``partitions``, then the mirror with the
product defaults plus the given lines (e.g. ``'replication.producers = 1'``: over the link the default ``auto``
chooses 4), the target behind the link
(RTT/2 each way, 1 % jitter, as ``--only wan``). Once 10 % of the backlog is on the target it samples ~7 s:
the target's growth, each mirror thread's CPU (``/proc/<pid>/task``) and ``top``'s per-process view. With
``WAN_THREADS_PERF=1`` it then records the mirror for 5 s with ``perf`` and prints the busiest symbols of its
librdkafka threads. This is a diagnosis tool, not a comparison with MirrorMaker 2: ``--only wan`` is.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import Consumer

from bench.harness import bench_cluster, end_total, start_mirror_core
from bench.probes.producer_ceiling import thread_ticks
from bench.wan import Link, add_wan_listener, produce_backlog
from mirror_core.devcluster.local_cluster import LocalCluster, free_port
from mirror_core.devcluster.toxiproxy import ToxiproxyServer

SAMPLE_S = 8.0
TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def sample(mirror: subprocess.Popen[bytes], watch: Consumer, n: int, partitions: int, label: str,
           clusters: list[LocalCluster]) -> None:
    """Wait until a tenth of the backlog is on the target, then sample and print."""
    deadline = time.monotonic() + 300
    while True:
        if mirror.poll() is not None:
            raise SystemExit(f"the mirror exited with {mirror.returncode} before copying a tenth of the backlog")
        if time.monotonic() > deadline:
            raise SystemExit("a tenth of the backlog was not on the target after 300 s")
        if end_total(watch, "s.t", partitions) >= n // 10:  # 0 until the remote topic exists
            break
        time.sleep(0.2)
    t0, e0, a = time.monotonic(), end_total(watch, "s.t", partitions), thread_ticks(mirror.pid)
    top = subprocess.run(["top", "-b", "-d", str(SAMPLE_S - 1), "-n", "2", "-w", "160"],
                         capture_output=True, text=True, check=False).stdout
    t1, e1, b = time.monotonic(), end_total(watch, "s.t", partitions), thread_ticks(mirror.pid)
    if not e0 or not e1:
        raise SystemExit("the target did not answer for its end offsets during the sample")
    secs = t1 - t0
    print(f"{label}: {(e1 - e0) / secs:,.0f} records/s over {secs:.1f} s")
    if e1 >= n:
        print("warning: the backlog ran out during the sample; use more records")
    used = {key: b[key] - a[key] for key in b if key in a}  # (thread id, name) -> ticks in the sample
    print(f"mirror process (share of a core): {sum(used.values()) / TICKS_PER_S / secs:.2f}; busiest threads:",
          ", ".join(f"{name} {ticks / TICKS_PER_S / secs:.2f}"
                    for (_, name), ticks in sorted(used.items(), key=lambda x: -x[1])[:8]))
    print(f"pids: mirror {mirror.pid}, source broker {clusters[0].pid()}, target broker {clusters[1].pid()}")
    frame = top.split("top - ")[-1].splitlines()
    print("\n".join(line[:110] for line in frame[:14]))
    if os.environ.get("WAN_THREADS_PERF") == "1":
        profile(mirror.pid)


def profile(pid: int) -> None:
    """5 s of ``perf record`` on the mirror; the 15 busiest symbols of its librdkafka threads."""
    with tempfile.NamedTemporaryFile(suffix=".perf") as data:
        subprocess.run(["perf", "record", "-q", "-F", "999", "-p", str(pid), "-o", data.name, "--", "sleep", "5"],
                       capture_output=True, check=True)
        report = subprocess.run(["perf", "report", "-i", data.name, "--no-children", "--comms", "rdk:broker1",
                                 "--sort", "dso,symbol", "--stdio"], capture_output=True, text=True, check=True)
    rows = [line for line in report.stdout.splitlines() if line.strip() and not line.startswith("#")]
    print("perf, rdk:broker1 threads:\n" + "\n".join(line[:110] for line in rows[:15]))


def main(argv: list[str]) -> None:
    if len(argv) < 4:
        raise SystemExit(__doc__)
    rtt, n, size, partitions, extra = int(argv[0]), int(argv[1]), int(argv[2]), int(argv[3]), argv[4:]
    with tempfile.TemporaryDirectory(prefix="wan-threads-") as tmp:
        work = Path(tmp)
        clusters = [add_wan_listener(bench_cluster(x, work))
                    for x in ("source", "target")]
        server = ToxiproxyServer(work / "toxiproxy", free_port())
        procs: list[subprocess.Popen[bytes]] = []
        try:
            for c in clusters:
                c.start()
            link = Link(server.start(), clusters)
            produce_backlog(clusters[0].bootstrap, "t", n, size, partitions)
            link.set_rtt(rtt)
            watch = Consumer({"bootstrap.servers": clusters[1].bootstrap, "group.id": "w", "log_level": "0"})
            try:
                procs, _ = start_mirror_core(clusters[0].bootstrap, clusters[1].bootstrap_for("WAN"), "t", 1, "s",
                                             work, extra)
                sample(procs[0], watch, n, partitions, f"rtt {rtt} ms, {size} B, {partitions} partitions, "
                                                       f"{extra or 'defaults'}", clusters)
            finally:
                watch.close()
        finally:
            for p in procs:
                p.kill()
                p.wait(30)
            server.stop()
            for c in clusters:
                c.stop()


if __name__ == "__main__":
    main(sys.argv[1:])
