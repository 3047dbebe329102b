"""Record batches of many partitions, fetched from their leaders as the broker stores them.

One thread per leader broker sends sessionless fetches for the partitions it leads and waits for the answer
(the socket wait releases the GIL); leaders.py finds leaders when a partition has none or its leader moved.
A partition's result is handed to the caller once, and the partition is fetched again only when the caller
says where to go on (:meth:`BatchFetcher.resume`): at most one result per partition is held, and a
partition's results come in order. Results of a partition assigned again since (a rewind, a revocation)
are dropped by :meth:`BatchFetcher.poll`, so a caller never sees a batch from before its own seek.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from mirror_core.wire.connection import Connection
from mirror_core.wire.errors import STALE_LEADER, name
from mirror_core.wire.fetch import API_FETCH, FETCH_VERSION, FetchedPartition, fetch_request, parse_fetch
from mirror_core.wire.leaders import TP, LeaderTracker, Outage
from mirror_core.wire.metadata import Brokers

log = logging.getLogger(__name__)
#: after a failed connection: how long before the next attempt
RETRY_S = 0.5
#: an answer may exceed fetch.max.bytes by its first batch (KIP-74): room for it above the cap receive.message.max.bytes
#: sets (librdkafka asks that setting to be at least fetch.max.bytes + 512)
FETCH_HEADROOM = 1 << 20
#: a broker's own fetch.max.bytes by default (55 MiB): it caps an answer below a larger fetch.max.bytes, unsaid
BROKER_FETCH_MAX_BYTES = 57_671_680
#: how long a broker's worker waits for the caller to resume the partitions of its last answer before it sends the
#: next fetch without them: this share of the last fetch's time, at most GATHER_MAX_S (see _gather)
GATHER_SHARE = 0.25
GATHER_MAX_S = 0.025


@dataclass(frozen=True)
class FetchLimits:
    max_wait_ms: int = 500
    min_bytes: int = 1
    max_bytes: int = 64 << 20
    partition_max_bytes: int = 4 << 20
    #: every batch's CRC and offsets checked before it is used (check.crcs; wire/integrity.py)
    check_crcs: bool = True


class BatchFetcher:
    def __init__(self, brokers: Brokers, limits: FetchLimits | None = None) -> None:
        self.brokers, self.limits = brokers, limits or FetchLimits()
        self._cond = threading.Condition()
        self._positions: dict[TP, int] = {}  # where each assigned partition is fetched next
        self._generation: dict[TP, int] = {}  # bumped by every assign/revoke: older results are dropped
        self._held: set[TP] = set()  # fetched and not yet resumed: not fetched again meanwhile
        #: partitions whose batches outgrew partition_max_bytes: the size they are asked for instead (kept until
        #: sought, paused or revoked: their batches come that large; learnt again then, in a few fetches), and those
        #: whose last answer said so, asked first in their broker's next fetch (see :meth:`_outgrown`)
        self._sizes: dict[TP, int] = {}
        self._first: set[TP] = set()
        self._turn = 0  # rotates the order partitions are asked in
        self._full = False  # the caller has as much in flight as it takes: no fetch is sent (throttle)
        #: (log start, high watermark) of each partition from its last answer while assigned, an empty one too (kept
        #: after a revocation: a partition paused a while still has its lag; the caller drops what it no longer owns)
        self.watermarks: dict[TP, tuple[int, int]] = {}
        self._results: queue.SimpleQueue[tuple[int, FetchedPartition]] = queue.SimpleQueue()
        self._stop = threading.Event()
        self._leaders = LeaderTracker(brokers, self._cond, self._start, self._stop)

    def assign(self, positions: Mapping[TP, int]) -> None:
        """Fetch these partitions from these offsets (again, for one assigned already: a seek)."""
        with self._cond:
            for tp, offset in positions.items():
                self._positions[tp] = offset
                self._generation[tp] = self._generation.get(tp, 0) + 1
                self._held.discard(tp)
                self._sizes.pop(tp, None)
                self._first.discard(tp)
            self._leaders.want(positions)
            self._cond.notify_all()

    def revoke(self, tps: Iterable[TP]) -> None:
        with self._cond:
            tps = list(tps)
            for tp in tps:
                self._positions.pop(tp, None)
                self._generation[tp] = self._generation.get(tp, 0) + 1
                self._held.discard(tp)
                self._sizes.pop(tp, None)
                self._first.discard(tp)
            self._leaders.forget(tps)

    def resume(self, tp: TP, offset: int) -> None:
        """The caller is done with ``tp``'s last result: fetch it again from ``offset``."""
        with self._cond:
            if tp in self._positions:
                self._positions[tp] = offset
                self._held.discard(tp)
                self._cond.notify_all()

    def throttle(self, full: bool) -> None:
        """``full``: the caller has as much in flight as it takes, and no fetch is sent until it says otherwise (one
        sent already is still answered). Holding each partition handed over is not enough: with thousands of
        partitions, those not fetched yet would be, each up to its partition_max_bytes (gigabytes of backlog)."""
        with self._cond:
            if full != self._full:
                self._full = full
                self._cond.notify_all()

    def poll(self, timeout: float) -> list[FetchedPartition]:
        """Results ready now (waiting up to ``timeout`` for the first): batches, or a partition's error other
        than a moved leader (OFFSET_OUT_OF_RANGE, TOPIC_AUTHORIZATION_FAILED...) or ``problem``, for the caller to
        act on."""
        out: list[FetchedPartition] = []
        try:
            item = self._results.get(timeout=timeout) if timeout > 0 else self._results.get_nowait()
            while True:
                generation, part = item
                if self._generation.get((part.topic, part.partition)) == generation:
                    out.append(part)
                item = self._results.get_nowait()
        except queue.Empty:
            return out

    def close(self) -> None:
        self._leaders.shutdown()

    def _start(self, node: int) -> None:
        threading.Thread(target=self._fetch_from, args=(node,), name=f"fetch-{node}", daemon=True).start()

    def _mine(self, node: int) -> dict[TP, int]:
        """Partitions this broker leads that are not held, now marked held (called under the lock; none while the
        caller is full), starting one further each time: a full answer gives the partitions it reaches last a
        partial batch or none, so the same ones must not always come last. Those whose next batch did not fit
        their fetch size come first (``_first``)."""
        if self._full:
            return {}
        leaders, held = self._leaders.leaders, self._held
        ready = [(tp, pos) for tp, pos in self._positions.items() if leaders.get(tp) == node and tp not in held]
        self._turn += 1
        start = self._turn % len(ready) if ready else 0
        mine = dict(ready[start:] + ready[:start])
        if self._first:
            mine = {**{tp: mine[tp] for tp in self._first if tp in mine}, **mine}
        self._held.update(mine)
        return mine

    def _gather(self, delivered: set[TP], took: float) -> None:
        """(Called under the lock.) Wait a little for the caller to resume the partitions of the last answer that
        had batches, so that the next fetch asks for them too. A fetch sent without them is out for a round trip,
        and they wait for it, then for their own: over a WAN the partitions fell into two sets fetched in turn,
        each only every other round trip, for as long as the load lasted."""
        deadline = time.monotonic() + min(GATHER_MAX_S, took * GATHER_SHARE)
        while delivered & self._held and not self._full and not self._stop.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                break
            self._cond.wait(left)
        delivered.clear()

    def _fetch_from(self, node: int) -> None:
        conn: Connection | None = None
        limits = self.limits
        outage = Outage(self.brokers)
        delivered: set[TP] = set()  # partitions of the last answer handed to the caller with batches
        took = 0.0  # how long the last answer took
        while not self._stop.is_set():
            with self._cond:
                if delivered:
                    self._gather(delivered, took)
                mine = self._mine(node)
                if not mine:
                    self._cond.wait(0.5)
                    continue
                generations = {tp: self._generation[tp] for tp in mine}
                sizes = {tp: size for tp, size in self._sizes.items() if tp in mine} if self._sizes else {}
            try:
                if conn is not None and conn.expiring():  # its session ends soon (a token expires): a new one
                    conn.close()
                    conn = None
                if conn is None:
                    conn = self.brokers.connect(node, limits.max_wait_ms / 1000)
                sent = time.monotonic()
                parts = parse_fetch(conn.call(API_FETCH, conn.version(API_FETCH, (FETCH_VERSION,)), fetch_request(
                    mine, limits.max_wait_ms, limits.min_bytes, limits.max_bytes, limits.partition_max_bytes,
                    sizes=sizes), reuse=True, limit=max(conn.max_answer_bytes, limits.max_bytes + FETCH_HEADROOM)),
                    conn.where, limits.check_crcs)
                took = time.monotonic() - sent
                outage.succeeded(conn.where)
            except Exception as exc:  # a connection, TLS or SASL failure, an answer that does not parse: again
                outage.failed(exc, self.brokers.name(node))
                if conn is not None:
                    conn.close()
                    conn = None
                self._release(mine, stale=True)
                self._stop.wait(RETRY_S)
                continue
            again = set(mine)  # a partition the answer leaves out is fetched again
            stale: list[TP] = []
            for part in parts:
                tp = (part.topic, part.partition)
                again.discard(tp)
                if not part.error and tp in self._positions:
                    self.watermarks[tp] = (part.log_start, part.high_watermark)
                if part.error in STALE_LEADER:
                    log.info("%s: %s[%d]: %s, finding its leader again", self.brokers.where, part.topic,
                             part.partition, name(part.error))
                    stale.append(tp)
                elif part.nothing_new:
                    again.add(tp)  # fetched again
                elif tp in generations:  # (an answer for a partition not asked for is not one to act on)
                    self._results.put((generations[tp], part))
                    if part.batches:
                        delivered.add(tp)
            if sum(part.size for part in parts) * 2 >= min(limits.max_bytes, BROKER_FETCH_MAX_BYTES):
                delivered.clear()  # a backlog: fetching the others on matters more than asking all at once
            grown = self._outgrown(parts, mine, sizes)
            if grown or self._first:
                with self._cond:  # (not for one sought since: its batches are others)
                    self._first.difference_update(mine)
                    for tp, size in grown.items():
                        if self._generation.get(tp) == generations[tp]:
                            self._sizes[tp] = size
                            self._first.add(tp)
            self._release(again)
            self._release(stale, stale=True)
        if conn is not None:
            conn.close()

    def _outgrown(self, parts: list[FetchedPartition], asked: Mapping[TP, int], sizes: Mapping[TP, int]
                  ) -> dict[TP, int]:
        """Partitions whose next batch is larger than they were asked for, with twice that size (at most the
        fetch's): no records though behind their last stable offset, in an answer that had room for them. The
        broker serves a batch larger than its partition's fetch size only to the first partition with records in
        its answer, and none of it to the others (Kafka 4.3.1 here: not even a part to read its size from), so
        these are asked first next time, for more, as librdkafka grows its fetch size: else, among thousands of
        busy partitions, such a one moved on only when it happened to come first. Room: the answer's records and
        the partition's size within half the answer's limit (max_bytes, or a broker's default cap below it; a
        broker configured to cap lower may see partitions it did not reach taken as outgrown, which only costs
        them a larger size)."""
        limit = min(self.limits.max_bytes, BROKER_FETCH_MAX_BYTES)
        room = limit // 2 - sum(part.size for part in parts)
        out: dict[TP, int] = {}
        if room < self.limits.partition_max_bytes:  # (the sizes asked for are never less)
            return out
        for part in parts:
            tp = (part.topic, part.partition)
            size = sizes.get(tp, self.limits.partition_max_bytes)
            end = part.last_stable if part.last_stable >= 0 else part.high_watermark
            if part.nothing_new and size <= room and tp in asked and asked[tp] < end:
                out[tp] = min(2 * size, self.limits.max_bytes)
        return out

    def _release(self, tps: Iterable[TP], stale: bool = False) -> None:
        with self._cond:
            tps = list(tps)
            self._held.difference_update(tps)
            if stale:
                self._leaders.moved(tps)
