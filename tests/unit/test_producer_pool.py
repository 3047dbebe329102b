from __future__ import annotations

from collections import Counter
from concurrent.futures import Future
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from mirror_core.clients import ClusterHealth, batch_limit_bytes, producer_settings
from mirror_core.config.client_defaults import KAFKA_DEFAULT_MESSAGE_MAX_BYTES, PARKED_PRODUCER_DEFAULTS
from mirror_core.config.errors import ConfigError
from mirror_core.config.loader import parse_text
from mirror_core.config.model import FlowConfig
from mirror_core.replication.producer_pool import (
    WAN_PRODUCERS,
    WAN_ROUND_TRIP_S,
    ProducerChooser,
    batch_sender_connections,
    choose_producers,
    make_target_producers,
    measure_round_trip,
    needs_round_trip,
    producer_for,
    say_slot_cap,
)
from mirror_core.stores import internal_topics
from mirror_core.stores.internal_topics import internal_topics_limit

BASE = "clusters = dc1, dc2\ndc1.bootstrap.servers = a:1\ndc2.bootstrap.servers = b:2\ndc1->dc2.enabled = true\n"


def flow(extra: str = "") -> FlowConfig:
    """A flow on the records path unless ``extra`` chooses another."""
    path = "" if "replication.data.path" in extra else "replication.data.path = records\n"
    return parse_text(BASE + extra + path, validate_clients=False).flows[0]


def test_one_producer_carries_everything() -> None:
    assert {producer_for(["p"], "t", k) for k in range(100)} == {"p"}


def test_a_topics_partitions_spread_evenly_and_each_keeps_its_producer() -> None:
    pool = ["a", "b", "c", "d"]
    spread = Counter(producer_for(pool, "orders", k) for k in range(8))
    assert spread == Counter({"a": 2, "b": 2, "c": 2, "d": 2})
    assert all(producer_for(pool, "orders", k) == producer_for(pool, "orders", k) for k in range(8))


def test_auto_is_the_default_and_takes_4_producers_from_a_round_trip_of_70_ms() -> None:
    assert flow().producers is None
    loopback, short, wan = (choose_producers(flow(), rtt) for rtt in (0.0004, WAN_ROUND_TRIP_S - 0.001,
                                                                      WAN_ROUND_TRIP_S))
    assert WAN_ROUND_TRIP_S == 0.070 and "69.0 ms < 70 ms" in short.reason
    assert (loopback.count, short.count, wan.count) == (1, 1, WAN_PRODUCERS) and WAN_PRODUCERS == 4
    assert not loopback.one_batch_per_partition and wan.one_batch_per_partition
    assert wan.round_trip_s == WAN_ROUND_TRIP_S and "70.0 ms >= 70 ms" in wan.reason
    assert wan.entry() == {"count": 4, "one_batch_per_partition": True, "round_trip_ms": 70.0,
                           "reason": "auto: round trip to the target 70.0 ms >= 70 ms"}
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


def test_the_batches_data_path_takes_one_producer_for_progress_and_the_map() -> None:
    """Its records go by the wire sender: more producers (auto over a WAN, or set) would only idle. There
    replication.producers is the sender's connections per target broker (auto: 2)."""
    batches = flow("replication.data.path = batches\n")
    assert not needs_round_trip(batches)
    choice = choose_producers(batches, WAN_ROUND_TRIP_S * 2)
    assert (choice.count, choice.one_batch_per_partition, choice.round_trip_s) == (1, False, None)
    assert batch_sender_connections(batches) == 2 and "over 2 connections per target broker (auto)" in choice.reason
    pinned_flow = flow("replication.data.path = batches\nreplication.producers = 4\n")
    pinned = choose_producers(pinned_flow, 0.15)
    assert pinned.count == 1 and "over 4 connections per target broker (replication.producers)" in pinned.reason
    assert batch_sender_connections(pinned_flow) == 4
    parked = choose_producers(flow("replication.data.path = batches\nreplication.one.batch.per.partition = true\n"
                                   "replication.producers = 1\n"), None)
    assert (parked.count, parked.one_batch_per_partition) == (1, False)
    assert parked.reason.endswith("over 1 connection per target broker (replication.producers); "
                                  "replication.one.batch.per.partition does not apply to it")


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
    """list_topics as a consumer answers it: after the given delays on a fake clock, or with an error after 1 s
    (None)."""

    def __init__(self, delays: list[float | None]) -> None:
        self.delays = delays
        self.now = 100.0

    def clock(self) -> float:
        return self.now

    def list_topics(self, topic: str, timeout: float) -> None:
        delay = self.delays.pop(0)  # an unexpected request: IndexError
        if delay is None:
            self.now += 1.0
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT))
        self.now += delay


def measure(meta: Meta, stopped: bool = False, budget_s: float = 10.0) -> float | None:
    return measure_round_trip(meta, "p", lambda: stopped, budget_s, clock=meta.clock)  # type: ignore[arg-type]


def test_the_round_trip_is_the_fastest_answer_after_the_first_and_errors_do_not_count() -> None:
    assert measure(Meta([0.0, 0.05, None, 0.03])) == pytest.approx(0.03)  # a failure does not count
    slow = Meta([0.0, 0.05, 9.99, 0.03])
    assert measure(slow) == pytest.approx(0.05) and slow.delays == [0.03]  # the 10 s budget ran out first
    assert measure(Meta([0.0, 0.05, 0.04, 0.03])) == pytest.approx(0.03)
    assert measure(Meta([0.5, 0.06, 0.05, 0.07])) == pytest.approx(0.05)  # the connecting one is not timed
    assert measure(Meta([None])) is None  # no connection: no samples (the list would run out)
    assert measure(Meta([0.0, None, None, None])) is None
    assert measure(Meta([]), stopped=True) is None  # stopping: not one request


def test_the_chooser_measures_once_logs_and_shows_the_choice_and_measures_again_only_after_no_answer(
        caplog: pytest.LogCaptureFixture) -> None:
    answers: list[float | None] = [None, 0.08]  # no answer at the first start, 80 ms at the next
    shown: list[dict[str, object]] = []
    stopping = False
    chooser = ProducerChooser(flow(), lambda: stopping, shown.append, lambda meta, topic, stopped: answers.pop(0))
    meta = object()
    with caplog.at_level("INFO"):
        assert chooser.choose(meta).count == 1  # type: ignore[arg-type]
        assert [r.levelname for r in caplog.records if "did not answer" in r.getMessage()] == ["WARNING"]
        assert str(shown[-1]["reason"]).startswith("auto: the target did not answer")
        caplog.clear()
        assert chooser.choose(meta).count == WAN_PRODUCERS  # type: ignore[arg-type]
        assert shown[-1] == {"count": WAN_PRODUCERS, "one_batch_per_partition": True, "round_trip_ms": 80.0,
                             "reason": "auto: round trip to the target 80.0 ms >= 70 ms"}
        assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
            ("INFO", "flow dc1->dc2: 4 target producers, one batch per partition on (auto: round trip to the target "
                     "80.0 ms >= 70 ms)")]
        # Later starts keep it (a second measurement would pop an empty list), and a stopping one measures nothing,
        # says nothing and shows nothing.
        assert chooser.choose(meta).count == WAN_PRODUCERS  # type: ignore[arg-type]
        caplog.clear()
        shown.clear()
        stopping = True
        fresh = ProducerChooser(flow(), lambda: stopping, shown.append, lambda meta, topic, stopped: answers.pop(0))
        assert fresh.choose(meta).count == 1 and not caplog.records and not shown  # type: ignore[arg-type]


def test_the_replicator_shows_its_choice_in_status_and_a_stopping_one_measures_nothing() -> None:
    import threading

    from mirror_core.metrics import Metrics
    from mirror_core.replication.replicator import FlowReplicator

    config = parse_text(BASE + "replication.data.path = records\n", validate_clients=False, environ={})
    stop = threading.Event()
    replicator = FlowReplicator(config, config.flows[0], Metrics(), stop)
    chooser = replicator._producer_choice
    chooser._probe = lambda meta, topic, stopped: 0.08
    assert chooser.choose(object()).count == WAN_PRODUCERS  # type: ignore[arg-type]
    assert replicator.reporter.status["producers"]["round_trip_ms"] == 80.0
    stop.set()  # the replicator's own stop event is what the chooser asks
    fresh = FlowReplicator(config, config.flows[0], Metrics(), stop)
    fresh._producer_choice._probe = lambda meta, topic, stopped: pytest.fail("a stopping flow measured")
    assert fresh._producer_choice.choose(object()).count == 1  # type: ignore[arg-type]
    assert "producers" not in fresh.reporter.status


def test_exactly_once_has_a_producer_per_slot_and_measures_nothing() -> None:
    def probe(meta: object, topic: str, stopped: object) -> float:
        raise AssertionError("exactly-once measured the round trip")

    assert ProducerChooser(flow("exactly.once.enabled = true\n"), lambda: False, lambda entry: None, probe).choose(
        object()).entry() == {  # type: ignore[arg-type]
        "count": None, "one_batch_per_partition": False, "round_trip_ms": None,
        "reason": "exactly-once: a transactional producer per slot"}
    parked = flow("exactly.once.enabled = true\nreplication.one.batch.per.partition = true\n")
    assert choose_producers(parked, None).one_batch_per_partition
    assert not choose_producers(flow("exactly.once.enabled = true\nreplication.one.batch.per.partition = true\n"
                                    + identity_line()), None).one_batch_per_partition


def test_parked_producers_take_batches_as_large_as_the_remote_topics_accept() -> None:
    """With one batch per partition the mirror cuts each piece to its remote topic's limit, so librdkafka's own
    limit is raised under the user's settings; without it, and exactly-once, the usual defaults stay."""
    wan = choose_producers(flow(), 0.08)
    big = PARKED_PRODUCER_DEFAULTS["batch.size"]
    assert wan.count == 4 and wan.producer_defaults() == {"batch.size": big, "message.max.bytes": big}
    assert choose_producers(flow(), 0.001).producer_defaults() == {}
    assert choose_producers(flow("exactly.once.enabled = true\nreplication.one.batch.per.partition = true\n"),
                            None).producer_defaults() == {}
    cluster = parse_text(BASE + "dc2.producer.batch.size = 65536\n", validate_clients=False).clusters["dc2"]
    settings = producer_settings(cluster, {}, defaults=wan.producer_defaults())
    assert settings["batch.size"] == "65536" and settings["message.max.bytes"] == big, "the user's setting wins"


class Described:
    """describe_configs of an admin client: max.message.bytes per topic, one answer per call in turn; a topic
    missing from an answer is unknown to the cluster, one mapped to an exception is not answered for."""

    def __init__(self, *answers: dict[str, int | Exception]) -> None:
        self.answers = list(answers)
        self.calls: list[list[str]] = []

    def describe_configs(self, resources: list[Any], request_timeout: float) -> dict[Any, Future[Any]]:
        self.calls.append([res.name for res in resources])
        limits = self.answers[min(len(self.calls), len(self.answers)) - 1]
        out: dict[Any, Future[Any]] = {}
        for res in resources:
            fut: Future[Any] = Future()
            value = limits.get(res.name, KafkaException(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART)))
            if isinstance(value, Exception):
                fut.set_exception(value)
            else:
                fut.set_result({"max.message.bytes": SimpleNamespace(value=str(value))})
            out[res] = fut
        return out


def test_the_internal_topics_limit_is_the_smallest_they_take_and_kafkas_default_where_unknown(
        caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    def limit(admin: Described, topics: list[str], stop: bool = False) -> int:
        return internal_topics_limit(admin, topics, "flow f", lambda s: stop)  # type: ignore[arg-type]

    assert limit(Described({}), []) == KAFKA_DEFAULT_MESSAGE_MAX_BYTES
    assert limit(Described({"progress": 4096}), ["progress", "syncs"], stop=True) == 4096
    assert limit(Described({"progress": 8 << 20, "syncs": 2 << 20}), ["progress", "syncs"]) == 2 << 20
    # Created a moment ago: unknown at first, asked again (only for it) until the cluster knows it.
    created = Described({"syncs": 8 << 20}, {"syncs": 8 << 20, "progress": 4096})
    assert limit(created, ["progress", "syncs"]) == 4096 and created.calls == [["progress", "syncs"], ["progress"]]
    stopping = Described({})
    assert limit(stopping, ["progress"], stop=True) == KAFKA_DEFAULT_MESSAGE_MAX_BYTES and len(stopping.calls) == 1
    denied = KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))
    with caplog.at_level("INFO"):
        assert limit(Described({"progress": denied, "syncs": 8 << 20}), ["progress", "syncs"]) == \
            KAFKA_DEFAULT_MESSAGE_MAX_BYTES
    assert "max.message.bytes of progress unknown" in caplog.text and "DescribeConfigs" in caplog.text
    # Still unknown to the cluster when the wait for a new topic is over: said so, not blamed on an ACL.
    monkeypatch.setattr(internal_topics, "NEW_TOPIC_WAIT_S", 0.0)
    caplog.clear()
    with caplog.at_level("INFO"):
        assert limit(Described({}), ["progress"]) == KAFKA_DEFAULT_MESSAGE_MAX_BYTES
    assert "progress unknown (the target does not know the topic" in caplog.text and "ACL" not in caplog.text

    class Broken:
        def describe_configs(self, resources: list[Any], request_timeout: float) -> None:
            raise KafkaException(KafkaError(KafkaError._TRANSPORT))

    assert internal_topics_limit(Broken(), ["progress"], "flow f") == KAFKA_DEFAULT_MESSAGE_MAX_BYTES  # type: ignore[arg-type]


def test_a_producer_told_what_its_topics_take_keeps_its_batches_within_it() -> None:
    """``fits`` lowers batch.size only when the batches could outgrow it: the user's settings otherwise stand."""
    def settings(extra: str, fits: int | None) -> dict[str, Any]:
        cluster = parse_text(BASE + extra, validate_clients=False).clusters["dc2"]
        return producer_settings(cluster, {}, fits=fits)

    raised = "dc2.producer.batch.size = 4194304\ndc2.producer.message.max.bytes = 4194304\n"
    assert batch_limit_bytes(settings(raised, None)) == 4 << 20
    assert batch_limit_bytes(settings(raised, 4096)) == 4096 and settings(raised, 4096)["message.max.bytes"] == \
        "4194304", "single records up to the user's message.max.bytes still go"
    assert settings(raised, KAFKA_DEFAULT_MESSAGE_MAX_BYTES)["batch.size"] == str(KAFKA_DEFAULT_MESSAGE_MAX_BYTES)
    assert settings("", KAFKA_DEFAULT_MESSAGE_MAX_BYTES) == settings("", None), "the defaults fit: nothing changes"
    small = "dc2.producer.message.max.bytes = 2000\n"
    assert settings(small, 4096) == settings(small, None)


def test_progress_gets_a_producer_of_its_own_only_when_the_data_batches_may_outgrow_its_topics() -> None:
    """Made for real (librdkafka producers, never connected): the user's batch.size counts, not only auto's."""
    def own(extra: str, choice_rtt: float | None, internal: int) -> bool:
        cluster = parse_text(BASE + extra, validate_clients=False).clusters["dc2"]
        choice = choose_producers(flow(), choice_rtt)
        data, mine = make_target_producers(cluster, {}, ClusterHealth("dc2"), choice, internal)
        assert len(data) == choice.count
        return mine is not None

    raised = "dc2.producer.batch.size = 4194304\ndc2.producer.message.max.bytes = 4194304\n"
    assert not own("", None, KAFKA_DEFAULT_MESSAGE_MAX_BYTES), "the usual 1 MiB batches fit"
    assert own(raised, None, KAFKA_DEFAULT_MESSAGE_MAX_BYTES), "one producer, batch.size raised by the user"
    assert own("", 0.08, KAFKA_DEFAULT_MESSAGE_MAX_BYTES), "over a WAN: 8 MiB by default"
    assert not own("", 0.08, 16 << 20), "internal topics that take 16 MiB"
    assert own("", None, 4096), "internal topics that take less than a usual batch"


def test_exactly_once_says_when_the_slot_producers_batches_are_capped(caplog: pytest.LogCaptureFixture) -> None:
    topics = ["mirror-core.progress.dc1.internal", "mirror-core.offset-syncs.dc1.internal"]
    with caplog.at_level("WARNING"):
        say_slot_cap("dc1->dc2", 1_000_000, KAFKA_DEFAULT_MESSAGE_MAX_BYTES, topics)
    assert not caplog.records
    with caplog.at_level("WARNING"):
        say_slot_cap("dc1->dc2", 4 << 20, 65536, topics)
    line = caplog.records[-1].getMessage()
    assert "capped at 65536 bytes" in line and "4194304 otherwise" in line and topics[0] in line
