"""What an idle mirror costs the source broker, and whether the fetch wait moves latency.

Usage: python -m bench.probes.idle_fetch [--partitions 8,2000] [--waits 20,500] [--seconds 30] [--rates 200,2000]

librdkafka has no incremental fetch sessions (KIP-227): every fetch request names every assigned
partition, and a caught-up consumer sends one each ``fetch.wait.max.ms``. For each partition count and
wait: a mirror_core copies a small backlog, then idles; the CPU of the source broker, the target broker
and the mirror over ``--seconds``. Then, per wait, the steady-load latency (bench.latency.latency_run,
8 partitions) at each rate, and with a transactional source (one record per transaction every 50 ms,
read_committed: the commit marker must end the broker's wait). One pair of brokers; waits take turns.
"""

from __future__ import annotations

import argparse
import os
import threading
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

from bench.harness import cpu_seconds, create_topic, local_clusters, start_mirror_core, stop, wait_visible
from bench.latency import latency_run
from bench.scale import STATIC, Cluster, EndWatcher, _wait, drop, plain_source
from bench.wan import ours_starter
from mirror_core.devcluster.local_cluster import LocalCluster


def _wait_key(alias: str, wait: int) -> str:
    return f"{alias}.consumer.fetch.wait.max.ms = {wait}"


def idle_cores(clusters: list[LocalCluster], work: Path, partitions: int, wait: int, seconds: float) -> str:
    src, dst = Cluster(clusters[0].bootstrap), Cluster(clusters[1].bootstrap)
    topic, alias = f"idle{partitions}w{wait}", f"i{partitions}w{wait}"
    src.create(topic, partitions)
    plain_source(src.bootstrap, topic, 10 * partitions, partitions)
    procs, _ = start_mirror_core(src.bootstrap, dst.bootstrap, topic, 1, alias, work,
                                 ["emit.checkpoints.enabled = false", _wait_key(alias, wait)], STATIC)
    try:
        ends = EndWatcher(dst.bootstrap, f"{alias}.{topic}", partitions)
        _wait(lambda: ends() >= 10 * partitions, 600, "the backlog copied")
        time.sleep(10)  # the copy and its commits are over
        pids = [c.pid() or 0 for c in clusters] + [procs[0].pid]
        before, t0 = [cpu_seconds([p]) for p in pids], time.monotonic()
        time.sleep(seconds)
        used = [(cpu_seconds([p]) - b) / (time.monotonic() - t0) for p, b in zip(pids, before, strict=True)]
        return (f"| {partitions:,} | {wait} | {used[0]:.3f} | {used[1]:.3f} | {used[2]:.3f} |")
    finally:
        stop(procs)
        drop(src, dst, topic, f"{alias}.{topic}")


def transactional_latency(src: str, dst: str, work: Path, wait: int, run: int, seconds: float) -> str:
    alias = f"tx{wait}r{run}"
    topic = f"lat{alias}"
    create_topic(src, topic)
    procs = start_mirror_core(src, dst, topic, 1, alias, work, [_wait_key(alias, wait)])[0]
    try:
        p = Producer({"bootstrap.servers": src, "transactional.id": f"idle-fetch-{alias}", "linger.ms": 0})
        p.init_transactions(30)
        p.begin_transaction()
        for q in range(8):
            p.produce(topic, value=b"warmup", partition=q)
        p.commit_transaction(30)
        wait_visible(dst, f"{alias}.{topic}", 8, 180)
        samples: list[float] = []
        done = threading.Event()

        def consume() -> None:
            c = Consumer({"bootstrap.servers": dst, "group.id": f"lat-{alias}", "fetch.wait.max.ms": 5,
                          "enable.auto.commit": False, "isolation.level": "read_committed"})
            c.assign([TopicPartition(f"{alias}.{topic}", q, -1) for q in range(8)])
            while not done.is_set():
                m = c.poll(0.05)
                if m is not None and m.error() is None and m.value() != b"warmup":
                    samples.append(time.time() * 1000 - m.timestamp()[1])
            c.close()

        reader = threading.Thread(target=consume)
        reader.start()
        try:
            time.sleep(2)
            i, end = 0, time.monotonic() + seconds
            while time.monotonic() < end:
                p.begin_transaction()
                p.produce(topic, value=b"x", partition=i % 8)
                p.commit_transaction(30)
                i += 1
                time.sleep(0.05)
            time.sleep(3)
        finally:
            done.set()
            reader.join()
        kept = sorted(samples[len(samples) // 5:])  # the first fifth is warm-up
        if not kept:
            raise RuntimeError(f"{alias}: no record reached the target")
        return (f"| transactional, 1 record per commit every 50 ms | {wait} | {len(kept)} | "
                f"{kept[len(kept) // 2]:.1f} | {kept[int(len(kept) * 0.99)]:.1f} |")
    finally:
        stop(procs)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", default="8,2000")
    parser.add_argument("--waits", default="20,500")
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--rates", default="200,2000")
    parser.add_argument("--runs", type=int, default=2)
    args = parser.parse_args()
    waits = [int(x) for x in args.waits.split(",")]
    with local_clusters("idle-fetch-") as (work, clusters):
        src, dst = clusters[0].bootstrap, clusters[1].bootstrap
        print("| partitions | fetch.wait.max.ms | source broker cores | target broker cores | mirror cores |")
        print("|---|---|---|---|---|", flush=True)
        for partitions in (int(x) for x in args.partitions.split(",") if x):  # '': latency only
            for wait in waits:
                print(idle_cores(clusters, work, partitions, wait, args.seconds), flush=True)
        print(f"\nload {'/'.join(f'{x:.1f}' for x in os.getloadavg())}\n")
        print("| load | fetch.wait.max.ms | records | p50 ms | p99 ms |\n|---|---|---|---|---|", flush=True)
        for run in range(args.runs):
            for wait in waits if run % 2 == 0 else waits[::-1]:  # who goes first alternates
                print(transactional_latency(src, dst, work, wait, run, args.seconds), flush=True)
                for rate in (int(x) for x in args.rates.split(",")):
                    alias = f"lw{wait}r{rate}n{run}"
                    starter = ours_starter(src, dst, alias, [_wait_key(alias, wait)])
                    r = latency_run(f"wait {wait}", starter, src, dst, alias, work, rate, args.seconds, run)
                    print(f"| {rate:,} records/s | {wait} | {r.records} | {r.p50_ms} | {r.p99_ms} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
