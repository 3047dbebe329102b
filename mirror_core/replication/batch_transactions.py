"""Exactly-once on the batches data path: each owned slot's transactional producer is the wire client's
(:class:`SlotProducer`: a :class:`~mirror_core.wire.sender.BatchSender` in a transaction of the slot's
transactional id), so that the source's batches, copied whole, and the mirror's offset-map entries and progress
commit or abort together, as the records path's do (exactly_once.py owns the invariant and the slot lifecycle).

:class:`SlotProducer` answers the calls SlotManager and commit.py make of a librdkafka transactional producer
(init, begin, flush, produce, commit, abort), with its failures as the KafkaErrors SlotManager already sorts:
a fenced id fatal, a refused write abortable, a coordinator out of reach retriable. :class:`SlotSenders` is
the copier's sender: each partition's batches go through the producer of the slot that owns it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from confluent_kafka import KafkaError, KafkaException

from mirror_core.errors import MirrorError
from mirror_core.replication.assignment import Assignment
from mirror_core.replication.batch import RECORD_ERRORS, Batch, PartitionState
from mirror_core.replication.batch_path import BatchCopier
from mirror_core.replication.delivery import ExactlyOnce
from mirror_core.replication.exactly_once import SlotManager
from mirror_core.wire.errors import BrokerRefused, ProducerFenced, WireError
from mirror_core.wire.leaders import TP
from mirror_core.wire.metadata import Brokers
from mirror_core.wire.recode import encode_batch
from mirror_core.wire.records import BATCH_HEADER
from mirror_core.wire.sender import NOT_SENT, BatchSender, Outgoing, Sent
from mirror_core.wire.transactions import TransactionCoordinator

#: how often a wait for answers looks again (the sender's results come in from its threads)
POLL_S = 0.05
#: the mirror's own records per batch, in bytes at most (the default max.message.bytes is 1 MiB)
OWN_BATCH_BYTES = 512 << 10


def _error(exc: BaseException) -> KafkaException:
    """A coordinator failure as the KafkaError SlotManager sorts: fenced (fatal), refused (the broker's code, as
    librdkafka would raise it: an authorization failure is then named as on the records path), or out of reach
    (retriable)."""
    if isinstance(exc, ProducerFenced):
        return KafkaException(KafkaError(KafkaError._FENCED, str(exc), fatal=True))
    if isinstance(exc, BrokerRefused):
        return KafkaException(KafkaError(exc.code, str(exc)))
    return KafkaException(KafkaError(KafkaError._TIMED_OUT, str(exc), retriable=True))


class _Own:
    """The token of a batch of the mirror's own records: their delivery callbacks."""

    __slots__ = ("callbacks",)

    def __init__(self, callbacks: list[Callable[[KafkaError | None, object], None] | None]) -> None:
        self.callbacks = callbacks


class SlotProducer:
    """One slot's transactional producer over the wire client. Data batches come from the copier (through
    :class:`SlotSenders`); :meth:`produce` takes the mirror's own records, sent as one batch per partition when
    the transaction is flushed or committed. Not thread-safe beyond what SlotManager does: one slot's calls
    one at a time (its flush and commit may run beside other slots')."""

    def __init__(self, brokers: Brokers, transactional_id: str, on_data: Callable[[list[Sent]], None],
                 delivery_timeout_s: float, transaction_timeout_ms: int = 60_000,
                 internal_limit: int | None = None,
                 on_producer_id: Callable[[int, float], None] | None = None) -> None:
        #: the most record bytes in one batch of the mirror's own records: what their topics take (the smallest
        #: max.message.bytes of progress and offset syncs, less a batch's header), OWN_BATCH_BYTES at most
        self.own_batch_bytes = min(OWN_BATCH_BYTES, internal_limit - BATCH_HEADER) if internal_limit else \
            OWN_BATCH_BYTES
        self.txn = TransactionCoordinator(brokers, transactional_id, transaction_timeout_ms)
        self.sender = BatchSender(brokers, delivery_timeout_s=delivery_timeout_s, transaction=self.txn)
        self.on_data = on_data  # the copier's answers (under SlotSenders' lock)
        self._own: dict[TP, list[tuple[bytes | None, bytes | None, Any]]] = {}  # produced, not sent yet
        self._outstanding = 0  # batches handed to the sender and not answered (data and own)
        self._own_out = 0  # of which the mirror's own
        self._failed: list[str] = []  # own batches refused in this transaction
        self._own_tps: set[TP] = set()
        #: where the last transaction's own records went: the next one writes there too (progress of the same
        #: partitions), so they are added to it with its first batches (forgotten with each new epoch: a partition
        #: refused is not asked for again)
        self._own_last: set[TP] = set()
        #: the identity policy: records a producer id on the target before anything is written with it (the reverse
        #: flow skips its batches: mirror_writes.py); the slot's id keeps its producer id across epochs
        self.on_producer_id = on_producer_id
        self._recorded: int | None = None

    def __len__(self) -> int:
        """The mirror's own records not yet answered (the data batches are the copier's to count)."""
        return sum(len(v) for v in self._own.values()) + self._own_out

    def __bool__(self) -> bool:
        return True

    # -- the copier's side (SlotSenders) --------------------------------------------------------------------
    def send(self, batches: list[Outgoing]) -> None:
        try:
            if self._own_last and not self.txn.partitions:  # the transaction's first batches: one request adds
                self.txn.add(self._own_last | {(b.topic, b.partition) for b in batches})  # its own records' too
            self.sender.send(batches)
        except WireError as exc:  # AddPartitionsToTxn refused or out of reach: each batch fails, the slot aborts
            partitions = {(b.topic, b.partition) for b in batches}
            if len(partitions) > 1 and not isinstance(exc, ProducerFenced):
                # One request adds them all or none (the others answer OPERATION_NOT_ATTEMPTED): asked again one
                # partition at a time, each refusal is its own partition's, with the broker's reason.
                self._own_last.clear()
                for tp in partitions:
                    self.send([b for b in batches if (b.topic, b.partition) == tp])
                return
            code = KafkaError._FENCED if isinstance(exc, ProducerFenced) else KafkaError._TRANSPORT
            self._outstanding += len(batches)
            self._answered([Sent(b, code, -1, str(exc)) for b in batches])
            return
        self._outstanding += len(batches)

    def poll(self, timeout: float = 0.0) -> int:
        """Serve answers: the copier's handed on, the mirror's own records' callbacks called. How many."""
        answers = self.sender.poll(timeout)
        self._answered(answers)
        return len(answers)

    def _answered(self, answers: list[Sent]) -> None:
        data = []
        for r in answers:
            self._outstanding -= 1
            if isinstance(r.batch.token, _Own):
                self._own_out -= 1
                if r.error:
                    self._failed.append(r.describe())
                err = KafkaError(r.error, r.describe()) if r.error else None
                for cb in r.batch.token.callbacks:
                    if cb is not None:
                        cb(err, None)
            else:
                data.append(r)
        if data:
            self.on_data(data)

    # -- librdkafka's transactional producer, as SlotManager and commit.py call it ----------------------------
    def produce(self, topic: str, value: bytes | None = None, key: bytes | None = None, partition: int = 0,
                on_delivery: Callable[[KafkaError | None, object], None] | None = None) -> None:
        self._own.setdefault((topic, partition), []).append((key, value, on_delivery))

    def init_transactions(self, timeout: float) -> None:
        """A new epoch for the slot's id (fences and aborts a previous owner); sequences start again."""
        self.txn.timeout_s = max(timeout, 1.0)
        try:
            producer_id, epoch = self.txn.init()
        except WireError as exc:
            raise _error(exc) from None
        if self.on_producer_id is not None and producer_id != self._recorded:
            try:
                self.on_producer_id(producer_id, self.txn.timeout_s)  # (within the caller's step)
            except MirrorError as exc:  # not recorded: retried as a coordinator out of reach is, with a new epoch
                raise KafkaException(KafkaError(KafkaError._TIMED_OUT, str(exc), retriable=True)) from None
            self._recorded = producer_id
        self.sender.use_producer(producer_id, epoch)
        self._own_last.clear()
        for tp in self._own_tps:
            self.sender.rewind(tp)
        self._failed.clear()

    def begin_transaction(self) -> None:
        """Nothing to ask: the coordinator opens the transaction with its first partition."""

    def flush(self, timeout: float) -> int:
        """The mirror's own records sent, then every batch answered (or ``timeout``): what is still unanswered."""
        self._send_own()
        deadline = time.monotonic() + timeout
        while self._outstanding and time.monotonic() < deadline:
            self.poll(min(POLL_S, max(0.0, deadline - time.monotonic())))
        return self._outstanding

    def commit_transaction(self, timeout: float) -> None:
        left = self.flush(timeout)
        if left:
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT, f"{left} batches unanswered before the commit",
                                            txn_requires_abort=True))
        if self._failed:
            why = "; ".join(self._failed[:3])
            self._failed.clear()
            raise KafkaException(KafkaError(KafkaError._INCONSISTENT, f"the mirror's own records refused: {why}",
                                            txn_requires_abort=True))
        self.txn.timeout_s = max(timeout, 1.0)
        try:
            self.txn.end(commit=True)
        except WireError as exc:
            raise _error(exc) from None

    def abort_transaction(self, timeout: float) -> None:
        """Abort what the transaction holds, then a new epoch: batches of the aborted transaction that failed or
        were never answered leave sequences the broker cannot continue (KIP-360's bump, done by InitProducerId)."""
        self._own.clear()
        self.flush(timeout)
        self.txn.timeout_s = max(timeout, 1.0)
        try:
            self.txn.end(commit=False)
        except WireError as exc:
            raise _error(exc) from None
        self.init_transactions(timeout)

    def purge(self, in_queue: bool = True, in_flight: bool = False, blocking: bool = True) -> None:
        """The mirror's own records not sent yet are dropped (the transaction aborts)."""
        for records in self._own.values():
            for _, _, cb in records:
                if cb is not None:
                    cb(KafkaError(KafkaError._PURGE_QUEUE), None)
        self._own.clear()

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> None:
        """Nothing to look up: the sender finds each partition's leader when its first batch comes."""

    def close(self) -> None:
        self.sender.close()
        self.txn.close()

    @staticmethod
    def _own_batch(topic: str, partition: int, records: list[tuple[bytes | None, bytes | None, Any]],
                   now: int) -> Outgoing:
        return Outgoing(topic, partition, encode_batch([(k, v) for k, v, _ in records], now),
                        token=_Own([cb for _, _, cb in records]))

    def _send_own(self) -> None:
        """The mirror's own records, in batches their topics take (``own_batch_bytes``: progress of thousands of
        partitions is more than one batch)."""
        if not self._own:
            return
        now = int(time.time() * 1000)
        batches = []
        for (topic, partition), records in self._own.items():
            chunk: list[tuple[bytes | None, bytes | None, Any]] = []
            size = 0
            for record in records:
                n = len(record[0] or b"") + len(record[1] or b"") + 16  # (a record's overhead: at most 16 bytes)
                if chunk and size + n > self.own_batch_bytes:
                    batches.append(self._own_batch(topic, partition, chunk, now))
                    chunk, size = [], 0
                chunk.append(record)
                size += n
            if chunk:
                batches.append(self._own_batch(topic, partition, chunk, now))
        self._own.clear()
        self._own_last = {(b.topic, b.partition) for b in batches}
        self._own_tps |= self._own_last
        self._own_out += len(batches)
        self.send(batches)


class SlotSenders:
    """The copier's sender on an exactly-once flow: each partition's batches through its slot's producer
    (:meth:`route`, before its batches are handed over), their answers handed to the copier (``answer``) by
    whichever thread waited for them: the flow's, or a slot's flush before its commit, so that the commit's
    progress covers every batch answered (the slots' flushes run side by side: one answer at a time)."""

    def __init__(self) -> None:
        self.producers: dict[int, SlotProducer] = {}
        self.answer: Callable[[list[Sent]], None] = lambda _: None  # the copier's, once it exists
        self._slot_of: dict[TP, int] = {}
        self._lock = threading.Lock()

    def on_data(self, answers: list[Sent]) -> None:
        with self._lock:
            self.answer(answers)

    def route(self, st: PartitionState) -> None:
        if st.slot is not None:
            self._slot_of[(st.remote, st.partition)] = st.slot

    def send(self, batches: Iterable[Outgoing]) -> None:
        by_slot: dict[int, list[Outgoing]] = {}
        orphans: list[Sent] = []
        for b in batches:
            k = self._slot_of.get((b.topic, b.partition))
            if k is None or k not in self.producers:
                orphans.append(Sent(b, NOT_SENT, -1, "its slot is no longer this process's"))
            else:
                by_slot.setdefault(k, []).append(b)
        for k, of_slot in by_slot.items():
            self.producers[k].send(of_slot)
        if orphans:
            self.on_data(orphans)

    def rewind(self, tp: TP) -> None:
        k = self._slot_of.get(tp)
        if k is not None and k in self.producers:
            self.producers[k].sender.rewind(tp)

    def waiting(self, tp: TP) -> int:
        k = self._slot_of.get(tp)
        p = self.producers.get(k) if k is not None else None
        return p.sender.waiting(tp) if p is not None else 0

    def poll(self, timeout: float) -> list[Sent]:
        """Answers served (handed to the copier already: none returned), waiting up to ``timeout`` for one."""
        deadline = time.monotonic() + timeout
        while True:
            got = sum(p.poll(0) for p in list(self.producers.values()))
            if got or time.monotonic() >= deadline or not self.producers:
                return []
            time.sleep(min(POLL_S / 5, max(0.0, deadline - time.monotonic())))

    def released(self, k: int) -> None:
        p = self.producers.pop(k, None)
        if p is not None:
            p.close()

    def close(self) -> None:
        for k in list(self.producers):
            self.released(k)


class BatchExactlyOnce(ExactlyOnce):
    """Exactly-once with the copier's batches: counted in flight, answered while the loop waits, and a batch the
    target refuses for its records (too large, invalid) aborts its slot's transaction and pauses its partition
    there (sent again it would be refused again: the records path would find the record in careful mode)."""

    def __init__(self, copier: BatchCopier, senders: SlotSenders, slots: SlotManager, assignment: Assignment) -> None:
        super().__init__(slots, assignment)
        self.copier, self.senders = copier, senders

    def in_flight(self) -> int:
        return super().in_flight() + self.copier.in_flight

    def poll_producers(self, timeout: float) -> None:
        self.copier.collect(timeout)

    def on_failure(self, st: PartitionState, b: Batch) -> None:
        err = b.err
        unmerged = err is not None and err.code() in RECORD_ERRORS and self.copier.unmerge(st, b)
        self.slots.fail(st, b)  # (the slot's transaction aborted, its partitions read again from its progress)
        if unmerged:
            st.careful = False  # (read again whole: no record of it is at fault)
        elif err is not None and err.code() in RECORD_ERRORS:
            self.slots.acks.pause(st, f"batch at offset {b.first} ({b.count} records, {b.size} bytes) rejected by "
                                      f"target topic {st.remote}: {err.str()} (partition paused; this flow copies the "
                                      "source's batches whole: raise the target topic's max.message.bytes, or set "
                                      "replication.data.path = records for it, and restart)")

    def close(self, graceful: bool) -> None:
        self.copier.reader.fetcher.close()  # nothing more read; what is in flight is answered (graceful: committed)
        try:
            super().close(graceful)
        finally:
            self.copier.close()
            self.senders.close()
