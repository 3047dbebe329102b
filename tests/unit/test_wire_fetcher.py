"""The batch fetcher's choice of partitions (mirror_core/wire/fetcher.py), without a broker: a partition whose
result is held is not asked again, and the order partitions are asked in rotates."""

from __future__ import annotations

from mirror_core.wire.fetcher import BatchFetcher
from mirror_core.wire.metadata import Brokers


def test_held_partitions_wait_and_the_others_are_asked_in_a_rotating_order() -> None:
    fetcher = BatchFetcher(Brokers("127.0.0.1:1", {}, "dc1"))
    try:
        tps = [("t", p) for p in range(4)]
        with fetcher._cond:
            fetcher._positions.update(dict.fromkeys(tps, 0))
            fetcher._leaders.leaders.update(dict.fromkeys(tps, 1))
            fetcher._leaders.leaders["t", 3] = 2  # another broker's
            first = list(fetcher._mine(1))
            assert sorted(first) == tps[:3] and fetcher._mine(1) == {}  # all held now
            fetcher._held.clear()
            second = list(fetcher._mine(1))
        assert sorted(second) == tps[:3] and second[0] != first[0]
        fetcher.resume(("t", 0), 7)
        with fetcher._cond:
            assert fetcher._mine(1) == {("t", 0): 7}  # resumed: asked again, from where the caller said
    finally:
        fetcher.close()
