"""Operators' runtime controls of one flow: pauses of a topic or a partition, and bandwidth limits of the flow or a
topic. They are desired states in the state store; the service's control loop hands the flow the active ones
(:meth:`RuntimeControls.set`) and the flow's own thread applies them (:meth:`RuntimeControls.tick`), within a
second, with no restart and no rebalance.

A limit holds across all processes of the flow by sharing: each process takes the limit times the share of the
topic's (or the flow's) partitions it owns, so the shares add up to the limit whatever the assignment. Bytes are
counted as they are read to be sent (a record's key and value, a batch's bytes) into a token bucket of one second's
worth; a bucket in debt stops reading: the flow's (the loop reads nothing new) or the topic's (its partitions are paused
on the reading side, not in their replication state). The time spent so is ``mirror_throttled_seconds_total``.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from confluent_kafka import TopicPartition

from mirror_core.metrics import Metrics
from mirror_core.replication.batch import PartitionMode, PartitionState

PAUSE, LIMIT = "pause", "limit"
#: how often the controls are applied to the partitions and the shares computed again
TICK_S = 0.5
#: records read at once while a limit is set (a read is counted whole: smaller reads keep the rate smooth)
LIMITED_READ = 200


@dataclass(frozen=True)
class TopicControl:
    """An active control as the state store holds it."""

    kind: str  # PAUSE or LIMIT
    topic: str | None  # LIMIT: None for the whole flow
    partition: int | None  # PAUSE: None for the whole topic
    limit_bytes_per_s: int | None
    set_by: str
    set_at: str
    reason: str

    def covers(self, st: PartitionState) -> bool:
        return st.topic == self.topic and (self.partition is None or self.partition == st.partition)


class Pauses(Protocol):
    """What applying controls needs of the acknowledgement side (acks.Acks) and the reading side."""

    @property
    def consumer(self) -> Any: ...

    def pause(self, st: PartitionState, reason: str, keep_in_flight: bool = False) -> None: ...

    def unpause(self, st: PartitionState, to: int) -> None: ...


class Bucket:
    """Bytes allowed at ``rate`` per second, up to one second's worth ahead; debt is paid back in time."""

    __slots__ = ("at", "rate", "tokens")

    def __init__(self, rate: float, now: float) -> None:
        self.rate, self.tokens, self.at = rate, rate, now

    def refill(self, now: float) -> None:
        self.tokens = min(self.rate, self.tokens + (now - self.at) * self.rate)
        self.at = now

    def in_debt(self, now: float) -> bool:
        self.refill(now)
        return self.tokens < 0


class RuntimeControls:
    def __init__(self, flow: str, metrics: Metrics) -> None:
        self.flow = flow
        self.metrics = metrics
        self._lock = threading.Lock()
        self._desired: list[TopicControl] = []
        self._changed = False
        #: anything to apply or undo: the flow's loop calls :meth:`tick` (read there without the lock: a hint)
        self.active = False
        self._next_tick = 0.0
        #: partitions this flow paused for an operator: their state then, and the reason it gave them
        self._paused: dict[tuple[str, int], tuple[PartitionState, str]] = {}
        #: limits in force here: None for the flow's, else the topic's (this process's share)
        self._buckets: dict[str | None, Bucket] = {}
        #: topics whose partitions are paused on the reading side until their bucket is out of debt
        self._held_topics: set[str] = set()
        self._gated_since: dict[str | None, float] = {}
        #: the flow's bucket is in debt: nothing more is read until this monotonic time
        self.gated_until = 0.0

    def set(self, controls: list[TopicControl]) -> None:
        """The flow's active controls as the store lists them now (control thread)."""
        with self._lock:
            if controls != self._desired:
                self._desired, self._changed = list(controls), True
                self.active = True

    @property
    def desired(self) -> list[TopicControl]:
        with self._lock:
            return list(self._desired)

    def holds(self, st: PartitionState) -> bool:
        """An operator's pause covers ``st``."""
        return any(c.kind == PAUSE and c.covers(st) for c in self.desired)

    @property
    def counting(self) -> bool:
        """A limit is in force here: the bytes read are counted (:meth:`read`)."""
        return bool(self._buckets)

    def read(self, topic: str, size: int) -> None:
        """``size`` bytes of ``topic`` read to be sent to the target (flow thread)."""
        flow = self._buckets.get(None)
        if flow is not None:
            flow.tokens -= size
        bucket = self._buckets.get(topic)
        if bucket is not None:
            bucket.tokens -= size

    def tick(self, now: float, states: Mapping[tuple[str, int], PartitionState], acks: Pauses,
             partition_counts: Mapping[str, int]) -> None:
        """Apply the controls (flow thread, while :attr:`active`): pauses and shares every TICK_S or at once after a
        change, the buckets every time."""
        if self._changed or now >= self._next_tick:
            with self._lock:
                desired, self._changed = self._desired, False
            self._next_tick = now + TICK_S
            self._apply_pauses(desired, states, acks)
            self._share_limits(desired, states, partition_counts, now)
        self._throttle(now, states, acks)
        with self._lock:
            self.active = bool(self._desired or self._paused or self._buckets or self._held_topics or self.gated_until)

    def _apply_pauses(self, desired: list[TopicControl], states: Mapping[tuple[str, int], PartitionState],
                      acks: Pauses) -> None:
        pauses = [c for c in desired if c.kind == PAUSE]
        if not pauses and not self._paused:
            return
        for key, st in states.items():
            control = next((c for c in pauses if c.covers(st)), None)
            held = self._paused.get(key)
            ours = held[1] if held is not None and held[0] is st else None  # (assigned again since: a new state)
            if control is not None and ours is None and st.mode is not PartitionMode.PAUSED:
                reason = (f"paused by {control.set_by} at {control.set_at}: {control.reason} (`mirror-core control "
                          f"resume --flow '{self.flow}' --topic {st.topic}"
                          f"{f' --partition {control.partition}' if control.partition is not None else ''} "
                          "--reason ...` resumes it)")
                acks.pause(st, reason, keep_in_flight=True)
                self._paused[key] = (st, reason)
            elif control is None and held is not None:
                del self._paused[key]
                to = st.acked if st.acked is not None else st.origin
                if st.mode is PartitionMode.PAUSED and st.paused_reason == ours and to is not None:
                    acks.unpause(st, to)  # (paused since for another reason: left as it is)
        for key in [k for k in self._paused if k not in states]:  # no longer ours: paused again if it comes back
            del self._paused[key]

    def _share_limits(self, desired: list[TopicControl], states: Mapping[tuple[str, int], PartitionState],
                      partition_counts: Mapping[str, int], now: float) -> None:
        owned: dict[str, int] = {}
        for topic, _ in states:
            owned[topic] = owned.get(topic, 0) + 1
        rates: dict[str | None, float] = {}
        for c in desired:
            if c.kind != LIMIT or not c.limit_bytes_per_s:
                continue
            if c.topic is None:
                total = sum(partition_counts.values()) or 1
                rates[None] = c.limit_bytes_per_s * len(states) / total
            else:
                rates[c.topic] = c.limit_bytes_per_s * owned.get(c.topic, 0) / (partition_counts.get(c.topic) or 1)
        for scope in [s for s in self._buckets if s not in rates]:
            del self._buckets[scope]
        for scope, rate in rates.items():
            bucket = self._buckets.get(scope)
            if bucket is None:
                self._buckets[scope] = Bucket(max(rate, 1.0), now)
            else:
                bucket.refill(now)
                bucket.rate = max(rate, 1.0)

    def _throttle(self, now: float, states: Mapping[tuple[str, int], PartitionState], acks: Pauses) -> None:
        flow = self._buckets.get(None)
        if flow is not None and flow.in_debt(now):
            self.gated_until = now + min(-flow.tokens / flow.rate, TICK_S)
            self._gated_since.setdefault(None, now)
        elif self.gated_until:
            self.gated_until = 0.0
            self._count(None, now)
        for topic, bucket in self._buckets.items():
            if topic is None:
                continue
            if bucket.in_debt(now) and topic not in self._held_topics:
                self._held_topics.add(topic)
                self._gated_since[topic] = now
                self._reading(acks, states, topic, pause=True)
            elif not bucket.in_debt(now) and topic in self._held_topics:
                self._held_topics.discard(topic)
                self._count(topic, now)
                self._reading(acks, states, topic, pause=False)
        for topic in [t for t in self._held_topics if t not in self._buckets]:  # limit lifted meanwhile
            self._held_topics.discard(topic)
            self._count(topic, now)
            self._reading(acks, states, topic, pause=False)
        # A hold still on counts as it goes (a whole fetch on the batches path can hold a topic for seconds).
        for scope, since in list(self._gated_since.items()):
            self.metrics.throttled.labels(self.flow, scope or "").inc(now - since)
            self._gated_since[scope] = now

    def _count(self, scope: str | None, now: float) -> None:
        since = self._gated_since.pop(scope, None)
        if since is not None:
            self.metrics.throttled.labels(self.flow, scope or "").inc(now - since)

    @staticmethod
    def _reading(acks: Pauses, states: Mapping[tuple[str, int], PartitionState], topic: str, pause: bool) -> None:
        """Pause or resume reading ``topic``'s copying partitions (their replication state is not touched)."""
        tps = [TopicPartition(st.topic, st.partition) for st in states.values()
               if st.topic == topic and st.mode is PartitionMode.COPYING]
        if tps:
            reader = acks.consumer
            (reader.pause if pause else reader.resume)(tps)

