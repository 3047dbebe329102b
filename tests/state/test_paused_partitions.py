"""Paused source partitions in the mirror instances' heartbeat (``flow_instances.paused``, migration 0006), on
SQLite and on a real PostgreSQL server started by the harness."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import FrozenInstanceError
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import create_engine, inspect

from mirror_core.state.models import FlowInstance, PausedPartition
from mirror_core.state.store import StateStore, alembic_config
from tests.pg_harness import postgres_server

REASON = ("source cluster dc1: record batch at offsets 40-79 (1234 bytes) is damaged: its CRC32C 0x1a2b3c4d "
          "does not match 0x5e6f7a8b. Make a replica the leader, then `mirror-core partitions resume --flow "
          "dc1->dc2 --topic orders --partition 0 --reason \"leader moved\"`, or pass over the batch with "
          "`mirror-core partitions skip ... --offsets 40-79`")


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


def age(store: StateStore, instance: str, flow: str, seconds: float) -> None:
    """Make ``instance``'s last report on ``flow`` ``seconds`` old."""
    with store.session() as s:
        row = s.get(FlowInstance, (instance, flow))
        assert row is not None
        row.seen_at = datetime.now(UTC) - timedelta(seconds=seconds)


def test_heartbeat_carries_the_paused_partitions_and_the_store_reads_them(store: StateStore) -> None:
    before = datetime.now(UTC)
    store.report_flow_states("m-1", {"dc1->dc2": "running", "dc2->dc1": "running"}, paused={
        "dc1->dc2": [{"topic": "orders", "partition": 3, "reason": "target dc2 refused the record at offset 7: "
                      "RECORD_TOO_LARGE"},
                     {"topic": "orders", "partition": 0, "reason": REASON}],
        "dc9->dc8": [{"topic": "x", "partition": 0, "reason": "not a flow this heartbeat reports"}]})
    store.report_flow_states("m-2", {"dc1->dc2": "running"},
                             paused={"dc1->dc2": [{"topic": "orders", "partition": 0, "reason": REASON}]})
    paused = store.paused_partitions()
    assert [(p.flow, p.topic, p.partition, p.instance) for p in paused] == [
        ("dc1->dc2", "orders", 0, "m-1"), ("dc1->dc2", "orders", 0, "m-2"), ("dc1->dc2", "orders", 3, "m-1")]
    first = paused[0]
    assert first.reason == REASON and first.where == "dc1->dc2 orders[0]"
    assert before - timedelta(seconds=1) <= first.since <= first.seen_at <= datetime.now(UTC)
    assert first.seen_at.tzinfo is not None and first.since.tzinfo is not None
    with pytest.raises(FrozenInstanceError):
        first.reason = "changed"  # type: ignore[misc]
    assert store.paused_partitions(flow="dc2->dc1") == []
    assert [p.partition for p in store.paused_partitions(flow="dc1->dc2")] == [0, 0, 3]

    # Reported again: the same pause keeps when it began; a new reason on a partition is a new pause; a
    # resumed partition is gone; the reason is kept on one line.
    store.report_flow_states("m-1", {"dc1->dc2": "running"}, paused={"dc1->dc2": [
        {"topic": "orders", "partition": 0, "reason": REASON},
        {"topic": "orders", "partition": 5, "reason": "damaged\n   batch at 9"}]})
    mine = {p.partition: p for p in store.paused_partitions() if p.instance == "m-1"}
    assert set(mine) == {0, 5}
    assert mine[0].since == first.since and mine[0].seen_at > first.seen_at
    assert mine[5].reason == "damaged batch at 9" and mine[5].since > first.since


def test_two_arguments_as_before_mean_nothing_paused(store: StateStore) -> None:
    store.report_flow_states("m-1", {"a->b": "running"}, paused={"a->b": [
        {"topic": "t", "partition": 1, "reason": "damaged"}]})
    assert len(store.paused_partitions()) == 1
    store.report_flow_states("m-1", {"a->b": "stopping"})  # the old call: the partition is no longer paused
    assert store.paused_partitions() == []
    store.report_flow_states("m-2", {"a->b": "running"}, paused={})
    store.report_flow_states("m-3", {"a->b": "running"}, paused=None)
    with store.session() as s:
        assert [r.paused for r in s.query(FlowInstance).order_by(FlowInstance.instance)] == [[], [], []]
    assert sorted((i.instance, i.state) for i in store.flow_instances("a->b")) == [
        ("m-1", "stopping"), ("m-2", "running"), ("m-3", "running")]


def test_only_live_instances_count(store: StateStore) -> None:
    pause = {"a->b": [{"topic": "t", "partition": 0, "reason": "damaged"}]}
    store.report_flow_states("m-live", {"a->b": "running"}, paused=pause)
    store.report_flow_states("m-gone", {"a->b": "running"}, paused=pause)
    age(store, "m-gone", "a->b", 300)
    assert [p.instance for p in store.paused_partitions()] == ["m-live"]
    assert [p.instance for p in store.paused_partitions(fresh_s=3600)] == ["m-gone", "m-live"]
    assert all(isinstance(p, PausedPartition) for p in store.paused_partitions(fresh_s=3600))


def _columns(url: str) -> set[str]:
    engine = create_engine(url)
    try:
        return {c["name"] for c in inspect(engine).get_columns("flow_instances")}
    finally:
        engine.dispose()


def test_the_migration_from_0005_keeps_the_heartbeats_and_actions(empty_url: str) -> None:
    old = StateStore(empty_url)
    with old.engine.begin() as connection:
        cfg = alembic_config(empty_url)
        cfg.attributes["connection"] = connection
        command.upgrade(cfg, "0005")
    assert "paused" not in _columns(empty_url)
    now = datetime.now(UTC)
    with old.engine.begin() as connection:  # a heartbeat written by a mirror of the 0005 schema
        connection.execute(FlowInstance.__table__.insert().values(
            instance="m-old", flow="a->b", state="running", seen_at=now))
    action = old.request_partition_action("a->b", "orders", 0, "resume", "alice", "leader moved")
    old.engine.dispose()

    s = StateStore(empty_url)
    s.migrate()
    assert "paused" in _columns(empty_url)
    assert [(i.instance, i.state, i.paused) for i in s.flow_instances("a->b")] == [("m-old", "running", None)]
    assert s.paused_partitions() == []  # a row without the column's value: nothing paused
    assert s.pending_partition_actions(["a->b"]) == [action]
    s.report_flow_states("m-old", {"a->b": "running"}, paused={"a->b": [
        {"topic": "orders", "partition": 0, "reason": REASON}]})
    assert [(p.instance, p.reason) for p in s.paused_partitions()] == [("m-old", REASON)]
    with s.engine.begin() as connection:
        cfg = alembic_config(empty_url)
        cfg.attributes["connection"] = connection
        command.check(cfg)  # the migrated schema matches the models
        command.downgrade(cfg, "0005")
    assert "paused" not in _columns(empty_url)
    s.migrate()  # and up again: the heartbeat row and the action are still there
    assert [i.instance for i in s.flow_instances("a->b")] == ["m-old"] and s.paused_partitions() == []
    assert s.partition_actions() == [action]
