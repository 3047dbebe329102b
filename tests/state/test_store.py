"""The state store on SQLite and on a real PostgreSQL server started by the harness."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from alembic import command

from mirror_core.config.loader import parse_text
from mirror_core.state.errors import StateStoreError
from mirror_core.state.models import DriftEvent
from mirror_core.state.store import StateStore, alembic_config
from tests.pg_harness import postgres_server


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    with postgres_server() as url:
        yield url


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> StateStore:
    url = f"sqlite:///{tmp_path / 'state.db'}" if request.param == "sqlite" else request.getfixturevalue(
        "postgres_url")
    s = StateStore(url)
    s.migrate()
    s.migrate()  # idempotent
    return s


def test_migrations_match_the_models(store: StateStore) -> None:
    with store.engine.begin() as connection:
        cfg = alembic_config(store.url)
        cfg.attributes["connection"] = connection
        command.check(cfg)  # raises when the models changed without a migration


def test_config_sync_runs_and_drift(store: StateStore) -> None:
    config = parse_text("clusters = a, b\na.bootstrap.servers = x:1\nb.bootstrap.servers = y:2\n"
                        "a->b.enabled = true\n", validate_clients=False)
    store.record_config(config)
    store.record_config(config)  # upsert, not duplicate
    run = store.start_sync_run("a->b", dry_run=True, run_id="manual__1")
    store.add(DriftEvent(sync_run_id=run, flow="a->b", topic="orders", kind="config",
                         detail="retention.ms: 1 -> 2", action="proposed"))
    store.finish_sync_run(run, "drift", {"changes": 1})
    drift = store.recent_drift("a->b")
    assert [(d.topic, d.kind, d.action) for d in drift][:1] == [("orders", "config", "proposed")]
    runs = store.sync_runs("a->b")
    assert runs[0].status == "drift" and runs[0].summary == {"changes": 1} and runs[0].dry_run


def test_active_cluster_registry_keeps_history(store: StateStore) -> None:
    app = f"payments-{id(store)}"
    assert store.active_cluster(app) is None
    store.set_active_cluster(app, "dc1", "alice", "initial placement")
    change = store.set_active_cluster(app, "dc2", "bob", "failover: dc1 lost", run_id="failover__7")
    assert change.from_cluster == "dc1" and change.to_cluster == "dc2"
    current = store.active_cluster(app)
    assert current is not None and (current.cluster, current.changed_by, current.run_id) == ("dc2", "bob",
                                                                                           "failover__7")
    history = store.registry_history(app)
    assert [(h.from_cluster, h.to_cluster, h.changed_by) for h in history] == [("dc1", "dc2", "bob"),
                                                                              (None, "dc1", "alice")]
    with pytest.raises(StateStoreError):
        store.set_active_cluster(app, "dc1", "", "no one")
    assert store.active_cluster(app).cluster == "dc2"  # type: ignore[union-attr]  # refused: unchanged


def test_secrets_never_in_urls_shown(tmp_path: Path) -> None:
    s = StateStore("postgresql+psycopg2://mirror:hunter2@127.0.0.1:1/x")
    assert "hunter2" not in s.safe_url
