"""The orchestration engines as a deployment runs them: Airflow with the CeleryExecutor (separate
api-server, scheduler, dag-processor, triggerer, 2 Celery workers; Redis broker; PostgreSQL metadata and
results) and a Spark standalone cluster (master + 2 workers), running the topic sync, the checkpoint
reconciliation on ``spark://``, a planned failover approved through the REST API by a named user, a
failback and a DR drill; one Spark worker and one Celery worker are SIGKILLed mid-task.

Only ``make system-test`` runs it (``pytest tests/system``); ``make test`` leaves tests/system out.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from mirror_core.devcluster.local_cluster import LocalCluster
from mirror_core.offsets.groups import commit_offsets, committed_offsets
from mirror_core.state.store import StateStore
from tests.kafka_harness import (
    MirrorProcess,
    admin,
    create_topic,
    end_offsets,
    produce_sequence,
    unique,
    wait_until,
    write_config,
)
from tests.pg_harness import pg_bin, postgres_server
from tests.system.airflow_celery import AirflowCelery, DagRuns
from tests.system.spark_standalone import SparkStandalone

pytestmark = [pytest.mark.system, pytest.mark.timeout(2400)]

DAGS = ["topic_config_sync", "checkpoint_reconciliation", "failover", "failback", "dr_drill"]
USERS = {"dana": unique("pw-"), "eve": unique("pw-")}  # dana approves failovers; eve may not
# The DR drill's known scenario (tests/dags/test_dr_drill_dag.py measures the same one in-process).
DRILL = {"records": 40, "consume_before_failure": 12, "unreplicated_at_failure": 9, "seed": 7, "partitions": 3,
         "rate": 400, "max_rpo_records": 100, "max_rto_seconds": 60, "max_duplicates": 0, "max_losses": 100}


@pytest.fixture(scope="module")
def kafka(clusters: dict[str, LocalCluster]) -> dict[str, str]:
    """Alias -> bootstrap of the two clusters the engines work against: under tests/system, the
    three-node clusters of tests/system/conftest.py (nothing else in this module depends on which)."""
    return {alias: c.bootstrap for alias, c in clusters.items()}


@dataclass
class Engines:
    airflow: AirflowCelery
    spark: SparkStandalone
    runs: DagRuns  # as dana
    eve: DagRuns
    store: StateStore
    mirror: MirrorProcess
    prefix: str
    kafka: dict[str, str]


def _database(url: str, name: str) -> str:
    """A second database on the harness's server: Airflow's tables apart from mirror_core's."""
    host_port = url.split("@", 1)[1].split("/", 1)[0]
    host, port = host_port.split(":")
    psql = pg_bin("psql")
    assert psql
    subprocess.run([psql, "-h", host, "-p", port, "-U", "postgres", "-c", f"CREATE DATABASE {name}"], check=True,
                   capture_output=True)
    return url.rsplit("/", 1)[0] + f"/{name}"


@pytest.fixture(scope="module")
def engines(kafka: dict[str, str], request: pytest.FixtureRequest) -> Iterator[Engines]:
    # Not under pytest's basetemp: other sessions on the machine rotate it away; kept when a test failed.
    root = Path(tempfile.mkdtemp(prefix="mirror-system-"))
    prefix = unique("sys")
    lines = [f"{f}.{k}" for f in ("dc1->dc2", "dc2->dc1") for k in (
        f"topics = {prefix}.*", f"consumer.group.id = {prefix}-workers-{f.replace('->', '-')}")]
    lines += ["dc1->dc2.enabled = true", "dc2->dc1.enabled = false", "emit.heartbeats.enabled = false",
              "refresh.topics.interval.seconds = 2", "offset.flush.interval.ms = 200",
              "emit.checkpoints.interval.seconds = 1"]
    config = write_config(root / "mm2.properties", kafka, lines)
    with postgres_server() as state_db:
        airflow_db = _database(state_db, "airflow")
        store = StateStore(state_db)
        store.migrate()
        mirror = MirrorProcess(config, root, "mirror", ["--state-db", state_db]).start()
        spark = SparkStandalone(root / "spark")
        host, port = spark.url.rsplit(":", 1)
        airflow = AirflowCelery(root / "airflow", airflow_db, users=USERS, env={
            "MIRROR_CORE_CONFIG": str(config),
            "MIRROR_CORE_DB_URL": state_db,
            "MIRROR_CORE_APPROVERS_FAILOVER": "dana",
            "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": host, "port": int(port)}),
        })
        try:
            began = time.monotonic()
            spark.start()
            airflow.start()
            runs = DagRuns(airflow.client("dana"), airflow)
            runs.wait_parsed(DAGS)
            print(f"engines up in {time.monotonic() - began:.0f}s")
            yield Engines(airflow, spark, runs, DagRuns(airflow.client("eve"), airflow), store, mirror, prefix,
                          kafka)
        finally:
            airflow.stop()
            spark.stop()
            mirror.ensure_dead()
            if request.session.testsfailed:
                print(f"system test logs kept in {root}")
            else:
                shutil.rmtree(root, ignore_errors=True)


def _reconciled(e: Engines, run_id: str, topic: str) -> dict[int, dict[str, Any]]:
    latest = e.store.last_reconciliation("dc1->dc2", status=None)
    assert latest is not None and latest.run_id == run_id, latest
    assert latest.status == "ok", latest.partitions
    return {p["partition"]: p for p in latest.partitions if p["topic"] == topic}


def test_workflows_survive_killed_workers(engines: Engines) -> None:
    e, began = engines, time.monotonic()
    dc1, dc2 = e.kafka["dc1"], e.kafka["dc2"]
    t, remote, group, app = f"{e.prefix}.orders", f"dc1.{e.prefix}.orders", f"{e.prefix}-app", f"{e.prefix}-app"

    # Topic config sync: a source topic the mirror has not created remotely yet gets its remote topic.
    cfg = f"{e.prefix}.cfg"
    create_topic(dc1, cfg, 3)
    run_id = e.runs.trigger("topic_config_sync", {"flow": "dc1->dc2", "dry_run": False})
    assert e.runs.finish("topic_config_sync", run_id, 180) == "success", e.runs.states("topic_config_sync", run_id)
    assert e.store.sync_runs("dc1->dc2")[0].run_id == run_id
    assert f"dc1.{cfg}" in admin(dc2).list_topics(timeout=10).topics

    # Data the reconciliation checks and the failover moves: 2 x 2000 records, 500 consumed.
    create_topic(dc1, t, 2)
    produce_sequence(dc1, t, 2, 4000)
    commit_offsets(admin(dc1), group, {(t, 0): 300, (t, 1): 200})
    wait_until(lambda: end_offsets(dc2, remote) == {0: 2000, 1: 2000}, 120, what="forward replication")

    # Reconciliation on spark://, one Spark worker SIGKILLed while its executor works for the job.
    rec = "checkpoint_reconciliation"
    run_id = e.runs.trigger(rec, {"flow": "dc1->dc2", "window": "all_retained"})
    busy = e.airflow.wait(lambda: next((w for w in e.spark.workers if w.tasks_started()), None), 420,
                          "an executor of the reconciliation job running tasks on a Spark worker")
    apps = e.spark.state()["activeapps"]
    assert [a["name"] for a in apps] == ["mirror-core reconcile dc1->dc2"], apps  # precondition: the job runs
    assert busy.executors(), "the busy Spark worker shows no executor"  # ... with an executor on that worker
    e.spark.kill_worker(busy.index)
    assert e.runs.finish(rec, run_id, 480) == "success", e.runs.states(rec, run_id)
    mine = _reconciled(e, run_id, t)
    assert [(p, mine[p]["checked"], mine[p]["source_end"]) for p in sorted(mine)] == [(0, 2000, 2000),
                                                                                    (1, 2000, 2000)]
    master = e.spark.state()
    assert sum(w["state"] == "ALIVE" for w in master["workers"]) == 1, master["workers"]
    assert [a["state"] for a in master["completedapps"]] == ["FINISHED"], master["completedapps"]

    # Again, one Celery worker SIGKILLed while it runs the Spark submission: the scheduler fails that
    # try when its heartbeats stop, the task's retry runs on the other worker.
    run_id = e.runs.trigger(rec, {"flow": "dc1->dc2", "window": "all_retained"})

    def running_reconcile() -> int | None:
        ti = next((x for x in e.runs.tasks(rec, run_id) if x["task_id"] == "reconcile"), None)
        return ti["pid"] if ti and ti["state"] == "running" and ti["pid"] else None

    pid = e.airflow.wait(running_reconcile, 420, "the reconcile task running on a Celery worker")
    victim = next((i for i in range(2) if pid in e.airflow.worker_tree(i)), None)
    assert victim is not None, f"task process {pid} under no Celery worker"  # precondition
    e.airflow.kill_worker(victim)
    assert e.runs.finish(rec, run_id, 600) == "success", e.runs.states(rec, run_id)
    ti = next(x for x in e.runs.tasks(rec, run_id) if x["task_id"] == "reconcile")
    assert ti["try_number"] == 2, ti  # the first try died with the worker; its retry ran elsewhere
    _reconciled(e, run_id, t)

    # Planned failover, four eyes: eve triggers it and is refused as its approver by the API (not an approver of
    # failovers), dana approves; the record names dana.
    conf = {"flow": "dc1->dc2", "apps": [app], "groups": [group], "mode": "planned", "drain_timeout_s": 60}
    run_id = e.eve.trigger("failover", conf)
    path = f"/dags/failover/dagRuns/{run_id}/taskInstances/approve/-1/hitlDetails"
    e.airflow.wait(lambda: e.runs.states("failover", run_id).get("approve") == "awaiting_input", 180,
                   "the failover gate")
    refused = e.eve.api.patch(path, json={"chosen_options": ["Approve"], "params_input": {}})
    assert refused.status_code == 403, refused.text[:300]
    e.runs.answer("failover", run_id, "approve", "Approve")
    assert e.runs.finish("failover", run_id, 240) == "success", e.runs.states("failover", run_id)
    record = e.store.failovers()[0]
    assert (record.kind, record.status, record.approved_by) == ("failover", "done", "dana")
    assert committed_offsets(admin(dc2), group) == {(remote, 0): 300, (remote, 1): 200}
    assert e.store.active_cluster(app).cluster == "dc2"  # type: ignore[union-attr]

    # Failback (nothing stranded on dc1): the group returns to dc1 at the same offsets.
    fb = {"flow": "dc1->dc2", "apps": [app], "groups": [group], "max_reverse_lag": 0, "drain_timeout_s": 60}
    run_id = e.eve.trigger("failback", fb)  # four eyes: the triggering user may not decide it
    e.runs.answer("failback", run_id, "decide", "Fail back; consumers replay the unreplicated records")
    assert e.runs.finish("failback", run_id, 240) == "success", e.runs.states("failback", run_id)
    assert e.store.failovers()[0].kind == "failback" and e.store.failovers()[0].status == "done"
    assert e.store.active_cluster(app).cluster == "dc1"  # type: ignore[union-attr]
    assert committed_offsets(admin(dc1), group) == {(t, 0): 300, (t, 1): 200}

    # DR drill: its own topics and drill mirror, measured and cleaned up.
    run_id = e.runs.trigger("dr_drill", {"flow": "dc1->dc2", **DRILL})
    assert e.runs.finish("dr_drill", run_id, 300) == "success", e.runs.states("dr_drill", run_id)
    drill = e.store.drills("dc1->dc2")[0]
    assert (drill.status, drill.run_id) == ("passed", run_id)
    assert (drill.rpo_records, drill.duplicates, drill.losses) == (9, 0, 9)
    print(f"system orchestration run: {time.monotonic() - began:.0f}s")
