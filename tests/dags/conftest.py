"""DAG tests: a temporary AIRFLOW_HOME with a migrated metadata DB, set before Airflow is imported."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest

from mirror_core.devcluster.local_cluster import free_port

REPO = Path(__file__).resolve().parents[2]
_HOME = Path(tempfile.mkdtemp(prefix="mirror-airflow-"))
os.environ.update({
    "AIRFLOW_HOME": str(_HOME),
    "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
    "AIRFLOW__CORE__PLUGINS_FOLDER": str(REPO / "plugins"),
    "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{_HOME / 'airflow.db'}",
    "MIRROR_CORE_DB_URL": f"sqlite:///{_HOME / 'state.db'}",
    # The approval gates are answered through the REST API of an in-process API server (the path a
    # click in the UI takes); every caller is an admin there.
    "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
})
sys.path.insert(0, str(REPO / "plugins"))


@pytest.fixture(scope="session", autouse=True)
def airflow_db() -> Iterator[Path]:
    proc = subprocess.run([sys.executable, "-m", "airflow", "db", "migrate"], capture_output=True, text=True,
                          env=os.environ.copy(), timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    yield _HOME


@pytest.fixture(scope="session")
def airflow_token(airflow_db: Path) -> str:
    """A JWT for an Airflow admin, signed the way the API server signs UI and API sessions (the status
    page requires one: see plugins/mirror_airflow/status_app.py)."""
    from airflow.api_fastapi.app import init_auth_manager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

    return str(init_auth_manager().generate_jwt(SimpleAuthManagerUser(username="carol", role="admin")))


@pytest.fixture
def auth_headers(airflow_token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {airflow_token}"}


@contextmanager
def api_server() -> Iterator[str]:
    """Airflow's API server (REST API and execution API) in a thread of this process: its base URL."""
    import uvicorn
    from airflow.api_fastapi.app import create_app

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, name="airflow-api-server", daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the API server did not start within 60s"
        time.sleep(0.1)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(30)


@contextmanager
def webhook_receiver(status: int = 200) -> Iterator[tuple[str, list[tuple[str, dict[str, Any]]]]]:
    """A real HTTP server standing in for a Slack incoming webhook, answering ``status``: its base URL
    and the posts it received, as (path, JSON body)."""
    received: list[tuple[str, dict[str, Any]]] = []

    class Hook(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            received.append((self.path, json.loads(self.rfile.read(int(self.headers["Content-Length"])))))
            self.send_response(status)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}", received
    finally:
        server.shutdown()
