"""runtime_control runs for real (dag.test against a migrated Airflow DB): changes recorded as the user who
triggered the run, the optional approval gate answered through Airflow's REST API, bad Params refused before
anything is written. No cluster is needed: the DAG only records desired state."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from mirror_core.state.store import StateStore
from tests.dags.conftest import REPO
from tests.dags.hitl import Responder

FLOW = "dc1->dc2"


@pytest.fixture()
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> StateStore:
    config = tmp_path / "mm2.properties"
    config.write_text("clusters = dc1, dc2\ndc1.bootstrap.servers = 127.0.0.1:9\ndc2.bootstrap.servers = 127.0.0.1:9\n"
                      "dc1->dc2.enabled = true\ndc1->dc2.topics = orders.*, payments\n")
    db = f"sqlite:///{tmp_path / 'state.db'}"
    monkeypatch.setenv("MIRROR_CORE_CONFIG", str(config))
    monkeypatch.setenv("MIRROR_CORE_DB_URL", db)
    s = StateStore(db)
    s.migrate()
    return s


def load():  # type: ignore[no-untyped-def]
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(REPO / "dags" / "runtime_control.py"))
    assert bag.import_errors == {}
    return bag.get_dag("runtime_control")


def states(dr) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return {ti.task_id: ti.state for ti in dr.get_task_instances()}


def conf(**params: Any) -> dict[str, Any]:
    return {"flow": FLOW, "topic": "", "partition": None, "bytes_per_second": None, "offsets": "", "topics": "",
            "topics_exclude": "", "groups": "", "groups_exclude": "", "require_approval": False, **params}


def test_pause_without_approval_is_recorded_as_the_triggering_user(store: StateStore) -> None:
    dag = load()
    assert set(dag.params.keys()) == {"flow", "action", "topic", "partition", "bytes_per_second", "offsets",
                                      "topics", "topics_exclude", "groups", "groups_exclude", "reason",
                                      "require_approval"}
    assert dag.params.get_param("flow").schema["enum"] == [FLOW]
    dr = dag.test(run_conf=conf(action="pause", topic="orders", partition=3, reason="poison record at 17"))
    assert dr.state == "success", states(dr)
    assert states(dr) == {"check": "success", "approve": "skipped", "apply": "success", "outcome": "success"}
    [pause] = store.active_topic_controls([FLOW])
    assert (pause.kind, pause.topic, pause.partition, pause.reason) == ("pause", "orders", 3, "poison record at 17")
    assert pause.set_by == "dag_test"  # dag.test()'s triggering user; a UI trigger records the user's name

    dr = dag.test(run_conf=conf(action="resume", topic="orders", partition=3, reason="record fixed"))
    assert dr.state == "success", states(dr)
    assert store.active_topic_controls([FLOW]) == []
    [cleared] = store.topic_control_history(FLOW)
    assert (cleared.cleared_by, cleared.clear_reason) == ("dag_test", "record fixed")


def test_limit_with_approval_then_a_rejected_unlimit(store: StateStore) -> None:
    dag = load()
    with Responder("runtime_control", {"approve": "Approve"}) as gate:
        dr = dag.test(run_conf=conf(action="limit", bytes_per_second=50_000_000, reason="share the WAN link",
                                    require_approval=True))
    assert not gate.errors and dr.state == "success", (gate.errors, states(dr))
    body = gate.bodies["approve"]
    assert f"limit {FLOW} (whole flow) to 50000000 bytes/s" in body and "share the WAN link" in body
    assert "Asked by dag_test" in body
    [limit] = store.active_topic_controls([FLOW])
    assert (limit.kind, limit.topic, limit.limit_bytes_per_s, limit.set_by) == ("limit", None, 50_000_000, "dag_test")
    assert limit.reason.startswith("share the WAN link (approved by ")

    with Responder("runtime_control", {"approve": "Reject"}) as gate:
        dr = dag.test(run_conf=conf(action="unlimit", reason="not now", require_approval=True))
    assert not gate.errors
    assert dr.state == "failed" and states(dr)["apply"] == "skipped" and states(dr)["outcome"] == "failed"
    assert "limit (whole flow) 50000000 bytes/s" in gate.bodies["approve"]  # the approver saw what is in force now
    assert store.active_topic_controls([FLOW]) == [limit]  # nothing changed


def test_skip_and_resume_of_a_partition_the_mirror_paused(store: StateStore) -> None:
    dag = load()
    dr = dag.test(run_conf=conf(action="skip", topic="payments", partition=0, offsets="3061-3263",
                                reason="CRC mismatch, no intact replica"))
    assert dr.state == "success", states(dr)
    [skip] = store.partition_actions(FLOW)
    assert (skip.action, skip.topic, skip.partition, skip.first_offset, skip.last_offset, skip.requested_by) == (
        "skip", "payments", 0, 3061, 3263, "dag_test")
    dr = dag.test(run_conf=conf(action="resume", topic="payments", partition=1, reason="leader moved"))
    assert dr.state == "success", states(dr)
    assert [(a.action, a.partition) for a in store.partition_actions(FLOW)] == [("resume", 1), ("skip", 0)]


@pytest.mark.parametrize(("params", "says"), [
    (dict(action="limit", reason="no rate"), "limit needs the bytes per second"),
    (dict(action="pause", topic="audit", reason="not replicated"), "topic 'audit' is not replicated"),
    (dict(action="skip", topic="orders", partition=0, reason="no offsets"), "skip needs the offsets"),
    (dict(action="resume", topic="orders", reason="not paused"), "is not paused by an operator"),
    (dict(action="pause", topic="orders", bytes_per_second=5, reason="x"), "pause takes no bytes per second"),
    (dict(action="filter", reason="nothing given"), "no filter given"),
    (dict(action="filter", topics="orders[", reason="bad pattern"), "topics 'orders['"),
    (dict(action="filter", topic="orders", groups="app.*", reason="x"), "filter is of the whole flow"),
    (dict(action="pause", topic="orders", groups="app.*", reason="x"), "pause takes no filters"),
])
def test_bad_requests_fail_in_one_line_and_record_nothing(store: StateStore, params: dict[str, Any], says: str,
                                                          capfd: pytest.CaptureFixture[str]) -> None:
    dr = load().test(run_conf=conf(**params))
    assert dr.state == "failed"
    out = capfd.readouterr().out
    assert says in out, out[-3000:]
    assert store.topic_control_history() == [] and store.partition_actions() == []
    assert store.flow_filter_history() == []


def test_filters_set_then_cleared_as_the_triggering_user(store: StateStore) -> None:
    dag = load()
    dr = dag.test(run_conf=conf(action="filter", topics="orders.*", groups_exclude="tmp-.*",
                                reason="payments moved to the new cluster"))
    assert dr.state == "success", states(dr)
    active = store.active_flow_filters([FLOW])[FLOW]
    assert active.overrides == {"topics": "orders.*", "groups.exclude": "tmp-.*"}, active
    assert (active.set_by, active.reason) == ("dag_test", "payments moved to the new cluster")
    dr = dag.test(run_conf=conf(action="unfilter", reason="migration rolled back"))
    assert dr.state == "success", states(dr)
    assert store.active_flow_filters([FLOW]) == {}
    [cleared] = store.flow_filter_history(FLOW)
    assert (cleared.cleared_by, cleared.clear_reason) == ("dag_test", "migration rolled back")


def test_params_the_form_refuses(store: StateStore) -> None:
    from airflow.sdk.definitions.param import ParamValidationError

    dag = load()
    for bad in (conf(action="pause", topic="orders", partition=-1, reason="x"),
                conf(action="limit", bytes_per_second=0, reason="x"),
                conf(action="pause", topic="orders.*", reason="x"),
                conf(action="skip", topic="orders", partition=0, offsets="1..2", reason="x"),
                conf(action="pause", topic="orders", reason=""),
                conf(action="pause", topic="orders")):  # no reason at all (the form's default is empty)
        params = copy.deepcopy(dag.params)
        with pytest.raises(ParamValidationError):
            params.update(bad)
            params.validate()
    assert store.topic_control_history() == []
