"""What one flow's replicator shows: the /status snapshot, recent events, and the gauges per partition."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from confluent_kafka import Consumer, KafkaException

from mirror_core.clients import ClusterHealth
from mirror_core.metrics import Metrics
from mirror_core.replication.batch import PartitionState
from mirror_core.replication.topics import TopicManager

log = logging.getLogger(__name__)
MAX_EVENTS = 20


class Reporter:
    """Owns the status snapshot (replaced whole, so another thread may read it at any time)."""

    def __init__(self, flow_name: str, metrics: Metrics) -> None:
        self.flow_name = flow_name
        self.metrics = metrics
        self.events: list[dict[str, Any]] = []  # recent notable events, newest last
        self.status: dict[str, Any] = {"flow": flow_name, "state": "starting", "partitions": []}

    def set_state(self, state: str, owns_nothing: bool = False) -> None:
        """``owns_nothing``: the flow gave its partitions up (e.g. fenced), so /status lists none."""
        self.status = {**self.status, "state": state, **({"partitions": []} if owns_nothing else {})}

    def report(self, kind: str, event: dict[str, Any]) -> None:
        """Count an error of ``kind`` and keep ``event`` among the last ones shown in /status."""
        self.metrics.errors.labels(self.flow_name, kind).inc()
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

    def forget_partition(self, st: PartitionState) -> None:
        for metric in (self.metrics.lag, self.metrics.position, self.metrics.paused):
            metric.labels(self.flow_name, st.topic, str(st.partition)).set(0)
        # Another process owns it now: a stale last latency would be summed with the owner's.
        with contextlib.suppress(KeyError):
            self.metrics.last_latency.remove(self.flow_name, st.topic, str(st.partition))

    def publish(self, consumer: Consumer, states: Iterable[PartitionState], visible: Callable[[PartitionState],
                int | None], instance: str, missing_topics: Iterable[str], last_heartbeat_ms: int,
                source: ClusterHealth, target: ClusterHealth) -> None:
        """Refresh the gauges and the status snapshot. ``visible``: how far a target reader sees a
        partition (at-least-once: acknowledged; exactly-once: committed)."""
        parts = []
        lbl = self.flow_name
        for st in states:
            try:
                low, high = consumer.get_watermark_offsets(st.tp, cached=True)
            except KafkaException:
                low, high = -1, -1
            done = visible(st)
            pos = done if done is not None else (low if low >= 0 else None)
            lag = max(0, high - pos) if high >= 0 and pos is not None else None
            part = str(st.partition)
            if pos is not None:
                self.metrics.position.labels(lbl, st.topic, part).set(pos)
            if lag is not None:
                self.metrics.lag.labels(lbl, st.topic, part).set(lag)
            parts.append({"topic": st.topic, "partition": st.partition, "remote": st.remote,
                          "position": pos, "end": high if high >= 0 else None, "lag": lag,
                          "paused": st.paused_reason, "careful": st.careful})
        if last_heartbeat_ms:
            self.metrics.heartbeat_age.labels(lbl).set(max(0.0, time.time() - last_heartbeat_ms / 1000))
        self.status = {
            "flow": self.flow_name, "state": self.status.get("state"), "instance": instance,
            "partitions": sorted(parts, key=lambda p: (p["topic"], p["partition"])),
            "missing_topics": sorted(missing_topics),
            "events": list(self.events),
            "source_reachable": source.reachable,
            "target_reachable": target.reachable,
            "last_heartbeat_ms": last_heartbeat_ms or None,
        }
