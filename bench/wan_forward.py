"""The batch-forwarding prototype (bench/batch_forward.py) over a WAN, next to MirrorMaker 2 and mirror_core
on the same toxiproxy link, same backlog, same run: how much of remote produce's shortfall is librdkafka's
(one produce request in flight per partition with idempotence; one partition per request). The prototype
runs in each of its modes: plain, idempotent (the producer protocol mirror_core's producer speaks, so its
cost; the prototype never retries, so the protection itself is not exercised) and transactional (committing
every second, as mirror_core's exactly-once mode does under backlog).

    TMPDIR=/dev/shm python -m bench.wan_forward [rtt_ms] [records] [rounds] [value bytes] [placement]

Placement ``remote-produce`` (default; the mirror next to the source) or ``remote-consume``. Text records (100 B
by default) over 8 partitions, as ``--only wan``; records/s from 10 % to 90 % of the backlog on the target.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import bench.run as bench_run
from bench import batch_forward, copy_ceiling
from bench.wan import Link, add_wan_listener, backlog_once, endpoints, produce_backlog
from mirror_core.devcluster.local_cluster import free_port
from mirror_core.devcluster.toxiproxy import ToxiproxyServer


def main(rtt_ms: int = 80, records: int = 2_000_000, rounds: int = 2, size: int = 100,
         placement: str = "remote-produce") -> None:
    with tempfile.TemporaryDirectory(prefix="mirror-wanfwd-") as tmp:
        work = Path(tmp)
        clusters = [add_wan_listener(bench_run.bench_cluster(n, work))
                    for n in ("source", "target")]
        for c in clusters:
            c.start()
        server = ToxiproxyServer(work / "toxiproxy", free_port())
        try:
            link = Link(server.start(), clusters)
            link.set_rtt(rtt_ms)
            produce_backlog(clusters[0].bootstrap, "wanfwd", records, size)
            src, dst = endpoints(placement, clusters)
            for r in range(rounds):  # taking turns, so all meet the same machine load
                row: dict[str, float] = {}
                systems: tuple[tuple[str, list[str] | None], ...] = (("MirrorMaker 2", None), ("mirror_core", []))
                for k, (system, extra) in enumerate(systems):
                    row[system] = backlog_once(system, extra, src, dst, clusters[1].bootstrap, "wanfwd", records,
                                               size, f"wf{r}{k}", work, link)[0]
                for mode in batch_forward.MODES:
                    row[f"forward {mode}"] = float(copy_ceiling.timed_copier(
                        f"--forward-{mode}", src, dst, clusters[1].bootstrap, "wanfwd", f"wf{r}{mode}.wanfwd",
                        bench_run.PARTITIONS, records)["records_per_s"] or 0)
                mm2 = row["MirrorMaker 2"] or 1
                print({"round": r, "rtt_ms": rtt_ms, "placement": placement, "records": records, "bytes": size,
                       **{s: round(v) for s, v in row.items()},
                       **{f"{s} vs MM2": round(v / mm2, 2) for s, v in row.items() if s != "MirrorMaker 2"}},
                      flush=True)
        finally:
            server.stop()
            for c in clusters:
                c.stop()


if __name__ == "__main__":
    args = sys.argv[1:]
    # Numbers first, then the placement: mypy cannot see which star argument fills which parameter.
    main(*(int(a) for a in args[:4]), *args[4:5])  # type: ignore[arg-type]
