"""What each remote topic takes and the budgets cut from it (mirror_core.replication.topic_limits): pure logic, the
target's DescribeConfigs stood in for by a function; tests/integration/test_batch_limits.py runs it against brokers."""

from __future__ import annotations

import logging

import pytest

from mirror_core.replication.topic_limits import RELEARN_EVERY_S, REQUEST_SLACK, LimitRead, TopicLimits
from tests.unit.test_one_batch_per_partition import flow

Describe = dict[str, int | None]


class Target:
    """max.message.bytes per remote topic, and who asked for which."""

    def __init__(self, **limits: int | None) -> None:
        self.limits = {f"dc1.{k}": v for k, v in limits.items()}
        self.asked: list[list[str]] = []

    def __call__(self, remotes: list[str]) -> Describe:
        self.asked.append(remotes)
        return {r: self.limits[r] for r in remotes if r in self.limits}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_limits_are_read_once_per_remote_topic_a_new_one_waited_for_an_unanswered_one_asked_next_time() -> None:
    asked: list[list[str]] = []
    waits: list[float] = []

    def describe(remotes: list[str]) -> Describe:
        asked.append(remotes)
        # dc1.b: no answer (an ACL); dc1.n: created a moment ago, known to the target from the second ask on
        return {r: None if r == "dc1.n" and len(asked) == 1 else 65536 for r in remotes if r != "dc1.b"}

    limits = TopicLimits(flow(), 1 << 20, describe=describe)
    limits.learn(["dc1.a", "dc1.b", "dc1.n"], lambda s: bool(waits.append(s)))
    assert asked == [["dc1.a", "dc1.b", "dc1.n"], ["dc1.n"]] and waits == [0.2]
    limits.learn(["dc1.a", "dc1.b", "dc1.c"], lambda s: True)
    assert asked[2:] == [["dc1.b", "dc1.c"]]
    assert limits.budget("dc1.a") == limits.budget("dc1.c") == limits.budget("dc1.n") == 65536 - REQUEST_SLACK
    assert limits.budget("dc1.b") is None

    def failing(remotes: list[str]) -> Describe:
        raise RuntimeError("no answer")

    limits.describe = failing
    limits.learn(["dc1.d"], lambda s: False)  # logged; the copy goes on
    limits.describe = describe
    limits.learn(["dc1.d"], lambda s: False)
    assert asked[-1] == ["dc1.d"] and limits.budget("dc1.d") == 65536 - REQUEST_SLACK, "asked again after a failure"


def test_a_limit_the_config_sync_read_after_this_ones_read_is_followed_and_the_identity_policy_reads_none() -> None:
    clock = Clock()
    limits = TopicLimits(flow(), 1 << 20, describe=Target(t=65536), clock=clock)
    limits.learn(["dc1.t"], lambda s: False)
    assert limits.budget("dc1.t") == 65536 - REQUEST_SLACK
    limits.learn(["dc1.t"], lambda s: False, synced={"dc1.t": LimitRead(131072, clock.now - 1)})
    assert limits.budget("dc1.t") == 65536 - REQUEST_SLACK, "read before this one's own read: not news"
    clock.now += 10
    limits.learn(["dc1.t"], lambda s: False,
                 synced={"dc1.t": LimitRead(131072, clock.now), "dc1.gone": LimitRead(1, 0)})
    assert limits.budget("dc1.t") == 131072 - REQUEST_SLACK and "dc1.gone" not in limits.budgets
    clock.now += 10
    limits.learn(["dc1.t"], lambda s: False, synced={"dc1.t": LimitRead(2 << 20, clock.now)})
    assert limits.budget("dc1.t") is None, "at or above librdkafka's own limit: nothing to cut"

    identity = TopicLimits(flow("replication.policy.class = IdentityReplicationPolicy\n"), 1 << 20,
                           describe=lambda remotes: pytest.fail("asked"))
    identity.learn(["dc1.t"], lambda s: False)
    assert identity.budgets == {} and not identity.after_refusal("dc1.t", 9, 0)


def test_a_limit_lowered_on_the_target_is_read_again_at_a_refusal_and_kept_over_the_syncs_older_read(
        caplog: pytest.LogCaptureFixture) -> None:
    """Between two topic-config syncs (600 s by default) a limit lowered on the target was found only by refused
    batches, each replayed record by record: now the refusal reads it again, once per RELEARN_EVERY_S."""
    target, clock = Target(t=4 << 20), Clock()
    limits = TopicLimits(flow(), 1 << 20, describe=target, clock=clock)
    synced = {"dc1.t": LimitRead(4 << 20, clock.now)}
    limits.learn(["dc1.t"], lambda s: False, synced=synced)
    assert limits.budget("dc1.t") is None, "librdkafka's 1 MiB batches fit: nothing cut"
    target.limits["dc1.t"] = 65536
    clock.now += 5
    with caplog.at_level(logging.WARNING):
        assert limits.after_refusal("dc1.t", 900, 0), "lowered below librdkafka's batches: cut from now on"
    assert limits.budget("dc1.t") == 65536 - REQUEST_SLACK and len(target.asked) == 1
    assert "dc1.t takes batches of up to 65536 bytes now (max.message.bytes; 4194304 before)" in caplog.text
    # Batches handed over before that (other partitions', in flight) are refused too: replayed in batches, the target
    # not asked again.
    assert limits.after_refusal("dc1.t", 900, 0) and limits.after_refusal("dc1.t", 50, 2 * 65536)
    assert len(target.asked) == 1
    # The sync's read from before the change is not news: the budget stays at what the target says now.
    limits.learn(["dc1.t"], lambda s: False, synced=synced)
    assert limits.budget("dc1.t") == 65536 - REQUEST_SLACK
    # A batch cut to the budget refused: lowered again (read again), or a record larger than the topic takes
    # (careful mode finds it); the target is asked at most every RELEARN_EVERY_S.
    target.limits["dc1.t"] = 32768
    fitted = 65536 - REQUEST_SLACK
    clock.now += RELEARN_EVERY_S - 1
    assert not limits.after_refusal("dc1.t", 50, fitted) and len(target.asked) == 1, "asked again too soon"
    clock.now += 1
    assert limits.after_refusal("dc1.t", 50, fitted) and limits.budget("dc1.t") == 32768 - REQUEST_SLACK
    clock.now += RELEARN_EVERY_S
    assert not limits.after_refusal("dc1.t", 20, 32768 - REQUEST_SLACK), "unchanged: careful mode"
    assert not limits.after_refusal("dc1.t", 1, 0), "a lone record, the limit unchanged: careful mode"
    # The operator puts the limit back as it was: the sync's next read is followed, though it reads what it read
    # before the lowering.
    clock.now += 10
    limits.learn(["dc1.t"], lambda s: False, synced={"dc1.t": LimitRead(4 << 20, clock.now)})
    assert limits.budget("dc1.t") is None


def test_a_lone_record_refused_reads_the_limit_again_but_is_not_replayed_in_batches_on_the_budget_alone() -> None:
    """librdkafka may put lone records of a partition in one batch: a refused one says the limit may have been
    lowered (read again); but a record larger than any budget goes alone whatever the budget is."""
    target, clock = Target(t=4 << 20), Clock()
    limits = TopicLimits(flow(), 1 << 20, describe=target, clock=clock)
    limits.learn(["dc1.t"], lambda s: False)
    target.limits["dc1.t"] = 65536
    assert limits.after_refusal("dc1.t", 1, 0) and limits.budget("dc1.t") == 65536 - REQUEST_SLACK
    assert not limits.after_refusal("dc1.t", 1, 100_000), "the same record again: careful mode pauses it"


def test_a_limit_read_again_that_cuts_nothing_more_or_cannot_be_read_leaves_the_refusal_to_careful_mode() -> None:
    clock = Clock()

    def failing(remotes: list[str]) -> Describe:
        raise RuntimeError("no answer")

    assert not TopicLimits(flow(), 1 << 20, describe=failing, clock=clock).after_refusal("dc1.t", 9, 0)
    assert not TopicLimits(flow(), 1 << 20, describe=Target(), clock=clock).after_refusal("dc1.t", 9, 0), \
        "the target knows none"
    assert not TopicLimits(flow(), 1 << 20, clock=clock).after_refusal("dc1.t", 9, 0), "nothing to read it with"
    raised = TopicLimits(flow(), 1 << 20, describe=Target(t=2 << 20), clock=clock)
    raised.set({"dc1.t": 65536})
    assert not raised.after_refusal("dc1.t", 9, 1000) and raised.budget("dc1.t") is None, \
        "raised: followed, not a cause to replay"
