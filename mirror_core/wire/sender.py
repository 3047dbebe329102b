"""Record batches produced to their partitions' leaders as the copier's own idempotent producer.

Every batch handed to :meth:`BatchSender.send` gets exactly one :class:`Sent` back from :meth:`BatchSender.poll`:
where it landed on the target (the base of its offset-map run), or why not. A produce request carries the next
batch of as many partitions as the leader has ready (librdkafka sends one partition per request), up to
``MAX_IN_FLIGHT`` requests per connection and batches per partition: the broker remembers a producer's last
five batches per partition, so a batch sent again with the same sequence is recognised and not written twice.

Transient failures are retried here, in order: a moved leader, a broker that is busy or catching up, a lost
connection (its outcome unknown), or a broker that forgot this producer (a new producer id: a batch whose
outcome was unknown may then be written twice, at least once, and its answer gives the copy that counts).
The failed batch and those of the partition sent after it go back to the front of its queue once all of them
have answered, and are stamped again from the last acknowledged sequence, so what landed is recognised. A
partition's batches in flight all go over one connection to one broker (after its leader moved, the old one
answers first). Any
other error (MESSAGE_TOO_LARGE, TOPIC_AUTHORIZATION_FAILED...), a batch retried for longer than the delivery
timeout, or one no reachable leader takes within it, is the caller's: that batch carries the error, those
queued behind it ``NOT_SENT``, and the partition takes no more until :meth:`BatchSender.rewind`.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import NamedTuple

from mirror_core.wire.connection import Connection, WireError
from mirror_core.wire.errors import RETRIABLE, STALE_LEADER, name
from mirror_core.wire.leaders import TP, LeaderTracker, Outage
from mirror_core.wire.metadata import Brokers
from mirror_core.wire.produce import API_PRODUCE, PRODUCE_VERSION, init_producer_id, parse_produce, produce_request
from mirror_core.wire.records import next_sequence, restamp
from mirror_core.wire.transactions import TransactionCoordinator

log = logging.getLogger(__name__)
MAX_IN_FLIGHT = 5
#: the broker no longer knows this producer's sequences or fenced its epoch (45 OUT_OF_ORDER_SEQUENCE_NUMBER, 47
#: INVALID_PRODUCER_EPOCH, 59 UNKNOWN_PRODUCER_ID, 90 PRODUCER_FENCED): a new producer id, then again. Also 46
#: DUPLICATE_SEQUENCE_NUMBER: the batch landed once, but where is not said, and the offset map must know each record's
#: target offset: it is sent again as a new producer's (a duplicate on the target, as at-least-once allows, and the
#: copy the map points at). Kafka 4 brokers answer a resent batch they still cache with its first offset and an older
#: one with OUT_OF_ORDER_SEQUENCE_NUMBER (tests/integration/test_wire.py): 46 comes from older brokers only.
RENEW = frozenset({45, 46, 47, 59, 90})
#: an earlier batch of the partition failed: this one does not count (send it again after the rewind). It was not
#: written, except one already in flight that landed all the same (at least once: it is then written again)
NOT_SENT = -100
CONNECTION_LOST = -101
#: answers after which a batch may or may not have been written (a lost connection, REQUEST_TIMED_OUT,
#: NOT_ENOUGH_REPLICAS_AFTER_APPEND): its sequence must not be given to another batch of the same producer id
UNKNOWN_OUTCOME = frozenset({CONNECTION_LOST, 7, 20})
RETRY_S = 0.2
#: while a connection's requests are out and its window has room, how often it looks for new batches between
#: looks at the socket: a thread blocked on the oldest answer sent nothing new for a round trip (across a WAN,
#: batches handed over meanwhile waited that long, then went out together)
SEND_POLL_S = 0.002


@dataclass(eq=False, slots=True)
class Outgoing:
    """One batch for the target partition (``topic``, ``partition``); ``token``: the caller's, given back."""

    topic: str
    partition: int
    data: memoryview | bytes | bytearray
    token: object = None
    producer_id: int = -1  # as last stamped (sequences are per producer id)
    epoch: int = -1
    sequence: int = -1
    first_sent: float = 0.0
    generation: int = 0  # the partition's when handed over: a rewind since makes the batch void
    handed: float = 0.0  # when the caller handed it over (a batch no leader takes fails after the delivery timeout)
    node: int = -1  # the broker it was last sent to: a partition's batches in flight all go to one
    order: int = 0  # when it was last sent, among all batches: what is sent again goes in this order


class Sent(NamedTuple):
    batch: Outgoing
    #: 0: landed at ``base_offset``; else a Kafka error code, ``NOT_SENT`` or ``CONNECTION_LOST``
    error: int
    base_offset: int = -1
    message: str | None = None

    def describe(self) -> str:
        what = {NOT_SENT: "not sent (an earlier batch failed)", CONNECTION_LOST: "connection lost"}.get(
            self.error, name(self.error))
        return f"{self.batch.topic}[{self.batch.partition}]: {what}{': ' + self.message if self.message else ''}"


class _Partition:
    __slots__ = ("acked_seq", "failed", "generation", "in_flight", "known", "next_seq", "queue", "returned", "route",
                 "tp")

    def __init__(self, tp: TP) -> None:
        self.tp = tp
        #: (broker, connection) that carries its batches: one, so that they stay in order; chosen again only when
        #: its leader changed and nothing of it is in flight
        self.route: tuple[int, int] | None = None
        self.queue: deque[Outgoing] = deque()
        self.in_flight: deque[Outgoing] = deque()
        self.returned: list[Outgoing] = []  # retried: back to the queue's front once in_flight is empty
        self.acked_seq = 0  # the sequence after the last acknowledged batch (current producer id)
        self.next_seq = 0
        self.failed = False  # the caller must rewind before anything more is sent
        self.generation = 0
        #: the broker acknowledged a batch of this partition from the current producer id: it checks the
        #: sequences of the next ones. Until then one batch at a time: a broker takes any first sequence from a
        #: producer id it does not know, so a batch behind a refused one would be written.
        self.known = False


class BatchSender:
    """``connections`` to each leader broker, a partition always on the same one (dealt in turn, so each carries
    a share): a broker handles one request of a connection at a time, so one connection keeps the mirror's
    produce requests on one of its request handler threads."""

    def __init__(self, brokers: Brokers, timeout_ms: int = 30_000, delivery_timeout_s: float = 120.0,
                 max_request_bytes: int = 16 << 20, connections: int = 1,
                 transaction: TransactionCoordinator | None = None) -> None:
        if connections < 1:
            raise ValueError(f"connections must be 1 or more, not {connections}")
        self.brokers, self.timeout_ms, self.connections = brokers, timeout_ms, connections
        self._started: set[tuple[int, int]] = set()  # (broker, connection) with a thread
        self._dealt: dict[int, int] = {}  # per broker, partitions given a connection so far
        self.delivery_timeout_s, self.max_request_bytes = delivery_timeout_s, max_request_bytes
        self._cond = threading.Condition()
        self._parts: dict[TP, _Partition] = {}
        #: the partitions with batches in their queue, in the order they got them (an ordered set): what a request
        #: is taken from. At thousands of partitions most have none at a time (a fetch answer carries a few dozen
        #: partitions' records), and a scan of every partition per request cost more than the batches it found.
        self._queued: dict[TP, None] = {}
        self._results: queue.SimpleQueue[Sent] = queue.SimpleQueue()
        self._stop = threading.Event()
        self.producer_id, self.epoch = -1, -1
        #: transactional: batches go in the caller's transactions (:meth:`use_producer` after each InitProducerId,
        #: every partition added to the transaction before its batches are queued); a batch whose outcome is not
        #: known, or that the broker refuses for its producer state, fails to the caller (its transaction aborts and
        #: a new epoch follows) instead of a new producer id asked here
        self.transaction = transaction
        self._renew = True  # no producer id yet (transactional: until use_producer)
        #: told each new producer id before any batch is sent with it (stores/producer_ids.register: the reverse
        #: flow must know the batches this one writes); what it raises is a failure to get one, asked again
        self.on_producer_id: Callable[[int, float], None] | None = None
        #: batches sent again after a transient failure (a moved leader, a lost connection...)
        self.retried = 0
        self._sent = 0  # batches sent so far (each one's ``order``)
        self._next_expiry = 0.0
        self._renewing = False
        self._leaders = LeaderTracker(brokers, self._cond, self._start, self._stop)

    def send(self, batches: Iterable[Outgoing]) -> None:
        """Queue batches, in order per partition (transactional: their partitions added to the open transaction
        first; a refusal raises here, nothing queued)."""
        if self.transaction is not None:
            batches = list(batches)
            self.transaction.add((b.topic, b.partition) for b in batches)
        with self._cond:
            tps = []
            for b in batches:
                tp = (b.topic, b.partition)
                p = self._parts.get(tp) or self._parts.setdefault(tp, _Partition(tp))
                if p.failed:
                    self._results.put(Sent(b, NOT_SENT))
                    continue
                b.generation, b.handed = p.generation, time.monotonic()
                p.queue.append(b)
                self._queued[tp] = None
                tps.append(tp)
            self._leaders.want(tps)
            self._cond.notify_all()

    def use_producer(self, producer_id: int, epoch: int) -> None:
        """Transactional: the producer id and epoch the coordinator gave (InitProducerId with the transactional id,
        after a take-over or an abort); every partition's sequences start again at 0."""
        with self._cond:
            self.producer_id, self.epoch = producer_id, epoch
            for p in self._parts.values():
                p.acked_seq = p.next_seq = 0
                p.known = False
            self._renew = False
            self._cond.notify_all()

    def rewind(self, tp: TP) -> None:
        """The caller handled ``tp``'s failure: batches sent from now on are taken (sequences go on from the last
        acknowledged one once what is in flight has answered)."""
        with self._cond:
            p = self._parts.get(tp)
            if p is not None and p.failed:
                p.failed = False
                p.generation += 1
                self._cond.notify_all()

    def waiting(self, tp: TP) -> int:
        """``tp``'s batches handed over and not in flight: queued behind its window, or to be sent again."""
        p = self._parts.get(tp)
        return len(p.queue) + len(p.returned) if p is not None else 0

    def poll(self, timeout: float) -> list[Sent]:
        now = time.monotonic()
        if now >= self._next_expiry:
            self._next_expiry = now + 1.0
            self._expire(now)
        out: list[Sent] = []
        try:
            out.append(self._results.get(timeout=timeout) if timeout > 0 else self._results.get_nowait())
            while True:
                out.append(self._results.get_nowait())
        except queue.Empty:
            return out

    def close(self) -> None:
        self._leaders.shutdown()

    def _start(self, node: int) -> None:
        for lane in range(self.connections):
            if (node, lane) not in self._started:  # (called again for a broker whose start failed part way)
                threading.Thread(target=self._produce_to, args=(node, lane), name=f"produce-{node}-{lane}",
                                 daemon=True).start()
                self._started.add((node, lane))

    def _take(self, node: int, lane: int) -> dict[TP, Outgoing]:
        """The next batch of each partition this broker leads on this connection that may go now, stamped (under
        the lock)."""
        chosen: dict[TP, Outgoing] = {}
        budget = self.max_request_bytes
        leaders = self._leaders.leaders
        now = time.monotonic()
        dealt = False
        parts = self._parts
        for tp in list(self._queued):
            p = parts[tp]
            if p.failed or p.returned or len(p.in_flight) >= MAX_IN_FLIGHT or leaders.get(tp) != node:
                continue
            if p.route is None or p.route[0] != node:
                if p.in_flight:
                    continue  # those in flight to its old leader answer first
                turn = self._dealt.get(node, 0)
                self._dealt[node] = turn + 1
                p.route = (node, turn % self.connections)
                dealt = True
            if p.route[1] != lane:
                continue
            if p.in_flight and (p.in_flight[-1].producer_id != self.producer_id or not p.known
                                or p.in_flight[-1].generation != p.generation or p.in_flight[-1].node != node):
                # Those in flight answer first: order across producer ids, a rewind or two connections (a leader
                # that moved) is not the broker's to keep.
                continue
            b = p.queue[0]
            if chosen and len(b.data) > budget:
                continue
            if not p.in_flight:
                p.next_seq = p.acked_seq  # after a retry: from the last acknowledged batch, as first sent
            p.queue.popleft()
            if not p.queue:
                del self._queued[tp]
            b.producer_id, b.epoch, b.sequence = self.producer_id, self.epoch, p.next_seq
            b.first_sent = b.first_sent or now
            self._sent += 1
            b.node, b.order = node, self._sent
            p.next_seq = next_sequence(p.next_seq, b.data)
            p.in_flight.append(b)
            chosen[tp] = b
            budget -= len(b.data)
        if dealt and self.connections > 1:
            self._cond.notify_all()  # the broker's other connections have partitions of their own now
        return chosen

    def _produce_to(self, node: int, lane: int) -> None:
        """One connection to ``node``, for the partitions of ``lane``: sends while the window has room and batches
        wait, else reads the oldest answer (answers come in the order of the requests)."""
        conn: Connection | None = None
        outstanding: deque[tuple[float, dict[TP, Outgoing]]] = deque()  # (when sent, its batches) of each request
        outage = Outage(self.brokers)
        while not self._stop.is_set():
            try:
                if conn is not None and not outstanding and conn.expiring():
                    conn.close()  # its session ends soon (a token expires): a new one, once nothing is in flight
                    conn = None
                if conn is None:
                    conn = self.brokers.connect(node, self.timeout_ms / 1000)
                    outage.succeeded(conn.where)
                if self._renew and not outstanding and self._claim_renewal():
                    self._new_producer_id(conn)
                with self._cond:
                    # A session about to end takes no more (its answers drain, then a new one), once it carried one
                    ending = conn.expiring() and conn.carried
                    room = len(outstanding) < MAX_IN_FLIGHT and not self._renew and not ending
                    chosen = self._take(node, lane) if room else {}
                    if not chosen and not outstanding:
                        self._cond.wait(0.5)
                        continue
                if chosen:
                    # first: were the request not built, these are answered all the same
                    outstanding.append((time.monotonic(), chosen))
                    txn = self.transaction
                    body = produce_request({tp: restamp(b.data, b.producer_id, b.epoch, b.sequence, txn is not None)
                                            for tp, b in chosen.items()}, self.timeout_ms,
                                           txn.transactional_id if txn is not None else None)
                    conn.send(API_PRODUCE, conn.version(API_PRODUCE, (PRODUCE_VERSION,)), body)
                    continue
                # (room for more: batches handed over meanwhile go out before the answer comes; not past the
                # connection's timeout, which a blocking read then raises)
                if room and time.monotonic() - outstanding[0][0] < self.timeout_ms / 1000 and \
                        not conn.answer_ready(SEND_POLL_S):
                    continue
                answers = parse_produce(conn.receive())  # before the request leaves `outstanding`: it may fail
                outage.succeeded(conn.where)
                self._answered(outstanding.popleft()[1], {(a.topic, a.partition): (a.error, a.base_offset,
                                                                                    a.message) for a in answers})
            except Exception as exc:  # a connection, TLS or SASL failure, an answer that does not parse: again
                outage.failed(exc, self.brokers.name(node))
                if conn is not None:
                    conn.close()
                    conn = None
                while outstanding:  # their outcome is unknown: sent again with the same sequences
                    self._answered(outstanding.popleft()[1], {})
                with self._cond:  # perhaps no longer the leader: looked up again
                    self._leaders.moved([tp for tp, n in self._leaders.leaders.items()
                                         if n == node and tp in self._parts and self._parts[tp].route == (node, lane)])
                self._stop.wait(RETRY_S)
        if conn is not None:
            conn.close()

    def _claim_renewal(self) -> bool:
        """This worker asks for the new producer id (one at a time, and only for batches waiting to go)."""
        with self._cond:
            if self._renewing or not self._renew or not self._queued or self.transaction is not None:
                return False
            self._renewing = True
            return True

    def _new_producer_id(self, conn: Connection) -> None:
        """A producer id (InitProducerId, asked again while the broker is not ready to give one); every
        partition's sequences start again at 0 for it."""
        try:
            deadline = time.monotonic() + self.timeout_ms / 1000
            while True:
                error, producer_id, epoch = init_producer_id(conn, None)
                if not error:
                    break
                if error not in RETRIABLE:
                    self._refused_producer_id(error)
                    return
                if time.monotonic() > deadline:
                    raise WireError(f"{self.brokers.where}: no producer id within {self.timeout_ms} ms: {name(error)}")
                self._stop.wait(RETRY_S)
            if self.on_producer_id is not None:
                self.on_producer_id(producer_id, self.timeout_ms / 1000)
            with self._cond:
                self.producer_id, self.epoch = producer_id, epoch
                for p in self._parts.values():
                    p.acked_seq = p.next_seq = 0
                    p.known = False
                self._renew = False
                self._cond.notify_all()
        finally:
            with self._cond:
                self._renewing = False

    def _expire(self, now: float) -> None:
        """A partition whose next batch no leader has taken within the delivery timeout (a broker that stays
        unreachable, a topic that does not exist) fails: the caller hears of it."""
        with self._cond:
            for p in [self._parts[tp] for tp in self._queued]:
                if not p.in_flight and not p.returned and not p.failed and \
                        now - p.queue[0].handed > self.delivery_timeout_s:
                    if any(b.first_sent for b in p.queue):  # sent before (a lost connection): it may have landed
                        self._renew = True
                    self._fail(p, p.queue.popleft(), 7, f"not sent within {self.delivery_timeout_s:.0f} s: no "
                                                         "reachable leader took it")

    def _refused_producer_id(self, error: int) -> None:
        """No producer id (e.g. CLUSTER_AUTHORIZATION_FAILED): every partition's waiting batches are the caller's,
        with that error; asked again once something more is sent."""
        why = f"no producer id: {name(error)}"
        log.error("%s: %s", self.brokers.where, why)
        with self._cond:
            for p in [self._parts[tp] for tp in self._queued]:
                if not p.failed:
                    self._fail(p, p.queue.popleft(), error, why)

    def _answered(self, request: dict[TP, Outgoing], answers: dict[TP, tuple[int, int, str | None]]) -> None:
        """A request's answers (none: the connection was lost, its outcome unknown)."""
        with self._cond:
            for tp, b in request.items():
                p = self._parts[tp]
                p.in_flight.remove(b)
                error, base, message = answers.get(tp, (CONNECTION_LOST, -1, None))
                current = b.producer_id == self.producer_id
                if p.failed or b.generation != p.generation:
                    # Void for the caller; the sequences stay the broker's: what landed counts, an unknown outcome
                    # takes a new producer id (the next batch must never look like a resent one).
                    if not error and current:
                        p.acked_seq, p.known = next_sequence(b.sequence, b.data), True
                    elif error in UNKNOWN_OUTCOME and current:
                        self._renew = True
                    self._results.put(Sent(b, NOT_SENT))
                elif not error and not p.returned:
                    if current:
                        p.acked_seq, p.known = next_sequence(b.sequence, b.data), True
                    self._results.put(Sent(b, 0, base, message))
                elif p.returned or error == CONNECTION_LOST or error in RETRIABLE or (
                        error in RENEW and self.transaction is None):
                    # Sent again in order once the partition's batches in flight have all answered.
                    if time.monotonic() - b.first_sent > self.delivery_timeout_s:
                        p.returned.append(b)  # its outcome may be unknown too
                        # (an answer without error behind a batch sent again is not a landing for the caller)
                        self._fail(p, b, error or 7, f"retried for {self.delivery_timeout_s:.0f} s")
                        continue
                    p.returned.append(b)
                    self.retried += 1
                    if error in STALE_LEADER or error == CONNECTION_LOST:
                        self._leaders.moved([tp])
                    if error in RENEW and b.producer_id == self.producer_id and len(p.returned) == 1:
                        log.info("%s: %s[%d]: %s, asking for a new producer id", self.brokers.where, *tp, name(error))
                        self._renew = True
                else:
                    self._fail(p, b, error, message)
                if not p.in_flight and p.returned:
                    p.queue.extendleft(sorted(p.returned, key=lambda r: r.order, reverse=True))
                    p.returned.clear()
                    self._queued[tp] = None
            self._cond.notify_all()

    def _fail(self, p: _Partition, b: Outgoing, error: int, message: str | None) -> None:
        """``b`` failed for the caller: it carries the error, what is queued behind it is not sent (under the lock).
        When batches of the partition wait to be sent again (``b`` among them after a delivery timeout), one of
        them may have landed unseen: a new producer id follows, so that what the caller sends after its rewind
        never shares such a batch's sequence. Otherwise the sequences stay the broker's, and the others'
        batches waiting to be sent again keep theirs (a new id would write them twice)."""
        p.failed = True
        if p.returned:
            self._renew = True
        self._results.put(Sent(b, error, -1, message))
        for later in [r for r in [*p.returned, *p.queue] if r is not b]:
            self._results.put(Sent(later, NOT_SENT))
        p.returned.clear()
        p.queue.clear()
        self._queued.pop(p.tp, None)
