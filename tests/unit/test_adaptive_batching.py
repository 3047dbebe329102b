"""Adaptive batching in the replicator's read: no fixed wait when records are there, a bounded wait for
the first record when there are none, and the rest of what arrived with it in the same pass."""

from __future__ import annotations

import itertools
from typing import Any

from confluent_kafka import Message

from mirror_core.replication.consuming import IDLE_WAIT_S, consume_ready
from mirror_core.replication.pacing import SendPacer


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
    msgs = consume_ready(c, 1000)  # type: ignore[arg-type]
    assert [m.offset() for m in msgs] == [0, 1, 2, 3, 4]
    assert c.calls == [("consume", 1000, 0)], "a consume with a timeout waits it out at light load"


def test_backlog_fills_a_batch_at_once() -> None:
    c = FakeConsumer(queued=2500, arriving=0)
    assert len(consume_ready(c, 1000)) == 1000  # type: ignore[arg-type]
    assert c.calls == [("consume", 1000, 0)]


def test_idle_waits_for_the_first_record_then_drains_what_came_with_it() -> None:
    c = FakeConsumer(queued=0, arriving=4)
    msgs = consume_ready(c, 1000)  # type: ignore[arg-type]
    assert [m.offset() for m in msgs] == [100, 101, 102, 103]
    assert c.calls == [("consume", 1000, 0), ("poll", IDLE_WAIT_S), ("consume", 999, 0)]
    assert IDLE_WAIT_S <= 0.05, "the idle wait bounds how late the loop serves commits and heartbeats"


def test_nothing_to_read_returns_empty_after_the_bounded_wait() -> None:
    c = FakeConsumer(queued=0, arriving=0)
    assert consume_ready(c, 1000) == []  # type: ignore[arg-type]
    assert c.calls == [("consume", 1000, 0), ("poll", IDLE_WAIT_S)]
    c1 = FakeConsumer(queued=0, arriving=1)
    assert len(consume_ready(c1, 1)) == 1  # type: ignore[arg-type]
    assert c1.calls == [("consume", 1, 0), ("poll", IDLE_WAIT_S)]  # batch of one: nothing more to drain


def test_a_partial_read_sends_at_once_and_an_empty_one_has_nothing_to_send() -> None:
    p = SendPacer(interval_s=1.0)
    assert p.after_read(0.0, 10, 1000) is True  # caught up: no linger, no transaction interval
    assert p.after_read(0.01, 0, 1000) is False


def test_a_lasting_backlog_is_sent_after_a_bound_that_doubles_up_to_the_interval() -> None:
    p = SendPacer(interval_s=1.0, first_bound_s=1 / 16)  # binary fractions: exact float arithmetic
    sent = [t for t in (i / 128 for i in range(400)) if p.after_read(t, 1000, 1000)]
    gaps = [b - a for a, b in itertools.pairwise(sent)]
    assert sent[0] == 1 / 16, "the first backlog send waits the short bound only"
    assert gaps == [1 / 8, 1 / 4, 1 / 2], "each bound doubles; at the interval the interval's commit takes over"
    assert p.after_read(3.0, 5, 1000) is True  # caught up again: the bound starts short again
    assert not p.after_read(3.0, 1000, 1000) and not p.after_read(3.05, 1000, 1000)
    assert p.after_read(3.0625, 1000, 1000)
