"""Partitions released because the target does not answer (an exactly-once slot lost during a partition of
the link) keep their lag on this process's gauge and in /status, growing with the source, until the target
answers again or the partition is copied here again; a partition released for any other reason leaves them."""
from __future__ import annotations

from dataclasses import dataclass, field
from unittest.mock import MagicMock

from confluent_kafka import TopicPartition

from mirror_core.clients import ClusterHealth
from mirror_core.metrics import Metrics
from mirror_core.replication.batch import PartitionState
from mirror_core.replication.exactly_once import SlotManager
from mirror_core.replication.reporting import Reporter


def lag(metrics: Metrics, partition: int) -> float:
    value = metrics.registry.get_sample_value("mirror_partition_lag_records",
                                              {"flow": "dc1->dc2", "topic": "orders", "partition": str(partition)})
    return value if value is not None else -1.0


def held_gauge(metrics: Metrics) -> float | None:
    return metrics.registry.get_sample_value("mirror_loop_held_seconds", {"flow": "dc1->dc2"})


@dataclass
class Flow:
    """A reporter that published ``states`` once: each at ``position``, the source's end at ``end``."""

    partitions: tuple[int, ...] = (0, 1)
    position: int = 90
    end: int = 100
    metrics: Metrics = field(default_factory=Metrics)
    consumer: MagicMock = field(default_factory=MagicMock)
    source: ClusterHealth = field(default_factory=lambda: ClusterHealth("dc1"))
    target: ClusterHealth = field(default_factory=lambda: ClusterHealth("dc2"))

    def __post_init__(self) -> None:
        self.reporter = Reporter("dc1->dc2", self.metrics)
        self.states = [PartitionState("orders", p, "dc1.orders", 0, False, None, p) for p in self.partitions]
        self.publish(self.states, self.position, self.end)

    def publish(self, states: list[PartitionState], position: int | None, end: int | None = None) -> None:
        if end is not None:
            self.consumer.get_watermark_offsets.return_value = (0, end)
        self.reporter.publish(self.consumer, states, lambda st: position, "i", [], 0, self.source, self.target)


def test_stranded_partitions_keep_counting_lag_until_the_target_answers() -> None:
    f = Flow()
    metrics, reporter, states = f.metrics, f.reporter, f.states
    assert (lag(metrics, 0), lag(metrics, 1)) == (10, 10)

    f.target.reachable = False  # the link is cut: slot 0 is lost (stranded), partition 1 revoked cleanly
    reporter.forget_partition(states[0], stranded=True)
    reporter.forget_partition(states[1])
    f.publish([], None)
    assert reporter.needs_source()
    asked: list[list[tuple[str, int]]] = []
    ends = {("orders", 0): 250, ("orders", 1): 250}  # the source kept receiving records
    reporter.refresh_from_source(lambda keys: asked.append(keys) or ends)
    assert asked == [[("orders", 0)]]  # the stranded partition only: partition 1 is another process's now
    assert (lag(metrics, 0), lag(metrics, 1)) == (160, 0)
    assert [(e["partition"], e["position"], e["lag"]) for e in reporter.status["stranded"]] == [(0, 90, 160)]
    assert reporter.status["partitions"] == []

    reporter.refresh_from_source(lambda keys: {("orders", 0): 400})  # the lag watch asks every 5 s
    assert lag(metrics, 0) == 310 and reporter.status["stranded"][0]["end"] == 400

    f.target.reachable = True  # whoever takes the slot now reports the partition
    f.publish([], None)
    assert lag(metrics, 0) == 0 and reporter.status["stranded"] == []


def test_a_stranded_partition_copied_here_again_is_reported_as_owned() -> None:
    f = Flow((0,), position=40)
    f.target.reachable = False
    f.reporter.forget_partition(f.states[0], stranded=True)
    f.publish(f.states, 40, 120)  # the slot was taken again
    assert f.reporter.status["stranded"] == [] and lag(f.metrics, 0) == 80 and not f.reporter.needs_source()


def test_a_stopped_flow_counts_no_stranded_lag() -> None:
    f = Flow((0,), position=40)
    f.reporter.forget_partition(f.states[0], stranded=True)
    assert lag(f.metrics, 0) == 60
    f.reporter.drop_stranded()
    assert lag(f.metrics, 0) == 0 and f.reporter.status["stranded"] == []


def slots(reachable: bool) -> SlotManager:
    sm = SlotManager.__new__(SlotManager)
    sm.flow, sm.metrics, sm.assignment, sm.producers, sm.open = MagicMock(), MagicMock(), MagicMock(), {}, set()
    sm.target_health = MagicMock(reachable=reachable)
    sm.commit_slots = MagicMock()  # type: ignore[method-assign]
    sm._states = lambda k: [PartitionState("orders", k, "dc1.orders", 0, False, None, k)]  # type: ignore[method-assign]
    return sm


def test_slots_lost_while_the_target_is_down_strand_their_partitions_but_a_revoke_does_not() -> None:
    sm = slots(reachable=False)
    sm._on_lost(MagicMock(), [TopicPartition("slots", 0)])
    assert sm.assignment.release_states.call_args.kwargs == {"stranded": True}
    sm._on_revoke(MagicMock(), [TopicPartition("slots", 1)])  # the slot group answered: another owner
    assert sm.assignment.release_states.call_args.kwargs == {"stranded": False}
    sm = slots(reachable=True)
    sm._on_lost(MagicMock(), [TopicPartition("slots", 0)])
    assert sm.assignment.release_states.call_args.kwargs == {"stranded": False}


def test_a_held_loop_still_shows_the_lag_growing() -> None:
    """Exactly-once over a cut link: the loop waits in a commit or an abort for a minute and more and does
    not publish; the lag watch refreshes its partitions' lag from the source meanwhile."""
    f = Flow()
    metrics, reporter, states = f.metrics, f.reporter, f.states
    published = reporter._published_at
    asked: list[list[tuple[str, int]]] = []
    reporter.refresh_from_source(lambda keys: asked.append(keys) or {}, now=published + 1)
    assert asked == [] and not reporter.needs_source(published + 1)  # the loop publishes: nothing to do

    assert reporter.needs_source(published + 6)
    ends = {("orders", 0): 300, ("orders", 1): 95}
    reporter.refresh_from_source(lambda keys: asked.append(keys) or ends, now=published + 6)
    assert sorted(asked[0]) == [("orders", 0), ("orders", 1)]
    assert (lag(metrics, 0), lag(metrics, 1)) == (210, 5)
    assert [(p["partition"], p["end"], p["lag"]) for p in reporter.status["partitions"]] == [(0, 300, 210), (1, 95, 5)]
    assert reporter.held_for(published + 6) == 6.0 and reporter.held_for(published + 1) is None

    # Slot 0 is lost meanwhile (target down): stranded from the last position, with the end last asked for.
    f.target.reachable = False
    reporter.forget_partition(states[0], stranded=True)
    assert lag(metrics, 0) == 210
    reporter.refresh_from_source(lambda keys: {("orders", 0): 500, ("orders", 1): 99}, now=published + 12)
    assert (lag(metrics, 0), lag(metrics, 1)) == (410, 9)
    assert [(e["partition"], e["lag"]) for e in reporter.status["stranded"]] == [(0, 410)]
    assert [p["partition"] for p in reporter.status["partitions"]] == [1]  # listed once: as stranded

    # The loop publishes again: its figures win, the held marker goes.
    f.publish([states[1]], 99, 99)
    assert lag(metrics, 1) == 0 and reporter.held_for() is None


def test_an_answer_from_the_source_after_a_publish_does_not_undo_it() -> None:
    f = Flow((0,), position=40)

    def slow_source(keys: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        f.publish(f.states, 130, 130)  # the loop was released while we asked
        return {("orders", 0): 900}

    f.reporter.refresh_from_source(slow_source, now=f.reporter._published_at + 10)
    assert lag(f.metrics, 0) == 0 and f.reporter.status["partitions"][0]["lag"] == 0


def test_a_partition_dropped_without_being_forgotten_leaves_the_gauge_at_the_next_publish() -> None:
    """The safety net: a revoke that failed before releasing must not leave a gauge the lag watch grows."""
    f = Flow()
    f.publish(f.states[1:], 90)
    assert (lag(f.metrics, 0), lag(f.metrics, 1)) == (0, 10)
    asked: list[list[tuple[str, int]]] = []
    f.reporter.refresh_from_source(lambda keys: asked.append(keys) or {}, now=f.reporter._published_at + 60)
    assert asked == [[("orders", 1)]]


def test_the_lag_watch_asks_the_source_only_when_needed() -> None:
    import threading
    import time
    from concurrent.futures import Future
    from types import SimpleNamespace

    from mirror_core.replication.lag_watch import LagWatch

    asked = threading.Event()

    class Admin:
        polled = 0

        def list_offsets(self, wanted: dict, **_kw: object) -> dict:
            asked.set()
            out = {}
            for tp in wanted:
                f: Future = Future()
                f.set_result(SimpleNamespace(offset=500))
                out[tp] = f
            return out

        def poll(self, _t: float) -> int:
            Admin.polled += 1
            return 0

    made: list[Admin] = []
    f = Flow((0,), position=40)
    metrics, reporter = f.metrics, f.reporter
    with LagWatch(reporter, lambda: made.append(Admin()) or made[-1], interval=0.01):
        time.sleep(0.2)
        assert made == [] and lag(metrics, 0) == 60  # the loop publishes (5 s not over): no client, no ask
        assert held_gauge(metrics) == 0
        reporter._published_at -= 10  # the loop is held now
        assert asked.wait(5)
        deadline = time.monotonic() + 5
        while lag(metrics, 0) != 460 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert held_gauge(metrics) >= 10
    assert lag(metrics, 0) == 460 and len(made) == 1 and Admin.polled >= 1
    assert held_gauge(metrics) == 0  # stopped
