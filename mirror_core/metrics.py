"""Every Prometheus metric mirror_core exports, declared once, labelled by flow/topic/partition."""

from __future__ import annotations

import contextlib
import threading
from bisect import bisect_left
from collections.abc import Iterator, Sequence
from itertools import accumulate
from typing import TypeVar, cast

from prometheus_client import CollectorRegistry, Counter, Gauge, GCCollector, ProcessCollector
from prometheus_client.core import HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from mirror_core import __version__

#: topics of one flow with a latency histogram series of their own; the rest share ``topic="other"``
LATENCY_MAX_TOPICS = 50
OTHER_TOPICS = "other"
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0)


class RecordLatency(Collector):
    """A latency histogram of *every* record: target acknowledgement time minus its source timestamp.

    The records of a produce batch are acknowledged together, so a batch is observed at once: its
    timestamps are sorted (C speed; usually sorted already). When its newest and oldest record share a
    bucket (the usual case: a batch's records are milliseconds apart) that bucket takes them all, O(log
    buckets); otherwise each bucket's count is found by bisection, O(buckets * log n), never a Python call
    per record. Counts are kept per bucket and made cumulative when collected. Records without a
    timestamp (<= 0) are not counted; a timestamp ahead of the acknowledgement (clock skew) counts as 0 s.

    Labelled by flow and source topic, so that an operator finds the slow topic; the partition is on the
    per-partition gauge only. Cardinality is bounded: a flow's first ``max_topics`` topics get their own
    series, later ones share the ``topic="other"`` series (a flow with thousands of topics stays cheap).
    """

    def __init__(self, name: str, documentation: str, buckets: Sequence[float],
                 max_topics: int = LATENCY_MAX_TOPICS) -> None:
        self.name, self.documentation = name, documentation
        self.bounds = tuple(buckets)
        self._bounds_ms = tuple(b * 1000.0 for b in self.bounds)
        self.max_topics = max_topics
        self._lock = threading.Lock()
        #: (flow, topic label) -> [count per bucket (each bound's, then +Inf's)..., sum]
        self._series: dict[tuple[str, str], list[float]] = {}
        self._topics: dict[str, set[str]] = {}  # flow -> topics with a series of their own

    def observe_batch(self, flow: str, topic: str, acked_at: float, timestamps_ms: Sequence[int]) -> None:
        if not timestamps_ms:
            return
        ts = sorted(timestamps_ms)
        start = bisect_left(ts, 1)  # records without a timestamp
        n = len(ts) - start
        if n <= 0:
            return
        acked_ms = acked_at * 1000.0
        stamped = ts[start:]
        if stamped[-1] <= acked_ms:
            total = (n * acked_ms - sum(stamped)) / 1000.0
        else:  # clock skew: no negative latencies in the sum
            total = sum(max(0.0, acked_ms - t) for t in stamped) / 1000.0
        # a record is in the first bucket whose bound its latency does not exceed (skew: the first)
        oldest = bisect_left(self._bounds_ms, acked_ms - stamped[0])
        one_bucket = bisect_left(self._bounds_ms, acked_ms - stamped[-1]) == oldest
        if not one_bucket:  # per bound, how many records are within it (cumulative), then per bucket
            within = [len(ts) - max(start, bisect_left(ts, acked_ms - b)) for b in self._bounds_ms] + [n]
            per_bucket = [c - (within[j - 1] if j else 0) for j, c in enumerate(within)]
        with self._lock:
            series = self._series.get((flow, topic)) or self._new_series(flow, topic)
            if one_bucket:
                series[oldest] += n
            else:
                for j, c in enumerate(per_bucket):
                    series[j] += c
            series[-1] += total

    def observe_run(self, flow: str, topic: str, acked_at: float, timestamp_ms: int, count: int) -> None:
        """``count`` records of one timestamp (ms; <= 0: none, not counted), acknowledged together: the records of
        a batch copied whole (its records are not read: each counts at the batch's newest timestamp, so its
        latency is understated by at most the batch's time span, the source producer's linger)."""
        if timestamp_ms <= 0 or count <= 0:
            return
        latency_ms = max(0.0, acked_at * 1000.0 - timestamp_ms)
        bucket = bisect_left(self._bounds_ms, latency_ms)
        with self._lock:
            series = self._series.get((flow, topic)) or self._new_series(flow, topic)
            series[bucket] += count
            series[-1] += count * latency_ms / 1000.0

    def _new_series(self, flow: str, topic: str) -> list[float]:
        """The series ``topic`` counts in from now on (under the lock): its own, or past the cap the flow's
        shared one."""
        own = self._topics.setdefault(flow, set())
        if len(own) < self.max_topics:
            own.add(topic)
        else:
            topic = OTHER_TOPICS
        series = self._series.get((flow, topic))
        if series is None:
            series = self._series[(flow, topic)] = [0.0] * (len(self.bounds) + 2)
        return series

    def collect(self) -> Iterator[Metric]:
        family = HistogramMetricFamily(self.name, self.documentation, labels=("flow", "topic"))
        with self._lock:
            snapshot = {key: list(series) for key, series in self._series.items()}
        for (flow, topic), series in snapshot.items():
            cumulative = list(accumulate(series[:-1]))
            buckets = [(str(b), cumulative[j]) for j, b in enumerate(self.bounds)] + [("+Inf", cumulative[-1])]
            family.add_metric([flow, topic], buckets, series[-1])
        yield family


#: a per-partition metric (flow, topic, partition labels)
PartitionMetric = TypeVar("PartitionMetric", Counter, Gauge)


class Metrics:
    """One registry per service instance (tests may run several in one process)."""

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        # The standard process_* (CPU, resident memory, open files) and python_gc_* series, as every
        # Prometheus Python client exports them by default.
        ProcessCollector(registry=r)
        GCCollector(registry=r)
        part = ("flow", "topic", "partition")
        self.records = Counter("mirror_records_replicated", "Records acknowledged by the target", part, registry=r)
        self.bytes = Counter("mirror_bytes_replicated", "Key+value bytes acknowledged by the target", part,
                             registry=r)
        self.latency = RecordLatency("mirror_replication_latency_seconds",
                                     "Target acknowledgement time minus source record timestamp, every record",
                                     LATENCY_BUCKETS)
        r.register(self.latency)
        self.last_latency = Gauge("mirror_partition_replication_latency_seconds",
                                  "Latency of the partition's last acknowledged record (MirrorMaker 2's current "
                                  "replication-latency-ms)", part, registry=r)
        self.lag = Gauge("mirror_partition_lag_records", "Source end offset minus replicated position", part,
                         registry=r)
        self.position = Gauge("mirror_partition_position", "Next source offset to replicate (committed)", part,
                              registry=r)
        self.paused = Gauge("mirror_partition_paused", "1 while a partition is paused by an error", part,
                            registry=r)
        self.damaged = Counter("mirror_damaged_batches", "Source record batches found damaged (CRC mismatch, offsets "
                               "out of order): the partition pauses at the first", part, registry=r)
        self.skipped = Counter("mirror_skipped_records", "Source offsets skipped by an operator's recorded skip of a "
                               "damaged range", part, registry=r)
        self.throttled = Counter("mirror_throttled_seconds", "Seconds a flow (topic \"\") or a topic read nothing new "
                                 "because its bandwidth limit was used up", ("flow", "topic"), registry=r)
        self.map_runs = Gauge("mirror_offset_map_runs", "Offset-map runs kept after the last snapshot round",
                              ("flow",), registry=r)
        self.map_pruned = Counter("mirror_offset_map_pruned_runs", "Offset-map runs pruned below the source "
                                  "log starts", ("flow",), registry=r)
        self.errors = Counter("mirror_errors", "Errors by kind", ("flow", "kind"), registry=r)
        self.reachable = Gauge("mirror_cluster_reachable", "1 when the cluster answers", ("cluster",), registry=r)
        self.heartbeat_age = Gauge("mirror_heartbeat_age_seconds",
                                   "Age of the newest heartbeat replicated by the flow", ("flow",), registry=r)
        self.loop_held = Gauge("mirror_loop_held_seconds",
                               "Seconds since the flow's copy loop last published (0 while it publishes; "
                               "waiting on the target, restarting or starting up otherwise)", ("flow",), registry=r)
        self.parked = Gauge("mirror_parked_records",
                            "Records read and waiting in the mirror until the target producer can send them "
                            "(replication.one.batch.per.partition)", ("flow",), registry=r)
        self.in_flight_bytes = Gauge("mirror_in_flight_bytes",
                                     "Batches data path: bytes of batches handed to the target and not yet "
                                     "acknowledged, with 1 KiB of bookkeeping each (replication.max.in.flight.bytes)",
                                     ("flow",), registry=r)
        self.topics = Gauge("mirror_topics_replicated", "Source topics replicated by the flow", ("flow",),
                            registry=r)
        self.assigned = Gauge("mirror_partitions_assigned", "Source partitions assigned to this instance",
                              ("flow",), registry=r)
        self.info = Gauge("mirror_info", "mirror_core build information", ("version",), registry=r)
        self.info.labels(__version__).set(1)
        #: (metric, flow, topic, partition) -> the labelled series
        self._labelled: dict[tuple[Counter | Gauge, str, str, int], Counter | Gauge] = {}

    def of_partition(self, metric: PartitionMetric, flow: str, topic: str, partition: int) -> PartitionMetric:
        """``metric``'s series for the partition, labelled once (made on first use, as ``labels()`` makes it):
        ``labels()`` costs more than the update it leads to, and at thousands of partitions every acknowledged
        batch, of few records, updates three series."""
        key = (metric, flow, topic, partition)
        series = self._labelled.get(key)
        if series is None:
            series = self._labelled[key] = metric.labels(flow, topic, str(partition))
        return cast(PartitionMetric, series)

    def forget_latency(self, flow: str, topic: str, partition: int) -> None:
        """The partition's last latency is no longer this process's to report (another owns the partition): its
        series removed, and made again should the partition come back."""
        self._labelled.pop((self.last_latency, flow, topic, partition), None)
        with contextlib.suppress(KeyError):
            self.last_latency.remove(flow, topic, str(partition))
