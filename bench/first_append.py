"""What a broker charges for the first record written to each of many partitions (issue 18).

A mirror restarted (or a process that joins) at 2,000 partitions writes its first record to each remote
partition through one target producer: librdkafka puts one partition in each produce request
(librdkafka#1700), and a broker serves one request per connection at a time, so those appends queue up.
This measures that queue without a mirror: one broker, a topic of ``--partitions`` filled with ``--fill``
records each (the backlog a mirror has just copied), then fresh producers with the mirror's settings write
one record to every partition — right after the fill, at once again, right after a second fill through 4
producers (4 connections), and after ``--pause`` seconds idle. Each round notes how much of the host's page
cache was dirty or under writeback when it started (/proc/meminfo). Each place in ``--places`` holds the
broker's data in turn ("default": the system's temporary directory; /dev/shm: memory). What it found on
this machine is in the README ("Scale": the brokers' disk).

``python -m bench.first_append`` writes ``bench/results/first-append-<date>.md``.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from bench.run import REPO, bench_cluster, describe_place
from bench.scale import plain_source, produce_acked
from mirror_core.config.client_defaults import PRODUCER_DEFAULTS, PRODUCER_ENFORCED


@dataclass(frozen=True)
class Round:
    place: str
    label: str
    producers: int
    seconds: float
    partitions: int
    dirty_mb: float  # dirty + under writeback when the round started

    @property
    def ms_per_partition(self) -> float:
        return self.seconds / self.partitions * 1000


def dirty_mb() -> float:
    """The host's page cache waiting to be written to disk (Dirty + Writeback in /proc/meminfo), MB."""
    fields = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
    return sum(int(fields[k].split()[0]) for k in ("Dirty", "Writeback")) / 1024


def one_record_each(bootstrap: str, topic: str, partitions: int, producers: int) -> float:
    """Seconds until fresh producers (the mirror's settings; partition i through producer i mod n) have
    one acknowledged record on every partition."""
    clients = [Producer({**PRODUCER_DEFAULTS, **PRODUCER_ENFORCED, "bootstrap.servers": bootstrap})
               for _ in range(producers)]
    for client in clients:
        client.list_topics(topic, timeout=30)  # metadata before the clock, as a running mirror has it
    t0 = time.monotonic()
    produce_acked(clients, topic, b"first", range(partitions), "first-append bench", timeout=600)
    return time.monotonic() - t0


def measure(place: str, partitions: int, fill: int, pause: float) -> list[Round]:
    with tempfile.TemporaryDirectory(prefix="first-append-", dir=None if place == "default" else place) as tmp:
        work = Path(tmp)
        where = describe_place(work)
        broker = bench_cluster("target", work)
        broker.start()
        try:
            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            admin.create_topics([NewTopic("t", partitions, 1)])["t"].result(120)
            rounds = []
            for label, producers, refill, wait in (("right after the fill", 1, True, 0.0),
                                                   ("at once again", 1, False, 0.0),
                                                   ("right after a second fill", 4, True, 0.0),
                                                   (f"after {pause:.0f} s idle", 1, False, pause)):
                if refill:
                    plain_source(broker.bootstrap, "t", fill * partitions, partitions)
                time.sleep(wait)
                dirty = dirty_mb()
                seconds = one_record_each(broker.bootstrap, "t", partitions, producers)
                rounds.append(Round(where, label, producers, seconds, partitions, round(dirty)))
                print(rounds[-1], f"{rounds[-1].ms_per_partition:.2f} ms/partition", flush=True)
            return rounds
        finally:
            broker.stop()


def markdown(rounds: list[Round], partitions: int, fill: int) -> str:
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    lines = [f"# First record to each of {partitions:,} partitions ({when})", "",
             f"`python -m bench.first_append`: one broker, {fill:,} records of 100 B per partition first, then "
             "fresh producers with the mirror's settings write one record to every partition.", "",
             "| broker data | when | producers | host page cache dirty or under writeback at the start | seconds "
             "| ms per partition |", "|---|---|---:|---:|---:|---:|"]
    lines += [f"| {r.place} | {r.label} | {r.producers} | {r.dirty_mb:,.0f} MB | {r.seconds:.2f} | "
              f"{r.ms_per_partition:.2f} |" for r in rounds]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=2000)
    parser.add_argument("--fill", type=int, default=1000, help="records per partition before the rounds")
    parser.add_argument("--pause", type=float, default=35.0, help="idle seconds before the later rounds")
    parser.add_argument("--places", default="default,/dev/shm", help="comma-separated: where the broker's data is")
    args = parser.parse_args()
    rounds = [r for place in args.places.split(",") if place.strip()
              for r in measure(place.strip(), args.partitions, args.fill, args.pause)]
    text = markdown(rounds, args.partitions, args.fill)
    out = REPO / "bench" / "results" / f"first-append-{time.strftime('%Y-%m-%d', time.gmtime())}.md"
    out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
