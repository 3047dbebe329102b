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
    h.observe_batch("a->b", acked, stamps)
    got = _exposed(h)
    assert got['lat_bucket{flow="a->b",le="0.005"}'] == 3
    assert got['lat_bucket{flow="a->b",le="2.5"}'] == 3
    assert got['lat_bucket{flow="a->b",le="5.0"}'] == 5
    assert got['lat_bucket{flow="a->b",le="10.0"}'] == 6
    assert got['lat_bucket{flow="a->b",le="+Inf"}'] == 6
    assert got['lat_count{flow="a->b"}'] == 6
    assert abs(got['lat_sum{flow="a->b"}'] - (0.009 + 6.0 + 8.0)) < 1e-6


def test_batches_accumulate_per_flow_and_skew_counts_as_zero() -> None:
    h = RecordLatency("lat", "test", (0.1, 1.0))
    h.observe_batch("f", 100.0, [99_500, 99_950])  # 0.5 s and 0.05 s
    h.observe_batch("f", 200.0, [200_500])  # 0.5 s in the future: skew
    h.observe_batch("g", 100.0, [])
    got = _exposed(h)
    assert got['lat_bucket{flow="f",le="0.1"}'] == 2
    assert got['lat_bucket{flow="f",le="1.0"}'] == 3
    assert got['lat_count{flow="f"}'] == 3
    assert abs(got['lat_sum{flow="f"}'] - 0.55) < 1e-9
    assert not any('flow="g"' in k for k in got)
