"""The state store on SQLite and on a real PostgreSQL server started by the harness."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from alembic import command

from mirror_core.config.loader import parse_text
from mirror_core.state.errors import StateStoreError
from mirror_core.state.models import DriftEvent, FlowInstance, ReconciliationReport, aware
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


def unique_flow() -> tuple[str, str, str]:
    """(source, target, flow) names no other test uses (the PostgreSQL database lives for the session)."""
    tag = uuid.uuid4().hex[:8]
    return f"s{tag}", f"t{tag}", f"s{tag}->t{tag}"


def test_config_records_standby_flows_too(store: StateStore) -> None:
    a, b, forward = unique_flow()
    reverse = f"{b}->{a}"
    text = f"clusters = {a}, {b}\n{a}.bootstrap.servers = x:1\n{b}.bootstrap.servers = y:2\n"
    store.record_config(parse_text(text + f"{a}->{b}.enabled = true\n{b}->{a}.enabled = false\n",
                                   validate_clients=False))
    flows = {f.name: f for f in store.flows() if f.name in (forward, reverse)}
    assert {n: (f.source, f.target, f.standby) for n, f in flows.items()} == {
        forward: (a, b, False), reverse: (b, a, True)}
    # After a failover the operators may swap the roles in the config: the rows follow.
    store.record_config(parse_text(text + f"{a}->{b}.enabled = false\n{b}->{a}.enabled = true\n",
                                   validate_clients=False))
    flows = {f.name: f for f in store.flows() if f.name in (forward, reverse)}
    assert {n: f.standby for n, f in flows.items()} == {forward: True, reverse: False}


def test_drills_newest_first_with_their_measurements(store: StateStore) -> None:
    _, _, flow = unique_flow()
    t0 = datetime(2026, 1, 1, 6, tzinfo=UTC)
    first = store.record_drill(flow, "scheduled__q1", "passed", t0, 3, 12.5, 0, 0, {"seed": 1})
    second = store.record_drill(flow, "manual__q2", "failed", t0 + timedelta(days=90), 150, 70.0, 2, 5,
                                {"missed_objectives": ["RPO 150 > 100"]})
    store.record_drill(f"{flow}-other", None, "error", t0, None, None, None, None, {"error": "boom"})
    drills = store.drills(flow)
    assert [d.id for d in drills] == [second, first]
    assert [(d.run_id, d.status, d.rpo_records, d.rto_seconds, d.duplicates, d.losses) for d in drills] == [
        ("manual__q2", "failed", 150, 70.0, 2, 5), ("scheduled__q1", "passed", 3, 12.5, 0, 0)]
    assert drills[0].report == {"missed_objectives": ["RPO 150 > 100"]} and drills[0].finished_at is not None
    assert store.drills(flow, limit=1)[0].id == second


def test_failovers_and_failbacks_are_recorded_and_closed(store: StateStore) -> None:
    _, _, flow = unique_flow()
    triggered = datetime.now(UTC) - timedelta(seconds=90)
    fo = store.start_failover("failover", flow, True, "manual__fo", {"rpo_records": 0, "groups": ["g"]}, triggered)
    fb = store.start_failover("failback", flow, True, "manual__fb", {"reverse_lag": 0})
    mine = [f for f in store.failovers(limit=1000) if f.flow == flow]
    assert [(f.id, f.kind, f.status, f.finished_at) for f in mine] == [
        (fb, "failback", "awaiting-approval", None), (fo, "failover", "awaiting-approval", None)]
    store.approve_failover(fo, "carol", datetime(2030, 1, 1, 12, 0, 5, tzinfo=UTC))
    assert next(f for f in store.failovers(limit=1000) if f.id == fo).status == "executing"
    store.finish_failover(fo, "done", "carol", steps=["stopped forward", "switched"], canary={"g": "ok"})
    store.finish_failover(fb, "rejected", "dave")
    rows = {f.id: f for f in store.failovers(limit=1000) if f.flow == flow}
    done = rows[fo]
    assert (done.status, done.approved_by, done.planned, done.run_id) == ("done", "carol", True, "manual__fo")
    assert done.details == {"rpo_records": 0, "groups": ["g"], "steps": ["stopped forward", "switched"],
                            "canary": {"g": "ok"}}  # merged, not replaced
    assert done.finished_at is not None
    # Trigger, approval and completion times: RTO reads off the record.
    assert aware(done.triggered_at) == triggered  # type: ignore[arg-type]
    assert aware(done.approved_at) == datetime(2030, 1, 1, 12, 0, 5, tzinfo=UTC)  # type: ignore[arg-type]
    assert done.rto_seconds is not None and 90 <= done.rto_seconds < 120
    assert rows[fb].rto_seconds is None  # rejected: no recovery to time
    assert (rows[fb].status, rows[fb].approved_by, rows[fb].details) == ("rejected", "dave", {"reverse_lag": 0})
    store.finish_failover(fo, "failed", error="verification failed")  # no approver given: kept
    again = next(f for f in store.failovers(limit=1000) if f.id == fo)
    assert (again.status, again.approved_by, again.details["error"]) == ("failed", "carol", "verification failed")
    with pytest.raises(StateStoreError, match="no failover record"):
        store.finish_failover(10**9, "done")


def test_cutovers_are_recorded_and_closed(store: StateStore) -> None:
    source, target, _ = unique_flow()
    cid = store.start_cutover(source, target, "manual__c1", {"topics": ["orders"], "max_lag": 10})
    row = next(c for c in store.cutovers(limit=1000) if c.id == cid)
    assert (row.source, row.target, row.status, row.run_id, row.finished_at) == (
        source, target, "running", "manual__c1", None)
    store.finish_cutover(cid, "rolled-back", undone=["deny-write ACLs removed"])
    row = next(c for c in store.cutovers(limit=1000) if c.id == cid)
    assert row.status == "rolled-back" and row.finished_at is not None
    assert row.details == {"topics": ["orders"], "max_lag": 10, "undone": ["deny-write ACLs removed"]}
    with pytest.raises(StateStoreError, match="no cutover record"):
        store.finish_cutover(10**9, "done")


def test_latest_reconciliation_per_flow(store: StateStore) -> None:
    _, _, flow = unique_flow()
    _, _, other = unique_flow()

    def report(f: str, status: str, checked: int) -> ReconciliationReport:
        return ReconciliationReport(flow=f, run_id=f"run-{checked}", status=status, summary={"checked": checked},
                                    partitions=[{"topic": "orders", "partition": 0, "checked": checked}])

    store.add(report(flow, "ok", 1))
    store.add(report(other, "ok", 2))
    store.add(report(flow, "discrepancies", 3))
    latest = {r.flow: r for r in store.latest_reconciliations() if r.flow in (flow, other)}
    assert {f: (r.status, r.summary["checked"]) for f, r in latest.items()} == {
        flow: ("discrepancies", 3), other: ("ok", 2)}
    assert latest[flow].partitions == [{"topic": "orders", "partition": 0, "checked": 3}]
    last_ok = store.last_reconciliation(flow)  # where the next window starts: the last successful one
    assert last_ok is not None and last_ok.summary == {"checked": 1}
    newest = store.last_reconciliation(flow, status=None)
    assert newest is not None and newest.summary == {"checked": 3}
    assert store.last_reconciliation(f"{flow}-none") is None


def test_flow_control_desired_states_and_instances(store: StateStore) -> None:
    _, _, flow = unique_flow()
    store.set_flow_desired(flow, "stopped", "carol", "failover", run_id="manual__fo")
    store.set_flow_desired(flow, "running", "dave", "failback")  # one row per flow, updated
    row = store.flow_controls()[flow]
    assert (row.desired, row.changed_by, row.reason, row.run_id) == ("running", "dave", "failback", None)
    with pytest.raises(StateStoreError, match="running' or 'stopped"):
        store.set_flow_desired(flow, "paused", "carol", "typo")
    assert store.flow_controls()[flow].desired == "running"  # refused: unchanged

    store.report_flow_states("mirror-1", {flow: "running"})
    store.report_flow_states("mirror-2", {flow: "stopping"})
    store.report_flow_states("mirror-1", {flow: "stopped"})  # the same instance reports again: updated
    assert sorted((i.instance, i.state) for i in store.flow_instances(flow)) == [
        ("mirror-1", "stopped"), ("mirror-2", "stopping")]
    # An instance that stopped reporting is no longer counted.
    with store.session() as s:
        stale = s.get(FlowInstance, ("mirror-2", flow))
        assert stale is not None
        stale.seen_at = datetime.now(UTC) - timedelta(minutes=5)
    assert [i.instance for i in store.flow_instances(flow)] == ["mirror-1"]
    assert sorted(i.instance for i in store.flow_instances(flow, fresh_s=3600)) == ["mirror-1", "mirror-2"]


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
