"""The status page answers over HTTP with what is in the state store (through the FastAPI app)."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from mirror_core.config.loader import parse_text
from mirror_core.state.models import DrDrill, DriftEvent, Failover
from mirror_core.state.store import StateStore


def test_status_page_shows_the_store(tmp_path: Path, airflow_token: str) -> None:
    from mirror_airflow.status_app import create_app

    store = StateStore(f"sqlite:///{tmp_path / 's.db'}")
    store.migrate()
    store.record_config(parse_text("clusters = dc1, dc2\ndc1.bootstrap.servers = a:1\ndc2.bootstrap.servers = b:2\n"
                                   "dc1->dc2.enabled = true\n", validate_clients=False))
    run = store.start_sync_run("dc1->dc2", False, "scheduled__x")
    store.add(DriftEvent(sync_run_id=run, flow="dc1->dc2", topic="dc1.orders", kind="config",
                         detail="retention.ms: 1 -> 2", action="applied"),
              DrDrill(flow="dc1->dc2", status="passed", rpo_records=0, rto_seconds=12.5, duplicates=0, losses=0),
              Failover(kind="failover", flow="dc1->dc2", planned=True, status="done", approved_by="carol"))
    store.finish_sync_run(run, "drift", {"changes": 1})
    store.set_active_cluster("payments", "dc2", "carol", "planned failover")

    client = TestClient(create_app(store, with_lag=False), headers={"Authorization": f"Bearer {airflow_token}"})
    data = client.get("/api/summary").json()
    assert data["flows"][0]["name"] == "dc1->dc2"
    assert data["drift"][0]["detail"] == "retention.ms: 1 -> 2"
    assert data["drills"][0]["rto_seconds"] == 12.5
    assert data["registry"] == [{"app": "payments", "cluster": "dc2", "changed_by": "carol",
                                 "reason": "planned failover", "at": data["registry"][0]["at"]}]
    page = client.get("/")
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    for text in ("dc1-&gt;dc2", "retention.ms: 1 -&gt; 2", "payments", "planned failover", "carol"):
        assert text in page.text


def test_status_page_requires_an_airflow_session(tmp_path: Path, airflow_token: str) -> None:
    """Plugin apps are not protected by Airflow itself: without a valid session token, nothing is served."""
    from mirror_airflow.status_app import create_app

    store = StateStore(f"sqlite:///{tmp_path / 's.db'}")
    app = create_app(store, with_lag=False)
    anonymous = TestClient(app)
    for path in ("/", "/api/summary"):
        assert anonymous.get(path).status_code in (401, 403), path
        forged = anonymous.get(path, headers={"Authorization": "Bearer not-a-jwt"})
        assert forged.status_code in (401, 403), path
        assert TestClient(app, cookies={"_token": "not-a-jwt"}).get(path).status_code in (401, 403), path
    # The UI session (cookie) and an API token (bearer) both work.
    assert TestClient(app, cookies={"_token": airflow_token}).get("/").status_code == 200
    assert TestClient(app).get("/api/summary", headers={"Authorization": f"Bearer {airflow_token}"}).status_code == 200
