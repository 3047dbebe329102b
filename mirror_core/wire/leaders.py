"""Which broker leads each partition a wire client works on, found (Metadata) on a thread of its own when a
partition has no known leader or its leader moved, with a worker started for each leader broker."""

from __future__ import annotations

import logging
import threading
import time
import traceback
from collections.abc import Callable, Iterable

from mirror_core.errors import MirrorError
from mirror_core.wire.metadata import NO_LEADER, Brokers

log = logging.getLogger(__name__)
TP = tuple[str, int]
#: after a failed metadata request, or while a partition has no leader: how long before asking again
RETRY_S = 0.5
#: a partition without a leader for this long is said (a leader election takes less), and asked for every
LEADERLESS_SAY_S, LEADERLESS_RETRY_S = 10.0, 2.0


def worker_failed(brokers: Brokers, exc: Exception, where: str | None = None) -> str:
    """A worker thread's failure, before it tries again: a MirrorError is its own line (``where`` — the broker the
    worker talks to, else the cluster — put in front when the error does not name the cluster: an answer that does
    not parse); anything else is a bug, logged with its traceback (the thread goes on: a worker that died would
    stall its partitions silently). Either is said at most once a minute while it repeats (``brokers.line``);
    the text it is throttled by."""
    where = where or brokers.where
    if isinstance(exc, MirrorError):
        text = str(exc) if str(exc).startswith(brokers.where) else f"{where}: {exc}"
        if brokers.line.due(text):
            log.warning("%s (said at most once a minute while it lasts)", text)
        return text
    # A bug is told apart by its type and where it was raised: another bug of the same type has its own line.
    frame = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ is not None else None
    at = f"{frame.filename}:{frame.lineno}" if frame is not None else "?"
    text = f"{where}: {type(exc).__name__} at {at}"
    if brokers.line.due(text):
        log.error("%s: unexpected error in the wire client; trying again (this one said at most once a minute)",
                  where, exc_info=exc)
    return text


class Outage:
    """One worker's failures in a row (:func:`worker_failed`): the first success after them is said, with how long
    they lasted, and those failures' lines are then due again (a later outage is said too; other workers' lines
    are theirs). Said once a minute at most, like the failures: a link that flaps is not a line per flap."""

    def __init__(self, brokers: Brokers) -> None:
        self.brokers = brokers
        self.since: float | None = None  # monotonic time of the first failure in a row; None: none
        self.said: set[str] = set()  # what those failures were throttled by

    def failed(self, exc: Exception, where: str | None = None) -> None:
        if self.since is None:
            self.since = time.monotonic()
        if len(self.said) < 64:  # (texts that change at every try are not all kept; they are not throttled either)
            self.said.add(worker_failed(self.brokers, exc, where))
        else:
            worker_failed(self.brokers, exc, where)

    def succeeded(self, where: str | None = None) -> None:
        if self.since is None:
            return
        lasted, self.since = time.monotonic() - self.since, None
        again = f"{where or self.brokers.where}: answering again"
        if self.brokers.line.due(again):
            log.info("%s after %.1f s of failures", again, lasted)
            self.brokers.line.forget(self.said)
        self.said.clear()


class LeaderTracker:
    """``lock``: the caller's condition, held while leaders change and notified after (the caller's workers
    wait on it); ``start_worker(node)``: called under it once per broker that comes to lead a partition."""

    def __init__(self, brokers: Brokers, lock: threading.Condition, start_worker: Callable[[int], None],
                 stop: threading.Event) -> None:
        self.brokers, self.lock, self.start_worker, self.stop = brokers, lock, start_worker, stop
        self.leaders: dict[TP, int] = {}
        self.wanted: set[TP] = set()
        self.workers: set[int] = set()
        self._stale = threading.Event()
        self._outage = Outage(brokers)
        #: wanted partitions without a leader at the last lookup, and since when (monotonic)
        self._leaderless: dict[TP, float] = {}
        #: set by want() and moved(): ends the wait between lookups while a partition has no leader
        self._nudged = threading.Event()
        threading.Thread(target=self._run, name=f"leaders-{brokers.where}", daemon=True).start()

    def want(self, tps: Iterable[TP]) -> None:
        """Find these partitions' leaders (under the lock)."""
        new = set(tps) - self.wanted
        self.wanted |= new
        if any(tp not in self.leaders for tp in new):
            self._stale.set()
            self._nudged.set()

    def forget(self, tps: Iterable[TP]) -> None:
        self.wanted -= set(tps)

    def moved(self, tps: Iterable[TP]) -> None:
        """Their leader moved or is unreachable: found again (under the lock)."""
        for tp in tps:
            self.leaders.pop(tp, None)
        self._stale.set()
        self._nudged.set()

    def shutdown(self) -> None:
        """Stop this thread and the workers (they watch ``stop`` and wait on ``lock``)."""
        self.stop.set()
        self._stale.set()
        self._nudged.set()
        with self.lock:
            self.lock.notify_all()

    def _run(self) -> None:
        while not self.stop.is_set():
            self._stale.wait(30)
            if self.stop.is_set():
                return
            self._stale.clear()
            try:
                wait = self._round()
            except Exception as exc:  # unreachable, refused (TLS, SASL), or a bug: asked again (this thread must live)
                self._outage.failed(exc)
                self._stale.set()
                self.stop.wait(RETRY_S)  # not shortened by workers' news: a cluster that fails is not hammered
                continue
            if wait:
                self._nudged.clear()
                self._nudged.wait(wait)

    def _round(self) -> float:
        """One lookup of the leaders not known; how long to wait before the next (0: until asked)."""
        with self.lock:
            topics = {tp[0] for tp in self.wanted if tp not in self.leaders}
        if not topics:
            self._leaderless.clear()
            return 0.0
        meta = self.brokers.metadata(sorted(topics))
        self._outage.succeeded()
        with self.lock:
            for topic, found in meta.topics.items():
                for partition, leader in found.leaders.items():
                    if (topic, partition) in self.wanted and leader != NO_LEADER and not found.errors[partition]:
                        self.leaders[topic, partition] = leader
            missing = sorted(tp for tp in self.wanted if tp not in self.leaders)
            for node in set(self.leaders.values()) - self.workers:
                self.start_worker(node)
                self.workers.add(node)  # after: a worker that did not start is started at the next round
            self.lock.notify_all()
        now = time.monotonic()
        self._leaderless = {tp: self._leaderless.get(tp, now) for tp in missing}
        if not missing:
            return 0.0
        # No leader yet (an election, a topic just created): asked again shortly; said once that lasts
        self._stale.set()
        long = [tp for tp in missing if now - self._leaderless[tp] >= LEADERLESS_SAY_S]
        if not long:
            return RETRY_S
        names = ", ".join(f"{t}[{p}]" for t, p in long[:5]) + (f" and {len(long) - 5} more" if len(long) > 5 else "")
        text = f"{self.brokers.where}: no leader for {names} (an election, a broker down, a topic deleted?)"
        if self.brokers.line.due(text):
            log.warning("%s for %.0f s or more; not read or written meanwhile, asked again every %.0f s (said at most "
                        "once a minute while it lasts)", text, min(now - self._leaderless[tp] for tp in long),
                        LEADERLESS_RETRY_S)
        return LEADERLESS_RETRY_S
