"""Part ``backlog`` of ``make bench``: a backlog of 100-byte and 1 KiB records copied by MirrorMaker 2 and
mirror_core (at-least-once and exactly-once, 1 and 2 processes), against the raw ceiling (plain produce and
plain consume) on the same brokers in the same run; and the offset-map size of that gap-free source."""

from __future__ import annotations

import os
import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from bench.harness import PARTITIONS, cpu_seconds, end_total, offset_map_entries, start_mirror_core, stop
from bench.mm2 import start_mm2
from mirror_core.config.client_defaults import CONSUMER_DEFAULTS


@dataclass
class Result:
    scenario: str
    system: str
    records: int
    value_bytes: int
    seconds: float
    records_per_s: float
    mb_per_s: float
    cpu_s_per_million: float | None


def raw_produce(bootstrap: str, topic: str, n: int, size: int) -> Result:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1_048_576, "acks": "all",
                  "enable.idempotence": True, "queue.buffering.max.messages": 2_000_000,
                  "queue.buffering.max.kbytes": 2_097_151, "batch.num.messages": 100_000})
    value = os.urandom(size)
    start_cpu, start = cpu_seconds([os.getpid()]), time.perf_counter()
    for i in range(n):
        while True:
            try:
                p.produce(topic, value=value, key=b"%d" % i, partition=i % PARTITIONS)
                break
            except BufferError:
                p.poll(0.01)
    p.flush(120)
    secs = time.perf_counter() - start
    cpu = cpu_seconds([os.getpid()]) - start_cpu
    return Result(f"{size}B", "raw produce", n, size, secs, n / secs, n * size / secs / 1e6, cpu / n * 1e6)


def raw_consume(bootstrap: str, topic: str, n: int, size: int) -> Result:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{time.time()}", "auto.offset.reset": "earliest",
                  "enable.auto.commit": False, "fetch.wait.max.ms": 50, "max.partition.fetch.bytes": 4_194_304,
                  "queued.max.messages.kbytes": 131_072, "fetch.min.bytes": 65536,
                  # librdkafka's 1,000 ms capped this ceiling at ~250,000 records/s
                  # (bench/results/archive/backlog-2026-11-25.md)
                  "fetch.queue.backoff.ms": CONSUMER_DEFAULTS["fetch.queue.backoff.ms"]})
    c.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    got = 0
    start_cpu, start = cpu_seconds([os.getpid()]), time.perf_counter()
    while got < n:
        for m in c.consume(10_000, 1.0):
            if m.error() is None:
                got += 1
    secs = time.perf_counter() - start
    cpu = cpu_seconds([os.getpid()]) - start_cpu
    c.close()
    return Result(f"{size}B", "raw consume", n, size, secs, n / secs, n * size / secs / 1e6, cpu / n * 1e6)


def measure_backlog(procs: list[subprocess.Popen[bytes]], ready: Any, dst: str, remote: str, n_target: int,
                    label: str, scenario: str, size: int) -> Result:
    """Throughput from 10% to 90% of the backlog on the target (start-up and first rebalance excluded)."""
    watcher = Consumer({"bootstrap.servers": dst, "group.id": "bench-watch", "log_level": "0"})
    try:
        deadline = time.monotonic() + 900
        while not ready():
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                raise RuntimeError(f"{label}: did not start")
            time.sleep(0.01)
        t0, cpu0 = time.perf_counter(), cpu_seconds([p.pid for p in procs])
        samples: list[tuple[float, int, float]] = []  # (time, records on target, mirror CPU seconds)
        while True:
            total = end_total(watcher, remote)
            samples.append((time.perf_counter(), total, cpu_seconds([p.pid for p in procs])))
            # Exactly-once: commit markers take target offsets too, so count at least n records.
            if total >= n_target:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"{label}: did not finish")
            time.sleep(0.02)
        lo = next(x for x in samples if x[1] >= n_target * 0.1)
        hi = next(x for x in samples if x[1] >= n_target * 0.9)
        if hi[0] > lo[0] and hi[1] > lo[1]:
            secs, measured, cpu = hi[0] - lo[0], hi[1] - lo[1], hi[2] - lo[2]
        else:
            secs, measured, cpu = samples[-1][0] - t0, n_target, samples[-1][2] - cpu0
        print(f"{label}: whole run {n_target / (samples[-1][0] - t0):,.0f} records/s", flush=True)
    finally:
        stop(procs)
        watcher.close()
    return Result(scenario, label, measured, size, secs, measured / secs, measured * size / secs / 1e6,
                  cpu / measured * 1e6)


def mirror_run(src: str, dst: str, topic: str, n: int, size: int, workers: int, alias: str,
               workdir: Path, extra: list[str], expect_target: int | None = None,
               replication_factor: int = 1) -> Result:
    """``n`` source offsets; ``expect_target`` records on the target when it differs (gappy source)."""
    procs, logs = start_mirror_core(src, dst, topic, workers, alias, workdir, extra,
                                    replication_factor=replication_factor)
    label = f"mirror_core {'exactly-once' if 'exactly.once.enabled = true' in extra else 'at-least-once'}, " \
            f"{workers} process{'es' if workers > 1 else ''}"
    # The clock starts when the first process has its partitions.
    result = measure_backlog(procs, lambda: any("assigned" in f.read_text(errors="replace") for f in logs), dst,
                             f"{alias}.{topic}", expect_target if expect_target is not None else n, label,
                             f"{size}B", size)
    # The data path the flow ran (auto, the default, chooses per flow): named in the result as the log says it
    paths = {m.group(1) for f in logs for m in re.finditer(r"data path: (\w+) \(", f.read_text(errors="replace"))}
    result.system = f"{label} ({'/'.join(sorted(paths)) or 'data path unknown'})"
    return result


def mm2_run(src: str, dst: str, topic: str, n: int, size: int, alias: str, workdir: Path) -> Result:
    proc = start_mm2(src, dst, alias, topic, workdir)
    watcher = Consumer({"bootstrap.servers": dst, "group.id": "bench-watch-mm2", "log_level": "0"})
    try:
        ready = lambda: end_total(watcher, f"{alias}.{topic}") > 0  # noqa: E731 - MM2 logs no single ready line
        return measure_backlog([proc], ready, dst, f"{alias}.{topic}", n, "MirrorMaker 2 (dedicated, tuned)",
                               f"{size}B", size)
    finally:
        watcher.close()


def run_part(src: str, dst: str, work: Path, args: Any) -> tuple[list[Result], dict[str, tuple[int, int]]]:
    """The backlog runs of ``args.scenario``'s sizes; the results and the gap-free offset maps (entries, records)."""
    scenarios = []  # (value bytes, records)
    if args.scenario in ("small", "all"):
        scenarios.append((100, args.records))
    if args.scenario in ("large", "all"):
        scenarios.append((1024, max(1, args.records // 2)))
    results: list[Result] = []
    maps: dict[str, tuple[int, int]] = {}
    admin = AdminClient({"bootstrap.servers": src})
    for size, n in scenarios:
        topic = f"bench{size}"
        admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
        for step in (raw_produce, raw_consume):
            results.append(step(src, topic, n, size))
            print(results[-1], flush=True)
        if args.mm2:
            results.append(mm2_run(src, dst, topic, n, size, f"mm2x{size}", work))
            print(results[-1], flush=True)
        for workers in (int(w) for w in args.workers.split(",")):
            alias = f"alo{workers}x{size}"
            results.append(mirror_run(src, dst, topic, n, size, workers, alias, work, []))
            print(results[-1], flush=True)
            if workers == 1:
                maps[f"gap-free source, {size}B"] = (offset_map_entries(dst, alias), n)
        for workers in (int(w) for w in args.workers.split(",")):
            alias = f"eos{workers}x{size}"
            results.append(mirror_run(src, dst, topic, n, size, workers, alias, work,
                                      ["exactly.once.enabled = true"]))
            print(results[-1], flush=True)
    return results, maps


def markdown_lines(results: list[Result], meta: dict[str, str]) -> list[str]:
    """The backlog table and the exactly-once cost (none without results: a run of other parts)."""
    if not results:
        return []
    lines: list[str] = []
    if meta.get("mm2_settings"):
        lines += ["", f"MirrorMaker 2: connect-mirror {meta['kafka']}, dedicated mode, {meta['mm2_settings']}."]
    lines += ["", "The raw ceiling of a mirror is the slower of plain produce and plain consume (one client each, ",
              "same brokers, same run); a mirror does both. Mirror rates are measured from 10% to 90% of the ",
              "backlog on the target (start-up and the first rebalance excluded).", "",
              "| scenario | system | records | records/s | MB/s | CPU-s per M records | vs raw ceiling | vs MM2 |",
              "|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        raw = [x.records_per_s for x in results if x.scenario == r.scenario and x.system.startswith("raw")]
        mm2 = next((x for x in results if x.scenario == r.scenario and x.system.startswith("MirrorMaker")), None)
        ratio = f"{r.records_per_s / min(raw):.2f}" if raw and not r.system.startswith("raw") else ""
        vs_mm2 = f"{r.records_per_s / mm2.records_per_s:.2f}" if mm2 and r.system.startswith("mirror_core") else ""
        cpu = f"{r.cpu_s_per_million:.1f}" if r.cpu_s_per_million is not None else ""
        lines.append(f"| {r.scenario} | {r.system} | {r.records:,} | {r.records_per_s:,.0f} | {r.mb_per_s:.1f} | "
                     f"{cpu} | {ratio} | {vs_mm2} |")
    for size in sorted({r.scenario for r in results}):
        alo = next((r for r in results if r.scenario == size and "at-least-once, 1 process" in r.system), None)
        eos = next((r for r in results if r.scenario == size and "exactly-once, 1 process" in r.system), None)
        if alo and eos:
            lines.append(f"\nExactly-once cost, {size}, 1 process: {eos.records_per_s / alo.records_per_s:.2f}x "
                         "the at-least-once throughput.")
    return lines


