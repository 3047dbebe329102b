"""Catch-up after a long partition, against the link's own throughput (issue 17: at least 90 %).

The mirror runs next to the source (the fault suite's placement); the target is behind a toxiproxy link
of ``--rtt`` ms with a ``--cap`` KB/s bandwidth toxic each way. Toxiproxy caps each connection, so the mirror
sends its records over one producer connection (``replication.producers = 1``: over this link ``auto`` would
choose 4, and four capped connections would be four links), and the link's throughput is measured the same
way first: a bare producer with the mirror's producer settings writes ``--link-records``
records of the same size through the link, and its rate is records over the time until the last
acknowledgement. Then a steady load (``--rate`` records/s of ``--value-bytes``) on the source, the mirror
copying it, the link disabled for ``--outage`` seconds while the load goes on, and the heal. The catch-up
rate is records arriving on the target per second, from the first record after the heal until the target
holds every record written before the heal (the load keeps running: its records count too, as they would
on a real link). Records, not bytes: toxiproxy's byte counters move only when a connection closes.

``python -m bench.probes.wan_catchup`` writes ``bench/results/wan-catchup-<date>.md``.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Producer

from bench.harness import PARTITIONS, RESULTS, SteadyLoad, bench_cluster, create_topic, start_mirror_core, stop
from bench.scale import EndWatcher, produce_acked
from bench.wan import Link, add_wan_listener
from mirror_core.config.client_defaults import PRODUCER_DEFAULTS, PRODUCER_ENFORCED
from mirror_core.devcluster.local_cluster import LocalCluster, free_port
from mirror_core.devcluster.toxiproxy import ToxiproxyServer

TARGET = "target"  # the proxy's name: bench.wan.Link names each proxy after its cluster


@dataclass(frozen=True)
class CatchUp:
    link_records_s: float  # a bare producer through the link
    backlog: int  # records written during the outage (and not copied before it)
    resumed_after_s: float  # from the heal to the first record on the target
    drain_s: float  # from that first record until the target holds everything written before the heal
    catch_up_records_s: float

    @property
    def share_of_link(self) -> float:
        return self.catch_up_records_s / self.link_records_s


def link_rate(wan_bootstrap: str, direct_bootstrap: str, records: int, value: bytes) -> float:
    """Records per second a producer with the mirror's settings gets through the link (one connection)."""
    create_topic(direct_bootstrap, "link-rate")
    producer = Producer({**PRODUCER_DEFAULTS, **PRODUCER_ENFORCED, "bootstrap.servers": wan_bootstrap})
    producer.list_topics("link-rate", timeout=30)
    t0 = time.monotonic()
    produce_acked([producer], "link-rate", value, (i % PARTITIONS for i in range(records)),
                  "wan catch-up bench: the link-rate producer", timeout=900)
    return records / (time.monotonic() - t0)


def catch_up(link: Link, source: LocalCluster, target: LocalCluster, work: Path, rate: int, value: bytes,
             outage: float) -> tuple[int, float, float, float]:
    """(backlog records, seconds to the first record after the heal, drain seconds, records/s)."""
    topic, alias = "catchup", "src"
    create_topic(source.bootstrap, topic)
    written_so_far, copied = EndWatcher(source.bootstrap, topic), EndWatcher(target.bootstrap, f"{alias}.{topic}")

    with SteadyLoad(source.bootstrap, topic, PARTITIONS, rate, value):
        procs, _ = start_mirror_core(source.bootstrap, target.bootstrap_for("WAN"), topic, 1, alias, work,
                                     ["replication.producers = 1"])  # one capped connection, as the bare producer
        try:
            deadline = time.monotonic() + 120
            while copied() < rate * 10:  # copying the load before the cut
                if time.monotonic() > deadline:
                    raise RuntimeError("wan catch-up bench: the mirror did not copy the load before the cut")
                time.sleep(0.5)
            link.proxy.set_enabled(TARGET, False)
            at_cut = copied()
            time.sleep(outage)
            written = written_so_far()  # every record written before the heal
            link.proxy.set_enabled(TARGET, True)
            healed = time.monotonic()
            samples: list[tuple[float, int]] = []  # (time, records on the target)
            while not samples or samples[-1][1] < written:
                if time.monotonic() - healed > 1800:
                    raise RuntimeError(f"wan catch-up bench: {written - samples[-1][1]} records not copied in 1800 s")
                samples.append((time.monotonic(), copied()))
                time.sleep(0.5)
        finally:
            stop(procs)
    first = next(s for s in samples if s[1] > samples[0][1])
    last = samples[-1]
    span = max(last[0] - first[0], 1e-3)
    return written - at_cut, first[0] - healed, span, (last[1] - first[1]) / span


def run(args: argparse.Namespace) -> CatchUp:
    value = b"v" * args.value_bytes
    with tempfile.TemporaryDirectory(prefix="wan-catchup-", dir=args.broker_dir) as tmp:
        work = Path(tmp)
        source = bench_cluster("source", work)
        target = add_wan_listener(bench_cluster(TARGET, work))
        server = ToxiproxyServer(work / "toxiproxy", free_port())
        try:
            for c in (source, target):
                c.start()
            link = Link(server.start(), [target])
            link.set_rtt(args.rtt, args.cap)
            link_records_s = link_rate(target.bootstrap_for("WAN"), target.bootstrap, args.link_records, value)
            print(f"link: {link_records_s:,.0f} records/s towards the target", flush=True)
            backlog, resumed, drain, records_s = catch_up(link, source, target, work, args.rate, value, args.outage)
        finally:
            server.stop()
            for c in (source, target):
                c.stop()
    return CatchUp(link_records_s, backlog, resumed, drain, records_s)


def markdown(results: list[CatchUp], args: argparse.Namespace) -> str:
    lines = [f"# Catch-up after a {args.outage:.0f} s partition ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})",
             "", f"`python -m bench.probes.wan_catchup --rtt {args.rtt} --cap {args.cap} --rate {args.rate} "
             f"--value-bytes {args.value_bytes} --outage {args.outage:g} --runs {args.runs}`: mirror_core "
             f"(at-least-once, defaults) next to the source, the target behind toxiproxy ({args.rtt} ms round trip, "
             f"{args.cap} KB/s each way per connection); a steady {args.rate} records/s of {args.value_bytes} B on "
             "the source throughout.", "",
             "| run | link: bare producer, mirror's settings (records/s) | backlog at the heal | first record after "
             "the heal | drain | catch-up (records/s) | share of the link |",
             "|---:|---:|---:|---:|---:|---:|---:|"]
    for i, r in enumerate(results, 1):
        lines.append(f"| {i} | {r.link_records_s:,.0f} | {r.backlog:,} | {r.resumed_after_s:.1f} s | "
                     f"{r.drain_s:.1f} s | {r.catch_up_records_s:,.0f} | **{r.share_of_link:.0%}** |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rtt", type=int, default=80, help="round trip, ms")
    parser.add_argument("--cap", type=int, default=4000, help="bandwidth, KB/s each way per connection")
    parser.add_argument("--rate", type=int, default=1000, help="source load, records/s")
    parser.add_argument("--value-bytes", type=int, default=1024)
    parser.add_argument("--outage", type=float, default=300.0, help="seconds the link is down (the issue: 5 min)")
    parser.add_argument("--link-records", type=int, default=60_000, help="records of the bare producer's run")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--broker-dir", help="where the brokers keep their data (default: the temporary directory)")
    args = parser.parse_args()
    results = []
    for i in range(args.runs):
        results.append(run(args))
        print(f"run {i + 1}: {results[-1]} share {results[-1].share_of_link:.0%}", flush=True)
    text = markdown(results, args)
    (RESULTS / f"wan-catchup-{time.strftime('%Y-%m-%d', time.gmtime())}.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
