"""The batches data path of a flow (``replication.data.path = batches``): the source's record batches copied
whole over the mirror's own Kafka client (mirror_core.wire), at-least-once.

The source is read by wire_reader.WireReader (the consumer keeps the group, the wire fetcher reads).
:class:`BatchCopier` hands each fetched partition's committed batches to the wire sender
(a compacted source's gapped batches rewritten, records before the position left out) and turns each answer
into a :class:`~mirror_core.replication.batch.WholeBatch` acknowledgement: ``t_first`` is where the batch landed and
its records follow one another, so acks.py, the offset map and progress work as on the records path.
:class:`BatchDelivery` is at-least-once with the copier's batches counted in flight and flushed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol, cast

from confluent_kafka import KafkaError, TopicPartition

from mirror_core.authorization import Access, denied_line
from mirror_core.config.model import ClusterConfig
from mirror_core.metrics import Metrics
from mirror_core.replication.acks import Acks
from mirror_core.replication.batch import RECORD_ERRORS, Batch, PartitionState, WholeBatch
from mirror_core.replication.consuming import IDLE_WAIT_S, Consuming
from mirror_core.replication.delivery import AtLeastOnce
from mirror_core.replication.mirror_writes import MirrorWrites, Verdict
from mirror_core.replication.retry import MAX_BACKOFF_S
from mirror_core.replication.wire_reader import WireReader
from mirror_core.wire.errors import name
from mirror_core.wire.fetch import FetchedPartition
from mirror_core.wire.integrity import Damage
from mirror_core.wire.leaders import TP
from mirror_core.wire.recode import contiguous_copy, mergeable, merged
from mirror_core.wire.records import (
    BASE,
    COUNT,
    HEADER,
    LAST_DELTA,
    MAX_TIMESTAMP,
    base_offset,
    committed,
    max_timestamp,
    next_offset,
    record_count,
)
from mirror_core.wire.sender import CONNECTION_LOST, NOT_SENT, Outgoing, Sent

log = logging.getLogger(__name__)
OFFSET_OUT_OF_RANGE = 1
#: the sender's own codes as the librdkafka errors acks.py knows
_LOCAL_ERRORS = {NOT_SENT: KafkaError._PURGE_QUEUE, CONNECTION_LOST: KafkaError._TRANSPORT}
#: what a batch in flight costs the mirror beyond its bytes (its WholeBatch, Outgoing, view: ~800 B, tracemalloc),
#: counted with them against replication.max.in.flight.bytes, so that many small batches are bounded too
BATCH_BOOKKEEPING_BYTES = 1024
#: a partition's batches refused as corrupt by the target in a row before it pauses (each read again from the source)
CORRUPT_RETRIES = 3
#: how soon a batch that ended past its answer's high watermark is asked for again (_damaged)
SETTLE_RETRY_S = 0.2
#: consecutive source batches of at most MERGE_RECORDS records, fetched together, are sent as one batch of at most
#: MERGE_BYTES: a partition takes one batch per produce request and 5 in flight, so a backlog of a short-linger
#: producer's batches would otherwise go out a few records per round trip. Re-encoding costs about 3 µs a record,
#: what a batch sent alone costs the mirror and the target: larger batches go as they are.
MERGE_RECORDS = 16
MERGE_BYTES = 64 << 10



class CopierReading:
    """The batches data path's read of the source (consuming.Reading): the copier fetches and sends whole batches,
    the consumer (every partition paused on it) only serves the group, also while reading is held so that a
    rebalance is not held up by a slow or absent target."""

    def __init__(self, consuming: Consuming, copier: BatchCopier) -> None:
        self.consuming, self.copier = consuming, copier

    @property
    def full(self) -> bool:
        return self.copier.full

    def read(self, limit: int, wait_s: float) -> int:
        """(``limit`` is the records path's: the copier is bounded by its bytes in flight; ``wait_s`` too: it
        waits at most IDLE_WAIT_S for a fetch)"""
        self.consuming.serve_group()
        return self.copier.pump(IDLE_WAIT_S)

    def hold(self) -> None:
        self.consuming.serve_group()

    def gate(self, until: float) -> None:
        self.copier.gated_until = until

    def in_flight_bytes(self) -> int | None:
        return self.copier.in_flight_bytes


class Sends(Protocol):
    """What the copier hands its batches to: the wire sender, or on an exactly-once flow the slots' senders
    (batch_transactions.SlotSenders)."""

    def send(self, batches: Iterable[Outgoing]) -> None: ...

    def rewind(self, tp: TP) -> None: ...

    def poll(self, timeout: float) -> list[Sent]: ...

    def waiting(self, tp: TP) -> int: ...

    def close(self) -> None: ...


class BatchCopier:
    """Fetched batches to the sender, the sender's answers to the partitions' acknowledgements.

    What it holds is bounded: once the batches handed over and not answered reach ``max_bytes`` (with
    ``BATCH_BOOKKEEPING_BYTES`` each) or ``max_records``, nothing more is fetched until answers bring it below
    (:attr:`full`); only answers already on their way go past it."""

    def __init__(self, flow_name: str, reader: WireReader, sender: Sends, states: Mapping[TP, PartitionState],
                 acks: Acks, metrics: Metrics, max_records: int | None, max_bytes: int,
                 source: ClusterConfig, mirror_writes: MirrorWrites | None = None) -> None:
        self.flow_name, self.reader, self.sender, self.states = flow_name, reader, sender, states
        #: the identity policy's cycle prevention: source batches that are a mirror's copies of the target's records
        self.mirror_writes = mirror_writes
        self.acks, self.metrics, self.source = acks, metrics, source
        self.max_records, self.max_bytes = max_records, max_bytes
        #: records handed to the sender and not answered yet (0 once closed: nothing more will be answered)
        self.in_flight = 0
        #: their batches' bytes, with BATCH_BOOKKEEPING_BYTES each
        self.in_flight_bytes = 0
        #: each source partition's state and its ``gen`` when its batches were last handed over: a rewind since
        #: (acks.py), or a new state (assigned again), is the sender's rewind too, once the partition sends again
        self._sent: dict[TP, tuple[PartitionState, int]] = {}
        #: target partitions' batches refused as corrupt in a row (BatchDelivery: read again, then pause)
        self.corrupt_refusals: dict[TP, int] = {}
        #: the flow's bandwidth limit is used up: nothing fetched until this monotonic time (controls.py)
        self.gated_until = 0.0
        #: exactly-once: called before a partition's batches are handed over (its slot's transaction opened, its
        #: batches routed through the slot's producer: batch_transactions.py)
        self.before_send: Callable[[PartitionState], None] | None = None
        #: partitions whose batch at this offset ended past its answer's high watermark once (_damaged)
        self._unsettled: dict[TP, int] = {}
        #: whether a source topic was deleted and recreated (then handled as a topic refresh finds it: its
        #: partitions restart at the new beginning, reported): assignment.Assignment.recreated
        self.recreated: Callable[[str], bool] = lambda topic: False
        #: batches taken from the answers of the current poll, not handed to the sender yet (_send_taken)
        self._taken: list[Outgoing] = []
        self._taken_tps: set[TP] = set()
        #: source partitions whose small batches go out one by one: the target refused a merged one as too large
        #: (a remote topic whose max.message.bytes is below MERGE_BYTES)
        self.unmerged: set[TP] = set()

    def pump(self, timeout: float) -> int:
        """Answers in, fetched batches out (waiting up to ``timeout`` for a fetch); the records handed over."""
        self.answer(self.sender.poll(0))
        records = 0
        try:
            for part in self.reader.fetcher.poll(timeout):
                records += self.take(part)
        finally:
            self._send_taken()
        self.collect(0)
        if self.reader.delayed:
            self.reader.due(time.monotonic())
        return records

    def _send_taken(self) -> None:
        """The batches taken from one poll's answers go to the sender together: an exactly-once slot adds their
        partitions to its transaction in one request, not one round trip per partition."""
        if self._taken:
            out, self._taken = self._taken, []
            self._taken_tps.clear()
            self.sender.send(out)

    @property
    def full(self) -> bool:
        """As much in flight as the flow takes: nothing more is fetched."""
        return self.in_flight_bytes >= self.max_bytes or (
            self.max_records is not None and self.in_flight >= self.max_records) or (
            self.gated_until > 0 and time.monotonic() < self.gated_until)

    def collect(self, timeout: float) -> None:
        self.answer(self.sender.poll(timeout))
        full = self.full
        self.reader.fetcher.throttle(full)
        if self.reader.held and not full:
            self.reader.release()
        if self.reader.queued:
            self.reader.release_sent(self.sender.waiting)

    def take(self, part: FetchedPartition) -> int:
        key = (part.topic, part.partition)
        st = self.states.get(key)
        start = self.reader.positions.get(key)
        if st is None or start is None or not st.copying:
            return 0  # released or paused since it was fetched (its fetch was revoked: this one is stale)
        if part.error == OFFSET_OUT_OF_RANGE:
            self._out_of_range(st, start)
            return 0
        if part.problem is not None:
            # (the batch length and magic byte are outside the CRC: damage, or a record format before v2, which
            # replication.data.path = records copies)
            self.acks.pause(st, f"{part.problem} (damaged on the source, or an older record format, which "
                                "replication.data.path = records copies)")
            return 0
        if part.damaged is not None and not part.batches:
            self._damaged(st, part.damaged)
            return 0
        if part.error:
            self._fetch_failed(st, part.error, start)
            return 0
        out: list[Outgoing] = []
        at = start
        last: Batch | None = None  # the last batch sent or passed over
        run: list[memoryview] = []  # consecutive small batches, sent as one (MERGE_BYTES)
        run_bytes = 0
        merge = key not in self.unmerged

        def send_run() -> None:  # (the small batches so far, as one, before what does not join them)
            nonlocal last, run_bytes
            if run:
                last = self._hand(st, self._run(st, run, start), out) or last
                run.clear()
                run_bytes = 0

        try:
            for raw in committed(part.batches, part.aborted):
                h = HEADER.unpack_from(raw)
                at = h[BASE]
                if at + h[LAST_DELTA] < start:
                    continue  # a fetch serves the whole batch holding its position
                if self.mirror_writes is not None:
                    verdict = self.mirror_writes.verdict(raw, h)
                    if verdict is Verdict.MIXED:
                        self.acks.pause(st, f"record batch at offset {at} holds records the mirror copied from "
                                            f"{self.mirror_writes.target} (provenance header) and others: copied "
                                            "whole some would go back, left out others would be lost "
                                            "(replication.data.path = records copies it record by record)")
                        return 0
                    if verdict is Verdict.SKIP:
                        send_run()
                        last = st.pass_over(max(at, start), at + h[LAST_DELTA] + 1)
                        continue
                if merge and h[COUNT] <= MERGE_RECORDS and at >= start and len(raw) < MERGE_BYTES and mergeable(h):
                    if run_bytes + len(raw) > MERGE_BYTES:
                        send_run()
                    run.append(raw)
                    run_bytes += len(raw)
                    continue
                send_run()
                last = self._hand(st, self._batch(st, raw, start, h), out) or last
            send_run()
        except Exception as exc:  # a batch that cannot be read (codec, layout): its partition alone stops there
            self.acks.pause(st, f"record batch at offset {at} cannot be copied whole: {exc} (its CRC matched: "
                                "replication.data.path = records copies it record by record)")
            return 0
        if last is not None:
            st.next = last.next
            self.acks.active.add(st)
        records = sum(cast(WholeBatch, o.token).count for o in out)
        if out:
            size = sum(cast(WholeBatch, o.token).size for o in out)
            if st.origin is None:
                st.origin = cast(WholeBatch, out[0].token).first
            sent = self._sent.get(key)
            if sent is None or sent[0] is not st or sent[1] != st.gen:
                if (st.remote, st.partition) in self._taken_tps:
                    self._send_taken()  # (what was taken before the rewind is sent before it)
                self.sender.rewind((st.remote, st.partition))
                self._sent[key] = (st, st.gen)
            if self.before_send is not None:
                self.before_send(st)
            self._taken += out
            self._taken_tps.add((st.remote, st.partition))
            if self.acks.count_read is not None:  # (a bandwidth limit: controls.py)
                self.acks.count_read(st.topic, size)
            self.in_flight += records
            self.in_flight_bytes += size + BATCH_BOOKKEEPING_BYTES * len(out)
        full = self.full
        if full:  # at once, not after this round of answers: the fetcher would go on meanwhile
            self.reader.fetcher.throttle(True)
        # A partition whose earlier batches still wait in the sender (a window of MAX_IN_FLIGHT batches per
        # partition, slow to answer across a WAN) is fetched again once they have left: meanwhile its next records
        # gather at the source, and come as few merged batches instead of a queue of small ones, one per request.
        target = (st.remote, st.partition)
        behind = target if out and self.sender.waiting(target) else None
        # Before a damaged batch the next fetch starts at it, and finds it first (then the partition pauses).
        self.reader.handed_over(key, next_offset(part.batches[-1]), hold=full, behind=behind)
        return records

    def _damaged(self, st: PartitionState, damage: Damage) -> None:
        """The batch at ``st``'s position failed its checks (replication/damage.py). One that may settle (past the
        answer's high watermark) is asked for again once first: damage only if the next answer says the same."""
        key = (st.topic, st.partition)
        if damage.settles and self._unsettled.get(key) != damage.first:
            self._unsettled[key] = damage.first
            self.reader.retry(key, SETTLE_RETRY_S)
            return
        self._unsettled.pop(key, None)
        self.acks.damaged(st, self.source.alias, damage.describe(), damage.first, damage.last)

    @staticmethod
    def _batch(st: PartitionState, raw: memoryview, start: int,
               h: tuple[int, ...] | None = None) -> tuple[memoryview | bytearray, WholeBatch] | None:
        """What to send of ``raw`` (records from ``start``, offsets contiguous), and its acknowledgement. ``h``:
        its header (records.HEADER), if read already."""
        h = h or HEADER.unpack_from(raw)
        gaps: list[tuple[int, int]] = []
        data: memoryview | bytearray = raw
        first, count = h[BASE], h[COUNT]
        if first < start or h[LAST_DELTA] + 1 != count:  # (a gap inside: compaction)
            data, gaps = contiguous_copy(raw, start)
            if not data:
                return None
            first = max(first, start)
            if gaps and gaps[0][0] == 0:  # the first record kept follows a gap
                first = gaps.pop(0)[1]
            count = record_count(data)
        return data, BatchCopier._whole(st, first, count, gaps, len(data), h[MAX_TIMESTAMP], 1)

    @staticmethod
    def _run(st: PartitionState, run: list[memoryview], start: int) -> tuple[memoryview | bytearray, WholeBatch] | None:
        """What to send of consecutive small batches (each at or past ``start``): one batch holding their records
        (wire/recode.py merged), or the batch itself when it is alone."""
        if len(run) == 1:
            return BatchCopier._batch(st, run[0], start)
        data, gaps = merged(run)
        return data, BatchCopier._whole(st, base_offset(run[0]), record_count(data), gaps, len(data),
                                        max_timestamp(data), len(run))

    @staticmethod
    def _whole(st: PartitionState, first: int, count: int, gaps: list[tuple[int, int]], size: int, ts_last: int,
               sources: int) -> WholeBatch:
        """The acknowledgement of a batch to send (``count`` records from source offset ``first``, ``gaps``: (index,
        source offset) of each record after a gap), last in ``st``'s pending batches."""
        run_index, run_first = gaps[-1] if gaps else (0, first)
        b = WholeBatch(st.gen, first)
        # After its last record, not its last offset: offsets compacted away at a batch's end are passed as the
        # records path passes them (commit.advance_idle, with an offset-map entry where the next record lands).
        b.next = run_first + count - run_index
        b.count = count
        b.size = size
        b.pending = 1
        b.gaps = gaps
        b.ts_last = ts_last
        b.sources = sources
        st.pending.append(b)
        return b

    def _hand(self, st: PartitionState, made: tuple[memoryview | bytearray, WholeBatch] | None,
              out: list[Outgoing]) -> WholeBatch | None:
        """``made`` (a batch to send and its acknowledgement) added to ``out`` (the provenance header added, for
        the identity policy); its acknowledgement, None when there was nothing to send."""
        if made is None:
            return None
        data, batch = made
        if self.mirror_writes is not None and self.mirror_writes.hop is not None:
            data = self.mirror_writes.tagged(data)
            batch.size = len(data)
        out.append(Outgoing(st.remote, st.partition, data, token=batch))
        return batch

    def unmerge(self, st: PartitionState, b: Batch) -> bool:
        """``b`` held several source batches and the target refused it as too large: from now on ``st``'s batches
        go one by one (True; the caller reads it again from the source), said once."""
        if not (isinstance(b, WholeBatch) and b.sources > 1 and b.err is not None
                and b.err.code() in (KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.RECORD_LIST_TOO_LARGE)):
            return False
        self.unmerged.add((st.topic, st.partition))
        log.warning("flow %s: %s[%d]: target topic %s refused %d source batches sent as one (%d bytes) as too large: "
                    "its batches go one by one from offset %d (raise its max.message.bytes above %d to have them "
                    "merged)", self.flow_name, st.topic, st.partition, st.remote, b.sources, b.size, b.first,
                    MERGE_BYTES)
        return True

    def answer(self, results: Iterable[Sent]) -> None:
        now = time.time()
        for r in results:
            b = cast(WholeBatch, r.batch.token)
            self.in_flight -= b.count
            self.in_flight_bytes -= b.size + BATCH_BOOKKEEPING_BYTES
            if r.error == 0:
                b.t_first, b.t_last, b.acked_at = r.base_offset, r.base_offset + b.count - 1, now
                if self.corrupt_refusals:
                    self.corrupt_refusals.pop((r.batch.topic, r.batch.partition), None)
            else:
                b.err = KafkaError(_LOCAL_ERRORS.get(r.error, r.error), r.describe())
            b.pending = 0

    def _fetch_failed(self, st: PartitionState, error: int, start: int) -> None:
        """The source answered an error for ``st`` (other than a moved leader, which the fetcher handles): fetched
        again from the same position after a backoff. What was handed over stays in flight and counts."""
        self.metrics.errors.labels(self.flow_name, "consume").inc()
        delay = self._retry_later(st)
        denied = denied_line(self.flow_name, KafkaError(error), Access("Read", st.topic, self.source))
        if denied is not None:
            self.metrics.errors.labels(self.flow_name, "not_authorized").inc()
            log.error("%s; fetching %s[%d] again in %.1fs", denied, st.topic, st.partition, delay)
        else:
            log.warning("flow %s: %s[%d]: the source answers %s; fetching it again from offset %d in %.1fs",
                        self.flow_name, st.topic, st.partition, name(error), start, delay)

    def _retry_later(self, st: PartitionState) -> float:
        """Fetch ``st`` again from its position after its backoff (doubled for the next time); the delay."""
        delay = st.backoff
        st.backoff = min(st.backoff * 2, MAX_BACKOFF_S)
        self.reader.retry((st.topic, st.partition), delay)
        return delay

    def _out_of_range(self, st: PartitionState, start: int) -> None:
        """The source no longer holds ``start`` (retention or DeleteRecords removed it before it was copied): go on
        where source.start.position says, as the records path's consumer does (auto.offset.reset). Only the fetch
        position moves: what was handed over is acknowledged as usual, and once nothing is in flight
        commit.advance_idle moves progress past the offsets removed (an offset-map entry where the next lands)."""
        if self.recreated(st.topic):  # not a loss: a new topic under the old name (its partitions rewound)
            return
        earliest = self.reader.start_position == "earliest"
        key = (st.topic, st.partition)
        try:
            pos = self.reader.resolve([key], earliest)[key]
        except Exception as exc:  # (a leader election, say): this partition is asked again, the others go on
            log.warning("flow %s: %s[%d]: offset %d is no longer on the source, and its %s is not known (%s); asking "
                        "again in %.1fs", self.flow_name, st.topic, st.partition, start,
                        "log start" if earliest else "end", exc, self._retry_later(st))
            return
        self.metrics.errors.labels(self.flow_name, "offset_out_of_range").inc()
        log.warning("flow %s: %s[%d]: offset %d is no longer on the source (retention or DeleteRecords removed it "
                    "before it was copied); going on from its %s, offset %d (source.start.position)", self.flow_name,
                    st.topic, st.partition, start, "log start" if earliest else "end", pos)
        self.reader.seek(TopicPartition(st.topic, st.partition, pos))

    def close(self) -> None:
        """Idempotent. Nothing handed over is answered after it (a restart reads it again from progress)."""
        self.reader.fetcher.close()
        self.sender.close()
        if self.mirror_writes is not None:
            self.mirror_writes.close()
        self.in_flight = self.in_flight_bytes = 0


class BatchDelivery(AtLeastOnce):
    """At-least-once with the copier's batches: counted in flight (back-pressure), answered while the loop waits on
    the producers, and flushed before the last commit."""

    def __init__(self, copier: BatchCopier, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.copier = copier

    def in_flight(self) -> int:
        return super().in_flight() + self.copier.in_flight

    def poll_producers(self, timeout: float) -> None:
        super().poll_producers(0)
        self.copier.collect(timeout)

    def flush(self, timeout: float) -> int:
        deadline = time.monotonic() + timeout
        while self.copier.in_flight and time.monotonic() < deadline:
            self.copier.collect(min(0.1, max(0.0, deadline - time.monotonic())))
        return super().flush(max(0.0, deadline - time.monotonic()))

    def on_failure(self, st: PartitionState, b: Batch) -> None:
        err = b.err
        if err is not None and err.code() == KafkaError.INVALID_MSG:  # CORRUPT_MESSAGE
            self._refused_as_corrupt(st, b)
            return
        if err is not None and err.code() in RECORD_ERRORS:
            if self.copier.unmerge(st, b):
                self.acks.rewind(st, b, careful=False, backoff=False)
                return
            self.acks.pause(st, f"batch at offset {b.first} ({b.count} records, {b.size} bytes) rejected by target "
                                f"topic {st.remote}: {err.str()} (partition paused; this flow copies the source's "
                                "batches whole: raise the target topic's max.message.bytes, or set "
                                "replication.data.path = records for it, and restart)")
            return
        self.acks.handle_failure(st, b)

    def _refused_as_corrupt(self, st: PartitionState, b: Batch) -> None:
        """The target found the batch corrupt, though it matched its CRC when read from the source: its bytes
        changed on the way (the mirror's memory, the network path). Read again from the source and sent again, after
        a backoff; refused ``CORRUPT_RETRIES`` times in a row, the partition pauses with what to look at."""
        key = (st.topic, st.partition)
        refusals = self.copier.corrupt_refusals[key] = self.copier.corrupt_refusals.get(key, 0) + 1
        self.copier.metrics.errors.labels(self.copier.flow_name, "corrupt_on_target").inc()
        if refusals < CORRUPT_RETRIES:
            log.warning("flow %s: %s[%d]: target topic %s refused the batch at offset %d as corrupt (CORRUPT_MESSAGE) "
                        "though it matched its CRC when read from the source; reading it again from the source",
                        self.copier.flow_name, st.topic, st.partition, st.remote, b.first)
            self.acks.rewind(st, b, careful=False, backoff=True)
            return
        del self.copier.corrupt_refusals[key]
        self.acks.pause(st, f"target topic {st.remote} refused the batch at offset {b.first} as corrupt "
                            f"(CORRUPT_MESSAGE) {refusals} times in a row, though it matched its CRC each time it was "
                            "read from the source: its bytes change between the mirror and the target (look at the "
                            "mirror host's memory errors, the network path and the target broker's log), then "
                            f"`mirror-core partitions resume --flow '{self.copier.flow_name}' --topic {st.topic} "
                            f"--partition {st.partition} --reason ...`")

    def close(self, graceful: bool) -> None:
        self.copier.reader.fetcher.close()  # nothing more read; what is in flight is answered
        try:
            super().close(graceful)
        finally:
            self.copier.close()
