"""The status page's failover row tells the truth: the RPO measured at the switch beside the estimate the
approver saw, and RTO from the trigger and from the approval, each named (issue 66 item 5)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from fastapi.testclient import TestClient

from mirror_core.state.models import Failover
from mirror_core.state.store import StateStore


def test_failover_row_measured_rpo_and_both_rtos(tmp_path: Path, auth_headers: dict[str, str]) -> None:
    from mirror_airflow.status_app import create_app

    store = StateStore(f"sqlite:///{tmp_path / 's.db'}")
    store.migrate()
    # A planned failover estimated 200 records at risk when approved, drained to 0 before the switch; the
    # approver took 30 s to answer, the failover itself 42.5 s.
    store.add(Failover(kind="failover", flow="dc1->dc2", planned=True, status="done", approved_by="dana",
                       triggered_at=datetime(2026, 5, 1, 10, 0, 0, tzinfo=UTC),
                       approved_at=datetime(2026, 5, 1, 10, 0, 30, tzinfo=UTC),
                       finished_at=datetime(2026, 5, 1, 10, 1, 12, 500000, tzinfo=UTC),
                       details={"rpo_records": 200, "rpo_measured": 0, "approved_by_name": "Dana Scully"}))
    client = TestClient(create_app(store, with_lag=False), headers=auth_headers)
    row = client.get("/api/summary").json()["failovers"][0]
    assert (row["rpo_measured"], row["rpo_estimate"]) == (0, 200)
    assert (row["rto_s"], row["rto_from_approval_s"]) == (72.5, 42.5)
    assert (row["approved_by"], row["approved_by_name"]) == ("dana", "Dana Scully")
    page = client.get("/").text
    for header in ("RPO measured (records)", "RPO estimated at approval", "RTO from trigger (s)",
                   "RTO from approval (s)"):
        assert header in page, header
    assert "RPO (records)" not in page.split("Failovers and failbacks", 1)[1].split("Cutovers", 1)[0]
