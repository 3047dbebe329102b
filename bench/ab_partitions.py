"""A/B of source trees copying one backlog over N partitions, optionally under py-spy.

    TREE=<source tree> EXTRA='<config line>;...' python -m bench.ab_partitions <partitions> <records> [<py-spy out>]

Fresh source and target clusters per run; prints records/s (10 %-90 % of the backlog on the target), CPU
per million records and the time to the first record. Run it for each tree in turn (the trees taking
turns meet the same machine load). A py-spy output whose name contains "native" samples C frames too
(py-spy is not a project dependency: ``pip install py-spy``), and one whose name contains "idle" samples
waiting threads too.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import bench.run as bench_run
from bench.scale import STATIC, Cluster, EndWatcher, copy_rate, plain_source
from bench.scenarios import stop


def main(partitions: int, records: int, spy_out: str = "") -> None:
    if os.environ.get("TREE"):
        bench_run.REPO = Path(os.environ["TREE"])  # the tree whose ``python -m mirror_core`` runs
    with bench_run.local_clusters("mirror-ab-") as (work, clusters):
        src, dst = Cluster(clusters[0].bootstrap), Cluster(clusters[1].bootstrap)
        topic, alias = f"ab{partitions}", "ab"
        src.create(topic, partitions)
        plain_source(src.bootstrap, topic, records, partitions)
        extra = ["offset.map.snapshot.interval.seconds = 5", "emit.checkpoints.enabled = false",
                 *(x.strip() for x in os.environ.get("EXTRA", "").split(";") if x.strip())]
        t0 = time.monotonic()
        procs, _ = bench_run.start_mirror_core(src.bootstrap, dst.bootstrap, topic, 1, alias, work, extra, STATIC)
        try:  # the mirror is stopped even when py-spy is missing or the copy fails (it outlived such runs)
            spy = None
            if spy_out:
                time.sleep(4)  # past start-up
                spy = subprocess.Popen(["py-spy", "record", "-p", str(procs[0].pid), "-o", spy_out, "-f", "raw",
                                        "-d", "25", "-r", "50", *(["--native"] if "native" in spy_out else []),
                                        *(["--idle"] if "idle" in spy_out else [])])
            print(copy_rate(procs, EndWatcher(dst.bootstrap, f"{alias}.{topic}", partitions), records, t0),
                  flush=True)
            if spy is not None:
                spy.wait()
        finally:
            stop(procs)


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] if len(sys.argv) > 3 else "")
