"""committed_offsets_of: groups described in one request, their offsets listed together (bounded), each group's
failure its own, a stop honoured. The client is stubbed: what is tested is the fan-out;
tests/integration/test_offsets.py reads real groups."""

from __future__ import annotations

import concurrent.futures
import threading
import time
from types import SimpleNamespace

import pytest
from confluent_kafka import ConsumerGroupState, KafkaError, KafkaException

import mirror_core.offsets.groups as groups_mod
from mirror_core.offsets.groups import PARALLEL_GROUPS, committed_offsets_of


class _Reads:
    def __init__(self, failing: set[str] | None = None, stop: threading.Event | None = None) -> None:
        self.lock, self.now, self.most, self.asked = threading.Lock(), 0, 0, []
        self.failing, self.stop = failing or set(), stop

    def __call__(self, _admin: object, group: str, _timeout: float, _deadline: float) -> dict[tuple[str, int], int]:
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)
            self.asked.append(group)
        time.sleep(0.05)
        with self.lock:
            self.now -= 1
        if self.stop is not None and group == "g3":
            self.stop.set()
        if group in self.failing:
            raise ValueError(f"{group} refused")
        return {("t", 0): int(group[1:])}


class _Admin:
    """describe_consumer_groups only: each call recorded; a group in ``loading`` answers COORDINATOR_LOAD_IN_PROGRESS
    that many times; a group in ``dead`` is DEAD; an id in ``refused`` makes the client refuse the whole request."""

    def __init__(self, loading: dict[str, int] | None = None, dead: frozenset[str] = frozenset(),
                 refused: frozenset[str] = frozenset()) -> None:
        self.calls: list[list[str]] = []
        self.loading, self.dead, self.refused = dict(loading or {}), dead, refused

    def describe_consumer_groups(self, groups: list[str], request_timeout: float
                                 ) -> dict[str, concurrent.futures.Future[object]]:
        self.calls.append(list(groups))
        if set(groups) & self.refused:
            raise ValueError("an id the client refuses")
        out: dict[str, concurrent.futures.Future[object]] = {}
        for g in groups:
            out[g] = f = concurrent.futures.Future()
            if self.loading.get(g, 0) > 0:
                self.loading[g] -= 1
                f.set_exception(KafkaException(KafkaError(KafkaError.COORDINATOR_LOAD_IN_PROGRESS)))
            else:
                f.set_result(SimpleNamespace(state=ConsumerGroupState.DEAD if g in self.dead
                                             else ConsumerGroupState.STABLE, members=[]))
        return out


@pytest.fixture
def stable(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every group described as stable, without a client."""
    monkeypatch.setattr(groups_mod, "_describe_all", lambda _a, groups, _d: {
        g: SimpleNamespace(state=ConsumerGroupState.STABLE) for g in groups})


def test_groups_are_asked_together_but_no_more_than_the_bound(monkeypatch: pytest.MonkeyPatch, stable: None) -> None:
    reads = _Reads()
    monkeypatch.setattr(groups_mod, "_listed_offsets", reads)
    names = [f"g{i}" for i in range(3 * PARALLEL_GROUPS)]
    t0 = time.monotonic()
    got = committed_offsets_of(object(), names)  # type: ignore[arg-type]
    assert list(got) == names and all(got[n] == {("t", 0): i} for i, n in enumerate(names))
    assert 1 < reads.most <= PARALLEL_GROUPS
    assert time.monotonic() - t0 < len(names) * 0.05 / 2  # not one after another


def test_a_groups_failure_is_its_own(monkeypatch: pytest.MonkeyPatch, stable: None) -> None:
    monkeypatch.setattr(groups_mod, "_listed_offsets", _Reads(failing={"g2"}))
    got = committed_offsets_of(object(), ["g1", "g2", "g3"])  # type: ignore[arg-type]
    assert got["g1"] == {("t", 0): 1} and got["g3"] == {("t", 0): 3}
    assert isinstance(got["g2"], ValueError) and "g2 refused" in str(got["g2"])


def test_groups_not_yet_asked_when_stopping_are_not_asked(monkeypatch: pytest.MonkeyPatch, stable: None) -> None:
    stop = threading.Event()
    reads = _Reads(stop=stop)
    monkeypatch.setattr(groups_mod, "_listed_offsets", reads)
    names = [f"g{i}" for i in range(4 * PARALLEL_GROUPS)]
    got = committed_offsets_of(object(), names, stop=stop)  # type: ignore[arg-type]
    stopped = [n for n, v in got.items() if isinstance(v, InterruptedError)]
    assert stopped and len(reads.asked) + len(stopped) == len(names)
    assert not set(stopped) & set(reads.asked)


def test_groups_are_described_in_one_request_and_dead_ones_not_listed(monkeypatch: pytest.MonkeyPatch) -> None:
    reads, admin = _Reads(), _Admin(dead=frozenset({"g2"}))
    monkeypatch.setattr(groups_mod, "_listed_offsets", reads)
    got = committed_offsets_of(admin, ["g1", "g2", "g3", "g1"])  # type: ignore[arg-type]
    assert admin.calls == [["g1", "g2", "g3"]]  # once, and each group once
    assert got == {"g1": {("t", 0): 1}, "g2": {}, "g3": {("t", 0): 3}} and sorted(reads.asked) == ["g1", "g3"]


def test_a_loading_coordinator_is_asked_again_for_its_groups_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(groups_mod, "_listed_offsets", _Reads())
    admin = _Admin(loading={"g2": 2})
    got = committed_offsets_of(admin, ["g1", "g2", "g3"])  # type: ignore[arg-type]
    assert admin.calls == [["g1", "g2", "g3"], ["g2"], ["g2"]]
    assert got["g2"] == {("t", 0): 2}


def test_a_coordinator_loading_past_the_timeout_fails_its_group_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(groups_mod, "_listed_offsets", _Reads())
    got = committed_offsets_of(_Admin(loading={"g2": 100}), ["g1", "g2"], timeout=1)  # type: ignore[arg-type]
    assert got["g1"] == {("t", 0): 1}
    assert isinstance(got["g2"], KafkaException) and "LOAD_IN_PROGRESS" in str(got["g2"])


def test_an_id_the_client_refuses_fails_that_group_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(groups_mod, "_listed_offsets", _Reads())
    admin = _Admin(refused=frozenset({"g9"}))
    got = committed_offsets_of(admin, ["g1", "g9", "g3"])  # type: ignore[arg-type]
    assert got["g1"] == {("t", 0): 1} and got["g3"] == {("t", 0): 3}
    assert isinstance(got["g9"], ValueError) and "refuses" in str(got["g9"])
