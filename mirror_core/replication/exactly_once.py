"""Exactly-once replication: transactional producers per *slot*, fenced through a consumer group.

Source partitions are hashed into ``exactly.once.slots`` slots. Mirror processes share the slots
through a consumer group on the *target* cluster over an (empty) slot topic with one partition per
slot; owning slot ``k`` means owning transactional id ``mirror-core.<source>-<target>.slot-<k>``.
Taking a slot calls ``init_transactions`` with that id, which aborts and fences any previous owner
(a zombie cannot commit afterwards), and only then reads the slot's progress.

Invariant (owned here): records, offset-map entries and progress of a slot's partitions are written
in one transaction, so the target holds each source record exactly once (read_committed) whatever
moment a mirror is stopped or killed. On any error the transaction is aborted and the slot's
partitions are rewound to their committed progress.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from mirror_core import authorization
from mirror_core.authorization import Access
from mirror_core.clients import (
    ClusterHealth,
    error_code,
    fatal_consumer_error,
    make_admin,
    make_consumer,
    make_producer,
    purge_unsent,
)
from mirror_core.config.model import ClusterConfig, FlowConfig
from mirror_core.errors import MirrorError
from mirror_core.metrics import Metrics
from mirror_core.replication.acks import Acks
from mirror_core.replication.assignment import Assignment
from mirror_core.replication.batch import Batch, PartitionMode, PartitionState
from mirror_core.replication.commit import ProgressCommitter
from mirror_core.replication.slots import ensure_slot_topic, fewer_slots, slot_of, slot_topic
from mirror_core.replication.txn_failures import TransientFailures, cause, record_error

log = logging.getLogger(__name__)


# What librdkafka reports when a newer producer with the same transactional id took over.
_FENCED = frozenset({KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH})


#: The longest each transactional call may take in all, and the steps it is taken in (see in_steps).
INIT_TIMEOUT_S = 60.0
COMMIT_TIMEOUT_S = 60.0
ABORT_TIMEOUT_S = 30.0
STEP_S = 2.0


def retriable(exc: BaseException) -> bool:
    """A transactional call failed for now but may be called again (librdkafka goes on with it, e.g. a
    _TIMED_OUT commit, or init_transactions answered CONCURRENT_TRANSACTIONS while the broker settles the
    previous transaction); not fatal and not an error that needs an abort."""
    err = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
    return (isinstance(err, KafkaError) and err.retriable() and not err.fatal()
            and not err.txn_requires_abort())


def in_steps(producer: Producer, call: Callable[[float], object], timeout: float, step: float = STEP_S) -> None:
    """A transactional ``call`` (init, commit or abort) in steps of ``step`` seconds, serving the
    producer's callbacks between them.

    A call waiting for an unreachable coordinator serves no callbacks, and the error callbacks are what
    mark the target unreachable (ClusterHealth): with one 60 s commit, a WAN partition that began during
    it left /status saying "reachable" for up to a minute (the WAN partition test failed so in CI).
    librdkafka goes on with a timed-out call and documents calling it again, as for its other retriable
    errors (one init_transactions(60) call used to retry them inside). Raised: any other error, _CONFLICT
    (another transactional call is pending: calling this one again cannot help), and the last retriable
    error at the overall timeout (``retriable`` tells it apart: the call's outcome is then unknown)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            call(max(0.1, min(step, deadline - time.monotonic())))
            return
        except KafkaException as exc:
            if not retriable(exc) or error_code(exc) == KafkaError._CONFLICT or time.monotonic() >= deadline:
                raise
        producer.poll(0)


class SlotManager:
    """Owns the slots this process holds: their transactional producers and open transactions.

    Its collaborators are handed in: the assignment (which partitions are replicated, and with which
    producer), the acknowledgement side (collect, rewind, pause) and the progress committer (offset-map
    entries and progress inside a transaction).
    """

    def __init__(self, flow: FlowConfig, target: ClusterConfig, metrics: Metrics, target_health: ClusterHealth,
                 assignment: Assignment, acks: Acks, committer: ProgressCommitter,
                 membership: Mapping[str, str] | None = None, fits: int | None = None,
                 slot_producer: Callable[[int, str], Producer] | None = None,
                 on_release: Callable[[int], None] | None = None) -> None:
        self.flow = flow
        #: the batches data path's: each slot's transactional producer is the wire client's
        #: (batch_transactions.py), released through ``on_release``; else librdkafka's
        self.slot_producer, self.on_release = slot_producer, on_release
        self.fits = fits  # what the progress and offset-map topics take (producer_pool.say_slot_cap)
        self.slots = flow.exactly_once_slots
        self.target = target
        self.metrics = metrics
        self.target_health = target_health
        self.assignment = assignment
        self.acks = acks
        self.committer = committer
        self.topic = slot_topic(flow.source, flow.target)
        ensure_slot_topic(make_admin(self.target), self.topic, self.slots, flow.internal_replication_factor,
                          flow.name, target)
        self.producers: dict[int, Producer] = {}
        self.open: set[int] = set()
        self._fenced_noted: set[int] = set()  # slots whose current producer was counted as fenced
        self.transient = TransientFailures()  # where partitions last failed transiently (replayed in batches)
        self.gave_up = False  # a slot was given up: the pipeline restarts, nothing more is committed
        self._pool: ThreadPoolExecutor | None = None  # flushes and commits of several slots, side by side
        self.membership: Consumer = make_consumer(self.target, f"{flow.worker_group_id}.slots", health=target_health,
                                                  enforced=membership, standing=True)
        guard = assignment.guarded
        self.membership.subscribe([self.topic], on_assign=guard(self._on_assign), on_revoke=guard(self._on_revoke),
                                  on_lost=guard(self._on_lost))

    def _states(self, k: int) -> list[PartitionState]:
        return [st for st in self.assignment.states.values() if st.slot == k]

    # -- membership ---------------------------------------------------------------------------------
    def poll(self) -> None:
        """Serve membership rebalances (the slot topic holds no records)."""
        for m in self.membership.consume(1, 0):
            err = m.error()
            fatal = None if err is None else fatal_consumer_error(err, f"{self.flow.worker_group_id}.slots",
                                                                   self.target.alias, self.membership.memberid)
            if fatal is not None:
                raise fatal
        self.assignment.raise_callback_error()

    def owned(self) -> list[int]:
        return sorted(self.producers)

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if any(tp.partition >= self.slots for tp in partitions):  # grown by an instance counting more slots
            have = len(consumer.list_topics(self.topic, timeout=10).topics[self.topic].partitions)
            raise fewer_slots(self.topic, have, self.slots, self.target.alias)
        for tp in partitions:
            k = tp.partition
            tid = f"mirror-core.{self.flow.source}-{self.flow.target}.slot-{k}"
            producer = self.slot_producer(k, tid) if self.slot_producer is not None else make_producer(
                self.target, self.flow.producer_overrides, self.target_health, enforced={
                    "transactional.id": tid, "transaction.timeout.ms": "60000", "message.timeout.ms": "55000"},
                fits=self.fits)
            with authorization.guard(self.flow.name, Access("Write", tid, self.target)):
                # Fences and aborts any previous owner of this slot, and settles a commit of ours whose
                # outcome we never learnt (see commit_slots).
                in_steps(producer, producer.init_transactions, INIT_TIMEOUT_S)
            self.producers[k] = producer
            self._fenced_noted.discard(k)
            log.info("flow %s: took exactly-once slot %d", self.flow.name, k)
        consumer.incremental_assign(partitions)
        self.reconcile(self.assignment.partition_counts)

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        try:
            self.commit_slots(sorted(tp.partition for tp in partitions))
        finally:  # every revoked slot is released, even when one of them is given up
            for tp in partitions:  # a revoke means the slot group answered: another process takes them
                self._release(tp.partition, graceful=True, strand=False)
            consumer.incremental_unassign(partitions)

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            self._release(tp.partition, graceful=False)
        consumer.incremental_unassign(partitions)

    def _release(self, k: int, graceful: bool, strand: bool = True) -> None:
        # A slot lost, given up or closed while the target does not answer: no process can copy its
        # partitions until it answers again (the slot group lives there), so their lag stays on this
        # process's gauges meanwhile (``strand``: False when the slot group itself took the slot).
        self.assignment.release_states(self._states(k), stranded=strand and not self.target_health.reachable)
        producer = self.producers.pop(k, None)
        if producer is not None and k in self.open and not graceful:
            try:
                in_steps(producer, producer.abort_transaction, 10)
            except KafkaException as exc:  # fenced already (the new owner aborted it) is fine too
                self._note_fenced(k, exc)
        self.open.discard(k)
        if producer is not None:
            if self.on_release is not None:
                self.on_release(k)
            log.info("flow %s: released exactly-once slot %d", self.flow.name, k)

    def _note_fenced(self, k: int, exc: KafkaException) -> None:
        """Count a slot whose producer the broker fenced: another process owns the slot now and its
        init_transactions aborted this one's open transaction (a zombie's records never commit)."""
        err = exc.args[0] if exc.args else None
        fenced = error_code(exc) in _FENCED or (  # a producer already fatal reports _FATAL, naming the cause
            isinstance(err, KafkaError) and err.code() == KafkaError._FATAL and "fenced" in err.str().lower())
        if fenced and k not in self._fenced_noted:
            self._fenced_noted.add(k)
            self.metrics.errors.labels(self.flow.name, "slot_fenced").inc()
            log.warning("flow %s: slot %d: fenced (a new owner took the slot, or its transaction timed out); "
                        "its open transaction is aborted", self.flow.name, k)

    def reconcile(self, counts: dict[str, int]) -> None:
        """Replicate exactly the source partitions of owned slots (new topics/partitions included)."""
        states = self.assignment.states
        wanted: dict[int, list[TopicPartition]] = {}
        for topic, count in counts.items():
            for p in range(count):
                k = slot_of(topic, p, self.slots)
                if k in self.producers and (topic, p) not in states:
                    wanted.setdefault(k, []).append(TopicPartition(topic, p))
        self.assignment.release_states([st for st in states.values()
                                        if st.topic not in counts or st.partition >= counts[st.topic]])
        for k, tps in sorted(wanted.items()):
            self.assignment.take(tps, [self.producers[k]], k)

    # -- transactions -------------------------------------------------------------------------------
    def ensure_txn(self, st: PartitionState) -> None:
        k = st.slot
        if k is not None and k not in self.open:
            self.producers[k].begin_transaction()
            self.open.add(k)

    def commit_all(self) -> None:
        self.commit_slots(list(self.producers))

    def commit_open(self) -> None:
        """Commit the open transactions now (the mirror is caught up: see the replicator's loop)."""
        self.commit_slots(sorted(self.open))

    def commit(self, k: int | None) -> None:
        if k is not None:
            self.commit_slots([k])

    def commit_slots(self, slots: list[int]) -> None:
        """Flush each slot, add offset-map entries and progress to its transaction, commit it.

        The slots' flushes and commits each wait for the target, so they run side by side (the
        client releases the GIL while it waits; a slot's delivery callbacks touch only its own
        batches, and this thread waits meanwhile); everything else runs here, one slot after another.
        """
        todo = []
        for k in slots:
            if k not in self.producers:
                continue
            if k not in self.open:
                if not any(st.acked is not None and st.acked != st.committed for st in self._states(k)):
                    continue
                self.producers[k].begin_transaction()
                self.open.add(k)
            todo.append(k)
        if not todo:
            return
        for k, outcome in self._each(todo, lambda p: p.flush(30)).items():
            if isinstance(outcome, BaseException):  # fatal (e.g. fenced) errors surface from flush
                if isinstance(outcome, KafkaException):
                    self._note_fenced(k, outcome)
                self._abort(k, None, None, f"flush failed: {outcome}")
            elif outcome != 0:
                self._abort(k, None, None, "flush timed out")
        self.acks.collect()
        ready = [k for k in todo if k in self.open]  # a failed batch aborted its transaction during collect
        written = {k: [(st, self.committer.write_in_transaction(st, self.producers[k])) for st in self._states(k)
                       if st.acked is not None and st.acked != st.committed and not st.pending] for k in ready}
        outcomes = self._each(ready, lambda p: in_steps(p, p.commit_transaction, COMMIT_TIMEOUT_S))
        # Successes first, then the unsettled slots dropped, then every failed slot aborted (an abort may
        # give up in turn), and only then a give-up raised: each slot's outcome is applied.
        unsettled = [k for k, o in outcomes.items() if isinstance(o, BaseException) and retriable(o)]
        failed = {k: o for k, o in outcomes.items() if isinstance(o, BaseException) and k not in unsettled}
        for k, outcome in outcomes.items():
            if not isinstance(outcome, BaseException):
                self.open.discard(k)
                for st, acked in written[k]:
                    st.committed = acked
        self._drop_unusable(unsettled)
        gave_up: MirrorError | None = None
        for k, exc in failed.items():
            if isinstance(exc, KafkaException):
                self._note_fenced(k, exc)
            try:
                self._abort(k, None, None, f"commit failed: {exc}")
            except MirrorError as given_up:  # that slot is dropped already; abort the others all the same
                gave_up = gave_up or given_up
        if unsettled:
            self._give_up(unsettled, f"the commit did not finish within {COMMIT_TIMEOUT_S:.0f} s (is the target's "
                                     "transaction coordinator reachable?) and may still land", gave_up)
        if gave_up is not None:
            raise gave_up

    def _each(self, slots: list[int], call: Callable[[Producer], object]) -> dict[int, object]:
        """``call`` on each slot's producer, side by side: slot -> result, or the exception it raised
        (KafkaException, SystemError; anything else is raised here)."""
        def one(k: int) -> object:
            try:
                return call(self.producers[k])
            except (KafkaException, SystemError) as exc:
                return exc

        if len(slots) == 1:
            return {slots[0]: one(slots[0])}
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=self.slots, thread_name_prefix=f"{self.flow.name}-slots")
        return dict(zip(slots, self._pool.map(one, slots), strict=True))

    def fail(self, st: PartitionState, b: Batch) -> None:
        if st.slot is not None:
            st, b = cause(self._states(st.slot), st, b)
        if (denied := self.acks.denied(st, b.err)) is not None:
            self.metrics.errors.labels(self.flow.name, "not_authorized").inc()
            log.error("%s", denied)
        if b.err is not None and st.slot is not None and b.err.code() in _FENCED:  # (the batch itself was refused)
            self._note_fenced(st.slot, KafkaException(b.err))
        reason = b.err.str() if b.err is not None else "target offsets not contiguous"
        lowered = self.acks.limit_lowered(st, b)
        self._abort(st.slot, st, b, f"{reason}; replayed in batches of the topic's limit now" if lowered else reason,
                    careful=not lowered)

    def _abort(self, k: int | None, failed: PartitionState | None, b: Batch | None, reason: str,
               careful: bool = True) -> None:
        """Abort slot ``k``'s transaction and rewind its partitions to their committed progress (``failed``, in
        careful mode unless ``careful`` is False)."""
        if k is None or k not in self.producers:
            return
        producer = self.producers[k]
        self.metrics.errors.labels(self.flow.name, "transaction_aborted").inc()
        log.warning("flow %s: slot %d: aborting transaction (%s)", self.flow.name, k, reason)
        try:
            if k in self.open:
                # Kafka 4.x may refuse to abort while records are in flight (INVALID_TXN_STATE, fatal):
                # let them finish first. Delivery callbacks only mark batches done, so this is safe here.
                purge_unsent(producer)  # held, never sent, once a transaction failed
                with contextlib.suppress(KafkaException, SystemError):
                    producer.flush(10)
                in_steps(producer, producer.abort_transaction, ABORT_TIMEOUT_S)
        except KafkaException as exc:
            err = exc.args[0] if exc.args else None
            self._note_fenced(k, exc)
            if isinstance(err, KafkaError) and err.fatal():
                self._give_up([k], f"its transactional producer failed ({err.str()})", exc)
            if isinstance(err, KafkaError) and err.retriable():
                # The abort did not finish (_TIMED_OUT), or a commit still runs (_CONFLICT, after a commit
                # that timed out): librdkafka refuses any new transaction until that call is settled.
                self._give_up([k], f"its transaction could not be aborted ({err.str()})", exc)
        self.open.discard(k)
        for st in self._states(k):
            st.forget_map()
            st.acked = st.committed
            pos = st.committed if st.committed is not None else st.origin
            refused = b is not None and record_error(b)
            if st is failed and refused and st.careful and b is not None and b.count <= 1:
                self.acks.pause(st, f"record at offset {b.first} rejected by target topic {st.remote}: {reason} "
                                 "(partition paused; fix the target limit, e.g. max.message.bytes, and restart)")
                continue
            if pos is None:
                st.drop_unsent()
                continue
            self.acks.rewind_to(st, pos, careful=careful and st is failed and b is not None
                                and (refused or b.err is None or self.transient.again(st, pos)),
                             backoff=st is failed and not refused and b is not None and b.err is not None)

    def _drop_unusable(self, slots: list[int]) -> None:
        if slots:
            self.gave_up = True  # first: whatever happens next, the close commits nothing more
        for k in slots:
            self.open.discard(k)
            self._release(k, graceful=False)  # not open any more: no abort is attempted

    def _give_up(self, slots: list[int], why: str, cause: BaseException | None = None) -> None:
        """Drop ``slots``' producers without another transactional call and rejoin the slot group.

        Their state is unknown here (a commit may still land) and librdkafka refuses a new transaction
        until the pending call is settled. Taking a slot again settles it: init_transactions waits for
        a commit in progress or aborts the transaction, and the slot's progress is then read afresh, so
        nothing is rewound onto a guess. The slot group still assigns the slots here and only a
        rebalance would give them producers again (with static membership none may come), so the
        pipeline restarts; the close before it commits nothing more (see close)."""
        self._drop_unusable(slots)
        names = ", ".join(str(k) for k in slots)
        error = MirrorError(f"exactly-once slot{'s' if len(slots) > 1 else ''} {names}: {why}; "
                            "rejoining the slot group (taking a slot settles its last transaction)")
        if cause is not None:
            raise error from cause
        raise error  # keeps the context of an exception being handled, if any

    def in_flight(self) -> int:
        return sum(len(p) for p in self.producers.values())

    def after_careful_record(self, st: PartitionState) -> bool:
        """One transaction per careful record, so that a bad record aborts only itself."""
        self.commit(st.slot)
        if not st.careful or st.mode is PartitionMode.PAUSED:
            return False
        self.ensure_txn(st)
        return True

    def close(self, graceful: bool) -> None:
        """Commit (graceful) and release every slot; always leave the membership group, so the
        slots move to another instance now rather than after max.poll.interval.ms."""
        try:
            # After a give-up the pipeline restarts: the other slots' transactions are left to their next
            # owner's init_transactions (which aborts them) rather than waited on again here.
            if self.gave_up:
                self.open.clear()
            elif graceful:
                self.commit_all()
        finally:
            try:
                for k in list(self.producers):
                    self._release(k, graceful=graceful or self.gave_up)
            finally:
                self._close_pool_and_membership()

    def _close_pool_and_membership(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        with contextlib.suppress(KafkaException):
            self.membership.close()

