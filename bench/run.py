"""`make bench`: replication throughput against the raw produce/consume ceiling, MirrorMaker 2 and mirror_core on
the same brokers in the same run; then latency, failover accuracy, offset-map size, the reconciliation job and
restart times; scale, WAN and scale-out on request.

This module is the command line only: each part is a module of its own (PARTS below), what they share is
bench/harness.py, and the one-off questions are under bench/probes/ (see its README.md).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench import backlog, failover, latency, offset_map, reconcile, restart, scale, scaleout, wan
from bench.harness import PARTITIONS, RESULTS, bench_cluster, load_average, names, run_meta, utc_stamp, write_result
from bench.mm2 import MM2_TUNING

#: Each part of a run (``--only``) and the module that measures it. ``scenarios`` is ``latency`` and ``failover``.
PARTS = {
    "backlog": "bench/backlog.py: backlog throughput against the raw ceiling, MirrorMaker 2, mirror_core",
    "scenarios": "latency and failover",
    "latency": "bench/latency.py: end-to-end latency under a steady load",
    "failover": "bench/failover.py: duplicates and losses of groups failed over with the checkpoints",
    "offset-map": "bench/offset_map.py: offset-map entries of a gappy source",
    "reconcile": "bench/reconcile.py: the reconciliation job's records verified per second (Spark)",
    "restart": "bench/restart.py: time to copy again after a SIGKILL/SIGTERM and restart, a join, a leave",
    "scale": "bench/scale.py: growth with partitions and history (long; only with --only scale)",
    "wan": "bench/wan.py: MirrorMaker 2 and mirror_core over a toxiproxy WAN (only with --only wan)",
    "scaleout": "bench/scaleout.py: 1/2/3 mirror processes on three-node clusters (only with --only scaleout)",
}
ON_REQUEST = ("scale", "wan", "scaleout")
EPILOG = "parts (--only):\n" + "\n".join(f"  {k:<11} {v}" for k, v in PARTS.items()) + """

results: bench/results/replication-<UTC time>.json and bench/results/latest.md (latest-partial.md with --only);
  scale: scale-<UTC time>.json and scale-<date>.md; wan: wan-<UTC time>.md; scaleout: scaleout-<date>.md.
  python -m bench.run --render <results.json> prints a results file's tables again."""


def render_markdown(data: dict[str, Any]) -> str:
    """The Markdown report of a results JSON document (as written by :func:`main`)."""
    meta = data["meta"]
    maps = {k: (v["entries"], v["records"]) for k, v in data.get("offset_map", {}).items()}
    lines = [f"# Replication benchmark ({meta['date']})", "",
             f"Machine: {meta['machine']}; Kafka {meta['kafka']}; mirror_core {meta['mirror_core']}; "
             f"{PARTITIONS} partitions; single-node KRaft clusters on loopback."]
    lines += backlog.markdown_lines([backlog.Result(**r) for r in data.get("results", [])], meta)
    lines += offset_map.markdown_lines(maps)
    text = "\n".join(lines) + "\n"
    extra = latency.markdown_lines(data.get("latency", [])) + failover.markdown_lines(data.get("failover", []))
    extra += reconcile.markdown_lines(data.get("reconcile", []), data.get("reconcile_growth"))
    text += "\n".join(extra) + ("\n" if extra else "")
    return (text + restart.restart_markdown(data.get("restart", []))
            + scaleout.scaleout_markdown(data.get("scaleout", [])))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EPILOG)
    parser.add_argument("--records", type=int, default=1_000_000, help="records for the 100-byte scenario")
    parser.add_argument("--scenario", choices=("small", "large", "all"), default="all")
    parser.add_argument("--workers", default="1,2", help="mirror process counts to measure")
    parser.add_argument("--out", default=str(RESULTS), help="where results are written")
    parser.add_argument("--no-mm2", dest="mm2", action="store_false", help="skip MirrorMaker 2")
    parser.add_argument("--no-scenarios", dest="scenarios", action="store_false",
                        help="skip the steady-load latency and failover-accuracy scenarios")
    parser.add_argument("--rate", default="20000", help="steady load, records/s (comma-separated: several)")
    parser.add_argument("--latency-runs", type=int, default=1, help="repetitions of each steady-load run")
    parser.add_argument("--seconds", type=float, default=30, help="steady load duration")
    parser.add_argument("--groups", type=int, default=40, help="consumer groups in the failover scenario")
    parser.add_argument("--no-reconcile", dest="reconcile", action="store_false",
                        help="skip the reconciliation-job (Spark) scenario")
    parser.add_argument("--reconcile-sizes", default="1000000,4000000",
                        help="records per reconciliation-job run, comma-separated (100-byte values)")
    parser.add_argument("--reconcile-master", default="local[2]", help="spark-submit --master of that scenario")
    parser.add_argument("--restart-runs", type=int, default=3, help="repetitions of each restart event")
    parser.add_argument("--scale-partitions", default="8,200,2000",
                        help="scale: sizes, each N (one topic of N partitions) or TxP (T topics of P partitions)")
    parser.add_argument("--scale-records", type=int, default=2_000_000,
                        help="scale: backlog per partition count (at 2,000 partitions 1,000 records each)")
    parser.add_argument("--scale-history", default="1000000,10000000", help="scale: gappy history sizes")
    parser.add_argument("--scale-runs", type=int, default=1, help="scale: repetitions of each size")
    parser.add_argument("--scale-source-linger-ms", type=int, default=20,
                        help="scale: the partitions series' source producer's linger.ms (how many records share a "
                             "source batch; 20: 65-110 at 2,000 partitions, thousands at 8)")
    parser.add_argument("--scale-data-paths", default="records",
                        help="scale: mirror_core's data paths in the partitions series (replication.data.path), "
                             "e.g. records,batches: each a system of its own, taking turns with MirrorMaker 2")
    parser.add_argument("--wan-rtts", default="0,20,80,150", help="wan: round-trip times, ms")
    parser.add_argument("--wan-sizes", default="100,1024", help="wan: value sizes, bytes")
    parser.add_argument("--wan-placements", default="remote-consume,remote-produce",
                        help="wan: where the mirror runs (remote-consume: next to the target)")
    parser.add_argument("--wan-bandwidth", type=int, help="wan: a bandwidth cap, KB/s each way (default none)")
    parser.add_argument("--wan-target-batch-bytes", type=int,
                        help="wan: the target broker takes record batches this large (message.max.bytes) and "
                             "MirrorMaker 2 sends them (batch.size, max.request.size); default: the broker's 1 MiB")
    parser.add_argument("--wan-variants", default="",
                        help="wan: comma-separated mirror_core variants next to the source (default: all; "
                             "labels as in bench/wan.py VARIANTS, e.g. 'mirror_core,mirror_core + 4 producers')")
    parser.add_argument("--wan-runs", type=int, default=3,
                        help="wan: repetitions of each backlog run (0: the steady-load latency only)")
    parser.add_argument("--wan-cut-seconds", type=float, default=0,
                        help="wan: after each link's latency runs, cut the link this long under a steady load "
                             "(0: no cut; the issue's figure: 30)")
    parser.add_argument("--wan-cut-runs", type=int, default=1, help="wan: link cuts per system and link")
    parser.add_argument("--wan-records", type=int, default=400_000,
                        help="wan: backlog records of 100 bytes (a quarter of that for larger values)")
    parser.add_argument("--scaleout-runs", type=int, default=3, help="repetitions of the scale-out part")
    parser.add_argument("--scaleout-records", type=int, default=1_000_000, help="backlog of each scale-out run")
    parser.add_argument("--broker-dir", help="where the two brokers keep their data (default: the system's temporary "
                        "directory). /dev/shm leaves the host disk out: on this machine's ext4 a broker's first "
                        "append to each partition after a new topic's first bulk fill costs ~18 ms "
                        "(bench/results/archive/first-append-2026-11-25.md); the results file is then "
                        "scale-<date>-<dir name>.md")
    parser.add_argument("--only", help=f"comma-separated parts to run, of {', '.join(PARTS)} "
                        "(default: all but scale, wan and scaleout, and those skipped with --no-scenarios / "
                        "--no-reconcile)")
    return parser.parse_args(argv)


def chosen_parts(args: argparse.Namespace) -> set[str]:
    """The parts to run: ``--only``, else every part not skipped and not run on request only."""
    if args.only:
        parts = set(names(args.only))
        if not parts or parts - set(PARTS):
            raise SystemExit(f"--only: choose among {', '.join(PARTS)}")
    else:
        parts = {x for x in PARTS if (x not in ("scenarios", "latency", "failover") or args.scenarios)
                 and (x != "reconcile" or args.reconcile) and x not in ON_REQUEST}
    if "scenarios" in parts:
        parts |= {"latency", "failover"}
    return parts


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) == 2 and argv[0] == "--render":
        sys.stdout.write(render_markdown(json.loads(Path(argv[1]).read_text())))
        return 0
    args = parse_args(argv)
    parts = chosen_parts(args)
    try:
        reconcile_sizes = [int(x) for x in args.reconcile_sizes.split(",") if x.strip()]
    except ValueError:
        raise SystemExit("--reconcile-sizes: comma-separated record counts") from None
    if "reconcile" in parts and (not reconcile_sizes or min(reconcile_sizes) < PARTITIONS):
        raise SystemExit(f"--reconcile-sizes: at least {PARTITIONS} records per run")
    results: list[backlog.Result] = []
    maps: dict[str, tuple[int, int]] = {}  # offset-map entries, records replicated
    extra: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="mirror-bench-", dir=args.broker_dir) as tmp:
        work = Path(tmp)
        clusters = [bench_cluster(n, work) for n in ("source", "target")]
        if "wan" in parts:
            clusters = [wan.add_wan_listener(c) for c in clusters]
        for c in clusters:
            c.start()
        src, dst = clusters[0].bootstrap, clusters[1].bootstrap
        try:
            if "backlog" in parts:
                results, maps = backlog.run_part(src, dst, work, args)
            if "latency" in parts:
                extra["latency"] = latency.run_part(src, dst, work, args)
            if "failover" in parts:
                extra["failover"] = failover.run_part(src, dst, work, args)
            if "offset-map" in parts:
                maps.update(offset_map.run_part(src, dst, work, args))
            if "reconcile" in parts:
                extra.update(reconcile.run_part(src, dst, work, reconcile_sizes, args.reconcile_master))
            if "restart" in parts:
                extra["restart"] = restart.run_part(src, dst, work, args)
            if "scale" in parts:
                scale.run_part(src, dst, work, args)
            if "wan" in parts:
                extra["wan"], extra["wan_cut"] = wan.run_part(clusters, work, args)
            if "scaleout" in parts:  # its own three-node clusters
                extra["scaleout"] = scaleout.run_part(work, args)
        finally:
            for c in clusters:
                c.stop()
    meta = run_meta()
    meta["mm2_settings"] = ", ".join(f"{k}={v}" for k, v in MM2_TUNING.items())
    stamp = utc_stamp()
    data = {"meta": meta, "results": [asdict(r) for r in results],
            "offset_map": {k: {"entries": e, "records": n} for k, (e, n) in maps.items()}, **extra}
    write_result(args.out, f"replication-{stamp}.json", json.dumps(data, indent=2))
    if "wan" in extra:
        meta["load"] = f"{args.wan_load}, after: {load_average()}"
        if args.wan_target_batch_bytes:
            meta["target_batch_bytes"] = f"{args.wan_target_batch_bytes} (MirrorMaker 2: batch.size and " \
                                         "max.request.size the same)"
        wan_md = wan.wan_markdown(extra["wan"], meta, extra["wan_cut"], args.wan_cut_seconds)
        write_result(args.out, f"wan-{stamp}.md", wan_md)
        print(wan_md)
    text = render_markdown(data)
    if "scaleout" in parts:
        write_result(args.out, f"scaleout-{stamp[:8]}.md", text)
    # A partial run (--only) must not replace the full table; its own file shows what it measured.
    write_result(args.out, "latest.md" if not args.only else "latest-partial.md", text)
    print(text)
    wrong = [r for r in extra.get("reconcile", []) if r["status"] != "ok" or r["checked"] != r["records"]]
    if wrong:  # a clean replication must reconcile with no discrepancy: the results are kept, the run fails
        print(f"reconciliation found discrepancies on a clean replication: {wrong}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
