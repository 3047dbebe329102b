"""`make bench`: replication throughput against the raw produce/consume ceiling, same brokers, same run.

Usage: python -m bench.run [--records N] [--scenario small|large|all] [--out bench/results]
                           [--only backlog,scenarios,offset-map,reconcile] [--reconcile-sizes 1000000,4000000]
Results: bench/results/replication-<UTC time>.json and bench/results/latest.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from bench.restart import restart_markdown
from bench.scaleout import scaleout_markdown
from bench.scenarios import RECONCILE_SPARK_CONF, reconcile_growth, stop
from mirror_core import __version__
from mirror_core.config.client_defaults import CONSUMER_DEFAULTS
from mirror_core.devcluster.kafka_dist import KAFKA_VERSION
from mirror_core.devcluster.local_cluster import LocalCluster, free_port

REPO = Path(__file__).resolve().parents[1]
PARTITIONS = 8
# Parts of a run (--only): backlog throughput (raw, MM2, mirror_core), steady-load latency and failover
# accuracy ("scenarios" is both), offset-map size of a gappy source, reconciliation-job throughput,
# time to copy again after a restart (bench/restart.py), growth with partitions and history (bench/scale.py,
# only with --only scale: it is long), MM2 and mirror_core over a WAN (bench/wan.py, only with --only wan),
# 1/2/3 mirror processes on three-node clusters (bench/scaleout.py).
PARTS = ("backlog", "scenarios", "latency", "failover", "offset-map", "reconcile", "restart", "scale", "wan",
         "scaleout")
CLK_TCK = os.sysconf("SC_CLK_TCK")


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


def cpu_seconds(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / CLK_TCK
        except (FileNotFoundError, IndexError):
            pass
    return total


def end_total(consumer: Consumer, topic: str, partitions: int = PARTITIONS) -> int:
    """The sum of the topic's end offsets; 0 while it does not answer (not created yet)."""
    total = 0
    for p in range(partitions):
        try:
            total += consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=5)[1]
        except Exception:
            return 0
    return total


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
                  # librdkafka's 1,000 ms capped this ceiling at ~250,000 records/s (bench/consume_backoff.py)
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


def bench_cluster(name: str, base: Path) -> LocalCluster:
    """A single-node KRaft cluster for a benchmark, its whole heap from the start as Kafka's own start script
    gives it (-Xms = -Xmx, 1 GiB; ``BENCH_BROKER_HEAP`` sets another). Until 2026-12-04 the benchmarks' brokers
    grew their heap from 128 MB, as the development clusters do: at 2,000 partitions (230-280 MB of old
    generation) G1 then marked concurrently for most of a copy, 0.15-0.36 of a core of the target broker."""
    heap = os.environ.get("BENCH_BROKER_HEAP", "1g")
    return LocalCluster(name, base / name, free_port(), free_port(), heap=heap, jvm_options=[f"-Xms{heap}"])


@contextmanager
def local_clusters(prefix: str) -> Iterator[tuple[Path, list[LocalCluster]]]:
    """A work directory with a started source and target (single-node KRaft, :func:`bench_cluster`), stopped on
    exit."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        work = Path(tmp)
        clusters = [bench_cluster(n, work) for n in ("source", "target")]
        try:
            for c in clusters:
                c.start()
            yield work, clusters
        finally:
            for c in clusters:
                c.stop()


def start_mirror_core(src: str, dst: str, topic: str, workers: int, alias: str, workdir: Path,
                      extra: list[str], args: tuple[str, ...] = (), replication_factor: int = 1,
                      ) -> tuple[list[subprocess.Popen[bytes]], list[Path]]:
    config = workdir / f"{alias}.properties"
    config.write_text("\n".join([
        f"clusters = {alias}, target", f"{alias}.bootstrap.servers = {src}", f"target.bootstrap.servers = {dst}",
        f"{alias}->target.enabled = true", f"{alias}->target.topics = {topic}", "emit.heartbeats.enabled = false",
        f"replication.factor = {replication_factor}", *extra]) + "\n")
    procs, logs = [], []
    for w in range(workers):
        path = workdir / f"{alias}-{w}.log"
        log = open(path, "wb")  # noqa: SIM115
        procs.append(subprocess.Popen([sys.executable, "-m", "mirror_core", "run", "--config", str(config),
                                       "--metrics-port", str(free_port()), *args], stdout=log, stderr=subprocess.STDOUT,
                                      cwd=REPO))
        logs.append(path)
    return procs, logs


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
    return measure_backlog(procs, lambda: any("assigned" in f.read_text(errors="replace") for f in logs), dst,
                           f"{alias}.{topic}", expect_target if expect_target is not None else n, label,
                           f"{size}B", size)


def mm2_run(src: str, dst: str, topic: str, n: int, size: int, alias: str, workdir: Path) -> Result:
    from bench.mm2 import start_mm2

    proc = start_mm2(src, dst, alias, topic, workdir)
    watcher = Consumer({"bootstrap.servers": dst, "group.id": "bench-watch-mm2", "log_level": "0"})
    try:
        ready = lambda: end_total(watcher, f"{alias}.{topic}") > 0  # noqa: E731 - MM2 logs no single ready line
        return measure_backlog([proc], ready, dst, f"{alias}.{topic}", n, "MirrorMaker 2 (dedicated, tuned)",
                               f"{size}B", size)
    finally:
        watcher.close()


def offset_map_entries(dst: str, alias: str) -> int:
    """Entries in the flow's offset map (at-least-once: no transaction markers in that topic)."""
    c = Consumer({"bootstrap.servers": dst, "group.id": "bench-map", "log_level": "0"})
    try:
        return int(c.get_watermark_offsets(TopicPartition(f"mirror-core.offset-syncs.{alias}.internal", 0),
                                           timeout=10)[1])
    finally:
        c.close()


def transactional_source(bootstrap: str, topic: str, n: int, per_txn: int) -> None:
    """A gappy source: every transaction's commit marker takes an offset."""
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"bench-{topic}", "linger.ms": 5})
    p.init_transactions(30)
    value = os.urandom(100)
    for start in range(0, n, per_txn):
        p.begin_transaction()
        for i in range(start, min(n, start + per_txn)):
            p.produce(topic, value=value, partition=i % PARTITIONS)
        p.commit_transaction(60)


def markdown(results: list[Result], meta: dict[str, str], maps: dict[str, tuple[int, int]] | None = None) -> str:
    lines = [f"# Replication benchmark ({meta['date']})", "",
             f"Machine: {meta['machine']}; Kafka {meta['kafka']}; mirror_core {meta['mirror_core']}; "
             f"{PARTITIONS} partitions; single-node KRaft clusters on loopback.", ""]
    if not results:  # a run of other parts only (--only)
        return "\n".join(lines[:-1] + _map_lines(maps)) + "\n"
    if meta.get("mm2_settings"):
        lines += [f"MirrorMaker 2: connect-mirror {meta['kafka']}, dedicated mode, {meta['mm2_settings']}.", ""]
    lines += [
             "The raw ceiling of a mirror is the slower of plain produce and plain consume (one client each, ",
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
        alo = next((r for r in results if r.scenario == size and r.system.endswith("at-least-once, 1 process")), None)
        eos = next((r for r in results if r.scenario == size and r.system.endswith("exactly-once, 1 process")), None)
        if alo and eos:
            lines.append(f"\nExactly-once cost, {size}, 1 process: {eos.records_per_s / alo.records_per_s:.2f}x "
                         "the at-least-once throughput.")
    return "\n".join(lines + _map_lines(maps)) + "\n"


def _map_lines(maps: dict[str, tuple[int, int]] | None) -> list[str]:
    if not maps:
        return []
    lines = ["", "| offset map | entries | records | entries per million records |", "|---|---:|---:|---:|"]
    for label, (entries, records) in maps.items():
        lines.append(f"| {label} | {entries:,} | {records:,} | {entries / records * 1e6:,.0f} |")
    return lines


def run_restart(src: str, dst: str, work: Path, args: Any) -> list[dict[str, Any]]:
    from bench.restart import mirror_core_starter, mm2_starter, restart_run
    from bench.scenarios import as_rows

    systems = [("MirrorMaker 2", "mm2rs", mm2_starter(src, dst, "mm2rs"))] if args.mm2 else []
    systems += [("mirror_core static", "ours", mirror_core_starter(src, dst, "ours", static=True)),
                ("mirror_core dynamic", "ourd", mirror_core_starter(src, dst, "ourd", static=False))]
    rows = []
    for label, alias, starter in systems:
        rows += restart_run(label, starter, src, dst, alias, work, args.restart_runs)
    return as_rows(rows)


def describe_place(path: Path) -> str:
    """The file-system type holding ``path`` (the brokers' data), from /proc/mounts: the longest mount
    point that contains it."""
    best, kind = "", "?"
    for line in Path("/proc/mounts").read_text().splitlines():
        _, point, fstype, *_ = line.split()
        if str(path.resolve()).startswith(point.rstrip("/") + "/") and len(point) > len(best):
            best, kind = point, fstype
    return f"{path.parent} ({kind})"


def run_scale_part(src: str, dst: str, work: Path, args: Any) -> None:
    from bench.scale import run_scale, scale_markdown

    load_before = Path("/proc/loadavg").read_text().strip()
    began = time.gmtime()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    def write(data: dict[str, Any]) -> None:
        meta = {"date": time.strftime("%Y-%m-%d %H:%M UTC", began), "load_before": load_before,
                "load_after": Path("/proc/loadavg").read_text().strip(), "broker_dir": describe_place(work),
                "source_linger_ms": str(args.scale_source_linger_ms)}
        stamp = time.strftime("%Y%m%dT%H%M%SZ", began)
        (out / f"scale-{stamp}.json").write_text(json.dumps({"meta": meta, **data}, indent=2))
        place = f"-{Path(args.broker_dir).name}" if args.broker_dir else ""  # a disk run's file stays
        (out / f"scale-{time.strftime('%Y-%m-%d', began)}{place}.md").write_text(scale_markdown(data, meta))

    write(run_scale(src, dst, work, args, write))
def _load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def names(value: str) -> list[str]:
    """A comma-separated command-line list, blanks dropped."""
    return [x.strip() for x in value.split(",") if x.strip()]


def run_wan_part(clusters: list[LocalCluster], work: Path, args: Any) -> list[dict[str, Any]]:
    from bench.wan import PLACEMENTS, run_wan

    placements = names(args.wan_placements)
    if not placements or set(placements) - set(PLACEMENTS):
        raise SystemExit(f"--wan-placements: choose among {', '.join(PLACEMENTS)}")
    ints = [[int(x) for x in v.split(",") if x.strip()] for v in (args.wan_rtts, args.wan_sizes)]
    args.wan_load = _load()
    return run_wan(clusters, work, ints[0], ints[1], placements, args.wan_runs, args.wan_records, 2000,
                   args.seconds, args.mm2, args.wan_bandwidth,
                   names(args.wan_variants) or None, args.latency_runs, args.wan_target_batch_bytes)


def run_scenarios(src: str, dst: str, work: Path, args: Any, parts: set[str]) -> dict[str, Any]:
    from bench.mm2 import start_mm2
    from bench.scenarios import as_rows, failover_run

    def mm2(alias: str) -> Any:
        return lambda topic, wd: [start_mm2(src, dst, alias, topic, wd, {"emit.checkpoints.interval.seconds": "1"})]

    def ours(alias: str, *extra: str) -> Any:
        return lambda topic, wd: start_mirror_core(src, dst, topic, 1, alias, wd,
                                                   ["emit.checkpoints.interval.seconds = 1", *extra])[0]

    out: dict[str, Any] = {}
    if "latency" in parts:
        out["latency"] = as_rows(_latency(src, dst, work, args, mm2, ours))
    if "failover" in parts:
        failover = []
        systems = [("MirrorMaker 2", "mm2fo", mm2("mm2fo"))] if args.mm2 else []
        systems += [("mirror_core", "ourfo", ours("ourfo"))]
        for label, alias, starter in systems:
            failover.append(failover_run(label, starter, src, dst, alias, work, args.groups, 2000))
            print(failover[-1], flush=True)
        out["failover"] = as_rows(failover)
    return out


def _latency(src: str, dst: str, work: Path, args: Any, mm2: Any, ours: Any) -> list[Any]:
    from bench.scenarios import latency_run

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
    return latency


def run_reconcile(src: str, dst: str, work: Path, sizes: list[int], master: str) -> dict[str, Any]:
    """Per size: a fresh topic, replicated by one mirror_core process, then the reconciliation job."""
    from bench.scenarios import as_rows, reconcile_growth, reconcile_run

    rows = []
    for n in sizes:
        alias = f"rec{n}"
        starter = lambda topic, wd, a=alias: start_mirror_core(src, dst, topic, 1, a, wd, [])[0]  # noqa: E731
        rows.append(reconcile_run(starter, work / f"{alias}.properties", src, alias, work, n, 100, master))
        print(rows[-1], flush=True)
    out = as_rows(rows)
    return {"reconcile": out, "reconcile_growth": reconcile_growth(out)}


def scenario_markdown(extra: dict[str, Any]) -> str:
    lines = []
    if extra.get("latency"):
        lines += ["", "## Steady load: end-to-end latency (target consume time - source create time)", "",
                  "| system | rate (records/s) | run | records | p50 ms | p99 ms | max ms | load avg 1/5/15 |",
                  "|---|---:|---:|---:|---:|---:|---:|---|"]
        lines += [f"| {r['system']} | {r['rate']:,} | {r.get('run', 1)} | {r['records']:,} | {r['p50_ms']} | "
                  f"{r['p99_ms']} | {r['max_ms']} | {r.get('load', '')} |" for r in extra["latency"]]
        lines.append("\nThe producer is a separate process (linger.ms=1, acks=all); the consumer polls one record at "
                     "a time and stamps it on arrival. The 'no mirror' row is the floor of this measurement on this "
                     "machine: the same producer and consumer on the source topic. Exactly-once latency includes the "
                     "commit interval (offset.flush.interval.ms = 1 s): read_committed consumers see records once "
                     "their transaction commits.")
    if extra.get("failover"):
        lines += ["", "## Failover accuracy: groups stopped at random positions resume on the target", "",
                  "| system | groups | partitions | duplicates | losses | max duplicates per partition | "
                  "no usable checkpoint |", "|---|---:|---:|---:|---:|---:|---:|"]
        lines += [f"| {r['system']} | {r['groups']} | {r['partitions_checked']} | {r['duplicates']:,} | "
                  f"{r['losses']} | {r['max_duplicates_per_partition']} | {r['missing_checkpoints']} |"
                  for r in extra["failover"]]
    if extra.get("reconcile"):
        rows = extra["reconcile"]
        r0 = rows[0]
        conf = " ".join(f"--conf {k}={v}" for k, v in RECONCILE_SPARK_CONF.items())
        lines += ["", f"## Reconciliation job: records verified per second (Spark {r0['spark']}, {r0['master']})", "",
                  "`spark_jobs/reconcile_checkpoints.py` submitted as the `checkpoint_reconciliation` DAG submits it "
                  f"(`spark-submit --master {r0['master']} --jars <Kafka source> {conf}`), one fresh "
                  f"spark-submit per size, on a topic of {r0['value_bytes']}-byte values and distinct keys, "
                  f"{PARTITIONS} partitions, replicated by one mirror_core process until its lag was 0 (then "
                  "stopped, so only the brokers share the cores with Spark); window: every retained record. "
                  "*Job* time is the job's own (its report's `seconds`: read both topics through Spark's Kafka "
                  "source, hash, map through the offset map, join, classify, check group offsets); *wall* is the "
                  "whole spark-submit, JVM and Spark start-up and shutdown included. Records verified/s = "
                  "records checked / job time. CPU-s: spark-submit and everything it started.", "",
                  "| records | checked | job s | records verified/s | spark-submit wall s | records/s (wall) | "
                  "CPU-s | missing | mismatched | extra | status |",
                  "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
        lines += [f"| {r['records']:,} | {r['checked']:,} | {r['job_s']:.1f} | {r['records_per_s']:,.0f} | "
                  f"{r['wall_s']:.1f} | {r['wall_records_per_s']:,.0f} | {r['cpu_s']:.1f} | {r['missing']} | "
                  f"{r['mismatched']} | {r['extra']} | {r['status']} |" for r in rows]
        for g in extra.get("reconcile_growth") or reconcile_growth(rows):
            if g["job_time_ratio"] is None or g["wall_time_ratio"] is None:
                continue
            why = ("; fixed per-run costs, such as task scheduling, code generation and Kafka metadata, keep it below"
                   if g["job_time_ratio"] < g["records_ratio"] else "")
            lines.append(f"\nGrowth from {g['from_records']:,} to {g['to_records']:,} records "
                         f"(x{g['records_ratio']:g}): job time x{g['job_time_ratio']:.2f}, spark-submit wall time "
                         f"x{g['wall_time_ratio']:.2f} (linear: x{g['records_ratio']:g}{why}).")
    return "\n".join(lines) + ("\n" if lines else "")


def render(path: Path) -> str:
    """Re-render the Markdown table of a results JSON file."""
    data = json.loads(path.read_text())
    results = [Result(**r) for r in data["results"]]
    maps = {k: (v["entries"], v["records"]) for k, v in data.get("offset_map", {}).items()}
    extra = {k: data[k] for k in ("latency", "failover", "reconcile", "reconcile_growth") if k in data}
    return (markdown(results, data["meta"], maps) + scenario_markdown(extra) + restart_markdown(data.get("restart", []))
            + scaleout_markdown(data.get("scaleout", [])))


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--render":
        sys.stdout.write(render(Path(sys.argv[2])))
        return 0
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1_000_000, help="records for the 100-byte scenario")
    parser.add_argument("--scenario", choices=("small", "large", "all"), default="all")
    parser.add_argument("--workers", default="1,2", help="mirror process counts to measure")
    parser.add_argument("--out", default=str(REPO / "bench" / "results"))
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
    parser.add_argument("--wan-records", type=int, default=400_000,
                        help="wan: backlog records of 100 bytes (a quarter of that for larger values)")
    parser.add_argument("--scaleout-runs", type=int, default=3, help="repetitions of the scale-out part")
    parser.add_argument("--scaleout-records", type=int, default=1_000_000, help="backlog of each scale-out run")
    parser.add_argument("--broker-dir", help="where the two brokers keep their data (default: the system's temporary "
                        "directory). /dev/shm leaves the host disk out: on this machine's ext4 a broker's first "
                        "append to each partition after a new topic's first bulk fill costs ~18 ms "
                        "(python -m bench.first_append); the results file is then scale-<date>-<dir name>.md")
    parser.add_argument("--only", help=f"comma-separated parts to run, of {', '.join(PARTS)} "
                        "(default: all but those skipped with --no-scenarios / --no-reconcile)")
    args = parser.parse_args()
    if args.only:
        parts = set(names(args.only))
        if not parts or parts - set(PARTS):
            parser.error(f"--only: choose among {', '.join(PARTS)}")
    else:
        parts = {x for x in PARTS if (x not in ("scenarios", "latency", "failover") or args.scenarios)
                 and (x != "reconcile" or args.reconcile) and x not in ("scale", "wan", "scaleout")}
    if "scenarios" in parts:
        parts |= {"latency", "failover"}
    try:
        reconcile_sizes = [int(x) for x in args.reconcile_sizes.split(",") if x.strip()]
    except ValueError:
        parser.error("--reconcile-sizes: comma-separated record counts")
    if "reconcile" in parts and (not reconcile_sizes or min(reconcile_sizes) < PARTITIONS):
        parser.error(f"--reconcile-sizes: at least {PARTITIONS} records per run")
    scenarios = []  # backlog runs: (value bytes, records)
    if "backlog" in parts and args.scenario in ("small", "all"):
        scenarios.append((100, args.records))
    if "backlog" in parts and args.scenario in ("large", "all"):
        scenarios.append((1024, max(1, args.records // 2)))
    results: list[Result] = []
    maps: dict[str, tuple[int, int]] = {}  # offset-map entries, records replicated
    extra_results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="mirror-bench-", dir=args.broker_dir) as tmp:
        work = Path(tmp)
        clusters = [bench_cluster(n, work) for n in ("source", "target")]
        if "wan" in parts:
            from bench.wan import add_wan_listener

            clusters = [add_wan_listener(c) for c in clusters]
        for c in clusters:
            c.start()
        src, dst = clusters[0].bootstrap, clusters[1].bootstrap
        try:
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
            if parts & {"latency", "failover"}:
                extra_results.update(run_scenarios(src, dst, work, args, parts))
            if "offset-map" in parts:
                # Offset-map size for a gappy source: transactions of 100 records (one marker each).
                gappy, gn = "benchtxn", max(100_000, args.records // 5)
                admin.create_topics([NewTopic(gappy, PARTITIONS, 1)])[gappy].result(30)
                transactional_source(src, gappy, gn, 100)
                mirror_run(src, dst, gappy, gn + gn // 100, 100, 1, "gappy", work, [], expect_target=gn)
                maps["gappy source (transactions of 100 records)"] = (offset_map_entries(dst, "gappy"), gn)
            if "reconcile" in parts:
                extra_results.update(run_reconcile(src, dst, work, reconcile_sizes, args.reconcile_master))
            if "restart" in parts:
                extra_results["restart"] = run_restart(src, dst, work, args)
            if "scale" in parts:
                run_scale_part(src, dst, work, args)
            if "wan" in parts:
                extra_results["wan"] = run_wan_part(clusters, work, args)
            if "scaleout" in parts:  # its own three-node clusters (bench/scaleout.py)
                from bench.scaleout import run_scaleout

                extra_results["scaleout"] = run_scaleout(work, args)
        finally:
            for c in clusters:
                c.stop()
    meta = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "kafka": KAFKA_VERSION,
            "mirror_core": __version__, "machine": f"{platform.machine()}, {os.cpu_count()} cores, "
            f"{platform.python_implementation()} {platform.python_version()}"}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    from bench.mm2 import MM2_TUNING

    meta["mm2_settings"] = ", ".join(f"{k}={v}" for k, v in MM2_TUNING.items())
    (out / f"replication-{stamp}.json").write_text(json.dumps({
        "meta": meta, "results": [asdict(r) for r in results],
        "offset_map": {k: {"entries": e, "records": n} for k, (e, n) in maps.items()}, **extra_results}, indent=2))
    if "wan" in extra_results:
        from bench.wan import wan_markdown

        meta["load"] = f"{args.wan_load}, after: {_load()}"
        if args.wan_target_batch_bytes:
            meta["target_batch_bytes"] = f"{args.wan_target_batch_bytes} (MirrorMaker 2: batch.size and " \
                                         "max.request.size the same)"
        wan_md = wan_markdown(extra_results["wan"], meta)
        (out / f"wan-{stamp}.md").write_text(wan_md)
        print(wan_md)
    text = (markdown(results, meta, maps) + scenario_markdown(extra_results)
            + restart_markdown(extra_results.get("restart", [])) + scaleout_markdown(extra_results.get("scaleout", [])))
    if "scaleout" in parts:
        (out / f"scaleout-{stamp[:8]}.md").write_text(text)
    # A partial run (--only) must not replace the full table; its own file shows what it measured.
    (out / ("latest.md" if not args.only else "latest-partial.md")).write_text(text)
    print(text)
    wrong = [r for r in extra_results.get("reconcile", []) if r["status"] != "ok" or r["checked"] != r["records"]]
    if wrong:  # a clean replication must reconcile with no discrepancy: the results are kept, the run fails
        print(f"reconciliation found discrepancies on a clean replication: {wrong}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
