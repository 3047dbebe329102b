"""dr_drill in failover mode, for real: two clusters, the production flow's running mirror obeying the control plane,
the failover workflow of a drill application approved through Airflow's REST API by another user than the one who
triggered it, measured on the application's own known sequence, and failed back; a production application
(registered in the state store, its group reading a mirrored topic) is never touched, and a drill scope overlapping
it is refused in one line with nothing changed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mirror_core.config.loader import load_config
from mirror_core.offsets.groups import commit_offsets, committed_offsets
from mirror_core.state.store import StateStore
from mirror_core.workflows.failover import assess_failover
from tests.dags.test_failover_dags import load, run, states, triggered_as
from tests.kafka_harness import admin, create_topic, end_offsets, produce_sequence, wait_until, write_config

RECORDS, CONSUMED = 30, 10  # per drill topic: produced, then read on the primary before the failover


@pytest.fixture()
def setup(dc1, dc2, name, tmp_path: Path, monkeypatch, start_mirror):  # type: ignore[no-untyped-def]
    db = f"sqlite:///{tmp_path / 'state.db'}"
    lines = [f"{f}.{k}" for f in ("dc1->dc2", "dc2->dc1") for k in (
        f"topics = {name}.*", f"consumer.group.id = {name}-workers-{f.replace('->', '-')}")]
    lines += ["dc1->dc2.enabled = true", "dc2->dc1.enabled = false", "emit.heartbeats.enabled = false",
              "refresh.topics.interval.seconds = 2", "offset.flush.interval.ms = 200",
              "emit.checkpoints.interval.seconds = 1"]
    config = write_config(tmp_path / "mm2.properties", {"dc1": dc1, "dc2": dc2}, lines)
    monkeypatch.setenv("MIRROR_CORE_CONFIG", str(config))
    monkeypatch.setenv("MIRROR_CORE_DB_URL", db)
    store = StateStore(db)
    store.migrate()
    mirror = start_mirror([], config=config, args=["--state-db", db])
    return store, config, mirror


def production(store: StateStore, dc1: str, dc2: str, orders: str, group: str, app: str) -> dict[str, Any]:
    """What a production application looks like now: its group's offsets on both clusters, where it points."""
    row = store.active_cluster(app)
    return {"dc1": committed_offsets(admin(dc1), group), "dc2": committed_offsets(admin(dc2), group),
            "cluster": row.cluster if row else None, "orders on dc2": end_offsets(dc2, f"dc1.{orders}")}


def test_failover_mode_drill_on_the_production_flow(dc1, dc2, name, setup, monkeypatch, capfd) -> None:  # type: ignore[no-untyped-def]
    store, config_path, _ = setup
    orders, events = f"{name}.orders", f"{name}.drill.events"
    prod_group, prod_app = f"{name}-billing", f"{name}-billing-app"
    drill_group, drill_app = f"{name}-drill-reader", f"{name}-drill-app"
    # A production application: its topic mirrored, its group committed, registered in the state store (the
    # registry, and the failover it was assessed for and rejected).
    create_topic(dc1, orders, 2)
    create_topic(dc1, events, 2)
    produce_sequence(dc1, orders, 2, 40)
    commit_offsets(admin(dc1), prod_group, {(orders, 0): 12, (orders, 1): 7})
    wait_until(lambda: end_offsets(dc2, f"dc1.{orders}") == {0: 20, 1: 20}, 60, what="production topic mirrored")
    wait_until(lambda: end_offsets(dc2, f"dc1.{events}") == {0: 0, 1: 0}, 60, what="drill topic found by the mirror")
    wait_until(lambda: store.flow_instances("dc1->dc2") != [], 30, what="the mirror reports")
    store.set_active_cluster(prod_app, "dc1", "ops", "registered")
    prod_plan = assess_failover(load_config(config_path), "dc1->dc2", [prod_app], [prod_group], True, store)
    prod_record = store.start_failover("failover", "dc1->dc2", True, "manual__prod", prod_plan.record())
    store.finish_failover(prod_record, "rejected", "ops")
    before = production(store, dc1, dc2, orders, prod_group, prod_app)
    assert before["dc1"] == {(orders, 0): 12, (orders, 1): 7} and before["cluster"] == "dc1"  # preconditions

    triggered_as(monkeypatch, "eve")  # four eyes: eve triggers, dana approves
    conf = {"flow": "dc1->dc2", "mode": "failover", "app": drill_app, "topics": [events], "groups": [drill_group],
            "records": RECORDS, "consume_before_failure": CONSUMED, "drain_timeout_s": 60,
            "max_rpo_records": 0, "max_rto_seconds": 120, "max_duplicates": 0, "max_losses": 0}

    # An overlapping scope: one line each at assess, nothing produced, recorded or moved.
    for bad, says in (({"groups": [prod_group]}, f"group {prod_group} is a production group (failover record "),
                      ({"app": prod_app}, f"app {prod_app} is a production application (failover record "),
                      ({"topics": [orders]}, f"topic {orders} is read by production group {prod_group}")):
        capfd.readouterr()
        dr = load("dr_drill").test(run_conf={**conf, **bad})
        assert dr.state == "failed" and states(dr)["assess"] == "failed", states(dr)
        out = capfd.readouterr().out
        lines = [x for x in out.splitlines() if "AirflowFailException: " in x]
        assert lines and "drill scope overlaps production: " in lines[0] and says in lines[0], out[-3000:]
        assert lines[0].endswith("designate a drill application of its own (app, topics, groups)"), lines[0]
        assert [f.id for f in store.failovers()] == [prod_record] and store.drills() == []
        assert end_offsets(dc1, events) == {0: 0, 1: 0} and store.active_topic_controls(None) == []
        assert production(store, dc1, dc2, orders, prod_group, prod_app) == before

    dr, gate = run("dr_drill", conf, {"approve": "Approve"}, user="dana")
    assert dr.state == "success", states(dr)
    assert states(dr)["drill"] == "skipped" and states(dr)["finish"] == "success"
    assert f"switching to **dc2**: topics `{events}`; groups {drill_group}" in gate.bodies["approve"]
    bound = store.bound_plan("dr_drill", dr.run_id)
    assert bound is not None and bound.triggered_by == "eve" and bound.gates["approve"].approver_id == "dana"

    [row] = store.drills("dc1->dc2")
    report = row.report
    assert (row.status, row.run_id, report["mode"]) == ("passed", dr.run_id, "failover")
    # the known scenario: a planned failover drains, the exact translation resumes each group where it stopped
    assert (row.rpo_records, row.duplicates, row.losses) == (0, 0, 0)
    [(topic, seen)] = report["groups"][drill_group].items()
    assert topic == events and (seen["consumed_on_primary"], seen["consumed_on_standby"]) == (CONSUMED,
                                                                                               RECORDS - CONSUMED)
    assert sum(seen["resumed_at"].values()) == CONSUMED  # the run's records are the first of an empty topic
    rto_trigger, rto_approval = report["rto_from_trigger_s"], report["rto_from_approval_s"]
    assert row.rto_seconds == rto_approval and 0 < rto_approval < rto_trigger, report
    assert report["failback"]["complete"] and report["failback"]["app_on"] == "dc1"
    assert report["failback"]["read_after_failback"] == {f"{drill_group} {events}": 0}
    drill_records = [f for f in store.failovers() if f.id != prod_record]
    assert sorted((f.kind, f.status, f.details["drill_app"]) for f in drill_records) == [
        ("failback", "done", drill_app), ("failover", "done", drill_app)]
    assert all(f.approved_by == "dana" and f.details["topics"] == [events] for f in drill_records)
    assert committed_offsets(admin(dc1), drill_group) == {(events, 0): 15, (events, 1): 15}
    assert store.active_cluster(drill_app).cluster == "dc1"  # type: ignore[union-attr]
    assert store.active_topic_controls(["dc1->dc2"]) == []  # the drill topic's pause cleared

    # Production untouched: its group's offsets on both clusters, its application's cluster; its topic still copied.
    produce_sequence(dc1, orders, 2, 10, start=40)
    wait_until(lambda: end_offsets(dc2, f"dc1.{orders}") == {0: 25, 1: 25}, 60, what="production copied after")
    after = production(store, dc1, dc2, orders, prod_group, prod_app)
    assert {k: v for k, v in after.items() if k != "orders on dc2"} == {
        k: v for k, v in before.items() if k != "orders on dc2"}
    assert store.flow_controls().get("dc1->dc2") is None or store.flow_controls()["dc1->dc2"].desired == "running"
