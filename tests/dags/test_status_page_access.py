"""The status page and /api/summary show a user only what belongs to the DAGs they may read (Airflow's auth
manager decides; the mapping is in plugins/mirror_airflow/status_access.py and docs/security.md).

Two users with different DAG rights need an auth manager with per-DAG rights: the simple auth manager's roles
apply to every DAG and the FAB provider is not installed, so tests/dags/per_dag_auth.py (Airflow's
SimpleAuthManager with per-user DAG lists) is plugged in through AIRFLOW__CORE__AUTH_MANAGER, the documented
way. The approval waiting is a real one: a runtime_control run (dag.test) parked at its gate in Airflow's
metadata DB, looked at while it waits, then rejected through Airflow's REST API.
"""

from __future__ import annotations

import html
import json
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from mirror_core.state.models import Cutover, DrDrill, DriftEvent, Failover
from mirror_core.state.store import StateStore
from tests.dags.conftest import REPO
from tests.dags.hitl import Responder, headers
from tests.dags.per_dag_auth import CLASS_PATH, READS

FLOW = "dc1->dc2"
ALICE = frozenset({"failover"})  # acts on flows: may read the failover DAG only
BOB = frozenset({"failback", "cloud_migration_cutover", "dr_drill", "topic_config_sync",
                 "checkpoint_reconciliation", "runtime_control"})  # every mirror DAG but failover
#: /api/summary key -> the id of its section in the page
SECTION_IDS = {"flows": "flows", "paused_partitions": "paused-partitions", "failovers": "failovers",
               "cutovers": "cutovers", "drills": "drills", "registry": "registry", "sync_runs": "sync",
               "drift": "drift", "runtime_controls": "runtime-controls", "partition_actions": "partition-actions",
               "reconciliations": "reconciliations", "approvals": "approvals"}
# Text only one section holds: where it shows, the section shows.
ONLY_IN = {"failover-run-7": "failovers", "failback-run-8": "failovers", "cutover-run-9": "cutovers",
           "drill-run-10": "drills", "retention.ms: 1 -&gt; 2": "drift", "backfill saturates": "runtime_controls",
           "CRC mismatch 40": "partition_actions", "recon-run-11": "reconciliations",
           "record at 17 too large": "paused_partitions"}


@pytest.fixture
def per_dag_auth(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    from airflow.api_fastapi.app import init_auth_manager, purge_cached_app

    monkeypatch.setenv("AIRFLOW__CORE__AUTH_MANAGER", CLASS_PATH)
    # Not the other tests' all-admins mode, whose middleware makes every request without a bearer token admin.
    monkeypatch.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS", "False")
    READS.update(alice=ALICE, bob=BOB)
    assert type(init_auth_manager()).__name__ == "PerDagAuthManager"
    try:
        yield
    finally:
        READS.clear()
        monkeypatch.undo()
        purge_cached_app()  # a subclass of the simple manager: Airflow would keep it otherwise
        assert type(init_auth_manager()).__name__ == "SimpleAuthManager"  # the other tests' manager again
        assert init_auth_manager().get_fastapi_middlewares()  # and their all-admins mode


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> StateStore:
    """A record in every section; the runtime_control DAG writes to the same store."""
    from mirror_core.reconciliation import record_report

    config = tmp_path / "mm2.properties"
    config.write_text("clusters = dc1, dc2\ndc1.bootstrap.servers = 127.0.0.1:9\ndc2.bootstrap.servers = 127.0.0.1:9\n"
                      f"{FLOW}.enabled = true\n{FLOW}.topics = orders.*, payments\n")
    db = f"sqlite:///{tmp_path / 'state.db'}"
    monkeypatch.setenv("MIRROR_CORE_CONFIG", str(config))
    monkeypatch.setenv("MIRROR_CORE_DB_URL", db)
    s = StateStore(db)
    s.migrate()
    at = datetime(2026, 5, 1, 10, 0, tzinfo=UTC)
    run = s.start_sync_run(FLOW, False, "sync-run-12")
    s.add(Failover(kind="failover", flow=FLOW, planned=True, status="done", run_id="failover-run-7",
                   triggered_at=at, finished_at=at),
          Failover(kind="failback", flow="dc2->dc1", planned=True, status="failed", run_id="failback-run-8",
                   triggered_at=at, details={"error": "failback boom"}),
          Cutover(source="dc1", target="dc2", status="failed", run_id="cutover-run-9", details={"error": "cut boom"}),
          DrDrill(flow=FLOW, status="passed", run_id="drill-run-10", rpo_records=0, rto_seconds=9.5, duplicates=0,
                  losses=0),
          DriftEvent(sync_run_id=run, flow=FLOW, topic="dc1.orders", kind="config", detail="retention.ms: 1 -> 2",
                     action="applied"))
    s.finish_sync_run(run, "drift", {"changes": 1})
    s.set_active_cluster("payments", "dc2", "carol", "planned failover")
    s.pause_topic(FLOW, "payments", "dave", "backfill saturates the link")
    s.request_partition_action(FLOW, "orders", 1, "skip", "erin", "CRC mismatch 40", 40, 79)
    report_live(s)
    summary = {"flow": FLOW, "status": "discrepancies", "checked": 10, "missing_count": 3, "mismatched_count": 0,
               "extra_count": 0, "groups_wrong": 0, "checkpoint_problems": []}
    record_report(s, {"summary": summary, "groups": [], "partitions": []}, "recon-run-11")
    return s


def report_live(store: StateStore) -> None:
    """What a live mirror instance reports every 2 s: its flow running, a partition paused (shown while fresh)."""
    store.report_flow_states("m-0", {FLOW: "running"},
                             paused={FLOW: [{"topic": "orders", "partition": 0, "reason": "record at 17 too large"}]})


def _look(client: TestClient) -> tuple[dict[str, Any], str]:
    summary, page = client.get("/api/summary"), client.get("/")
    assert summary.status_code == 200 and page.status_code == 200, (summary.text[:300], page.text[:300])
    return summary.json(), page.text


def _agree(data: dict[str, Any], page: str) -> None:
    """The page shows a section exactly when the JSON has it (with rows), and no text of one it left out."""
    for key, sid in SECTION_IDS.items():
        shown = bool(data.get(key)) or (key in ("flows", "paused_partitions") and key in data)
        assert (f"id='{sid}'" in page) == shown, (key, sid, shown)
    for text, key in ONLY_IN.items():  # row by row: the page shows what the JSON of its section holds
        assert (text in page) == (html.unescape(text) in json.dumps(data.get(key, []))), (text, key)
    hidden = data["hidden"]
    assert page.count("id='hidden-by-permissions'") == (1 if hidden["dags"] else 0)
    nothing_yet = page.split("id='nothing-yet'", 1)[1].split("</p>", 1)[0] if "nothing-yet" in page else ""
    for title in ("runtime controls", "partition actions", "cutovers", "active-cluster registry", "recent topic drift"):
        assert title not in nothing_yet, title  # a hidden section is not named among the empty ones either


def test_each_user_sees_only_the_dags_they_may_read(per_dag_auth: None, store: StateStore) -> None:
    from airflow.dag_processing.dagbag import DagBag
    from mirror_airflow.status_app import create_app

    app = create_app(store, with_lag=False)
    users = {u: TestClient(app, headers=headers(u, role)) for u, role in
             (("alice", "viewer"), ("bob", "viewer"), ("carol", "admin"))}
    seen: dict[str, tuple[dict[str, Any], str]] = {}
    problems: list[str] = []
    gate: list[Responder] = []

    def look_while_the_gate_waits() -> None:
        try:
            from mirror_airflow.status_app import pending_approvals

            deadline = time.monotonic() + 300
            while not any(a.dag_id == "runtime_control" for a in pending_approvals()[0]):
                assert time.monotonic() < deadline, "the runtime_control gate did not wait within 300s"
                time.sleep(0.5)
            for user, client in users.items():
                report_live(store)
                seen[user] = _look(client)
        except BaseException as exc:  # reported by the test; the gate must be answered whatever happened
            problems.append(repr(exc))
        finally:
            responder = Responder("runtime_control", {"approve": "Reject"}, user="carol")
            gate.append(responder.__enter__())

    bag = DagBag(dag_folder=str(REPO / "dags" / "runtime_control.py"))
    assert bag.import_errors == {}
    looker = threading.Thread(target=look_while_the_gate_waits, daemon=True)
    looker.start()
    try:
        dr = bag.get_dag("runtime_control").test(run_conf={
            "flow": FLOW, "action": "pause", "topic": "orders", "partition": None, "bytes_per_second": None,
            "offsets": "", "reason": "looked at on the status page", "require_approval": True})
    finally:
        looker.join(60)
        for responder in gate:
            responder.__exit__()
    assert not problems, problems
    assert not gate[0].errors and dr.state == "failed", gate[0].errors  # rejected: nothing changed

    # carol (admin) sees everything: the preconditions of what the others must not see.
    carol, carol_page = seen["carol"]
    assert carol["hidden"] == {"sections": [], "dags": []}
    assert set(SECTION_IDS) <= set(carol), set(SECTION_IDS) - set(carol)
    assert [(a["dag_id"], a["task_id"]) for a in carol["approvals"]] == [("runtime_control", "approve")]
    assert {r["kind"] for r in carol["failovers"]} == {"failover", "failback"}
    assert [f["name"] for f in carol["flows"]] == [FLOW]
    _agree(carol, carol_page)
    assert "Runtime control: " in carol_page  # the approval's subject

    # alice reads failover: flows, their paused partitions, failover rows and the registry; nothing else.
    alice, alice_page = seen["alice"]
    assert [f["name"] for f in alice["flows"]] == [FLOW] and len(alice["paused_partitions"]) == 1
    assert [r["run_id"] for r in alice["failovers"]] == ["failover-run-7"]
    assert [r["app"] for r in alice["registry"]] == ["payments"]
    assert alice["approvals"] == []  # the runtime_control approval is not hers
    for key in ("cutovers", "drills", "drill_trends", "sync_runs", "drift", "runtime_controls", "partition_actions",
                "reconciliations"):
        assert key not in alice, key
    assert alice["hidden"] == {
        "sections": ["cutovers", "drills", "drill_trends", "reconciliations", "sync_runs", "drift", "runtime_controls",
                     "partition_actions"],
        "dags": ["failback", "cloud_migration_cutover", "dr_drill", "topic_config_sync", "checkpoint_reconciliation",
                 "runtime_control"]}
    alice_attention = {(a["what"], a["flow"]) for a in alice["attention"]}
    assert ("1 partition paused", FLOW) in alice_attention
    assert not [a for a in alice["attention"] if a["what"] in ("cutover failed", "approval waiting",
                                                               "reconciliation found problems", "failover failed")]
    _agree(alice, alice_page)
    assert "Runtime control: " not in alice_page and "failback boom" not in alice_page and "cut boom" not in alice_page

    # bob reads every mirror DAG but failover: the opposite.
    bob, bob_page = seen["bob"]
    assert "flows" not in bob and "paused_partitions" not in bob
    assert [r["run_id"] for r in bob["failovers"]] == ["failback-run-8"]
    assert [r["run_id"] for r in bob["cutovers"]] == ["cutover-run-9"]
    assert [r["run_id"] for r in bob["drills"]] == ["drill-run-10"] and bob["drill_trends"]
    assert [r["run_id"] for r in bob["sync_runs"]] == ["sync-run-12"] and bob["drift"]
    assert bob["runtime_controls"] and bob["partition_actions"] and bob["reconciliations"]
    assert [r["app"] for r in bob["registry"]] == ["payments"]  # the cutover and the failback move applications
    assert [a["dag_id"] for a in bob["approvals"]] == ["runtime_control"]
    assert bob["hidden"] == {"sections": ["flows", "paused_partitions"], "dags": ["failover"]}
    bob_attention = {a["what"] for a in bob["attention"]}
    assert {"cutover failed", "failover failed", "approval waiting", "reconciliation found problems"} <= bob_attention
    assert not [a for a in bob["attention"] if "paused" in a["what"]]  # the flows' attention items are alice's
    _agree(bob, bob_page)
    assert "article class='card flow'" not in bob_page and "record at 17 too large" not in bob_page
    assert "you may not read the runs of failover " in bob_page


def test_the_page_mounted_in_airflow_asks_about_the_user_of_each_request(per_dag_auth: None,
                                                                        store: StateStore) -> None:
    """The plugin as Airflow's API server mounts it (uvicorn, /mirror-core/): the UI session cookie and an API
    token each decide what that request sees."""
    import httpx

    from tests.dags.conftest import api_server

    # Signed before the server starts: the first token makes the process's JWT secret, which the server needs.
    tokens = {u: headers(u, role)["Authorization"].removeprefix("Bearer ") for u, role in
              (("alice", "viewer"), ("bob", "viewer"), ("carol", "admin"))}
    with api_server() as base:
        answers = {}
        for user, token in tokens.items():
            report_live(store)
            by_cookie = httpx.get(f"{base}/mirror-core/api/summary", cookies={"_token": token}, timeout=60)
            by_token = httpx.get(f"{base}/mirror-core/", headers={"Authorization": f"Bearer {token}"}, timeout=60)
            assert by_cookie.status_code == 200 and by_token.status_code == 200, (user, by_cookie.text[:300])
            answers[user] = (by_cookie.json(), by_token.text)
        assert httpx.get(f"{base}/mirror-core/api/summary", timeout=60).status_code in (401, 403)  # no session
    alice, alice_page = answers["alice"]
    bob, bob_page = answers["bob"]
    carol, carol_page = answers["carol"]
    assert carol["hidden"] == {"sections": [], "dags": []} and "flows" in carol and "cutovers" in carol
    assert "flows" in alice and "cutovers" not in alice and alice["hidden"]["dags"][0] == "failback"
    assert "flows" not in bob and "cutovers" in bob and bob["hidden"]["dags"] == ["failover"]
    assert "id='flows'" in alice_page and "id='flows'" not in bob_page and "id='flows'" in carol_page
    assert "you may not read the runs of failover " in bob_page and "hidden-by-permissions" not in carol_page
