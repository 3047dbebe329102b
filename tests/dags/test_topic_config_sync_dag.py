"""topic_config_sync runs for real (dag.test against a migrated Airflow DB and two real clusters)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

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


def test_bad_params_fail_before_any_cluster_is_touched(dc1, dc2, name, tmp_path: Path) -> None:
    config = write_config(tmp_path / "mm2.properties", {"dc1": dc1, "dc2": dc2},
                          ["dc1->dc2.enabled = true", f"dc1->dc2.topics = {name}.*"])
    dag = load_dag(config)
    store = StateStore(os.environ["MIRROR_CORE_DB_URL"])
    store.migrate()
    before = len(store.sync_runs(limit=1000))
    for conf in ({"flow": "dc9->dc2"}, {"dry_run": "yes"}):
        with pytest.raises(Exception) as err:
            dag.test(run_conf=conf)
        assert "flow" in str(err.value) or "dry_run" in str(err.value)
    assert len(store.sync_runs(limit=1000)) == before  # nothing ran
