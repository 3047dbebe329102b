"""The status page shows the latest reconciliation of every flow (state store only, no clusters)."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from mirror_core.reconciliation import record_report
from mirror_core.state.store import StateStore


def _report(flow: str, status: str, missing: int = 0) -> dict:  # type: ignore[type-arg]
    summary = {"flow": flow, "status": status, "checked": 10, "missing_count": missing, "mismatched_count": 0,
               "extra_count": 0, "groups_wrong": 0, "checkpoint_problems": []}
    return {"summary": summary, "groups": [], "partitions": [
        {"topic": "orders", "partition": 0, "source_end": 10, "target_end": 10}]}


def test_latest_reconciliation_per_flow(tmp_path: Path, auth_headers: dict[str, str]) -> None:
    from mirror_airflow.status_app import create_app

    store = StateStore(f"sqlite:///{tmp_path / 's.db'}")
    store.migrate()
    record_report(store, _report("dc1->dc2", "ok"), "r1")
    record_report(store, _report("dc1->dc2", "discrepancies", missing=3), "r2")
    record_report(store, _report("dc2->dc1", "ok"), "r3")
    assert store.last_reconciliation("dc1->dc2").run_id == "r1"  # type: ignore[union-attr]
    assert store.last_reconciliation("dc1->dc2", status=None).run_id == "r2"  # type: ignore[union-attr]

    client = TestClient(create_app(store, with_lag=False), headers=auth_headers)
    rows = client.get("/api/summary").json()["reconciliations"]
    assert [(r["flow"], r["status"], r["run_id"], r["missing"]) for r in rows] == [
        ("dc1->dc2", "discrepancies", "r2", 3), ("dc2->dc1", "ok", "r3", 0)]
    assert "Latest reconciliation per flow" in client.get("/").text
