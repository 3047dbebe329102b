"""WAN benchmark (``--only wan``): MirrorMaker 2 and mirror_core side by side on the same toxiproxy link,
same records, same run, at several round-trip times (1% jitter), with the mirror next to the target
(remote consume: the source is across the WAN) or next to the source (remote produce).

Per run: records/s and MB/s of payload (10%-90% of a backlog, as the loopback benchmark), MB/s that
crossed the proxy (both directions, compression counted), mirror CPU; and, per system and link, p99
end-to-end latency at a steady load. The mirror_core variants are A/B tests of one setting each.
"""

from __future__ import annotations

import math
import random
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer

from bench.backlog import measure_backlog, mirror_run
from bench.harness import PARTITIONS, create_topic, end_total, load_average, names, start_mirror_core
from bench.latency import latency_run
from bench.link_cut import cut_run
from bench.link_cut import markdown_lines as link_cut_lines
from bench.mm2 import start_mm2
from mirror_core.devcluster.local_cluster import LocalCluster, free_port
from mirror_core.devcluster.toxiproxy import Stream, Toxic, Toxiproxy, ToxiproxyServer

PLACEMENTS = ("remote-consume", "remote-produce")
# A new load on a new topic starts with a transient (2026-11-25: a bare consumer saw ~1 s for the first 5-6 s,
# longer behind the proxy, 7-16 s with a mirror in between): the WAN latency runs skip more than loopback's 5 s.
WAN_WARMUP_S = 15.0
# One unmeasured steady-load run (this long, at the first RTT) before the first measured one: on a fresh pair of
# brokers the JVMs compile the small-request path for ~30 s at 2,000 records/s, and their compiler threads took
# ~0.5 of a core on this 2-core machine (2026-11-27, by hand: p50 2-5 s during it, 150 ms after). Without it
# whichever system ran the first latency run of a bench paid for that (the default's p99 at 80 ms: 2.6-6.7 s in
# all 8 runs of 2026-11-27 10:35-10:56, 408 ms when it was not the first run of the matrix).
WAN_LATENCY_WARMUP_S = 45.0
# mirror_core variants: label -> extra config lines (A/B against the product defaults, same link, same run).
VARIANTS: dict[str, list[str]] = {
    "mirror_core": [],
    "mirror_core + lz4": ["target.producer.compression.type = lz4"],
    "mirror_core + zstd": ["target.producer.compression.type = zstd"],
    "mirror_core + linger.ms=100": ["target.producer.linger.ms = 100"],
    "mirror_core + linger.ms=2": ["target.producer.linger.ms = 2"],  # parked batches wait the linger (README)
    "mirror_core + 4 MiB socket buffers": ["target.producer.socket.send.buffer.bytes = 4194304",
                                           "target.producer.socket.receive.buffer.bytes = 4194304"],
    "mirror_core + one batch per partition": ["replication.one.batch.per.partition = true"],
    "mirror_core + 1 producer": ["replication.producers = 1"],  # the default before auto (2026-11-27)
    "mirror_core + 2 producers": ["replication.producers = 2"],
    "mirror_core + 4 producers": ["replication.producers = 4"],
    "mirror_core + 8 producers": ["replication.producers = 8"],
}
_WORDS = [b"order", b"customer", b"amount", b"currency", b"EUR", b"USD", b"status", b"shipped", b"pending",
          b"warehouse", b"quantity", b"sku", b"timestamp", b"region", b"eu-west", b"us-east"]


@dataclass
class WanResult:
    system: str
    placement: str
    rtt_ms: int
    value_bytes: int
    bandwidth_kb_s: int | None
    runs: list[float]  # records/s per run
    payload_mb_s: float  # median
    wire_mb_s: float  # median, bytes that crossed the proxy per second of the run
    cpu_s_per_million: float
    p99_ms: float | None = None  # median of p99_runs
    p99_runs: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.runs) if self.runs else float("nan")


def add_wan_listener(cluster: LocalCluster) -> LocalCluster:
    cluster.extra_listeners["WAN"] = free_port()
    cluster.advertised_ports["WAN"] = free_port()
    return cluster


def text_values(n: int, size: int, seed: int = 7) -> list[bytes]:
    """Text values of key=number pairs (compressible as event data is); a fixed seed: the same records
    every run."""
    rnd = random.Random(seed)
    out = []
    for _ in range(n):
        parts: list[bytes] = []
        while sum(len(p) + 1 for p in parts) < size:
            parts.append(rnd.choice(_WORDS) + b"=" + str(rnd.randrange(100000)).encode())
        out.append(b",".join(parts)[:size])
    return out


def produce_backlog(bootstrap: str, topic: str, n: int, size: int, partitions: int = PARTITIONS) -> None:
    create_topic(bootstrap, topic, partitions)
    values = text_values(20_000, size)  # distinct within any producer batch
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1_048_576,
                  "queue.buffering.max.messages": 2_000_000, "queue.buffering.max.kbytes": 2_097_151})
    for i in range(n):
        while True:
            try:
                p.produce(topic, value=values[i % len(values)], key=b"%d" % i, partition=i % partitions)
                break
            except BufferError:
                p.poll(0.01)
    p.flush(300)


class Link:
    """The two proxies (one in front of each cluster's WAN listener) and the toxics of one RTT."""

    def __init__(self, proxy: Toxiproxy, clusters: list[LocalCluster]) -> None:
        self.proxy, self.clusters = proxy, clusters
        for c in clusters:
            proxy.create_proxy(c.name, c.advertised_ports["WAN"], f"127.0.0.1:{c.extra_listeners['WAN']}")

    def set_rtt(self, rtt_ms: int, bandwidth_kb_s: int | None = None) -> None:
        streams: tuple[Stream, ...] = ("upstream", "downstream")
        for c in self.clusters:
            self.proxy.clear(c.name)
            for stream in streams:  # 1% jitter of the round trip, half each way
                if rtt_ms:
                    self.proxy.add_toxic(c.name, Toxic.latency(rtt_ms // 2, max(1, rtt_ms // 200), stream))
                if bandwidth_kb_s:
                    self.proxy.add_toxic(c.name, Toxic.bandwidth(bandwidth_kb_s, stream))

    def wire_bytes(self) -> float:
        return sum(sum(self.proxy.bytes_sent(c.name).values()) for c in self.clusters)


def endpoints(placement: str, clusters: list[LocalCluster]) -> tuple[str, str]:
    """(source, target) bootstrap servers the mirror uses: the remote side through the WAN."""
    src, dst = clusters
    if placement == "remote-consume":
        return src.bootstrap_for("WAN"), dst.bootstrap
    return src.bootstrap, dst.bootstrap_for("WAN")


def _mm2_starter(src: str, dst: str, alias: str, extra: dict[str, str] | None = None) -> Any:
    return lambda topic, wd: [start_mm2(src, dst, alias, topic, wd, extra)]


def allow_target_batches(target: LocalCluster, limit: int) -> dict[str, str]:
    """Let the target's broker take record batches up to ``limit`` bytes (message.max.bytes, set dynamically);
    MirrorMaker 2's producer settings to use them (its batch.size and max.request.size)."""
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    admin = AdminClient({"bootstrap.servers": target.bootstrap})
    broker = str(next(iter(admin.list_topics(timeout=30).brokers)))
    entry = ConfigEntry("message.max.bytes", str(limit), incremental_operation=AlterConfigOpType.SET)
    for fut in admin.incremental_alter_configs([ConfigResource(ResourceType.BROKER, broker,
                                                               incremental_configs=[entry])]).values():
        fut.result(30)
    return {"target.producer.batch.size": str(limit), "target.producer.max.request.size": str(limit)}


def ours_starter(src: str, dst: str, alias: str, extra: list[str]) -> Any:
    return lambda topic, wd: start_mirror_core(src, dst, topic, 1, alias, wd, extra)[0]


def backlog_once(system: str, extra: list[str] | None, src: str, dst: str, direct_dst: str, topic: str, n: int,
                 size: int, alias: str, work: Path, link: Link,
                 mm2_extra: dict[str, str] | None = None) -> tuple[float, float, float, float]:
    """(records/s, payload MB/s, wire MB/s, CPU-s per million) of one backlog run."""
    before = link.wire_bytes()
    if extra is None:
        proc = start_mm2(src, dst, alias, topic, work, mm2_extra)
        watcher = Consumer({"bootstrap.servers": direct_dst, "group.id": f"w-{alias}", "log_level": "0"})
        try:
            r = measure_backlog([proc], lambda: end_total(watcher, f"{alias}.{topic}") > 0, direct_dst,
                                f"{alias}.{topic}", n, system, f"{size}B", size)
        finally:
            watcher.close()
    else:
        r = mirror_run(src, dst, topic, n, size, 1, alias, work, extra)
    wire = link.wire_bytes() - before
    # Wire bytes of the whole run (start-up and all records) per record, at the measured record rate.
    wire_mb_s = wire / n * r.records_per_s / 1e6
    return r.records_per_s, r.mb_per_s, wire_mb_s, r.cpu_s_per_million or 0.0


def run_wan(clusters: list[LocalCluster], work: Path, rtts: list[int], sizes: list[int], placements: list[str],
            runs: int, records: int, rate: int, seconds: float, mm2: bool,
            bandwidth_kb_s: int | None = None, variants: list[str] | None = None,
            latency_runs: int = 1, target_batch_bytes: int | None = None,
            cut_s: float = 0.0, cut_runs: int = 1) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``variants``: the labels of VARIANTS to run next to the source (default: all); ``latency_runs``: steady-load
    runs per system and cell, interleaved (the p99 reported is their median, with the spread);
    ``target_batch_bytes``: the target takes batches this large, and MirrorMaker 2 is told to send them;
    ``cut_s``: after the latency runs of each link, ``cut_runs`` link cuts this long (bench.link_cut) per system.
    Returns (the rows of each system and link, the link-cut rows)."""
    unknown = sorted(set(variants or []) - set(VARIANTS))
    if unknown:
        raise SystemExit(f"--wan-variants: unknown {', '.join(unknown)}; choose among {', '.join(VARIANTS)}")
    chosen = {k: v for k, v in VARIANTS.items() if not variants or k in variants}
    mm2_extra = allow_target_batches(clusters[1], target_batch_bytes) if target_batch_bytes else None
    server = ToxiproxyServer(work / "toxiproxy", free_port())
    link = Link(server.start(), clusters)
    results: list[WanResult] = []
    cuts: list[dict[str, Any]] = []
    warmed = False
    try:
        for size in sizes:
            topic = f"wan{size}"
            n = records if size <= 100 else max(PARTITIONS, records // 4)
            produce_backlog(clusters[0].bootstrap, topic, n, size)
            for rtt in rtts:
                link.set_rtt(rtt, bandwidth_kb_s)
                for placement in placements:
                    src, dst = endpoints(placement, clusters)
                    systems: dict[str, list[str] | None] = {"MirrorMaker 2": None} if mm2 else {}
                    systems.update(chosen if placement == "remote-produce" else {"mirror_core": []})
                    samples: dict[str, list[tuple[float, float, float, float]]] = {s: [] for s in systems}
                    for i in range(runs):  # interleaved: load drifts hit every system alike
                        for k, (system, extra) in enumerate(systems.items()):
                            alias = f"w{size}r{rtt}{placement[7]}{k}n{i}"
                            samples[system].append(backlog_once(system, extra, src, dst, clusters[1].bootstrap,
                                                                topic, n, size, alias, work, link, mm2_extra))
                            print(f"wan {placement} rtt={rtt} {size}B {system}: {samples[system][-1]}", flush=True)
                    for system, rows in samples.items():
                        if not rows:  # --wan-runs 0: latency only
                            continue
                        results.append(WanResult(system, placement, rtt, size, bandwidth_kb_s, [r[0] for r in rows],
                                                 statistics.median(r[1] for r in rows),
                                                 statistics.median(r[2] for r in rows),
                                                 statistics.median(r[3] for r in rows)))
                    # p99 at a steady load: MM2 and mirror_core (next to the source: each chosen variant),
                    # 100-byte records (bench.latency).
                    if size == sizes[0]:
                        tag = f"l{rtt}{placement[7]}"
                        ours = chosen if placement == "remote-produce" else {"mirror_core": []}
                        # label -> (alias, extra lines or None for MM2); a fresh alias and topic per run below
                        systems_l: dict[str, tuple[str, list[str] | None]] = {
                            label: (f"{tag}o{k}", extra) for k, (label, extra) in enumerate(ours.items())}
                        if mm2:
                            systems_l["MirrorMaker 2"] = (f"{tag}m", None)
                        if not warmed and latency_runs > 0:
                            warm = f"{tag}warm"
                            latency_run("warm-up", ours_starter(src, dst, warm, []), clusters[0].bootstrap,
                                        clusters[1].bootstrap, warm, work, rate, WAN_LATENCY_WARMUP_S - WAN_WARMUP_S,
                                        warmup_s=WAN_WARMUP_S)
                            warmed = True
                        for i in range(latency_runs):
                            for system, (base, extra) in systems_l.items():
                                alias = f"{base}n{i}"
                                start = (_mm2_starter(src, dst, alias, mm2_extra) if extra is None
                                         else ours_starter(src, dst, alias, extra))
                                lat = latency_run(system, start, clusters[0].bootstrap, clusters[1].bootstrap,
                                                  alias, work, rate, seconds, warmup_s=WAN_WARMUP_S)
                                print(f"wan latency {placement} rtt={rtt} {system}: {lat}", flush=True)
                                row = next((r for r in results if (r.system, r.placement, r.rtt_ms, r.value_bytes)
                                            == (system, placement, rtt, size)), None)
                                if row is None:
                                    row = WanResult(system, placement, rtt, size, bandwidth_kb_s, [], 0.0, 0.0, 0.0)
                                    results.append(row)
                                if not math.isnan(lat.p99_ms):  # too few samples for a p99: not a figure
                                    row.p99_runs.append(lat.p99_ms)
                                    row.p99_ms = statistics.median(row.p99_runs)
                        if cut_s > 0:
                            cuts += _cut_rows(clusters, link, placement, rtt, src, dst, work, mm2, mm2_extra,
                                              cut_runs, cut_s)
    finally:
        server.stop()
    return [{**asdict(r), "median": r.median} for r in results], cuts


def _cut_rows(clusters: list[LocalCluster], link: Link, placement: str, rtt: int, src: str, dst: str, work: Path,
              mm2: bool, mm2_extra: dict[str, str] | None, runs: int, cut_s: float) -> list[dict[str, Any]]:
    """``runs`` link cuts per system on one link, systems taking turns; one row per system."""
    remote = clusters[0] if placement == "remote-consume" else clusters[1]
    systems: dict[str, list[str] | None] = {"MirrorMaker 2": None} if mm2 else {}
    systems.update({"mirror_core": [], "mirror_core exactly-once": ["exactly.once.enabled = true"]})
    rows: dict[str, dict[str, Any]] = {s: {"system": s, "placement": placement, "rtt_ms": rtt, "resumed_s": [],
                                           "caught_up_s": [], "produced": [], "landed": []} for s in systems}
    for i in range(runs):
        for k, (system, extra) in enumerate(systems.items()):
            alias = f"c{rtt}{placement[7]}{k}n{i}"
            start = _mm2_starter(src, dst, alias, mm2_extra) if extra is None else ours_starter(src, dst, alias, extra)
            r = cut_run(system, start, clusters[0].bootstrap, clusters[1].bootstrap, alias, work, link.proxy,
                        remote.name, 2000, cut_s)
            print(f"wan cut {placement} rtt={rtt} {system}: {r}", flush=True)
            for key in ("resumed_s", "caught_up_s", "produced", "landed"):
                rows[system][key].append(getattr(r, key))
    return list(rows.values())


def wan_markdown(rows: list[dict[str, Any]], meta: dict[str, str], cuts: list[dict[str, Any]] | None = None,
                 cut_s: float = 0.0) -> str:
    lines = [f"# WAN benchmark ({meta['date']})", "",
             f"Machine: {meta['machine']}; load before/after: {meta.get('load', '?')}; Kafka {meta['kafka']}; "
             f"{PARTITIONS} partitions; toxiproxy latency toxics (RTT/2 each way, 1% jitter) in front of the "
             "remote cluster's WAN listener. Records: text values of key=number pairs (compressible), the same "
             "records for every system. records/s: median of the runs (min-max), 10%-90% of the backlog on "
             "the target. Wire MB/s: bytes that crossed the proxy (both directions, whole run) per record, at "
             f"that rate. p99: steady load of 100-byte records (bench.latency.latency_run), the first "
             f"{WAN_WARMUP_S:.0f} s of it not counted, after one unmeasured run of {WAN_LATENCY_WARMUP_S:.0f} s "
             "that warms the brokers up; with several latency runs: the median (min-max). Bandwidth cap "
             f"(KB/s each way): {(rows[0].get('bandwidth_kb_s') if rows else None) or 'none'}. Target broker's "
             f"message.max.bytes: {meta.get('target_batch_bytes') or 'default (1 MiB)'}.", "",
             "| placement | RTT ms | value B | system | records/s (median) | min-max | payload MB/s | wire MB/s | "
             "CPU-s per M | p99 ms | vs MM2 | vs own RTT 0 |",
             "|---|---:|---:|---|---:|---|---:|---:|---:|---:|---:|---:|"]

    def key(x: dict[str, Any], *fields: str) -> tuple[Any, ...]:
        return tuple(x[f] for f in fields)

    for r in rows:
        cell = ("placement", "rtt_ms", "value_bytes")
        mm2 = next((x for x in rows if x["system"] == "MirrorMaker 2" and key(x, *cell) == key(r, *cell)), None)
        own = ("system", "placement", "value_bytes")
        base = next((x for x in rows if x["rtt_ms"] == 0 and key(x, *own) == key(r, *own)), None)
        p99 = f"{r['p99_ms']:.0f}" if r.get("p99_ms") is not None else ""
        if len(r.get("p99_runs") or []) > 1:
            p99 += f" ({min(r['p99_runs']):.0f}-{max(r['p99_runs']):.0f})"
        if not r["runs"]:  # latency only (--wan-runs 0: no row has backlog runs)
            lines.append(f"| {r['placement']} | {r['rtt_ms']} | {r['value_bytes']} | {r['system']} | — | — | — | — "
                         f"| — | {p99} | | |")
            continue
        vs_mm2 = f"{r['median'] / mm2['median']:.2f}" if mm2 and r["system"] != "MirrorMaker 2" else ""
        vs_base = f"{r['median'] / base['median']:.2f}" if base and r["rtt_ms"] else ""
        lines.append(f"| {r['placement']} | {r['rtt_ms']} | {r['value_bytes']} | {r['system']} | {r['median']:,.0f} | "
                     f"{min(r['runs']):,.0f}-{max(r['runs']):,.0f} | {r['payload_mb_s']:.1f} | {r['wire_mb_s']:.1f} | "
                     f"{r['cpu_s_per_million']:.1f} | {p99} | {vs_mm2} | {vs_base} |")
    lines += link_cut_lines(cuts or [], cut_s)
    return "\n".join(lines) + "\n"


def run_part(clusters: list[LocalCluster], work: Path, args: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The part (``--only wan``) with the command line's choices; ``args.wan_load``: the load before it."""
    placements = names(args.wan_placements)
    if not placements or set(placements) - set(PLACEMENTS):
        raise SystemExit(f"--wan-placements: choose among {', '.join(PLACEMENTS)}")
    ints = [[int(x) for x in v.split(",") if x.strip()] for v in (args.wan_rtts, args.wan_sizes)]
    args.wan_load = load_average()
    return run_wan(clusters, work, ints[0], ints[1], placements, args.wan_runs, args.wan_records, 2000,
                   args.seconds, args.mm2, args.wan_bandwidth,
                   names(args.wan_variants) or None, args.latency_runs, args.wan_target_batch_bytes,
                   args.wan_cut_seconds, args.wan_cut_runs)
