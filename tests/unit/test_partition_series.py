"""A partition's metric series are labelled once and made only when first updated (Metrics.of_partition): an
unknown lag or a latency never measured is not exported as 0."""

from __future__ import annotations

from typing import Any, cast

from prometheus_client import generate_latest

from mirror_core.metrics import Metrics
from mirror_core.replication.acks import Acks
from mirror_core.replication.batch import Batch, PartitionState
from mirror_core.replication.reporting import Reporter


def _exposed(m: Metrics) -> str:
    return generate_latest(m.registry).decode()


def test_a_partitions_series_is_labelled_once_and_only_the_updated_ones_are_exported() -> None:
    m = Metrics()
    records = m.of_partition(m.records, "f", "t", 3)
    records.inc(5)
    assert m.of_partition(m.records, "f", "t", 3) is records
    text = _exposed(m)
    assert 'mirror_records_replicated_total{flow="f",partition="3",topic="t"} 5.0' in text
    assert "mirror_partition_lag_records{" not in text
    assert "mirror_partition_replication_latency_seconds{" not in text


def test_a_forgotten_latency_leaves_the_exposition_and_comes_back_when_set_again() -> None:
    m = Metrics()
    m.of_partition(m.last_latency, "f", "t", 0).set(1.5)
    m.forget_latency("f", "t", 0)
    assert "mirror_partition_replication_latency_seconds{" not in _exposed(m)
    m.of_partition(m.last_latency, "f", "t", 0).set(2.0)
    assert 'mirror_partition_replication_latency_seconds{flow="f",partition="0",topic="t"} 2.0' in _exposed(m)


def _landed(st: PartitionState, first: int, count: int, acked_at: float) -> Batch:
    """A batch of ``count`` records at ``first``, landed at the same target offsets, acknowledged at ``acked_at``
    500 ms after its newest record."""
    b = Batch(st.gen, first)
    b.next, b.count, b.size, b.pending = first + count, count, 100 * count, 0
    b.t_first, b.t_last, b.acked_at, b.ts_last = first, first + count - 1, acked_at, int(acked_at * 1000) - 500
    st.pending.append(b)
    return b


def test_what_a_partition_acknowledged_reaches_its_counters_once_when_brought_up_to_date() -> None:
    """Acks.collect counts on the partition state; the counters and the last latency follow when the reporter
    brings them up to date (every second, every publish, and when the partition is let go), each record once."""
    m = Metrics()
    acks = Acks("f", cast(Any, None), m, lambda: None)
    reporter = Reporter("f", m, 1.0)
    st = PartitionState("t", 3, "dc1.t", 0, False)
    _landed(st, 0, 5, 1000.0)
    acks.active.add(st)
    acks.collect()
    assert st.acked == 5 and "mirror_records_replicated_total{" not in _exposed(m)  # not yet on the counter
    reporter.count_landed(st)
    text = _exposed(m)
    assert 'mirror_records_replicated_total{flow="f",partition="3",topic="t"} 5.0' in text
    assert 'mirror_bytes_replicated_total{flow="f",partition="3",topic="t"} 500.0' in text
    assert 'mirror_partition_replication_latency_seconds{flow="f",partition="3",topic="t"} 0.5' in text
    reporter.count_landed(st)  # nothing new: nothing added
    _landed(st, 5, 3, 1001.0)
    acks.active.add(st)
    acks.collect()
    reporter.forget_partition(st)  # let go: what it acknowledged since is counted first
    reporter.forget_partition(st)
    assert 'mirror_records_replicated_total{flow="f",partition="3",topic="t"} 8.0' in _exposed(m)
    assert 'mirror_replication_latency_seconds_count{flow="f",topic="t"} 8.0' in _exposed(m)
