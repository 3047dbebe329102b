"""topic_config_sync runs for real (dag.test against a migrated Airflow DB and two real clusters)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mirror_core.devcluster.local_cluster import free_port
from mirror_core.state.store import StateStore
from tests.dags.conftest import REPO
from tests.kafka_harness import create_topic, partition_count, topics, write_config


def load_dag(config: Path):  # type: ignore[no-untyped-def]
    os.environ["MIRROR_CORE_CONFIG"] = str(config)
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(REPO / "dags" / "topic_config_sync.py"))
    assert bag.import_errors == {}
    return bag.get_dag("topic_config_sync")


def test_dag_syncs_topics_and_records_the_run(dc1, dc2, name, tmp_path: Path) -> None:
    t = f"{name}.dagged"
    create_topic(dc1, t, 3, {"retention.ms": "4321000"})
    config = write_config(tmp_path / "mm2.properties", {"dc1": dc1, "dc2": dc2},
                          ["dc1->dc2.enabled = true", f"dc1->dc2.topics = {name}.*"])
    dag = load_dag(config)

    dry = dag.test(run_conf={"flow": "dc1->dc2", "dry_run": True})
    assert dry.state == "success"
    assert f"dc1.{t}" not in topics(dc2)

    run = dag.test(run_conf={"flow": "dc1->dc2", "dry_run": False})
    assert run.state == "success"
    assert partition_count(dc2, f"dc1.{t}") == 3
    store = StateStore(os.environ["MIRROR_CORE_DB_URL"])
    runs = store.sync_runs("dc1->dc2")
    assert [r.dry_run for r in runs[:2]] == [False, True]
    assert runs[0].run_id == run.run_id
    kinds = {(d.topic, d.kind, d.action) for d in store.recent_drift("dc1->dc2", limit=500)}
    assert {(f"dc1.{t}", "created", "proposed"), (f"dc1.{t}", "created", "applied")} <= kinds


def test_bad_params_fail_before_any_cluster_is_touched(dc1, dc2, name, tmp_path: Path, capsys) -> None:
    # The DAG was parsed while dc2->dc1 was an enabled flow, so the Param form still offers it; the
    # config then changed (dc2->dc1 is now a standby flow). The run's own check must refuse it: a
    # sync of dc2->dc1 would create dc2.<topic> on dc1.
    clusters = {"dc1": dc1, "dc2": dc2}
    topic_lines = [f"dc1->dc2.topics = {name}.*", f"dc2->dc1.topics = {name}.*"]
    both = write_config(tmp_path / "both.properties", clusters,
                        ["dc1->dc2.enabled = true", "dc2->dc1.enabled = true", *topic_lines])
    dag = load_dag(both)
    assert dag.params.get_param("flow").schema["enum"] == ["", "dc1->dc2", "dc2->dc1"]
    standby = write_config(tmp_path / "standby.properties", clusters,
                           ["dc1->dc2.enabled = true", "dc2->dc1.enabled = false", *topic_lines])
    os.environ["MIRROR_CORE_CONFIG"] = str(standby)
    t = f"{name}.back"
    create_topic(dc2, t, 1)
    store = StateStore(os.environ["MIRROR_CORE_DB_URL"])
    store.migrate()
    before = len(store.sync_runs(limit=1000))

    capsys.readouterr()
    run = dag.test(run_conf={"flow": "dc2->dc1", "dry_run": False})
    assert run.state == "failed"
    states = {ti.task_id: ti.state for ti in run.get_task_instances()}
    assert states["plan"] == "failed" and states["sync"] != "success", states
    task_log = capsys.readouterr().out  # dag.test() runs the tasks in-process and logs to stdout
    assert "AirflowFailException: Param 'flow': unknown flow 'dc2->dc1' (enabled flows: dc1->dc2)\n" in task_log
    assert f"dc2.{t}" not in topics(dc1)  # no cluster touched
    assert len(store.sync_runs(limit=1000)) == before  # nothing ran

    # Malformed values never reach a task: the Param schema refuses them when the run is created.
    from airflow.sdk.exceptions import ParamValidationError

    for conf, key in (({"flow": "dc9->dc2"}, "flow"), ({"dry_run": "yes"}, "dry_run")):
        with pytest.raises(ParamValidationError, match=f"Invalid input for param {key}"):
            dag.test(run_conf=conf)
    assert f"dc2.{t}" not in topics(dc1)
    assert len(store.sync_runs(limit=1000)) == before


def test_a_source_down_fails_the_sync_in_one_line_without_retrying(dc2, name, tmp_path: Path, capsys) -> None:
    down = f"127.0.0.1:{free_port()}"  # nothing listens there: the source cluster is down
    config = write_config(tmp_path / "mm2.properties", {"east": down, "dc2": dc2},
                          ["east->dc2.enabled = true", f"east->dc2.topics = {name}.*"])
    dag = load_dag(config)
    capsys.readouterr()
    run = dag.test(run_conf={"flow": "east->dc2", "dry_run": False})
    assert run.state == "failed"
    sync = next(ti for ti in run.get_task_instances() if ti.task_id == "sync")
    assert (sync.state, sync.try_number) == ("failed", 1)
    task_log = capsys.readouterr().out
    assert ("AirflowFailException: flow east->dc2: source cluster east is unreachable (Failed to get metadata: "
            "Local: Broker transport failure); check that the cluster is up and reachable from here, then sync "
            "again (nothing was changed)\n") in task_log
    # Airflow frames every failed task with its own traceback; nothing of mirror_core's internals or of
    # the Kafka error chain appears in it (the raise is dag_helpers.failing_fast's, from None).
    framing = task_log[task_log.find("Traceback"):]
    assert "mirror_core/" not in framing and "KafkaException" not in framing and "During handling" not in framing
