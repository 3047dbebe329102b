"""What every benchmark shares: the clusters, starting and stopping a mirror, the load, sampling the target, the
CPU and memory of processes, and where results go.

The parts of ``make bench`` (one module each, run by bench/run.py) and the probes (bench/probes/) import this
module; it imports nothing of bench, so no benchmark module can form a cycle through it.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from mirror_core import __version__
from mirror_core.devcluster.kafka_dist import KAFKA_VERSION
from mirror_core.devcluster.local_cluster import LocalCluster, free_port
from mirror_core.kafka_io import log_ends_batch

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
PARTITIONS = 8
RATE = 2000  # records/s of the steady load of the restart and scale parts (250 per partition)
CLK_TCK = os.sysconf("SC_CLK_TCK")
Starter = Callable[[str, Path], list[subprocess.Popen[bytes]]]  # (topic, workdir) -> processes


# -- processes: CPU, memory, machine load -------------------------------------------------------------------

def cpu_seconds(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / CLK_TCK
        except (FileNotFoundError, IndexError):
            pass
    return total


def rss_mb(pid: int) -> float:
    """Resident memory of ``pid``; 0 once it is gone (the caller says why)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return 0.0
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def load_average(sep: str = "/") -> str:
    """The machine's 1/5/15-minute load averages (the machine is shared: every result notes them)."""
    return sep.join(f"{x:.1f}" for x in os.getloadavg())


def stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        p.terminate()
    for p in procs:
        try:
            p.wait(60)
        except subprocess.TimeoutExpired:
            p.kill()


# -- clusters and topics --------------------------------------------------------------------------------------

def bench_cluster(name: str, base: Path) -> LocalCluster:
    """A single-node KRaft cluster for a benchmark, its whole heap from the start as Kafka's own start script
    gives it (-Xms = -Xmx, 1 GiB; ``BENCH_BROKER_HEAP`` sets another). Until 2026-12-04 the benchmarks' brokers
    grew their heap from 128 MB, as the development clusters do: at 2,000 partitions (230-280 MB of old
    generation) G1 then marked concurrently for most of a copy, 0.15-0.36 of a core of the target broker."""
    heap = os.environ.get("BENCH_BROKER_HEAP", "1g")
    return LocalCluster(name, base / name, free_port(), free_port(), heap=heap, jvm_options=[f"-Xms{heap}"])


@contextmanager
def local_clusters(prefix: str) -> Iterator[tuple[Path, list[LocalCluster]]]:
    """A work directory with a started source and target (single-node KRaft, :func:`bench_cluster`), stopped on
    exit."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        work = Path(tmp)
        clusters = [bench_cluster(n, work) for n in ("source", "target")]
        try:
            for c in clusters:
                c.start()
            yield work, clusters
        finally:
            for c in clusters:
                c.stop()


def describe_place(path: Path) -> str:
    """The file-system type holding ``path`` (the brokers' data), from /proc/mounts: the longest mount
    point that contains it."""
    best, kind = "", "?"
    for line in Path("/proc/mounts").read_text().splitlines():
        _, point, fstype, *_ = line.split()
        if str(path.resolve()).startswith(point.rstrip("/") + "/") and len(point) > len(best):
            best, kind = point, fstype
    return f"{path.parent} ({kind})"


def create_topic(bootstrap: str, topic: str, partitions: int = PARTITIONS) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # keep a reference: the future dies with it
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)


# -- the mirror -----------------------------------------------------------------------------------------------

def start_mirror_core(src: str, dst: str, topic: str, workers: int, alias: str, workdir: Path,
                      extra: list[str], args: tuple[str, ...] = (), replication_factor: int = 1,
                      ) -> tuple[list[subprocess.Popen[bytes]], list[Path]]:
    """``workers`` mirror_core processes of one flow ``alias->target`` copying ``topic``, each logging to
    ``<workdir>/<alias>-<n>.log``; ``extra``: more config lines."""
    config = workdir / f"{alias}.properties"
    config.write_text("\n".join([
        f"clusters = {alias}, target", f"{alias}.bootstrap.servers = {src}", f"target.bootstrap.servers = {dst}",
        f"{alias}->target.enabled = true", f"{alias}->target.topics = {topic}", "emit.heartbeats.enabled = false",
        f"replication.factor = {replication_factor}", *extra]) + "\n")
    procs, logs = [], []
    for w in range(workers):
        path = workdir / f"{alias}-{w}.log"
        log = open(path, "wb")  # noqa: SIM115
        procs.append(subprocess.Popen([sys.executable, "-m", "mirror_core", "run", "--config", str(config),
                                       "--metrics-port", str(free_port()), *args], stdout=log, stderr=subprocess.STDOUT,
                                      cwd=REPO))
        logs.append(path)
    return procs, logs


def mirror_core_starter(src: str, dst: str, alias: str, *extra: str) -> Starter:
    """One mirror_core process per call, checkpointing every second (the latency and failover parts)."""
    return lambda topic, wd: start_mirror_core(src, dst, topic, 1, alias, wd,
                                               ["emit.checkpoints.interval.seconds = 1", *extra])[0]


# -- load and the target's progress ---------------------------------------------------------------------------

class SteadyLoad:
    """A steady load on every partition for as long as the measurement lasts."""

    def __init__(self, bootstrap: str, topic: str, partitions: int = PARTITIONS, rate: int = RATE,
                 value: bytes = b"x" * 100, keys: list[tuple[str, int]] | None = None) -> None:
        """``keys``: (topic, partition) pairs over several topics, in place of ``topic``'s partitions."""
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        self.keys = keys if keys is not None else [(topic, p) for p in range(partitions)]
        self.rate, self.value = rate, value
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        start, sent = time.monotonic(), 0
        while not self.stopped.is_set():
            due = int((time.monotonic() - start) * self.rate)
            while sent < due:
                try:
                    topic, partition = self.keys[sent % len(self.keys)]
                    self.producer.produce(topic, value=self.value, partition=partition)
                except BufferError:  # the broker is behind: slow down rather than die
                    break
                sent += 1
            self.producer.poll(0)
            time.sleep(0.005)
        self.producer.flush(30)

    def __enter__(self) -> SteadyLoad:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopped.set()
        self.thread.join(60)


def end_total(consumer: Consumer, topic: str, partitions: int = PARTITIONS) -> int:
    """The sum of the topic's end offsets; 0 while it does not answer (not created yet)."""
    total = 0
    for p in range(partitions):
        try:
            total += consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=5)[1]
        except Exception:
            return 0
    return total


def wait_visible(dst: str, remote: str, minimum: int, timeout: float) -> None:
    """Until ``remote`` holds at least ``minimum`` records (end offsets) on ``dst``."""
    c = Consumer({"bootstrap.servers": dst, "group.id": "bench-wait", "log_level": "0"})
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if end_total(c, remote) >= minimum:
                return
            time.sleep(0.2)
        raise RuntimeError(f"{remote}: fewer than {minimum} records after {timeout:.0f}s")
    finally:
        c.close()


def offset_map_entries(dst: str, alias: str) -> int:
    """Entries in the flow's offset map (at-least-once: no transaction markers in that topic)."""
    c = Consumer({"bootstrap.servers": dst, "group.id": "bench-map", "log_level": "0"})
    try:
        return int(c.get_watermark_offsets(TopicPartition(f"mirror-core.offset-syncs.{alias}.internal", 0),
                                           timeout=10)[1])
    finally:
        c.close()


class TargetEnds:
    """The end offset of every partition of ``remote``, -1 where the cluster does not know it (yet): one
    batched ListOffsets per sample, cheap enough every 50 ms at 2,000 partitions. ``committed``: the
    last stable offsets, for a copier whose records count once their transaction commits.

    A client that asked before the topic existed keeps answering "unknown", so the client that samples is made
    only once a metadata request names every partition, and then kept for good: a client dropped while sampling
    is destroyed whenever the garbage collector gets to it, and its destroy blocked the sampling thread for 3 s
    (restart figures 2 s too high in about half the runs, the copy itself having resumed in 1 s)."""

    def __init__(self, bootstrap: str, remote: str, partitions: int = PARTITIONS, committed: bool = False,
                 keys: list[tuple[str, int]] | None = None) -> None:
        """``keys``: (topic, partition) pairs over several topics, in place of ``remote``'s partitions."""
        self.bootstrap, self.committed = bootstrap, committed
        self.keys = keys if keys is not None else [(remote, p) for p in range(partitions)]
        self.admin: AdminClient | None = None
        self._probe: AdminClient | None = None  # metadata only, until every partition is known

    def _known(self) -> bool:
        self._probe = self._probe or AdminClient({"bootstrap.servers": self.bootstrap, "log_level": "0"})
        try:
            topics = self._probe.list_topics(timeout=5).topics
        except Exception:  # (the cluster busy or away: asked again at the next sample)
            return False
        return all(t in topics and p in topics[t].partitions and topics[t].error is None for t, p in self.keys)

    def now(self) -> list[int]:
        if self.admin is None:
            if not self._known():
                return [-1] * len(self.keys)
            self.admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": "0"})
        try:
            ends = log_ends_batch(self.admin, self.keys, committed=self.committed)
        except Exception:  # (asked again at the next sample)
            ends = {}
        return [ends.get(k, -1) for k in self.keys]

    def wait_all_past(self, marks: list[int], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while any(e <= m for e, m in zip(self.now(), marks, strict=True)):
            if time.monotonic() > deadline:
                raise RuntimeError("the mirror did not copy every partition in time")
            time.sleep(0.05)

    def longest_stall(self, seconds: float) -> float:
        """The longest time any partition made no progress during the next ``seconds``."""
        n = len(self.keys)
        last, since = self.now(), [time.monotonic()] * n
        worst = [0.0] * n
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            time.sleep(0.05)
            now, t = self.now(), time.monotonic()
            for p in range(n):
                if now[p] > last[p]:
                    last[p], since[p] = now[p], t
                worst[p] = max(worst[p], t - since[p])
        return max(worst)


# -- results --------------------------------------------------------------------------------------------------

def as_rows(items: list[Any]) -> list[dict[str, Any]]:
    """Result dataclasses as the dictionaries a results JSON file holds."""
    return [asdict(i) for i in items]


def names(value: str) -> list[str]:
    """A comma-separated command-line list, blanks dropped."""
    return [x.strip() for x in value.split(",") if x.strip()]


def utc_stamp(when: time.struct_time | None = None) -> str:
    """The time in a results file's name: ``20261206T072103Z``."""
    return time.strftime("%Y%m%dT%H%M%SZ", when or time.gmtime())


def run_meta() -> dict[str, str]:
    """What every results file says about the run: when, which Kafka and mirror_core, which machine."""
    return {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "kafka": KAFKA_VERSION,
            "mirror_core": __version__, "machine": f"{platform.machine()}, {os.cpu_count()} cores, "
            f"{platform.python_implementation()} {platform.python_version()}"}


def write_result(out: Path | str, name: str, text: str) -> Path:
    """``text`` as ``<out>/<name>`` (the directory made if need be); the path written."""
    path = Path(out) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path
