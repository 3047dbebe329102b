"""Part ``latency`` of ``make bench`` (``--only scenarios`` runs it with ``failover``): end-to-end latency under a
steady load (target consume time - source create time), MirrorMaker 2 and mirror_core (at-least-once and
exactly-once) on the same brokers, and the floor of the measurement (no mirror: the consumer on the source)."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

from bench.harness import (
    PARTITIONS,
    Starter,
    as_rows,
    create_topic,
    load_average,
    mirror_core_starter,
    stop,
    wait_visible,
)
from bench.mm2 import mm2_checkpointing_starter

WARMUP_S = 5.0

PACED_PRODUCER = """
import sys, time
from confluent_kafka import Producer
bootstrap, topic, rate, seconds = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
numbered = sys.argv[5:] == ["numbered"]  # each value its sequence number, padded to 100 bytes
p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1, "acks": "all"})
value = b"x" * 100
start = time.monotonic(); sent = 0
while time.monotonic() - start < seconds:
    due = int((time.monotonic() - start) * rate)
    while sent < due:
        try:
            p.produce(topic, value=b"%100d" % sent if numbered else value, partition=sent % 8)
        except BufferError:  # local queue full (the machine stalled): wait for it, the record is still sent
            p.poll(0.01)
            continue
        sent += 1
    p.poll(0)
    time.sleep(0.002)
p.flush(30)
print(sent)
"""


@dataclass
class LatencyResult:
    system: str
    rate: int
    records: int
    p50_ms: float
    p99_ms: float
    max_ms: float
    run: int = 1
    load: str = ""  # load averages (1/5/15 min) when the run started: the machine is shared


def latency_run(system: str, start: Starter | None, src: str, dst: str, alias: str, workdir: Path, rate: int,
                seconds: float, run: int = 1, warmup_s: float = WARMUP_S) -> LatencyResult:
    """Steady load at ``rate`` records/s; latency = target consume time - source record create time.

    ``start=None`` measures the floor: the same producer and consumer on the source topic itself,
    no mirror in between.
    """
    topic = f"lat{alias}"
    load = load_average()
    create_topic(src, topic)
    remote = f"{alias}.{topic}" if start is not None else topic
    if start is None:
        dst = src
    procs = start(topic, workdir) if start is not None else []
    try:
        warm = Producer({"bootstrap.servers": src})
        for p in range(PARTITIONS):
            warm.produce(topic, value=b"warmup", partition=p)
        warm.flush(10)
        wait_visible(dst, remote, PARTITIONS, 180)  # the mirror is running and caught up
        samples: list[tuple[int, float]] = []  # (create time ms, latency ms)
        done = threading.Event()

        def consume() -> None:
            c = Consumer({"bootstrap.servers": dst, "group.id": f"lat-{alias}", "auto.offset.reset": "latest",
                          "fetch.wait.max.ms": 5, "enable.auto.commit": False, "isolation.level": "read_committed"})
            c.assign([TopicPartition(remote, p, -1) for p in range(PARTITIONS)])  # -1: the end
            while not done.is_set():
                # One record per poll, stamped as it arrives: a batch consume(n, t) waits for n records
                # or t seconds, which would add up to t to every system's figures (and consume(n, 0)
                # measured here returns nothing most of the time, then falls behind).
                m = c.poll(0.05)
                if m is not None and m.error() is None and m.value() != b"warmup":
                    ts = m.timestamp()[1]
                    samples.append((ts, time.time() * 1000 - ts))
            c.close()

        reader = threading.Thread(target=consume, daemon=True)
        reader.start()
        time.sleep(1)
        load_start_ms = time.time() * 1000
        out = subprocess.run([sys.executable, "-c", PACED_PRODUCER, src, topic, str(rate), str(seconds + warmup_s)],
                             capture_output=True, text=True, timeout=seconds + warmup_s + 120)
        if out.returncode != 0:  # a crashed load generator would leave an empty, unexplained result
            raise RuntimeError(f"{system}: the paced producer failed: {out.stderr.strip()[-300:]}")
        sent = int(out.stdout.strip())
        deadline = time.monotonic() + 60
        while len(samples) < sent and time.monotonic() < deadline:
            time.sleep(0.2)
        done.set()
        reader.join(10)
    finally:
        stop(procs)
    _dump_samples(system, alias, samples, load_start_ms + warmup_s * 1000)
    # The first ``warmup_s`` seconds of load warm up brokers, JITs and connections: not measured.
    latencies = sorted(lat for ts, lat in samples if ts >= load_start_ms + warmup_s * 1000)
    q = statistics.quantiles(latencies, n=100) if len(latencies) > 100 else [float("nan")] * 99
    return LatencyResult(system, rate, len(latencies), round(q[49], 1), round(q[98], 1),
                         round(latencies[-1], 1) if latencies else float("nan"), run, load)


def _dump_samples(system: str, alias: str, samples: list[tuple[int, float]], measured_from_ms: float) -> None:
    """With BENCH_LATENCY_SAMPLES=<dir>: each second's record count, p50, p99 and max of one latency run, to see
    where in the run a tail falls (diagnosis by hand; the bench's figures do not depend on it). Second 0 is the
    first measured one: the negative seconds are the warm-up, which the figures leave out, and the records
    that arrive after the load stopped are in the last seconds. One file per run, ``<alias>.tsv`` (the alias
    is unique within a bench run; a second bench run into the same directory replaces its files)."""
    where = os.environ.get("BENCH_LATENCY_SAMPLES")
    if not where or not samples:
        return
    by_second: dict[int, list[float]] = {}
    for ts, lat in samples:
        by_second.setdefault(int((ts - measured_from_ms) // 1000), []).append(lat)
    lines = [f"# {system} ({alias})", "second\trecords\tp50_ms\tp99_ms\tmax_ms"]
    for second, lats in sorted(by_second.items()):
        lats.sort()
        lines.append(f"{second}\t{len(lats)}\t{lats[len(lats) // 2]:.0f}\t{lats[int(len(lats) * 0.99)]:.0f}"
                     f"\t{lats[-1]:.0f}")
    Path(where).mkdir(parents=True, exist_ok=True)
    (Path(where) / f"{alias}.tsv").write_text("\n".join(lines) + "\n")


def run_part(src: str, dst: str, work: Path, args: Any) -> list[dict[str, Any]]:
    """Each system at each rate of ``args.rate``, ``args.latency_runs`` times, systems taking turns."""
    def ours(alias: str, *extra: str) -> Starter:
        return mirror_core_starter(src, dst, alias, *extra)

    def mm2(alias: str) -> Starter:
        return mm2_checkpointing_starter(src, dst, alias)

    latency = []
    # (label, alias, alias -> starter); None: the floor.
    systems: list[tuple[str, str, Any]] = [("MirrorMaker 2", "mm2lat", mm2)] if args.mm2 else []
    systems += [("mirror_core at-least-once", "alolat", ours),
                ("mirror_core exactly-once", "eoslat", lambda a: ours(a, "exactly.once.enabled = true"))]
    rates = [int(r) for r in str(args.rate).split(",") if r.strip()]
    # An unmeasured run first: whichever system goes first on fresh brokers otherwise pays for the
    # brokers' warm-up (measured here: p99 several times higher on a cold pair of clusters).
    latency_run("warm-up", ours("warmlat"), src, dst, "warmlat", work, rates[0], 10)
    # The floor of this measurement on this machine: producer -> source -> consumer, no mirror.
    # Measured last in each round: the first run on a topic of a fresh pair of brokers pays for their warm-up.
    systems.append(("no mirror (consumer on the source topic)", "floorlat", None))
    for rate in rates:
        for run in range(1, args.latency_runs + 1):
            for label, alias, make in systems:
                # A fresh topic (named after the alias) per system, rate and run.
                name = alias if (len(rates), args.latency_runs) == (1, 1) else f"{alias}{rate}r{run}"
                starter = make(name) if make is not None else None
                latency.append(latency_run(label, starter, src, dst, name, work, rate, args.seconds, run))
                print(latency[-1], flush=True)
    return as_rows(latency)


def markdown_lines(rows: list[dict[str, Any]]) -> list[str]:
    """The latency table and how it is measured."""
    lines: list[str] = []
    if not rows:
        return lines
    lines += ["", "## Steady load: end-to-end latency (target consume time - source create time)", "",
              "| system | rate (records/s) | run | records | p50 ms | p99 ms | max ms | load avg 1/5/15 |",
              "|---|---:|---:|---:|---:|---:|---:|---|"]
    lines += [f"| {r['system']} | {r['rate']:,} | {r.get('run', 1)} | {r['records']:,} | {r['p50_ms']} | "
              f"{r['p99_ms']} | {r['max_ms']} | {r.get('load', '')} |" for r in rows]
    lines.append("\nThe producer is a separate process (linger.ms=1, acks=all); the consumer polls one record at "
                 "a time and stamps it on arrival. The 'no mirror' row is the floor of this measurement on this "
                 "machine: the same producer and consumer on the source topic. Exactly-once latency includes the "
                 "commit interval (offset.flush.interval.ms = 1 s): read_committed consumers see records once "
                 "their transaction commits.")
    return lines
