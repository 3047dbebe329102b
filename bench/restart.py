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
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from bench.scenarios import PARTITIONS, create_topic, stop
from mirror_core.kafka_io import log_ends_batch

# (topic, workdir, process number) -> the process; number 0 is the one killed and restarted.
ProcessStarter = Callable[[str, Path, int], subprocess.Popen[bytes]]
EVENTS = ("SIGKILL, restart", "SIGTERM, restart", "second process joins", "second process stops for good")
RATE = 2000  # records/s of the steady load (250 per partition)


@dataclass
class RestartResult:
    system: str
    event: str
    runs: list[float]  # seconds, one per repetition

    @property
    def median(self) -> float:
        return statistics.median(self.runs)


class SteadyLoad:
    """A steady load on every partition for as long as the measurement lasts."""

    def __init__(self, bootstrap: str, topic: str, partitions: int = PARTITIONS, rate: int = RATE,
                 value: bytes = b"x" * 100, keys: list[tuple[str, int]] | None = None) -> None:
        """``keys``: (topic, partition) pairs over several topics, in place of ``topic``'s partitions."""
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        self.keys = keys if keys is not None else [(topic, p) for p in range(partitions)]
        self.rate, self.value = rate, value
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        start, sent = time.monotonic(), 0
        while not self.stopped.is_set():
            due = int((time.monotonic() - start) * self.rate)
            while sent < due:
                try:
                    topic, partition = self.keys[sent % len(self.keys)]
                    self.producer.produce(topic, value=self.value, partition=partition)
                except BufferError:  # the broker is behind: slow down rather than die
                    break
                sent += 1
            self.producer.poll(0)
            time.sleep(0.005)
        self.producer.flush(30)

    def __enter__(self) -> SteadyLoad:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopped.set()
        self.thread.join(60)


class TargetEnds:
    """The end offset of every partition of ``remote``, -1 where the cluster does not know it (yet): one
    batched ListOffsets per sample, cheap enough every 50 ms at 2,000 partitions. A client that asked
    before the topic existed keeps answering "unknown", so a fresh one until one answers. ``committed``: the
    last stable offsets, for a copier whose records count once their transaction commits."""

    def __init__(self, bootstrap: str, remote: str, partitions: int = PARTITIONS, committed: bool = False,
                 keys: list[tuple[str, int]] | None = None) -> None:
        """``keys``: (topic, partition) pairs over several topics, in place of ``remote``'s partitions."""
        self.bootstrap, self.committed = bootstrap, committed
        self.keys = keys if keys is not None else [(remote, p) for p in range(partitions)]
        self.admin: AdminClient | None = None

    def now(self) -> list[int]:
        admin = self.admin or AdminClient({"bootstrap.servers": self.bootstrap, "log_level": "0"})
        try:
            ends = log_ends_batch(admin, self.keys, committed=self.committed)
        except Exception:  # the remote topic does not exist yet
            ends = {}
        if len(ends) == len(self.keys):  # kept once it knows them all (a topic it met too early stays unknown)
            self.admin = admin
        return [ends.get(k, -1) for k in self.keys]

    def wait_all_past(self, marks: list[int], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while any(e <= m for e, m in zip(self.now(), marks, strict=True)):
            if time.monotonic() > deadline:
                raise RuntimeError("the mirror did not copy every partition in time")
            time.sleep(0.05)

    def longest_stall(self, seconds: float) -> float:
        """The longest time any partition made no progress during the next ``seconds``."""
        n = len(self.keys)
        last, since = self.now(), [time.monotonic()] * n
        worst = [0.0] * n
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            time.sleep(0.05)
            now, t = self.now(), time.monotonic()
            for p in range(n):
                if now[p] > last[p]:
                    last[p], since[p] = now[p], t
                worst[p] = max(worst[p], t - since[p])
        return max(worst)


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
    from bench.run import REPO
    from mirror_core.devcluster.local_cluster import free_port

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
    from bench.mm2 import start_mm2

    def start(topic: str, workdir: Path, n: int) -> subprocess.Popen[bytes]:
        return start_mm2(src, dst, alias, topic, workdir)
    return start
