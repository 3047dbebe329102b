"""Soak: a bounded load (default 10 minutes) with random mirror SIGKILLs and broker restarts, then a
record-by-record check of the target against the sequence-numbered source.

``make soak`` (``SOAK_ARGS="--minutes 30 --eos"`` to change it). Results: bench/results/soak-latest.json
and .md. At-least-once: zero records lost (duplicates are counted); ``--eos``: zero lost, zero duplicated.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from bench.harness import REPO, start_mirror_core, stop
from mirror_core.devcluster.local_cluster import LocalCluster, free_port

TOPIC, PARTITIONS = "soak", 6


class Load(threading.Thread):
    """Sequence-numbered records at a fixed rate; keeps going through broker restarts."""

    def __init__(self, bootstrap: str, rate: int) -> None:
        super().__init__(daemon=True)
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True,
                                  "message.timeout.ms": 600000, "log_level": 3})
        self.rate, self.sent, self.halt = rate, 0, threading.Event()

    def run(self) -> None:
        while not self.halt.is_set():
            for _ in range(self.rate // 10):
                while True:
                    try:
                        self.producer.produce(TOPIC, value=b"seq-%d" % self.sent, partition=self.sent % PARTITIONS)
                        break
                    except BufferError:
                        self.producer.poll(0.1)
                self.sent += 1
            self.producer.poll(0)
            time.sleep(0.1)
        if self.producer.flush(120) != 0:
            raise RuntimeError("soak producer could not deliver everything")


def read(bootstrap: str, topic: str) -> dict[int, list[int]]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"soak-check-{time.time()}", "log_level": 3,
                  "enable.auto.commit": False, "isolation.level": "read_committed"})
    ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in range(PARTITIONS)}
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    out: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        for m in c.consume(10000, 1.0):
            if m.error() is None and m.offset() < ends[m.partition()]:
                out[m.partition()].append(int(m.value().split(b"-")[1]))
        if all(c.position([TopicPartition(topic, p)])[0].offset >= ends[p] for p in ends if ends[p] > 0):
            break
    c.close()
    return out


def verify(src: dict[int, list[int]], dst: dict[int, list[int]]) -> dict[str, int]:
    lost = dups = reordered = 0
    for p, expected in src.items():
        got = dst.get(p, [])
        lost += len(set(expected) - set(got))
        first = list(dict.fromkeys(got))
        dups += len(got) - len(first)
        seen = set(first)
        reordered += int(first != [x for x in expected if x in seen])
    return {"records": sum(len(v) for v in src.values()), "lost": lost, "duplicates": dups,
            "partitions_out_of_order": reordered}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--minutes", type=float, default=10)
    parser.add_argument("--rate", type=int, default=2000, help="records/s")
    parser.add_argument("--workers", type=int, default=2, help="mirror processes sharing the work")
    parser.add_argument("--eos", action="store_true", help="exactly-once mode (then duplicates must be 0)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", default=str(REPO / "bench" / "results"))
    args = parser.parse_args()
    rnd = random.Random(args.seed)
    events: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="mirror-soak-") as tmp:
        work = Path(tmp)
        clusters = {n: LocalCluster(n, work / n, free_port(), free_port()) for n in ("source", "target")}
        for c in clusters.values():
            c.start()
        src, dst = clusters["source"].bootstrap, clusters["target"].bootstrap
        admin = AdminClient({"bootstrap.servers": src})  # keep a reference while the future is pending
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(30)
        extra = ["exactly.once.enabled = true", "exactly.once.slots = 4"] if args.eos else []
        procs, _ = start_mirror_core(src, dst, TOPIC, args.workers, "source", work, extra)
        load = Load(src, args.rate)
        load.start()
        started = time.monotonic()
        end = started + args.minutes * 60
        try:
            while (now := time.monotonic()) < end:
                time.sleep(min(rnd.uniform(15, 40), max(0.0, end - now)))
                if time.monotonic() >= end:
                    break
                at = round(time.monotonic() - started, 1)
                if rnd.random() < 0.7:
                    i = rnd.randrange(len(procs))
                    procs[i].kill()
                    procs[i].wait(10)
                    new, _ = start_mirror_core(src, dst, TOPIC, 1, "source", work, extra)
                    procs[i] = new[0]
                    events.append({"at_s": at, "event": f"SIGKILL mirror worker {i}"})
                else:
                    name = rnd.choice(list(clusters))
                    clusters[name].stop()
                    time.sleep(rnd.uniform(2, 6))
                    clusters[name].start()
                    events.append({"at_s": at, "event": f"restart {name} broker"})
                print(f"[{at:7.1f}s] {events[-1]['event']}; produced {load.sent}", flush=True)
        finally:
            load.halt.set()
            load.join(180)
        # Catch up: the target must reach the source's record count (at-least-once may exceed it).
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            s, d = read(src, TOPIC), read(dst, f"source.{TOPIC}")
            result = verify(s, d)
            if result["lost"] == 0:
                break
            time.sleep(5)
        stop(procs)
        for c in clusters.values():
            c.stop()
    ok = result["lost"] == 0 and result["partitions_out_of_order"] == 0 and (not args.eos or result["duplicates"] == 0)
    report = {"minutes": args.minutes, "rate": args.rate, "workers": args.workers, "mode": "eos" if args.eos
              else "at-least-once", "events": events, **result, "ok": ok}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "soak-latest.json").write_text(json.dumps(report, indent=2) + "\n")
    kills = sum("SIGKILL" in e["event"] for e in events)
    (out / "soak-latest.md").write_text(
        f"# Soak ({report['mode']}, {args.workers} workers, {args.rate} records/s, {args.minutes:g} min)\n\n"
        f"| records | mirror SIGKILLs | broker restarts | lost | duplicates | out-of-order partitions | verdict |\n"
        f"|---|---|---|---|---|---|---|\n"
        f"| {result['records']} | {kills} | {len(events) - kills} | {result['lost']} | {result['duplicates']} | "
        f"{result['partitions_out_of_order']} | {'PASS' if ok else 'FAIL'} |\n")
    print(json.dumps(report, indent=2))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
