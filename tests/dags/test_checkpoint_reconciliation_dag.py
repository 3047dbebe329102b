"""checkpoint_reconciliation end to end: dag.test() with real clusters, a real mirror and spark-submit."""

from __future__ import annotations

import json
import os
from pathlib import Path

from confluent_kafka import Producer

from mirror_core.state.store import StateStore
from tests.dags.conftest import REPO
from tests.integration.conftest import flow_lines
from tests.kafka_harness import admin, create_topic, end_offsets, produce_sequence, wait_until, write_config


def load_dag(config: Path):  # type: ignore[no-untyped-def]
    os.environ["MIRROR_CORE_CONFIG"] = str(config)
    os.environ["PATH"] = f"{REPO / '.venv' / 'bin'}{os.pathsep}{os.environ['PATH']}"  # spark-submit
    os.environ["AIRFLOW_CONN_SPARK_DEFAULT"] = json.dumps({"conn_type": "spark", "host": "local[2]"})
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(REPO / "dags" / "checkpoint_reconciliation.py"))
    assert bag.import_errors == {}
    return bag.get_dag("checkpoint_reconciliation")


def test_dag_reconciles_and_records_the_report(dc1, dc2, name, tmp_path: Path, start_mirror) -> None:  # type: ignore[no-untyped-def]
    topic, remote = f"{name}.rec", f"dc1.{name}.rec"
    create_topic(dc1, topic, 2)
    produce_sequence(dc1, topic, 2, 200)
    config = write_config(tmp_path / "mm2.properties", {"dc1": dc1, "dc2": dc2}, flow_lines(name))
    mirror = start_mirror([], config=config)
    wait_until(lambda: remote in admin(dc2).list_topics(timeout=5).topics and end_offsets(dc2, remote) ==
               {0: 100, 1: 100}, 90, what="replication")
    assert mirror.stop() == 0
    dag = load_dag(config)
    store = StateStore(os.environ["MIRROR_CORE_DB_URL"])

    run = dag.test(run_conf={"flow": "dc1->dc2", "window": "all_retained"})
    assert run.state == "success"
    latest = store.last_reconciliation("dc1->dc2", status=None)
    assert latest is not None and latest.run_id == run.run_id and latest.status == "ok"
    mine = [p for p in latest.partitions if p["topic"] == topic]
    assert [(p["partition"], p["checked"], p["source_end"]) for p in mine] == [(0, 100, 100), (1, 100, 100)]

    # An unexpected record on the target, then new source records: the default window (since the
    # last success) covers only the new ones, and the run fails naming the extra record.
    p = Producer({"bootstrap.servers": dc2})
    p.produce(remote, key=b"intruder", value=b"x", partition=1)
    assert p.flush(30) == 0
    produce_sequence(dc1, topic, 2, 20, start=200)
    mirror = start_mirror([], config=config)
    wait_until(lambda: end_offsets(dc2, remote) == {0: 110, 1: 111}, 90, what="replication after the fault")
    assert mirror.stop() == 0
    failed = dag.test(run_conf={"flow": "dc1->dc2", "window": "since_last_success"})
    assert failed.state == "failed"
    latest = store.last_reconciliation("dc1->dc2", status=None)
    assert latest is not None and latest.run_id == failed.run_id and latest.status == "discrepancies"
    mine = {p["partition"]: p for p in latest.partitions if p["topic"] == topic}
    assert (mine[0]["source_start"], mine[0]["checked"], mine[0]["extra"]) == (100, 10, [])
    assert (mine[1]["source_start"], mine[1]["checked"], mine[1]["extra"]) == (100, 10, [100])
    assert [r.flow for r in store.latest_reconciliations()] == ["dc1->dc2"]
