"""Record batches of many partitions, fetched from their leaders as the broker stores them.

One thread per leader broker sends sessionless fetches for the partitions it leads and waits for the answer
(the socket wait releases the GIL); one more thread finds leaders (Metadata) when a partition has none or its
leader moved. A partition's result is handed to the caller once, and the partition is fetched again only when
the caller says where to go on (:meth:`BatchFetcher.resume`): at most one result per partition is held,
and a partition's results come in order. Results of a partition assigned again since (a rewind, a revocation)
are dropped by :meth:`BatchFetcher.poll`, so a caller never sees a batch from before its own seek.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from mirror_core.wire.connection import Connection, WireError
from mirror_core.wire.errors import STALE_LEADER, name
from mirror_core.wire.fetch import API_FETCH, FETCH_VERSION, FetchedPartition, fetch_request, parse_fetch
from mirror_core.wire.metadata import NO_LEADER, Brokers

log = logging.getLogger(__name__)
TP = tuple[str, int]
#: after a failed connection or metadata request: how long before the next attempt
RETRY_S = 0.5


@dataclass(frozen=True)
class FetchLimits:
    max_wait_ms: int = 500
    min_bytes: int = 1
    max_bytes: int = 64 << 20
    partition_max_bytes: int = 4 << 20


class BatchFetcher:
    def __init__(self, brokers: Brokers, limits: FetchLimits | None = None) -> None:
        self.brokers, self.limits = brokers, limits or FetchLimits()
        self._cond = threading.Condition()
        self._positions: dict[TP, int] = {}  # where each assigned partition is fetched next
        self._generation: dict[TP, int] = {}  # bumped by every assign/revoke: older results are dropped
        self._held: set[TP] = set()  # fetched and not yet resumed: not fetched again meanwhile
        self._leaders: dict[TP, int] = {}
        self._stale = threading.Event()  # some partition needs its leader found
        self._results: queue.SimpleQueue[tuple[int, FetchedPartition]] = queue.SimpleQueue()
        self._threads: dict[int, threading.Thread] = {}
        self._stop = threading.Event()
        threading.Thread(target=self._find_leaders, name="fetch-leaders", daemon=True).start()

    def assign(self, positions: Mapping[TP, int]) -> None:
        """Fetch these partitions from these offsets (again, for one assigned already: a seek)."""
        with self._cond:
            for tp, offset in positions.items():
                self._positions[tp] = offset
                self._generation[tp] = self._generation.get(tp, 0) + 1
                self._held.discard(tp)
                if tp not in self._leaders:
                    self._stale.set()
            self._cond.notify_all()

    def revoke(self, tps: Iterable[TP]) -> None:
        with self._cond:
            for tp in tps:
                self._positions.pop(tp, None)
                self._generation[tp] = self._generation.get(tp, 0) + 1
                self._held.discard(tp)

    def resume(self, tp: TP, offset: int) -> None:
        """The caller is done with ``tp``'s last result: fetch it again from ``offset``."""
        with self._cond:
            if tp in self._positions:
                self._positions[tp] = offset
                self._held.discard(tp)
                self._cond.notify_all()

    def poll(self, timeout: float) -> list[FetchedPartition]:
        """Results ready now (waiting up to ``timeout`` for the first): batches, or a partition's error other
        than a moved leader (OFFSET_OUT_OF_RANGE, TOPIC_AUTHORIZATION_FAILED...), for the caller to act on."""
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
        self._stop.set()
        self._stale.set()
        with self._cond:
            self._cond.notify_all()

    def _find_leaders(self) -> None:
        while not self._stop.is_set():
            self._stale.wait(30)
            if self._stop.is_set():
                return
            self._stale.clear()
            with self._cond:
                topics = {tp[0] for tp in self._positions if self._leaders.get(tp, NO_LEADER) == NO_LEADER}
            if not topics:
                continue
            try:
                meta = self.brokers.metadata(sorted(topics))
            except WireError as exc:
                log.warning("%s", exc)
                self._stale.set()
                self._stop.wait(RETRY_S)
                continue
            with self._cond:
                for topic, found in meta.topics.items():
                    for partition, leader in found.leaders.items():
                        if (topic, partition) in self._positions:
                            self._leaders[topic, partition] = leader if not found.errors[partition] else NO_LEADER
                missing = [tp for tp in self._positions if self._leaders.get(tp, NO_LEADER) == NO_LEADER]
                for node in set(self._leaders.values()) - {NO_LEADER} - self._threads.keys():
                    self._threads[node] = threading.Thread(target=self._fetch_from, args=(node,),
                                                           name=f"fetch-{node}", daemon=True)
                    self._threads[node].start()
                self._cond.notify_all()
            if missing:  # no leader yet (an election, a topic just created): asked again shortly
                self._stale.set()
                self._stop.wait(RETRY_S)

    def _mine(self, node: int) -> dict[TP, int]:
        """Partitions this broker leads that are not held, now marked held (called under the lock)."""
        leaders, held = self._leaders, self._held
        mine = {tp: pos for tp, pos in self._positions.items() if leaders.get(tp) == node and tp not in held}
        self._held.update(mine)
        return mine

    def _fetch_from(self, node: int) -> None:
        conn: Connection | None = None
        limits = self.limits
        while not self._stop.is_set():
            with self._cond:
                mine = self._mine(node)
                if not mine:
                    self._cond.wait(0.5)
                    continue
                generations = {tp: self._generation[tp] for tp in mine}
            try:
                if conn is None:
                    broker = self.brokers.known[node]
                    conn = Connection(broker.host, broker.port, self.brokers.settings, self.brokers.where,
                                      self.brokers.timeout + limits.max_wait_ms / 1000)
                parts = parse_fetch(conn.call(API_FETCH, conn.version(API_FETCH, (FETCH_VERSION,)), fetch_request(
                    mine, limits.max_wait_ms, limits.min_bytes, limits.max_bytes, limits.partition_max_bytes)),
                    self.brokers.where)
            except WireError as exc:
                log.warning("%s", exc)
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
                if part.error in STALE_LEADER:
                    log.info("%s: %s[%d]: %s, finding its leader again", self.brokers.where, part.topic,
                             part.partition, name(part.error))
                    stale.append(tp)
                elif not part.error and not part.batches:
                    again.add(tp)  # nothing new within the wait: fetched again
                else:
                    self._results.put((generations[tp], part))
            self._release(again)
            self._release(stale, stale=True)

    def _release(self, tps: Iterable[TP], stale: bool = False) -> None:
        with self._cond:
            for tp in tps:
                self._held.discard(tp)
                if stale:
                    self._leaders.pop(tp, None)
            if stale:
                self._stale.set()
