"""Every Prometheus metric mirror_core exports, declared once, labelled by flow/topic/partition."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from mirror_core import __version__

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)


class Metrics:
    """One registry per service instance (tests may run several in one process)."""

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        part = ("flow", "topic", "partition")
        self.records = Counter("mirror_records_replicated", "Records acknowledged by the target", part, registry=r)
        self.bytes = Counter("mirror_bytes_replicated", "Key+value bytes acknowledged by the target", part,
                             registry=r)
        self.latency = Histogram(
            "mirror_replication_latency_seconds",
            "Target acknowledgement time minus source record timestamp (last record of each produce batch)",
            ("flow",), buckets=LATENCY_BUCKETS, registry=r)
        self.lag = Gauge("mirror_partition_lag_records", "Source end offset minus replicated position", part,
                         registry=r)
        self.position = Gauge("mirror_partition_position", "Next source offset to replicate (committed)", part,
                              registry=r)
        self.paused = Gauge("mirror_partition_paused", "1 while a partition is paused by an error", part,
                            registry=r)
        self.errors = Counter("mirror_errors", "Errors by kind", ("flow", "kind"), registry=r)
        self.reachable = Gauge("mirror_cluster_reachable", "1 when the cluster answers", ("cluster",), registry=r)
        self.heartbeat_age = Gauge("mirror_heartbeat_age_seconds",
                                   "Age of the newest heartbeat replicated by the flow", ("flow",), registry=r)
        self.topics = Gauge("mirror_topics_replicated", "Source topics replicated by the flow", ("flow",),
                            registry=r)
        self.assigned = Gauge("mirror_partitions_assigned", "Source partitions assigned to this instance",
                              ("flow",), registry=r)
        self.info = Gauge("mirror_info", "mirror_core build information", ("version",), registry=r)
        self.info.labels(__version__).set(1)
