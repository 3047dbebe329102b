"""The DR drill's canary records: produced sequence-numbered on the primary, read back (on either
cluster) as ``(partition, offset, seq)`` rows, and the canary group's positions committed from them."""

from __future__ import annotations

import json
import time
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from mirror_core.clients import make_producer
from mirror_core.config.model import ClusterConfig
from mirror_core.kafka_io import log_end
from mirror_core.offsets.groups import commit_offsets
from mirror_core.workflows.control import WorkflowError


class Canary:
    """Produces sequence-numbered records and remembers where each landed on the primary."""

    def __init__(self, cluster: ClusterConfig, topic: str, partitions: int, stamp: str) -> None:
        self.topic, self.partitions, self.stamp = topic, partitions, stamp
        self.producer: Producer = make_producer(cluster, {"linger.ms": "5"})
        self.placed: dict[int, tuple[int, int]] = {}  # seq -> (partition, offset) on the primary
        self.errors: list[str] = []
        self.produced = 0

    def _delivered(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.errors.append(str(err))
        else:
            self.placed[int(msg.key())] = (msg.partition(), msg.offset())

    def produce(self, count: int, rate: float | None = None) -> None:
        start = time.monotonic()
        for i in range(count):
            seq = self.produced
            value = json.dumps({"drill": self.stamp, "seq": seq}).encode()
            self.producer.produce(self.topic, value=value, key=str(seq).encode(), partition=seq % self.partitions,
                                  on_delivery=self._delivered)
            self.produced += 1
            self.producer.poll(0)
            if rate:
                delay = start + (i + 1) / rate - time.monotonic()
                if delay > 0:
                    time.sleep(delay)

    def flush(self, timeout: float = 30) -> None:
        if self.producer.flush(timeout) or self.errors or len(self.placed) != self.produced:
            raise WorkflowError(f"canary producer: {self.produced - len(self.placed)} records not acknowledged "
                                f"by the primary ({'; '.join(self.errors[:3])})")

    def primary_offsets_after(self, seqs: list[int]) -> dict[int, int]:
        """Per partition, the primary offset after the last of ``seqs`` there (the resume position)."""
        out: dict[int, int] = {}
        for s in seqs:
            p, o = self.placed[s]
            out[p] = max(out.get(p, 0), o + 1)
        return out


def seq_of(value: bytes | None) -> int:
    """The sequence number a canary record carries."""
    return int(json.loads(value or b"{}")["seq"])


def stamp_of(value: bytes | None) -> str | None:
    """The drill a record was produced by (None: not a drill record)."""
    try:
        data = json.loads(value or b"{}")
    except ValueError:
        return None
    return data.get("drill") if isinstance(data, dict) else None


def end_offsets(consumer: Consumer, topic: str, partitions: int, timeout: float = 10) -> dict[int, int]:
    """Per partition, its log end (0 when the cluster does not say)."""
    return {p: log_end(consumer, topic, p, timeout) or 0 for p in range(partitions)}


def read_canary(consumer: Consumer, topic: str, starts: dict[int, int], ends: dict[int, int], timeout: float,
                limit: int | None = None, first_at: list[float] | None = None,
                stamp: str | None = None) -> list[tuple[int, int, int]]:
    """(partition, offset, seq) from ``starts`` up to ``ends`` (or ``limit`` records), in arrival order.

    ``first_at`` receives the monotonic time of the first record (or of reaching the end if none);
    ``stamp``: only the records of that drill (a topic that outlives drills holds earlier ones too)."""
    pending = {p for p in ends if starts.get(p, 0) < ends[p]}
    if not pending:
        if first_at is not None:
            first_at.append(time.monotonic())
        return []
    consumer.assign([TopicPartition(topic, p, starts.get(p, OFFSET_BEGINNING)) for p in ends])
    out: list[tuple[int, int, int]] = []
    deadline = time.monotonic() + timeout
    try:
        while pending and (limit is None or len(out) < limit):
            if time.monotonic() > deadline:
                raise WorkflowError(f"timed out reading {topic}: partitions {sorted(pending)} not read to the end")
            for m in consumer.consume(500, 0.2):
                if m.error() is not None or m.offset() >= ends[m.partition()]:
                    continue
                if limit is not None and len(out) >= limit:
                    break
                if m.offset() + 1 >= ends[m.partition()]:
                    pending.discard(m.partition())
                if stamp is not None and stamp_of(m.value()) != stamp:
                    continue
                if first_at is not None and not first_at:
                    first_at.append(time.monotonic())
                out.append((m.partition(), m.offset(), seq_of(m.value())))
    finally:
        consumer.unassign()
    return out


def commit_positions(admin: AdminClient, group: str, offsets: dict[tuple[str, int], int]) -> None:
    """Commit the canary group's positions (the next offsets to read); nothing consumed, nothing committed."""
    if offsets:  # nothing consumed: nothing to commit
        commit_offsets(admin, group, offsets)


def next_offsets(rows: list[tuple[int, int, int]]) -> dict[int, int]:
    """Per partition, the offset after the last of ``rows`` there (where a consumer resumes)."""
    out: dict[int, int] = {}
    for p, o, _ in rows:
        out[p] = max(out.get(p, 0), o + 1)
    return out
