"""Operators' topic controls (pause/resume a topic or partition, bandwidth limits of a flow or topic) in
the state store, on SQLite and on a real PostgreSQL server started by the harness."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import FrozenInstanceError
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from sqlalchemy import create_engine, inspect

from mirror_core.state.errors import StateStoreError
from mirror_core.state.models import TopicControlRecord
from mirror_core.state.store import StateStore, alembic_config
from tests.pg_harness import postgres_server


@pytest.fixture(scope="module")
def postgres_url() -> Iterator[str]:
    with postgres_server() as url:
        yield url


@pytest.fixture(params=["sqlite", "postgresql"])
def empty_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A database with no tables yet (a new PostgreSQL database per test)."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'state.db'}"
    server: str = request.getfixturevalue("postgres_url")
    name = f"m{uuid.uuid4().hex[:12]}"
    admin = create_engine(server, isolation_level="AUTOCOMMIT")
    with admin.connect() as c:
        c.exec_driver_sql(f"CREATE DATABASE {name}")
    admin.dispose()
    return server.rsplit("/", 1)[0] + f"/{name}"


@pytest.fixture()
def store(empty_url: str) -> StateStore:
    s = StateStore(empty_url)
    s.migrate()
    return s


def flow() -> str:
    tag = uuid.uuid4().hex[:8]
    return f"s{tag}->t{tag}"


def test_pause_resume_a_topic_and_a_partition(store: StateStore) -> None:
    f = flow()
    before = datetime.now(UTC)
    topic = store.pause_topic(f, "orders", "alice", "backfill\nsaturates the link")
    assert isinstance(topic, TopicControlRecord)
    assert (topic.flow, topic.kind, topic.topic, topic.partition, topic.limit_bytes_per_s) == (
        f, "pause", "orders", None, None)
    assert (topic.reason, topic.set_by, topic.cleared_at, topic.cleared_by, topic.clear_reason) == (
        "backfill saturates the link", "alice", None, None, None)  # the reason is one line
    assert topic.set_at.tzinfo is not None and before - timedelta(seconds=1) <= topic.set_at
    assert topic.active and (topic.scope, topic.where) == ("orders", f"{f} orders")
    with pytest.raises(FrozenInstanceError):
        topic.reason = "x"  # type: ignore[misc]
    # A partition of the same topic is another scope; so is another flow.
    part = store.pause_topic(f, "orders", "bob", "poison record at 17", partition=3)
    assert (part.partition, part.where) == (3, f"{f} orders[3]")
    zero = store.pause_topic(f, "orders", "bob", "partition 0 too", partition=0)
    other = store.pause_topic(flow(), "orders", "carol", "elsewhere")
    assert [c.id for c in store.active_topic_controls([f])] == [topic.id, zero.id, part.id]  # by scope
    assert store.active_topic_controls([]) == []
    assert {c.id for c in store.active_topic_controls(None)} >= {topic.id, part.id, zero.id, other.id}
    assert store.active_topic_controls(iter([other.flow])) == [other]

    resumed = store.resume_topic(f, "orders", "dave", "backfill done")
    assert resumed.id == topic.id and not resumed.active
    assert (resumed.cleared_by, resumed.clear_reason, resumed.reason) == ("dave", "backfill done",
                                                                         "backfill saturates the link")
    assert resumed.cleared_at is not None and resumed.cleared_at.tzinfo is not None
    assert resumed.cleared_at >= resumed.set_at - timedelta(seconds=1)
    assert {c.id for c in store.active_topic_controls([f])} == {part.id, zero.id}
    store.resume_topic(f, "orders", "dave", "record fixed", partition=3)
    assert [c.id for c in store.active_topic_controls([f])] == [zero.id]
    # Resumed, it can be paused again; the history keeps everything, newest first.
    again = store.pause_topic(f, "orders", "erin", "again")
    history = store.topic_control_history(f)
    assert [h.id for h in history] == [again.id, zero.id, part.id, topic.id]
    assert [h.active for h in history] == [True, True, False, False]
    assert [h.id for h in store.topic_control_history(f, limit=1)] == [again.id]
    assert {h.id for h in store.topic_control_history()} >= {again.id, other.id}


def test_a_scope_paused_twice_is_refused_in_one_line(store: StateStore) -> None:
    f = flow()
    first = store.pause_topic(f, "orders", "alice", "backfill", partition=2)
    with pytest.raises(StateStoreError) as refused:
        store.pause_topic(f, "orders", "bob", "another reason", partition=2)
    message = str(refused.value)
    assert "\n" not in message and message.endswith("nothing was recorded")
    assert (f"{f} orders[2] is paused since {first.set_at:%Y-%m-%d %H:%M:%S} UTC by alice (backfill)"
            in message), message
    assert store.topic_control_history(f) == [first]


def test_resume_of_what_an_operator_did_not_pause_is_refused(store: StateStore) -> None:
    f = flow()
    with pytest.raises(StateStoreError, match=rf"^resume refused on {f} orders: {f} orders is not paused by an "
                                              "operator; nothing was recorded$"):
        store.resume_topic(f, "orders", "alice", "go")
    store.pause_topic(f, "orders", "alice", "whole topic")
    with pytest.raises(StateStoreError, match=r"orders\[1\] is not paused by an operator"):
        store.resume_topic(f, "orders", "alice", "go", partition=1)  # the topic is, not the partition
    assert len(store.active_topic_controls([f])) == 1


def test_limits_replace_and_lift(store: StateStore) -> None:
    f = flow()
    whole = store.limit_bandwidth(f, "alice", "share the WAN link", 50_000_000)
    assert (whole.kind, whole.topic, whole.partition, whole.limit_bytes_per_s, whole.where) == (
        "limit", None, None, 50_000_000, f"{f} (whole flow)")
    topic = store.limit_bandwidth(f, "alice", "backfill", 2**40, topic="orders")  # 64-bit
    assert topic.limit_bytes_per_s == 2**40
    replaced = store.limit_bandwidth(f, "bob", "more for the flow", 80_000_000)
    active = {c.scope: c for c in store.active_topic_controls([f])}
    assert {s: c.limit_bytes_per_s for s, c in active.items()} == {"": 80_000_000, "orders": 2**40}
    assert active[""].id == replaced.id != whole.id
    old = next(h for h in store.topic_control_history(f) if h.id == whole.id)
    assert (old.cleared_by, old.clear_reason) == ("bob", "replaced by 80000000 bytes/s: more for the flow")
    lifted = store.unlimit_bandwidth(f, "carol", "backfill done", topic="orders")
    assert lifted.id == topic.id and lifted.cleared_by == "carol" and not lifted.active
    assert [c.id for c in store.active_topic_controls([f])] == [replaced.id]
    with pytest.raises(StateStoreError, match=rf"^unlimit refused on {f} orders: {f} orders has no bandwidth "
                                              "limit; nothing was recorded$"):
        store.unlimit_bandwidth(f, "carol", "again", topic="orders")
    store.unlimit_bandwidth(f, "carol", "link upgraded")
    assert store.active_topic_controls([f]) == []


REFUSALS: list[tuple[Callable[..., Any], dict[str, Any], str]] = [
    (StateStore.pause_topic, dict(flow="dc1"), "is not a flow"),
    (StateStore.pause_topic, dict(flow="dc1->dc2; drop"), "is not a flow"),
    (StateStore.pause_topic, dict(topic=""), "the topic is empty"),
    (StateStore.pause_topic, dict(topic="orders.*"), "not a pattern"),
    (StateStore.pause_topic, dict(topic="x" * 250), "not a topic name"),
    (StateStore.pause_topic, dict(partition=-1), "partition -1 is negative"),
    (StateStore.pause_topic, dict(partition=2**31), "beyond Kafka's partition numbers"),
    (StateStore.pause_topic, dict(reason=" "), "a reason is needed"),
    (StateStore.pause_topic, dict(set_by=""), "who does it"),
    (StateStore.resume_topic, dict(cleared_by="x" * 251), "who does it"),
    (StateStore.resume_topic, dict(reason=""), "a reason is needed"),
    (StateStore.limit_bandwidth, dict(bytes_per_s=0), "must be > 0, got 0"),
    (StateStore.limit_bandwidth, dict(bytes_per_s=-5), "must be > 0, got -5"),
    (StateStore.limit_bandwidth, dict(bytes_per_s=2**63), "beyond what can be recorded"),
    (StateStore.limit_bandwidth, dict(bytes_per_s=True), "must be an integer"),
    (StateStore.limit_bandwidth, dict(topic="a b"), "not a topic name"),
    (StateStore.unlimit_bandwidth, dict(reason=""), "a reason is needed"),
]


@pytest.mark.parametrize(("method", "change", "says"), REFUSALS, ids=[f"{m.__name__}-{s}" for m, _, s in REFUSALS])
def test_refusals_are_one_line_and_write_nothing(store: StateStore, method: Callable[..., Any],
                                                 change: dict[str, Any], says: str) -> None:
    f = flow()
    store.limit_bandwidth(f, "alice", "so unlimit has something", 1000)
    store.pause_topic(f, "orders", "alice", "so resume has something")
    before = store.topic_control_history(f)
    who = "set_by" if method in (StateStore.pause_topic, StateStore.limit_bandwidth) else "cleared_by"
    args: dict[str, Any] = {"flow": f, who: "alice", "reason": "why"}
    if method is not StateStore.unlimit_bandwidth and method is not StateStore.limit_bandwidth:
        args["topic"] = "orders"
    if method is StateStore.limit_bandwidth:
        args["bytes_per_s"] = 1000
    with pytest.raises(StateStoreError) as refused:
        method(store, **{**args, **change})
    message = str(refused.value)
    assert says in message and "\n" not in message, message
    assert message.endswith("nothing was recorded")
    assert store.topic_control_history(f) == before


def _at_once(n: int, act: Callable[[int], object]) -> list[object]:
    start = threading.Barrier(n)
    results: list[object] = []

    def run(i: int) -> None:
        start.wait()
        try:
            results.append(act(i))
        except StateStoreError as exc:
            results.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(results) == n
    return results


def test_concurrent_operators_change_a_scope_once(store: StateStore) -> None:
    f = flow()
    paused = _at_once(6, lambda i: store.pause_topic(f, "orders", f"op{i}", "at once", partition=0))
    won = [r for r in paused if isinstance(r, TopicControlRecord)]
    assert len(won) == 1, paused
    assert all("is paused since" in str(r) and "\n" not in str(r) for r in paused if r not in won)
    resumed = _at_once(6, lambda i: store.resume_topic(f, "orders", f"op{i}", "at once", partition=0))
    assert len([r for r in resumed if isinstance(r, TopicControlRecord)]) == 1, resumed
    assert all("is not paused by an operator" in str(r) for r in resumed if isinstance(r, StateStoreError))
    assert [h.cleared_by is not None for h in store.topic_control_history(f)] == [True]

    limited = _at_once(6, lambda i: store.limit_bandwidth(f, f"op{i}", "at once", 1000 * (i + 1)))
    ok = [r for r in limited if isinstance(r, TopicControlRecord)]
    refused = [r for r in limited if isinstance(r, StateStoreError)]
    assert ok and all("another operator changed it at the same moment" in str(r) for r in refused), limited
    [active] = store.active_topic_controls([f])
    assert active.kind == "limit" and active.id == max(r.id for r in ok)  # the last one standing
    assert len(store.topic_control_history(f)) == 1 + len(ok)


def _tables(url: str) -> set[str]:
    engine = create_engine(url)
    try:
        return set(inspect(engine).get_table_names())
    finally:
        engine.dispose()


def test_the_migration_applies_on_a_store_at_0007_and_back(empty_url: str) -> None:
    old = StateStore(empty_url)
    with old.engine.begin() as connection:
        cfg = alembic_config(empty_url)
        cfg.attributes["connection"] = connection
        command.upgrade(cfg, "0007")
    assert "topic_controls" not in _tables(empty_url)
    old.set_flow_desired("a->b", "stopped", "carol", "kept across the migration")
    old.engine.dispose()

    s = StateStore(empty_url)
    s.migrate()
    s.migrate()  # idempotent
    assert "topic_controls" in _tables(empty_url)
    assert s.flow_controls()["a->b"].reason == "kept across the migration"
    p = s.pause_topic("a->b", "orders", "alice", "after the migration")
    assert s.active_topic_controls(["a->b"]) == [p]
    names = {ix["name"] for ix in inspect(s.engine).get_indexes("topic_controls")}
    assert {"ix_topic_controls_flow_cleared_at", "uq_topic_controls_active"} <= names
    with s.engine.begin() as connection:
        cfg = alembic_config(empty_url)
        cfg.attributes["connection"] = connection
        command.check(cfg)  # the migrated schema matches the models
        command.downgrade(cfg, "0007")
    assert "topic_controls" not in _tables(empty_url)
    s.migrate()
    assert s.topic_control_history() == []
