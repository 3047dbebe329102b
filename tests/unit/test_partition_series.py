"""A partition's metric series are labelled once and made only when first updated (Metrics.of_partition): an
unknown lag or a latency never measured is not exported as 0."""

from __future__ import annotations

from prometheus_client import generate_latest

from mirror_core.metrics import Metrics


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
