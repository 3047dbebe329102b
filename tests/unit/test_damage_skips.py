"""An operator's skip of a damaged batch on the records path, where records read before the damage may still wait
to be sent (parked: produce.py): the skip is never acknowledged ahead of them."""

from __future__ import annotations

import threading
from typing import Any, cast
from unittest.mock import MagicMock

import pytest
from confluent_kafka import TopicPartition

from mirror_core.clients import ClusterHealth
from mirror_core.metrics import Metrics
from mirror_core.replication.acks import Acks
from mirror_core.replication.assignment import Assignment
from mirror_core.replication.batch import PartitionState
from mirror_core.replication.damage import SKIP, PartitionAction


class Consumer:
    """What Acks asks of the source consumer: seeks, pauses and resumes, recorded."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int | None]] = []

    def seek(self, tp: TopicPartition) -> None:
        self.calls.append(("seek", tp.offset))

    def pause(self, tps: list[TopicPartition]) -> None:
        self.calls.append(("pause", None))

    def resume(self, tps: list[TopicPartition]) -> None:
        self.calls.append(("resume", None))


def test_a_skip_met_while_records_before_the_damage_wait_is_applied_again_once_they_are_read_again() -> None:
    consumer = Consumer()
    acks = Acks("dc1->dc2", cast(Any, consumer), Metrics(), lambda: None)
    operator = acks.operator
    st = PartitionState("t", 0, "dc1.t", 1000, False)
    states = {("t", 0): st}
    acks.damaged(st, "dc1", "record batch at offset 1020 is damaged", 1020, None)
    assert not st.copying
    operator.offer([PartitionAction(1, "t", 0, SKIP, 1020, 1029, "alice", "bit rot")])
    operator.apply(states, acks)  # acknowledged up to 1000: armed, read again from there
    assert st.copying and not operator.outcomes() and consumer.calls[-2:] == [("seek", 1000), ("resume", None)]
    st.parked.extend(["records 1010-1019"])  # read, waiting for the producer
    acks.damaged(st, "dc1", "record batch at offset 1020 is damaged", 1020, None)
    assert not st.copying and not st.parked and not st.pending  # paused: nothing passed over ahead of them
    assert not operator.outcomes() and operator.pending
    assert acks.metrics.skipped.labels("dc1->dc2", "t", "0")._value.get() == 0
    st.acked = 1020  # (what was in flight before the damage landed)
    operator.apply(states, acks)  # the skip applied again: at the acknowledged position now, taken at once
    (taken,) = operator.outcomes()
    assert taken.ok and "skipped offsets 1020-1029 (10 offsets" in taken.line
    assert st.copying and st.next == 1030 and st.pending[-1].skipped and consumer.calls[-1] == ("resume", None)
    assert ("seek", 1030) in consumer.calls[-3:]
    assert acks.metrics.skipped.labels("dc1->dc2", "t", "0")._value.get() == 10


def test_a_recreated_topic_forgets_its_skips_and_damage_and_refuses_the_skips_not_taken() -> None:
    consumer = Consumer()
    acks = Acks("dc1->dc2", cast(Any, consumer), Metrics(), lambda: None)
    operator = acks.operator
    taken, armed = PartitionState("t", 0, "dc1.t", 1020, False), PartitionState("t", 1, "dc1.t", 1000, False)
    other = PartitionState("u", 0, "dc1.u", 1000, False)
    states = {("t", 0): taken, ("t", 1): armed, ("u", 0): other}
    for st in states.values():
        acks.damaged(st, "dc1", "record batch at offset 1020 is damaged", 1020, 1029)
    operator.offer([PartitionAction(i, st.topic, st.partition, SKIP, 1020, 1029, "alice", "bit rot")
                    for i, st in enumerate(states.values(), 1)])
    operator.apply(states, acks)  # t[0] at 1020: taken at once; t[1] and u[0] at 1000: armed
    assert [o.ok for o in operator.outcomes()] == [True]
    taken.next = 1000  # (read again from before the skip: the same damage would be passed over again)
    assert operator.damaged(taken, 1020, 1029) is not None  # precondition: the taken skip covers it
    operator.forget("t")
    (refused,) = operator.outcomes()
    assert not refused.ok and refused.id == 2 and "t[1] was recreated" in refused.line
    # The recreated topic's own damage at the same offsets is another batch: paused, not passed over.
    assert operator.damaged(taken, 1020, 1029) is None and operator.damaged(armed, 1020, 1029) is None
    # Another topic's armed skip still holds; so does another partition's when one partition alone is forgotten
    # (found recreated at its assignment: each partition's stored topic id is its own).
    operator.forget("u", 1)
    assert not operator.outcomes()
    skip = operator.damaged(other, 1020, 1029)
    assert skip is not None and (skip.first, skip.end, skip.again) == (1020, 1030, False)


def test_a_partition_paused_at_damage_of_a_recreated_topic_copies_the_new_topic_from_its_start(
        monkeypatch: pytest.MonkeyPatch) -> None:
    consumer = Consumer()
    acks = Acks("dc1->dc2", cast(Any, consumer), Metrics(), lambda: None)
    flow = MagicMock()
    flow.name = "dc1->dc2"
    a = Assignment(flow, cast(Any, consumer), MagicMock(), MagicMock(), acks, MagicMock(), Metrics(),
                   ClusterHealth("dc1"), ClusterHealth("dc2"), threading.Event())
    skipped, stuck, held, other = (PartitionState("t", p, "dc1.t", 500, False) for p in range(4))
    a.states.update({("t", p): st for p, st in enumerate((skipped, stuck, held, other))})
    skipped.acked = 1000
    acks.damaged(skipped, "dc1", "record batch at offset 1020 is damaged", 1020, 1029)
    acks.operator.offer([PartitionAction(1, "t", 0, SKIP, 1020, 1029, "alice", "bit rot")])
    acks.operator.apply(a.states, acks)  # armed: read again from 1000
    acks.damaged(skipped, "dc1", "record batch at offset 1020 is damaged", 1020, 1029)  # (taken: goes on)
    for st in (stuck, held, other):
        acks.damaged(st, "dc1", "record batch at offset 700 is damaged", 700, 709)
    # t[2]: an operator's pause of the topic covers it too; t[3]: resumed by an operator since, then paused for
    # another reason (its noted damage is a leftover)
    a.held = lambda st: st is held
    acks.unpause(other, 700)
    acks.pause(other, "an operator paused topic t")
    assert skipped.copying and not any(st.copying for st in (stuck, held, other))  # preconditions
    monkeypatch.setattr("mirror_core.replication.assignment.log_starts_batch",
                        lambda *_: {("t", p): 0 for p in range(4)})
    before = len(consumer.calls)
    a._on_recreated("t", "old-id", "new-id")
    assert stuck.copying and stuck.paused_reason is None and stuck.committed is None
    assert consumer.calls[before:].count(("resume", None)) == 1  # stuck's: the others stay paused
    assert not held.copying and not other.copying and other.paused_reason == "an operator paused topic t"
    # A damaged batch of the new topic at the taken skip's offsets is another batch: reported, paused.
    assert acks.operator.damaged(skipped, 1020, 1029) is None
