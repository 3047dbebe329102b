"""Part ``failover`` of ``make bench`` (``--only scenarios`` runs it with ``latency``): consumer groups stopped at
random positions fail over to the target with each system's checkpoints; what they would read twice
(duplicates) or never (losses). MirrorMaker 2 and mirror_core on the same brokers in the same run."""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from bench.harness import (
    PARTITIONS,
    Starter,
    as_rows,
    create_topic,
    mirror_core_starter,
    stop,
    wait_visible,
)
from bench.mm2 import mm2_checkpointing_starter
from mirror_core.stores.records import decode_checkpoint_key, decode_checkpoint_value


@dataclass
class FailoverResult:
    system: str
    groups: int
    partitions_checked: int
    duplicates: int
    losses: int
    max_duplicates_per_partition: int
    missing_checkpoints: int


def _read(bootstrap: str, topic: str) -> dict[int, list[tuple[int, int]]]:
    """partition -> [(offset, sequence number)] of a topic whose values are b'seq-<n>'."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-read", "enable.auto.commit": False,
                  "isolation.level": "read_committed", "log_level": "0"})
    ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(PARTITIONS)}
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    out: dict[int, list[tuple[int, int]]] = {p: [] for p in range(PARTITIONS)}
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and any(
            c.position([TopicPartition(topic, p)])[0].offset < e for p, e in ends.items() if e > 0):
        for m in c.consume(10000, 0.5):
            if m.error() is None and m.value() and m.value().startswith(b"seq-"):
                out[m.partition()].append((m.offset(), int(m.value()[4:])))
    c.close()
    return out


def failover_run(system: str, start: Starter, src: str, dst: str, alias: str, workdir: Path, groups: int,
                 per_partition: int, seed: int = 7) -> FailoverResult:
    """Groups stopped at random positions fail over with the system's checkpoints; count what they
    would read twice (duplicates) or never (losses)."""
    topic = f"fo{alias}"
    create_topic(src, topic)
    p = Producer({"bootstrap.servers": src, "linger.ms": 5})
    for i in range(per_partition * PARTITIONS):
        p.produce(topic, value=b"seq-%d" % i, partition=i % PARTITIONS)
    p.flush(60)
    remote = f"{alias}.{topic}"
    procs = start(topic, workdir)
    try:
        wait_visible(dst, remote, per_partition * PARTITIONS, 300)
        rng = random.Random(seed)
        committed: dict[tuple[str, int], int] = {}
        for g in range(groups):
            group = f"app-{alias}-{g}"
            offsets = {part: rng.randrange(0, per_partition + 1) for part in range(PARTITIONS)}
            c = Consumer({"bootstrap.servers": src, "group.id": group, "enable.auto.commit": False})
            c.commit(offsets=[TopicPartition(topic, part, o) for part, o in offsets.items()], asynchronous=False)
            c.close()
            committed.update({(group, part): o for part, o in offsets.items()})
        checkpoints = _await_checkpoints(dst, f"{alias}.checkpoints.internal", remote, committed, 120)
    finally:
        stop(procs)
    source, target = _read(src, topic), _read(dst, remote)
    dups = losses = worst = missing = 0
    for (group, part), c_off in committed.items():
        consumed = {seq for off, seq in source[part] if off < c_off}
        remaining = {seq for off, seq in source[part] if off >= c_off}
        cp = checkpoints.get((group, part))
        if cp is None or cp[0] != c_off:
            missing += 1
            resume_at = 0  # no usable checkpoint: auto.offset.reset=earliest on the target
        else:
            resume_at = cp[1]
        resumed = [seq for off, seq in target[part] if off >= resume_at]
        d = sum(1 for seq in resumed if seq in consumed)
        lost = len(remaining - set(resumed))
        dups, losses, worst = dups + d, losses + lost, max(worst, d)
    return FailoverResult(system, groups, len(committed), dups, losses, worst, missing)


def _await_checkpoints(dst: str, topic: str, remote: str, committed: dict[tuple[str, int], int],
                       timeout: float) -> dict[tuple[str, int], tuple[int, int]]:
    """Latest checkpoint per (group, partition) once every committed position has one (or timeout)."""
    latest: dict[tuple[str, int], tuple[int, int]] = {}
    c = Consumer({"bootstrap.servers": dst, "group.id": "bench-cp", "enable.auto.commit": False, "log_level": "0"})
    deadline = time.monotonic() + timeout
    assigned = False
    try:
        while time.monotonic() < deadline:
            if not assigned:
                try:
                    c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
                    assigned = True
                except Exception:
                    time.sleep(1)
                    continue
            for m in c.consume(10000, 0.5):
                if m.error() is not None or m.key() is None:
                    continue
                group, t, part = decode_checkpoint_key(m.key())
                if t == remote:
                    up, down, _ = decode_checkpoint_value(m.value())
                    latest[(group, part)] = (up, down)
            if all(latest.get(k, (None,))[0] == v for k, v in committed.items()):
                break
    finally:
        c.close()
    return latest


def run_part(src: str, dst: str, work: Path, args: Any) -> list[dict[str, Any]]:
    """``args.groups`` groups at random positions, failed over with each system's checkpoints."""
    systems: list[tuple[str, str, Starter]] = []
    if args.mm2:
        systems.append(("MirrorMaker 2", "mm2fo", mm2_checkpointing_starter(src, dst, "mm2fo")))
    systems.append(("mirror_core", "ourfo", mirror_core_starter(src, dst, "ourfo")))
    failover = []
    for label, alias, starter in systems:
        failover.append(failover_run(label, starter, src, dst, alias, work, args.groups, 2000))
        print(failover[-1], flush=True)
    return as_rows(failover)


def markdown_lines(rows: list[dict[str, Any]]) -> list[str]:
    """The failover-accuracy table."""
    lines: list[str] = []
    if not rows:
        return lines
    lines += ["", "## Failover accuracy: groups stopped at random positions resume on the target", "",
              "| system | groups | partitions | duplicates | losses | max duplicates per partition | "
              "no usable checkpoint |", "|---|---:|---:|---:|---:|---:|---:|"]
    lines += [f"| {r['system']} | {r['groups']} | {r['partitions_checked']} | {r['duplicates']:,} | "
              f"{r['losses']} | {r['max_duplicates_per_partition']} | {r['missing_checkpoints']} |"
              for r in rows]
    return lines
