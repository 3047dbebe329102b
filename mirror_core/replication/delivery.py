"""The delivery guarantee of a flow, as one small protocol the replicator calls: at-least-once (an
idempotent producer, or several: ``replication.producers``; progress after acknowledgement, see
commit.py) or exactly-once (a transactional producer per slot; records, offset map and progress in one
transaction, see exactly_once.py).

The replicator's loop has no branch on the guarantee: it calls these methods, and produce.py and
acks.py receive the same object as their hooks.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Protocol

from confluent_kafka import Consumer, KafkaException, Producer

from mirror_core.clients import purge_unsent
from mirror_core.replication.acks import Acks
from mirror_core.replication.assignment import Assignment
from mirror_core.replication.batch import Batch, PartitionState
from mirror_core.replication.commit import ProgressCommitter, remote_log_end
from mirror_core.replication.exactly_once import SlotManager

#: how long :meth:`AtLeastOnce.send_now` lets the producer start sending lingering records
SEND_NOW_S = 0.001


class Delivery(Protocol):
    def poll(self) -> None:
        """Serve whatever the guarantee needs served in the loop (exactly-once: slot membership)."""

    def in_flight(self) -> int:
        """Records produced and not yet acknowledged (back-pressure)."""

    def poll_producers(self, timeout: float) -> None:
        """Serve delivery reports, waiting up to ``timeout`` (back-pressure)."""

    def send_now(self) -> None:
        """The mirror is caught up: send what was produced now rather than after the producer's linger
        (exactly-once: commit the open transactions, which makes the records visible)."""

    def on_topics(self, ready: dict[str, int]) -> None:
        """The source topics (with partition counts) whose remote topics exist: replicate their share."""

    def commit(self) -> None:
        """Make what the target acknowledged durable (progress; exactly-once: commit the transactions)."""

    def visible(self, st: PartitionState) -> int | None:
        """How far a read_committed reader of the target sees ``st``."""

    def log_end_fallback(self) -> Callable[[PartitionState], int | None] | None:
        """Where the next record of a partition lands when nothing landed since assignment, if known."""

    def before_produce(self, st: PartitionState) -> None: ...

    def after_careful_record(self, st: PartitionState) -> bool: ...

    def on_failure(self, st: PartitionState, b: Batch) -> None:
        """A batch failed (acks.py found it): rewind, back off, pause — or abort the transaction."""

    def close(self, graceful: bool) -> None:
        """Graceful: make everything acknowledged durable first."""


class AtLeastOnce:
    def __init__(self, producers: list[Producer], assignment: Assignment, acks: Acks, committer: ProgressCommitter,
                 target_meta: Consumer, exact_reports: bool, internal: Producer | None = None) -> None:
        self.producers = producers  # records of a partition always through the same one (producer_pool.py)
        #: progress and offset-map records: ``internal`` when the data producers' batches may outgrow what the
        #: single-partition internal topics take (one batch per partition's 8 MiB, a user's batch.size), else the first
        self.producer = internal if internal is not None else producers[0]  # (an empty Producer is falsy)
        #: every producer polled, flushed and purged here
        self.clients = producers if internal is None else [*producers, internal]
        self.assignment = assignment
        self.acks = acks
        self.committer = committer
        # (Not with provenance/identity: applications may write the remote topic too.)
        self._fallback = None if exact_reports else remote_log_end(target_meta)

    def poll(self) -> None:
        pass

    def in_flight(self) -> int:
        return sum(len(p) for p in self.clients)

    def poll_producers(self, timeout: float) -> None:
        if len(self.clients) == 1:
            self.producer.poll(timeout)
            return
        busiest = max(self.clients, key=len)  # the wait is for the one holding most records
        for p in self.clients:
            if p is not busiest:
                p.poll(0)
        busiest.poll(timeout)

    def send_now(self) -> None:
        # flush() lifts linger.ms only while it runs, and flush(0) returns before the producer's broker
        # threads see it: 1 ms lets them (it returns sooner once everything is delivered).
        for p in self.clients:
            p.flush(SEND_NOW_S)

    def flush(self, timeout: float) -> int:
        """Every producer, within ``timeout`` in all, each its share of what is left (a slow one cannot
        starve the others of their flush); what is still undelivered."""
        deadline = time.monotonic() + timeout
        while True:
            busy = [p for p in self.clients if len(p)]
            if not busy or time.monotonic() >= deadline:
                return self.in_flight()
            for i, p in enumerate(busy):
                p.flush(max(0.0, (deadline - time.monotonic()) / (len(busy) - i)))

    def on_topics(self, ready: dict[str, int]) -> None:
        self.assignment.subscribe(ready, self.producers, self.commit_durably)

    def commit(self) -> None:
        self.committer.commit(self.producer, list(self.assignment.states.values()))

    def commit_durably(self, states: list[PartitionState] | None = None) -> None:
        """Until progress covers every acknowledged record of ``states`` (default: all), bounded."""
        todo = states if states is not None else list(self.assignment.states.values())
        self.committer.commit_durably(self.producer, todo, self.acks.collect, flush=self.flush)

    def visible(self, st: PartitionState) -> int | None:
        return st.acked

    def log_end_fallback(self) -> Callable[[PartitionState], int | None] | None:
        return self._fallback

    def before_produce(self, st: PartitionState) -> None:
        pass

    def after_careful_record(self, st: PartitionState) -> bool:
        return True

    def on_failure(self, st: PartitionState, b: Batch) -> None:
        self.acks.handle_failure(st, b)

    def close(self, graceful: bool) -> None:
        if graceful:
            self.commit_durably()
            return
        # An error restart: what is not acknowledged is read again by the next pipeline, so records still
        # queued here are dropped now rather than sent when these producers are finally collected (they
        # would land among the new pipeline's records).
        for p in self.clients:
            purge_unsent(p)
            with contextlib.suppress(KafkaException):
                p.poll(0)


class ExactlyOnce:
    def __init__(self, slots: SlotManager, assignment: Assignment) -> None:
        self.slots = slots
        self.assignment = assignment

    def poll(self) -> None:
        self.slots.poll()

    def in_flight(self) -> int:
        return self.slots.in_flight()

    def poll_producers(self, timeout: float) -> None:
        for p in self.slots.producers.values():
            p.poll(0)
        if timeout:
            time.sleep(timeout)

    def send_now(self) -> None:
        self.slots.commit_open()

    def on_topics(self, ready: dict[str, int]) -> None:
        self.assignment.subscribed = frozenset(ready)
        self.slots.reconcile(ready)

    def commit(self) -> None:
        self.slots.commit_all()

    def visible(self, st: PartitionState) -> int | None:
        # Only committed records are visible to read_committed consumers, so lag counts from the
        # committed position, not from what the open transaction holds.
        return st.committed

    def log_end_fallback(self) -> Callable[[PartitionState], int | None] | None:
        return None  # an open transaction may hold records below the log end

    def before_produce(self, st: PartitionState) -> None:
        self.slots.ensure_txn(st)

    def after_careful_record(self, st: PartitionState) -> bool:
        return self.slots.after_careful_record(st)

    def on_failure(self, st: PartitionState, b: Batch) -> None:
        self.slots.fail(st, b)

    def close(self, graceful: bool) -> None:
        self.slots.close(graceful)
