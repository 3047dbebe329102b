"""How exactly-once replays a partition after a transient failure (pure logic of exactly_once.SlotManager)."""

from __future__ import annotations

from types import SimpleNamespace

from mirror_core.replication.batch import PartitionState
from mirror_core.replication.exactly_once import SlotManager


def test_a_transient_failure_replays_in_batches_once_then_carefully_if_it_fails_again_at_the_same_place() -> None:
    """Careful mode (a transaction per record) for a whole read was the price of every purged batch; but a record
    refused in the middle of a batch may surface only as such a failure, so a second one there goes careful."""
    slots = SimpleNamespace(_transient_at={})
    st, other = PartitionState("t", 0, "dc1.t", 0, False), PartitionState("t", 1, "dc1.t", 0, False)
    assert not SlotManager._failed_here_before(slots, st, 100)  # type: ignore[arg-type]
    assert not SlotManager._failed_here_before(slots, other, 100), "another partition"  # type: ignore[arg-type]
    assert SlotManager._failed_here_before(slots, st, 100), "again before moving past it"  # type: ignore[arg-type]
    assert not SlotManager._failed_here_before(slots, st, 250), "moved on since"  # type: ignore[arg-type]
