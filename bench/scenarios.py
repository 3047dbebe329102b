"""Benchmark scenarios beyond backlog throughput: steady-load latency and failover accuracy,
run identically against MirrorMaker 2 and mirror_core on the same brokers; and the throughput of the
reconciliation job (``spark_jobs/reconcile_checkpoints.py``) on a flow mirror_core replicated."""

from __future__ import annotations

import json
import os
import random
import resource
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from mirror_core.stores.records import decode_checkpoint_key, decode_checkpoint_value

REPO = Path(__file__).resolve().parents[1]

PARTITIONS = 8
WARMUP_S = 5.0
Starter = Callable[[str, Path], list[subprocess.Popen[bytes]]]  # (topic, workdir) -> processes

PACED_PRODUCER = """
import sys, time
from confluent_kafka import Producer
bootstrap, topic, rate, seconds = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1, "acks": "all"})
value = b"x" * 100
start = time.monotonic(); sent = 0
while time.monotonic() - start < seconds:
    due = int((time.monotonic() - start) * rate)
    while sent < due:
        try:
            p.produce(topic, value=value, partition=sent % 8)
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


@dataclass
class FailoverResult:
    system: str
    groups: int
    partitions_checked: int
    duplicates: int
    losses: int
    max_duplicates_per_partition: int
    missing_checkpoints: int


def create_topic(bootstrap: str, topic: str, partitions: int = PARTITIONS) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # keep a reference: the future dies with it
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)


def stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        p.terminate()
    for p in procs:
        try:
            p.wait(60)
        except subprocess.TimeoutExpired:
            p.kill()


def _wait_visible(dst: str, remote: str, minimum: int, timeout: float) -> None:
    c = Consumer({"bootstrap.servers": dst, "group.id": "bench-wait", "log_level": "0"})
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            total = 0
            try:
                for p in range(PARTITIONS):
                    total += c.get_watermark_offsets(TopicPartition(remote, p), timeout=5)[1]
            except Exception:
                total = 0
            if total >= minimum:
                return
            time.sleep(0.2)
        raise RuntimeError(f"{remote}: fewer than {minimum} records after {timeout:.0f}s")
    finally:
        c.close()


def latency_run(system: str, start: Starter | None, src: str, dst: str, alias: str, workdir: Path, rate: int,
                seconds: float, run: int = 1, warmup_s: float = WARMUP_S) -> LatencyResult:
    """Steady load at ``rate`` records/s; latency = target consume time - source record create time.

    ``start=None`` measures the floor: the same producer and consumer on the source topic itself,
    no mirror in between.
    """
    topic = f"lat{alias}"
    load = "/".join(f"{x:.1f}" for x in os.getloadavg())
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
        _wait_visible(dst, remote, PARTITIONS, 180)  # the mirror is running and caught up
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


def _read(bootstrap: str, topic: str) -> dict[int, list[tuple[int, int]]]:
    """partition -> [(offset, sequence number)] of a topic whose values are b'seq-<n>'."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-read", "enable.auto.commit": False,
                  "isolation.level": "read_committed", "log_level": "0"})
    ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(PARTITIONS)}
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    out: dict[int, list[tuple[int, int]]] = {p: [] for p in range(PARTITIONS)}
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and any(
            c.position([TopicPartition(topic, p)])[0].offset < e for p, e in ends.items() if e > 0):
        for m in c.consume(10000, 0.5):
            if m.error() is None and m.value() and m.value().startswith(b"seq-"):
                out[m.partition()].append((m.offset(), int(m.value()[4:])))
    c.close()
    return out


def failover_run(system: str, start: Starter, src: str, dst: str, alias: str, workdir: Path, groups: int,
                 per_partition: int, seed: int = 7) -> FailoverResult:
    """Groups stopped at random positions fail over with the system's checkpoints; count what they
    would read twice (duplicates) or never (losses)."""
    topic = f"fo{alias}"
    create_topic(src, topic)
    p = Producer({"bootstrap.servers": src, "linger.ms": 5})
    for i in range(per_partition * PARTITIONS):
        p.produce(topic, value=b"seq-%d" % i, partition=i % PARTITIONS)
    p.flush(60)
    remote = f"{alias}.{topic}"
    procs = start(topic, workdir)
    try:
        _wait_visible(dst, remote, per_partition * PARTITIONS, 300)
        rng = random.Random(seed)
        committed: dict[tuple[str, int], int] = {}
        for g in range(groups):
            group = f"app-{alias}-{g}"
            offsets = {part: rng.randrange(0, per_partition + 1) for part in range(PARTITIONS)}
            c = Consumer({"bootstrap.servers": src, "group.id": group, "enable.auto.commit": False})
            c.commit(offsets=[TopicPartition(topic, part, o) for part, o in offsets.items()], asynchronous=False)
            c.close()
            committed.update({(group, part): o for part, o in offsets.items()})
        checkpoints = _await_checkpoints(dst, f"{alias}.checkpoints.internal", remote, committed, 120)
    finally:
        stop(procs)
    source, target = _read(src, topic), _read(dst, remote)
    dups = losses = worst = missing = 0
    for (group, part), c_off in committed.items():
        consumed = {seq for off, seq in source[part] if off < c_off}
        remaining = {seq for off, seq in source[part] if off >= c_off}
        cp = checkpoints.get((group, part))
        if cp is None or cp[0] != c_off:
            missing += 1
            resume_at = 0  # no usable checkpoint: auto.offset.reset=earliest on the target
        else:
            resume_at = cp[1]
        resumed = [seq for off, seq in target[part] if off >= resume_at]
        d = sum(1 for seq in resumed if seq in consumed)
        lost = len(remaining - set(resumed))
        dups, losses, worst = dups + d, losses + lost, max(worst, d)
    return FailoverResult(system, groups, len(committed), dups, losses, worst, missing)


def _await_checkpoints(dst: str, topic: str, remote: str, committed: dict[tuple[str, int], int],
                       timeout: float) -> dict[tuple[str, int], tuple[int, int]]:
    """Latest checkpoint per (group, partition) once every committed position has one (or timeout)."""
    latest: dict[tuple[str, int], tuple[int, int]] = {}
    c = Consumer({"bootstrap.servers": dst, "group.id": "bench-cp", "enable.auto.commit": False, "log_level": "0"})
    deadline = time.monotonic() + timeout
    assigned = False
    try:
        while time.monotonic() < deadline:
            if not assigned:
                try:
                    c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
                    assigned = True
                except Exception:
                    time.sleep(1)
                    continue
            for m in c.consume(10000, 0.5):
                if m.error() is not None or m.key() is None:
                    continue
                group, t, part = decode_checkpoint_key(m.key())
                if t == remote:
                    up, down, _ = decode_checkpoint_value(m.value())
                    latest[(group, part)] = (up, down)
            if all(latest.get(k, (None,))[0] == v for k, v in committed.items()):
                break
    finally:
        c.close()
    return latest


@dataclass
class ReconcileResult:
    records: int  # source records replicated and in the job's window
    value_bytes: int
    master: str
    spark: str
    checked: int  # records the job verified (report summary.checked)
    job_s: float  # the job's own time (report summary.seconds): read, hash, join, classify, check groups
    wall_s: float  # the whole spark-submit: JVM and Spark start-up and shutdown included
    records_per_s: float  # checked / job_s
    wall_records_per_s: float  # checked / wall_s
    cpu_s: float  # CPU seconds of spark-submit and everything it started (JVM, Python driver, workers)
    missing: int
    mismatched: int
    extra: int
    status: str


# As the checkpoint_reconciliation DAG submits the job (dags/checkpoint_reconciliation.py SPARK_CONF).
RECONCILE_SPARK_CONF = {"spark.sql.shuffle.partitions": "8", "spark.ui.enabled": "false"}


def produce_distinct(bootstrap: str, topic: str, n: int, size: int) -> None:
    """``n`` records round-robin over the partitions, every value distinct (a sequence number + filler)."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1_048_576, "acks": "all",
                  "enable.idempotence": True, "queue.buffering.max.messages": 2_000_000,
                  "queue.buffering.max.kbytes": 2_097_151, "batch.num.messages": 100_000})
    filler = os.urandom(max(0, size - 12))
    for i in range(n):
        while True:
            try:
                p.produce(topic, value=b"%012d" % i + filler, key=b"%d" % i, partition=i % PARTITIONS)
                break
            except BufferError:
                p.poll(0.01)
    if p.flush(300):
        raise RuntimeError(f"{topic}: records left unsent")


def _wait_caught_up(config: Any, flow: Any, n: int, timeout: float) -> None:
    """Until ``mirror-core status`` shows lag 0 on a source holding ``n`` records."""
    from mirror_core.status import flow_status

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        st = flow_status(config, flow)
        if st.partitions and st.total_lag == 0 and sum(p.source_end or 0 for p in st.partitions) >= n:
            return
        time.sleep(1)
    raise RuntimeError(f"{flow.name}: lag not 0 after {timeout:.0f}s")


def reconcile_run(start: Starter, config_path: Path, src: str, alias: str, workdir: Path, n: int, size: int,
                  master: str = "local[2]") -> ReconcileResult:
    """``n`` records replicated by mirror_core (``start``, whose config is ``config_path``) until the lag is
    0, the mirror stopped, then the reconciliation job over every retained record, as the DAG submits it."""
    import pyspark

    from mirror_core.config.loader import load_config
    from mirror_core.devcluster.spark_packages import jars_argument
    from mirror_core.reconciliation import JOB, build_plan, write_plan

    topic = f"bench{alias}"
    create_topic(src, topic)
    produce_distinct(src, topic, n, size)
    procs = start(topic, workdir)
    try:
        config = load_config(config_path, validate_clients=False)
        flow = config.flow(f"{alias}->target")
        _wait_caught_up(config, flow, n, 1800)
    finally:
        stop(procs)  # nothing but the brokers competes with the job for the 2 cores
    plan = build_plan(config, flow, None, window="all_retained")
    window = sum(p["end"] - p["start"] for p in plan["partitions"])
    if window != n:
        raise RuntimeError(f"{flow.name}: the plan covers {window} source records, expected {n}")
    run_dir = workdir / f"reconcile-{alias}"
    plan_path, report_path = write_plan(plan, run_dir / "plan.json"), run_dir / "report.json"
    cmd = [str(Path(sys.executable).parent / "spark-submit"), "--master", master, "--jars", jars_argument(),
           *(a for k, v in RECONCILE_SPARK_CONF.items() for a in ("--conf", f"{k}={v}")),
           str(JOB), "--plan", str(plan_path), "--report", str(report_path)]
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    log = run_dir / "spark-submit.log"
    with open(log, "wb") as out:
        cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        rc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=REPO, timeout=7200,
                            check=False).returncode
        wall = time.perf_counter() - t0
        cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if rc != 0 or not report_path.exists():
        raise RuntimeError(f"spark-submit exited {rc}:\n{log.read_text(errors='replace')[-3000:]}")
    s = json.loads(report_path.read_text())["summary"]
    job_s = float(s["seconds"])
    return ReconcileResult(n, size, master, str(pyspark.__version__), int(s["checked"]), round(job_s, 2),
                           round(wall, 2), round(s["checked"] / job_s) if job_s else 0.0,
                           round(s["checked"] / wall), round(cpu1.ru_utime + cpu1.ru_stime - cpu0.ru_utime
                                                             - cpu0.ru_stime, 1),
                           int(s["missing_count"]), int(s["mismatched_count"]), int(s["extra_count"]),
                           str(s["status"]))


def reconcile_growth(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each larger run against the smallest: how job and wall time grow with the records checked."""
    if len(rows) < 2:
        return []
    base = min(rows, key=lambda r: r["records"])
    return [{"from_records": base["records"], "to_records": r["records"],
             "records_ratio": round(r["records"] / base["records"], 2),
             "job_time_ratio": round(r["job_s"] / base["job_s"], 2) if base["job_s"] else None,
             "wall_time_ratio": round(r["wall_s"] / base["wall_s"], 2) if base["wall_s"] else None}
            for r in sorted(rows, key=lambda r: r["records"]) if r["records"] > base["records"]]


def as_rows(items: list[Any]) -> list[dict[str, Any]]:
    from dataclasses import asdict

    return [asdict(i) for i in items]
