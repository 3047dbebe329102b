"""failover and failback DAGs end to end: two real clusters, a real mirror obeying the control
plane, approval gates answered through Airflow's REST API (reject changes nothing)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from mirror_core.errors import ProgressError
from mirror_core.offsets.checkpoints import CheckpointReader, checkpoints_topic
from mirror_core.offsets.groups import commit_offsets, committed_offsets
from mirror_core.state.models import aware
from mirror_core.state.store import StateStore
from tests.dags.conftest import REPO, webhook_receiver
from tests.dags.hitl import Responder, headers
from tests.kafka_harness import (
    admin,
    create_topic,
    end_offsets,
    new_cluster,
    produce_sequence,
    producer,
    read_all,
    unique,
    wait_until,
    write_config,
)


def load(dag_id: str):  # type: ignore[no-untyped-def]
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(REPO / "dags" / f"{dag_id}.py"))
    assert bag.import_errors == {}
    return bag.get_dag(dag_id)


def run(dag_id: str, conf: dict, answers: dict[str, str | None], user: str | None = None,  # type: ignore[no-untyped-def]
        refused_user: str | None = None, after_answer=None):
    dag = load(dag_id)
    with Responder(dag_id, answers, user=user, refused_user=refused_user, after_answer=after_answer) as r:
        dr = dag.test(run_conf=conf)
    assert not r.errors, r.errors
    assert not r.answers, f"gates never reached: {r.answers}"
    return dr, r


def states(dr) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return {ti.task_id: ti.state for ti in dr.get_task_instances()}


@pytest.fixture()
def webhook(monkeypatch) -> Iterator[tuple[list[tuple[str, dict]], str]]:  # type: ignore[no-untyped-def]
    """A real HTTP server standing in for a Slack incoming webhook; the connection mirror_core_notify holds
    its URL, a secret token in the path as Slack's has: (posts received as (path, JSON body), token)."""
    with webhook_receiver() as (base, received):
        token = unique("T0KEN")
        monkeypatch.setenv("AIRFLOW_CONN_MIRROR_CORE_NOTIFY",
                           json.dumps({"conn_type": "http", "password": f"{base}/services/{token}"}))
        yield received, token


@pytest.fixture()
def setup(dc1, dc2, name, tmp_path: Path, monkeypatch, start_mirror):  # type: ignore[no-untyped-def]
    db = f"sqlite:///{tmp_path / 'state.db'}"
    lines = [f"{f}.{k}" for f in ("dc1->dc2", "dc2->dc1") for k in (
        f"topics = {name}.*", f"consumer.group.id = {name}-workers-{f.replace('->', '-')}")]
    lines += ["dc1->dc2.enabled = true", "dc2->dc1.enabled = false", "emit.heartbeats.enabled = false",
              "refresh.topics.interval.seconds = 2", "offset.flush.interval.ms = 200",
              "emit.checkpoints.interval.seconds = 1"]
    config = write_config(tmp_path / "mm2.properties", {"dc1": dc1, "dc2": dc2}, lines)
    monkeypatch.setenv("MIRROR_CORE_CONFIG", str(config))
    monkeypatch.setenv("MIRROR_CORE_DB_URL", db)
    mirror = start_mirror([], config=config, args=["--state-db", db])
    return StateStore(db), mirror


def test_failover_reject_then_approve_then_failback(dc1, dc2, name, setup, webhook, monkeypatch,  # type: ignore[no-untyped-def]
                                                    capfd) -> None:
    store, mirror = setup
    posts, token = webhook
    t, group, app = f"{name}.orders", f"{name}-app", f"{name}-orders-app"
    create_topic(dc1, t, 2)
    produce_sequence(dc1, t, 2, 100)
    commit_offsets(admin(dc1), group, {(t, 0): 30, (t, 1): 20})  # the application consumed 50 of them
    wait_until(lambda: end_offsets(dc2, f"dc1.{t}") == {0: 50, 1: 50}, 60, what="forward replication")
    wait_until(lambda: all(p["lag"] == 0 for p in mirror.partitions() if p["topic"] == t), 30, what="progress")
    conf = {"flow": "dc1->dc2", "apps": [app], "groups": [group], "mode": "planned", "drain_timeout_s": 60}

    # Reject: nothing changes, and the run is not a success.
    dr, gate = run("failover", conf, {"approve": "Reject"})
    assert dr.state == "failed" and states(dr)["execute"] == "skipped" and states(dr)["finalize"] == "failed"
    assert f"dc1.{t}" in gate.bodies["approve"] and group in gate.bodies["approve"]
    assert store.failovers()[0].status == "rejected"
    assert store.flow_controls() == {} and store.registry() == []
    assert committed_offsets(admin(dc2), group) == {}
    # The gate's notifier posted where to approve (Slack-compatible JSON); its URL's token never logged.
    assert len(posts) == 1 and posts[0][0] == f"/services/{token}", posts
    text = posts[0][1]["text"]
    assert text.startswith("Approval waiting: failover of flow dc1->dc2, gate approve.") and \
        "/dags/failover/runs/" in text and text.endswith("/tasks/approve/required_actions"), text
    out = capfd.readouterr()
    assert token not in out.out + out.err
    assert "AirflowFailException: rejected by " in out.out and ": nothing changed\n" in out.out  # one line
    assert gate.details["approve"]["assigned_users"] in (None, [])  # no approvers configured: any user

    # Approvers configured (and Airflow not in all-admins mode): eve is refused by the API, dana approves.
    monkeypatch.setenv("MIRROR_CORE_APPROVERS_FAILOVER", "dana")
    monkeypatch.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS", "False")
    # Approve: forward stopped, offsets translated exactly, registry switched, reverse started.
    dr, gate = run("failover", conf, {"approve": "Approve"}, user="dana", refused_user="eve")
    assert dr.state == "success", states(dr)
    assert gate.details["approve"]["assigned_users"] == [{"id": "dana", "name": "dana"}]
    status, detail = gate.refusals["approve"]
    assert status == 403 and "eve" in detail and "not a respondent" in detail, gate.refusals
    record = store.failovers()[0]
    assert record.status == "done" and record.approved_by == "dana"
    # Truthful figures: drained to lag 0 before the switch, the RPO measured is 0 (the estimate at approval
    # stays beside it); RTO from the trigger and from the approval.
    assert record.rpo_measured == 0 and record.details["rpo_records"] == 0, record.details
    assert record.details["rpo_measured_note"].startswith("drained, then the forward flow stopped")
    assert record.rto_seconds is not None and record.rto_from_approval_seconds is not None
    assert 0 < record.rto_from_approval_seconds <= record.rto_seconds
    bound = store.bound_plan("failover", dr.run_id)
    assert bound is not None and bound.gates["approve"].approver_id == "dana" and bound.intact
    assert f"Plan digest `sha256:{bound.digest}`" in gate.bodies["approve"]
    monkeypatch.delenv("MIRROR_CORE_APPROVERS_FAILOVER")
    monkeypatch.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS", "True")
    assert committed_offsets(admin(dc2), group) == {(f"dc1.{t}", 0): 30, (f"dc1.{t}", 1): 20}
    assert store.active_cluster(app).cluster == "dc2"  # type: ignore[union-attr]
    controls = store.flow_controls()
    assert controls["dc1->dc2"].desired == "stopped" and controls["dc2->dc1"].desired == "running"
    wait_until(lambda: [i.state for i in store.flow_instances("dc2->dc1")] == ["running"], 30, what="reverse up")

    # A second failover, unanswered: its gate says the flow is failed over already (not "standby becomes
    # active, lag 0"); after its response timeout it takes its default, Reject, and nothing changes.
    monkeypatch.setenv("MIRROR_CORE_GATE_TIMEOUT_S_FAILOVER", "3")
    before = {f: (c.desired, c.changed_at) for f, c in store.flow_controls().items()}
    capfd.readouterr()
    dr, gate = run("failover", conf, {"approve": None})
    assert dr.state == "failed" and states(dr)["execute"] == "skipped" and states(dr)["finalize"] == "failed"
    assert "AirflowFailException: rejected by nobody (the gate timed out): nothing changed\n" in capfd.readouterr().out
    assert gate.details["approve"]["defaults"] == ["Reject"]
    body = gate.bodies["approve"]
    assert "**ALREADY FAILED OVER**: standby **dc2** is active now" in body and "becomes active" not in body
    assert "forward flow dc1->dc2 is stopped (by dana)" in body and "reverse flow dc2->dc1 is running" in body
    record = store.failovers()[0]
    assert record.status == "rejected" and record.details["failed_over"], record.details
    assert {f: (c.desired, c.changed_at) for f, c in store.flow_controls().items()} == before
    assert store.active_cluster(app).cluster == "dc2"  # type: ignore[union-attr]
    assert committed_offsets(admin(dc2), group) == {(f"dc1.{t}", 0): 30, (f"dc1.{t}", 1): 20}
    monkeypatch.delenv("MIRROR_CORE_GATE_TIMEOUT_S_FAILOVER")

    # While failed over: 10 records land on dc1 too late (never replicated); the applications
    # write 20 records on dc2 and the group reads to the end of the replica plus 10 new ones.
    produce_sequence(dc1, t, 2, 10, start=100)
    create_topic(dc2, t, 2)
    produce_sequence(dc2, t, 2, 20, start=1000)
    commit_offsets(admin(dc2), group, {(f"dc1.{t}", 0): 50, (f"dc1.{t}", 1): 50, (t, 0): 5, (t, 1): 5})
    wait_until(lambda: sum(end_offsets(dc1, f"dc2.{t}").values() or [0]) == 20, 60, what="new data flows back")

    # Failback rejected: nothing changes.
    fb = {"flow": "dc1->dc2", "apps": [app], "groups": [group], "max_reverse_lag": 0, "drain_timeout_s": 60}
    dr, _ = run("failback", fb, {"decide": "Reject"})
    assert dr.state == "failed" and states(dr)["execute"] == "skipped" and states(dr)["finalize"] == "failed"
    assert store.failovers()[0].status == "rejected"
    assert store.active_cluster(app).cluster == "dc2"  # type: ignore[union-attr]
    assert store.flow_controls()["dc2->dc1"].desired == "running"
    assert committed_offsets(admin(dc1), group) == {(t, 0): 30, (t, 1): 20}

    # Failback, skipping the 10 stranded records (they stay on dc1's topic and are reported).
    dr, gate = run("failback", fb, {"decide": "Fail back; consumers skip the unreplicated records (kept and listed)"})
    assert dr.state == "success", states(dr)
    assert "offsets 50..54" in gate.bodies["decide"]
    record = store.failovers()[0]
    assert record.kind == "failback" and record.status == "done"
    assert record.details["unreplicated_total"] == 10
    # dc1.orders@50 on dc2 = orders@50 on dc1, moved past the 5 stranded records per partition;
    # the 10 records read on dc2 = offsets 5 of dc2.orders on dc1.
    assert committed_offsets(admin(dc1), group) == {(t, 0): 55, (t, 1): 55, (f"dc2.{t}", 0): 5, (f"dc2.{t}", 1): 5}
    assert store.active_cluster(app).cluster == "dc1"  # type: ignore[union-attr]
    controls = store.flow_controls()
    assert controls["dc1->dc2"].desired == "running" and controls["dc2->dc1"].desired == "stopped"
    # Restored forward flow: the stranded records now reach dc2 too; nothing was lost anywhere.
    wait_until(lambda: end_offsets(dc2, f"dc1.{t}") == {0: 55, 1: 55}, 60, what="forward flow restored")
    assert sorted(r.value for r in read_all(dc2, f"dc1.{t}")) == sorted(r.value for r in read_all(dc1, t))
    assert sorted(r.value for r in read_all(dc1, f"dc2.{t}")) == sorted(r.value for r in read_all(dc2, t))
    history = [(c.from_cluster, c.to_cluster) for c in store.registry_history(app)]
    assert history == [("dc2", "dc1"), (None, "dc2")]


def test_bad_params_are_refused_before_anything_changes(dc1, dc2, name, setup) -> None:  # type: ignore[no-untyped-def]
    store, _ = setup
    dag = load("failover")
    with pytest.raises(Exception) as err:  # not in the Param's enum: refused before the run starts
        dag.test(run_conf={"flow": "dc9->dc2"})
    assert "flow" in str(err.value)
    dr = dag.test(run_conf={"flow": "dc1->dc2", "groups": ["g", "g"]})  # validated by the first task
    assert dr.state == "failed" and states(dr)["assess"] == "failed"
    assert store.failovers() == [] and store.flow_controls() == {}
    # failback: the Params are checked before its lag sensor reads anything from the clusters.
    dr = load("failback").test(run_conf={"flow": "dc1->dc2", "groups": ["g", "g"]})
    assert dr.state == "failed"
    assert {k: states(dr)[k] for k in ("check", "catch_up", "assess")} == {
        "check": "failed", "catch_up": "upstream_failed", "assess": "upstream_failed"}
    assert store.failovers() == [] and store.flow_controls() == {}


def test_unplanned_failover_after_the_primary_is_killed_mid_stream(dc2, name, tmp_path: Path, monkeypatch,
                                                                    start_mirror) -> None:  # type: ignore[no-untyped-def]
    """The primary's broker is SIGKILLed while a group still consumes and commits there; the failover
    translates from the checkpoints on the standby: the group re-reads at most what it consumed after the
    last checkpoint, skips nothing the standby holds, and the record names the approver and its times."""
    primary = new_cluster("east", tmp_path)  # a cluster of its own: this test kills it
    primary.start()
    east = primary.bootstrap
    db = f"sqlite:///{tmp_path / 'state.db'}"
    lines = [f"{f}.{k}" for f in ("east->dc2", "dc2->east") for k in (
        f"topics = {name}.*", f"consumer.group.id = {name}-workers-{f.replace('->', '-')}")]
    lines += ["east->dc2.enabled = true", "dc2->east.enabled = false", "emit.heartbeats.enabled = false",
              "refresh.topics.interval.seconds = 1", "offset.flush.interval.ms = 200",
              "emit.checkpoints.interval.seconds = 1"]  # short: the test waits for one, then outruns it
    config = write_config(tmp_path / "mm2.properties", {"east": east, "dc2": dc2}, lines)
    monkeypatch.setenv("MIRROR_CORE_CONFIG", str(config))
    monkeypatch.setenv("MIRROR_CORE_DB_URL", db)
    store = StateStore(db)
    t, remote, group, app = f"{name}.orders", f"east.{name}.orders", f"{name}-app", f"{name}-orders-app"
    create_topic(east, t, 2)
    start_mirror([], config=config, args=["--state-db", db])

    # The application produces and consumes on the primary, committing after every small batch.
    prod = producer(east)
    consumer = Consumer({"bootstrap.servers": east, "group.id": group, "enable.auto.commit": False,
                         "log_level": "0"})
    consumer.assign([TopicPartition(t, p, OFFSET_BEGINNING) for p in (0, 1)])
    checkpoints = CheckpointReader(Consumer({"bootstrap.servers": dc2, "group.id": unique("ckpt"),
                                             "log_level": "0"}), checkpoints_topic("east"))
    consumed: set[bytes] = set()
    committed: dict[int, int] = {}
    seq = 0

    def step() -> None:
        nonlocal seq
        for _ in range(20):
            prod.produce(t, value=b"seq-%d" % seq, partition=seq % 2)
            seq += 1
        prod.flush(10)
        msgs = [m for m in consumer.consume(30, 0.1) if m.error() is None]
        if msgs:
            consumed.update(m.value() for m in msgs)  # type: ignore[misc]
            committed.update({tp.partition: tp.offset for tp in consumer.commit(asynchronous=False) or []})

    def checkpointed() -> bool:
        # Both partitions: the precondition below needs a checkpoint of each (in CI, 2026-11-26, the first
        # round had only partition 1 and none came for partition 0 in the 1.5 s before the kill).
        try:
            return {p for g, r, p in checkpoints.refresh(5) if g == group and r == remote} == {0, 1}
        except ProgressError:  # the mirror has not created the checkpoints topic yet
            return False

    try:
        deadline = time.monotonic() + 60
        while not checkpointed():
            assert time.monotonic() < deadline, "the mirror published no checkpoint for the group"
            step()
        seen = time.monotonic()
        while time.monotonic() - seen < 1.5:  # go on committing past that checkpoint
            step()
        primary.kill()  # SIGKILL: the primary is gone mid-stream, right after the group's last commit
        assert not primary.is_running()
    finally:
        primary.kill()

    conf = {"flow": "east->dc2", "apps": [app], "groups": [group], "mode": "unplanned", "drain_timeout_s": 60}
    began = time.monotonic()
    dr, gate = run("failover", conf, {"approve": "Approve"}, user="dana")
    took = time.monotonic() - began
    consumer.close()
    assert dr.state == "success", states(dr)

    # Precondition: the group committed on the primary after the last checkpoint the mirror emitted.
    last = {p: up_down for (g, r, p), up_down in checkpoints.refresh().items() if g == group and r == remote}
    checkpoints.close()
    assert set(last) == {0, 1} and all(last[p][0] <= committed[p] for p in last), (last, committed)
    reread_bound = sum(committed[p] - last[p][0] for p in last)  # consumed after the checkpoints
    assert reread_bound > 0, (last, committed)

    # The approver saw each offset's basis: a checkpoint, its age and the most records read again.
    body = gate.bodies["approve"]
    assert "UNREACHABLE" in body and "KafkaError{" not in body, body  # the reason in librdkafka's words
    assert "exact:" not in body and body.count("checkpoint (") == 2, body
    record = store.failovers()[0]
    rows = record.details["groups"][group]
    assert {r["basis"] for r in rows} == {"checkpoint"} and all(r["checkpoint_age_s"] is not None for r in rows)
    stated_bound = sum(r["max_rereads"] for r in rows)
    assert f"reads again at most **{stated_bound} records**" in body

    # The group resumes on the standby at the checkpoints, translated.
    assert committed_offsets(admin(dc2), group) == {(remote, p): last[p][1] for p in last}
    on_standby = read_all(dc2, remote)
    after = [r.value for r in on_standby if r.offset >= last[r.partition][1]]  # what the group reads next
    before = [r.value for r in on_standby if r.offset < last[r.partition][1]]
    duplicates = sum(v in consumed for v in after)
    losses = [v for v in before if v not in consumed]  # skipped: on the standby, never read anywhere
    print(f"unplanned failover DAG run {took:.1f}s; consumed {len(consumed)} on the primary, "
          f"{len(on_standby)} on the standby; re-read {duplicates} (at most {reread_bound} by the checkpoints, "
          f"{stated_bound} stated); lost {len(losses)}")
    assert losses == [] and len(set(after)) == len(after)
    assert 0 < duplicates <= reread_bound and duplicates <= stated_bound

    # Who and when: the user who approved through the REST API, and the times RTO is read from.
    assert (record.status, record.planned, record.approved_by) == ("done", False, "dana")
    assert record.triggered_at and record.approved_at and record.finished_at
    assert aware(record.triggered_at) <= aware(record.started_at) <= aware(record.approved_at) \
        <= aware(record.finished_at)
    assert record.rto_seconds is not None and 0 < record.rto_seconds <= took + 1
    assert record.rto_from_approval_seconds is not None and record.rto_from_approval_seconds <= record.rto_seconds
    # The primary is gone: the loss at the switch cannot be counted now (the failback counts it), and the
    # record says so rather than repeating the estimate.
    assert record.rpo_measured is None and record.details["rpo_measured_note"].startswith("primary unreachable")
    entry = store.active_cluster(app)
    assert entry is not None and (entry.cluster, entry.changed_by) == ("dc2", "dana")
    controls = store.flow_controls()
    assert (controls["east->dc2"].desired, controls["east->dc2"].changed_by) == ("stopped", "dana")
    assert (controls["dc2->east"].desired, controls["dc2->east"].changed_by) == ("running", "dana")


def triggered_as(monkeypatch, user: str) -> None:  # type: ignore[no-untyped-def]
    """The runs dag.test() starts are triggered by ``user`` (as a run triggered in the UI or through the REST
    API by that user is: DagRun.triggering_user_name), instead of dag.test()'s own 'dag_test'."""
    import airflow.models.dagrun as dagrun

    create = dagrun.get_or_create_dagrun

    def as_user(*args, **kwargs):  # type: ignore[no-untyped-def]
        kwargs["triggering_user_name"] = user
        return create(*args, **kwargs)

    monkeypatch.setattr(dagrun, "get_or_create_dagrun", as_user)


def nothing_changed(store: StateStore, dc2: str, group: str, mirror) -> None:  # type: ignore[no-untyped-def]
    assert store.flow_controls() == {} and store.registry() == []
    assert committed_offsets(admin(dc2), group) == {}
    assert [i.state for i in store.flow_instances("dc1->dc2")] == ["running"]  # the mirror still copies forward


def test_four_eyes_and_the_bound_plan(dc1, dc2, name, setup, monkeypatch, capfd) -> None:  # type: ignore[no-untyped-def]
    """The user who triggered a failover cannot approve it; a plan edited in its XCom after approval (through
    Airflow's REST API, by a user with XCom rights) does not run: one line each, nothing changes anywhere."""
    store, mirror = setup
    t, group, app = f"{name}.orders", f"{name}-app", f"{name}-orders-app"
    create_topic(dc1, t, 2)
    produce_sequence(dc1, t, 2, 40)
    commit_offsets(admin(dc1), group, {(t, 0): 10, (t, 1): 10})
    wait_until(lambda: end_offsets(dc2, f"dc1.{t}") == {0: 20, 1: 20}, 60, what="forward replication")
    wait_until(lambda: store.flow_instances("dc1->dc2") != [], 30, what="the mirror reports")
    conf = {"flow": "dc1->dc2", "apps": [app], "groups": [group], "mode": "planned", "drain_timeout_s": 60}
    monkeypatch.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS", "False")  # tokens say who acts
    triggered_as(monkeypatch, "dana")

    # dana triggered the run and approves it herself: refused in one line; nothing changed.
    capfd.readouterr()
    dr, gate = run("failover", conf, {"approve": "Approve"}, user="dana")
    assert gate.responses["approve"]["responded_by"]["id"] == "dana"  # the approver is the triggering user
    assert dr.state == "failed" and states(dr)["approve"] == "failed" and states(dr)["execute"] == "upstream_failed"
    bound = store.bound_plan("failover", dr.run_id)
    assert bound is not None and bound.triggered_by == "dana" and bound.plan["planned"] is True
    body = gate.bodies["approve"]
    assert f"Plan digest `sha256:{bound.digest}`" in body and f"dc1.{t}" in body, body
    assert "Triggered by **dana** — four eyes: **dana** cannot approve this run; another approver must." in body
    line = ("self-approval refused: dana triggered this failover run and cannot approve it (four eyes); nothing was "
            "changed; another approver must answer the gate of a new run (or the deployment allows it: "
            "MIRROR_CORE_ALLOW_SELF_APPROVAL_FAILOVER=true, docs/security.md)")
    out = capfd.readouterr().out
    assert f"AirflowFailException: {line}\n" in out, out[-3000:]
    assert bound.gates["approve"].refused == line and bound.gates["approve"].approver_id == "dana"
    record = store.failovers()[0]
    assert (record.status, record.details["error"], record.approved_by) == ("refused", line, None)
    nothing_changed(store, dc2, group, mirror)

    # erin approves the next run; mallory, who may edit XComs (role "user") but not approve, turns the approved
    # planned failover into an unplanned one (no drain) by PATCHing the assessment's XCom through the REST API.
    edited: dict[str, Any] = {}

    def edit_plan(client, run_id: str, task_id: str) -> None:  # type: ignore[no-untyped-def]
        path = f"/api/v2/dags/failover/dagRuns/{run_id}/taskInstances/assess/xcomEntries/return_value"
        mallory = headers("mallory", role="user")
        value = client.get(path, headers=mallory, params={"deserialize": True, "stringify": False}).json()["value"]
        r = client.patch(path, headers=mallory, json={"value": {**value, "planned": False}, "map_index": -1})
        assert r.status_code == 200, r.text
        edited["value"] = client.get(path, headers=mallory, params={"deserialize": True, "stringify": False}).json()
        edited["at"] = datetime.now(UTC)

    capfd.readouterr()
    dr, gate = run("failover", conf, {"approve": "Approve"}, user="erin", after_answer=edit_plan)
    assert gate.responses["approve"]["responded_by"]["id"] == "erin"
    assert edited["value"]["value"]["planned"] is False, edited  # the XCom really was edited, after approval ...
    execute = {ti.task_id: ti for ti in dr.get_task_instances()}["execute"]
    assert execute.start_date is not None and edited["at"] < aware(execute.start_date)  # ... before execute ran
    bound = store.bound_plan("failover", dr.run_id)
    assert bound is not None and bound.plan["planned"] is True and bound.intact
    assert (bound.gates["approve"].approver_id, bound.gates["approve"].digest) == ("erin", bound.digest)
    assert dr.state == "failed" and states(dr)["execute"] == "failed" and states(dr)["verify"] == "upstream_failed"
    out = capfd.readouterr().out
    refusal = [x for x in out.splitlines() if "AirflowFailException: the plan handed over by XCom" in x]
    assert refusal and refusal[0].endswith(f"is not the approved plan {bound.digest[:12]}: an XCom was edited after "
                                           "assessment; nothing was changed; trigger a new run (docs/security.md: "
                                           "who may edit XComs)"), out[-3000:]
    record = store.failovers()[0]
    assert record.status == "refused" and record.approved_by is None, (record.status, record.details)
    nothing_changed(store, dc2, group, mirror)

    # A deployment that allows self-approval (a single-operator lab): dana's own approval runs her failover.
    monkeypatch.setenv("MIRROR_CORE_ALLOW_SELF_APPROVAL_FAILOVER", "true")
    dr, gate = run("failover", conf, {"approve": "Approve"}, user="dana")
    assert gate.responses["approve"]["responded_by"]["id"] == "dana" and dr.state == "success", states(dr)
    assert "Triggered by **dana** — self-approval allowed by the deployment" in gate.bodies["approve"]
    record = store.failovers()[0]
    assert (record.status, record.approved_by) == ("done", "dana")
    assert store.active_cluster(app).cluster == "dc2"  # type: ignore[union-attr]


def test_failover_and_failback_of_one_topic_of_two(dc1, dc2, name, setup, monkeypatch, capfd) -> None:  # type: ignore[no-untyped-def]
    """A failover of `orders` only: its group's offsets translated on the standby and its application re-pointed,
    while `audit` goes on being copied by the forward flow; bad topics and a group reading both sets are refused in
    one line with nothing changed; the failback of `orders` clears its pause and copies what it missed."""
    store, _ = setup
    orders, audit = f"{name}.orders", f"{name}.audit"
    group, both, app = f"{name}-orders-app", f"{name}-both", f"{name}-orders-app"
    for t in (orders, audit):
        create_topic(dc1, t, 2)
        produce_sequence(dc1, t, 2, 100)
    commit_offsets(admin(dc1), group, {(orders, 0): 30, (orders, 1): 20})
    commit_offsets(admin(dc1), both, {(orders, 0): 10, (audit, 0): 10})
    for t in (orders, audit):
        wait_until(lambda t=t: end_offsets(dc2, f"dc1.{t}") == {0: 50, 1: 50}, 60, what=f"forward replication {t}")
    wait_until(lambda: store.flow_instances("dc1->dc2") != [], 30, what="the mirror reports")
    triggered_as(monkeypatch, "eve")  # four eyes: eve triggers, dana approves
    conf = {"flow": "dc1->dc2", "apps": [app], "groups": [group], "mode": "planned", "drain_timeout_s": 60,
            "topics": [orders]}

    # Bad input: one line each at assess; nothing recorded, paused or committed.
    for bad, says in (({"topics": [f"{name}.nope"]}, f"topics: '{name}.nope' matches no source topic of flow dc1->dc2"),
                      ({"topics": ["(orders"]}, "topics: '(orders' is not a topic name or pattern"),
                      ({"groups": [both]}, f"group {both} reads switching {orders} and staying {audit}")):
        capfd.readouterr()
        dr = load("failover").test(run_conf={**conf, **bad})
        assert dr.state == "failed" and states(dr)["assess"] == "failed", states(dr)
        out = capfd.readouterr().out
        lines = [x for x in out.splitlines() if "AirflowFailException: " in x]
        assert lines and says in lines[0] and lines[0].endswith("nothing was changed"), out[-3000:]
    assert store.failovers() == [] and store.active_topic_controls(None) == [] and store.registry() == []
    assert committed_offsets(admin(dc2), group) == {} and committed_offsets(admin(dc2), both) == {}

    dr, gate = run("failover", conf, {"approve": "Approve"}, user="dana")
    assert dr.state == "success", states(dr)
    body = gate.bodies["approve"]
    assert "**Only some topics switch**" in body and f"switching to **dc2**: topics `{orders}`; groups {group}" in body
    assert f"staying on **dc1**, still mirrored: topics `{audit}`" in body, body
    bound = store.bound_plan("failover", dr.run_id)
    assert bound is not None and bound.triggered_by == "eve" and bound.gates["approve"].approver_id == "dana"
    assert (bound.plan["topics"], bound.plan["staying"]) == ([orders], [audit])  # in the digest approved
    record = store.failovers()[0]
    assert record.status == "done" and record.details["topics"] == [orders] and record.rpo_measured == 0
    assert committed_offsets(admin(dc2), group) == {(f"dc1.{orders}", 0): 30, (f"dc1.{orders}", 1): 20}
    assert store.active_cluster(app).cluster == "dc2"  # type: ignore[union-attr]
    [pause] = store.active_topic_controls(["dc1->dc2"])
    assert (pause.kind, pause.topic, pause.partition, pause.set_by) == ("pause", orders, None, "dana")
    assert pause.reason.startswith(f"switched to dc2 by failover run {dr.run_id}"), pause.reason
    controls = store.flow_controls()
    assert "dc1->dc2" not in controls and controls["dc2->dc1"].desired == "running"  # forward not stopped

    # The forward flow goes on copying audit; orders stays where it was switched.
    produce_sequence(dc1, audit, 2, 10, start=100)
    produce_sequence(dc1, orders, 2, 10, start=100)
    wait_until(lambda: end_offsets(dc2, f"dc1.{audit}") == {0: 55, 1: 55}, 60, what="audit copied after the failover")
    assert [i.state for i in store.flow_instances("dc1->dc2")] == ["running"]
    assert end_offsets(dc2, f"dc1.{orders}") == {0: 50, 1: 50}
    paused = {(p.topic, p.partition) for p in store.paused_partitions(flow="dc1->dc2")}
    assert paused == {(orders, 0), (orders, 1)}, paused

    # A second failover of orders says it is switched already.
    monkeypatch.setenv("MIRROR_CORE_GATE_TIMEOUT_S_FAILOVER", "3")
    dr, gate = run("failover", conf, {"approve": None})
    assert dr.state == "failed" and f"the topics {orders} are switched already" in gate.bodies["approve"]
    monkeypatch.delenv("MIRROR_CORE_GATE_TIMEOUT_S_FAILOVER")
    # A failover or failback of the whole flow meanwhile: refused at assess in one line, nothing changed.
    fb = {"flow": "dc1->dc2", "apps": [app], "groups": [group], "max_reverse_lag": 0, "drain_timeout_s": 60,
          "topics": [orders]}
    for dag_id, whole in (("failover", {**conf, "topics": []}), ("failback", {**fb, "topics": []})):
        capfd.readouterr()
        dr = load(dag_id).test(run_conf=whole)
        assert dr.state == "failed" and states(dr)["assess"] == "failed", states(dr)
        out = capfd.readouterr().out
        assert f"the topics {orders} of flow dc1->dc2 are switched to dc2 already" in out, out[-3000:]
    assert len(store.active_topic_controls(["dc1->dc2"])) == 1 and store.failovers()[0].kind == "failover"
    assert committed_offsets(admin(dc2), group) == {(f"dc1.{orders}", 0): 30, (f"dc1.{orders}", 1): 20}

    # Failback of orders: its group home, the pause cleared, orders' 10 missed records copied, reverse stopped.
    capfd.readouterr()  # (a failback of a topic never switched: one line at assess, nothing changed)
    dr = load("failback").test(run_conf={**fb, "groups": [], "apps": [], "topics": [audit]})
    assert dr.state == "failed" and states(dr)["assess"] == "failed", states(dr)
    assert f"topics {audit} were not switched by a failover of some topics" in capfd.readouterr().out
    assert len(store.active_topic_controls(["dc1->dc2"])) == 1 and store.failovers()[0].kind == "failover"
    dr, gate = run("failback", fb, {"decide": "Fail back; consumers skip the unreplicated records (kept and listed)"},
                   user="dana")
    assert dr.state == "success", states(dr)
    assert f"only the topics `{orders}` come back" in gate.bodies["decide"]
    record = store.failovers()[0]
    assert record.kind == "failback" and record.status == "done" and record.details["topics"] == [orders]
    assert record.details["unreplicated_total"] == 10  # orders' only: audit's lag is not the failback's
    assert committed_offsets(admin(dc1), group) == {(orders, 0): 30, (orders, 1): 20}
    assert store.active_cluster(app).cluster == "dc1"  # type: ignore[union-attr]
    assert store.active_topic_controls(["dc1->dc2"]) == []
    assert store.flow_controls()["dc2->dc1"].desired == "stopped"
    wait_until(lambda: end_offsets(dc2, f"dc1.{orders}") == {0: 55, 1: 55}, 60, what="orders copied again")
    assert sorted(r.value for r in read_all(dc2, f"dc1.{orders}")) == sorted(r.value for r in read_all(dc1, orders))
