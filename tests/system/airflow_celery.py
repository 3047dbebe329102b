"""Airflow 3.3 with the CeleryExecutor, as separate processes on loopback: Redis (Debian's
``redis-server``) as the Celery broker, PostgreSQL as the metadata database and the Celery result
backend, and ``airflow api-server``, ``scheduler``, ``dag-processor``, ``triggerer`` and two
``airflow celery worker``. DAG runs are triggered, watched and their approval gates answered through
the REST API only, with a token a named user gets from ``/auth/token`` (the path a person takes).

Failure handling chosen for killed workers (the README's "Deployment / system test" says why):
``CELERY_SETTINGS`` and ``SCHEDULER_SETTINGS`` below.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil

from mirror_core.devcluster.local_cluster import free_port

REPO = Path(__file__).resolve().parents[2]
AIRFLOW = [sys.executable, "-m", "airflow"]

# acks_late (Airflow's default, kept explicit): a task message is acknowledged when the task ends, so
# the message of a worker killed mid-task goes back to the queue after the visibility timeout instead of
# being lost. A redelivered message is harmless: its task instance try has moved on (retried by the
# scheduler), and the execution API refuses to start it twice. Prefetch 1: a dying worker holds at
# most one queued message per process that another worker could have run.
CELERY_SETTINGS = {
    "AIRFLOW__CELERY__TASK_ACKS_LATE": "True",
    "AIRFLOW__CELERY__WORKER_PREFETCH_MULTIPLIER": "1",
    "AIRFLOW__CELERY__WORKER_CONCURRENCY": "2",
    "AIRFLOW__CELERY_BROKER_TRANSPORT_OPTIONS__VISIBILITY_TIMEOUT": "120",
}
# A task whose worker died stops heartbeating: after 60s (default 300s) the scheduler fails that try
# and the task's own retries (RETRY_SAFE in the DAGs: 2, 60s apart) run it on a live worker. A task
# queued on a dead worker is re-queued after 120s (default 600s).
SCHEDULER_SETTINGS = {
    "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "60",
    "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT_DETECTION_INTERVAL": "5",
    "AIRFLOW__SCHEDULER__TASK_QUEUED_TIMEOUT": "120",
    # Only the runs the test triggers: no hourly reconciliation or 10-minute sync in between.
    "AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE": "False",
}


def redis_command(port: int, root: Path) -> list[str]:
    return ["redis-server", "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly", "no",
            "--dir", str(root)]


def _signal_tree(proc: psutil.Process, sig: int) -> list[psutil.Process]:
    """Send ``sig`` to ``proc`` and all its descendants (task processes sit in process groups of their
    own, so a group signal would miss them); returns them."""
    try:
        tree = [*proc.children(recursive=True), proc]
    except psutil.NoSuchProcess:
        return []
    for p in tree:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.send_signal(sig)
    return tree


@dataclass
class AirflowCelery:
    """The processes; ``env`` is passed to every Airflow process (the DAGs' settings go there too)."""

    root: Path
    db_url: str  # postgresql+psycopg2://... (metadata and Celery results)
    env: dict[str, str]
    users: dict[str, str] = field(default_factory=dict)  # name -> password, all admins
    workers_n: int = 2
    api_port: int = field(default_factory=free_port)
    redis_port: int = field(default_factory=free_port)
    procs: dict[str, psutil.Popen] = field(default_factory=dict)
    killed: set[str] = field(default_factory=set)  # by the test: not a failure

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    def _env(self) -> dict[str, str]:
        passwords = self.root / "passwords.json"
        passwords.write_text(json.dumps(self.users))
        return {
            **os.environ, **self.env, **CELERY_SETTINGS, **SCHEDULER_SETTINGS,
            "AIRFLOW_HOME": str(self.root / "home"),
            "AIRFLOW__CORE__EXECUTOR": "CeleryExecutor",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": self.db_url,
            "AIRFLOW__CELERY__BROKER_URL": f"redis://127.0.0.1:{self.redis_port}/0",
            "AIRFLOW__CELERY__RESULT_BACKEND": "db+" + self.db_url,
            "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
            "AIRFLOW__CORE__PLUGINS_FOLDER": str(REPO / "plugins"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.base_url}/execution/",
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(self.api_port),
            "AIRFLOW__API__BASE_URL": self.base_url,
            # Every process signs and checks the same JWTs (workers -> execution API).
            "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_urlsafe(32),
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "False",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": ",".join(f"{u}:admin" for u in self.users),
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "10",
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",  # spark-submit
            "PYTHONPATH": str(REPO),
        }

    def _launch(self, name: str, cmd: list[str], env: dict[str, str]) -> None:
        log = open(self.root / f"{name}.log", "ab")  # noqa: SIM115 - the child keeps it
        self.procs[name] = psutil.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=self.root,
                                        start_new_session=True)

    def start(self, timeout: float = 240) -> AirflowCelery:
        (self.root / "home").mkdir(parents=True, exist_ok=True)
        env = self._env()
        self._launch("redis", redis_command(self.redis_port, self.root), env)
        migrate = subprocess.run([*AIRFLOW, "db", "migrate"], env=env, capture_output=True, text=True,
                                 timeout=600, cwd=self.root)
        assert migrate.returncode == 0, migrate.stdout[-3000:] + migrate.stderr[-3000:]
        for name in ("api-server", "scheduler", "dag-processor", "triggerer"):
            self._launch(name, [*AIRFLOW, name], env)
        for i in range(self.workers_n):
            self.start_worker(i, env)
        self.wait(lambda: self._healthy(), timeout, "the API server and scheduler healthy")
        return self

    def start_worker(self, i: int, env: dict[str, str] | None = None) -> None:
        self._launch(f"worker{i}", [*AIRFLOW, "celery", "worker", "--celery-hostname", f"worker{i}@%h"],
                     env or self._env())

    def _healthy(self) -> bool:
        try:
            health = httpx.get(f"{self.base_url}/api/v2/monitor/health", timeout=5).json()
        except (httpx.HTTPError, ValueError):
            return False
        return bool(health.get("scheduler", {}).get("status") == "healthy")

    def wait(self, check: Callable[[], Any], timeout: float, what: str) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            dead = [n for n, p in self.procs.items() if p.poll() is not None and n not in self.killed]
            assert not dead, f"Airflow processes exited: {dead}; logs in {self.root}"
            result = check()
            if result:
                return result
            assert time.monotonic() < deadline, f"not within {timeout:.0f}s: {what}; logs in {self.root}"
            time.sleep(1)

    def worker_tree(self, i: int) -> set[int]:
        """Pids of Celery worker ``i``: the worker, its pool, the task supervisors and task processes
        (those run in process groups of their own) and what they started (spark-submit)."""
        main = self.procs[f"worker{i}"]
        return {main.pid, *(c.pid for c in main.children(recursive=True))}

    def kill_worker(self, i: int) -> None:
        """SIGKILL Celery worker ``i`` and every process under it, as when its host dies."""
        psutil.wait_procs(_signal_tree(self.procs[f"worker{i}"], signal.SIGKILL), timeout=30)
        self.killed.add(f"worker{i}")

    def client(self, user: str) -> httpx.Client:
        """A REST API client for ``user``, with the token ``/auth/token`` gives for their password."""
        r = httpx.post(f"{self.base_url}/auth/token", json={"username": user, "password": self.users[user]},
                       timeout=30)
        assert r.status_code == 201, f"login of {user}: HTTP {r.status_code} {r.text[:300]}"
        return httpx.Client(base_url=f"{self.base_url}/api/v2", timeout=30,
                            headers={"Authorization": f"Bearer {r.json()['access_token']}"})

    def stop(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                _signal_tree(p, signal.SIGTERM)
        _, alive = psutil.wait_procs(list(self.procs.values()), timeout=30)
        for p in alive:
            _signal_tree(p, signal.SIGKILL)


@dataclass
class DagRuns:
    """Trigger DAG runs, answer their gates and wait for them, all through the REST API."""

    api: httpx.Client
    airflow: AirflowCelery

    def wait_parsed(self, dag_ids: list[str], timeout: float = 180) -> None:
        self.airflow.wait(lambda: all(self.api.get(f"/dags/{d}").status_code == 200 for d in dag_ids),
                          timeout, f"DAGs {dag_ids} parsed")

    def trigger(self, dag_id: str, conf: dict[str, Any]) -> str:
        r = self.api.post(f"/dags/{dag_id}/dagRuns", json={"logical_date": None, "conf": conf})
        assert r.status_code == 200, f"trigger {dag_id}: HTTP {r.status_code} {r.text[:500]}"
        return str(r.json()["dag_run_id"])

    def tasks(self, dag_id: str, run_id: str) -> list[dict[str, Any]]:
        r = self.api.get(f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances", params={"limit": 100})
        assert r.status_code == 200, r.text[:300]
        return list(r.json()["task_instances"])

    def states(self, dag_id: str, run_id: str) -> dict[str, str | None]:
        return {f"{t['task_id']}[{t['map_index']}]" if t["map_index"] >= 0 else t["task_id"]: t["state"]
                for t in self.tasks(dag_id, run_id)}

    def state(self, dag_id: str, run_id: str) -> str:
        return str(self.api.get(f"/dags/{dag_id}/dagRuns/{run_id}").json()["state"])

    def finish(self, dag_id: str, run_id: str, timeout: float) -> str:
        self.airflow.wait(lambda: self.state(dag_id, run_id) in ("success", "failed"), timeout,
                          f"{dag_id} run {run_id} finished (tasks: {self.states(dag_id, run_id)})")
        return self.state(dag_id, run_id)

    def answer(self, dag_id: str, run_id: str, task_id: str, choice: str, timeout: float = 180) -> dict[str, Any]:
        """Wait for the gate to park (awaiting_input), then answer it as the client's user: the hitlDetails
        PATCH the UI's button sends (tests/dags/hitl.py answers the same endpoint in-process)."""
        self.airflow.wait(lambda: self.states(dag_id, run_id).get(task_id) == "awaiting_input", timeout,
                          f"{dag_id}.{task_id} awaiting input")
        path = f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/-1/hitlDetails"
        r = self.api.patch(path, json={"chosen_options": [choice], "params_input": {}})
        assert r.status_code == 200, f"{task_id}: HTTP {r.status_code} {r.text[:300]}"
        return dict(r.json())
