"""The latency histogram counts every record of a batch in the bucket of its own latency."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from mirror_core.metrics import LATENCY_BUCKETS, RecordLatency


def _exposed(h: RecordLatency) -> dict[str, float]:
    r = CollectorRegistry()
    r.register(h)
    out = {}
    for line in generate_latest(r).decode().splitlines():
        if line.startswith("lat_"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def test_every_record_lands_in_its_own_bucket() -> None:
    h = RecordLatency("lat", "test", LATENCY_BUCKETS)
    acked = 1_000_000.0
    # One batch: 3 records 0.003 s old, 2 records 3 s old, 1 record 8 s old, 1 without timestamp,
    # unsorted (the last-record-only histogram would have seen one 0.003 s value).
    stamps = [int(acked * 1000) - d for d in (3000, 3, 8000, 3, 3000, 3)] + [-1]
    h.observe_batch("a->b", "t", acked, stamps)
    got = _exposed(h)
    assert got['lat_bucket{flow="a->b",le="0.005",topic="t"}'] == 3
    assert got['lat_bucket{flow="a->b",le="2.5",topic="t"}'] == 3
    assert got['lat_bucket{flow="a->b",le="5.0",topic="t"}'] == 5
    assert got['lat_bucket{flow="a->b",le="10.0",topic="t"}'] == 6
    assert got['lat_bucket{flow="a->b",le="+Inf",topic="t"}'] == 6
    assert got['lat_count{flow="a->b",topic="t"}'] == 6
    assert abs(got['lat_sum{flow="a->b",topic="t"}'] - (0.009 + 6.0 + 8.0)) < 1e-6


def test_batches_accumulate_per_flow_and_skew_counts_as_zero() -> None:
    h = RecordLatency("lat", "test", (0.1, 1.0))
    h.observe_batch("f", "t", 100.0, [99_500, 99_950])  # 0.5 s and 0.05 s
    h.observe_batch("f", "t", 200.0, [200_500])  # 0.5 s in the future: skew
    h.observe_batch("g", "t", 100.0, [])
    got = _exposed(h)
    assert got['lat_bucket{flow="f",le="0.1",topic="t"}'] == 2
    assert got['lat_bucket{flow="f",le="1.0",topic="t"}'] == 3
    assert got['lat_count{flow="f",topic="t"}'] == 3
    assert abs(got['lat_sum{flow="f",topic="t"}'] - 0.55) < 1e-9
    assert not any('flow="g"' in k for k in got)


def test_topics_beyond_the_cap_share_the_other_series_per_flow() -> None:
    """Bounded cardinality: a flow's first max_topics topics get a series each, later ones share
    topic="other"; the cap counts per flow, and a topic keeps its own series once it has one."""
    h = RecordLatency("lat", "test", (1.0,), max_topics=2)
    for topic in ("a", "b", "c", "d", "a"):
        h.observe_batch("f", topic, 100.0, [99_500])
    h.observe_batch("g", "c", 100.0, [99_500])
    got = _exposed(h)
    assert got['lat_count{flow="f",topic="a"}'] == 2
    assert got['lat_count{flow="f",topic="b"}'] == 1
    assert got['lat_count{flow="f",topic="other"}'] == 2  # c and d
    assert not any('topic="c"' in k and 'flow="f"' in k for k in got)
    assert got['lat_count{flow="g",topic="c"}'] == 1  # another flow's cap is its own


def test_a_batch_copied_whole_counts_each_of_its_records_at_its_newest_timestamp() -> None:
    """The batches data path does not read records: a batch's records count at its max timestamp, all of them."""
    h = RecordLatency("lat", "test", (0.1, 1.0))
    h.observe_run("f", "t", 100.0, 99_500, 70)  # 70 records, 0.5 s
    h.observe_run("f", "t", 100.0, 100_500, 2)  # ahead of the acknowledgement (skew): 0 s
    h.observe_run("f", "t", 100.0, -1, 5)  # no timestamp: not counted
    got = _exposed(h)
    assert got['lat_bucket{flow="f",le="0.1",topic="t"}'] == 2
    assert got['lat_bucket{flow="f",le="1.0",topic="t"}'] == 72
    assert got['lat_count{flow="f",topic="t"}'] == 72
    assert abs(got['lat_sum{flow="f",topic="t"}'] - 35.0) < 1e-9
