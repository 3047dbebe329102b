"""What one bare librdkafka producer does over a WAN, with no mirror: the floor under mirror_core's
remote-produce latency and the CPU price of several producers.

    python -m bench.probes.wan_producer_floor [rtt_ms] [rate] [seconds]

One target cluster behind toxiproxy (RTT/2 each way, 1 % jitter, as ``--only wan``); a paced load of
100-byte records over 8 partitions, as the steady-load scenario. Latency is produce() to delivery report
(the acknowledgement: the record was on the target's log about RTT/2 earlier); CPU is this process's,
which is only the producers' threads plus the pacing loop.
"""

from __future__ import annotations

import resource
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import KafkaError, Message, Producer

from bench.harness import bench_cluster, create_topic
from bench.latency import WARMUP_S
from bench.wan import Link, add_wan_listener
from mirror_core.devcluster.local_cluster import free_port
from mirror_core.devcluster.toxiproxy import ToxiproxyServer

PARTITIONS = 8


@dataclass(frozen=True)
class Variant:
    label: str
    producers: int
    partitions: int = PARTITIONS
    idempotent: bool = True


VARIANTS = (
    Variant("1 producer, 8 partitions (mirror_core's default)", 1),
    Variant("1 producer, 4 partitions", 1, partitions=4),
    Variant("2 producers, 4 partitions each", 2),
    Variant("4 producers, 2 partitions each", 4),
    Variant("2 producers, idempotence off", 2, idempotent=False),
)


@dataclass(frozen=True)
class FloorResult:
    label: str
    records: int
    p50_ms: float
    p99_ms: float
    max_ms: float
    cpu_cores: float


def run_variant(bootstrap: str, topic: str, v: Variant, rate: int, seconds: float) -> FloorResult:
    conf = {"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": v.idempotent,
            "linger.ms": 10}  # mirror_core's default linger
    producers = [Producer(conf) for _ in range(v.producers)]
    for p in producers:
        p.list_topics(topic, timeout=10)
    samples: list[tuple[float, float]] = []  # (seconds into the load, ack latency ms)
    start = time.monotonic()

    def on_delivery(t: float) -> object:
        def cb(err: KafkaError | None, msg: Message) -> None:
            if err is None:
                samples.append((t - start, (time.monotonic() - t) * 1000))
        return cb

    r0, sent = resource.getrusage(resource.RUSAGE_SELF), 0
    while time.monotonic() - start < seconds + WARMUP_S:
        while sent < int((time.monotonic() - start) * rate):
            part = sent % v.partitions
            producers[part % v.producers].produce(topic, b"x" * 100, partition=part,
                                                   on_delivery=on_delivery(time.monotonic()))
            sent += 1
        for p in producers:
            p.poll(0)
        time.sleep(0.001)
    wall = time.monotonic() - start
    for p in producers:
        p.flush(60)
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    lat = sorted(ms for t, ms in samples if t >= WARMUP_S)
    q = statistics.quantiles(lat, n=100)
    cpu = (r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime) / wall
    return FloorResult(v.label, len(lat), round(q[49], 1), round(q[98], 1), round(lat[-1], 1), round(cpu, 2))


def main(rtt_ms: int = 80, rate: int = 2000, seconds: float = 25.0) -> None:
    with tempfile.TemporaryDirectory(prefix="mirror-floor-") as tmp:
        work = Path(tmp)
        cluster = add_wan_listener(bench_cluster("target", work))
        cluster.start()
        server = ToxiproxyServer(work / "toxiproxy", free_port())
        try:
            link = Link(server.start(), [cluster])
            link.set_rtt(rtt_ms)
            print(f"| producers (RTT {rtt_ms} ms, {rate:,} records/s) | acks | ack p50 ms | ack p99 ms | max ms "
                  "| CPU (cores) |\n|---|---:|---:|---:|---:|---:|", flush=True)
            for i, v in enumerate(VARIANTS):
                topic = f"floor{i}"
                create_topic(cluster.bootstrap, topic)
                r = run_variant(cluster.bootstrap_for("WAN"), topic, v, rate, seconds)
                print(f"| {r.label} | {r.records:,} | {r.p50_ms} | {r.p99_ms} | {r.max_ms} | {r.cpu_cores} |",
                      flush=True)
        finally:
            server.stop()
            cluster.stop()


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:3]), *(float(a) for a in sys.argv[3:4]))
