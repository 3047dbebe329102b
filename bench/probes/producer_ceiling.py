"""The ceiling a bare librdkafka producer sets at N partitions, with no mirror: mirror_core's own producer
settings, the same runs the mirror produces (a run of consecutive records to one partition, then the next
partition), to a fresh single-node target cluster.

    TMPDIR=/dev/shm python -m bench.probes.producer_ceiling <partitions> [records] [run]

Prints records/s, the CPU of this process's threads and of the target broker (cores), and librdkafka's own
counts (broker-thread wake-ups, produce requests). Compare 8 with 2,000 partitions: same runs, same requests.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

import bench.harness as harness
from bench.scale import Cluster
from mirror_core.config.client_defaults import PRODUCER_DEFAULTS

TOPIC = "ceiling"


def thread_ticks(pid: int | str = "self") -> dict[tuple[str, str], int]:
    """CPU clock ticks per thread of a process, keyed by (thread id, name with digits folded)."""
    ticks = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
        except OSError:  # the thread ended meanwhile
            continue
        name = re.sub(r"\d+", "N", stat[stat.index("(") + 1:stat.rindex(")")])
        fields = stat[stat.rindex(")") + 2:].split()
        ticks[(tid, name)] = int(fields[11]) + int(fields[12])
    return ticks


def main(partitions: int, records: int = 5_000_000, run: int = 3_400) -> None:
    stats: list[dict[str, Any]] = []
    with harness.local_clusters("ceiling-") as (_, clusters):
        target = Cluster(clusters[1].bootstrap)
        target.create(TOPIC, partitions)
        broker = [clusters[1].pid() or 0]
        producer = Producer({**PRODUCER_DEFAULTS, "bootstrap.servers": clusters[1].bootstrap, "acks": "all",
                             "enable.idempotence": True, "statistics.interval.ms": 1000,
                             "stats_cb": lambda s: stats.append(json.loads(s))})
        value = os.urandom(100)
        producer.poll(1)
        ticks, broker_cpu = thread_ticks(), harness.cpu_seconds(broker)
        start, sent, partition = time.monotonic(), 0, 0
        while sent < records:
            for _ in range(run):
                while True:
                    try:
                        producer.produce(TOPIC, value, None, partition)
                        break
                    except BufferError:
                        producer.poll(0.01)
            sent, partition = sent + run, (partition + 1) % partitions
            producer.poll(0)
        producer.flush(120)
        took = time.monotonic() - start
        after, broker_used = thread_ticks(), harness.cpu_seconds(broker) - broker_cpu
        producer.poll(1.5)  # one more statistics callback, after the flush
    threads: dict[str, float] = {}
    for key, t in after.items():
        threads[key[1]] = threads.get(key[1], 0.0) + (t - ticks.get(key, 0)) / harness.CLK_TCK / took
    brokers = [b for b in stats[-1]["brokers"].values() if b["nodeid"] >= 0]
    print({"partitions": partitions, "run": run, "records_per_s": round(sent / took),
           "threads_cores": {k: round(v, 2) for k, v in threads.items() if v >= 0.01},
           "target_broker_cores": round(broker_used / took, 2),
           "wakeups_per_s": round(sum(b["wakeups"] for b in brokers) / took),
           "produce_requests": sum(b["req"].get("Produce", 0) for b in brokers)})


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(*(int(a) for a in sys.argv[1:4]))
