"""Scale benchmark (issue 18): how costs grow with the number of partitions and the length of history.

Two series on the same brokers, one mirror_core process each (at-least-once):
- partitions: a backlog of 100-byte records over 8 / 200 / 2,000 partitions — throughput (10 % to 90 %
  of the backlog on the target), time to first record after start, RSS, CPU per million records
  (MirrorMaker 2 too, on the same backlog, unless ``--no-mm2``; sizes and systems take turns),
  restart time (SIGKILL, a probe record written to every partition, start with the same
  ``--instance-id``, until every probe is on the target), the longest stall of any partition when a
  second process joins under a steady load, and
  ``translate_group`` for 100 groups committed on every partition;
- history: a gappy source like a Kafka Streams application (one transactional producer committing
  every 100 ms, 8 partitions: every commit leaves a marker, an offset gap, in each partition), then
  the source's oldest half deleted (DeleteRecords, as retention would): offset-map runs written and
  kept after a snapshot round, restart time, map load time, ``translate_group`` for 100 groups, RSS.
Sizes are parameters (``--scale-partitions``, ``--scale-history``, ``--scale-records``). A size is one topic of
N partitions (``2000``) or T topics of P partitions each (``500x4``: many topics of few, the same 2,000).
``--scale-source-linger-ms`` is the partitions series' source producer's linger.ms (default 20): how many records
share a source batch, which the target broker's work per record follows (each row says how many shared one).
"""

from __future__ import annotations

import json
import os
import random
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from bench.harness import (
    SteadyLoad,
    TargetEnds,
    cpu_seconds,
    describe_place,
    rss_mb,
    start_mirror_core,
    stop,
    utc_stamp,
    write_result,
)
from bench.mm2 import start_mm2
from mirror_core.kafka_io import log_ends_batch, log_starts_batch
from mirror_core.wire.fetcher import BatchFetcher
from mirror_core.wire.metadata import Brokers
from mirror_core.wire.records import record_count

GROUPS = 100
#: A static member id: a restart resumes at once instead of after the session timeout (README, Restart).
STATIC = ("--instance-id", "scale-0")
#: MirrorMaker 2's heap here: with its benchmark tuning (bench/mm2.py) 1 GiB died of OutOfMemoryError
#: at 2,000 partitions (2026-11-24); the machine has 24 GiB.
MM2_HEAP = "4g"


Key = tuple[str, int]  # (topic, partition)


@dataclass(frozen=True)
class Shape:
    """The source of a partitions run: ``topics`` topics of ``per_topic`` partitions each."""

    topics: int
    per_topic: int

    @classmethod
    def parse(cls, text: str) -> Shape:
        """``2000``: one topic of 2,000 partitions; ``500x4``: 500 topics of 4."""
        parts = text.strip().split("x")
        try:
            shape = cls(int(parts[0]), int(parts[1])) if len(parts) == 2 else cls(1, int(text))
        except ValueError:
            raise SystemExit(f"--scale-partitions: {text!r} is neither N (partitions of one topic) nor TxP "
                             "(T topics of P partitions)") from None
        if shape.topics < 1 or shape.per_topic < 1:
            raise SystemExit(f"--scale-partitions: {text!r} has a count below 1")
        return shape

    @classmethod
    def of(cls, size: int | Shape) -> Shape:
        return size if isinstance(size, Shape) else cls(1, size)

    @property
    def partitions(self) -> int:
        return self.topics * self.per_topic

    @property
    def label(self) -> str:
        """How the size reads in a file name or a topic name (``2000``, ``500x4``)."""
        return str(self.per_topic) if self.topics == 1 else f"{self.topics}x{self.per_topic}"

    def names(self, base: str, prefix: str = "") -> list[str]:
        """The topics; ``prefix``: their remote names (``alias.``)."""
        return [prefix + base] if self.topics == 1 else [f"{prefix}{base}-{t:04d}" for t in range(self.topics)]

    def pattern(self, base: str) -> str:
        """The ``topics`` regex of a copier that takes exactly these topics."""
        return base if self.topics == 1 else f"{base}-[0-9]+"

    def keys(self, base: str, prefix: str = "") -> list[Key]:
        """Every partition, the topics taking turns (consecutive records go to different topics);
        ``prefix``: the remote names (``alias.``)."""
        return [(t, p) for p in range(self.per_topic) for t in self.names(base, prefix)]


class Cluster:
    """Admin and watermark helpers on one cluster (the admin is kept alive for its futures)."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": "0"})

    def create(self, topic: str, partitions: int) -> None:
        self.create_all([topic], partitions)

    def create_all(self, topics: Sequence[str], partitions: int) -> None:
        for future in self.admin.create_topics([NewTopic(t, partitions, 1) for t in topics]).values():
            future.result(300)

    def marks(self, topic: str, partitions: int) -> list[tuple[int, int]]:
        return self.marks_of([(topic, p) for p in range(partitions)])

    def marks_of(self, keys: list[Key]) -> list[tuple[int, int]]:
        """(log start, log end) per partition, (0, 0) where the cluster does not know it (yet). Through
        ListOffsets: a consumer that asked before the topic existed may answer from stale metadata."""
        # A fresh client each time: one that asked before the topic existed kept answering "unknown".
        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": "0"})
        starts, ends = log_starts_batch(admin, keys), log_ends_batch(admin, keys)
        return [(starts.get(k, 0), ends.get(k, 0)) for k in keys]

    def total(self, topic: str, partitions: int) -> int:
        return sum(h - lo for lo, h in self.marks(topic, partitions))


class EndWatcher(TargetEnds):
    """Records on one topic, or on every topic of ``keys`` (sum of the log ends; a fresh topic starts at 0)."""

    def __call__(self) -> int:
        return sum(max(end, 0) for end in self.now())


def _produce(p: Producer, topic: str, value: bytes, partition: int, on_delivery: Any = None) -> None:
    while True:
        try:
            p.produce(topic, value=value, partition=partition, on_delivery=on_delivery)
            return
        except BufferError:
            p.poll(0.05)


def produce_acked(producers: Sequence[Producer], topic: str, value: bytes, partitions: Iterable[int], what: str,
                  timeout: float = 300) -> None:
    """One record per item of ``partitions`` (the i-th through ``producers[i % len(producers)]``), every one
    acknowledged, or a RuntimeError naming ``what``."""
    produce_acked_to(producers, value, ((topic, p) for p in partitions), what, timeout)


def produce_acked_to(producers: Sequence[Producer], value: bytes, keys: Iterable[Key], what: str,
                     timeout: float = 300) -> None:
    """:func:`produce_acked` over (topic, partition) pairs."""
    failed: list[str] = []
    for i, (topic, partition) in enumerate(keys):
        _produce(producers[i % len(producers)], topic, value, partition,
                 lambda err, _msg: failed.append(str(err)) if err is not None else None)
    if any(p.flush(timeout) for p in producers) or failed:
        raise RuntimeError(f"{what}: records not acknowledged: {failed[:3]}")


def plain_source(bootstrap: str, topic: str, n: int, partitions: int, linger_ms: int = 20,
                 value_bytes: int = 100) -> None:
    """``n`` records of ``value_bytes`` random bytes, round robin over ``partitions``; the longer ``linger_ms``, the
    more of a partition's records share a batch (100 B at 2,000 partitions and 20 ms, 65-110; at 8, 6,000-8,000)."""
    plain_source_to(bootstrap, [(topic, p) for p in range(partitions)], n, linger_ms, value_bytes)


def plain_source_to(bootstrap: str, keys: list[Key], n: int, linger_ms: int = 20, value_bytes: int = 100) -> None:
    """:func:`plain_source` round robin over (topic, partition) pairs."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": linger_ms, "batch.size": 1_048_576,
                  "queue.buffering.max.messages": 2_000_000})
    value = os.urandom(value_bytes)
    for i in range(n):
        topic, partition = keys[i % len(keys)]
        _produce(p, topic, value, partition)
    p.flush(120)


def streams_source(bootstrap: str, topic: str, n: int, partitions: int, commit_ms: int = 100,
                   per_txn: int = 1000) -> int:
    """Kafka Streams-like: transactions committed every ``commit_ms`` or ``per_txn`` records, whichever
    comes first (an application at 10,000 records/s commits 1,000 every 100 ms). Returns the transactions."""
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"bench-{topic}", "linger.ms": 5,
                  "queue.buffering.max.messages": 2_000_000})
    p.init_transactions(30)
    value, i, txns = os.urandom(100), 0, 0
    while i < n:
        p.begin_transaction()
        until, first = time.monotonic() + commit_ms / 1000, i
        while i < n and ((time.monotonic() < until and i - first < per_txn) or i % partitions):
            _produce(p, topic, value, i % partitions)
            i += 1
        p.commit_transaction(120)
        txns += 1
    return txns


def commit_groups(bootstrap: str, prefix: str, keys: list[Key], marks: list[tuple[int, int]], seed: int
                  ) -> list[str]:
    """``GROUPS`` groups, each committed on every one of ``keys`` somewhere between its ``marks``."""
    rnd, groups = random.Random(seed), []
    for g in range(GROUPS):
        group = f"{prefix}-{g}"
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                      "log_level": "0"})
        c.commit(offsets=[TopicPartition(t, p, rnd.randint(lo, h))
                          for (t, p), (lo, h) in zip(keys, marks, strict=True)], asynchronous=False)
        c.close()
        groups.append(group)
    return groups


def time_translate(config_path: Path, alias: str, groups: list[str]) -> dict[str, float]:
    """The offset map loaded once (snapshot + log tail), and translate_group for every group."""
    from mirror_core.config.loader import load_config
    from mirror_core.offsets.translate import FlowOffsets, translate_group, translate_groups

    config = load_config(config_path)
    flow = config.flows[0]
    t0 = time.perf_counter()
    offsets = FlowOffsets.load(config, flow)
    load_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    translate_group(config, groups[0], alias, "target")
    one_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    exact = sum(r.exact for rows in translate_groups(config, groups, alias, "target").values() for r in rows)
    return {"map_load_s": round(load_s, 2), "translate_1_group_s": round(one_s, 2),
            "translate_100_groups_s": round(time.perf_counter() - t0, 2),
            "runs_loaded": offsets.offset_map.entries(), "exact_partitions": exact}


def _wait(predicate: Any, timeout: float, what: str) -> float:
    t0 = time.monotonic()
    while not predicate():
        if time.monotonic() - t0 > timeout:
            raise RuntimeError(f"scale bench: timed out waiting for {what}")
        time.sleep(0.05)
    return time.monotonic() - t0


def restart_time(src: Cluster, dst: Cluster, shape: Shape, topic: str, alias: str, work: Path,
                 extra: list[str], procs: list[subprocess.Popen[bytes]]) -> tuple[float, list[Any]]:
    """SIGKILL; one new record per partition written while the mirror is down; start again, and the
    seconds until all of them are on the target. The probes are on the source before the clock starts:
    a producer's first record to each of 2,000 partitions took it 7-60 s here (one produce request per
    partition on one connection, each a first append the broker pays for:
    bench/results/archive/first-append-2026-11-25.md), which had been counted as the mirror's restart. The kill
    waits until the target stops growing and two progress commits have passed, so a re-copy of uncommitted
    records cannot stand in for the probes.
    The target is sampled through one kept admin client, log ends only (a fresh client per sample took
    up to ~1 s at 2,000 partitions: the clock's resolution)."""
    # Fresh remote topics start at 0: their ends are the records copied.
    ends, partitions = EndWatcher(dst.bootstrap, "", keys=shape.keys(topic, f"{alias}.")), shape.partitions
    settled = -1
    while (now := ends()) != settled:
        settled = now
        time.sleep(2.5)  # > 2 x offset.flush.interval.ms (1 s)
    for p in procs:
        p.kill()
        p.wait(30)
    before = ends()
    produce_acked_to([Producer({"bootstrap.servers": src.bootstrap, "linger.ms": 5})], b"probe",
                     shape.keys(topic), "scale bench: restart probes")
    t0 = time.monotonic()
    procs, _ = start_mirror_core(src.bootstrap, dst.bootstrap, shape.pattern(topic), 1, alias, work, extra, STATIC)
    try:
        _wait(lambda: ends() >= before + partitions, 600, "the probes after a restart")
    except RuntimeError:
        stop(procs)
        raise
    elapsed = round(time.monotonic() - t0, 2)
    if (extra_records := ends() - before - partitions) > 0:
        print(f"scale bench: {extra_records} records copied again after the restart", flush=True)
    return elapsed, procs


def join_stall(src: Cluster, dst: Cluster, shape: Shape, topic: str, alias: str, work: Path,
               extra: list[str], procs: list[subprocess.Popen[bytes]]) -> tuple[float, list[Any]]:
    """A second process joins (its own ``--instance-id``) under a steady load on every partition (2
    records/s each, at least 2,000 in all: librdkafka sends a produce request per partition, and at 10 a
    partition the load's one producer fell behind at 2,000 partitions): the longest time any partition
    made no progress in the 40 s after its start — bench/restart.py's measure of a join, at this
    partition count (at 2,000 partitions a record reaches each partition every 0.5 s)."""
    ends = TargetEnds(dst.bootstrap, "", keys=shape.keys(topic, f"{alias}."))
    with SteadyLoad(src.bootstrap, "", rate=max(2000, 2 * shape.partitions), keys=shape.keys(topic)):
        ends.wait_all_past(ends.now(), 120)  # the first process copies every partition
        (work / "second").mkdir(exist_ok=True)  # its own log file next to the first process's
        second, _ = start_mirror_core(src.bootstrap, dst.bootstrap, shape.pattern(topic), 1, alias, work / "second",
                                      extra, ("--instance-id", "scale-1"))
        stall = ends.longest_stall(40)
    return round(stall, 2), procs + second


def copy_rate(procs: list[subprocess.Popen[bytes]], ends: EndWatcher, records: int, t0: float,
              timeout: float = 1800) -> dict[str, float | None]:
    """Throughput from 10 % to 90 % of the backlog on the target, the time to the first record after
    ``t0`` (the start), the copier's CPU per million records over the same span, and its largest resident
    memory seen while copying (summed over its processes, sampled with the rest). A copier that dies fails the
    run at once (MirrorMaker 2 with too small a heap dies of OutOfMemoryError)."""
    pids = [p.pid for p in procs]
    samples: list[tuple[float, int, float]] = []
    first = None
    peak = 0.0
    while True:
        if any(p.poll() is not None for p in procs):
            raise RuntimeError(f"the copier exited ({[p.returncode for p in procs]}) before the backlog was copied")
        n = ends()
        now = time.monotonic()
        if n and first is None:
            first = now - t0
        samples.append((now, n, cpu_seconds(pids)))
        peak = max(peak, sum(rss_mb(pid) for pid in pids))
        if n >= records:
            break
        if now - t0 > timeout:
            raise RuntimeError(f"backlog of {records} not copied in {timeout:.0f} s")
        time.sleep(0.25)
    lo = next(x for x in samples if x[1] >= records * 0.1)
    hi = next(x for x in samples if x[1] >= records * 0.9)
    if hi is lo:  # one sample went from under 10 % to over 90 % (a slow ListOffsets): no span to divide by
        print(f"scale bench: no sample between 10 % and 90 % of {records:,} records; rate not measured", flush=True)
        return {"records_per_s": None, "cpu_s_per_m": None, "time_to_first_record_s": round(first or 0.0, 2),
                "peak_rss_mb": round(peak)}
    span, copied = max(hi[0] - lo[0], 1e-3), max(1, hi[1] - lo[1])
    return {"records_per_s": round(copied / span), "cpu_s_per_m": round((hi[2] - lo[2]) / copied * 1e6, 2),
            "time_to_first_record_s": round(first or 0.0, 2), "peak_rss_mb": round(peak)}


def records_per_batch(bootstrap: str, topic: str, partition: int = 0) -> float:
    """The mean records per batch in the first fetch of one source partition (read with the wire client)."""
    fetcher = BatchFetcher(Brokers(bootstrap, {}, "source"))
    try:
        fetcher.assign({(topic, partition): 0})
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            for part in fetcher.poll(1.0):
                if part.batches:
                    return sum(map(record_count, part.batches)) / len(part.batches)
        raise RuntimeError(f"{topic}[{partition}]: nothing fetched within 30 s")
    finally:
        fetcher.close()


def _source(src: Cluster, shape: Shape, topic: str, records: int, linger_ms: int = 20) -> float:
    """The backlog of a partitions run; returns the records per batch of its first partition."""
    src.create_all(shape.names(topic), shape.per_topic)
    plain_source_to(src.bootstrap, shape.keys(topic), records, linger_ms)
    return round(records_per_batch(src.bootstrap, *shape.keys(topic)[0]), 1)


def _row(system: str, shape: Shape, records: int, per_batch: float) -> dict[str, Any]:
    return {"system": system, "partitions": shape.partitions, "topics": shape.topics, "records": records,
            "records_per_batch": per_batch}


def mm2_partitions_run(src: Cluster, dst: Cluster, work: Path, size: int | Shape, records: int, rep: int,
                       linger_ms: int = 20) -> dict[str, Any]:
    """MirrorMaker 2 (tuned as in the backlog benchmark, bench/mm2.py) on the same backlog shape."""
    shape = Shape.of(size)
    topic, alias = f"mm2scale{shape.label}r{rep}", f"mp{shape.label}r{rep}"
    work.mkdir(parents=True, exist_ok=True)
    per_batch = _source(src, shape, topic, records, linger_ms)
    t0 = time.monotonic()
    proc = start_mm2(src.bootstrap, dst.bootstrap, alias, shape.pattern(topic), work, heap=MM2_HEAP)
    try:
        row = copy_rate([proc], EndWatcher(dst.bootstrap, "", keys=shape.keys(topic, f"{alias}.")), records, t0)
        row["rss_mb"] = round(rss_mb(proc.pid), 1)
    finally:
        stop([proc])
        drop(src, dst, shape.names(topic), shape.names(topic, f"{alias}."))
    return _row("mm2", shape, records, per_batch) | row


def partitions_run(src: Cluster, dst: Cluster, work: Path, size: int | Shape, records: int, rep: int,
                   linger_ms: int = 20, data_path: str = "records") -> dict[str, Any]:
    shape = Shape.of(size)
    topic, alias = f"scale{shape.label}r{rep}{data_path[0]}", f"sp{shape.label}r{rep}{data_path[0]}"
    work.mkdir(parents=True, exist_ok=True)
    per_batch = _source(src, shape, topic, records, linger_ms)
    extra = ["offset.map.snapshot.interval.seconds = 5", "emit.checkpoints.enabled = false",
             f"replication.data.path = {data_path}"]
    t0 = time.monotonic()
    procs, _ = start_mirror_core(src.bootstrap, dst.bootstrap, shape.pattern(topic), 1, alias, work, extra, STATIC)
    try:
        system = "mirror_core" if data_path == "records" else f"mirror_core {data_path}"
        ends = EndWatcher(dst.bootstrap, "", keys=shape.keys(topic, f"{alias}."))
        row: dict[str, Any] = _row(system, shape, records, per_batch) | copy_rate(procs, ends, records, t0) | {
            "rss_mb": round(rss_mb(procs[0].pid), 1)}
        row["restart_s"], procs = restart_time(src, dst, shape, topic, alias, work, extra, procs)
        row["join_stall_s"], procs = join_stall(src, dst, shape, topic, alias, work, extra, procs)
        keys = shape.keys(topic)
        groups = commit_groups(src.bootstrap, f"g{alias}", keys, src.marks_of(keys), shape.partitions)
        row.update(time_translate(work / f"{alias}.properties", alias, groups))
        return row
    finally:
        stop(procs)
        drop(src, dst, shape.names(topic), shape.names(topic, f"{alias}."))


def drop(src: Cluster, dst: Cluster, topics: str | Sequence[str], remotes: str | Sequence[str]) -> None:
    """Delete a run's topics: thousands of partitions per run would otherwise pile up on the brokers."""
    for cluster, names in ((src, topics), (dst, remotes)):
        names = [names] if isinstance(names, str) else list(names)
        for name, future in cluster.admin.delete_topics(names).items():
            try:
                future.result(120)
            except Exception as exc:  # reported, not fatal: the next run uses other names
                print(f"scale bench: could not delete {name}: {exc}", flush=True)


def _log_text(work: Path, alias: str) -> str:
    return (work / f"{alias}-0.log").read_text(errors="replace")


def history_run(src: Cluster, dst: Cluster, work: Path, records: int, rep: int) -> dict[str, Any]:
    topic, alias, partitions = f"hist{records}r{rep}", f"sh{records}r{rep}", 8
    work.mkdir(parents=True, exist_ok=True)
    remote = f"{alias}.{topic}"
    src.create(topic, partitions)
    t0 = time.monotonic()
    txns = streams_source(src.bootstrap, topic, records, partitions)
    gen_s = time.monotonic() - t0
    extra = ["offset.map.snapshot.interval.seconds = 3", "emit.checkpoints.enabled = false"]
    procs, _ = start_mirror_core(src.bootstrap, dst.bootstrap, topic, 1, alias, work, extra, STATIC)
    try:
        _wait(lambda: dst.total(remote, partitions) >= records, 3600, "the history copied")
        # Retention trims the oldest half of every source partition.
        marks = src.marks(topic, partitions)
        futures = src.admin.delete_records([TopicPartition(topic, p, (lo + h) // 2) for p, (lo, h) in enumerate(marks)])
        for f in futures.values():
            f.result(60)
        # A round that started after the deletion has finished once the one after it starts.
        started = _log_text(work, alias).count("offset map round started")
        _wait(lambda: _log_text(work, alias).count("offset map round started") >= started + 2, 300,
              "a snapshot round after the source was trimmed")
        kept = [int(n) for n in re.findall(r"runs pruned, (\d+) kept", _log_text(work, alias))][-1]
        # Every entry ever written (the log end; trimming moves only its start).
        written = dst.marks(f"mirror-core.offset-syncs.{alias}.internal", 1)[0][1]
        pruned = sum(int(n) for n in re.findall(r"(\d+) runs pruned", _log_text(work, alias)))
        row: dict[str, Any] = {"records": records, "transactions": txns, "generate_s": round(gen_s, 1),
                               "runs_written": written, "runs_pruned": pruned, "runs_kept": kept,
                               "rss_mb": round(rss_mb(procs[0].pid), 1)}
        row["restart_s"], procs = restart_time(src, dst, Shape(1, partitions), topic, alias, work, extra, procs)
        row["rss_after_restart_mb"] = round(rss_mb(procs[0].pid), 1)
        keys = Shape(1, partitions).keys(topic)
        groups = commit_groups(src.bootstrap, f"g{alias}", keys, src.marks_of(keys), records)
        row.update(time_translate(work / f"{alias}.properties", alias, groups))
        return row
    finally:
        stop(procs)
        drop(src, dst, topic, remote)


_BUILD = """
import sys
from pathlib import Path
from mirror_core.stores.offset_map import PartitionMap
def rss():
    return next(int(x.split()[1]) for x in Path("/proc/self/status").read_text().splitlines() if x.startswith("VmRSS:"))
n, before = int(sys.argv[2]), rss()
if sys.argv[1] == "lists":  # the former representation: two lists of Python ints
    kept = ([], [])
    for i in range(n):
        kept[0].append(i * 13 + 100_000_000); kept[1].append(i * 12 + 100_000_000)
else:
    kept = PartitionMap()
    for i in range(n):
        kept.add(i * 13 + 100_000_000, i * 12 + 100_000_000)
print((rss() - before) * 1024 / n)
"""


def memory_per_run(runs: int = 1_000_000) -> dict[str, float]:
    """Resident bytes per offset-map run, each representation built in a fresh process."""
    out: dict[str, float] = {"runs": runs}
    for kind in ("lists", "arrays"):
        done = subprocess.run([sys.executable, "-c", _BUILD, kind, str(runs)], capture_output=True, text=True,
                              check=True, cwd=Path(__file__).resolve().parents[1])
        out[f"{kind}_rss_bytes_per_run"] = round(float(done.stdout), 1)
    return out


def run_scale(src_bs: str, dst_bs: str, work: Path, args: Any, on_row: Any) -> dict[str, Any]:
    """Every size in turn; ``on_row(out)`` after each (a long run keeps what it measured so far)."""
    src, dst = Cluster(src_bs), Cluster(dst_bs)
    out: dict[str, Any] = {"memory": memory_per_run(), "partitions": [], "history": []}
    for n in (int(x) for x in args.scale_history.split(",") if x.strip()):
        for rep in range(args.scale_runs):
            out["history"].append(history_run(src, dst, work / f"h{n}-{rep}", n, rep) | {"rep": rep})
            print(out["history"][-1], flush=True)
            on_row(out)
    # Sizes and systems take turns within each repetition, so a change in the machine's load meets all.
    sizes = [Shape.parse(x) for x in args.scale_partitions.split(",") if x.strip()]
    for rep in range(args.scale_runs):
        for size in sizes:
            runs: list[tuple[str, Any]] = [
                (f"partitions_run_{path}", partial(partitions_run, data_path=path))
                for path in (x.strip() for x in args.scale_data_paths.split(",")) if path]
            runs += [("mm2_partitions_run", mm2_partitions_run)] if args.mm2 else []
            if rep % 2:  # who goes first alternates: a drift in the machine's load meets all alike
                runs.reverse()
            for label, run in runs:
                out["partitions"].append(run(src, dst, work / f"{label}{size.label}-{rep}", size, args.scale_records,
                                             rep, args.scale_source_linger_ms) | {"rep": rep})
                print(out["partitions"][-1], flush=True)
                on_row(out)
    return out


def _spread(rows: list[dict[str, Any]], key: str) -> str:
    values = [r[key] for r in rows if r.get(key) is not None]  # None: not measured in that run (copy_rate)
    if not values:
        return "—"
    med = statistics.median(values)
    cell = _number(med) if len(values) == 1 else f"{_number(med)} ({_number(min(values))} to {_number(max(values))})"
    return cell if len(values) == len(rows) else f"{cell}, {len(rows) - len(values)} of {len(rows)} not measured"


def scale_markdown(data: dict[str, Any], meta: dict[str, str]) -> str:
    mem = data["memory"]
    lines = [f"# Scale benchmark ({meta['date']})", "", f"Load before: `{meta.get('load_before', '?')}`; after: "
             f"`{meta.get('load_after', '?')}`. Brokers' data in {meta.get('broker_dir', '?')}. "
             f"One mirror_core process, at-least-once, 100-byte values, the partitions series' source written with "
             f"linger.ms {meta.get('source_linger_ms', '20')}; "
             "median (min to max) over the repetitions.", "",
             f"In-memory offset map: {mem['arrays_rss_bytes_per_run']} resident bytes per run in typed arrays, "
             f"{mem['lists_rss_bytes_per_run']} in lists of Python ints (the former representation); "
             f"{mem['runs']:,} runs built in a fresh process each.", ""]
    hist_keys = ["transactions", "runs_written", "runs_kept", "restart_s", "map_load_s", "translate_1_group_s",
                 "translate_100_groups_s", "exact_partitions", "rss_mb", "rss_after_restart_mb"]
    if data["history"]:
        lines += ["## Gappy history (transactions every 100 ms or 1,000 records, 8 partitions, oldest half "
                  "deleted)", "",
                  "| records | " + " | ".join(hist_keys) + " |", "|---:|" + "---:|" * len(hist_keys)]
        for n in sorted({r["records"] for r in data["history"]}):
            rows = [r for r in data["history"] if r["records"] == n]
            lines.append(f"| {n:,} | " + " | ".join(_spread(rows, k) for k in hist_keys) + " |")
        lines.append("")
    part_keys = ["records_per_batch", "records_per_s", "time_to_first_record_s", "restart_s", "join_stall_s",
                 "rss_mb", "cpu_s_per_m", "map_load_s", "translate_1_group_s", "translate_100_groups_s",
                 "exact_partitions"]
    if data["partitions"]:
        lines += ["## Partitions (one topic of N, or T topics x P; MirrorMaker 2 where it applies: throughput, "
                  "CPU, RSS)", "",
                  "| system | partitions | records | " + " | ".join(part_keys) + " |",
                  "|---|---:|---:|" + "---:|" * len(part_keys)]
        systems = sorted({r.get("system", "mirror_core") for r in data["partitions"]}, reverse=True)
        for n, topics in sorted({(r["partitions"], r.get("topics", 1)) for r in data["partitions"]}):
            size = f"{n:,}" if topics == 1 else f"{topics:,} x {n // topics:,}"
            for system in systems:
                rows = [r for r in data["partitions"] if r["partitions"] == n and r.get("topics", 1) == topics
                        and r.get("system", "mirror_core") == system]
                if rows:
                    lines.append(f"| {system} | {size} | {rows[0]['records']:,} | " + " | ".join(
                        _spread(rows, k) if k in rows[0] else "—" for k in part_keys) + " |")
        lines.append("")
    return "\n".join(lines) + "\n"


def _number(value: float) -> str:
    """1,698,355 rather than 1.69836e+06 (rates and counts); 0.45 as it is."""
    return f"{value:,.0f}" if abs(value) >= 10_000 else f"{value:g}"


def merge(files: list[Path]) -> str:
    """One table from several ``--only scale`` runs (a size measured in more than one shows its spread)."""
    import json

    datas = [json.loads(f.read_text()) for f in files]
    merged: dict[str, Any] = {"memory": datas[0]["memory"], "history": [], "partitions": []}
    for d in datas:
        merged["history"] += d["history"]
        merged["partitions"] += d["partitions"]
    loads = "; ".join(f"{f.name}: {d['meta']['load_before']} to {d['meta']['load_after']}"
                      for f, d in zip(files, datas, strict=True))
    places = sorted({d["meta"].get("broker_dir", "?") for d in datas})
    if len(places) > 1:  # a disk run and an in-memory one measure different brokers: not one table
        raise SystemExit(f"bench.scale --merge: the runs kept the brokers' data in different places: {places}")
    text = scale_markdown(merged, {"date": datas[0]["meta"]["date"], "load_before": loads, "load_after": "(per run)",
                                   "broker_dir": places[0]})
    return text + "\nMerged from " + ", ".join(f"`bench/results/{f.name}`" for f in files) + \
        " (`python -m bench.scale --merge <json>...`), one `--only scale` run each.\n"


def run_part(src: str, dst: str, work: Path, args: Any) -> None:
    """The part (``--only scale``): its own results files, rewritten after each row (a long run keeps what it
    measured): ``scale-<UTC time>.json`` and ``scale-<date>[-<broker dir>].md``."""
    load_before = Path("/proc/loadavg").read_text().strip()
    began = time.gmtime()
    out = Path(args.out)

    def write(data: dict[str, Any]) -> None:
        meta = {"date": time.strftime("%Y-%m-%d %H:%M UTC", began), "load_before": load_before,
                "load_after": Path("/proc/loadavg").read_text().strip(), "broker_dir": describe_place(work),
                "source_linger_ms": str(args.scale_source_linger_ms)}
        write_result(out, f"scale-{utc_stamp(began)}.json", json.dumps({"meta": meta, **data}, indent=2))
        place = f"-{Path(args.broker_dir).name}" if args.broker_dir else ""  # a disk run's file stays
        write_result(out, f"scale-{time.strftime('%Y-%m-%d', began)}{place}.md", scale_markdown(data, meta))

    write(run_scale(src, dst, work, args, write))


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--merge":
        sys.stdout.write(merge([Path(a) for a in sys.argv[2:]]))
    else:
        sys.exit("usage: python -m bench.scale --merge <scale-*.json>... (runs: make bench BENCH_ARGS='--only scale')")

