from __future__ import annotations

import time
from collections import Counter

import pytest
from confluent_kafka import KafkaError, KafkaException

from mirror_core.config.errors import ConfigError
from mirror_core.config.loader import parse_text
from mirror_core.config.model import FlowConfig
from mirror_core.replication.producer_pool import (
    WAN_PRODUCERS,
    WAN_ROUND_TRIP_S,
    choose_producers,
    measure_round_trip,
    needs_round_trip,
    producer_for,
)

BASE = "clusters = dc1, dc2\ndc1.bootstrap.servers = a:1\ndc2.bootstrap.servers = b:2\ndc1->dc2.enabled = true\n"


def flow(extra: str = "") -> FlowConfig:
    return parse_text(BASE + extra, validate_clients=False).flows[0]


def test_one_producer_carries_everything() -> None:
    assert {producer_for(["p"], "t", k) for k in range(100)} == {"p"}


def test_a_topics_partitions_spread_evenly_and_each_keeps_its_producer() -> None:
    pool = ["a", "b", "c", "d"]
    spread = Counter(producer_for(pool, "orders", k) for k in range(8))
    assert spread == Counter({"a": 2, "b": 2, "c": 2, "d": 2})
    assert all(producer_for(pool, "orders", k) == producer_for(pool, "orders", k) for k in range(8))


def test_auto_is_the_default_and_takes_4_producers_from_a_round_trip_of_20_ms() -> None:
    assert flow().producers is None
    loopback, lan, wan = (choose_producers(flow(), rtt) for rtt in (0.0004, WAN_ROUND_TRIP_S - 0.001,
                                                                    WAN_ROUND_TRIP_S))
    assert (loopback.count, lan.count, wan.count) == (1, 1, WAN_PRODUCERS) and WAN_PRODUCERS == 4
    assert not loopback.one_batch_per_partition and wan.one_batch_per_partition
    assert wan.round_trip_s == WAN_ROUND_TRIP_S and "20.0 ms >= 20 ms" in wan.reason
    assert wan.entry() == {"count": 4, "one_batch_per_partition": True, "round_trip_ms": 20.0,
                           "reason": "auto: round trip to the target 20.0 ms >= 20 ms"}
    unanswered = choose_producers(flow(), None)
    assert (unanswered.count, unanswered.round_trip_s) == (1, None) and "did not answer" in unanswered.reason


def test_auto_keeps_one_producer_where_one_batch_per_partition_cannot_apply() -> None:
    """Without parking each producer's thread spins while its partitions wait: auto does not multiply that."""
    identity = flow(identity_line())
    for f in (identity, flow("replication.one.batch.per.partition = false\n")):
        choice = choose_producers(f, 0.08)
        assert (choice.count, choice.one_batch_per_partition) == (1, False) and "does not apply" in choice.reason
        assert not needs_round_trip(f)
    assert needs_round_trip(flow()) and not needs_round_trip(flow("replication.producers = 4\n"))
    assert not needs_round_trip(flow("exactly.once.enabled = true\n"))
    # Set by hand with the identity policy: the count is kept, but parking is not claimed (it does not apply).
    pinned = choose_producers(flow(identity_line() + "replication.producers = 2\n"), None)
    assert (pinned.count, pinned.one_batch_per_partition) == (2, False)


def identity_line() -> str:
    return "replication.policy.class = org.apache.kafka.connect.mirror.IdentityReplicationPolicy\n"


def test_a_count_that_is_set_wins_over_the_round_trip() -> None:
    for written in ("1", " 1 "):
        choice = choose_producers(flow(f"replication.producers = {written}\n"), 0.15)
        assert (choice.count, choice.one_batch_per_partition, choice.round_trip_s) == (1, False, None)
    assert choose_producers(flow("replication.producers = AUTO\n"), 0.15).count == WAN_PRODUCERS
    assert choose_producers(flow("replication.producers = 8\n"), 0.0).count == 8


@pytest.mark.parametrize("written", ["0", "33", "four", "-1"])
def test_a_bad_count_names_the_key_and_line_and_says_auto(written: str) -> None:
    with pytest.raises(ConfigError) as err:
        flow(f"replication.producers = {written}\n")
    assert "replication.producers" in str(err.value) and "line 5" in str(err.value) and "auto" in str(err.value)


class Meta:
    """list_topics as a consumer answers it: after the given delays, or with an error (None)."""

    def __init__(self, delays: list[float | None]) -> None:
        self.delays = delays

    def list_topics(self, topic: str, timeout: float) -> None:
        delay = self.delays.pop(0)
        if delay is None:
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT))
        time.sleep(delay)


def test_the_round_trip_is_the_fastest_answer_after_the_first_and_errors_do_not_count() -> None:
    never = lambda: False  # noqa: E731
    rtt = measure_round_trip(Meta([0.0, 0.05, None, 0.03]), "p", never)  # type: ignore[arg-type]
    assert rtt is not None and 0.03 <= rtt < 0.045  # the failed one does not count
    connecting_is_not_timed = measure_round_trip(Meta([0.0, 0.06, 0.05, 0.07]), "p", never)  # type: ignore[arg-type]
    assert connecting_is_not_timed is not None and connecting_is_not_timed >= 0.05
    assert measure_round_trip(Meta([None]), "p", never) is None  # type: ignore[arg-type]  # no connection: no samples
    assert measure_round_trip(Meta([0.0, None, None, None]), "p", never) is None  # type: ignore[arg-type]
    assert measure_round_trip(Meta([0.0]), "p", lambda: True) is None  # type: ignore[arg-type]  # stopping


def test_the_replicator_measures_once_shows_the_choice_and_measures_again_only_after_no_answer(
        caplog: pytest.LogCaptureFixture) -> None:
    import threading

    from mirror_core.metrics import Metrics
    from mirror_core.replication.replicator import FlowReplicator

    config = parse_text(BASE, validate_clients=False, environ={})
    replicator = FlowReplicator(config, config.flows[0], Metrics(), threading.Event())
    meta = Meta([None])  # the target does not answer at the first start
    with caplog.at_level("INFO"):
        assert replicator._choose_producers(meta).count == 1  # type: ignore[arg-type]
    assert any(r.levelname == "WARNING" and "did not answer" in r.getMessage() for r in caplog.records)
    assert replicator.reporter.status["producers"]["reason"].startswith("auto: the target did not answer")
    meta.delays = [0.0, 0.03, 0.025, 0.04]  # the next start: 25 ms
    assert replicator._choose_producers(meta).count == WAN_PRODUCERS  # type: ignore[arg-type]
    shown = replicator.reporter.status["producers"]
    assert shown["count"] == WAN_PRODUCERS and shown["one_batch_per_partition"] and 25 <= shown["round_trip_ms"] < 40
    meta.delays = []  # later starts keep the measured round trip (a second measurement would pop an empty list)
    assert replicator._choose_producers(meta).count == WAN_PRODUCERS  # type: ignore[arg-type]
