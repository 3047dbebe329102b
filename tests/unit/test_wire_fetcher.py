"""The batch fetcher's choice of partitions (mirror_core/wire/fetcher.py), without a broker: a partition whose
result is held is not asked again, and the order partitions are asked in rotates. And what the wire client's
workers say when they fail (mirror_core/wire/leaders.py): each failure once a minute, bugs told apart, the broker
named, and the end of an outage."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable

import pytest

from mirror_core.wire.codec import ProtocolError
from mirror_core.wire.connection import WireError
from mirror_core.wire.fetch import FetchedPartition
from mirror_core.wire.fetcher import BatchFetcher, FetchLimits
from mirror_core.wire.leaders import LEADERLESS_RETRY_S, LEADERLESS_SAY_S, RETRY_S, LeaderTracker, Outage, worker_failed
from mirror_core.wire.metadata import NO_LEADER, Brokers, ClusterMetadata, TopicMetadata


def assigned_at_zero(fetcher: BatchFetcher, partitions: int) -> list[tuple[str, int]]:
    """Partitions t[0..partitions) to fetch from offset 0, all led by broker 1 (no broker asked)."""
    tps = [("t", p) for p in range(partitions)]
    with fetcher._cond:
        fetcher._positions.update(dict.fromkeys(tps, 0))
        fetcher._generation.update(dict.fromkeys(tps, 1))
        fetcher._leaders.leaders.update(dict.fromkeys(tps, 1))
    return tps


def fetched(partition: int, batches: int = 0, last_stable: int = 100) -> FetchedPartition:
    """An answer for t[partition] (high watermark 100) with that many one-byte batches."""
    return FetchedPartition("t", partition, 0, 100, last_stable, 0, batches=[memoryview(b"b")] * batches,
                            size=batches)


def test_held_partitions_wait_and_the_others_are_asked_in_a_rotating_order() -> None:
    fetcher = BatchFetcher(Brokers("127.0.0.1:1", {}, "dc1"))
    try:
        tps = assigned_at_zero(fetcher, 4)
        with fetcher._cond:
            fetcher._leaders.leaders["t", 3] = 2  # another broker's
            first = list(fetcher._mine(1))
            assert sorted(first) == tps[:3] and fetcher._mine(1) == {}  # all held now
            fetcher._held.clear()
            second = list(fetcher._mine(1))
        assert sorted(second) == tps[:3] and second[0] != first[0]
        fetcher.resume(("t", 0), 7)
        with fetcher._cond:
            assert fetcher._mine(1) == {("t", 0): 7}  # resumed: asked again, from where the caller said
    finally:
        fetcher.close()


def test_while_the_caller_is_full_no_partition_is_asked() -> None:
    fetcher = BatchFetcher(Brokers("127.0.0.1:1", {}, "dc1"))
    try:
        tps = assigned_at_zero(fetcher, 3)
        fetcher.throttle(True)
        with fetcher._cond:
            assert fetcher._mine(1) == {} and not fetcher._held  # none asked, none marked held
        fetcher.throttle(False)
        with fetcher._cond:
            assert sorted(fetcher._mine(1)) == tps
    finally:
        fetcher.close()


def test_a_partition_whose_next_batch_did_not_fit_is_asked_first_for_more() -> None:
    """The broker returns a batch larger than the fetch size only to the first partition with records in its
    answer, and none of it elsewhere: asked anywhere else, such a partition moved on only when the rotation put
    it first."""
    fetcher = BatchFetcher(Brokers("127.0.0.1:1", {}, "dc1"), FetchLimits(max_bytes=1 << 20, partition_max_bytes=4096))
    try:
        tps = assigned_at_zero(fetcher, 5)
        asked = dict.fromkeys(tps, 10)
        # 1: behind, nothing, in an answer with room: outgrown. 0: the same, asked for 8 kB already. 2: nothing
        # new (at its end). 3: got records.
        answer = [fetched(1), fetched(0), fetched(3, 2), fetched(2, last_stable=10)]
        assert fetcher._outgrown(answer, asked, {tps[0]: 8192}) == {tps[1]: 8192, tps[0]: 16384}
        assert fetcher._outgrown([fetched(0)], asked, {tps[0]: 1 << 20}) == {}  # no room: more than half of 1 MB
        # The answer about full, counting a trailing part of a batch (its records' bytes, not its whole batches').
        full = [fetched(1), FetchedPartition("t", 3, 0, 100, 100, 0, batches=[memoryview(b"b")], size=522_000)]
        assert fetcher._outgrown(full, asked, {}) == {}  # perhaps no room for it
        with fetcher._cond:
            fetcher._first.add(tps[3])
            for _ in range(5):  # whatever the rotation
                assert next(iter(fetcher._mine(1))) == tps[3]
                fetcher._held.clear()
            fetcher._sizes[tps[3]] = 1 << 20
        fetcher.assign({tps[3]: 40})  # sought: its next batch is another one
        with fetcher._cond:
            assert tps[3] not in fetcher._first and tps[3] not in fetcher._sizes
    finally:
        fetcher.close()


class CountingBrokers(Brokers):
    """Real metadata requests, counted."""

    asked = 0

    def metadata(self, topics: Iterable[str]) -> ClusterMetadata:
        self.asked += 1
        return super().metadata(topics)


def test_a_broker_that_stays_down_is_one_line_not_one_per_retry(caplog: pytest.LogCaptureFixture) -> None:
    """Every worker retries an unreachable broker every 0.2-0.5 s: the same failure is said once a minute."""
    caplog.set_level(logging.INFO, logger="mirror_core.wire")
    brokers = CountingBrokers("127.0.0.1:1", {}, "cluster dc1")  # nothing listens on port 1
    fetcher = BatchFetcher(brokers)
    try:
        fetcher.assign({("t", 0): 0})
        deadline = time.monotonic() + 10
        while brokers.asked < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        fetcher.close()
    assert brokers.asked >= 3, "the precondition: the leader lookup failed again and again"
    said = [r.getMessage() for r in caplog.records]
    lines = [m for m in said if m.startswith("cluster dc1: ") and "no broker answered a metadata request" in m]
    assert len(lines) == 1, lines
    assert lines[0].startswith("cluster dc1: ") and "said at most once a minute" in lines[0]


def test_each_failure_text_and_each_bug_has_its_own_line(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="mirror_core.wire")
    brokers = Brokers("127.0.0.1:1", {}, "cluster dc1")

    def bug(which: int) -> KeyError:
        try:
            if which == 1:
                raise KeyError("one")
            raise KeyError("two")  # the same type, raised elsewhere: another bug
        except KeyError as exc:
            return exc

    for _ in range(3):
        worker_failed(brokers, WireError("cluster dc1 (broker a:1): cannot connect: refused"))
        worker_failed(brokers, WireError("cluster dc1 (broker b:2): cannot connect: refused"))
        worker_failed(brokers, bug(1))
        worker_failed(brokers, bug(2))
    said = [r.getMessage() for r in caplog.records]
    assert said.count("cluster dc1 (broker a:1): cannot connect: refused (said at most once a minute while it "
                      "lasts)") == 1
    assert sum("broker b:2" in line for line in said) == 1
    tracebacks = [r for r in caplog.records if r.exc_info is not None]
    assert len(tracebacks) == 2 and {str(r.exc_info[1]) for r in tracebacks if r.exc_info} == {"'one'", "'two'"}


def test_an_answer_that_does_not_parse_is_said_with_the_broker_it_came_from(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="mirror_core.wire")
    brokers = Brokers("127.0.0.1:1", {}, "cluster dc1")
    worker_failed(brokers, ProtocolError("response ends at byte 12 inside a field (>i)"), "cluster dc1 (broker a:1)")
    worker_failed(brokers, ProtocolError("response ends at byte 12 inside a field (>i)"), "cluster dc1 (broker b:2)")
    assert [r.getMessage() for r in caplog.records] == [
        f"cluster dc1 (broker {b}): response ends at byte 12 inside a field (>i) (said at most once a minute while "
        "it lasts)" for b in ("a:1", "b:2")]


def test_the_end_of_an_outage_is_said_and_a_later_one_is_said_again(caplog: pytest.LogCaptureFixture) -> None:
    """Failures in a row are one line; the first success after them says how long they lasted and lets the next
    outage be said. A link that flaps within the minute is not a pair of lines per flap."""
    caplog.set_level(logging.INFO, logger="mirror_core.wire")
    brokers = Brokers("127.0.0.1:1", {}, "cluster dc1")
    outage, where = Outage(brokers), "cluster dc1 (broker a:1)"
    refused = WireError(f"{where}: cannot connect: refused")
    outage.succeeded(where)  # no failure before: nothing to say
    for _flap in range(3):
        for _ in range(5):
            outage.failed(refused, where)
        outage.succeeded(where)
        outage.succeeded(where)
    said = [r.getMessage() for r in caplog.records]
    down = [m for m in said if m.startswith(f"{where}: cannot connect")]
    up = [m for m in said if m.startswith(f"{where}: answering again after ")]
    # The first outage and its end; the second outage (said again since the first ended); its end and the third
    # outage fall within the minute of the first end and the second outage's line.
    assert len(down) == 2 and len(up) == 1, said
    assert said.index(up[0]) == 1 and up[0].endswith(" s of failures")


def test_the_end_of_one_workers_outage_leaves_the_others_lines_throttled(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="mirror_core.wire")
    brokers = Brokers("127.0.0.1:1", {}, "cluster dc1")
    a, b = Outage(brokers), Outage(brokers)
    for _ in range(2):
        a.failed(WireError("cluster dc1 (broker a:1): cannot connect: refused"), "cluster dc1 (broker a:1)")
        b.failed(WireError("cluster dc1 (broker b:2): cannot connect: refused"), "cluster dc1 (broker b:2)")
        a.succeeded("cluster dc1 (broker a:1)")  # a is back (then down again); b stays down
    said = [r.getMessage() for r in caplog.records]
    assert sum("broker a:1): cannot connect" in m for m in said) == 2, said  # said again after its end
    assert sum("broker b:2): cannot connect" in m for m in said) == 1, said  # still the one line


class LeaderlessBrokers(Brokers):
    """A cluster whose metadata names no leader for partition 1 of topic t (an election that does not end)."""

    def metadata(self, topics: Iterable[str]) -> ClusterMetadata:
        return ClusterMetadata({}, {"t": TopicMetadata("t", 0, {0: 1, 1: NO_LEADER}, {0: 0, 1: 5})})


def test_a_partition_that_keeps_no_leader_is_said_and_asked_for_less_often(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="mirror_core.wire")
    started: list[int] = []
    stop = threading.Event()
    tracker = LeaderTracker(LeaderlessBrokers("127.0.0.1:1", {}, "source cluster dc1"), threading.Condition(),
                            started.append, stop)
    stop.set()  # its own thread ends: the rounds are driven here
    with tracker.lock:
        tracker.want([("t", 0), ("t", 1)])
    assert tracker._round() == RETRY_S and started == [1] and not caplog.records  # an election may be under way
    tracker._leaderless[("t", 1)] = time.monotonic() - LEADERLESS_SAY_S - 1
    assert tracker._round() == LEADERLESS_RETRY_S and tracker._round() == LEADERLESS_RETRY_S
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and said[0].startswith("source cluster dc1: no leader for t[1] (")
    assert "for 11 s or more" in said[0]


class ScriptedConnection:
    """A broker connection whose fetch answers are made up: ``fetch_request`` and ``parse_fetch`` are replaced
    (see the test) so that each request is recorded and each answer comes from the script."""

    where = "dc1 broker 1"
    max_answer_bytes = 100_000_000

    def version(self, api: int, versions: tuple[int, ...]) -> int:
        return versions[0]

    def expiring(self) -> bool:
        return False

    def close(self) -> None:
        pass

    def call(self, api: int, version: int, body: bytes, reuse: bool = False, limit: int | None = None) -> memoryview:
        return memoryview(body)


class ScriptedBrokers(Brokers):
    def connect(self, node: int, wait_s: float = 0.0) -> ScriptedConnection:  # type: ignore[override]
        return ScriptedConnection()


def test_the_fetch_loop_asks_an_outgrown_partition_first_next_time_unless_it_was_sought_meanwhile(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The wiring in the broker's fetch loop: the answer's outgrown partitions lead the next request, asking twice
    the size; one that got records is no longer first; one sought while its fetch was out is not flagged (its
    next batches are others)."""
    fetcher = BatchFetcher(ScriptedBrokers("127.0.0.1:1", {}, "dc1"),
                           FetchLimits(max_bytes=1 << 20, partition_max_bytes=4096))
    requests: list[tuple[dict[tuple[str, int], int], dict[tuple[str, int], int]]] = []

    def first(asked: list[tuple[str, int]]) -> list[FetchedPartition]:
        # 0 at its end, 1 got records (held), 2 and 3 behind with nothing: outgrown; 3 is sought meanwhile.
        fetcher.assign({("t", 3): 50})
        return [fetched(0, last_stable=0), fetched(1, 1), fetched(2), fetched(3)]

    def second(asked: list[tuple[str, int]]) -> list[FetchedPartition]:
        fetcher._stop.set()  # the loop ends once this answer is handled
        return [fetched(tp[1], 1) for tp in asked]  # records for all: nothing first any more

    def recorded(positions: dict[tuple[str, int], int], *args: object,
                 sizes: dict[tuple[str, int], int] | None = None) -> bytes:
        requests.append((dict(positions), dict(sizes or {})))
        return b""

    def answered(data: memoryview, where: str, check: bool = True) -> list[FetchedPartition]:
        return [first, second][len(requests) - 1](list(requests[-1][0]))

    monkeypatch.setattr("mirror_core.wire.fetcher.fetch_request", recorded)
    monkeypatch.setattr("mirror_core.wire.fetcher.parse_fetch", answered)
    try:
        tps = assigned_at_zero(fetcher, 4)
        worker = threading.Thread(target=fetcher._fetch_from, args=(1,), daemon=True)
        worker.start()
        worker.join(10)
        # (the loop retries what raises: a failure here is logged, and the requests below say how far it got)
        assert not worker.is_alive(), f"the fetch loop did not end; requests: {requests}"
        (asked1, sizes1), (asked2, sizes2) = requests
        assert sorted(asked1) == tps and sizes1 == {}
        assert not fetcher._first  # 2 got records: the next request has no one first
        # 1 is held (its result not resumed); 2 leads, for twice the size, where the rotation alone would have put 3
        # first; 3 sought: asked at its new position, at the usual size
        with fetcher._cond:
            fetcher._turn, fetcher._held = 1, {tps[1]}
            rotation = list(fetcher._mine(1))  # the second request's order, no one first now
        assert rotation[0] != tps[2]
        assert next(iter(asked2)) == tps[2] and sorted(asked2) == [tps[0], tps[2], tps[3]] and asked2[tps[3]] == 50
        assert sizes2 == {tps[2]: 8192}
        assert fetcher._sizes == {tps[2]: 8192}  # kept until sought
    finally:
        fetcher.close()


@pytest.mark.parametrize("answer_bytes", [1, 600_000], ids=["small answer", "half the answer's limit"])
def test_the_next_fetch_waits_a_little_for_the_partitions_just_handed_over(
        monkeypatch: pytest.MonkeyPatch, answer_bytes: int) -> None:
    """An answer took 80 ms (a WAN) with batches for partitions 0-6 and nothing for 7; the caller resumes 0-6 a few
    ms after it: the next fetch asks for all 8, not for 7 alone (which left 0-6 waiting a round trip for it, then
    fetched in turn with 7 for as long as the load lasted). An answer that filled half its limit is a backlog:
    the next fetch goes at once with what is not held."""
    fetcher = BatchFetcher(ScriptedBrokers("127.0.0.1:1", {}, "dc1"), FetchLimits(max_bytes=1 << 20))
    requests: list[dict[tuple[str, int], int]] = []

    def recorded(positions: dict[tuple[str, int], int], *args: object, **kwargs: object) -> bytes:
        requests.append(dict(positions))
        return b""

    def answered(data: memoryview, where: str, check: bool = True) -> list[FetchedPartition]:
        if len(requests) == 1:
            time.sleep(0.08)
            parts = [fetched(p, 1) for p in range(7)] + [fetched(7)]
            parts[0].size = answer_bytes
            return parts
        fetcher._stop.set()
        return []

    def caller() -> None:  # takes the answer's batches and resumes their partitions a little later
        got: list[FetchedPartition] = []
        deadline = time.monotonic() + 5
        while len(got) < 7 and time.monotonic() < deadline:
            got += fetcher.poll(0.01)
        time.sleep(0.005 if answer_bytes == 1 else 0.3)
        for part in got:
            fetcher.resume((part.topic, part.partition), 1)

    monkeypatch.setattr("mirror_core.wire.fetcher.fetch_request", recorded)
    monkeypatch.setattr("mirror_core.wire.fetcher.parse_fetch", answered)
    monkeypatch.setattr("mirror_core.wire.fetcher.GATHER_MAX_S", 2.0)  # (a busy machine: the wait ends on resume)
    monkeypatch.setattr("mirror_core.wire.fetcher.GATHER_SHARE", 25.0)
    try:
        tps = assigned_at_zero(fetcher, 8)
        taker = threading.Thread(target=caller, daemon=True)
        taker.start()
        worker = threading.Thread(target=fetcher._fetch_from, args=(1,), daemon=True)
        worker.start()
        worker.join(10)
        taker.join(10)
        assert not worker.is_alive(), f"the fetch loop did not end; requests: {requests}"
        assert sorted(requests[0]) == tps  # the precondition: all asked first, 0-6 then held by the caller
        if answer_bytes == 1:
            assert sorted(requests[1]) == tps and all(requests[1][tp] == 1 for tp in tps[:7])
        else:
            assert list(requests[1]) == [tps[7]]
    finally:
        fetcher.close()
