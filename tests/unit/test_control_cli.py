"""`mirror-core control pause|resume|limit|unlimit|list|history` on a temporary SQLite state store."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest

from mirror_core.cli import main
from mirror_core.state.store import StateStore

FLOW = "dc1->dc2"
cli_main_module = importlib.import_module("mirror_core.cli.main")  # the package's `main` is the function


@pytest.fixture()
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, str]:
    monkeypatch.delenv("MIRROR_CORE_DB_URL", raising=False)
    monkeypatch.setattr("mirror_core.cli.partitions.getpass.getuser", lambda: "alice")
    monkeypatch.setattr(cli_main_module, "_setup_logging", lambda level: None)
    config = tmp_path / "mm2.properties"
    config.write_text("clusters = dc1, dc2\ndc1.bootstrap.servers = a:9092\ndc2.bootstrap.servers = b:9092\n"
                      "dc1->dc2.enabled = true\ndc1->dc2.topics = orders.*, payments\n")
    return str(config), f"sqlite:///{tmp_path / 'state.db'}"


def store(db: str) -> StateStore:
    s = StateStore(db)
    s.migrate()
    return s


def out_line(capsys: pytest.CaptureFixture[str]) -> str:
    out, err = capsys.readouterr()
    assert err == ""
    [line] = out.strip().splitlines()
    return line


def one_line_error(capsys: pytest.CaptureFixture[str]) -> str:
    out, err = capsys.readouterr()
    assert out == ""
    [line] = err.strip().splitlines()
    assert line.startswith("mirror-core: control ") and "Traceback" not in err
    return line


def test_pause_resume_limit_unlimit_list_and_history(env: tuple[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    config, db = env
    assert main(["control", "pause", "--flow", FLOW, "--topic", "orders", "--reason", "backfill", "--state-db", db,
                 "--config", config]) == 0
    line = out_line(capsys)
    assert line.startswith(f"paused {FLOW} orders (id 1, by alice): no mirror instance has reported flow {FLOW}")
    store(db).report_flow_states("mirror-0", {FLOW: "running"})
    assert main(["control", "pause", "--flow", FLOW, "--topic", "payments", "--partition", "2", "--reason",
                 "poison", "--by", "bob", "--state-db", db]) == 0
    assert out_line(capsys) == (f"paused {FLOW} payments[2] (id 2, by bob): the running mirror instances apply it "
                                "within seconds")
    assert main(["control", "limit", "--flow", FLOW, "--bytes-per-second", "50000000", "--reason", "WAN link",
                 "--state-db", db]) == 0
    assert out_line(capsys).startswith(f"limited {FLOW} (whole flow) to 50000000 bytes/s across its processes "
                                       "(id 3, by alice)")
    assert main(["control", "limit", "--flow", FLOW, "--bytes-per-second", "80000000", "--reason", "more",
                 "--state-db", db]) == 0
    assert "(id 4, by alice, was 50000000 bytes/s)" in out_line(capsys)
    assert main(["control", "limit", "--flow", FLOW, "--topic", "orders", "--bytes-per-second", "1000",
                 "--reason", "backfill", "--state-db", db]) == 0
    capsys.readouterr()

    assert main(["control", "list", "--json", "--state-db", db]) == 0
    active = json.loads(capsys.readouterr().out)
    assert [(c["kind"], c["topic"], c["partition"], c["limit_bytes_per_s"], c["set_by"]) for c in active] == [
        ("limit", None, None, 80000000, "alice"), ("limit", "orders", None, 1000, "alice"),
        ("pause", "orders", None, None, "alice"), ("pause", "payments", 2, None, "bob")]
    assert main(["control", "list", "--state-db", db, "--flow", FLOW]) == 0
    table = capsys.readouterr().out
    assert "active runtime controls" in table and "limit 80000000 bytes/s" in table and "payments[2]" in table

    assert main(["control", "resume", "--flow", FLOW, "--topic", "orders", "--reason", "backfill done",
                 "--state-db", db]) == 0
    assert out_line(capsys).startswith(f"resumed {FLOW} orders (operator's pause id 1 by alice cleared by alice)")
    assert main(["control", "unlimit", "--flow", FLOW, "--topic", "orders", "--reason", "done", "--state-db",
                 db]) == 0
    assert out_line(capsys).startswith(f"unlimited {FLOW} orders (was 1000 bytes/s, id 5, by alice)")
    assert main(["control", "history", "--json", "--flow", FLOW, "--state-db", db]) == 0
    history = json.loads(capsys.readouterr().out)
    assert [(h["id"], h["active"]) for h in history] == [(5, False), (4, True), (3, False), (2, True), (1, False)]
    assert history[2]["clear_reason"] == "replaced by 80000000 bytes/s: more"
    assert main(["control", "history", "--state-db", db, "--limit", "2"]) == 0
    assert "runtime controls (newest first)" in capsys.readouterr().out


def test_resume_of_a_partition_the_mirror_paused_records_a_partition_action(
        env: tuple[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    _, db = env
    s = store(db)
    # No live instance: the resume is recorded and applies once one runs.
    assert main(["control", "resume", "--flow", FLOW, "--topic", "orders", "--partition", "0", "--reason",
                 "leader moved", "--state-db", db]) == 0
    line = out_line(capsys)
    assert line.startswith(f"requested: resume {FLOW} orders[0], paused by the mirror (partition action id 1, "
                           "by alice)")
    # A live instance reports orders[1] paused (damaged batch): resumable the same way.
    s.report_flow_states("mirror-0", {FLOW: "running"}, {FLOW: [
        {"topic": "orders", "partition": 1, "reason": "CRC mismatch at 3061"}]})
    assert main(["control", "resume", "--flow", FLOW, "--topic", "orders", "--partition", "1", "--reason",
                 "intact replica leads", "--state-db", db]) == 0
    assert "paused by the mirror (CRC mismatch at 3061) (partition action id 2" in out_line(capsys)
    assert [(a.partition, a.action, a.requested_by) for a in s.partition_actions(FLOW)] == [
        (1, "resume", "alice"), (0, "resume", "alice")]
    # Live instances report orders[2] not paused: nothing to resume.
    assert main(["control", "resume", "--flow", FLOW, "--topic", "orders", "--partition", "2", "--reason", "x",
                 "--state-db", db]) == 2
    assert "is not paused: not by an operator, and no live instance of the flow reports it paused" in \
        one_line_error(capsys)
    # A topic paused whole: its partition is resumed with the topic.
    s.pause_topic(FLOW, "payments", "bob", "backfill")
    assert main(["control", "resume", "--flow", FLOW, "--topic", "payments", "--partition", "0", "--reason", "x",
                 "--state-db", db]) == 2
    assert "paused with its whole topic (by bob: backfill): resume the topic" in one_line_error(capsys)
    assert len(s.partition_actions(FLOW)) == 2


BAD: list[tuple[list[str], str]] = [
    (["pause", "--flow", "dc9->dc2", "--topic", "orders"], "unknown flow 'dc9->dc2'"),
    (["pause", "--flow", "dc1", "--topic", "orders"], "unknown flow 'dc1'"),
    (["pause", "--flow", FLOW, "--topic", "audit"], "topic 'audit' is not replicated by flow dc1->dc2"),
    (["pause", "--flow", FLOW, "--topic", "orders.*"], "not a pattern"),
    (["pause", "--flow", FLOW, "--topic", "orders", "--partition", "-1"], "partition -1 is negative"),
    (["pause", "--flow", FLOW, "--topic", "orders", "--reason", " "], "a reason is needed"),
    (["pause", "--flow", FLOW, "--topic", "orders", "--by", " "], "who does it is unknown"),
    (["resume", "--flow", FLOW, "--topic", "orders"], "is not paused by an operator"),
    (["limit", "--flow", FLOW, "--bytes-per-second", "0"], "bytes per second must be > 0, got 0"),
    (["limit", "--flow", FLOW, "--bytes-per-second", "-1"], "bytes per second must be > 0"),
    (["limit", "--flow", FLOW, "--topic", "orders.*", "--bytes-per-second", "5"], "not a pattern"),
    (["unlimit", "--flow", FLOW], "has no bandwidth limit"),
]


@pytest.mark.parametrize(("argv", "says"), BAD, ids=[s for _, s in BAD])
def test_bad_input_is_one_line_exit_2_and_nothing_written(env: tuple[str, str], capsys: pytest.CaptureFixture[str],
                                                          argv: list[str], says: str) -> None:
    config, db = env
    if "--reason" not in argv:
        argv = [*argv, "--reason", "why"]
    assert main(["control", *argv, "--state-db", db, "--config", config]) == 2
    line = one_line_error(capsys)
    assert says in line, line
    assert store(db).topic_control_history() == [] and store(db).partition_actions() == []


def test_without_a_config_the_store_checks_the_shapes(env: tuple[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    _, db = env
    for argv, says in ((["pause", "--flow", "dc1", "--topic", "orders"], "'dc1' is not a flow"),
                       (["pause", "--flow", FLOW, "--topic", "a b"], "is not a topic name"),
                       (["limit", "--flow", FLOW, "--bytes-per-second", "0"], "must be > 0")):
        assert main(["control", *argv, "--reason", "why", "--state-db", db]) == 2
        assert says in one_line_error(capsys)
    assert store(db).topic_control_history() == []


def test_a_second_pause_of_the_same_scope_names_the_first(env: tuple[str, str],
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    _, db = env
    first = store(db).pause_topic(FLOW, "orders", "bob", "backfill", partition=3)
    assert main(["control", "pause", "--flow", FLOW, "--topic", "orders", "--partition", "3", "--reason", "x",
                 "--state-db", db]) == 2
    line = one_line_error(capsys)
    assert f"is paused since {first.set_at:%Y-%m-%d %H:%M:%S} UTC by bob (backfill)" in line
    assert line.endswith("nothing was recorded")
    assert store(db).topic_control_history() == [first]


def test_empty_list_and_history(env: tuple[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    _, db = env
    assert main(["control", "list", "--state-db", db]) == 0
    assert capsys.readouterr().out.strip() == "no active runtime controls"
    assert main(["control", "history", "--state-db", db, "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []


def test_a_topic_switched_by_a_failover_is_resumed_by_its_failback_only(env: tuple[str, str],
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    from mirror_core.workflows.scope import pause_switched

    _, db = env
    s = store(db)
    pause_switched(s, FLOW, ["orders"], "dc2", "dana", "manual__1", "planned failover of orders dc1 -> dc2")
    before = s.topic_control_history()
    assert main(["control", "resume", "--flow", FLOW, "--topic", "orders", "--reason", "x", "--state-db", db]) == 2
    line = one_line_error(capsys)
    assert "is switched to dc2 by failover run manual__1" in line and "the failback DAG with topics [orders]" in line
    assert s.topic_control_history() == before and before[0].active
