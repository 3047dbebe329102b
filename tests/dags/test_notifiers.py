"""Gate settings from the environment and the webhook notifier's failure path (no Kafka needed)."""

from __future__ import annotations

import json
import logging
from datetime import timedelta
from types import SimpleNamespace

import pytest

from tests.dags.conftest import webhook_receiver


def test_gate_settings_per_dag_then_global(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from mirror_airflow.dag_helpers import DEFAULT_GATE_TIMEOUT_S, gate_settings

    for key in ("MIRROR_CORE_APPROVERS", "MIRROR_CORE_APPROVERS_FAILOVER", "MIRROR_CORE_GATE_TIMEOUT_S",
                "MIRROR_CORE_GATE_TIMEOUT_S_FAILOVER"):
        monkeypatch.delenv(key, raising=False)
    default = gate_settings("failover")
    assert default["assigned_users"] is None  # any user, as documented
    assert default["response_timeout"] == timedelta(seconds=DEFAULT_GATE_TIMEOUT_S) == timedelta(hours=4)
    monkeypatch.setenv("MIRROR_CORE_APPROVERS", "ops")
    monkeypatch.setenv("MIRROR_CORE_APPROVERS_FAILOVER", " dana, lee ,")
    monkeypatch.setenv("MIRROR_CORE_GATE_TIMEOUT_S", "60")
    assert [u["id"] for u in gate_settings("failover")["assigned_users"]] == ["dana", "lee"]
    assert [u["id"] for u in gate_settings("failback")["assigned_users"]] == ["ops"]
    assert gate_settings("failback")["response_timeout"] == timedelta(seconds=60)
    for bad in ("4h", "0", "-5"):
        monkeypatch.setenv("MIRROR_CORE_GATE_TIMEOUT_S_FAILOVER", bad)
        with pytest.raises(ValueError, match=rf"^MIRROR_CORE_GATE_TIMEOUT_S: not a positive number of seconds: "
                                             rf"'{bad}'$"):
            gate_settings("failover")


def test_a_failing_webhook_is_one_line_without_its_url(monkeypatch, caplog) -> None:  # type: ignore[no-untyped-def]
    from mirror_airflow.notifiers import WebhookNotifier

    context = {"dag_run": SimpleNamespace(dag_id="failback", run_id="manual__1"), "params": {"flow": "dc1->dc2"}}
    with webhook_receiver(500) as (base, received):
        url = f"{base}/services/S3CRET-T0KEN"
        monkeypatch.setenv("AIRFLOW_CONN_MIRROR_CORE_NOTIFY", json.dumps({"conn_type": "http", "password": url}))
        with caplog.at_level(logging.INFO):
            WebhookNotifier("failure").notify(context)  # must not raise: a notifier never fails the task
    posts = [body for _, body in received]
    assert len(posts) == 1 and posts[0]["text"].startswith("Workflow failed: failback of flow dc1->dc2. See: http")
    assert posts[0]["text"].endswith("/dags/failback/runs/manual__1"), posts
    assert "failure notification through mirror_core_notify failed: 500" in caplog.text
    assert "S3CRET" not in caplog.text
    monkeypatch.delenv("AIRFLOW_CONN_MIRROR_CORE_NOTIFY")
    caplog.clear()
    with caplog.at_level(logging.INFO):
        WebhookNotifier("failure").notify(context)
    assert "no connection mirror_core_notify: no failure notification sent" in caplog.text
