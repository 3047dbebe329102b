from __future__ import annotations

from collections import Counter

from mirror_core.replication.producer_pool import producer_for


def test_one_producer_carries_everything() -> None:
    assert {producer_for(["p"], "t", k) for k in range(100)} == {"p"}


def test_a_topics_partitions_spread_evenly_and_each_keeps_its_producer() -> None:
    pool = ["a", "b", "c", "d"]
    spread = Counter(producer_for(pool, "orders", k) for k in range(8))
    assert spread == Counter({"a": 2, "b": 2, "c": 2, "d": 2})
    assert all(producer_for(pool, "orders", k) == producer_for(pool, "orders", k) for k in range(8))
