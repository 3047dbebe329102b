"""How soon a running mirror obeys an operator's runtime control at 2,000 partitions, and what pausing one topic does
to the others' latency (issue 63's goals: command to effect <= 2 s; the others' p99 within 10 %).

    python -m bench.probes.control_effect [--runs 3] [--topics 20] [--partitions 100] [--rate 4000]

One mirror (``--state-db``, static id) copies ``topics`` x ``partitions`` partitions under a steady load spread over
all of them. Each run, through the state store's API (what the CLI and the DAG call), taking the time at the write:

* pause the first topic: effect = when its partitions' ends on the target last moved (they stop);
* resume it: effect = when they first move again;
* limit it to a tenth of its load's bytes per second: effect = when its copied rate over the last second first
  falls to the limit + 10 %; then unlimit.

Meanwhile a consumer on the target reads the other topics and takes each record's latency (its consume time - its
source create time, which the mirror keeps): the p99 of the 20 s before the pause against the 20 s while paused.
Writes bench/results/control-effect-<UTC time>.json.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer

from bench.harness import REPO, RESULTS, SteadyLoad, TargetEnds, create_topic, local_clusters, stop, utc_stamp
from mirror_core.devcluster.local_cluster import free_port
from mirror_core.state.store import StateStore

FLOW = "src->target"
WINDOW_S = 20.0
WARMUP_S = 60.0


class Latencies:
    """Each record of ``topics`` read on the target: (consume time, latency s), from a thread."""

    def __init__(self, bootstrap: str, topics: list[str]) -> None:
        self.samples: list[tuple[float, float]] = []
        self.stopped = threading.Event()
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"latency-{time.time()}",
                                  "auto.offset.reset": "latest", "enable.auto.commit": False, "log_level": "0",
                                  "fetch.wait.max.ms": 500})  # (a record ends the wait)
        self.consumer.subscribe(topics)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stopped.is_set():
            for m in self.consumer.consume(10000, 0.1):
                if m.error() is None:
                    now = time.time()
                    self.samples.append((now, now - m.timestamp()[1] / 1000))

    def p99(self, start: float, end: float) -> tuple[float, int]:
        lat = sorted(v for t, v in self.samples if start <= t < end)
        return (round(lat[int(0.99 * (len(lat) - 1))] * 1000, 1) if lat else float("nan")), len(lat)

    def close(self) -> None:
        self.stopped.set()
        self.thread.join(10)
        self.consumer.close()


def _watch(ends: TargetEnds, seconds: float) -> list[tuple[float, int]]:
    """(time, total end offset of the watched partitions) every 50 ms for ``seconds``."""
    out = []
    stop_at = time.time() + seconds
    while time.time() < stop_at:
        out.append((time.time(), sum(max(e, 0) for e in ends.now())))
        time.sleep(0.05)
    return out


def stopped_at(series: list[tuple[float, int]], t0: float) -> float:
    """Seconds after ``t0`` of the last advance (the partitions stopped there)."""
    last = t0
    for (_, a), (t, b) in itertools.pairwise(series):
        if b > a:
            last = t
    return round(last - t0, 2)


def moved_at(series: list[tuple[float, int]], t0: float) -> float | None:
    """Seconds after ``t0`` of the first advance."""
    for (_, a), (t, b) in itertools.pairwise(series):
        if b > a:
            return round(t - t0, 2)
    return None


def limited_at(series: list[tuple[float, int]], t0: float, records_per_s: float) -> float | None:
    """Seconds after ``t0`` at which the rate over the last second first fell to ``records_per_s``."""
    for i, (t, total) in enumerate(series):
        back = next((j for j in range(i, -1, -1) if t - series[j][0] >= 1.0), None)
        if back is not None and series[back][0] >= t0 and (total - series[back][1]) / (t - series[back][0]) \
                <= records_per_s:
            return round(t - t0, 2)
    return None


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--topics", type=int, default=20)
    parser.add_argument("--partitions", type=int, default=100)
    parser.add_argument("--rate", type=int, default=4000, help="records/s of 100 B over every partition")
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args()
    topics = [f"ce{i:02d}" for i in range(args.topics)]
    hot = topics[0]
    hot_rate = args.rate / args.topics  # records/s of the paused and limited topic
    runs: list[dict[str, Any]] = []
    with local_clusters("control-effect-") as (work, clusters):
        src, dst = clusters[0].bootstrap, clusters[1].bootstrap
        for t in topics:
            create_topic(src, t, args.partitions)
        db = f"sqlite:///{work / 'state.db'}"
        store = StateStore(db)
        store.migrate()
        config = work / "mm2.properties"
        config.write_text("\n".join([
            "clusters = src, target", f"src.bootstrap.servers = {src}", f"target.bootstrap.servers = {dst}",
            f"{FLOW}.enabled = true", f"{FLOW}.topics = ce.*", "emit.heartbeats.enabled = false",
            "emit.checkpoints.enabled = false", "replication.factor = 1",
            "refresh.topics.interval.seconds = 5"]) + "\n")  # (a topic the broker's metadata shows late is found)
        log = open(work / "mirror.log", "ab")  # noqa: SIM115 - owned by the child
        mirror = subprocess.Popen([sys.executable, "-m", "mirror_core", "run", "--config", str(config),
                                   "--metrics-port", str(free_port()), "--state-db", db, "--instance-id", "ce-0"],
                                  stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
        keys = [(t, p) for t in topics for p in range(args.partitions)]
        ends = TargetEnds(dst, f"src.{hot}", args.partitions)
        try:
            with SteadyLoad(src, hot, rate=args.rate, keys=keys):
                everything = TargetEnds(dst, "", keys=[(f"src.{t}", p) for t, p in keys])
                everything.wait_all_past([0] * len(keys), 600)
                time.sleep(WARMUP_S)  # what the load wrote while the partitions were being assigned is caught up
                lat = Latencies(dst, [f"src.{t}" for t in topics[1:]])
                for run in range(args.runs):
                    time.sleep(WINDOW_S)  # the others' latency before the pause
                    before = lat.p99(time.time() - WINDOW_S, time.time())
                    t0 = time.time()
                    store.pause_topic(FLOW, hot, "bench", f"control effect run {run}")
                    paused = _watch(ends, WINDOW_S)
                    during = lat.p99(t0 + 5, t0 + WINDOW_S)  # (after the pause took effect)
                    t1 = time.time()
                    store.resume_topic(FLOW, hot, "bench", f"control effect run {run}")
                    resumed = _watch(ends, 10)
                    limit_records = hot_rate / 10
                    t2 = time.time()
                    # (the records path counts a record's value: 100 B)
                    store.limit_bandwidth(FLOW, "bench", f"control effect run {run}", int(limit_records * 100),
                                          topic=hot)
                    limited = _watch(ends, 15)
                    store.unlimit_bandwidth(FLOW, "bench", f"control effect run {run}", topic=hot)
                    row = {"run": run, "pause_effect_s": stopped_at(paused, t0),
                           "resume_effect_s": moved_at(resumed, t1),
                           "limit_effect_s": limited_at(limited, t2, limit_records * 1.1),
                           "others_p99_ms_before": before[0], "others_p99_ms_paused": during[0],
                           "latency_samples": [before[1], during[1]]}
                    runs.append(row)
                    print(json.dumps(row), flush=True)
                    time.sleep(10)  # caught up again
                lat.close()
        finally:
            stop([mirror])
    summary = {key: {"median": statistics.median(vals), "min": min(vals), "max": max(vals)}
               for key in ("pause_effect_s", "resume_effect_s", "limit_effect_s", "others_p99_ms_before",
                           "others_p99_ms_paused")
               if (vals := [r[key] for r in runs if r[key] is not None])}
    print(json.dumps(summary, indent=1))
    out = Path(args.out) / f"control-effect-{utc_stamp()}.json"
    out.write_text(json.dumps({"partitions": args.topics * args.partitions, "rate": args.rate, "runs": runs,
                               "summary": summary}, indent=1) + "\n")
    print(out)


if __name__ == "__main__":
    main()
