"""A SCRAM password taken from a Kafka config provider stays out of everything Airflow keeps or shows.

The ``topic_config_sync`` DAG runs for real against a SASL_SSL (SCRAM-SHA-512) cluster whose password is
only in a secrets file (``${file:...}`` in mm2.properties, file mode 600). The tasks run the way a
deployment runs them: the LocalExecutor hands them to Airflow's task supervisor, which forks the task
process, writes the task log file under ``AIRFLOW_HOME/logs`` and talks to the execution API of a real
API server (started here, in a thread, on the test's metadata DB). Then the password is looked for in
every file under AIRFLOW_HOME (task logs, the metadata DB with its XComs and rendered template fields,
the mirror_core state store), in what the run printed, and in the run's XComs and rendered fields as the
REST API returns them. No Airflow connection holds a copy: the DAGs read the clusters from the config.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from mirror_core.devcluster.local_cluster import LocalCluster
from mirror_core.state.store import StateStore
from tests.dags.conftest import REPO, api_server
from tests.kafka_harness import create_topic, partition_count, unique, write_config
from tests.security_harness import SCRAM_JAAS, SCRAM_USER, running_secure_cluster

# Distinctive, long enough for every masker, and nothing JSON or a URL would escape.
PASSWORD = "Qv4-tcs-SCRAM-pr0vider-S3CRET-7731"
DAG_ID = "topic_config_sync"


def provider_config(path: Path, secrets: Path, clusters: dict[str, str], secure_lines: list[str],
                    flow_lines: list[str]) -> Path:
    """mm2.properties whose dc1s JAAS line takes the password from ``secrets`` through the file provider."""
    jaas = (f"dc1s.sasl.jaas.config = {SCRAM_JAAS} username='{SCRAM_USER}' "
            f"password='${{file:{secrets}:dc1s.password}}';")
    lines = ["config.providers = file",
             "config.providers.file.class = org.apache.kafka.common.config.provider.FileConfigProvider",
             *(jaas if line.startswith("dc1s.sasl.jaas.config") else line for line in secure_lines),
             *flow_lines]
    return write_config(path, clusters, lines)


PROBE_DAG = """
import logging
from datetime import datetime

from airflow.sdk import dag, task

from mirror_core.airflow_support import load_mirror_config


def scram_password() -> str:
    return load_mirror_config().cluster("dc1s").clients["admin"]["sasl.password"]


@dag(dag_id="mirror_secret_probe", schedule=None, start_date=datetime(2026, 1, 1), catchup=False,
     user_defined_macros={"scram_password": scram_password})
def mirror_secret_probe():
    @task(templates_dict={"rendered": "rendered: {{ scram_password() }}"})
    def leak(templates_dict=None):
        password = scram_password()
        print(f"printed: {password}")
        logging.getLogger("mirror_probe").warning("logged: %s", password)
        return {"length": len(password)}

    leak()


mirror_secret_probe()
"""


@dataclass(frozen=True)
class SecureSetup:
    config: Path
    topic: str
    dc2: str


@pytest.fixture(scope="module")
def secure_setup(clusters: dict[str, LocalCluster], tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureSetup]:
    """A SASL_SSL cluster dc1s (password only in a mode-600 secrets file) and plaintext dc2, with a
    config whose flow dc1s->dc2 mirrors one topic of dc1s."""
    root = tmp_path_factory.mktemp("secrets-airflow")
    name = unique("t")
    dc2 = clusters["dc2"].bootstrap
    with running_secure_cluster("dc1s", root / "kafka", PASSWORD) as secure:
        topic = f"{name}.secret"
        create_topic(secure.plain_bootstrap, topic, 2, {"retention.ms": "3456000"})
        secrets = root / "secrets" / "secrets.properties"
        secrets.parent.mkdir()
        secrets.write_text(f"dc1s.password = {PASSWORD}\n")
        secrets.chmod(0o600)
        config = provider_config(root / "mm2.properties", secrets, {"dc1s": secure.sasl_bootstrap, "dc2": dc2},
                                 secure.lines("dc1s"), ["dc1s->dc2.enabled = true", f"dc1s->dc2.topics = {name}.*"])
        assert PASSWORD not in config.read_text()  # the password is in the secrets file only
        yield SecureSetup(config, topic, dc2)


def start_like_make_airflow(setup: SecureSetup, monkeypatch: pytest.MonkeyPatch) -> None:
    """The environment `make airflow` (scripts/airflow.sh) gives every Airflow process: the config (no
    connection derived from it, so the password is in no Airflow process's environment)."""
    monkeypatch.setenv("MIRROR_CORE_CONFIG", str(setup.config))
    assert not [k for k, v in os.environ.items() if PASSWORD in v]


def run_like_a_deployment(dag: Any, conf: dict[str, Any], monkeypatch: pytest.MonkeyPatch,
                          auth_headers: dict[str, str]) -> tuple[Any, dict[str, Any]]:
    """Run ``dag`` through the LocalExecutor (task supervisor, forked task process, log file) against an
    API server of this process; the run and its task instances, XComs and logs as the REST API shows them."""
    # This process loaded the config (dag.test() parses the dags folder) before the executor forks its
    # workers: the task processes inherit mirror_core's registered secrets, while the supervisor resets
    # Airflow's masker for each task. Loading the config again in the task must still tell Airflow.
    from airflow.executors.local_executor import LocalExecutor

    end = LocalExecutor.end

    def end_without_hanging(self: LocalExecutor) -> None:
        # Airflow 3.3's end() sends one stop message per worker it sees alive and then joins them all; a
        # worker it miscounted waits for a message forever (seen once: the suite hung in join()). Spare
        # messages first: a worker takes one and exits, the rest are dropped with the queue.
        for _ in range(len(self.workers) + 2):
            self.activity_queue.put(None)
        end(self)

    monkeypatch.setattr(LocalExecutor, "end", end_without_hanging)
    with api_server() as base:
        monkeypatch.setenv("AIRFLOW__CORE__EXECUTION_API_SERVER_URL", f"{base}/execution/")
        monkeypatch.setenv("AIRFLOW__CORE__PARALLELISM", "2")
        run = dag.test(run_conf=conf, use_executor=True)
        with httpx.Client(base_url=f"{base}/api/v2", headers=auth_headers, timeout=30) as api:
            return run, api_views(api, dag.dag_id, run.run_id)


def task_logs(home: Path, dag_id: str, run_id: str) -> dict[str, str]:
    """Task log files of a run by task id; each exists and is non-empty."""
    run_dir = home / "logs" / f"dag_id={dag_id}" / f"run_id={run_id}"
    files = sorted(p for p in run_dir.rglob("*.log") if p.is_file())
    out = {p.relative_to(run_dir).parts[0].removeprefix("task_id="): p.read_text() for p in files}
    assert out and all(text.strip() for text in out.values()), files
    return out


def assert_nowhere(home: Path, *texts: str) -> None:
    """The password is in no file under AIRFLOW_HOME (task logs, the metadata DB with its XComs, rendered
    fields, serialized DAGs and audit log, the mirror_core state store, airflow.cfg) nor in ``texts``."""
    needle = PASSWORD.encode()
    assert sorted(str(p.relative_to(home)) for p in home.rglob("*") if p.is_file() and needle in p.read_bytes()) == []
    assert Path(os.environ["MIRROR_CORE_DB_URL"].removeprefix("sqlite:///")).is_relative_to(home)
    for i, text in enumerate(texts):
        assert PASSWORD not in text, f"text {i}"


def test_topic_sync_over_sasl_ssl_leaves_the_password_nowhere(
        secure_setup: SecureSetup, airflow_db: Path, monkeypatch: pytest.MonkeyPatch,
        capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture, auth_headers: dict[str, str]) -> None:
    setup, home = secure_setup, airflow_db
    start_like_make_airflow(setup, monkeypatch)
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(REPO / "dags" / "topic_config_sync.py"))
    assert bag.import_errors == {}
    dag = bag.get_dag(DAG_ID)
    caplog.set_level("DEBUG")
    capfd.readouterr()
    run, shown = run_like_a_deployment(dag, {"flow": "dc1s->dc2", "dry_run": False}, monkeypatch, auth_headers)
    printed = capfd.readouterr()

    # Preconditions: the run succeeded, over SASL_SSL with the password from the file, and did its work.
    states = {(ti.task_id, ti.map_index): ti.state for ti in run.get_task_instances()}
    assert run.state == "success", (states, printed.out[-3000:], printed.err[-3000:])
    assert states == {("plan", -1): "success", ("sync", 0): "success"}, states
    remote = f"dc1s.{setup.topic}"
    assert partition_count(setup.dc2, remote) == 2
    store = StateStore(os.environ["MIRROR_CORE_DB_URL"])
    assert Path(os.environ["MIRROR_CORE_DB_URL"].removeprefix("sqlite:///")).is_file()  # scanned below
    last = store.sync_runs("dc1s->dc2", limit=1)[0]
    assert (last.run_id, last.dry_run, last.status) == (run.run_id, False, "drift")
    assert (remote, "created", "applied") in {(d.topic, d.kind, d.action) for d in store.recent_drift("dc1s->dc2")}
    logs = task_logs(home, DAG_ID, run.run_id)
    assert set(logs) == {"plan", "sync"}
    assert f"applied: created {remote}: 2 partitions" in logs["sync"]  # the task's own output is in its log
    assert shown["xcom"] and shown["rendered"] and shown["logs"], shown
    assert remote in json.dumps(shown["xcom"])
    stored = db_rows(DAG_ID, run.run_id)
    assert stored["xcom"] and stored["rendered"], stored

    assert_nowhere(home, printed.out, printed.err, caplog.text, json.dumps(shown), json.dumps(stored, default=str))


def test_airflow_masks_the_password_a_task_prints_logs_or_renders(
        secure_setup: SecureSetup, airflow_db: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
        capfd: pytest.CaptureFixture[str], auth_headers: dict[str, str]) -> None:
    """The masking itself: a task that prints, logs and renders the password (loaded through
    load_mirror_config, as the DAGs do) gets it masked by Airflow: mirror_core told Airflow's masker."""
    home = airflow_db
    start_like_make_airflow(secure_setup, monkeypatch)
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.dagbag import DagBag, sync_bag_to_db

    probe = tmp_path / "mirror_secret_probe.py"
    probe.write_text(PROBE_DAG)
    bag = DagBag(dag_folder=str(probe))
    assert bag.import_errors == {}
    # dag.test() runs DAGs of a bundle; the probe is not in dags/: record it as one of the dags-folder bundle's.
    DagBundlesManager().sync_bundles_to_db()  # type: ignore[no-untyped-call]
    sync_bag_to_db(bag, "dags-folder", None)
    dag = bag.get_dag("mirror_secret_probe")
    capfd.readouterr()
    run, shown = run_like_a_deployment(dag, {}, monkeypatch, auth_headers)
    printed = capfd.readouterr()

    assert run.state == "success", (printed.out[-3000:], printed.err[-3000:])
    log = task_logs(home, "mirror_secret_probe", run.run_id)["leak"]
    assert "printed: ***" in log and "logged: ***" in log, log
    rendered = db_rows("mirror_secret_probe", run.run_id)["rendered"]
    assert "rendered: ***" in json.dumps(rendered), rendered
    values = [x["value"] for x in shown["xcom"]]
    assert values == [{"length": len(PASSWORD)}], values  # the task really had the password

    assert_nowhere(home, printed.err, json.dumps(shown), json.dumps(rendered, default=str))
    # Not masked, by Airflow: the LocalExecutor also forwards every task's log lines to the worker's own
    # stdout (subprocess_logs_to_stdout), through the server-side logging configuration, which has no
    # secrets-masking processor (the task log file above is masked, by the same supervisor). A secret a task
    # prints therefore reaches the scheduler's stdout as it is, whatever mirror_core (or a Connection) told
    # the masker. If this starts failing, Airflow masks that copy too: make it `not in`.
    assert f"printed: {PASSWORD}" in printed.out and f"logged: {PASSWORD}" in printed.out


def db_rows(dag_id: str, run_id: str) -> dict[str, list[Any]]:
    """The run's XCom values and rendered template fields, straight from the metadata DB."""
    from airflow.models.renderedtifields import RenderedTaskInstanceFields
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as s:
        xcoms = s.scalars(select(XComModel).where(XComModel.dag_id == dag_id, XComModel.run_id == run_id)).all()
        rendered = s.scalars(select(RenderedTaskInstanceFields).where(
            RenderedTaskInstanceFields.dag_id == dag_id, RenderedTaskInstanceFields.run_id == run_id)).all()
        return {"xcom": [(x.task_id, x.map_index, x.key, x.value) for x in xcoms],
                "rendered": [(r.task_id, r.map_index, r.rendered_fields, r.k8s_pod_yaml) for r in rendered]}


def api_views(api: httpx.Client, dag_id: str, run_id: str) -> dict[str, Any]:
    """The run's task instances (with rendered fields), XComs and task logs, as the REST API returns them."""
    base = f"/dags/{dag_id}/dagRuns/{run_id}"
    tis = api.get(f"{base}/taskInstances")
    assert tis.status_code == 200, tis.text
    out: dict[str, Any] = {"xcom": [], "rendered": [], "logs": []}
    for ti in tis.json()["task_instances"]:
        task, index = ti["task_id"], ti["map_index"]
        out["rendered"].append(ti.get("rendered_fields"))
        entries = api.get(f"{base}/taskInstances/{task}/xcomEntries", params={"map_index": index})
        assert entries.status_code == 200, entries.text
        for entry in entries.json()["xcom_entries"]:
            value = api.get(f"{base}/taskInstances/{task}/xcomEntries/{entry['key']}",
                            params={"map_index": index, "deserialize": True})
            assert value.status_code == 200, value.text
            out["xcom"].append(value.json())
        logs = api.get(f"{base}/taskInstances/{task}/logs/{ti['try_number']}", params={"map_index": index},
                       headers={"Accept": "application/json"})
        assert logs.status_code == 200, logs.text
        out["logs"].append(logs.json())
    return out
