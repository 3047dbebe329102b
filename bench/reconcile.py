"""Part ``reconcile`` of ``make bench``: the throughput of the reconciliation job
(``spark_jobs/reconcile_checkpoints.py``, submitted as the ``checkpoint_reconciliation`` DAG submits it) on a flow
mirror_core replicated, at each size of ``--reconcile-sizes``, and how its time grows with the records checked."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from bench.harness import PARTITIONS, REPO, Starter, as_rows, create_topic, start_mirror_core, stop


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


def run_part(src: str, dst: str, work: Path, sizes: list[int], master: str) -> dict[str, Any]:
    """Per size: a fresh topic, replicated by one mirror_core process, then the reconciliation job."""
    rows = []
    for n in sizes:
        alias = f"rec{n}"
        starter = lambda topic, wd, a=alias: start_mirror_core(src, dst, topic, 1, a, wd, [])[0]  # noqa: E731
        rows.append(reconcile_run(starter, work / f"{alias}.properties", src, alias, work, n, 100, master))
        print(rows[-1], flush=True)
    out = as_rows(rows)
    return {"reconcile": out, "reconcile_growth": reconcile_growth(out)}


def markdown_lines(rows: list[dict[str, Any]], growth: list[dict[str, Any]] | None = None) -> list[str]:
    """The reconciliation-job table and its growth (computed from ``rows`` when not given)."""
    lines: list[str] = []
    if not rows:
        return lines
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
    for g in growth or reconcile_growth(rows):
        if g["job_time_ratio"] is None or g["wall_time_ratio"] is None:
            continue
        why = ("; fixed per-run costs, such as task scheduling, code generation and Kafka metadata, keep it below"
               if g["job_time_ratio"] < g["records_ratio"] else "")
        lines.append(f"\nGrowth from {g['from_records']:,} to {g['to_records']:,} records "
                     f"(x{g['records_ratio']:g}): job time x{g['job_time_ratio']:.2f}, spark-submit wall time "
                     f"x{g['wall_time_ratio']:.2f} (linear: x{g['records_ratio']:g}{why}).")
    return lines
