"""Live lag for the status page: each flow measured from its clusters in a background thread, a page
load waiting at most one deadline, and a short in-memory history per flow (:class:`LagBoard`)."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

LAG_DEADLINE_S = 5.0  # a page load waits at most this long for the live lag of all flows together
LAG_TTL_S = 8.0  # a measured lag is shown again, without asking the clusters, for this long
LAG_CALL_TIMEOUT_S = 3.0  # each cluster request of one measurement
STALE_WAIT_S = 1.0  # with an earlier reading of a flow, a page load waits at most this long for a newer one
HISTORY_SAMPLES = 360  # lag samples kept per flow (one per measurement: ~1 h at a 10 s refresh)


def epoch_iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="seconds")


@dataclass(frozen=True)
class PartitionLag:
    topic: str
    partition: int
    lag: int | None
    position: int | None  # next source offset to replicate
    source_end: int | None


@dataclass(frozen=True)
class LagReading:
    """One measurement of a flow from its clusters; ``error`` says why the lag is unknown."""

    at: float  # epoch seconds
    total: int | None
    partitions: tuple[PartitionLag, ...] = ()
    error: str | None = None
    unreachable_cluster: str | None = None

    @property
    def replicated(self) -> int | None:
        """Sum of the replicated positions (for throughput between two readings)."""
        pos = [p.position for p in self.partitions]
        return None if not pos or any(p is None for p in pos) else sum(p for p in pos if p is not None)


@dataclass(frozen=True)
class LagSample:
    at: str  # ISO 8601, UTC
    lag: int
    records_per_s: float | None  # replicated since the previous sample


def _measure_lag(flow: str) -> LagReading:
    """Lag of ``flow`` from the clusters, or why it is not known."""
    now = time.time()
    try:
        from mirror_core.airflow_support import config_path, load_mirror_config
        from mirror_core.status import flow_status

        config = load_mirror_config()
        if flow not in {f.name for f in config.all_flows}:
            return LagReading(now, None, error=f"not in the config file {config_path()}: lag cannot be measured")
        st = flow_status(config, config.flow(flow), timeout=LAG_CALL_TIMEOUT_S)
    except Exception as exc:
        return LagReading(now, None, error=str(exc))
    parts = tuple(PartitionLag(p.topic, p.partition, p.lag, p.position, p.source_end) for p in st.partitions)
    if not st.reachable:
        return LagReading(now, None, parts, st.error, st.unreachable_cluster)
    return LagReading(now, st.total_lag, parts)


class LagBoard:
    """Live lag of the flows, measured in background threads, and the recent history of each.

    Invariant: a page load never waits longer than its deadline, whatever the clusters do. Every flow
    is measured in parallel; what is not known when the deadline passes is shown as unavailable with
    the reason, and the measurement goes on in the background (at most one per flow at a time) so a
    later page load shows its result. A measurement of a down cluster takes up to one request timeout
    per partition, which is why it never runs on the request's own time.

    History: each finished measurement with a known lag is a sample, kept in memory (a ring per flow).
    Page loads drive the sampling (at most one per ``ttl_s``), so the chart covers what the operators
    looked at while the page was open: the "is it going down?" of a drain or a failover. The long
    history is Prometheus's (``mirror_partition_lag_records``, the Grafana dashboard); writing samples
    into the state store would make every page view a database write and the mirror's store a time
    series. Each API server process has its own ring; a restart starts it again.
    """

    def __init__(self, measure: Callable[[str], LagReading] = _measure_lag, samples: int = HISTORY_SAMPLES) -> None:
        self._measure = measure
        self._lock = threading.Lock()
        self._known: dict[tuple[str, str], LagReading] = {}  # (config, flow) -> newest reading
        self._running: dict[tuple[str, str], threading.Event] = {}
        self._history: dict[tuple[str, str], deque[tuple[LagReading, float | None]]] = {}
        self._samples = samples

    def lags(self, flows: list[str], deadline_s: float = LAG_DEADLINE_S,
             ttl_s: float | None = None) -> dict[str, LagReading]:
        ttl_s = LAG_TTL_S if ttl_s is None else ttl_s
        config = self._config()
        end = time.monotonic() + deadline_s
        out: dict[str, LagReading] = {}
        waiting: dict[str, threading.Event] = {}
        with self._lock:
            for flow in flows:
                known = self._known.get((config, flow))
                if known and time.time() - known.at < ttl_s:
                    out[flow] = known
                    continue
                done = self._running.get((config, flow))
                if done is None:
                    done = self._running[(config, flow)] = threading.Event()
                    threading.Thread(target=self._run, args=(config, flow, done), daemon=True,
                                     name=f"mirror-status-lag {flow}").start()
                waiting[flow] = done
        for flow, done in waiting.items():
            with self._lock:
                known = self._known.get((config, flow))
            # With an earlier reading, wait only briefly: the page shows that one (its time says how
            # old) rather than wait out the cluster timeouts of a flow that was down already.
            done.wait(max(0.0, min(end, time.monotonic() + STALE_WAIT_S if known else end) - time.monotonic()))
            with self._lock:
                known = self._known.get((config, flow))
            if known is not None:
                out[flow] = known
                continue
            out[flow] = LagReading(time.time(), None, (), f"the clusters of {flow} did not answer within "
                                   f"{deadline_s:g}s (one is down or slow); still measuring")
        return out

    def history(self, flow: str) -> list[LagSample]:
        with self._lock:
            ring = list(self._history.get((self._config(), flow), ()))
        return [LagSample(epoch_iso(r.at), r.total, rate) for r, rate in ring if r.total is not None]

    @staticmethod
    def _config() -> str:
        from mirror_core.airflow_support import config_path

        return str(config_path())

    def _run(self, config: str, flow: str, done: threading.Event) -> None:
        reading = LagReading(time.time(), None, error="measurement failed")
        try:
            reading = self._measure(flow)
        finally:
            with self._lock:
                self._known[(config, flow)] = reading
                self._running.pop((config, flow), None)
                if reading.total is not None:
                    ring = self._history.setdefault((config, flow), deque(maxlen=self._samples))
                    rate = _rate(ring[-1][0], reading) if ring else None
                    ring.append((reading, rate))
            done.set()


def _rate(before: LagReading, now: LagReading) -> float | None:
    """Records replicated per second between two readings of the same partitions."""
    a, b, dt = before.replicated, now.replicated, now.at - before.at
    if a is None or b is None or dt <= 0 or len(before.partitions) != len(now.partitions):
        return None
    return max(0.0, (b - a) / dt)


LAGS = LagBoard()
