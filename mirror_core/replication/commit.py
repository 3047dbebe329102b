"""Durability: offset-map entries and progress, written to the target after what they cover landed.

Invariant (owned here): progress never covers a record whose offset-map entry the target has not
acknowledged — at-least-once, entries are sent first and progress covers them only from the next
commit on, once acknowledged; exactly-once, entries and progress are written in the slot's
transaction, entries first. Progress itself only ever covers acknowledged records (``acked``,
acks.py): a crash replays records, it never skips one.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from contextlib import AbstractContextManager

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer

from mirror_core import authorization
from mirror_core.authorization import Access
from mirror_core.config.model import ClusterConfig
from mirror_core.kafka_io import log_end
from mirror_core.metrics import Metrics
from mirror_core.replication.batch import PartitionState
from mirror_core.replication.source_reader import SourceReader
from mirror_core.stores.offset_syncs import write_sync
from mirror_core.stores.progress import ProgressStore
from mirror_core.throttling import ThrottledLine

TopicIds = Callable[[str], "str | None"]
log = logging.getLogger(__name__)


def say_not_written(line: ThrottledLine, flow: str, what: str, topic: str, err: KafkaError) -> None:
    """A warning, throttled per error, that records of an internal topic were refused (counted in
    mirror_errors_total too): they are sent again at the next commit, so without it a refusal that keeps
    coming (a batch the topic never takes, a missing ACL) would hold progress back unseen."""
    if line.due(f"{what} {topic} {err.code()}"):  # per error code: librdkafka's text counts the records
        log.warning("flow %s: %s not written to %s (%s); sent again at the next commit", flow, what, topic,
                    err.str())


class OffsetMapWriter:
    """The one writer of offset-map entries (``mirror-core.offset-syncs.<source>.internal``)."""

    def __init__(self, topic: str, metrics: Metrics, flow_name: str) -> None:
        self.topic = topic
        self.metrics = metrics
        self.flow_name = flow_name
        self.refused = ThrottledLine()

    def durable_position(self, st: PartitionState, producer: Producer) -> int | None:
        """At-least-once: how far progress may go now — never past a record whose offset-map entry
        the target has not acknowledged (the map and progress are different partitions, so one
        could land without the other). New entries are sent here; progress covers them from the
        next commit on, once acknowledged.
        """
        if st.syncs_in_flight == 0:
            if st.syncs:
                self._send_tracked(st, producer)
            else:
                st.map_durable = st.acked  # every entry below acked is acknowledged
        return st.map_durable

    def _send_tracked(self, st: PartitionState, producer: Producer) -> None:
        entries, cover, gen = list(st.syncs), st.acked, st.map_gen
        st.syncs.clear()
        outcome = {"left": len(entries), "failed": False}

        def on_sync(err: KafkaError | None, _msg: object) -> None:
            if gen != st.map_gen:
                return  # the map was reset since: these entries no longer matter
            outcome["left"] -= 1
            st.syncs_in_flight -= 1
            if err is not None and not outcome["failed"]:
                outcome["failed"] = True
                st.syncs[:0] = entries  # sent again at the next commit
                self.metrics.errors.labels(self.flow_name, "offset_sync").inc()
                say_not_written(self.refused, self.flow_name, "offset-map entries", self.topic, err)
            if outcome["left"] == 0 and not outcome["failed"]:
                st.map_durable = cover

        st.syncs_in_flight = len(entries)
        for i, (source, target) in enumerate(entries):
            try:
                write_sync(producer, self.topic, st.topic, st.partition, source, target, on_sync)
            except BufferError:
                # Queue full: what was not produced gets no callback; send it next time.
                unsent = len(entries) - i
                st.syncs_in_flight -= unsent
                outcome["left"] -= unsent
                outcome["failed"] = True
                st.syncs[:0] = entries
                raise

    def write_in_transaction(self, st: PartitionState, producer: Producer) -> None:
        """Exactly-once: the entries join the open transaction (they commit or abort with it)."""
        for source, target in st.syncs:
            write_sync(producer, self.topic, st.topic, st.partition, source, target)
        st.syncs.clear()


class ProgressCommitter:
    """Writes progress (and, first, offset-map entries) of acknowledged records to the target."""

    def __init__(self, progress: ProgressStore, map_writer: OffsetMapWriter, metrics: Metrics, flow_name: str,
                 topic_ids: TopicIds, target: ClusterConfig | None = None) -> None:
        self.target = target  # names the cluster in a "not authorized" line
        self.progress = progress
        self.map_writer = map_writer
        self.metrics = metrics
        self.flow_name = flow_name
        self.topic_ids = topic_ids
        self.refused = ThrottledLine()

    def commit(self, producer: Producer, states: list[PartitionState]) -> None:
        """At-least-once: write progress for acknowledged offsets whose map entries are durable."""
        for st in states:
            if st.acked is None:
                continue
            try:
                with self._writing(self.map_writer.topic):
                    progress = self.map_writer.durable_position(st, producer)
                if progress is None or progress == st.committed:
                    continue

                def on_delivery(err: KafkaError | None, _msg: object, st: PartitionState = st) -> None:
                    if err is not None:
                        st.committed = None  # retried at the next commit
                        self.metrics.errors.labels(self.flow_name, "progress_commit").inc()
                        say_not_written(self.refused, self.flow_name, "progress", self.progress.topic, err)

                with self._writing(self.progress.topic):
                    self.progress.write(producer, st.topic, st.partition, progress, on_delivery,
                                        self.topic_ids(st.topic))
                st.committed = progress
            except BufferError:
                break
        producer.poll(0)

    def commit_durably(self, producer: Producer, states: list[PartitionState], collect: Callable[[], None],
                       timeout: float = 40.0, flush: Callable[[float], int] | None = None) -> None:
        """Flush and commit until the progress covers every acknowledged record (map entries must
        land before progress covers them, so it takes at least two rounds), within ``timeout``.
        ``flush``: of every producer carrying records (default: ``producer``'s)."""
        flush_all = flush or producer.flush
        deadline = time.monotonic() + timeout
        while True:
            flush_all(max(0.1, min(30.0, deadline - time.monotonic())))
            collect()
            self.commit(producer, states)
            settled = all(st.acked is None or (not st.syncs and st.syncs_in_flight == 0
                                               and st.committed == st.acked) for st in states)
            if settled or time.monotonic() >= deadline:
                break
        flush_all(max(0.1, min(10.0, deadline - time.monotonic())))

    def write_in_transaction(self, st: PartitionState, producer: Producer) -> int:
        """Exactly-once: offset-map entries first, then progress, in the open transaction. Returns the
        offset written; the caller marks it committed once the transaction commits."""
        assert st.acked is not None
        acked = st.acked
        with self._writing(self.map_writer.topic):
            self.map_writer.write_in_transaction(st, producer)
        with self._writing(self.progress.topic):
            self.progress.write(producer, st.topic, st.partition, acked, None, self.topic_ids(st.topic))
        return acked

    def _writing(self, topic: str) -> AbstractContextManager[None]:
        """A write to an internal topic the target refuses raises :class:`NotAuthorized` naming it."""
        if self.target is None:
            return contextlib.nullcontext()
        return authorization.guard(self.flow_name, Access("Write", topic, self.target))


def advance_idle(consumer: SourceReader, states: list[PartitionState],
                 log_end_fallback: Callable[[PartitionState], int | None] | None) -> None:
    """Move idle partitions past records the consumer skipped (transaction markers, aborted data).

    Only when everything consumed is acknowledged (none parked): the consumer's position is then the next offset
    to read, and nothing between ``acked`` and it was a record to replicate. The map gets an entry
    for where the target stands there (see PartitionState.map_skipped); when nothing landed since
    assignment, ``log_end_fallback`` may say it (None: no entry can be made, progress waits).
    """
    idle = [st for st in states if not st.pending and not st.parked and st.acked is not None
            and st.next == st.acked and not st.careful and st.copying]
    if not idle:
        return
    try:
        positions = consumer.position([st.tp for st in idle])
    except KafkaException:
        return
    for st, tp in zip(idle, positions, strict=True):
        if tp.offset is not None and st.acked is not None and tp.offset > st.acked:
            target_next = st.t_next if st.t_next is not None else (
                log_end_fallback(st) if log_end_fallback is not None else None)
            if target_next is not None:
                st.map_skipped(tp.offset, target_next)
            st.acked = st.next = tp.offset


def remote_log_end(target_meta: Consumer) -> Callable[[PartitionState], int | None]:
    """With every record acknowledged and this instance the partition's only writer, the remote log
    end is where the next copy lands (not with exactly-once — an open transaction — nor provenance:
    applications may write the remote topic too)."""

    def look_up(st: PartitionState) -> int | None:
        return log_end(target_meta, st.remote, st.partition, timeout=5)

    return look_up
