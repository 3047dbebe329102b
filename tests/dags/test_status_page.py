"""The status page answers over HTTP with what is in the state store (through the FastAPI app)."""

from __future__ import annotations

import html
import re
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from mirror_core.config.loader import load_config, parse_text
from mirror_core.devcluster.local_cluster import free_port
from mirror_core.state.models import DrDrill, DriftEvent, Failover, FlowInstance
from mirror_core.state.store import StateStore
from tests.kafka_harness import create_topic, write_config


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
              Failover(kind="failover", flow="dc1->dc2", planned=False, status="done", approved_by="carol",
                       triggered_at=datetime(2026, 5, 1, 10, 0, 0, tzinfo=UTC),
                       approved_at=datetime(2026, 5, 1, 10, 0, 30, tzinfo=UTC),
                       finished_at=datetime(2026, 5, 1, 10, 1, 12, 500000, tzinfo=UTC)))
    store.finish_sync_run(run, "drift", {"changes": 1})
    store.set_active_cluster("payments", "dc2", "carol", "planned failover")

    client = TestClient(create_app(store, with_lag=False), headers={"Authorization": f"Bearer {airflow_token}"})
    data = client.get("/api/summary").json()
    assert data["flows"][0]["name"] == "dc1->dc2"
    assert data["drift"][0]["detail"] == "retention.ms: 1 -> 2"
    assert data["drills"][0]["rto_seconds"] == 12.5
    fo = data["failovers"][0]  # RTO reads off the record: trigger -> approval -> completion
    assert (fo["triggered"], fo["approved"], fo["finished"], fo["rto_s"]) == (
        "2026-05-01T10:00:00+00:00", "2026-05-01T10:00:30+00:00", "2026-05-01T10:01:12+00:00", 72.5)
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


def get_within(client: TestClient, path: str, timeout: float) -> Any:
    """A client that gives up after ``timeout`` seconds (generous: the page's own deadline is far shorter)."""
    answer: dict[str, Any] = {}
    caller = threading.Thread(target=lambda: answer.update(response=client.get(path)), daemon=True)
    caller.start()
    caller.join(timeout)
    assert "response" in answer, f"{path} did not answer within {timeout}s"
    return answer["response"]


def test_lag_is_unavailable_not_slow_when_a_cluster_is_down(dc1, name, tmp_path: Path, monkeypatch,
                                                             auth_headers) -> None:
    """dc2 points at a closed port: the page answers after its one deadline (2 s here, shorter than a
    cluster request's 3 s timeout), says the lag is unavailable and, once the background measurement
    has finished, why."""
    from mirror_airflow import status_app

    create_topic(dc1, f"{name}.orders", 4)
    config = write_config(tmp_path / "mm2.properties", {"dc1": dc1, "dc2": f"127.0.0.1:{free_port()}"},
                          ["dc1->dc2.enabled = true", "dc2->dc1.enabled = false", f"dc1->dc2.topics = {name}.*",
                           f"dc2->dc1.topics = {name}.*", "emit.heartbeats.enabled = false"])
    monkeypatch.setenv("MIRROR_CORE_CONFIG", str(config))
    store = StateStore(f"sqlite:///{tmp_path / 's.db'}")
    store.migrate()
    store.record_config(load_config(config, validate_clients=False))
    client = TestClient(status_app.create_app(store, lag_deadline_s=2), headers=auth_headers)

    page = get_within(client, "/", timeout=30)
    assert page.status_code == 200
    assert "the clusters of dc1-&gt;dc2 did not answer within 2s" in page.text
    data = get_within(client, "/api/summary", timeout=30).json()
    flows = {f["name"]: f for f in data["flows"]}
    assert {n: f["configured"] for n, f in flows.items()} == {"dc1->dc2": "enabled", "dc2->dc1": "standby"}
    assert all(f["lag"] is None and f["lag_error"] for f in flows.values()), flows
    # Page loads reuse the measurements under way (never more than one per flow); once they are
    # done, the page says why.
    measuring = [t for t in threading.enumerate() if t.name.startswith("mirror-status-lag")]
    assert len(measuring) <= 2, [t.name for t in measuring]
    for t in measuring:
        t.join(60)
    data = get_within(client, "/api/summary", timeout=30).json()
    for flow in data["flows"]:
        assert flow["lag_error"].startswith("cluster dc2: cannot connect"), flow
        assert flow["unreachable_cluster"] == "dc2", flow
    assert {(a["what"], a["flow"]) for a in data["attention"]} >= {("cluster dc2 unreachable", "dc1->dc2")}


def test_page_answers_within_its_deadline_whatever_a_measurement_takes(tmp_path: Path, monkeypatch,
                                                                       auth_headers) -> None:
    """A measurement that hangs (a black-holed broker costs a timeout per partition) never holds the
    page: it shows unavailable, measures each flow once, and shows the result once there is one."""
    from mirror_airflow import status_app

    calls: list[str] = []
    release = threading.Event()

    def measure(flow: str) -> status_app.LagReading:
        calls.append(flow)
        if flow == "dc2->dc1":
            release.wait(120)
        return status_app.LagReading(time.time(), 7)

    monkeypatch.setattr(status_app, "LAGS", status_app.LagBoard(measure))
    store = StateStore(f"sqlite:///{tmp_path / 's.db'}")
    store.migrate()
    store.record_config(parse_text("clusters = dc1, dc2\ndc1.bootstrap.servers = a:1\ndc2.bootstrap.servers = b:2\n"
                                   "dc1->dc2.enabled = true\ndc2->dc1.enabled = true\n", validate_clients=False))
    client = TestClient(status_app.create_app(store, lag_deadline_s=1), headers=auth_headers)
    try:
        flows = {f["name"]: f for f in get_within(client, "/api/summary", timeout=30).json()["flows"]}
        assert flows["dc1->dc2"]["lag"] == 7
        assert flows["dc2->dc1"]["lag_error"].startswith("the clusters of dc2->dc1 did not answer within 1s")
        page = get_within(client, "/", timeout=30)
        assert "the clusters of dc2-&gt;dc1 did not answer within 1s" in page.text
    finally:
        release.set()
    # The hung measurement finishes in the background; the next load shows it (cached, not re-measured).
    status_app.LAGS.lags(["dc2->dc1"], deadline_s=30)
    lags = {f["name"]: f["lag"] for f in get_within(client, "/api/summary", timeout=30).json()["flows"]}
    assert lags == {"dc1->dc2": 7, "dc2->dc1": 7}
    assert sorted(calls) == ["dc1->dc2", "dc2->dc1"]


def test_flow_state_and_attention_rules(airflow_db: Path) -> None:
    """A standby flow a workflow started is running; desired != applied and failed records need attention;
    Airflow's pending approvals are read from its own database (the query works on its schema)."""
    from mirror_airflow.status_app import (
        Approval,
        FlowView,
        InstanceView,
        _applied,
        attention,
        flow_state,
        pending_approvals,
    )

    running, stopped = InstanceView("m-0", "running", None), InstanceView("m-1", "stopped", None)
    assert flow_state("standby", "running", [running]) == "running"
    assert flow_state("standby", None, [stopped]) == "standby"
    assert flow_state("enabled", "stopped", [stopped]) == "stopped"
    assert flow_state("enabled", None, []) == "no live instance"
    assert not _applied("running", [running, stopped]) and not _applied("running", []) and _applied(None, [])
    flow = FlowView("dc1->dc2", "running", "enabled", "running", None, None, None, False, [running, stopped],
                    None, None, "batches", "auto (the default): batches", 5, None, None, None, None)
    recs: dict[str, list[dict[str, Any]]] = {
        "failovers": [{"kind": "failover", "flow": "dc1->dc2", "status": "failed", "run_id": "r2", "error": "boom"},
                      {"kind": "failover", "flow": "dc1->dc2", "status": "done", "run_id": "r1", "error": None}],
        "cutovers": [], "drills": [], "reconciliations": [], "sync_runs": []}
    items = attention([flow], [], [Approval("failover", "r3", "approve", "Approve the failover?", None)], recs)
    assert [(i.severity, i.what) for i in items] == [("critical", "desired running, not applied"),
                                                     ("critical", "failover failed"),
                                                     ("warning", "approval waiting")], items
    assert "m-1: stopped" in items[0].detail and "boom (run r2)" in items[1].detail
    assert pending_approvals() == ([], None)


def test_runbook_documents_the_summary_fields(tmp_path: Path, auth_headers: dict[str, str]) -> None:
    """docs/runbooks.md lists exactly the fields /api/summary has (top level and per flow)."""
    from mirror_airflow.status_app import FlowView, create_app

    from tests.dags.conftest import REPO

    doc = (REPO / "docs" / "runbooks.md").read_text()
    table = doc.split("**`GET /mirror-core/api/summary`**", 1)[1].split("\n\n", 2)[1]
    documented = {f.strip("`[]") for row in table.splitlines()[2:] for f in re.findall(r"`[a-z_]+(?:\[\])?`",
                                                                                       row.split("|")[1])}
    store = StateStore(f"sqlite:///{tmp_path / 's.db'}")
    data = TestClient(create_app(store, with_lag=False), headers=auth_headers).get("/api/summary").json()
    assert documented == set(data), documented ^ set(data)
    flows_row = next(r for r in table.splitlines() if r.startswith("| `flows[]`"))
    for name in FlowView.__dataclass_fields__:
        assert f"`{name}`" in flows_row or f"`{name}[]`" in flows_row, name


PAUSE = ("source cluster dc1: record batch at offsets 40-79 (1234 bytes) is damaged: its CRC32C does not match. "
         "Make a replica the leader, then `mirror-core partitions resume --flow dc1->dc2 --topic orders "
         "--partition 0 --reason \"leader moved\"` or `mirror-core partitions skip ... --offsets 40-79`")


def test_paused_partitions_and_partition_actions(tmp_path: Path, auth_headers: dict[str, str]) -> None:
    """What the live instances report paused, and why (escaped, whole), with a pending action beside it; the
    history of the actions with their outcome; both in the JSON; a paused partition needs attention."""
    from mirror_airflow.status_app import create_app

    store = StateStore(f"sqlite:///{tmp_path / 's.db'}")
    store.migrate()
    skip = store.request_partition_action("dc1->dc2", "orders", 1, "skip", "alice", "CRC <mismatch> at 40", 40, 79)
    store.complete_partition_action(skip.id, "m-0", "skipped offsets 40-79 of orders[1]", ok=True)
    bad = store.request_partition_action("dc1->dc2", "orders", 2, "skip", "bob", "wrong range", 10, 12)
    store.complete_partition_action(bad.id, "m-0", "refused: offsets 10-12 are not the damaged batch", ok=False)
    resume = store.request_partition_action("dc1->dc2", "orders", 0, "resume", "carol", "leader moved")
    store.report_flow_states("m-0", {"dc1->dc2": "running"},
                             paused={"dc1->dc2": [{"topic": "orders", "partition": 0, "reason": PAUSE}]})
    store.report_flow_states("m-gone", {"dc1->dc2": "stopped"},
                             paused={"dc1->dc2": [{"topic": "orders", "partition": 9, "reason": "old news"}]})
    with store.session() as s:  # an instance that stopped reporting: its pauses are not shown
        gone = s.get(FlowInstance, ("m-gone", "dc1->dc2"))
        assert gone is not None
        gone.seen_at = datetime.now(UTC) - timedelta(minutes=5)

    client = TestClient(create_app(store, with_lag=False), headers=auth_headers)
    data = client.get("/api/summary").json()
    [paused] = data["paused_partitions"]
    assert {k: paused[k] for k in ("flow", "topic", "partition", "reason", "instance")} == {
        "flow": "dc1->dc2", "topic": "orders", "partition": 0, "reason": PAUSE, "instance": "m-0"}
    assert paused["since"] and paused["seen_at"]
    assert paused["pending_action"] == {"id": resume.id, "action": "resume", "offsets": "", "requested_by": "carol",
                                        "requested_at": resume.requested_at.isoformat(timespec="seconds")}
    actions = data["partition_actions"]
    assert [(a["id"], a["action"], a["offsets"], a["status"]) for a in actions] == [
        (resume.id, "resume", "", "pending"), (bad.id, "skip", "10-12", "failed"),
        (skip.id, "skip", "40-79", "applied")]
    assert actions[2]["outcome"] == "skipped offsets 40-79 of orders[1]" and actions[2]["applied_by"] == "m-0"
    assert ("critical", "1 partition paused", f"orders[0]: {PAUSE}", "dc1->dc2") in {
        (a["severity"], a["what"], a["detail"], a["flow"]) for a in data["attention"]}

    page = client.get("/").text
    paused_html = page.split("id='paused-partitions'", 1)[1].split("</section>", 1)[0]
    assert "Paused partitions (1)" in paused_html and "orders[0]" in paused_html and "m-0" in paused_html
    assert html.escape(PAUSE) in paused_html and "`mirror-core partitions resume" in paused_html
    assert "&quot;leader moved&quot;" in paused_html and "dc1-&gt;dc2" in paused_html
    assert "pending" in paused_html and "carol" in paused_html and "old news" not in page
    actions_html = page.split("id='partition-actions'", 1)[1].split("</section>", 1)[0]
    for text in ("40-79", "alice", "CRC &lt;mismatch&gt; at 40", "applied", "failed", "refused: offsets 10-12",
                 "leader moved", "pending"):
        assert text in actions_html, text
    assert "<mismatch>" not in page


def test_no_paused_partition_and_no_action_is_said_in_a_line(tmp_path: Path, auth_headers: dict[str, str]) -> None:
    from mirror_airflow.status_app import create_app

    store = StateStore(f"sqlite:///{tmp_path / 's.db'}")
    store.migrate()
    store.report_flow_states("m-0", {"dc1->dc2": "running"})  # as instances report without pauses
    client = TestClient(create_app(store, with_lag=False), headers=auth_headers)
    data = client.get("/api/summary").json()
    assert data["paused_partitions"] == [] and data["partition_actions"] == []
    assert not [a for a in data["attention"] if "paused" in a["what"]]
    page = client.get("/").text
    assert "Nothing paused: no live mirror instance reports a paused partition." in page
    assert "id='partition-actions'" not in page
    assert "partition actions" in page.split("Nothing recorded yet:", 1)[1]


def test_runtime_controls_desired_and_applied(tmp_path: Path, auth_headers: dict[str, str]) -> None:
    """The operators' active pauses and limits (who, when, why; escaped) in the page and the JSON; a pause shows
    the partitions the live instances report paused for it; cleared controls are gone."""
    from mirror_airflow.status_app import create_app

    store = StateStore(f"sqlite:///{tmp_path / 's.db'}")
    store.migrate()
    pause = store.pause_topic("dc1->dc2", "orders", "<alice>", "backfill <saturates> the link")
    one = store.pause_topic("dc1->dc2", "payments", "bob", "poison record", partition=3)
    limit = store.limit_bandwidth("dc1->dc2", "carol", "share the WAN", 50_000_000)
    store.limit_bandwidth("dc1->dc2", "carol", "gone", 1000, topic="audit")
    store.unlimit_bandwidth("dc1->dc2", "carol", "done", topic="audit")
    reason = f"paused by <alice> at {pause.set_at}: backfill <saturates> the link (`mirror-core control resume ...`)"
    store.report_flow_states("m-0", {"dc1->dc2": "running"}, paused={"dc1->dc2": [
        {"topic": "orders", "partition": 0, "reason": reason}, {"topic": "orders", "partition": 1, "reason": reason},
        {"topic": "payments", "partition": 3, "reason": "record too large for the target"}]})

    client = TestClient(create_app(store, with_lag=False), headers=auth_headers)
    data = client.get("/api/summary").json()
    rows = {r["id"]: r for r in data["runtime_controls"]}
    assert set(rows) == {pause.id, one.id, limit.id}  # the cleared limit is not shown
    assert {k: rows[pause.id][k] for k in ("kind", "topic", "partition", "scope", "set_by", "reason", "active")} == {
        "kind": "pause", "topic": "orders", "partition": None, "scope": "orders", "set_by": "<alice>",
        "reason": "backfill <saturates> the link", "active": True}
    assert rows[pause.id]["applied"] == {"partitions": 2, "instances": ["m-0"]}
    assert rows[one.id]["applied"] == {"partitions": 0, "instances": []}  # paused, but not for the operator yet
    assert (rows[limit.id]["scope"], rows[limit.id]["limit_bytes_per_s"], rows[limit.id]["applied"]) == (
        "(whole flow)", 50_000_000, None)

    page = client.get("/").text
    section_html = page.split("id='runtime-controls'", 1)[1].split("</section>", 1)[0]
    for text in ("Runtime controls", "&lt;alice&gt;", "backfill &lt;saturates&gt; the link", "payments[3]",
                 "limit 50,000,000 bytes/s", "(whole flow)", "2 partitions", "no live instance reports it paused",
                 "dc1-&gt;dc2", "share the WAN"):
        assert text in section_html, text
    assert "<alice>" not in page and "<saturates>" not in page and "audit" not in section_html


def test_a_flows_filters_from_the_store_show_who_set_them_and_which_instances_apply_them(
        tmp_path: Path, auth_headers: dict[str, str]) -> None:
    from mirror_airflow.status_app import create_app

    store = StateStore(f"sqlite:///{tmp_path / 's.db'}")
    store.migrate()
    f = store.set_flow_filter("dc1->dc2", "dana", "onboard <payments>", {"topics": "orders, payments"})
    store.set_flow_filter("dc2->dc1", "dana", "gone", {"groups.exclude": "tmp-.*"})
    store.clear_flow_filter("dc2->dc1", "dana", "done")
    store.report_flow_states("m-0", {"dc1->dc2": "running"}, filters={"dc1->dc2": {
        "topics": "orders, payments", "topics.exclude": "", "groups": ".*", "groups.exclude": "", "filter_id": f.id}})
    store.report_flow_states("m-1", {"dc1->dc2": "running"}, filters={"dc1->dc2": {
        "topics": "orders", "topics.exclude": "", "groups": ".*", "groups.exclude": "", "filter_id": None}})

    client = TestClient(create_app(store, with_lag=False), headers=auth_headers)
    [row] = [r for r in client.get("/api/summary").json()["runtime_controls"] if r["kind"] == "filter"]
    assert (row["flow"], row["topics"], row["groups.exclude"], row["set_by"], row["applied"]) == (
        "dc1->dc2", "orders, payments", None, "dana", {"instances": ["m-0"], "of": 2})
    section_html = client.get("/").text.split("id='runtime-controls'", 1)[1].split("</section>", 1)[0]
    for text in ("filters topics &#x27;orders, payments&#x27;", "onboard &lt;payments&gt;", "1 of 2 instances",
                 "pending"):
        assert text in section_html, text
    assert "tmp-" not in section_html  # the cleared filter is not shown


def test_no_runtime_control_is_named_among_the_empty_sections(tmp_path: Path, auth_headers: dict[str, str]) -> None:
    from mirror_airflow.status_app import create_app

    store = StateStore(f"sqlite:///{tmp_path / 's.db'}")
    store.migrate()
    client = TestClient(create_app(store, with_lag=False), headers=auth_headers)
    assert client.get("/api/summary").json()["runtime_controls"] == []
    page = client.get("/").text
    assert "id='runtime-controls'" not in page
    assert "runtime controls" in page.split("id='nothing-yet'", 1)[1]
