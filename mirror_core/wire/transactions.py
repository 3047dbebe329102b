"""A transactional producer's talks with its transaction coordinator, as the batch sender's transactions need
them: FindCoordinator (key type transaction), InitProducerId with the transactional id (which bumps the epoch:
any older producer of the id is fenced, and a transaction it left open is aborted), AddPartitionsToTxn before
a partition is first written in a transaction, and EndTxn (commit or abort).

Non-flexible versions (FindCoordinator v1, AddPartitionsToTxn v1-2, EndTxn v1-2), as Kafka 2.x to 4.x serve
them, declared in mirror_core/wire/messages.py."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TypeVar

from mirror_core.wire.connection import Connection
from mirror_core.wire.errors import AUTHORIZATION, BrokerRefused, ProducerFenced, WireError, name
from mirror_core.wire.groups import TRANSACTION_KEY, find_coordinator
from mirror_core.wire.leaders import TP
from mirror_core.wire.messages import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
)
from mirror_core.wire.metadata import Brokers
from mirror_core.wire.produce import init_producer_id

log = logging.getLogger(__name__)

#: INVALID_PRODUCER_EPOCH, PRODUCER_FENCED, TRANSACTION_COORDINATOR_FENCED: a newer producer owns the id
FENCED = frozenset({47, 90, 52})
#: the coordinator moved or is loading: found again, then asked again
MOVED = frozenset({14, 15, 16})
#: CONCURRENT_TRANSACTIONS: the previous transaction is still being completed: asked again shortly
BUSY = 51
RETRY_S = 0.1
#: asked again after CONCURRENT_TRANSACTIONS sooner, first after BUSY_RETRY_S, twice as long each time up to RETRY_S:
#: it answers the first AddPartitionsToTxn after each commit while the markers are written, a few milliseconds
BUSY_RETRY_S = 0.002
T = TypeVar("T")


def add_partitions(conn: Connection, transactional_id: str, producer_id: int, epoch: int,
                   partitions: Mapping[str, Iterable[int]]) -> dict[TP, int]:
    """AddPartitionsToTxn v1-2 (one layout): the partitions, by topic, the open transaction will write; each one's
    error (0: added)."""
    topics = [AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=t, partitions=sorted(ps))
              for t, ps in partitions.items()]
    answer = conn.ask(AddPartitionsToTxnRequest(v3_and_below_transactional_id=transactional_id,
                                                v3_and_below_producer_id=producer_id,
                                                v3_and_below_producer_epoch=epoch, v3_and_below_topics=topics),
                      AddPartitionsToTxnResponse, (2, 1))
    return {(t.name or "", p.partition_index): p.partition_error_code
            for t in answer.results_by_topic_v3_and_below or () for p in t.results_by_partition or ()}


def end_txn(conn: Connection, transactional_id: str, producer_id: int, epoch: int, commit: bool) -> int:
    """EndTxn v1-2 (one layout): commit or abort the open transaction; the answer's error."""
    request = EndTxnRequest(transactional_id=transactional_id, producer_id=producer_id, producer_epoch=epoch,
                            committed=commit)
    return int(conn.ask(request, EndTxnResponse, (2, 1)).error_code)


class TransactionCoordinator:
    """One transactional id's coordinator: the producer id and epoch it gave, and the partitions the open
    transaction has added. Every call asks again while the coordinator moves, loads or completes the previous
    transaction, up to ``timeout_s`` in all; a fenced id raises :class:`ProducerFenced`, any other refusal a
    :class:`WireError` naming it. Not thread-safe: one caller (the flow's thread) at a time."""

    def __init__(self, brokers: Brokers, transactional_id: str, transaction_timeout_ms: int = 60_000,
                 timeout_s: float = 30.0) -> None:
        self.brokers, self.transactional_id = brokers, transactional_id
        self.transaction_timeout_ms, self.timeout_s = transaction_timeout_ms, timeout_s
        self.producer_id, self.epoch = -1, -1
        #: added to the open transaction (none: no transaction is open on the coordinator)
        self.partitions: set[TP] = set()
        self._conn: Connection | None = None

    def init(self) -> tuple[int, int]:
        """InitProducerId with the transactional id: a new epoch (an older producer of the id is fenced, and a
        transaction it left open is aborted, or a commit it sent completed, before the answer); sequences start
        again at 0. The (producer id, epoch)."""
        def ids(conn: Connection) -> tuple[int, tuple[int, int]]:
            error, producer_id, epoch = init_producer_id(conn, self.transactional_id, self.transaction_timeout_ms)
            return error, (producer_id, epoch)

        producer_id, epoch = self._ask(ids)
        self.producer_id, self.epoch = producer_id, epoch
        self.partitions.clear()
        log.debug("%s: transactional id %s: producer id %d, epoch %d", self.brokers.where, self.transactional_id,
                  producer_id, epoch)
        return producer_id, epoch

    def add(self, partitions: Iterable[TP]) -> None:
        """Add the partitions not added yet to the open transaction (one request), before anything is produced to
        them in it."""
        new: dict[str, set[int]] = {}
        for topic, partition in partitions:
            if (topic, partition) not in self.partitions:
                new.setdefault(topic, set()).add(partition)
        if not new:
            return
        def errors(conn: Connection) -> tuple[int, dict[TP, int]]:
            answer = add_partitions(conn, self.transactional_id, self.producer_id, self.epoch, new)
            wanted = {(t, p) for t, ps in new.items() for p in ps}
            if not wanted <= set(answer):
                return -1, answer  # (an answer that leaves a partition out: asked again would not help)
            codes = {e for e in answer.values() if e}
            # The worst first: fenced, then moved or busy (asked again), then any other refusal.
            return (next(iter(codes & FENCED), None) or next(iter(codes & (MOVED | {BUSY})), None)
                    or next(iter(codes), 0)), answer

        self._ask(errors)
        self.partitions.update((t, p) for t, ps in new.items() for p in ps)

    def end(self, commit: bool) -> None:
        """Commit or abort the open transaction (nothing to do when nothing was added to it); completed on the
        partitions by the coordinator after the answer, before it lets the next transaction of the id begin."""
        if not self.partitions:
            return
        self._ask(lambda conn: (end_txn(conn, self.transactional_id, self.producer_id, self.epoch, commit), None))
        self.partitions.clear()

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _ask(self, ask: Callable[[Connection], tuple[int, T]]) -> T:
        """``ask`` (a request to the coordinator, its answer read as (error, value)) until the error is 0; the
        value."""
        deadline = time.monotonic() + self.timeout_s
        busy_wait = BUSY_RETRY_S
        while True:
            try:
                conn = self._coordinator()
                if conn is None:
                    error = 15  # COORDINATOR_NOT_AVAILABLE: the cluster is still choosing one
                else:
                    error, value = ask(conn)
            except BrokerRefused:
                raise
            except WireError:
                self.close()  # a lost connection: the coordinator is found again
                if time.monotonic() >= deadline:
                    raise
                time.sleep(RETRY_S)
                continue
            if not error:
                return value
            what = f"{self.brokers.where}: transactional id {self.transactional_id}"
            if error in FENCED:
                raise ProducerFenced(f"{what}: fenced ({name(error)}): a newer producer took the id over")
            if error in AUTHORIZATION:
                raise BrokerRefused(error, f"{what}: the coordinator refused: {name(error)}")
            if error not in MOVED and error != BUSY:
                raise WireError(f"{what}: the coordinator refused: {name(error)}")
            if time.monotonic() >= deadline:
                raise WireError(f"{what}: the coordinator still answers {name(error)} after {self.timeout_s:.0f} s")
            if error in MOVED:
                self.close()
            if error == BUSY:
                time.sleep(busy_wait)
                busy_wait = min(2 * busy_wait, RETRY_S)
            else:
                time.sleep(RETRY_S)

    def _coordinator(self) -> Connection | None:
        """The coordinator's connection (None: none yet, the cluster is still choosing or loading it)."""
        if self._conn is not None:
            return self._conn
        if not self.brokers.known:
            self.brokers.metadata([])
        with self.brokers.connect(next(iter(self.brokers.known))) as conn:
            error, node = find_coordinator(conn, self.transactional_id, TRANSACTION_KEY)
        if error in MOVED:
            return None
        if error:
            line = f"{self.brokers.where}: no transaction coordinator for {self.transactional_id}: {name(error)}"
            raise BrokerRefused(error, line) if error in AUTHORIZATION else WireError(line)
        if node not in self.brokers.known:
            self.brokers.metadata([])
        self._conn = self.brokers.connect(node)
        return self._conn
