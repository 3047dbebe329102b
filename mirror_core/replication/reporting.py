"""What one flow's replicator shows: the /status snapshot, recent events, and the gauges per partition."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaException

from mirror_core.clients import ClusterHealth
from mirror_core.metrics import Metrics
from mirror_core.replication.batch import PartitionState
from mirror_core.replication.source_reader import SourceReader
from mirror_core.replication.topics import TopicManager

log = logging.getLogger(__name__)
MAX_EVENTS = 20
#: How often the source's end offsets are asked for, for the partitions whose lag the loop cannot refresh
#: (stranded, or owned while the loop is held): lag_watch.py.
SOURCE_REFRESH_S = 5.0
#: The loop counts as held (waiting on the target in a commit, an abort or a probe) once it has not
#: published for this long, or for two offset.flush.interval.ms if longer (it publishes once per interval).
HELD_AFTER_S = 5.0
#: The source's end offsets of these partitions, by (topic, partition); those that did not answer left out.
EndOffsets = Callable[[list[tuple[str, int]]], dict[tuple[str, int], int]]


#: a flow's /status states between a fence of this process's own and its rejoin: healthy (healthy_state), since
#: restarting the process would only rejoin sooner, past fencing.FenceJudge's cap on rejoins
CHECKING_FENCE = "checking the fence"
REJOINING_AFTER_FENCE = "rejoining after a fence"


def healthy_state(state: str) -> bool:
    """Whether a running flow in ``state`` counts as healthy for /healthz: copying, or on its way back after a
    fence of its own (a liveness probe restarting the process would defeat the cap on rejoins)."""
    return state == "running" or state.startswith((CHECKING_FENCE, REJOINING_AFTER_FENCE))


@dataclass
class Stranded:
    """A partition released while the target did not answer (an exactly-once slot lost with it): nobody may
    copy it until the target answers again, so this process keeps counting its lag from the last position it
    made visible, rather than letting the gauge drop to 0 while the backlog grows."""

    topic: str
    partition: int
    remote: str
    position: int
    end: int | None
    since: float  # wall clock

    def entry(self) -> dict[str, Any]:
        lag = max(0, self.end - self.position) if self.end is not None and self.end >= 0 else None
        return {"topic": self.topic, "partition": self.partition, "remote": self.remote, "position": self.position,
                "end": self.end, "lag": lag, "since": self.since}


class Reporter:
    """Owns the status snapshot (replaced whole, so another thread may read it at any time). The loop
    publishes; :meth:`refresh_from_source` (another thread, lag_watch.py) keeps the lag current while the
    loop cannot, under one lock with the loop's changes."""

    def __init__(self, flow_name: str, metrics: Metrics, publish_interval_s: float = 1.0) -> None:
        self.flow_name = flow_name
        self.held_after_s = max(HELD_AFTER_S, 2 * publish_interval_s)
        self.metrics = metrics
        self.events: list[dict[str, Any]] = []  # recent notable events, newest last
        self.status: dict[str, Any] = {"flow": flow_name, "state": "starting", "partitions": []}
        #: (topic, partition) -> (visible position, end) as last published, for a partition stranded later
        self._last: dict[tuple[str, int], tuple[int, int | None]] = {}
        self.stranded: dict[tuple[str, int], Stranded] = {}
        self._lock = threading.Lock()
        self._published_at = time.monotonic()
        self._publishes = 0  # a refresh from the source answered after a publish must not undo it
        self._gone: set[tuple[str, int]] = set()  # forgotten since the last publish: still in its snapshot

    def set_state(self, state: str, owns_nothing: bool = False) -> None:
        """``owns_nothing``: the flow gave its partitions up (e.g. fenced), so /status lists none."""
        with self._lock:  # the lag watch replaces the snapshot too: neither may lose the other's change
            self.status = {**self.status, "state": state, **({"partitions": []} if owns_nothing else {})}

    def set_producers(self, entry: dict[str, object]) -> None:
        """The target producers this pipeline chose (producer_pool.ProducerChoice.entry), kept until the next."""
        with self._lock:
            self.status = {**self.status, "producers": entry}

    def report(self, kind: str, event: dict[str, Any]) -> None:
        """Count an error of ``kind`` and keep ``event`` among the last ones shown in /status."""
        self.metrics.errors.labels(self.flow_name, kind).inc()
        with self._lock:
            self.events = [*self.events[-(MAX_EVENTS - 1):], event]
            self.status = {**self.status, "events": list(self.events)}  # shown now, not at the next publish

    def report_problems(self, topics: TopicManager) -> None:
        """Configs or topics the target rejected (topics.py), one event each."""
        for problem in topics.take_problems():
            self.report(problem.error_kind, problem.event())

    def report_recreated(self, topic: str, old_id: str, new_id: str, remote: str, partitions: list[int]) -> None:
        message = (f"source topic {topic} was deleted and recreated (topic ID {old_id} -> {new_id}): replicating "
                   f"the new topic from its beginning into {remote}, after the records already there "
                   "(partitions " + ", ".join(map(str, sorted(partitions))) + ")")
        log.error("flow %s: %s", self.flow_name, message)
        self.report("source_topic_recreated", {"at": time.time(), "topic": topic, "event": "source topic recreated",
                                               "detail": message})

    def forget_partition(self, st: PartitionState, stranded: bool = False) -> None:
        """This process stopped copying ``st``. ``stranded``: released because the target did not answer
        (no other process can copy it meanwhile either), so its lag stays counted here (:class:`Stranded`)."""
        key = (st.topic, st.partition)
        self.count_landed(st, latency=False)  # (its last latency is dropped below)
        with self._lock:
            self._gone.add(key)
            last = self._last.pop(key, None)
            if stranded and last is not None:
                self.stranded[key] = Stranded(st.topic, st.partition, st.remote, last[0], last[1], time.time())
                self.metrics.paused.labels(self.flow_name, st.topic, str(st.partition)).set(0)
            else:
                self._zero(st.topic, st.partition)
        # Another process owns it now: a stale last latency would be summed with the owner's.
        self.metrics.forget_latency(self.flow_name, st.topic, st.partition)

    def count_landed(self, st: PartitionState, latency: bool = True) -> None:
        """Add what ``st`` acknowledged since the last call to its counters (and set its last latency), once per
        publish rather than per batch: at thousands of partitions a batch is a few dozen records, and these
        updates cost more than the rest of its acknowledgement (acks.py counts on the partition state)."""
        m, lbl = self.metrics, self.flow_name
        if st.landed_records:
            m.of_partition(m.records, lbl, st.topic, st.partition).inc(st.landed_records)
            m.of_partition(m.bytes, lbl, st.topic, st.partition).inc(st.landed_bytes)
            st.landed_records = st.landed_bytes = 0
        if st.landed_latency is not None:
            if latency:
                m.of_partition(m.last_latency, lbl, st.topic, st.partition).set(st.landed_latency)
            st.landed_latency = None

    def _zero(self, topic: str, partition: int) -> None:
        for metric in (self.metrics.lag, self.metrics.position, self.metrics.paused):
            metric.labels(self.flow_name, topic, str(partition)).set(0)

    def _stranded_entries(self) -> list[dict[str, Any]]:
        """The stranded partitions, their gauges set (ends as last asked for by :meth:`refresh_from_source`)."""
        entries = [s.entry() for s in self.stranded.values()]
        for e in entries:
            if e["lag"] is not None:
                self.metrics.lag.labels(self.flow_name, e["topic"], str(e["partition"])).set(e["lag"])
        return sorted(entries, key=lambda e: (e["topic"], e["partition"]))

    def _held(self, now: float) -> bool:
        """The loop has not published for longer than it takes between two publishes (it waits)."""
        return now - self._published_at >= self.held_after_s

    def held_for(self, now: float | None = None) -> float | None:
        """Seconds since the loop last published, once it is held; None otherwise, and for a stopped flow."""
        now = time.monotonic() if now is None else now
        stopped = str(self.status.get("state", "")).startswith("stopped")
        return round(now - self._published_at, 1) if self._held(now) and not stopped else None

    def needs_source(self, now: float | None = None) -> bool:
        """Whether some partition's lag is this process's to count and the loop cannot refresh it."""
        now = time.monotonic() if now is None else now
        return bool(self.stranded) or (bool(self._last) and self._held(now))

    def refresh_from_source(self, end_offsets: EndOffsets, now: float | None = None) -> None:
        """Refresh the lag the loop cannot: the stranded partitions' always, and the owned partitions'
        while the loop is held (it waits on an unreachable target in a commit, an abort or a probe, for a
        minute and more). Their lag is the source's end now minus the last position made visible, which
        cannot advance while the loop is held. Called from another thread; the source is asked without
        the lock (it may take seconds), and its answer is dropped for owned partitions the loop published
        meanwhile."""
        now = time.monotonic() if now is None else now
        with self._lock:
            held = bool(self._last) and self._held(now)
            keys = list(self.stranded) + (list(self._last) if held else [])
            publishes = self._publishes
        if not keys:
            return
        ends = end_offsets(keys)
        with self._lock:
            for key, end in ends.items():
                if key in self.stranded:
                    self.stranded[key].end = end
            # A partition forgotten since the loop's snapshot (stranded, or another process's now) leaves it.
            parts = [p for p in self.status.get("partitions", []) if (p["topic"], p["partition"]) not in self._gone]
            if held and publishes == self._publishes:
                parts = [self._refreshed(p, ends) for p in parts]
            self.status = {**self.status, "partitions": parts, "stranded": self._stranded_entries()}

    def _refreshed(self, part: dict[str, Any], ends: dict[tuple[str, int], int]) -> dict[str, Any]:
        """``part`` of the status snapshot with the source's end in ``ends`` and its lag from it (gauge set)."""
        key = (part["topic"], part["partition"])
        end, last = ends.get(key), self._last.get(key)
        if end is None or last is None:
            return part
        lag = max(0, end - last[0])
        self._last[key] = (last[0], end)
        self.metrics.lag.labels(self.flow_name, part["topic"], str(part["partition"])).set(lag)
        return {**part, "end": end, "lag": lag}

    def drop_stranded(self) -> None:
        """The flow stopped: nothing here counts the stranded partitions any more."""
        with self._lock:
            self._unstrand()
            self.status = {**self.status, "stranded": []}

    def _unstrand(self) -> None:
        for s in self.stranded.values():
            self._zero(s.topic, s.partition)
        self.stranded.clear()

    def publish(self, consumer: SourceReader, states: Iterable[PartitionState], visible: Callable[[PartitionState],
                int | None], instance: str, missing_topics: Iterable[str], last_heartbeat_ms: int,
                source: ClusterHealth, target: ClusterHealth) -> None:
        """Refresh the gauges and the status snapshot. ``visible``: how far a target reader sees a
        partition (at-least-once: acknowledged; exactly-once: committed)."""
        with self._lock:
            self._publish(consumer, states, visible, instance, missing_topics, last_heartbeat_ms, source, target)

    def _publish(self, consumer: SourceReader, states: Iterable[PartitionState], visible: Callable[[PartitionState],
                 int | None], instance: str, missing_topics: Iterable[str], last_heartbeat_ms: int,
                 source: ClusterHealth, target: ClusterHealth) -> None:
        self._published_at = time.monotonic()
        self._publishes += 1
        self._gone.clear()
        parts = []
        owned: set[tuple[str, int]] = set()
        lbl = self.flow_name
        for st in states:
            owned.add((st.topic, st.partition))
            self.count_landed(st)
            try:
                low, high = consumer.get_watermark_offsets(st.tp, cached=True)
            except KafkaException:
                low, high = -1, -1
            done = visible(st)
            pos = done if done is not None else (low if low >= 0 else None)
            lag = max(0, high - pos) if high >= 0 and pos is not None else None
            if pos is not None:
                self.metrics.of_partition(self.metrics.position, lbl, st.topic, st.partition).set(pos)
                self._last[(st.topic, st.partition)] = (pos, high if high >= 0 else None)
            if lag is not None:
                self.metrics.of_partition(self.metrics.lag, lbl, st.topic, st.partition).set(lag)
            parts.append({"topic": st.topic, "partition": st.partition, "remote": st.remote,
                          "position": pos, "end": high if high >= 0 else None, "lag": lag,
                          "paused": st.paused_reason, "careful": st.careful})
        # Owned no more and never forgotten (the loop forgets what it releases; this is the safety net): its
        # gauges go to 0, and the lag watch leaves it alone.
        for key in self._last.keys() - owned:
            del self._last[key]
            self._zero(*key)
        # Stranded partitions leave when copied here again (their gauges are set above), or all at once when
        # the target answers (whoever owns them then reports them).
        for key in owned & self.stranded.keys():
            del self.stranded[key]
        if target.reachable:
            self._unstrand()
        stranded = self._stranded_entries()
        if last_heartbeat_ms:
            self.metrics.heartbeat_age.labels(lbl).set(max(0.0, time.time() - last_heartbeat_ms / 1000))
        self.status = {
            "flow": self.flow_name, "state": self.status.get("state"), "instance": instance,
            "partitions": sorted(parts, key=lambda p: (p["topic"], p["partition"])),
            "stranded": stranded,
            "missing_topics": sorted(missing_topics),
            "events": list(self.events),
            "source_reachable": source.reachable,
            "target_reachable": target.reachable,
            "last_heartbeat_ms": last_heartbeat_ms or None,
            "producers": self.status.get("producers"),
        }
