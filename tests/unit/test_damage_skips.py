"""An operator's skip of a damaged batch on the records path, where records read before the damage may still wait
to be sent (parked: produce.py): the skip is never acknowledged ahead of them."""

from __future__ import annotations

from typing import Any, cast

from confluent_kafka import TopicPartition

from mirror_core.metrics import Metrics
from mirror_core.replication.acks import Acks
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
