"""replication/controls.py: operators' pauses and bandwidth limits applied to a flow's partitions."""

from __future__ import annotations

from typing import Any

from confluent_kafka import TopicPartition

from mirror_core.metrics import Metrics
from mirror_core.replication.batch import PartitionMode, PartitionState
from mirror_core.replication.controls import LIMIT, PAUSE, TICK_S, RuntimeControls, TopicControl


class Reader:
    def __init__(self) -> None:
        self.calls: list[tuple[str, list[tuple[str, int]]]] = []

    def pause(self, tps: list[TopicPartition]) -> None:
        self.calls.append(("pause", [(tp.topic, tp.partition) for tp in tps]))

    def resume(self, tps: list[TopicPartition]) -> None:
        self.calls.append(("resume", [(tp.topic, tp.partition) for tp in tps]))


class FakeAcks:
    """Pauses and unpauses as acks.Acks does to a partition's state; the reading side is recorded."""

    def __init__(self) -> None:
        self.consumer: Any = Reader()
        self.unpaused: list[tuple[tuple[str, int], int]] = []

    def pause(self, st: PartitionState, reason: str, keep_in_flight: bool = False) -> None:
        assert keep_in_flight
        st.mode, st.paused_reason = PartitionMode.PAUSED, reason

    def unpause(self, st: PartitionState, to: int) -> None:
        st.mode, st.paused_reason = PartitionMode.COPYING, None
        self.unpaused.append(((st.topic, st.partition), to))


def states(*keys: tuple[str, int]) -> dict[tuple[str, int], PartitionState]:
    return {(t, p): PartitionState(t, p, f"dc1.{t}", 100 + p, False) for t, p in keys}


def control(kind: str, topic: str | None, partition: int | None = None, limit: int | None = None) -> TopicControl:
    return TopicControl(kind, topic, partition, limit, "alice", "2026-12-06 07:30 UTC", "backfill")


def test_a_topic_pause_holds_its_partitions_only_and_its_end_resumes_them_where_they_stopped() -> None:
    controls, acks = RuntimeControls("dc1->dc2", Metrics()), FakeAcks()
    owned = states(("t", 0), ("t", 1), ("u", 0))
    controls.set([control(PAUSE, "t")])
    assert controls.active
    controls.tick(0.0, owned, acks, {"t": 2, "u": 1})
    assert [k for k, st in owned.items() if not st.copying] == [("t", 0), ("t", 1)]
    reason = owned[("t", 0)].paused_reason or ""
    assert reason.startswith("paused by alice at 2026-12-06 07:30 UTC: backfill") and "control resume" in reason
    owned[("t", 1)].paused_reason = "record at offset 7 rejected by target"  # paused since for another reason
    controls.set([])
    controls.tick(0.1, owned, acks, {"t": 2, "u": 1})
    assert acks.unpaused == [(("t", 0), 100)]  # from where it stopped; the other keeps its own pause
    assert not owned[("t", 1)].copying
    controls.tick(1.0, owned, acks, {"t": 2, "u": 1})
    assert not controls.active


def test_a_partition_pause_applies_again_to_the_partition_assigned_again() -> None:
    controls, acks = RuntimeControls("dc1->dc2", Metrics()), FakeAcks()
    owned = states(("t", 0), ("t", 1))
    controls.set([control(PAUSE, "t", 1)])
    controls.tick(0.0, owned, acks, {"t": 2})
    assert owned[("t", 0)].copying and not owned[("t", 1)].copying
    owned.update(states(("t", 1)))  # revoked and assigned again: a new state, copying
    controls.tick(TICK_S, owned, acks, {"t": 2})
    assert not owned[("t", 1)].copying


def test_a_limit_is_shared_by_the_partitions_owned_and_a_bucket_in_debt_stops_reading_until_paid() -> None:
    metrics = Metrics()
    controls, acks = RuntimeControls("dc1->dc2", metrics), FakeAcks()
    owned = states(("t", 0), ("t", 1), ("u", 0))  # of t's 4 partitions and u's 2: half of each
    controls.set([control(LIMIT, "t", limit=2000), control(LIMIT, None, limit=6000)])
    controls.tick(0.0, owned, acks, {"t": 4, "u": 2})
    assert controls._buckets["t"].rate == 1000 and controls._buckets[None].rate == 3000  # (3 of 6 partitions)
    controls.read("t", 3000)  # the flow's 3000 B paid, t's 1000 owed
    controls.tick(0.1, owned, acks, {"t": 4, "u": 2})
    assert acks.consumer.calls == [("pause", [("t", 0), ("t", 1)])] and controls.gated_until == 0
    controls.tick(2.2, owned, acks, {"t": 4, "u": 2})  # 2 s at 1000 B/s: paid back
    assert acks.consumer.calls[-1] == ("resume", [("t", 0), ("t", 1)])
    throttled = metrics.throttled.labels("dc1->dc2", "t")._value.get()
    assert 2.0 <= throttled <= 2.2
    controls.read("u", 9000)  # the flow's bucket: 3000 ahead at most, now 6000 in debt
    controls.tick(2.3, owned, acks, {"t": 4, "u": 2})
    assert controls.gated_until > 2.3
    controls.tick(5.0, owned, acks, {"t": 4, "u": 2})
    assert controls.gated_until == 0 and metrics.throttled.labels("dc1->dc2", "")._value.get() > 0
