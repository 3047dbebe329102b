"""Every DAG imports cleanly, and the plugin registers the status page."""

from __future__ import annotations

import os

from tests.dags.conftest import REPO


def test_dagbag_has_no_import_errors() -> None:
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(REPO / "dags"))
    assert bag.import_errors == {}
    assert "topic_config_sync" in bag.dag_ids
    dag = bag.get_dag("topic_config_sync")
    assert set(dag.params.keys()) == {"flow", "dry_run"}
    expected = {"failover": {"flow", "apps", "groups", "mode"}, "failback": {"flow", "apps", "groups"},
                "cloud_migration_cutover": {"source", "target", "topics", "groups", "max_lag"},
                "dr_drill": {"flow"}, "checkpoint_reconciliation": {"flow"}, "schema_sync": {"flow", "dry_run"}}
    for dag_id, params in expected.items():
        assert dag_id in bag.dag_ids, dag_id
        assert params <= set(bag.get_dag(dag_id).params.keys()), (dag_id, bag.get_dag(dag_id).params.keys())
    assert "0 6 1 */3 *" in repr(bag.get_dag("dr_drill").timetable)  # quarterly


def test_failback_waits_for_the_reverse_flow_with_the_shared_sensor() -> None:
    """The Params are checked first, then the lag sensor waits (within drain_timeout_s), then assess."""
    from airflow.dag_processing.dagbag import DagBag
    from mirror_airflow.sensors import ReplicationLagSensor

    dag = DagBag(dag_folder=str(REPO / "dags" / "failback.py")).get_dag("failback")
    catch_up = dag.get_task("catch_up")
    assert isinstance(catch_up, ReplicationLagSensor)
    assert catch_up.upstream_task_ids == {"check"} and catch_up.downstream_task_ids == {"assess"}
    assert "max_reverse_lag" in str(catch_up.max_lag) and "drain_timeout_s" in str(catch_up.max_wait_s)
    assert "check" in str(catch_up.flow)


def test_plugin_registers_status_page() -> None:
    from airflow import plugins_manager

    assert os.environ["AIRFLOW__CORE__PLUGINS_FOLDER"].endswith("plugins")
    plugins = plugins_manager.get_plugin_info() if hasattr(plugins_manager, "get_plugin_info") else []
    names = {p["name"] for p in plugins}
    assert "mirror_core" in names, names
    info = next(p for p in plugins if p["name"] == "mirror_core")
    assert any(a["url_prefix"] == "/mirror-core" for a in info["fastapi_apps"])
    assert any(v["destination"] == "nav" for v in info["external_views"])
