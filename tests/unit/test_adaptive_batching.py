"""Adaptive batching in the replicator's read: no fixed wait when records are there, a bounded wait for
the first record when there are none, and the rest of what arrived with it in the same pass."""

from __future__ import annotations

from typing import Any

from confluent_kafka import Message

from mirror_core.replication.replicator import IDLE_WAIT_S, FlowReplicator


class FakeConsumer:
    """Hands out queued records; ``arriving`` are the records a blocking poll would see arrive."""

    def __init__(self, queued: int, arriving: int) -> None:
        self.queued = [Message(topic="t", partition=0, offset=i, value=b"v") for i in range(queued)]
        self.arriving = [Message(topic="t", partition=0, offset=100 + i, value=b"v") for i in range(arriving)]
        self.calls: list[tuple[Any, ...]] = []

    def consume(self, n: int, timeout: float) -> list[Message]:
        self.calls.append(("consume", n, timeout))
        out, self.queued = self.queued[:n], self.queued[n:]
        return out

    def poll(self, timeout: float) -> Message | None:
        self.calls.append(("poll", timeout))
        if not self.arriving:
            return None
        first, self.queued, self.arriving = self.arriving[0], self.arriving[1:], []
        return first


def test_queued_records_are_taken_without_waiting() -> None:
    c = FakeConsumer(queued=5, arriving=0)
    msgs = FlowReplicator._consume(c, 1000)  # type: ignore[arg-type]
    assert [m.offset() for m in msgs] == [0, 1, 2, 3, 4]
    assert c.calls == [("consume", 1000, 0)], "a consume with a timeout waits it out at light load"


def test_backlog_fills_a_batch_at_once() -> None:
    c = FakeConsumer(queued=2500, arriving=0)
    assert len(FlowReplicator._consume(c, 1000)) == 1000  # type: ignore[arg-type]
    assert c.calls == [("consume", 1000, 0)]


def test_idle_waits_for_the_first_record_then_drains_what_came_with_it() -> None:
    c = FakeConsumer(queued=0, arriving=4)
    msgs = FlowReplicator._consume(c, 1000)  # type: ignore[arg-type]
    assert [m.offset() for m in msgs] == [100, 101, 102, 103]
    assert c.calls == [("consume", 1000, 0), ("poll", IDLE_WAIT_S), ("consume", 999, 0)]
    assert IDLE_WAIT_S <= 0.05, "the idle wait bounds how late the loop serves commits and heartbeats"


def test_nothing_to_read_returns_empty_after_the_bounded_wait() -> None:
    c = FakeConsumer(queued=0, arriving=0)
    assert FlowReplicator._consume(c, 1000) == []  # type: ignore[arg-type]
    assert c.calls == [("consume", 1000, 0), ("poll", IDLE_WAIT_S)]
    c1 = FakeConsumer(queued=0, arriving=1)
    assert len(FlowReplicator._consume(c1, 1)) == 1  # type: ignore[arg-type]
    assert c1.calls == [("consume", 1, 0), ("poll", IDLE_WAIT_S)]  # batch of one: nothing more to drain
