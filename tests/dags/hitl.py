"""Answer Human-in-the-loop gates the way a person does: through Airflow's REST API.

``dag.test()`` must run in the main thread and waits while a HITL task is parked in
AWAITING_INPUT; a background thread finds the parked task and PATCHes its hitlDetails on an
in-process API server that shares the metadata DB — the same endpoint the UI's button calls.
"""

from __future__ import annotations

import threading
import time
from typing import Any


class Responder:
    """Answers the gates of one DAG run in order: ``answers`` maps task_id -> chosen option."""

    def __init__(self, dag_id: str, answers: dict[str, str], params: dict[str, dict[str, Any]] | None = None,
                 timeout: float = 600, user: str | None = None) -> None:
        from airflow.api_fastapi.app import create_app, init_auth_manager
        from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser
        from fastapi.testclient import TestClient

        self.dag_id, self.answers, self.params, self.timeout = dag_id, dict(answers), params or {}, timeout
        # ``user``: answer as this named user, with a session token signed like the UI's (without one, the
        # all-admins mode answers as its anonymous admin).
        headers = {}
        if user is not None:
            token = init_auth_manager().generate_jwt(SimpleAuthManagerUser(username=user, role="admin"))
            headers["Authorization"] = f"Bearer {token}"
        self.client = TestClient(create_app(), headers=headers)
        self.bodies: dict[str, str] = {}  # what the approver saw
        self.responses: dict[str, Any] = {}
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Responder:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _parked(self) -> list[tuple[str, str]]:
        from airflow.models.taskinstance import TaskInstance
        from airflow.utils.session import create_session

        with create_session() as s:
            rows = s.query(TaskInstance).filter(TaskInstance.dag_id == self.dag_id,
                                                TaskInstance.state == "awaiting_input").all()
            return [(r.run_id, r.task_id) for r in rows]

    def _run(self) -> None:
        deadline = time.monotonic() + self.timeout
        while not self._stop.is_set() and self.answers and time.monotonic() < deadline:
            for run_id, task_id in self._parked():
                if task_id not in self.answers:
                    self.errors.append(f"unexpected gate {task_id}")
                    continue
                path = f"/api/v2/dags/{self.dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/-1/hitlDetails"
                detail = self.client.get(path)
                self.bodies[task_id] = detail.json().get("body") or "" if detail.status_code == 200 else ""
                choice = self.answers.pop(task_id)
                r = self.client.patch(path, json={"chosen_options": [choice],
                                                  "params_input": self.params.get(task_id, {})})
                self.responses[task_id] = r.json()
                if r.status_code != 200:
                    self.errors.append(f"{task_id}: HTTP {r.status_code} {r.text[:300]}")
            time.sleep(0.5)
