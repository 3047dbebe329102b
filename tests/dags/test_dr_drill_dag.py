"""dr_drill runs for real (dag.test, two real clusters, a real drill mirror process that gets SIGKILLed).

The scenario makes the expected values known: the drill mirror is frozen for the last
``unreplicated_at_failure`` records before the failure, so exactly that many records are on the primary
and not on the standby (RPO), the canary never sees them during the failover (losses), the exact
translation gives no duplicate, and failback hands them to the canary on the primary.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from mirror_core.state.store import StateStore
from tests.dags.conftest import REPO
from tests.kafka_harness import topics, write_config

SCENARIO = {"records": 40, "consume_before_failure": 12, "unreplicated_at_failure": 9, "seed": 7, "partitions": 3,
            "rate": 400, "max_rpo_records": 100, "max_rto_seconds": 60, "max_duplicates": 0, "max_losses": 100}


def load_dag(config: Path):  # type: ignore[no-untyped-def]
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(REPO / "dags" / "dr_drill.py"))
    assert bag.import_errors == {}
    return bag.get_dag("dr_drill")


@pytest.fixture
def drill_env(dc1: str, dc2: str, name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> StateStore:
    config = write_config(tmp_path / "mm2.properties", {"dc1": dc1, "dc2": dc2},
                          ["dc1->dc2.enabled = true", f"dc1->dc2.topics = {name}.*",
                           "dc2->dc1.enabled = false", "dc2->dc1.topics.exclude = .*mirror-core\\\\.drill\\\\..*"])
    monkeypatch.setenv("MIRROR_CORE_CONFIG", str(config))
    monkeypatch.setenv("MIRROR_CORE_DB_URL", f"sqlite:///{tmp_path}/state.db")
    store = StateStore(f"sqlite:///{tmp_path}/state.db")
    store.migrate()
    return store


def _check_known_scenario(report: dict[str, Any], unreplicated: int, consumed_first: int) -> None:
    assert report["rpo_records"] == unreplicated
    assert report["rpo_by_offsets"] == unreplicated
    assert report["duplicates"] == 0
    assert report["losses"] == unreplicated
    assert 0 < report["rto_seconds"] < 60
    assert report["consumed_on_primary"] == consumed_first
    assert all(t["basis"] == "checkpoint" and t["exact"] for t in report["translation"])
    produced = report["failure"]["records_produced"]
    assert report["consumed_on_standby"] == produced - consumed_first - unreplicated
    failback = report["failback"]
    assert failback["complete"] and failback["read_on_primary_after_failback"] == unreplicated


def test_drill_measures_a_known_scenario_and_fails_back(drill_env: StateStore, dc1: str, dc2: str) -> None:
    dag = load_dag(Path())
    run = dag.test(run_conf={"flow": "dc1->dc2", **SCENARIO})
    assert run.state == "success"

    [row] = drill_env.drills("dc1->dc2")
    assert (row.status, row.run_id) == ("passed", run.run_id)
    assert (row.rpo_records, row.duplicates, row.losses) == (9, 0, 9)
    assert row.rto_seconds is not None and 0 < row.rto_seconds < 60
    _check_known_scenario(row.report, unreplicated=9, consumed_first=12)
    # the drill cleaned up after itself (every topic it made, checked by listing) and never touched
    # production names
    assert row.report["remote_topic"].startswith("drill-dc1.")
    stamp = row.report["topic"].removeprefix("mirror-core.drill.")
    left = {t for t in topics(dc1) | topics(dc2) if stamp in t or ("drill-dc1" in t and t.endswith(".internal"))}
    assert not left, f"drill topics left behind: {left}"
    cleanup = row.report["cleanup"]
    assert cleanup[f"dc2:{row.report['remote_topic']}"] == "deleted"
    assert cleanup["dc2:mirror-core.progress.drill-dc1.internal"] == "deleted"
    assert not [k for k, v in cleanup.items() if v.startswith("not deleted")], cleanup


def test_missed_objective_fails_the_run_and_is_recorded(drill_env: StateStore) -> None:
    dag = load_dag(Path())
    conf = {**SCENARIO, "records": 25, "consume_before_failure": 5, "unreplicated_at_failure": 6,
            "max_rpo_records": 2}
    run = dag.test(run_conf={"flow": "dc1->dc2", **conf})
    assert run.state == "failed"

    [row] = drill_env.drills("dc1->dc2")
    assert row.status == "failed" and row.rpo_records == 6
    assert any(m.startswith("max_rpo_records") for m in row.report["missed_objectives"])
    states = {ti.task_id: ti.state for ti in run.get_task_instances()}
    # The canary mode's tasks ran; the failover mode's branch was skipped as a whole.
    assert {t: s for t, s in states.items() if s != "skipped"} == {
        "plan": "success", "drill": "success", "objectives": "failed"}
    assert {"assess", "approve", "execute"} <= {t for t, s in states.items() if s == "skipped"}


def test_bad_params_fail_before_any_cluster_is_touched(drill_env: StateStore) -> None:
    dag = load_dag(Path())
    for conf, param in (({"consume_before_failure": 5000}, "consume_before_failure"),
                        ({"unreplicated_at_failure": 39}, "unreplicated_at_failure")):
        run = dag.test(run_conf={"flow": "dc1->dc2", **SCENARIO, **conf})
        assert run.state == "failed"
        assert {ti.task_id: ti.state for ti in run.get_task_instances()}["drill"] != "success", param
    assert drill_env.drills() == []


def test_plan_errors_name_the_param(tmp_path: Path) -> None:
    from mirror_core.config.loader import parse_text
    from mirror_core.workflows.control import WorkflowError
    from mirror_core.workflows.drill_plan import plan_drill

    config = parse_text("clusters = dc1, dc2\ndc1.bootstrap.servers = a:1\ndc2.bootstrap.servers = b:2\n"
                        "dc1->dc2.enabled = true\ndc1->dc2.topics = orders\n", validate_clients=False)
    params = {"flow": "dc1->dc2", **SCENARIO}
    assert plan_drill(config, params).failure_at == plan_drill(config, params).failure_at  # seeded: reproducible
    for bad, param in (({"flow": "dc9->dc2"}, "flow"), ({"consume_before_failure": 40}, "consume_before_failure"),
                       ({"unreplicated_at_failure": 29}, "unreplicated_at_failure"), ({"rate": 0}, "rate"),
                       ({"max_rto_seconds": "soon"}, "max_rto_seconds"), ({"seed": -1}, "seed")):
        with pytest.raises(WorkflowError, match=f"Param '{param}'"):
            plan_drill(config, {**params, **bad})
    everything = parse_text("clusters = dc1, dc2\ndc1.bootstrap.servers = a:1\ndc2.bootstrap.servers = b:2\n"
                            "dc1->dc2.enabled = true\n", validate_clients=False)
    with pytest.raises(WorkflowError, match=r"topics\.exclude"):  # production would mirror the drill topic
        plan_drill(everything, params)


def test_status_page_shows_drill_history_and_trends(tmp_path: Path, auth_headers: dict[str, str]) -> None:
    from fastapi.testclient import TestClient
    from mirror_airflow.status_app import create_app

    store = StateStore(f"sqlite:///{tmp_path / 's.db'}")
    store.migrate()
    for rpo, rto, status in ((12, 9.5, "passed"), (4, 7.0, "passed"), (150, 3.25, "failed")):
        store.record_drill("dc1->dc2", f"r{rpo}", status, datetime.now(UTC), rpo, rto, 0, rpo,
                           {"missed_objectives": ["max_rpo_records: RPO 150 records > 100"] if rpo == 150 else []})
    data = TestClient(create_app(store, with_lag=False), headers=auth_headers).get("/api/summary").json()
    newest = data["drills"][0]
    assert (newest["rpo_records"], newest["rpo_records change"], newest["rto_seconds change"]) == (150, "+146", "-3.75")
    assert newest["missed"].startswith("max_rpo_records")
    [trend] = data["drill_trends"]
    assert (trend["drills"], trend["passed"], trend["last"]) == (3, 2, "failed")
    assert "worse than before" in trend["rpo_records"] and "better than before" in trend["rto_seconds"]


def test_natural_lag_drill_is_consistent(drill_env: StateStore) -> None:
    """Without freezing, the failure comes at a random moment while records are produced: whatever RPO it
    finds, the canary loses exactly those records, sees no duplicate, and gets them back on failback."""
    dag = load_dag(Path())
    run = dag.test(run_conf={"flow": "dc1->dc2", **SCENARIO, "records": 80, "unreplicated_at_failure": -1,
                             "seed": 3})
    assert run.state == "success"
    [row] = drill_env.drills("dc1->dc2")
    report = row.report
    assert report["failure"]["mode"] == "natural lag"
    assert row.rpo_records == report["rpo_by_offsets"] == row.losses
    assert row.duplicates == 0
    assert report["failback"]["complete"] and report["failback"]["read_on_primary_after_failback"] == row.losses


def test_dag_parses_with_a_broken_config_and_the_run_says_why(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MIRROR_CORE_CONFIG", str(tmp_path / "missing.properties"))
    monkeypatch.setenv("MIRROR_CORE_DB_URL", f"sqlite:///{tmp_path}/state.db")
    dag = load_dag(Path())
    assert dag.params["flow"] == ""
    run = dag.test()
    assert {ti.task_id: ti.state for ti in run.get_task_instances()}["plan"] == "failed"
