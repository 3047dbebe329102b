"""Scale-out benchmark on three-node clusters (RF 3, min.insync.replicas 2): mirror_core with 1, 2 and 3
processes sharing one flow, and MirrorMaker 2 (one dedicated process) on the same brokers in the same run.

Throughput and CPU-s per million records come from bench/backlog.py's measurement (10%-90% of the
backlog on the target). The rebalance pause reuses bench/restart.py's sampling of the target end offsets
every 50 ms under a steady load: the longest time any partition made no progress after a process joins
(1 -> 2 -> 3) and after one dies (SIGKILL, not restarted: a static member's partitions wait for its
session timeout) and after one leaves (SIGTERM).
"""

from __future__ import annotations

import statistics
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic

from bench.backlog import mirror_run, mm2_run, raw_produce
from bench.harness import PARTITIONS, SteadyLoad, TargetEnds, load_average, stop
from bench.restart import mirror_core_starter
from mirror_core.devcluster.multi_node import MultiNodeCluster

PAUSE_EVENTS = ("2nd process joins", "3rd process joins", "3rd process SIGKILLed (not restarted)",
                "2nd process SIGTERMed")
WINDOW_S = 30.0  # observation window after each event


@dataclass
class ScaleRow:
    measure: str  # "throughput" or "pause"
    system: str
    event: str
    runs: list[float]
    cpu_per_million: list[float]
    loads: list[str]


def _create(bootstrap: str, topic: str) -> None:
    """A topic with the cluster's default replication (RF 3)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})  # keep a reference: the future dies with it
    admin.create_topics([NewTopic(topic, PARTITIONS)])[topic].result(30)


def _pauses(src: str, dst: str, work: Path, rep: int) -> dict[str, float]:
    alias = f"sp{rep}"
    topic = f"pause{rep}"
    _create(src, topic)
    start = mirror_core_starter(src, dst, alias, static=True)
    ends = TargetEnds(dst, f"{alias}.{topic}")
    out: dict[str, float] = {}
    procs: list[subprocess.Popen[bytes]] = []
    try:
        with SteadyLoad(src, topic):
            procs.append(start(topic, work, 0))
            ends.wait_all_past([0] * PARTITIONS, 300)
            time.sleep(3)
            for n, event in ((1, PAUSE_EVENTS[0]), (2, PAUSE_EVENTS[1])):
                procs.append(start(topic, work, n))
                out[event] = round(ends.longest_stall(WINDOW_S), 2)
                print(f"scaleout pause: {event}: {out[event]} s", flush=True)
            procs[2].kill()
            procs[2].wait(30)
            out[PAUSE_EVENTS[2]] = round(ends.longest_stall(WINDOW_S + 15), 2)
            print(f"scaleout pause: {PAUSE_EVENTS[2]}: {out[PAUSE_EVENTS[2]]} s", flush=True)
            procs[1].terminate()
            out[PAUSE_EVENTS[3]] = round(ends.longest_stall(WINDOW_S), 2)
            print(f"scaleout pause: {PAUSE_EVENTS[3]}: {out[PAUSE_EVENTS[3]]} s", flush=True)
    finally:
        stop([p for p in procs if p.poll() is None])
    return out


def run_part(work: Path, args: Any) -> list[dict[str, Any]]:
    root = work / "scaleout"
    clusters = {name: MultiNodeCluster.create(name, root, 3, heap="512m") for name in ("src3", "dst3")}
    rows: dict[tuple[str, str, str], ScaleRow] = {}

    def add(measure: str, system: str, event: str, value: float, cpu: float | None) -> None:
        row = rows.setdefault((measure, system, event), ScaleRow(measure, system, event, [], [], []))
        row.runs.append(round(value, 2))
        if cpu is not None:
            row.cpu_per_million.append(round(cpu, 1))
        row.loads.append(load_average(" "))

    try:
        for c in clusters.values():
            c.start()
        src, dst = clusters["src3"].bootstrap, clusters["dst3"].bootstrap
        n = args.scaleout_records
        for rep in range(args.scaleout_runs):
            topic = f"scale{rep}"
            _create(src, topic)
            print(raw_produce(src, topic, n, 100), flush=True)
            systems = [(f"mirror_core, {w} process{'es' if w > 1 else ''}", w) for w in (1, 2, 3)]
            if args.mm2:
                systems.append(("MirrorMaker 2 (dedicated, 1 process)", 0))
            for label, workers in systems:
                alias = f"so{workers}r{rep}"
                r = (mm2_run(src, dst, topic, n, 100, alias, work) if workers == 0 else
                     mirror_run(src, dst, topic, n, 100, workers, alias, work, [], replication_factor=3))
                print(r, flush=True)
                add("throughput", label, "backlog, 100 B", r.records_per_s, r.cpu_s_per_million)
            for event, secs in _pauses(src, dst, work, rep).items():
                add("pause", "mirror_core static", event, secs, None)
    finally:
        for c in clusters.values():
            c.stop()
    return [asdict(r) for r in rows.values()]


def scaleout_markdown(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return ""
    lines = ["", "## Scale-out on three-node clusters (RF 3, min.insync.replicas 2)", "",
             f"Backlog of 100-byte records over {PARTITIONS} partitions; throughput from 10% to 90% of the backlog "
             "on the target. CPU: the mirror processes' user+system seconds per million records. Load: "
             "1/5/15-minute load averages when each run ended (the machine is shared).", "",
             "| system | median records/s | min-max | median CPU-s/M | min-max | runs | load averages |",
             "|---|---:|---:|---:|---:|---|---|"]
    for r in (x for x in rows if x["measure"] == "throughput"):
        cpu = r["cpu_per_million"] or [0.0]
        lines.append(f"| {r['system']} | {statistics.median(r['runs']):,.0f} | {min(r['runs']):,.0f}-"
                     f"{max(r['runs']):,.0f} | {statistics.median(cpu):.1f} | {min(cpu):.1f}-{max(cpu):.1f} | "
                     f"{', '.join(f'{x:,.0f}' for x in r['runs'])} | {'; '.join(r['loads'])} |")
    lines += ["", f"Rebalance pause under a steady load ({PARTITIONS} partitions, static members with "
              f"`--instance-id`): the longest time any partition made no progress in the {WINDOW_S:.0f} s after "
              "the event (45 s after the SIGKILL).", "",
              "| event | median s | min-max s | runs | load averages |", "|---|---:|---:|---|---|"]
    for r in (x for x in rows if x["measure"] == "pause"):
        lines.append(f"| {r['event']} | {statistics.median(r['runs']):.1f} | {min(r['runs']):.1f}-"
                     f"{max(r['runs']):.1f} | {', '.join(f'{x:.1f}' for x in r['runs'])} | {'; '.join(r['loads'])} |")
    return "\n".join(lines) + "\n"
