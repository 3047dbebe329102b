"""How fast one Python consumer drains a backlog, by librdkafka's ``fetch.queue.backoff.ms``.

Usage: python -m bench.consume_backoff [--records N] [--rounds R] [--values 1000,100,20,5,0]

One broker, one backlog of 100-byte records on 8 partitions, read from the start by a consumer with
mirror_core's source-consumer settings (read_committed) and the mirror's read pattern (take what the
consumer holds, wait briefly only when it holds nothing), once per value, values taking turns round
after round. librdkafka postpones a partition's next fetch by ``fetch.queue.backoff.ms`` whenever its
local queue holds more than ``queued.min.messages``: under a backlog that is always, and the 1,000 ms
default left the consumer waiting on its own prefetch.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

import bench.run as br
from mirror_core.config.client_defaults import CONSUMER_DEFAULTS, CONSUMER_ENFORCED
from mirror_core.replication.consuming import consume_ready


def drain(bootstrap: str, topic: str, records: int, backoff_ms: str) -> tuple[float, float]:
    """(records/s, CPU-s per million records) of reading ``records`` from the start."""
    conf = {**CONSUMER_DEFAULTS, **CONSUMER_ENFORCED, "bootstrap.servers": bootstrap,
            "group.id": f"drain-{time.time()}", "fetch.queue.backoff.ms": backoff_ms}
    c = Consumer(conf)
    c.assign([TopicPartition(topic, p, 0) for p in range(br.PARTITIONS)])
    got = 0
    cpu0, t0 = br.cpu_seconds([os.getpid()]), time.perf_counter()
    while got < records:
        got += len(consume_ready(c, 10_000))  # the replication loop's own read
    secs = time.perf_counter() - t0
    cpu = br.cpu_seconds([os.getpid()]) - cpu0
    c.close()
    return records / secs, cpu / records * 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--values", default="1000,100,20,5,0", help="fetch.queue.backoff.ms values")
    args = parser.parse_args()
    values = args.values.split(",")
    rates: dict[str, list[tuple[float, float]]] = {v: [] for v in values}
    with tempfile.TemporaryDirectory(prefix="drain-") as tmp:
        cluster = br.bench_cluster("source", Path(tmp))
        cluster.start()
        try:
            admin = AdminClient({"bootstrap.servers": cluster.bootstrap})  # kept until its future resolves
            admin.create_topics([NewTopic("drain", br.PARTITIONS, 1)])["drain"].result(30)
            br.raw_produce(cluster.bootstrap, "drain", args.records, 100)
            for rnd in range(args.rounds):
                for v in values:
                    rate, cpu = drain(cluster.bootstrap, "drain", args.records, v)
                    rates[v].append((rate, cpu))
                    print(f"round {rnd + 1}: fetch.queue.backoff.ms={v}: {rate:,.0f} records/s, "
                          f"{cpu:.2f} CPU-s per M", flush=True)
        finally:
            cluster.stop()
    print(f"\n{args.records:,} x 100 B, 8 partitions, {args.rounds} rounds; median (min-max)")
    print("| fetch.queue.backoff.ms | records/s | CPU-s per M records |\n|---:|---:|---:|")
    for v, runs in rates.items():
        r = [x for x, _ in runs]
        print(f"| {v} | {statistics.median(r):,.0f} ({min(r):,.0f}-{max(r):,.0f}) | "
              f"{statistics.median(c for _, c in runs):.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
