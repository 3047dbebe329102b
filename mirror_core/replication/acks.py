"""Acknowledgements: finished batches advance a partition's ``acked`` position; failures rewind it.

Invariant (owned here): ``acked`` only moves over batches whose delivery reports prove every record
landed (batch.py), in source order. A failed batch never advances it: the partition is rewound to
``acked`` and re-read — in careful mode (one record at a time) after a record-level or contiguity
failure, in batches right away after a batch refused as too large by a topic whose limit was lowered since
(topic_limits.py), after a backoff for anything else — or paused at a record the target refuses.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from mirror_core.authorization import Access, denied_line
from mirror_core.clients import purge_unsent
from mirror_core.config.model import ClusterConfig
from mirror_core.metrics import Metrics
from mirror_core.replication.batch import RECORD_ERRORS, Batch, PartitionMode, PartitionState
from mirror_core.replication.damage import OperatorActions, damaged_line
from mirror_core.replication.retry import MAX_BACKOFF_S
from mirror_core.replication.source_reader import SourceReader

log = logging.getLogger(__name__)

TARGET_TOPIC_ERRORS = frozenset({KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_PARTITION,
                                 KafkaError._UNKNOWN_TOPIC})


class Acks:
    """The acknowledgement side of one flow's replicator: collects delivery results of the partitions
    with batches in flight, rewinds, backs off and pauses. ``on_failure`` decides what a failed batch
    means (at-least-once: :meth:`handle_failure`; exactly-once: abort the slot's transaction)."""

    def __init__(self, flow_name: str, consumer: SourceReader, metrics: Metrics,
                 request_refresh: Callable[[], None], last_heartbeat_ms: int = 0,
                 target: ClusterConfig | None = None) -> None:
        self.flow_name = flow_name
        self.target = target  # names the cluster in a "not authorized" line
        self.consumer = consumer
        self.metrics = metrics
        self.request_refresh = request_refresh
        self.on_failure: Callable[[PartitionState, Batch], None] = self.handle_failure
        #: the target refused a batch (remote topic, records, bytes handed over) as too large: True when a replay
        #: in batches lands, its limit having been lowered (topic_limits.TopicLimits.after_refusal)
        self.cut_smaller: Callable[[str, int, int], bool] = lambda remote, count, wire: False
        self.active: set[PartitionState] = set()  # partitions with batches awaiting acknowledgement
        self.waiting: set[PartitionState] = set()  # partitions in retry backoff
        #: partitions rewound or paused since the replicator last cleared it: records of theirs consumed
        #: before that are stale (the consumer re-reads from the new position)
        self.rewound: set[PartitionState] = set()
        self.last_heartbeat_ms = last_heartbeat_ms
        #: operators' resumes and skips of paused partitions (the replicator's, which outlives this)
        self.operator = OperatorActions(flow_name)
        #: told the bytes read of each topic while a bandwidth limit is set (replication/controls.py), by the reading
        #: side of either path
        self.count_read: Callable[[str, int], None] | None = None

    def forget(self, st: PartitionState) -> None:
        st.parked.clear()  # no longer ours: nothing of it may be produced
        self.active.discard(st)
        self.waiting.discard(st)
        self.rewound.discard(st)

    def clear(self) -> None:
        self.active.clear()
        self.waiting.clear()
        self.rewound.clear()

    def collect(self) -> None:
        """Advance ``acked`` over finished batches, in source order; handle failed ones."""
        if not self.active:
            return
        lbl = self.flow_name
        finished = []
        for st in self.active:
            q = st.pending
            while q:
                b = q[0]
                if not b.done:
                    if b.err is not None and st.slot is not None and not b.purged:
                        # Exactly-once: the failure dooms the transaction, and librdkafka keeps what it queued again
                        # after it (neither sent nor purged) until message.timeout.ms: purge that, so that the
                        # batch's other report comes now, not a minute later.
                        b.purged = True
                        purge_unsent(st.producer)
                    break
                q.popleft()
                if b.landed:
                    st.acked = b.next
                    st.map_landed(b)
                    if b.count:
                        st.backoff = 0.5  # records landed: the target is healthy again
                        st.landed_records += b.count  # (on the partition's counters at the next publish)
                        st.landed_bytes += b.size
                        if b.acked_at:
                            if b.stamps:  # (the records path: each record's own timestamp)
                                self.metrics.latency.observe_batch(lbl, st.topic, b.acked_at, b.stamps)
                            else:  # a batch copied whole: its records at its newest timestamp
                                self.metrics.latency.observe_run(lbl, st.topic, b.acked_at, b.ts_last, b.count)
                            if b.ts_last > 0:
                                st.landed_latency = max(0.0, b.acked_at - b.ts_last / 1000.0)
                        if st.is_heartbeat and b.ts_last > 0 and b.acked_at:
                            self.last_heartbeat_ms = max(self.last_heartbeat_ms, b.ts_last)
                    continue
                self.on_failure(st, b)
                break
            if not q:
                finished.append(st)
        for st in finished:
            self.active.discard(st)

    def handle_failure(self, st: PartitionState, b: Batch) -> None:
        """At-least-once: what a failed batch means for its partition."""
        err = b.err
        code = err.code() if err is not None else None
        where = f"{st.topic}[{st.partition}]"
        if code in RECORD_ERRORS:
            if st.careful and b.count <= 1:
                # Every record before this one is acknowledged (careful mode is one record at a time).
                st.acked = b.first
                self.pause(st, f"record at offset {b.first} rejected by target topic {st.remote}: "
                               f"{err.str() if err else ''} (partition paused; fix the target limit, "
                               "e.g. max.message.bytes, and restart)")
                return
            if self.limit_lowered(st, b):
                log.warning("flow %s: %s: %s; replaying in batches of the topic's limit now", self.flow_name, where,
                            err.str() if err else "")
                self.rewind(st, b, careful=False, backoff=False)
                return
            log.warning("flow %s: %s: %s; replaying in careful mode", self.flow_name, where,
                        err.str() if err else "")
            self.rewind(st, b, careful=True, backoff=False)
            return
        if err is None:
            # Both ends acknowledged but the target offsets are not contiguous: another writer
            # interleaved or a record in the middle failed. Replay record by record to be sure.
            self.metrics.errors.labels(self.flow_name, "non_contiguous").inc()
            log.warning("flow %s: %s: target offsets %d..%d for %d records; replaying in careful mode",
                        self.flow_name, where, b.t_first, b.t_last, b.count)
            self.rewind(st, b, careful=True, backoff=False)
            return
        self.metrics.errors.labels(self.flow_name, "produce").inc()
        if code in TARGET_TOPIC_ERRORS:
            self.request_refresh()  # recreate the remote topic on the next loop
            with contextlib.suppress(KafkaException):
                st.producer.list_topics(st.remote, timeout=5)  # and refresh the producer's view of it
        resume = st.acked if st.acked is not None else b.first
        denied = self.denied(st, err)
        if denied is not None:
            self.metrics.errors.labels(self.flow_name, "not_authorized").inc()
            log.error("%s; retrying from offset %s in %.1fs", denied, resume, st.backoff)
        else:
            log.warning("flow %s: %s: delivery failed (%s); retrying from offset %s in %.1fs",
                        self.flow_name, where, err.str(), resume, st.backoff)
        self.rewind(st, b, careful=False, backoff=True)

    def limit_lowered(self, st: PartitionState, b: Batch) -> bool:
        """``b`` was refused as too large and its remote topic takes less now than its batches were cut to (a limit
        lowered on the target since it was read): a replay in batches lands, careful mode is not needed."""
        return (b.err is not None and b.err.code() == KafkaError.MSG_SIZE_TOO_LARGE and not st.careful
                and self.cut_smaller(st.remote, b.count, b.wire))

    def denied(self, st: PartitionState, err: KafkaError | None) -> str | None:
        """The "not authorized" line when the target refused to let the mirror write ``st``'s remote topic."""
        if self.target is None:
            return None
        return denied_line(self.flow_name, err, Access("Write", st.remote, self.target))

    def rewind(self, st: PartitionState, failed: Batch | None, careful: bool, backoff: bool,
               to: int | None = None) -> None:
        """Forget in-flight batches and re-read from ``to`` (default: the last acknowledged offset).

        ``failed`` is the oldest unacknowledged batch: where to restart when nothing was acked yet.
        """
        st.gen += 1
        self.rewound.add(st)
        if to is not None:
            pos = to
        elif st.acked is not None:
            pos = st.acked
        else:
            assert failed is not None
            pos = failed.first
        st.drop_unsent()
        st.careful = careful
        st.next = pos
        tp = TopicPartition(st.topic, st.partition, pos)
        if backoff:
            st.reopen(retry_at=time.monotonic() + st.backoff)
            st.backoff = min(st.backoff * 2, MAX_BACKOFF_S)
            self.waiting.add(st)
            self.consumer.pause([tp])
        else:
            st.reopen()
        self.seek(tp)

    def rewind_to(self, st: PartitionState, pos: int, careful: bool, backoff: bool) -> None:
        self.rewind(st, None, careful=careful, backoff=backoff, to=pos)

    def seek(self, tp: TopicPartition) -> None:
        deadline = time.monotonic() + 10
        while True:
            try:
                self.consumer.seek(tp)
                return
            except KafkaException:
                # The fetcher may not have started yet for a fresh assignment.
                if time.monotonic() > deadline:
                    raise
                self.consumer.consume(0, 0.1)

    def resume_due(self, now: float, owned: Callable[[PartitionState], bool]) -> None:
        """Resume the partitions whose backoff is over (and that are still owned and not paused)."""
        for st in [s for s in self.waiting if now >= s.retry_at]:
            self.waiting.discard(st)
            # (COPYING too: rewound again since, without a backoff, its consumer is still paused.)
            if st.mode in (PartitionMode.BACKOFF, PartitionMode.COPYING) and owned(st):
                st.reopen()
                self.consumer.resume([st.tp])

    def pause(self, st: PartitionState, reason: str, keep_in_flight: bool = False) -> None:
        """Nothing more of ``st`` is read or produced until :meth:`unpause`. ``keep_in_flight``: its batches in
        flight still count when they land (they come before what paused it); else they are forgotten."""
        st.mode = PartitionMode.PAUSED
        st.paused_reason = reason
        if keep_in_flight:
            st.parked.clear()
        else:
            st.gen += 1
            st.drop_unsent()
        self.rewound.add(st)
        self.consumer.pause([st.tp])
        self.metrics.paused.labels(self.flow_name, st.topic, str(st.partition)).set(1)
        self.metrics.errors.labels(self.flow_name, "partition_paused").inc()
        log.error("flow %s: %s[%d] paused: %s", self.flow_name, st.topic, st.partition, reason)

    def unpause(self, st: PartitionState, to: int, past: int | None = None) -> None:
        """Copy ``st`` again from ``to`` (an operator's resume), or from ``past`` with offsets ``to``..``past - 1``
        passed over (an operator's skip of the damaged batch at ``to``: not fetched again)."""
        st.mode, st.paused_reason = PartitionMode.COPYING, None
        self.metrics.paused.labels(self.flow_name, st.topic, str(st.partition)).set(0)
        self.rewind_to(st, to, careful=False, backoff=False)
        if past is not None:
            self._pass_over(st, to, past, counted=False)  # (before the resume: nothing is fetched meanwhile)
        self.consumer.resume([st.tp])

    def _pass_over(self, st: PartitionState, first: int, end: int, counted: bool) -> None:
        """Offsets ``first``..``end - 1`` of ``st`` are not copied (an operator's skip; ``counted``: met before)."""
        if not counted:
            self.metrics.skipped.labels(self.flow_name, st.topic, str(st.partition)).inc(end - first)
        st.pass_over(first, end)  # (acknowledged after what is in flight before it)
        self.active.add(st)
        self.rewound.add(st)  # what else was read of it with the damage is from before the seek
        self.seek(TopicPartition(st.topic, st.partition, end))

    def damaged(self, st: PartitionState, source: str, what: str, first: int, last: int | None) -> None:
        """A source batch of ``st`` at ``first`` failed its checks (``what``): go on past it when an operator's skip
        of exactly that range is armed, else pause right there (what is in flight before it still lands)."""
        if self.operator.repeated(st, first, last):
            return  # (read before the seek past its skip)
        self.metrics.damaged.labels(self.flow_name, st.topic, str(st.partition)).inc()
        # Records read before the damage and not sent yet (parked): a skip taken now would be acknowledged ahead of
        # them, so the partition pauses (they are dropped, read again) and the skip is applied again from there.
        skip = self.operator.damaged(st, first, last, ready=not st.parked)
        if skip is not None:
            self._pass_over(st, skip.first, skip.end, counted=skip.again)
            return
        self.pause(st, damaged_line(self.flow_name, source, st.topic, st.partition, what, first, last),
                   keep_in_flight=True)
