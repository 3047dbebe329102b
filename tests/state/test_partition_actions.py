"""Operator actions on a paused source partition (resume, skip an offset range) in the state store, on
SQLite and on a real PostgreSQL server started by the harness."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from dataclasses import FrozenInstanceError
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from sqlalchemy import create_engine, inspect

from mirror_core.state import store as store_module
from mirror_core.state.errors import StateStoreError
from mirror_core.state.models import PartitionActionRecord
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


def test_request_pending_complete_and_history(store: StateStore) -> None:
    f, other = flow(), flow()
    before = datetime.now(UTC)
    skip = store.request_partition_action(f, "orders", 0, "skip", "alice", "CRC mismatch at 3061", 3061, 3263)
    assert isinstance(skip, PartitionActionRecord)
    assert (skip.flow, skip.topic, skip.partition, skip.action, skip.first_offset, skip.last_offset) == (
        f, "orders", 0, "skip", 3061, 3263)
    assert (skip.reason, skip.requested_by, skip.applied_at, skip.applied_by, skip.outcome, skip.ok) == (
        "CRC mismatch at 3061", "alice", None, None, None, None)
    assert before - timedelta(seconds=1) <= skip.requested_at <= datetime.now(UTC) + timedelta(seconds=1)
    assert skip.requested_at.tzinfo is not None and skip.pending
    assert (skip.where, skip.offsets) == (f"{f} orders[0]", "3061-3263")
    with pytest.raises(FrozenInstanceError):
        skip.ok = True  # type: ignore[misc]
    resume = store.request_partition_action(f, "orders", 1, "resume", "bob", "leader moved to broker 2")
    assert (resume.first_offset, resume.last_offset, resume.offsets) == (None, None, "")
    one = store.request_partition_action(other, "payments", 3, "skip", "carol", "refused by target", 7, 7)
    assert one.offsets == "7"
    big = 2**40  # offsets are 64-bit
    store.request_partition_action(f, "orders", 2, "skip", "alice", "damaged", big, big + 10)

    pending = store.pending_partition_actions([f])
    assert [(p.topic, p.partition) for p in pending] == [("orders", 0), ("orders", 1), ("orders", 2)]  # oldest first
    assert pending[2].first_offset == big and pending[2].last_offset == big + 10
    assert {p.id for p in store.pending_partition_actions([f, other])} == {p.id for p in pending} | {one.id}
    assert store.pending_partition_actions([]) == []
    assert store.pending_partition_actions(iter([other])) == [one]

    assert store.complete_partition_action(skip.id, "mirror-0", "skipped 203 records\n(offsets 3061-3263)", True)
    assert store.complete_partition_action(resume.id, "mirror-1", "fetch failed again: CRC mismatch", False)
    assert [p.partition for p in store.pending_partition_actions([f])] == [2]

    history = store.partition_actions(f)
    assert [h.partition for h in history] == [2, 1, 0]  # newest first
    done = history[2]
    assert (done.applied_by, done.outcome, done.ok, done.pending) == (
        "mirror-0", "skipped 203 records (offsets 3061-3263)", True, False)  # the outcome is one line
    assert done.applied_at is not None and done.applied_at.tzinfo is not None
    assert done.applied_at >= done.requested_at - timedelta(seconds=1)
    assert (history[1].ok, history[1].applied_by) == (False, "mirror-1")
    assert [h.id for h in store.partition_actions(f, limit=1)] == [history[0].id]
    assert {h.id for h in store.partition_actions()} >= {skip.id, resume.id, one.id}
    # Once applied, the partition takes a new action.
    again = store.request_partition_action(f, "orders", 0, "resume", "alice", "after the skip, still paused")
    assert again.id > skip.id and again.pending


def test_complete_only_once(store: StateStore) -> None:
    f = flow()
    a = store.request_partition_action(f, "orders", 0, "resume", "alice", "leader moved")
    assert store.complete_partition_action(a.id, "mirror-0", "resumed at 3061", True) is True
    assert store.complete_partition_action(a.id, "mirror-1", "resumed at 3061", True) is False
    [row] = store.partition_actions(f)
    assert (row.applied_by, row.outcome) == ("mirror-0", "resumed at 3061")  # the first completion stands
    assert store.complete_partition_action(10**9, "mirror-0", "nothing", True) is False


REFUSALS: list[tuple[dict[str, Any], str]] = [
    (dict(action="pause"), "unknown action 'pause'"),
    (dict(reason=""), "a reason is needed"),
    (dict(reason="   "), "a reason is needed"),
    (dict(requested_by=""), "who requests it"),
    (dict(requested_by="x" * 251), "who requests it"),
    (dict(partition=-1), "partition -1 is negative"),
    (dict(partition=2**31), "beyond Kafka's partition numbers"),
    (dict(last_offset=2**63), "beyond Kafka's offsets"),
    (dict(topic=""), "a source topic"),
    (dict(first_offset=None, last_offset=None), "'skip' needs the offsets"),
    (dict(first_offset=5, last_offset=None), "'skip' needs the offsets"),
    (dict(first_offset=10, last_offset=9), "the first is after the last"),
    (dict(first_offset=-1, last_offset=9), "negative offset"),
    (dict(action="resume"), "'resume' takes no offsets"),
    (dict(action="resume", first_offset=None), "'resume' takes no offsets"),
]


@pytest.mark.parametrize(("change", "says"), REFUSALS, ids=[s for _, s in REFUSALS])
def test_refusals_are_one_line_and_write_nothing(store: StateStore, change: dict[str, Any], says: str) -> None:
    f = flow()
    request: dict[str, Any] = dict(flow=f, topic="orders", partition=0, action="skip", requested_by="alice",
                                   reason="CRC mismatch", first_offset=3061, last_offset=3263)
    with pytest.raises(StateStoreError) as refused:
        store.request_partition_action(**{**request, **change})
    message = str(refused.value)
    assert says in message and "\n" not in message, message
    assert "nothing was recorded" in message
    assert store.partition_actions(f) == [] and store.pending_partition_actions([f]) == []


def test_a_second_pending_action_on_a_partition_is_refused(store: StateStore) -> None:
    f = flow()
    first = store.request_partition_action(f, "orders", 0, "skip", "alice", "CRC mismatch", 3061, 3263)
    with pytest.raises(StateStoreError) as refused:
        store.request_partition_action(f, "orders", 0, "resume", "bob", "leader moved")
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith(f"an action on {f} orders[0] is pending since {first.requested_at:%Y-%m-%d %H:%M:%S}")
    assert "requested by alice" in message and "wait for it to apply" in message and f"id {first.id}" in message
    assert store.partition_actions(f) == [first]
    # Other partitions, topics and flows are independent.
    store.request_partition_action(f, "orders", 1, "resume", "bob", "leader moved")
    store.request_partition_action(f, "payments", 0, "resume", "bob", "leader moved")
    store.request_partition_action(flow(), "orders", 0, "resume", "bob", "leader moved")


def test_the_pending_check_holds_when_the_select_misses_a_concurrent_request(
        store: StateStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two requests that both passed the SELECT: the unique pending index refuses the second insert."""
    f = flow()
    first = store.request_partition_action(f, "orders", 0, "skip", "alice", "CRC mismatch", 3061, 3263)
    real = store_module._pending_on
    calls: list[int] = []

    def blind_first(flow: str, topic: str, partition: int) -> Any:
        calls.append(1)
        query = real(flow, topic, partition)
        return query.where(query.selected_columns.id < 0) if len(calls) == 1 else query

    monkeypatch.setattr(store_module, "_pending_on", blind_first)
    with pytest.raises(StateStoreError, match=rf"is pending since .* \(id {first.id}, .*requested by alice\)"):
        store.request_partition_action(f, "orders", 0, "resume", "bob", "leader moved")
    assert store.partition_actions(f) == [first]


def test_concurrent_requests_record_one(store: StateStore) -> None:
    f = flow()
    start = threading.Barrier(6)
    results: list[object] = []

    def request(i: int) -> None:
        start.wait()
        try:
            results.append(store.request_partition_action(f, "orders", 0, "resume", f"op{i}", "leader moved"))
        except StateStoreError as exc:
            results.append(exc)

    threads = [threading.Thread(target=request, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    recorded = [r for r in results if isinstance(r, PartitionActionRecord)]
    assert len(results) == 6 and len(recorded) == 1, results
    assert all("is pending since" in str(r) for r in results if not isinstance(r, PartitionActionRecord))
    assert store.partition_actions(f) == recorded


def _tables(url: str) -> set[str]:
    engine = create_engine(url)
    try:
        return set(inspect(engine).get_table_names())
    finally:
        engine.dispose()


def test_the_migration_applies_on_a_fresh_store_and_on_one_at_0004(empty_url: str) -> None:
    old = StateStore(empty_url)
    with old.engine.begin() as connection:
        cfg = alembic_config(empty_url)
        cfg.attributes["connection"] = connection
        command.upgrade(cfg, "0004")
    assert "failovers" in _tables(empty_url) and "partition_actions" not in _tables(empty_url)
    old.set_flow_desired("a->b", "stopped", "carol", "kept across the migration")
    old.engine.dispose()

    s = StateStore(empty_url)
    s.migrate()
    assert "partition_actions" in _tables(empty_url)
    assert s.flow_controls()["a->b"].reason == "kept across the migration"
    a = s.request_partition_action("a->b", "orders", 0, "resume", "alice", "leader moved")
    assert s.pending_partition_actions(["a->b"]) == [a]
    names = {ix["name"] for ix in inspect(s.engine).get_indexes("partition_actions")}
    assert {"ix_partition_actions_flow_applied_at", "uq_partition_actions_pending"} <= names
    with s.engine.begin() as connection:
        cfg = alembic_config(empty_url)
        cfg.attributes["connection"] = connection
        command.check(cfg)  # the migrated schema matches the models
        command.downgrade(cfg, "0004")
    assert "partition_actions" not in _tables(empty_url)
    s.migrate()  # and up again
    assert s.partition_actions() == []


def test_the_migration_applies_on_a_fresh_store(empty_url: str) -> None:
    s = StateStore(empty_url)
    s.migrate()
    s.migrate()  # idempotent
    assert "partition_actions" in _tables(empty_url)
    assert s.partition_actions() == [] and s.pending_partition_actions(["a->b"]) == []
