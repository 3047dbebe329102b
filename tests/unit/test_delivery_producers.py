"""At-least-once delivery's producers: with one batch per partition the data producers may build batches of 8 MiB,
more than the single-partition internal topics take, so progress and offset-map records get a producer of their
own with the usual limits; it is polled, flushed and purged with the others. Pure logic: fake producers."""

from __future__ import annotations

from typing import Any

from mirror_core.replication.delivery import AtLeastOnce


class FakeProducer:
    def __init__(self, queued: int = 0) -> None:
        self.queued = queued
        self.polled: list[float] = []
        self.flushed: list[float] = []

    def __len__(self) -> int:
        return self.queued

    def poll(self, timeout: float) -> int:
        self.polled.append(timeout)
        return 0

    def flush(self, timeout: float) -> int:
        self.flushed.append(timeout)
        self.queued = 0
        return 0

    def purge(self, in_queue: bool, in_flight: bool, blocking: bool = True) -> None:
        self.queued = 0
        self.purged = True


class Committer:
    def __init__(self) -> None:
        self.through: list[Any] = []

    def commit(self, producer: Any, states: list[Any]) -> None:
        self.through.append(producer)


class Assignment:
    states: dict[str, Any] = {}


def delivery(internal: FakeProducer | None) -> tuple[AtLeastOnce, list[FakeProducer], Committer]:
    data = [FakeProducer(3), FakeProducer(0)]
    committer = Committer()
    d = AtLeastOnce(data, Assignment(), None, committer, None, True, internal)  # type: ignore[arg-type]
    return d, data, committer


def test_progress_goes_through_its_own_producer_which_is_polled_flushed_and_purged_with_the_others() -> None:
    idle = FakeProducer(0)  # nothing queued: an empty confluent-kafka Producer is falsy (it has __len__)
    d, data, committer = delivery(idle)
    d.commit()
    assert committer.through == [idle] and d.producers == data
    internal = FakeProducer(2)
    d, data, committer = delivery(internal)
    assert d.in_flight() == 5
    d.poll_producers(0.1)
    assert internal.polled and all(p.polled for p in data)
    assert d.flush(1.0) == 0 and internal.flushed
    internal.queued = data[0].queued = 4
    d.close(graceful=False)  # an error restart drops what is queued, progress records included
    assert getattr(internal, "purged", False) and getattr(data[0], "purged", False)


def test_without_one_the_first_data_producer_carries_progress() -> None:
    d, data, committer = delivery(None)
    d.commit()
    assert committer.through == [data[0]] and d.in_flight() == 3
