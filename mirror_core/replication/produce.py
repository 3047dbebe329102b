"""Producing runs of source records to the same partition of the remote topic.

Three ways, chosen per partition: *normal* (a batch proved by the delivery reports of its first and
last records, see batch.py), *exact* (a report per record: remote topics shared with other writers,
identity policy) and *careful* (one record at a time, each flushed and acknowledged before the next,
to pinpoint a record the target refuses). A full local queue is waited out in one place,
:func:`send_retrying`; a record ``produce()`` refuses is handled by :meth:`Producing.sync_failure`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

from confluent_kafka import (
    TIMESTAMP_NOT_AVAILABLE,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
)

from mirror_core.config.model import FlowConfig
from mirror_core.kafka_io import log_end
from mirror_core.replication.batch import RECORD_ERRORS, Batch, PartitionState
from mirror_core.replication.topic_limits import TopicLimits

log = logging.getLogger(__name__)

PROVENANCE_HEADER = "mirror-core.provenance"
#: librdkafka's most bytes of framing around one record (RD_KAFKAP_MESSAGE_V2_MAX_OVERHEAD) and one header
#: (two varints)
RECORD_OVERHEAD, HEADER_OVERHEAD = 36, 10
DeliveryCallback = Callable[[KafkaError | None, Any], None]


class ProduceHooks(Protocol):
    """What producing needs from the delivery guarantee (at-least-once or exactly-once)."""

    def before_produce(self, st: PartitionState) -> None:
        """Called before records of ``st`` are produced (exactly-once: open the slot's transaction)."""

    def after_careful_record(self, st: PartitionState) -> bool:
        """A careful-mode record landed; False stops the run (exactly-once commits it on its own)."""


def send_retrying(producer: Producer, first: BaseException, remote: str, value: Any, key: Any, partition: int,
                  cb: DeliveryCallback | None, timestamp: int, headers: Any) -> KafkaError | None:
    """``produce()`` raised ``first``: wait out a full local queue and produce again; return the error
    of a record ``produce()`` refuses (None once it is queued)."""
    exc = first
    while True:
        if isinstance(exc, KafkaException):
            err = exc.args[0]
            return err if isinstance(err, KafkaError) else KafkaError(KafkaError._FAIL, str(exc))
        if not isinstance(exc, BufferError):
            raise exc
        producer.poll(0.05)
        try:
            producer.produce(remote, value, key, partition=partition, on_delivery=cb, timestamp=timestamp,
                             headers=headers)
            return None
        except (BufferError, KafkaException) as again:
            exc = again


def _timestamp(m: Message) -> tuple[int, int]:
    """(timestamp to produce with: 0 lets the producer stamp it, the source timestamp)."""
    ts_type, ts = m.timestamp()
    return (0 if ts_type == TIMESTAMP_NOT_AVAILABLE else ts), ts


class Producing:
    def __init__(self, flow: FlowConfig, track: Callable[[PartitionState], None], target_meta: Consumer,
                 hooks: ProduceHooks, batch_bytes: int | None = None, one_batch_per_partition: bool = False,
                 describe_limits: Callable[[list[str]], dict[str, int | None]] | None = None) -> None:
        self.flow = flow
        self.track = track  # the partition has batches in flight (acks.py collects them)
        self.target_meta = target_meta  # watermark look-ups on the target
        self.hooks = hooks
        # Remote topics named like the source (identity policy) may have other writers: prove
        # delivery per record instead of per batch.
        self.exact_reports = flow.policy.uses_provenance
        #: what each remote topic takes, and the budgets cut from it
        self.topic_limits = TopicLimits(flow, batch_bytes, one_batch_per_partition, describe_limits)
        #: partitions with parked records
        self.parked: set[PartitionState] = set()

    def produce_run(self, st: PartitionState, run: list[Message]) -> None:
        """Produce one run of consecutive records of one partition."""
        if st.next is not None and run[0].offset() < st.next:
            # Records from before a rewind/seek: already handled.
            run = [m for m in run if m.offset() >= st.next]
            if not run:
                return
        end = run[-1].offset() + 1
        if self.flow.policy.uses_provenance:
            run = self.with_provenance(run)
        if st.origin is None and run:
            st.origin = run[0].offset()
        if st.parked and run:  # behind what waits already, whatever the budget is now (a raised limit lifts it)
            self._park(st, run)
            return
        budget = self.topic_limits.budget(st.remote)
        if budget is not None and not st.careful and not self.exact_reports and run:
            if st.in_flight_full:
                self._park(st, run)  # the producer would hold it
                return
            cut, wire = _room_for(st, run, budget)
            if cut == 0:
                self._park(st, run)
                return
            if cut < len(run):
                self._park(st, run[cut:])
                run = run[:cut]
                end = run[-1].offset() + 1
            self.hooks.before_produce(st)
            self._produce_batch(st, run, end, wire)
            return
        self.hooks.before_produce(st)
        if st.careful:
            self._produce_careful(st, run, end)
        elif self.exact_reports:
            self._produce_exact(st, run, end)
        else:
            self._produce_batch(st, run, end)

    def _park(self, st: PartitionState, run: list[Message]) -> None:
        st.parked.extend(run)
        self.parked.add(st)

    def parked_records(self) -> int:
        """Records read and waiting here until the producer can send them (back-pressure)."""
        return sum(len(st.parked) for st in self.parked)

    def release(self) -> int:
        """Hand the producer the next piece of each parked partition it can send now (acknowledgements are
        counted once acks.py has collected them: a failed batch rewinds and drops what is parked); how many
        partitions got one."""
        if not self.parked:
            return 0
        released = 0
        for st in list(self.parked):
            parked = st.parked
            if not parked:  # rewound, paused or released since: acks.py dropped them
                self.parked.discard(st)
                continue
            if not st.copying or st.in_flight_full:
                continue
            if st.careful:  # record by record now (produce_run does that)
                released += 1
                self.parked.discard(st)
                self.produce_run(st, parked.take(len(parked)))
                continue
            budget = self.topic_limits.budget(st.remote)
            take, wire = (len(parked), 0) if budget is None else \
                _room_for(st, parked.records, budget, parked.start)
            if take == 0:
                continue
            released += 1
            run = parked.take(take)
            if not parked:
                self.parked.discard(st)
            self.hooks.before_produce(st)
            self._produce_batch(st, run, run[-1].offset() + 1, wire)
        return released

    def _produce_batch(self, st: PartitionState, run: list[Message], end: int, wire: int = 0) -> None:
        """The hot path: one batch, delivery reports on its first and last records only (``wire``: its bytes as
        librdkafka counts them, when a budget applies)."""
        batch = Batch(st.gen, run[0].offset() if run else end)
        batch.next = end
        batch.wire = wire
        st.next = end
        st.pending.append(batch)
        self.track(st)
        if not run:
            return
        produce = st.producer.produce
        remote = st.remote
        partition = st.partition
        last = len(run) - 1
        if end - batch.first != len(run):
            batch.gaps = _source_gaps(run)
        size = 0
        stamps = batch.stamps
        for k, m in enumerate(run):
            value = m.value()
            key = m.key()
            ts_type, ts = m.timestamp()
            stamps.append(ts)
            if k == 0:
                cb = batch.on_single if last == 0 else batch.on_first
                batch.pending += 1
            elif k == last:
                cb = batch.on_last
                batch.pending += 1
                batch.ts_last = ts
            else:
                cb = None
            stamp = 0 if ts_type == TIMESTAMP_NOT_AVAILABLE else ts
            try:
                # Positional: keyword parsing was 40-55 % of each call (0.90-1.28 vs 0.55-0.57 us). The slots
                # are (topic, value, key, partition, callback, on_delivery, timestamp, headers), pinned by
                # tests/unit/test_produce_slots.py; cb must stay in the 5th (an explicit None there would
                # hide a callback passed in the 6th).
                produce(remote, value, key, partition, cb, None, stamp, m.headers())
            except (BufferError, KafkaException) as exc:
                err = send_retrying(st.producer, exc, remote, value, key, partition, cb, stamp, m.headers())
                if err is not None:
                    if cb is not None:
                        batch.pending -= 1
                    self.sync_failure(st, batch, k, m, err, size)
                    return
            if value is not None:
                size += len(value)
            if key is not None:
                size += len(key)
        if last == 0:
            batch.ts_last = run[0].timestamp()[1]
        batch.count = len(run)
        batch.size = size

    def _produce_exact(self, st: PartitionState, run: list[Message], end: int) -> None:
        """A delivery report per record: for remote topics other writers share (identity policy),
        where the first/last contiguity proof of a batch cannot hold."""
        self.track(st)
        for m in run:
            b = Batch.record(st.gen, m.offset(), reported=True)
            value, key = m.value(), m.key()
            stamp, b.ts_last = _timestamp(m)
            b.size = (len(value) if value is not None else 0) + (len(key) if key is not None else 0)
            st.pending.append(b)
            try:
                st.producer.produce(st.remote, value, key, partition=st.partition, on_delivery=b.on_single,
                                    timestamp=stamp, headers=m.headers())
            except (BufferError, KafkaException) as exc:
                err = send_retrying(st.producer, exc, st.remote, value, key, st.partition, b.on_single, stamp,
                                    m.headers())
                if err is not None:
                    b.pending = 0
                    self.sync_failure(st, b, 0, m, err, 0)
                    return
        # Records filtered out at the end of the run (provenance) still advance the position.
        st.pending.append(Batch(st.gen, end))
        st.next = end

    def _produce_careful(self, st: PartitionState, run: list[Message], end: int) -> None:
        """One record at a time, each flushed and acknowledged on its own, to pinpoint a bad record."""
        producer = st.producer
        self.track(st)
        for m in run:
            off = m.offset()
            batch = Batch.record(st.gen, off, reported=True)
            stamp, batch.ts_last = _timestamp(m)
            st.pending.append(batch)
            value, key = m.value(), m.key()
            try:
                producer.produce(st.remote, value, key, partition=st.partition, on_delivery=batch.on_single,
                                 timestamp=stamp, headers=m.headers())
            except (BufferError, KafkaException) as exc:
                err = send_retrying(producer, exc, st.remote, value, key, st.partition, batch.on_single, stamp,
                                    m.headers())
                if err is not None:
                    batch.pending = 0
                    batch.fail(err)
            if batch.pending:
                producer.flush(30)
            st.next = off + 1
            if batch.err is not None or batch.pending:
                st.block()  # no more records until acks.py handles the failure
                return
            if not self.hooks.after_careful_record(st):
                return
        # Trailing records filtered out (provenance) still advance the position.
        st.pending.append(Batch(st.gen, end))
        st.next = end
        st.careful = False

    def sync_failure(self, st: PartitionState, batch: Batch, k: int, m: Message, err: KafkaError,
                     size: int) -> None:
        """produce() refused record ``k`` of a run: records before it are queued, it is not.

        The queued prefix is verified (flush, then the remote partition must end exactly ``k``
        records after the first one); the refused record is queued as a failed single-record batch
        so that a record-level error pauses the partition exactly there, with no replay.
        """
        st.block()  # no more records until acks.py handles the failure
        offset = m.offset()
        batch.count, batch.next, batch.size = k, offset, size
        st.next = offset
        del batch.stamps[k:]  # the refused record and those after it were not sent
        if k > 0 and st.slot is not None:
            # Exactly-once, no flush: a producer whose transaction failed holds what it queued until
            # message.timeout.ms. The prefix stays in the transaction and the refused record behind it is the cause
            # the slot acts on (txn_failures.cause: paused right there); a refusal by the transaction's state fails
            # the prefix now, so that what its producer holds is purged (acks.py).
            if err.code() not in RECORD_ERRORS:
                batch.fail(err)
                return
        elif k > 0:
            st.producer.flush(30)
            if batch.err is None and batch.done and batch.t_first >= 0 and \
                    log_end(self.target_meta, st.remote, st.partition, timeout=10) == batch.t_first + k:
                batch.t_last = batch.t_first + k - 1
                batch.acked_at = time.time()
            else:
                batch.fail(err)
                return
        refused = Batch.record(st.gen, offset, reported=False)
        refused.fail(err)
        st.pending.append(refused)
        st.careful = err.code() in RECORD_ERRORS  # a record-level error pauses right at this record

    def with_provenance(self, run: list[Message]) -> list[Message]:
        """Identity policy: drop records that already passed through the target; tag the rest."""
        out = []
        source, target = self.flow.source, self.flow.target
        for m in run:
            headers = m.headers() or []
            chain = ""
            for k, v in headers:
                if k == PROVENANCE_HEADER and v is not None:
                    chain = v.decode() if isinstance(v, bytes) else str(v)
            hops = chain.split(",") if chain else []
            if target in hops:
                continue
            new_headers = [(k, v) for k, v in headers if k != PROVENANCE_HEADER]
            new_headers.append((PROVENANCE_HEADER, ",".join([*hops, source]).encode()))
            m.set_headers(new_headers)
            out.append(m)
        return out


def _room_for(st: PartitionState, run: list[Message], budget: int, start: int = 0) -> tuple[int, int]:
    """How many of ``run``'s records (from ``start``) may join what ``st`` has with librdkafka now, and their
    bytes as librdkafka counts them: a batch is made of records not yet acknowledged, so those in flight count
    against the budget. 0 when the next record does not fit beside them; with nothing in flight, at least one
    (a record the target refuses goes alone)."""
    in_flight = sum(b.wire or (b.size + b.count * RECORD_OVERHEAD) for b in st.pending if b.pending > 0)
    if not in_flight:
        return _fitting(run, budget, start)
    return _fitting(run, budget - in_flight, start, at_least_one=False) if budget > in_flight else (0, 0)


def _fitting(run: list[Message], budget: int, start: int = 0, at_least_one: bool = True) -> tuple[int, int]:
    """How many of ``run``'s records from ``start`` on fit in ``budget`` bytes as librdkafka counts a record on
    the wire (key, value, headers and at most RECORD_OVERHEAD; rd_kafka_msg_wire_size), and their bytes; at
    least one unless ``at_least_one`` is False."""
    used = 0
    for k in range(len(run) - start):
        m = run[start + k]
        value, key, headers = m.value(), m.key(), m.headers()
        wire = RECORD_OVERHEAD + (len(value) if value is not None else 0) + (len(key) if key is not None else 0)
        if headers:
            wire += sum(HEADER_OVERHEAD + len(name.encode()) + (len(v) if v is not None else 0) for name, v in headers)
        if used + wire > budget:
            return (1, wire) if k == 0 and at_least_one else (k, used)
        used += wire
    return len(run) - start, used


def _source_gaps(run: list[Message]) -> list[tuple[int, int]]:
    """(index, offset) of records whose source offset does not follow the previous one."""
    gaps = []
    prev = run[0].offset()
    for i in range(1, len(run)):
        off = run[i].offset()
        if off != prev + 1:
            gaps.append((i, off))
        prev = off
    return gaps
