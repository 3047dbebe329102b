"""Partitions released because the target does not answer (an exactly-once slot lost during a partition of
the link) keep their lag on this process's gauge and in /status, growing with the source, until the target
answers again or the partition is copied here again; a partition released for any other reason leaves them."""
from __future__ import annotations

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


def test_stranded_partitions_keep_counting_lag_until_the_target_answers() -> None:
    metrics, consumer = Metrics(), MagicMock()
    reporter = Reporter("dc1->dc2", metrics)
    source, target = ClusterHealth("dc1"), ClusterHealth("dc2")
    states = [PartitionState("orders", p, "dc1.orders", 0, False, None, p) for p in (0, 1)]
    consumer.get_watermark_offsets.return_value = (0, 100)
    reporter.publish(consumer, states, lambda st: 90, "i", [], 0, source, target)
    assert (lag(metrics, 0), lag(metrics, 1)) == (10, 10)

    target.reachable = False  # the link is cut: slot 0 is lost (stranded), partition 1 revoked cleanly
    reporter.forget_partition(states[0], stranded=True)
    reporter.forget_partition(states[1])
    ends = {("orders", 0): 250, ("orders", 1): 250}  # the source kept receiving records
    reporter.publish(consumer, [], lambda st: None, "i", [], 0, source, target, lambda tps: ends)
    assert (lag(metrics, 0), lag(metrics, 1)) == (160, 0)
    assert [(e["partition"], e["position"], e["lag"]) for e in reporter.status["stranded"]] == [(0, 90, 160)]
    assert reporter.status["partitions"] == []

    reporter._next_stranded_refresh = 0.0  # the next refresh is due, between runs of the pipeline this time
    ends = {("orders", 0): 400}
    reporter.refresh_stranded(lambda tps: ends)
    assert lag(metrics, 0) == 310 and reporter.status["stranded"][0]["end"] == 400

    target.reachable = True  # whoever takes the slot now reports the partition
    reporter.publish(consumer, [], lambda st: None, "i", [], 0, source, target)
    assert lag(metrics, 0) == 0 and reporter.status["stranded"] == []


def test_a_stranded_partition_copied_here_again_is_reported_as_owned() -> None:
    metrics, consumer = Metrics(), MagicMock()
    reporter = Reporter("dc1->dc2", metrics)
    source, target = ClusterHealth("dc1"), ClusterHealth("dc2")
    st = PartitionState("orders", 0, "dc1.orders", 0, False, None, 0)
    consumer.get_watermark_offsets.return_value = (0, 100)
    reporter.publish(consumer, [st], lambda s: 40, "i", [], 0, source, target)
    target.reachable = False
    reporter.forget_partition(st, stranded=True)
    consumer.get_watermark_offsets.return_value = (0, 120)
    asked: list[list[TopicPartition]] = []
    reporter.publish(consumer, [st], lambda s: 40, "i", [], 0, source, target,
                     lambda tps: asked.append(tps) or {})  # the slot was taken again
    assert reporter.status["stranded"] == [] and lag(metrics, 0) == 80 and asked == []


def test_a_stopped_flow_counts_no_stranded_lag() -> None:
    metrics, consumer = Metrics(), MagicMock()
    reporter = Reporter("dc1->dc2", metrics)
    st = PartitionState("orders", 0, "dc1.orders", 0, False, None, 0)
    consumer.get_watermark_offsets.return_value = (0, 100)
    reporter.publish(consumer, [st], lambda s: 40, "i", [], 0, ClusterHealth("dc1"), ClusterHealth("dc2"))
    reporter.forget_partition(st, stranded=True)
    assert lag(metrics, 0) == 60
    reporter.drop_stranded()
    assert lag(metrics, 0) == 0 and reporter.status["stranded"] == []


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
