"""Test harness: real local KRaft clusters, mirror processes, and record helpers.

The same ``LocalCluster`` code backs ``mirror-core dev up``; here every cluster gets free ports and a
directory under pytest's temporary root, which pytest keeps after the run (logs included).
"""

from __future__ import annotations

import json
import os
import signal
import struct
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType

from mirror_core.devcluster.local_cluster import LocalCluster, free_port
from mirror_core.replication.slots import slot_topic

REPO = Path(__file__).resolve().parents[1]


# ACLs can be created and listed (topic-config sync copies them); the test clients are PLAINTEXT
# (User:ANONYMOUS), made super users so ACLs never get in their way.
AUTHORIZER = {
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "super.users": "User:ANONYMOUS",
    "allow.everyone.if.no.acl.found": "true",
}


# An application that is not a super user: SCRAM user ``app`` on a SASL_PLAINTEXT listener (new_cluster
# with app_user=True). ACLs apply to it, e.g. the cutover's DENY WRITE; with no ACL on a topic it may write.
APP_USER, APP_PASSWORD = "app", "app-pw-5521"


def new_cluster(name: str, root: Path, app_user: bool = False, wan: bool = False, **extra: str) -> LocalCluster:
    if app_user:
        extra = {"sasl.enabled.mechanisms": "SCRAM-SHA-512", **extra,
                 "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config":
                     "org.apache.kafka.common.security.scram.ScramLoginModule required;"}
    cluster = LocalCluster(name=name, base_dir=root / name, port=free_port(), controller_port=free_port(),
                           extra_props={**AUTHORIZER, **extra}, heap="512m")
    if app_user:
        cluster.extra_listeners["SASL_PLAINTEXT"] = free_port()
        cluster.format_args.extend(["--add-scram", f"SCRAM-SHA-512=[name={APP_USER},password={APP_PASSWORD}]"])
    if wan:  # a WAN listener advertised on a port a toxiproxy proxy will listen on (tests/wan_harness.py)
        cluster.extra_listeners["WAN"] = free_port()
        cluster.advertised_ports["WAN"] = free_port()
    return cluster


def app_client(cluster: LocalCluster) -> dict[str, str]:
    """librdkafka settings of the ``app`` user (a cluster made with ``app_user=True``)."""
    return {"bootstrap.servers": cluster.bootstrap_for("SASL_PLAINTEXT"), "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": APP_USER, "sasl.password": APP_PASSWORD}


def unique(prefix: str = "t") -> str:
    return f"{prefix}{uuid.uuid4().hex[:8]}"


def wait_until(predicate: Callable[[], Any], timeout: float, interval: float = 0.25, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = predicate()
        except KafkaException as exc:  # e.g. a just-created topic without a leader yet: not ready
            last = exc
        else:
            if last:
                return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what} (last value: {last!r})")


def wait_until_equal(get: Callable[[], Any], want: Any, timeout: float, what: str) -> None:
    """Waits until ``get()`` returns ``want``; a timeout names the value it returned last (a bool predicate's
    failure would say only False)."""
    seen: list[Any] = [None]

    def equal() -> bool:
        seen[0] = get()
        return bool(seen[0] == want)

    try:
        wait_until(equal, timeout, what=what)
    except AssertionError as exc:
        raise AssertionError(f"{exc}: it was {seen[0]!r}, not {want!r}") from None


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, "log_level": "3"})


def create_topic(bootstrap: str, name: str, partitions: int = 1, config: dict[str, str] | None = None) -> None:
    client = admin(bootstrap)  # keep a reference: the future dies with its client
    client.create_topics([NewTopic(name, partitions, 1, config=config or {})])[name].result(30)
    wait_until(lambda: name in admin(bootstrap).list_topics(timeout=5).topics, 30, what=f"topic {name}")


def delete_topic(bootstrap: str, name: str) -> None:
    """Delete ``name`` and wait until the cluster no longer lists it."""
    client = admin(bootstrap)  # keep a reference: the future dies with its client
    client.delete_topics([name])[name].result(30)
    wait_until(lambda: name not in admin(bootstrap).list_topics(timeout=5).topics, 30, what=f"{name} deleted")


#: the slot topic of the session's dc1->dc2 flows (exactly-once)
SLOTS = slot_topic("dc1", "dc2")


def slot_topic_of(dc2: str, slots: int, topic: str = SLOTS) -> None:
    """The session's dc1->dc2 flows share their slot topic (one partition per slot), and slots cannot be fewer than
    before: a test that needs ``slots`` has it made afresh (other tests leave it at the default 8). ``topic``:
    another flow's slot topic on its target."""
    if topic in topics(dc2):
        if partition_count(dc2, topic) == slots:
            return
        delete_topic(dc2, topic)
    create_topic(dc2, topic, slots)


def alter_topic(bootstrap: str, topic: str, configs: Mapping[str, str | None]) -> None:
    """Incremental config changes of ``topic``, in one request: a value SETs, None DELETEs (back to the cluster's
    default)."""
    res = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET if v is not None else AlterConfigOpType.DELETE)
        for k, v in configs.items()])
    client = admin(bootstrap)  # keep a reference: the future dies with its client
    client.incremental_alter_configs([res])[res].result(10)


def topics(bootstrap: str) -> set[str]:
    return set(admin(bootstrap).list_topics(timeout=10).topics)


def partition_count(bootstrap: str, topic: str) -> int:
    md = admin(bootstrap).list_topics(topic=topic, timeout=10).topics.get(topic)
    return 0 if md is None or md.error is not None else len(md.partitions)


def producer(bootstrap: str, **extra: Any) -> Producer:
    conf = {"bootstrap.servers": bootstrap, "linger.ms": 5, "queue.buffering.max.messages": 2_000_000,
            "enable.idempotence": True}
    conf.update(extra)
    return Producer(conf)


def produce_sequence(bootstrap: str, topic: str, partitions: int, count: int, start: int = 0,
                     value_size: int = 0, **client: Any) -> None:
    """Records ``seq-<i>`` (key ``k<i>``) spread round-robin over partitions, with a header per record
    (``client``: more producer settings, e.g. another principal's)."""
    p = producer(bootstrap, **client)
    pad = b"x" * value_size
    for i in range(start, start + count):
        while True:
            try:
                p.produce(topic, value=b"seq-%d" % i + pad, key=b"k%d" % i, partition=i % partitions,
                          headers=[("seq", str(i).encode())])
                break
            except BufferError:
                p.poll(0.1)
        if i % 5000 == 0:
            p.poll(0)
    assert p.flush(60) == 0


@dataclass(frozen=True)
class Rec:
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    timestamp: int


def end_offsets(bootstrap: str, topic: str, isolation: str = "read_committed") -> dict[int, int]:
    """Each partition's end as a reader of ``isolation`` sees it: librdkafka asks ListOffsets with the
    client's isolation level, so read_committed (its default) answers the last stable offset — below
    an open transaction — and read_uncommitted the high watermark."""
    n = partition_count(bootstrap, topic)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "harness", "log_level": "3",
                  "isolation.level": isolation})
    try:
        return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(n)}
    finally:
        c.close()


def settled(bootstrap: str, topic: str) -> bool:
    """No transaction on ``topic`` is open or waiting for its markers (written after EndTxn has answered): a
    read_committed reader sees every partition to its end."""
    return end_offsets(bootstrap, topic) == end_offsets(bootstrap, topic, "read_uncommitted")


def stored_batches(cluster: LocalCluster, topic: str) -> Iterator[tuple[int, bytes]]:
    """(partition, the record batch's bytes) of every batch the broker stored for ``topic``, read from its log
    segments (what the clients do not expose: batch boundaries, the batch header)."""
    for seg in sorted((cluster.base_dir / "data").glob(f"{topic}-*/*.log")):
        partition = int(seg.parent.name.rsplit("-", 1)[1])
        data, pos = seg.read_bytes(), 0
        while pos + 61 <= len(data):
            length = struct.unpack(">i", data[pos + 8:pos + 12])[0]
            yield partition, data[pos:pos + 12 + length]
            pos += 12 + length


def produce_transactions(bootstrap: str, topic: str, partitions: int, count: int, per_txn: int) -> int:
    """``count`` transactions of ``per_txn`` records over every partition, every other one aborted: the
    gappy, partly aborted source a Kafka Streams application leaves. Returns how many were committed."""
    p = producer(bootstrap, **{"transactional.id": f"{topic}-txn"})
    p.init_transactions(30)
    committed = 0
    for t in range(count):
        p.begin_transaction()
        for i in range(per_txn):
            p.produce(topic, value=b"txn-%d-%d" % (t, i), key=b"t%d" % i, partition=i % partitions,
                      headers=[("txn", str(t).encode())])
        p.flush(30)  # nothing in flight when aborting (Kafka 4: INVALID_TXN_STATE otherwise)
        if t % 2:
            p.abort_transaction(30)
        else:
            p.commit_transaction(30)
            committed += per_txn
    return committed


def producer_ids(cluster: LocalCluster, topic: str) -> dict[int, set[int]]:
    """Per partition, the producer ids of the record batches the broker stored (the header's producerId)."""
    out: dict[int, set[int]] = {}
    for partition, batch in stored_batches(cluster, topic):
        out.setdefault(partition, set()).add(struct.unpack(">q", batch[43:51])[0])
    return out


def batch_sizes(cluster: LocalCluster, topic: str) -> list[int]:
    """The size in bytes of every record batch the broker stored for ``topic`` (what max.message.bytes limits)."""
    return [len(batch) for _, batch in stored_batches(cluster, topic)]


def read_all(bootstrap: str, topic: str, isolation: str = "read_committed", timeout: float = 60) -> list[Rec]:
    """Every record of a topic (all partitions, up to the current end), in partition/offset order."""
    ends = end_offsets(bootstrap, topic, isolation)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("reader"), "enable.auto.commit": False,
                  "isolation.level": isolation, "log_level": "3"})
    out: list[Rec] = []
    try:
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in ends])
        pending = {p for p, e in ends.items() if e > 0}
        deadline = time.monotonic() + timeout
        while pending and time.monotonic() < deadline:
            for m in c.consume(10000, 0.5):
                if m.error():
                    continue
                if m.offset() >= ends[m.partition()]:
                    continue
                out.append(Rec(m.partition(), m.offset(), m.key(), m.value(),
                               tuple((k, v) for k, v in (m.headers() or [])), m.timestamp()[1]))
            for p in list(pending):
                pos = c.position([TopicPartition(topic, p)])[0].offset
                if pos >= ends[p]:
                    pending.discard(p)
        assert not pending, f"could not read {topic} partitions {pending} to the end"
    finally:
        c.close()
    return sorted(out, key=lambda r: (r.partition, r.offset))



def assert_same_records(src: str, dst: str, topic: str, remote: str, replayed: bool = False) -> None:
    """Every record of ``topic`` on ``src`` is on ``remote`` on ``dst``: same partition, key, value, headers,
    timestamp, in the same order (``replayed``: at-least-once after a replay, the copies of a record after its first
    left out)."""
    source, target = read_all(src, topic), read_all(dst, remote)
    if replayed:
        firsts: dict[tuple[Any, ...], Rec] = {}
        for t in target:
            firsts.setdefault((t.partition, t.key, t.value, t.headers, t.timestamp), t)
        target = list(firsts.values())
    assert len(target) == len(source) > 0
    for s, t in zip(source, target, strict=True):
        assert (t.partition, t.key, t.value, t.headers, t.timestamp) == (s.partition, s.key, s.value, s.headers,
                                                                        s.timestamp)


def write_config(path: Path, clusters: dict[str, str], lines: Iterable[str]) -> Path:
    text = [f"clusters = {', '.join(clusters)}"]
    text += [f"{alias}.bootstrap.servers = {bs}" for alias, bs in clusters.items()]
    text += list(lines)
    path.write_text("\n".join(text) + "\n")
    return path


def mirror_env(**extra: str) -> dict[str, str]:
    """The environment of a ``mirror-core run`` the test starts: MIRROR_CORE_DB_URL (set for the DAG tests)
    is left out, so a mirror obeys a control plane only when its test passes ``--state-db``."""
    env = {k: v for k, v in os.environ.items() if k != "MIRROR_CORE_DB_URL"}
    env.update(PYTHONUNBUFFERED="1", **extra)
    return env


class MirrorProcess:
    """A real ``mirror-core run`` subprocess with its own metrics port and log file."""

    def __init__(self, config: Path, log_dir: Path, name: str = "mirror", args: Sequence[str] = ()) -> None:
        self.config = config
        self.args = list(args)
        self.port = free_port()
        self.log_path = log_dir / f"{name}-{uuid.uuid4().hex[:6]}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> MirrorProcess:
        log = open(self.log_path, "ab")  # noqa: SIM115 - owned by the child
        env = mirror_env()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "mirror_core", "run", "--config", str(self.config),
             "--metrics-port", str(self.port), *self.args], stdout=log, stderr=subprocess.STDOUT, env=env, cwd=REPO)
        log.close()
        return self

    def status(self) -> dict[str, Any] | None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/status", timeout=2) as r:
                data: dict[str, Any] = json.load(r)
                return data
        except OSError:
            return None

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as r:
            return str(r.read().decode())

    def partitions(self) -> list[dict[str, Any]]:
        s = self.status()
        return [p for f in (s or {}).get("flows", []) for p in f.get("partitions", [])]

    def stop(self, timeout: float = 60) -> int:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(10)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def ensure_dead(self) -> None:
        if self.alive():
            self.kill()


def metric(m: MirrorProcess, name: str, **labels: str) -> float | None:
    """The sum of one metric's samples whose labels include ``labels``; None when the process has none."""
    try:
        text = m.metrics()
    except OSError:
        return None
    total, seen = 0.0, False
    for line in text.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
            seen = True
    return total if seen else None


def copied_by(m: MirrorProcess, topic: str) -> dict[int, float]:
    """Records this process (since it started: counters begin at 0) acknowledged, per partition of ``topic``."""
    out: dict[int, float] = {}
    try:
        text = m.metrics()
    except OSError:
        return out
    for line in text.splitlines():
        if line.startswith("mirror_records_replicated_total{") and f'topic="{topic}"' in line:
            part = int(line.split('partition="', 1)[1].split('"', 1)[0])
            out[part] = float(line.rsplit(" ", 1)[1])
    return out


def owns_and_copies(m: MirrorProcess, topic: str) -> bool:
    """The precondition of an effective kill: the process owns partitions of ``topic`` and has copied
    records of them since it got them (a member that owns nothing loses nothing when it dies)."""
    owned = {p["partition"] for p in m.partitions() if p["topic"] == topic}
    copied = copied_by(m, topic)
    return bool(owned) and any(copied.get(p, 0) > 0 for p in owned)


def kill_owners(start: Callable[[], MirrorProcess], first: MirrorProcess, topic: str, kills: int,
                seed: int) -> tuple[MirrorProcess, int]:
    """SIGKILL ``kills`` times, each at a random moment (0-1.5 s) after the victim owned partitions of
    ``topic`` and copied records of them, restarting it with ``start``. Returns the last process and the
    number of effective kills (the precondition re-checked just before the kill)."""
    import random

    rnd = random.Random(seed)
    m, effective = first, 0
    for _ in range(kills):
        wait_until(lambda m=m: owns_and_copies(m, topic), 60, what="the victim owns partitions and copies")  # type: ignore[misc]
        time.sleep(rnd.uniform(0.0, 1.5))
        effective += owns_and_copies(m, topic)
        m.kill()
        m = start()
    return m, effective
