"""Answer Human-in-the-loop gates the way a person does: through Airflow's REST API.

``dag.test()`` must run in the main thread and waits while a HITL task is parked in
AWAITING_INPUT; a background thread finds the parked task and PATCHes its hitlDetails on an
in-process API server that shares the metadata DB — the same endpoint the UI's button calls.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any


def headers(user: str | None, role: str = "admin") -> dict[str, str]:
    """A session token for ``user`` with ``role`` (viewer, user, op, admin) signed like the UI's (None: none;
    the all-admins mode then answers as its anonymous admin)."""
    from airflow.api_fastapi.app import init_auth_manager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

    if user is None:
        return {}
    token = init_auth_manager().generate_jwt(SimpleAuthManagerUser(username=user, role=role))
    return {"Authorization": f"Bearer {token}"}


_headers = headers


class Responder:
    """Answers the gates of one DAG run in order: ``answers`` maps task_id -> chosen option, or None to leave
    the gate unanswered until its response timeout passes (the scheduler's timeout sweep then applies
    its defaults). ``refused_user``: tries each answer as this user first and keeps the HTTP response.
    ``after_answer(client, run_id, task_id)``: called right after a gate was answered (the API app's client,
    without credentials of its own)."""

    def __init__(self, dag_id: str, answers: dict[str, str | None], params: dict[str, dict[str, Any]] | None = None,
                 timeout: float = 600, user: str | None = None, refused_user: str | None = None,
                 after_answer: Callable[[Any, str, str], None] | None = None) -> None:
        from airflow.api_fastapi.app import create_app
        from fastapi.testclient import TestClient

        self.dag_id, self.answers, self.params, self.timeout = dag_id, dict(answers), params or {}, timeout
        app = create_app()
        self.after_answer, self.anonymous = after_answer, TestClient(app)
        self.client = TestClient(app, headers=_headers(user))
        self.other = TestClient(app, headers=_headers(refused_user)) if refused_user else None
        self.bodies: dict[str, str] = {}  # what the approver saw
        self.details: dict[str, Any] = {}  # the gates' hitlDetails as the API shows them
        self.responses: dict[str, Any] = {}
        self.refusals: dict[str, tuple[int, str]] = {}  # refused_user's answer: (HTTP status, detail)
        self.timed_out: set[str] = set()
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

    def _sweep(self) -> None:
        """The scheduler's own pass over gates whose response timeout passed (dag.test() runs none)."""
        from airflow.jobs.job import Job
        from airflow.jobs.scheduler_job_runner import SchedulerJobRunner

        SchedulerJobRunner(job=Job()).check_awaiting_input_timeouts()

    def _run(self) -> None:
        deadline = time.monotonic() + self.timeout
        while not self._stop.is_set() and (self.answers or self.timed_out) and time.monotonic() < deadline:
            parked = self._parked()
            if self.timed_out & {task_id for _, task_id in parked}:
                self._sweep()
            else:
                self.timed_out.clear()
            for run_id, task_id in parked:
                if task_id in self.timed_out:
                    continue
                if task_id not in self.answers:
                    self.errors.append(f"unexpected gate {task_id}")
                    continue
                path = f"/api/v2/dags/{self.dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/-1/hitlDetails"
                detail = self.client.get(path)
                self.details[task_id] = detail.json() if detail.status_code == 200 else {}
                self.bodies[task_id] = self.details[task_id].get("body") or ""
                choice = self.answers.pop(task_id)
                if choice is None:
                    self.timed_out.add(task_id)
                    continue
                answer = {"chosen_options": [choice], "params_input": self.params.get(task_id, {})}
                if self.other is not None:
                    refused = self.other.patch(path, json=answer)
                    self.refusals[task_id] = (refused.status_code, refused.text[:300])
                r = self.client.patch(path, json=answer)
                self.responses[task_id] = r.json()
                if r.status_code != 200:
                    self.errors.append(f"{task_id}: HTTP {r.status_code} {r.text[:300]}")
                elif self.after_answer is not None:
                    try:
                        self.after_answer(self.anonymous, run_id, task_id)
                    except Exception as exc:  # reported by the test (the thread must go on answering)
                        self.errors.append(f"{task_id}: after_answer: {exc!r}")
            time.sleep(0.5)
