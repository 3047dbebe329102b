"""A link cut under a steady load (``--only wan --wan-cut-seconds N``): the WAN proxy in front of the remote
cluster is disabled for N seconds (every connection across it closed, none accepted) while a paced producer
writes to the source; then healed. Per system: how long after the heal the first record lands on the target
(copying resumed) and the last record produced before the heal does (the cut's backlog caught up)."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

from bench.harness import PARTITIONS, Starter, create_topic, stop, wait_visible
from bench.latency import PACED_PRODUCER
from mirror_core.devcluster.toxiproxy import Toxiproxy

BEFORE_S = 15.0  # steady load before the cut: connections and batches settled
AFTER_S = 20.0  # load after the heal, so that the resumption is seen under load


@dataclass
class CutResult:
    system: str
    resumed_s: float  # heal -> the first record to land on the target after it
    caught_up_s: float  # heal -> the last record produced before the heal lands on the target
    produced: int
    landed: int  # distinct records read back on the target (read_committed)


def cut_run(system: str, start: Starter, src: str, dst: str, alias: str, workdir: Path, proxy: Toxiproxy,
            proxy_name: str, rate: int, cut_s: float) -> CutResult:
    """``src``/``dst``: the clusters' own listeners (the load and the reader never cross the proxy);
    ``proxy_name``: the proxy the mirror reaches the remote cluster through."""
    topic = f"cut{alias}"
    remote = f"{alias}.{topic}"
    create_topic(src, topic)
    procs = start(topic, workdir)
    arrivals: dict[bytes, tuple[int, float]] = {}  # value -> (create ms, first arrival ms)
    done = threading.Event()
    try:
        warm = Producer({"bootstrap.servers": src})
        for p in range(PARTITIONS):
            warm.produce(topic, value=b"warmup", partition=p)
        warm.flush(10)
        wait_visible(dst, remote, PARTITIONS, 180)

        def consume() -> None:
            c = Consumer({"bootstrap.servers": dst, "group.id": f"cut-{alias}", "fetch.wait.max.ms": 5,
                          "enable.auto.commit": False, "isolation.level": "read_committed"})
            c.assign([TopicPartition(remote, p, 0) for p in range(PARTITIONS)])
            while not done.is_set():
                m = c.poll(0.05)
                if m is not None and m.error() is None and m.value() != b"warmup":
                    # A record copied twice (at-least-once after a cut) counts once, at its first arrival
                    arrivals.setdefault(bytes(m.value() or b""), (m.timestamp()[1], time.time() * 1000))
            c.close()

        reader = threading.Thread(target=consume, daemon=True)
        reader.start()
        total_s = BEFORE_S + cut_s + AFTER_S
        load = subprocess.Popen([sys.executable, "-c", PACED_PRODUCER, src, topic, str(rate), str(total_s), "numbered"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            time.sleep(BEFORE_S)
            proxy.set_enabled(proxy_name, False)
            time.sleep(cut_s)
        finally:
            proxy.set_enabled(proxy_name, True)
        healed = time.time() * 1000
        out, err = load.communicate(timeout=total_s + 120)
        if load.returncode != 0:
            raise RuntimeError(f"{system}: the paced producer failed: {err.strip()[-300:]}")
        produced = int(out.strip())
        deadline = time.monotonic() + 180
        while len(arrivals) < produced and time.monotonic() < deadline:
            time.sleep(0.2)
        done.set()
        reader.join(10)
    finally:
        done.set()
        stop(procs)
    after = [arrived for _, arrived in arrivals.values() if arrived >= healed]
    before = [arrived for created, arrived in arrivals.values() if created < healed]
    nan = float("nan")
    return CutResult(system, round((min(after) - healed) / 1000, 2) if after else nan,
                     round((max(before) - healed) / 1000, 2) if before else nan, produced, len(arrivals))


def markdown_lines(rows: list[dict[str, Any]], cut_s: float) -> list[str]:
    """The link-cut table: one line per system and link, the runs' figures side by side."""
    if not rows:
        return []
    lines = ["", f"## Link cut: {cut_s:.0f} s with the load running", "",
             "The proxy in front of the remote cluster disabled (connections closed, none accepted) after "
             f"{BEFORE_S:.0f} s of steady load (100-byte records), enabled again {cut_s:.0f} s later, load on for "
             f"{AFTER_S:.0f} s more. Resumed: seconds from the heal to the first record landing on the target; "
             "caught up: to the last record produced before the heal landing (read_committed, first arrival of "
             "each record). One figure per run.", "",
             "| placement | RTT ms | system | resumed s | caught up s | produced / landed |",
             "|---|---:|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['placement']} | {r['rtt_ms']} | {r['system']} | "
                     f"{' / '.join(f'{x:.2f}' for x in r['resumed_s'])} | "
                     f"{' / '.join(f'{x:.2f}' for x in r['caught_up_s'])} | "
                     f"{' / '.join(f'{p:,}/{n:,}' for p, n in zip(r['produced'], r['landed'], strict=True))} |")
    return lines
