"""Delays between restarts and between probes of a cluster that does not answer (pure logic)."""

from __future__ import annotations

import pytest

from mirror_core.replication.retry import HEALTHY_RUN_S, MAX_PROBE_INTERVAL_S, Backoff
from mirror_core.throttling import ThrottledLine


def test_delays_double_up_to_the_cap() -> None:
    b = Backoff(cap=MAX_PROBE_INTERVAL_S)
    assert [b.next() for _ in range(6)] == [1.0, 2.0, 4.0, 5.0, 5.0, 5.0]


def test_a_restart_after_a_healthy_run_starts_from_the_first_delay() -> None:
    b = Backoff()
    assert [b.restart_delay(None) for _ in range(6)] == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0]
    # failures in a row (runs that never began, or ended at once) keep doubling
    assert b.restart_delay(HEALTHY_RUN_S / 2) == 30.0
    # an error an hour into a run is not a flap: the first delay again, then doubling
    assert b.restart_delay(3600.0) == 1.0
    assert b.restart_delay(0.5) == 2.0


def test_a_repeated_warning_is_logged_when_it_changes_and_then_once_a_minute() -> None:
    line = ThrottledLine(every_s=60.0)
    assert line.due("target down", now=0.0)
    assert not line.due("target down", now=5.0)
    assert line.due("authentication failed", now=10.0)
    assert not line.due("authentication failed", now=69.0)
    assert line.due("authentication failed", now=70.0)


def test_counters_in_librdkafkas_words_are_not_a_change() -> None:
    line = ThrottledLine(every_s=60.0)
    assert line.due("cluster dc2: cannot connect: Connection refused (after 0ms in state CONNECT, 1 identical "
                    "error(s))", now=0.0)
    assert not line.due("cluster dc2: cannot connect: Connection refused (after 2ms in state CONNECT, 577 identical "
                        "error(s))", now=35.0)


def test_another_cluster_or_address_is_a_new_text() -> None:
    line = ThrottledLine(every_s=60.0)
    assert line.due("cluster dc2: cannot connect: Connection refused", now=0.0)
    assert line.due("cluster dc1: cannot connect: Connection refused", now=10.0)
    assert line.due("cluster dc1: cannot connect: 127.0.0.1:39956/bootstrap: Connection refused", now=20.0)


def test_alternating_reasons_are_each_throttled() -> None:
    line = ThrottledLine(every_s=60.0)
    assert line.due("timed out", now=0.0)
    assert line.due("connection refused", now=5.0)
    assert not line.due("timed out", now=10.0)
    assert not line.due("connection refused", now=15.0)
    assert line.due("timed out", now=60.0)


def test_the_replicator_restarts_from_the_first_delay_after_a_healthy_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """FlowReplicator.run's wiring: runs that never copied double the delay; a run that copied a while
    starts from 1 s again (the delay is what it waits on its stop event)."""
    import threading

    from mirror_core.config.loader import parse_text
    from mirror_core.errors import MirrorError
    from mirror_core.metrics import Metrics
    from mirror_core.replication.replicator import FlowReplicator

    config = parse_text("clusters = dc1, dc2\ndc1.bootstrap.servers = a:1\ndc2.bootstrap.servers = b:2\n"
                        "dc1->dc2.enabled = true\n", validate_clients=False, environ={})
    stop = threading.Event()
    replicator = FlowReplicator(config, config.flows[0], Metrics(), stop)
    copied = iter([None, None, None, 3600.0, None])  # how long each run copied before it failed
    waits: list[float] = []

    def run_once() -> None:
        replicator._copied_s = next(copied)
        raise MirrorError("target unreachable")

    def wait(delay: float) -> bool:
        waits.append(delay)
        if len(waits) == 5:
            stop.set()
        return stop.is_set()

    monkeypatch.setattr(replicator, "_run_once", run_once)
    monkeypatch.setattr(replicator, "_close", lambda graceful: None)
    monkeypatch.setattr(stop, "wait", wait)
    replicator.run()
    assert waits == [1.0, 2.0, 4.0, 1.0, 2.0]


def test_refused_internal_records_are_said_once_a_minute_per_error(caplog: pytest.LogCaptureFixture) -> None:
    """Progress and offset-map records the target refuses are sent again at each commit: the refusal is a
    warning (it was only a counter), not one per commit."""
    from confluent_kafka import KafkaError

    from mirror_core.replication.commit import say_not_written

    line = ThrottledLine()
    too_large = KafkaError(KafkaError.MSG_SIZE_TOO_LARGE, "ProduceRequest with 37 message(s) failed")
    with caplog.at_level("WARNING"):
        for _ in range(5):
            say_not_written(line, "dc1->dc2", "progress", "mirror-core.progress.dc1.internal", too_large)
        say_not_written(line, "dc1->dc2", "progress", "mirror-core.progress.dc1.internal",
                        KafkaError(KafkaError.MSG_SIZE_TOO_LARGE, "ProduceRequest with 12 message(s) failed"))
        say_not_written(line, "dc1->dc2", "progress", "mirror-core.progress.dc1.internal",
                        KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2, lines
    assert lines[0].startswith("flow dc1->dc2: progress not written to mirror-core.progress.dc1.internal (")
    assert "37 message(s)" in lines[0] and "sent again at the next commit" in lines[0]


def test_texts_said_long_ago_are_forgotten_once_many_are_remembered() -> None:
    """Texts that carry a changing number each make an entry: the old ones go, the recent ones stay throttled."""
    line = ThrottledLine(every_s=60.0)
    for i in range(300):
        assert line.due(f"answer to request {i} where {i + 1} was due", now=float(i))
    assert len(line._logged) <= 257
    assert not line.due("answer to request 299 where 300 was due", now=300.0)  # said 1 s ago: still throttled
    assert line.due("answer to request 0 where 1 was due", now=300.0)  # said 300 s ago: due again
