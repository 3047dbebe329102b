"""Who fenced a static member: another process (stop) or this one (rejoin) (pure logic of fencing.py)."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
from confluent_kafka import KafkaError, KafkaException

from mirror_core.config.loader import parse_text
from mirror_core.errors import FencedInstance
from mirror_core.replication.fencing import (
    MAX_REJOINS,
    FenceJudge,
    Holder,
    Ruling,
    StaticGroups,
    StaticMember,
    Verdict,
    describe_holder,
    error_text,
    judge,
    own_client_id,
)
from mirror_core.replication.reporting import CHECKING_FENCE, REJOINING_AFTER_FENCE, healthy_state

OURS = StaticMember("mirror-1", own_client_id("mirror-1", token="aaaa"), True)
SHARED = StaticMember("mirror-1", "payments", False)  # the user set client.id: every process has it


def test_each_process_names_its_static_consumers_unless_the_user_named_them() -> None:
    assert StaticMember.of("mirror-1", {"bootstrap.servers": "b:9092"}).settings == {
        "group.instance.id": "mirror-1", "client.id": own_client_id("mirror-1")}
    assert StaticMember.of("mirror-1", {"client.id": "payments"}).settings == {"group.instance.id": "mirror-1"}
    assert own_client_id("mirror-1", token="aaaa") != own_client_id("mirror-1", token="bbbb")


def test_a_holder_with_this_process_s_client_id_is_this_process() -> None:
    assert judge(OURS, Holder("mirror-1-new", str(OURS.client_id), "/10.0.0.1"), "mirror-1-old") is Verdict.SELF


def test_a_holder_with_another_client_id_is_another_process() -> None:
    other = own_client_id("mirror-1", token="bbbb")
    assert judge(OURS, Holder("mirror-1-new", other, "/10.0.0.2"), "mirror-1-old") is Verdict.OTHER


def test_no_holder_or_the_fenced_member_itself_means_no_one_else_has_the_id() -> None:
    assert judge(OURS, None, "mirror-1-old") is Verdict.SELF
    assert judge(SHARED, None, "") is Verdict.SELF
    assert judge(SHARED, Holder("mirror-1-old", "payments", "/10.0.0.1"), "mirror-1-old") is Verdict.SELF


def test_a_shared_client_id_cannot_tell_but_a_different_one_still_can() -> None:
    assert judge(SHARED, Holder("mirror-1-new", "payments", "/10.0.0.1"), "mirror-1-old") is Verdict.UNKNOWN
    assert judge(SHARED, Holder("mirror-1-new", "billing", "/10.0.0.1"), "mirror-1-old") is Verdict.OTHER


def test_an_unknown_fence_rejoins_once_per_window_and_another_process_never() -> None:
    now = [0.0]
    fences = FenceJudge(clock=lambda: now[0], window_s=600.0)
    assert fences.rule(Verdict.UNKNOWN) == Ruling()
    now[0] = 599.0  # a duplicate process fences this one again soon: this one stops
    assert "fenced again within 600s" in (fences.rule(Verdict.UNKNOWN).stop or "")
    assert fences.rule(Verdict.OTHER).stop == "another process joined with this instance id"
    now[0] = 1200.0  # long after: a new rejoin
    assert fences.rule(Verdict.UNKNOWN) == Ruling()


def test_fences_of_its_own_rejoin_at_once_up_to_the_cap_then_after_the_oldest_leaves_the_window() -> None:
    now = [0.0]
    fences = FenceJudge(clock=lambda: now[0], window_s=600.0)
    for i in range(MAX_REJOINS):
        now[0] = i * 10.0
        assert fences.rule(Verdict.SELF) == Ruling()
    # Past the cap the flow is not stopped for good (that would need a restart of the process): it waits
    # until the first rejoin (at 0) leaves the window, then the second (at 10), ...
    over = fences.rule(Verdict.SELF)
    assert over.stop is None and over.wait_s == 600.0 - now[0], over
    assert f"past {MAX_REJOINS} rejoins within 600s" in over.capped
    now[0] = 600.0  # it rejoined after that wait, and was fenced again at once: the rejoin at 10 leaves next
    assert fences.rule(Verdict.SELF).wait_s == 10.0
    now[0] = 2000.0  # long after every counted rejoin: at once again
    assert fences.rule(Verdict.SELF) == Ruling()


class _Description:
    def __init__(self, members: list[object]) -> None:
        self.members = members


class _Member:
    def __init__(self, instance: str | None, member_id: str, client_id: str) -> None:
        self.group_instance_id, self.member_id, self.client_id, self.host = instance, member_id, client_id, "/h"


class _Future:
    def __init__(self, value: object) -> None:
        self.value = value

    def result(self) -> object:
        if isinstance(self.value, Exception):
            raise self.value
        return self.value


class _Admin:
    """Answers each new client's describe with the next of ``answers``."""

    def __init__(self, answers: list[object]) -> None:
        self.answers, self.clients = answers, 0
        self.on_describe: Callable[[], object] = lambda: None

    def __call__(self) -> _Admin:
        self.clients += 1
        return self

    def describe_consumer_groups(self, groups: list[str], request_timeout: float) -> dict[str, _Future]:
        self.on_describe()
        return {groups[0]: _Future(self.answers.pop(0))}


def test_the_holder_is_asked_of_a_new_client_until_the_coordinator_answers() -> None:
    not_coordinator = KafkaException(KafkaError(KafkaError.NOT_COORDINATOR))
    admin = _Admin([not_coordinator, not_coordinator,
                    _Description([_Member("other", "o-1", "x"), _Member("mirror-1", "mirror-1-9", "c")])])
    waits: list[float] = []
    holder = describe_holder(admin, "g", "mirror-1", wait=waits.append)  # type: ignore[arg-type]
    assert holder == Holder("mirror-1-9", "c", "/h")
    assert admin.clients == 3 and waits == [1.0, 1.0]
    assert describe_holder(_Admin([_Description([_Member(None, "d-1", "x")])]), "g", "mirror-1") is None  # type: ignore[arg-type]
    with pytest.raises(KafkaException):
        describe_holder(_Admin([not_coordinator] * 2), "g", "mirror-1", attempts=2, wait=waits.append)  # type: ignore[arg-type]
    stopped = _Admin([not_coordinator] * 5)  # the flow stopped during the first wait: no more attempts
    with pytest.raises(KafkaException):
        describe_holder(stopped, "g", "mirror-1", wait=lambda _s: True)  # type: ignore[arg-type]
    assert stopped.clients == 1


def _groups(user: str = "", answers: list[object] | None = None,
            stop: threading.Event | None = None) -> tuple[StaticGroups, _Admin]:
    """The static groups of flow dc1->dc2 run with --instance-id mirror-1 (``user``: more config lines);
    each describe is answered by the next of ``answers``."""
    config = parse_text("clusters = dc1, dc2\ndc1.bootstrap.servers = a:1\ndc2.bootstrap.servers = b:2\n"
                        "dc1->dc2.enabled = true\n" + user, validate_clients=False)
    admin = _Admin(list(answers or []))
    return StaticGroups(config, config.flows[0], "mirror-1", stop or threading.Event(),
                        admin=lambda _cluster: admin(), retry_s=0.001), admin  # type: ignore[arg-type,return-value]


def test_a_failed_describe_is_taken_for_a_fence_of_its_own_with_any_client_id() -> None:
    down = KafkaException(KafkaError(KafkaError._TRANSPORT, "all brokers down"))
    for user in ("", "dc1.client.id = payments\n"):  # this process's own client.id, or the user's shared one
        groups, admin = _groups(user, [down] * 5)
        exc = _fence_of(groups)
        ruling = groups.rejoin_after(exc)
        assert ruling is not None and ruling.stop is None, (user, exc)
        assert "one taken for this process's own" in str(exc) and "all brokers down" in str(exc), exc
        assert admin.clients == 5


def test_any_error_of_the_describe_is_judged_not_raised() -> None:
    groups, _ = _groups("", [RuntimeError("boom")] * 5)
    exc = _fence_of(groups)
    ruling = groups.rejoin_after(exc)
    assert ruling is not None and ruling.stop is None and "boom" in str(exc)
    assert error_text(KafkaException(KafkaError(KafkaError.NOT_COORDINATOR, "moving"))) == "moving"
    assert error_text(ValueError()) == "ValueError"


def test_a_stop_during_the_describe_judges_nothing() -> None:
    stop = threading.Event()
    stop.set()
    groups, admin = _groups("dc1.client.id = payments\n", [], stop)
    assert groups.rejoin_after(_fence_of(groups)) is None and admin.clients == 0  # not even asked
    later = threading.Event()
    groups, admin = _groups("", [KafkaException(KafkaError(KafkaError.NOT_COORDINATOR))] * 5, later)
    admin.on_describe = later.set  # the flow is stopped while the first describe is out
    assert groups.rejoin_after(_fence_of(groups)) is None and admin.clients == 1


def test_the_holder_decides_and_is_named() -> None:
    other = _Member("mirror-1", "mirror-1-new", "mirror-core-mirror-1-ffffffff")
    groups, _ = _groups("", [_Description([other])])
    exc = _fence_of(groups)
    ruling = groups.rejoin_after(exc)
    assert ruling is not None and ruling.stop == "another process joined with this instance id"
    assert "it is held by member mirror-1-new (client.id mirror-core-mirror-1-ffffffff, host h)" in str(exc)
    assert "--instance-id" in str(exc)


def _fence_of(groups: StaticGroups) -> FencedInstance:
    """A fence of the flow's worker group (the one group of a flow that is not exactly-once's slots)."""
    group = next(g for g in groups._groups if not g.endswith(".slots"))
    return FencedInstance(f"group {group} fenced this process's instance id (FENCED_INSTANCE_ID)", group,
                          "mirror-1-old")


def test_the_states_on_the_way_back_from_a_fence_of_its_own_are_healthy() -> None:
    assert healthy_state("running")
    assert healthy_state(f"{CHECKING_FENCE}: group g on dc1 fenced instance id mirror-1 (FENCED_INSTANCE_ID)")
    assert healthy_state(f"{REJOINING_AFTER_FENCE} (at 10:00:00 UTC): group g ...")
    assert not healthy_state("restarting after error (at 10:00:00 UTC): the target refused ...")
    assert not healthy_state("waiting for clusters: cannot connect")
