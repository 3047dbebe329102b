"""Tell people a workflow needs them: an approval is waiting, or a run failed.

``WebhookNotifier`` posts Slack-compatible JSON (``{"text": ...}``) to the URL held by the Airflow
connection ``mirror_core_notify``, in its password field only (a Slack incoming-webhook URL carries its
token in the path; Airflow masks a password, not a host). No such connection: nothing is sent. Any
Airflow notifier (``SlackWebhookNotifier``, ``SmtpNotifier``, ...) can be plugged in
instead through :func:`mirror_airflow.dag_helpers.gate_settings` and the DAGs' ``on_failure_callback``.
"""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import quote

from airflow.sdk import BaseHook, BaseNotifier

log = logging.getLogger(__name__)
NOTIFY_CONN_ID = "mirror_core_notify"


def _flow(params: Any) -> str:
    params = params or {}
    if params.get("flow"):
        return str(params["flow"])
    return f"{params.get('source', '?')}->{params.get('target', '?')}"


def _base_url() -> str:
    from airflow.configuration import conf

    return str(conf.get("api", "base_url", fallback=None) or "http://localhost:8080").rstrip("/")


def message(event: str, context: Any) -> str:
    """The text posted: what happened, the DAG, the flow and where to act."""
    ti = context.get("ti") or context.get("task_instance")
    dag_run = context.get("dag_run")
    dag_id = getattr(ti, "dag_id", None) or getattr(dag_run, "dag_id", "?")
    run_id = getattr(ti, "run_id", None) or getattr(dag_run, "run_id", "?")
    run_url = f"{_base_url()}/dags/{dag_id}/runs/{quote(str(run_id), safe='')}"
    flow = _flow(context.get("params"))
    if event == "approval":
        task_id = getattr(ti, "task_id", "?")
        return (f"Approval waiting: {dag_id} of flow {flow}, gate {task_id}. "
                f"Approve or reject: {run_url}/tasks/{task_id}/required_actions")
    return f"Workflow failed: {dag_id} of flow {flow}. See: {run_url}"


class WebhookNotifier(BaseNotifier):
    """Posts ``{"text": message}`` to the ``mirror_core_notify`` connection's URL; ``event`` is
    ``approval`` (a gate waits) or ``failure`` (the run failed)."""

    def __init__(self, event: str, conn_id: str = NOTIFY_CONN_ID) -> None:
        super().__init__()
        self.event, self.conn_id = event, conn_id

    def notify(self, context: Any) -> None:
        try:
            conn = BaseHook.get_connection(self.conn_id)
        except Exception:  # the connection is optional: no target configured, nothing to send
            log.info("no connection %s: no %s notification sent", self.conn_id, self.event)
            return
        url = conn.password
        if not url:
            log.warning("connection %s has no webhook URL in its password field: no %s notification sent",
                        self.conn_id, self.event)
            return
        body = json.dumps({"text": message(self.event, context)}).encode()
        request = urllib.request.Request(url, body, {"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                log.info("%s notification sent through %s (HTTP %s)", self.event, self.conn_id, response.status)
        except (urllib.error.URLError, OSError, ValueError) as exc:  # never fails the task; never logs the URL
            reason = getattr(exc, "code", None) or getattr(exc, "reason", None) or type(exc).__name__
            log.warning("%s notification through %s failed: %s", self.event, self.conn_id, reason)
