"""Small Kafka reading helpers shared by the tools (offsets, workflows, status): one of each.

Offsets follow the convention everywhere: a log end (high watermark) is the next offset to be written,
ranges are ``[start, end)``.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from confluent_kafka import KafkaException, TopicPartition

from mirror_core.errors import ReadIncomplete

#: Client settings of short-lived tool clients: librdkafka logs errors only (causes are reported through
#: ClusterHealth / explain_failure, not through librdkafka's own chatter).
QUIET = {"log_level": "3"}
#: Client settings of probes of clusters that may well be down (flow status, lag): librdkafka logs nothing,
#: not even the connection errors the probe exists to report (ClusterHealth / explain_failure word them).
SILENT = {"log_level": "0"}


def log_end(consumer: Any, topic: str, partition: int, timeout: float = 10) -> int | None:
    """A partition's log end offset (the next offset to be written), or None when the cluster does not say."""
    try:
        return int(consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=timeout)[1])
    except KafkaException:
        return None


def log_ends(consumer: Any, keys: Iterable[tuple[str, int]], timeout: float = 10) -> dict[tuple[str, int], int]:
    """:func:`log_end` of each ``(topic, partition)``; the partitions the cluster says nothing about are left out."""
    ends = {key: log_end(consumer, *key, timeout=timeout) for key in keys}
    return {key: end for key, end in ends.items() if end is not None}


def log_ends_batch(admin: Any, keys: Iterable[tuple[str, int]], timeout: float = 10,
                   committed: bool = False) -> dict[tuple[str, int], int]:
    """:func:`log_ends` in one ListOffsets request per broker (the high watermark, as :func:`log_end`; with
    ``committed`` the last stable offset, the end a read_committed consumer reads up to)."""
    return _list_offsets(admin, keys, "latest", timeout, committed)


def log_starts_batch(admin: Any, keys: Iterable[tuple[str, int]], timeout: float = 10) -> dict[tuple[str, int], int]:
    """Each partition's log start offset (retention, DeleteRecords move it), one request per broker."""
    return _list_offsets(admin, keys, "earliest", timeout)


def _list_offsets(admin: Any, keys: Iterable[tuple[str, int]], spec: str, timeout: float,
                  committed: bool = False) -> dict[tuple[str, int], int]:
    from confluent_kafka import IsolationLevel
    from confluent_kafka.admin import OffsetSpec

    wanted = {TopicPartition(t, p): getattr(OffsetSpec, spec)() for t, p in keys}
    if not wanted:
        return {}
    isolation = IsolationLevel.READ_COMMITTED if committed else IsolationLevel.READ_UNCOMMITTED
    out: dict[tuple[str, int], int] = {}
    deadline = time.monotonic() + timeout  # for all of them: the requests went out together
    for tp, fut in admin.list_offsets(wanted, isolation_level=isolation, request_timeout=timeout).items():
        try:
            info = fut.result(max(0.0, deadline - time.monotonic()))
        except Exception:  # a partition the cluster says nothing about is left out, as in log_ends
            continue
        if info.offset >= 0:
            out[(tp.topic, tp.partition)] = int(info.offset)
    return out


def first_visible(consumer: Any, topic: str, partition: int, start: int, end: int, timeout: float) -> int | None:
    """Offset of the first record a read_committed consumer reads in ``[start, end)``, or None when
    it reached ``end`` without one (only markers or aborted records). Raises ReadIncomplete when it can
    tell neither within ``timeout`` (an error, a slow broker, an open transaction holding it back)."""
    consumer.assign([TopicPartition(topic, partition, start)])
    last_error = "no answer"
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for m in consumer.consume(1, 1.0):
                if m.error() is None:
                    return int(m.offset()) if m.offset() < end else None
                last_error = m.error().str()
            pos = consumer.position([TopicPartition(topic, partition)])[0].offset
            if pos is not None and pos >= end:
                return None  # only markers or aborted records up to the end
        raise ReadIncomplete(f"{topic}[{partition}]: no record readable from offset {start} and the end ({end}) "
                             f"not reached within {timeout:.0f}s ({last_error}; an open transaction?)")
    finally:
        consumer.unassign()


def read_range(consumer: Any, topic: str, partition: int, start: int, end: int, limit: int,
               timeout: float) -> tuple[list[Any], bool]:
    """Up to ``limit`` records of ``topic[partition]`` in ``[start, end)``, and whether the reader
    got to ``end`` (a slow broker or an open transaction can stop a read_committed reader early)."""
    consumer.assign([TopicPartition(topic, partition, start)])
    out: list[Any] = []
    try:
        while len(out) < limit:
            msgs = consumer.consume(min(limit, 10_000), timeout=min(timeout, 5))
            if not msgs:
                break
            out += [m for m in msgs if m.error() is None and m.offset() < end]
            if msgs[-1].offset() >= end - 1:
                break
        pos = consumer.position([TopicPartition(topic, partition)])[0].offset
        reached = pos is not None and pos >= end
    finally:
        consumer.unassign()
    return out[:limit], reached
