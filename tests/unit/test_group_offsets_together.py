"""committed_offsets_of: groups asked together (bounded), each group's failure its own, a stop honoured. The
per-group read is stubbed: what is tested is the fan-out; tests/integration/test_offsets.py reads real groups."""

from __future__ import annotations

import threading
import time

import pytest

import mirror_core.offsets.groups as groups_mod
from mirror_core.offsets.groups import PARALLEL_GROUPS, committed_offsets_of


class _Reads:
    def __init__(self, failing: set[str] | None = None, stop: threading.Event | None = None) -> None:
        self.lock, self.now, self.most, self.asked = threading.Lock(), 0, 0, []
        self.failing, self.stop = failing or set(), stop

    def __call__(self, _admin: object, group: str, _timeout: float = 15) -> dict[tuple[str, int], int]:
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


def test_groups_are_asked_together_but_no_more_than_the_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    reads = _Reads()
    monkeypatch.setattr(groups_mod, "committed_offsets", reads)
    names = [f"g{i}" for i in range(3 * PARALLEL_GROUPS)]
    t0 = time.monotonic()
    got = committed_offsets_of(object(), names)  # type: ignore[arg-type]
    assert list(got) == names and all(got[n] == {("t", 0): i} for i, n in enumerate(names))
    assert 1 < reads.most <= PARALLEL_GROUPS
    assert time.monotonic() - t0 < len(names) * 0.05 / 2  # not one after another


def test_a_groups_failure_is_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(groups_mod, "committed_offsets", _Reads(failing={"g2"}))
    got = committed_offsets_of(object(), ["g1", "g2", "g3"])  # type: ignore[arg-type]
    assert got["g1"] == {("t", 0): 1} and got["g3"] == {("t", 0): 3}
    assert isinstance(got["g2"], ValueError) and "g2 refused" in str(got["g2"])


def test_groups_not_yet_asked_when_stopping_are_not_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    stop = threading.Event()
    reads = _Reads(stop=stop)
    monkeypatch.setattr(groups_mod, "committed_offsets", reads)
    names = [f"g{i}" for i in range(4 * PARALLEL_GROUPS)]
    got = committed_offsets_of(object(), names, stop=stop)  # type: ignore[arg-type]
    stopped = [n for n, v in got.items() if isinstance(v, InterruptedError)]
    assert stopped and len(reads.asked) + len(stopped) == len(names)
    assert not set(stopped) & set(reads.asked)
