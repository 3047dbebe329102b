"""Restart benchmark: how long a partition stops being copied when a mirror process is SIGKILLed and
restarted, SIGTERMed and restarted, or when a second process joins — MirrorMaker 2 and mirror_core on
the same brokers, under the same steady load, in the same run.

Measured from outside, on the target: the target end offset of every partition is sampled every
50 ms. After a restart, "resumed" is the moment every partition has advanced past its end offset at
the moment the new process was started (so the time of process start-up counts; the time a dead
process lies dead does not). For a join, and for the second process's SIGTERM without a restart (a
scale-down), the figure is the longest time any partition made no progress in the 40 s after.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.harness import PARTITIONS, RATE, REPO, SteadyLoad, TargetEnds, as_rows, create_topic, stop
from bench.mm2 import start_mm2
from mirror_core.devcluster.local_cluster import free_port

# (topic, workdir, process number) -> the process; number 0 is the one killed and restarted.
ProcessStarter = Callable[[str, Path, int], subprocess.Popen[bytes]]
EVENTS = ("SIGKILL, restart", "SIGTERM, restart", "second process joins", "second process stops for good")


@dataclass
class RestartResult:
    system: str
    event: str
    runs: list[float]  # seconds, one per repetition

    @property
    def median(self) -> float:
        return statistics.median(self.runs)


def restart_run(system: str, start: ProcessStarter, src: str, dst: str, alias: str, workdir: Path,
                repetitions: int) -> list[RestartResult]:
    topic = f"restart{alias}"
    create_topic(src, topic)
    ends = TargetEnds(dst, f"{alias}.{topic}")
    results = {e: RestartResult(system, e, []) for e in EVENTS}
    procs: list[subprocess.Popen[bytes]] = []
    try:
        with SteadyLoad(src, topic):
            procs.append(start(topic, workdir, 0))
            ends.wait_all_past([0] * PARTITIONS, 300)  # running and copying every partition
            for _ in range(repetitions):
                for event in EVENTS[:2]:
                    time.sleep(3)  # steady state
                    if event.startswith("SIGKILL"):
                        procs[0].kill()
                    else:
                        procs[0].terminate()
                    procs[0].wait(120)
                    marks = ends.now()
                    t0 = time.monotonic()
                    procs[0] = start(topic, workdir, 0)
                    ends.wait_all_past(marks, 120)
                    results[event].runs.append(round(time.monotonic() - t0, 2))
                    print(f"{system}: {event}: {results[event].runs[-1]} s", flush=True)
                time.sleep(3)
                procs.append(start(topic, workdir, 1))
                results[EVENTS[2]].runs.append(round(ends.longest_stall(40), 2))
                print(f"{system}: {EVENTS[2]}: longest stall {results[EVENTS[2]].runs[-1]} s", flush=True)
                # Scale down: SIGTERM, and the process does not come back (a static member keeps its
                # partitions until its session times out; a dynamic one leaves the group at once).
                procs[1].terminate()
                results[EVENTS[3]].runs.append(round(ends.longest_stall(40), 2))
                print(f"{system}: {EVENTS[3]}: longest stall {results[EVENTS[3]].runs[-1]} s", flush=True)
                stop(procs[1:])
                del procs[1:]
    finally:
        stop(procs)
    return list(results.values())


def restart_markdown(rows: list[dict[str, object]]) -> str:
    if not rows:
        return ""
    lines = ["", "## Restart: seconds until every partition is copied again", "",
             f"Steady load {RATE} records/s over {PARTITIONS} partitions; one process, killed or stopped and "
             "restarted at once (time from the new process's start until every partition advanced on the "
             "target); a second process joining, then stopping for good (SIGTERM, no restart): the longest time "
             "any partition stalled in the 40 s after. "
             "mirror_core static: `--instance-id`; dynamic: none (session.timeout.ms 20 s); "
             "MirrorMaker 2: dedicated mode, Connect defaults (session.timeout.ms 10 s). A stall of 40 s means the "
             "partition was still not copied at the end of the 40 s window.", "",
             "| system | event | median s | min s | max s | runs |", "|---|---|---:|---:|---:|---|"]
    for r in rows:
        runs = [float(x) for x in r["runs"]]  # type: ignore[attr-defined]
        lines.append(f"| {r['system']} | {r['event']} | {statistics.median(runs):.1f} | {min(runs):.1f} | "
                     f"{max(runs):.1f} | {', '.join(f'{x:.1f}' for x in runs)} |")
    return "\n".join(lines) + "\n"


def mirror_core_starter(src: str, dst: str, alias: str, static: bool) -> ProcessStarter:
    def start(topic: str, workdir: Path, n: int) -> subprocess.Popen[bytes]:
        config = workdir / f"{alias}.properties"
        config.write_text("\n".join([
            f"clusters = {alias}, target", f"{alias}.bootstrap.servers = {src}", f"target.bootstrap.servers = {dst}",
            f"{alias}->target.enabled = true", f"{alias}->target.topics = {topic}",
            "emit.heartbeats.enabled = false", "replication.factor = 1"]) + "\n")
        log = open(workdir / f"{alias}-{n}.log", "ab")  # noqa: SIM115 - owned by the child
        args = ["--instance-id", f"{alias}-{n}"] if static else []
        return subprocess.Popen([sys.executable, "-m", "mirror_core", "run", "--config", str(config),
                                 "--metrics-port", str(free_port()), *args], stdout=log, stderr=subprocess.STDOUT,
                                cwd=REPO)
    return start


def mm2_starter(src: str, dst: str, alias: str) -> ProcessStarter:
    def start(topic: str, workdir: Path, n: int) -> subprocess.Popen[bytes]:
        return start_mm2(src, dst, alias, topic, workdir)
    return start


def run_part(src: str, dst: str, work: Path, args: Any) -> list[dict[str, Any]]:
    """Each event ``args.restart_runs`` times: MirrorMaker 2 (unless ``--no-mm2``), mirror_core with a static
    instance id and without."""
    systems = [("MirrorMaker 2", "mm2rs", mm2_starter(src, dst, "mm2rs"))] if args.mm2 else []
    systems += [("mirror_core static", "ours", mirror_core_starter(src, dst, "ours", static=True)),
                ("mirror_core dynamic", "ourd", mirror_core_starter(src, dst, "ourd", static=False))]
    rows = []
    for label, alias, starter in systems:
        rows += restart_run(label, starter, src, dst, alias, work, args.restart_runs)
    return as_rows(rows)
