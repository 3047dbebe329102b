"""A transactional producer's talks with its transaction coordinator, as the batch sender's transactions need
them: FindCoordinator (key type transaction), InitProducerId with the transactional id (which bumps the epoch:
any older producer of the id is fenced, and a transaction it left open is aborted), AddPartitionsToTxn before
a partition is first written in a transaction, and EndTxn (commit or abort).

Non-flexible versions (FindCoordinator v1, AddPartitionsToTxn v1-2, EndTxn v1-2), as Kafka 2.x to 4.x serve
them; every answer is read through :class:`~mirror_core.wire.codec.Reader` (lengths and counts checked)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TypeVar

from mirror_core.wire.codec import Reader, array, int16, int32, int64, string
from mirror_core.wire.connection import Connection
from mirror_core.wire.errors import AUTHORIZATION, BrokerRefused, ProducerFenced, WireError, name
from mirror_core.wire.groups import API_FIND_COORDINATOR, parse_find_coordinator
from mirror_core.wire.leaders import TP
from mirror_core.wire.metadata import Brokers
from mirror_core.wire.produce import API_INIT_PRODUCER_ID, init_producer_id_request, parse_init_producer_id

log = logging.getLogger(__name__)

API_ADD_PARTITIONS_TO_TXN, API_END_TXN = 24, 26
TRANSACTION_KEY = 1
#: INVALID_PRODUCER_EPOCH, PRODUCER_FENCED, TRANSACTION_COORDINATOR_FENCED: a newer producer owns the id
FENCED = frozenset({47, 90, 52})
#: the coordinator moved or is loading: found again, then asked again
MOVED = frozenset({14, 15, 16})
#: CONCURRENT_TRANSACTIONS: the previous transaction is still being completed: asked again shortly
BUSY = 51
RETRY_S = 0.1
#: asked again after CONCURRENT_TRANSACTIONS sooner: it answers the first AddPartitionsToTxn after each commit while
#: the markers are written, a few milliseconds (the Java producer's 20 ms, KAFKA-5477)
BUSY_RETRY_S = 0.02
T = TypeVar("T")


def find_transaction_coordinator_request(transactional_id: str) -> bytes:
    """FindCoordinator v1 for a transactional id (key type 1); the answer parses as a group's does."""
    return string(transactional_id) + bytes([TRANSACTION_KEY])


def add_partitions_request(transactional_id: str, producer_id: int, epoch: int,
                           partitions: Mapping[str, Iterable[int]]) -> bytes:
    """AddPartitionsToTxn v1-2 (one layout): the partitions, by topic, the open transaction will write."""
    return (string(transactional_id) + int64(producer_id) + int16(epoch)
            + array(string(t) + array(int32(p) for p in sorted(ps)) for t, ps in partitions.items()))


def parse_add_partitions(data: memoryview) -> dict[TP, int]:
    """Each partition's error (0: added)."""
    r = Reader(data)
    r.int32()  # throttle time
    out: dict[TP, int] = {}
    for _ in range(r.count(6)):  # a topic's name length and partition count at least
        topic = r.string() or ""
        for _ in range(r.count(6)):
            partition, error = r.take(">ih")
            out[(topic, partition)] = error
    return out


def end_txn_request(transactional_id: str, producer_id: int, epoch: int, commit: bool) -> bytes:
    """EndTxn v1-2 (one layout): commit or abort the open transaction."""
    return string(transactional_id) + int64(producer_id) + int16(epoch) + bytes([1 if commit else 0])


def parse_end_txn(data: memoryview) -> int:
    """The answer's error."""
    r = Reader(data)
    r.int32()  # throttle time
    return r.int16()


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
        body = init_producer_id_request(self.transactional_id, self.transaction_timeout_ms)
        def ids(data: memoryview) -> tuple[int, tuple[int, int]]:
            error, producer_id, epoch = parse_init_producer_id(data)
            return error, (producer_id, epoch)

        producer_id, epoch = self._ask(API_INIT_PRODUCER_ID, (1,), body, ids)
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
        body = add_partitions_request(self.transactional_id, self.producer_id, self.epoch, new)

        def errors(data: memoryview) -> tuple[int, dict[TP, int]]:
            answer = parse_add_partitions(data)
            wanted = {(t, p) for t, ps in new.items() for p in ps}
            if not wanted <= set(answer):
                return -1, answer  # (an answer that leaves a partition out: asked again would not help)
            codes = {e for e in answer.values() if e}
            # The worst first: fenced, then moved or busy (asked again), then any other refusal.
            return (next(iter(codes & FENCED), None) or next(iter(codes & (MOVED | {BUSY})), None)
                    or next(iter(codes), 0)), answer

        self._ask(API_ADD_PARTITIONS_TO_TXN, (2, 1), body, errors)
        self.partitions.update((t, p) for t, ps in new.items() for p in ps)

    def end(self, commit: bool) -> None:
        """Commit or abort the open transaction (nothing to do when nothing was added to it); completed on the
        partitions by the coordinator after the answer, before it lets the next transaction of the id begin."""
        if not self.partitions:
            return
        body = end_txn_request(self.transactional_id, self.producer_id, self.epoch, commit)
        self._ask(API_END_TXN, (2, 1), body, lambda d: (parse_end_txn(d), None))
        self.partitions.clear()

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _ask(self, api: int, versions: tuple[int, ...], body: bytes,
             parse: Callable[[memoryview], tuple[int, T]]) -> T:
        """``body`` to the coordinator until ``parse`` (answer -> (error, value)) says 0; the value."""
        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                conn = self._coordinator()
                if conn is None:
                    error = 15  # COORDINATOR_NOT_AVAILABLE: the cluster is still choosing one
                else:
                    error, value = parse(conn.call(api, conn.version(api, versions), body))
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
            time.sleep(BUSY_RETRY_S if error == BUSY else RETRY_S)

    def _coordinator(self) -> Connection | None:
        """The coordinator's connection (None: none yet, the cluster is still choosing or loading it)."""
        if self._conn is not None:
            return self._conn
        if not self.brokers.known:
            self.brokers.metadata([])
        with self.brokers.connect(next(iter(self.brokers.known))) as conn:
            error, node = parse_find_coordinator(conn.call(
                API_FIND_COORDINATOR, conn.version(API_FIND_COORDINATOR, (1,)),
                find_transaction_coordinator_request(self.transactional_id)))
        if error in MOVED:
            return None
        if error:
            line = f"{self.brokers.where}: no transaction coordinator for {self.transactional_id}: {name(error)}"
            raise BrokerRefused(error, line) if error in AUTHORIZATION else WireError(line)
        if node not in self.brokers.known:
            self.brokers.metadata([])
        self._conn = self.brokers.connect(node)
        return self._conn
