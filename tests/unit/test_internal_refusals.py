"""Records of the mirror's own topics that the target refuses are said and sent again, not only counted."""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError

from mirror_core.offsets.checkpoints import CheckpointEmitter
from mirror_core.replication.batch import PartitionState
from mirror_core.replication.commit import OffsetMapWriter, ProgressCommitter
from mirror_core.stores.progress import ProgressStore

TOO_LARGE = KafkaError(KafkaError.MSG_SIZE_TOO_LARGE, "ProduceRequest with 37 message(s) failed")
COUNTED: list[tuple[str, ...]] = []
METRICS: Any = SimpleNamespace(errors=SimpleNamespace(labels=lambda *a: SimpleNamespace(inc=lambda: COUNTED.append(a))))


class Recording:
    """A producer that keeps each record's delivery callback, to be answered by the test."""

    def __init__(self) -> None:
        self.callbacks: list[Any] = []

    def produce(self, topic: str, **kwargs: Any) -> None:
        self.callbacks.append(kwargs.get("on_delivery"))

    def poll(self, timeout: float) -> int:
        return 0


def test_refused_progress_is_said_and_written_again(caplog: pytest.LogCaptureFixture) -> None:
    progress = ProgressStore("mirror-core.progress.dc1.internal", None, "i")  # type: ignore[arg-type]
    committer = ProgressCommitter(progress, OffsetMapWriter("mirror-core.offset-syncs.dc1.internal", METRICS, "f"),
                                  METRICS, "f", lambda topic: None)
    st = PartitionState("orders", 0, "dc1.orders", 5, False)
    st.acked = 10
    producer = Recording()
    committer.commit(producer, [st])  # type: ignore[arg-type]
    assert st.committed == 10 and len(producer.callbacks) == 1
    with caplog.at_level("WARNING"):
        producer.callbacks[0](TOO_LARGE, None)
    assert st.committed is None, "written again at the next commit"
    assert "flow f: progress not written to mirror-core.progress.dc1.internal (" in caplog.text
    assert ("f", "progress_commit") in COUNTED


def test_a_refused_checkpoint_is_forgotten_unless_a_newer_one_was_published(caplog: pytest.LogCaptureFixture) -> None:
    emitter = CheckpointEmitter(None, SimpleNamespace(name="f"), threading.Event(), None)
    old, new = ("g", "dc1.orders", 0), ("g", "dc1.orders", 1)
    emitter._published = {old: (10, 9), new: (20, 19)}
    emitter._delivered(old, (10, 9), TOO_LARGE, None)
    emitter._delivered(new, (15, 14), TOO_LARGE, None)  # an older value refused after (20, 19) was queued
    emitter._delivered(new, (20, 19), None, None)
    assert emitter._published == {new: (20, 19)}, "the refused one is published again; the newer one stays"
    with caplog.at_level("WARNING"):
        emitter._say_refused("dc1.checkpoints.internal", emitter._refused, 3)
        emitter._say_refused("dc1.checkpoints.internal", [TOO_LARGE], 0)  # the same error again: throttled
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0].startswith("flow f: 2 checkpoints not written to dc1.checkpoints.internal (")
    assert "3 checkpoints not acknowledged" in lines[1] and len(lines) == 2
