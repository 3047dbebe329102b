"""`mirror-core partitions resume|skip|actions` on a temporary SQLite state store."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest

from mirror_core.cli import main
from mirror_core.cli.partitions import parse_offsets
from mirror_core.state.models import PartitionActionRecord
from mirror_core.state.store import StateStore

FLOW = "dc1->dc2"
cli_main_module = importlib.import_module("mirror_core.cli.main")  # the package's `main` is the function


@pytest.fixture()
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, str]:
    monkeypatch.delenv("MIRROR_CORE_DB_URL", raising=False)
    monkeypatch.setattr("mirror_core.cli.partitions.getpass.getuser", lambda: "alice")
    # main() as the command line runs it (its error handling too), without its process-wide logging set-up
    monkeypatch.setattr(cli_main_module, "_setup_logging", lambda level: None)
    config = tmp_path / "mm2.properties"
    config.write_text("clusters = dc1, dc2\ndc1.bootstrap.servers = a:9092\ndc2.bootstrap.servers = b:9092\n"
                      "dc1->dc2.enabled = true\n")
    return str(config), f"sqlite:///{tmp_path / 'state.db'}"


def recorded(db: str) -> list[PartitionActionRecord]:
    store = StateStore(db)
    store.migrate()
    return store.partition_actions()


def one_line_error(capsys: pytest.CaptureFixture[str]) -> str:
    out, err = capsys.readouterr()
    assert out == ""
    [line] = err.strip().splitlines()
    assert line.startswith("mirror-core: ") and "Traceback" not in err
    return line


def test_parse_offsets() -> None:
    assert parse_offsets("3061-3263") == (3061, 3263)
    assert parse_offsets(" 7 ") == (7, 7)
    assert parse_offsets("10-9") == (10, 9)  # the store refuses it, naming the range
    for bad in ("", "3x", "-5", "1-", "1-2-3", "1..2", "offsets 1-2", "1,2"):
        assert parse_offsets(bad) is None, bad


def test_skip_resume_and_the_history(env: tuple[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    config, db = env
    assert main(["partitions", "skip", "--flow", FLOW, "--topic", "orders", "--partition", "0", "--offsets",
                 "3061-3263", "--reason", "CRC mismatch at 3061", "--state-db", db]) == 0
    [line] = capsys.readouterr().out.strip().splitlines()
    assert line.startswith("requested: skip dc1->dc2 orders[0] offsets 3061-3263 (id 1, by alice, in sqlite:///")
    assert "`mirror-core partitions actions` shows the outcome" in line
    assert "no mirror instance has reported flow dc1->dc2 running" in line  # none runs on this store
    StateStore(db).report_flow_states("mirror-0", {FLOW: "running"})
    assert main(["partitions", "skip", "--flow", FLOW, "--topic", "orders", "--partition", "1", "--offsets", "42",
                 "--reason", "refused by the target", "--by", "bob", "--state-db", db, "--config", config]) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith("requested: skip dc1->dc2 orders[1] offsets 42 (id 2, by bob")
    assert "a mirror running with --state-db applies it within seconds" in line
    assert main(["partitions", "resume", "--flow", FLOW, "--topic", "payments", "--partition", "3", "--reason",
                 "leader moved to broker 2", "--state-db", db]) == 0
    assert capsys.readouterr().out.startswith("requested: resume dc1->dc2 payments[3] (id 3, by alice")

    rows = recorded(db)
    assert [(r.id, r.topic, r.partition, r.action, r.first_offset, r.last_offset, r.requested_by, r.reason)
            for r in rows] == [
        (3, "payments", 3, "resume", None, None, "alice", "leader moved to broker 2"),
        (2, "orders", 1, "skip", 42, 42, "bob", "refused by the target"),
        (1, "orders", 0, "skip", 3061, 3263, "alice", "CRC mismatch at 3061")]
    store = StateStore(db)
    assert store.complete_partition_action(1, "mirror-0", "skipped 203 records", True)
    assert store.complete_partition_action(3, "mirror-0", "fetch failed again", False)

    assert main(["partitions", "actions", "--state-db", db]) == 0
    table = capsys.readouterr().out
    for text in ("3061-3263", "orders[0]", "payments[3]", "CRC mismatch at 3061", "by mirror-0",
                 "skipped 203 records", "fetch failed again", "pending", "bob"):
        assert text in table, text
    assert main(["partitions", "actions", "--flow", FLOW, "--limit", "1", "--json", "--state-db", db]) == 0
    [newest] = json.loads(capsys.readouterr().out)
    assert (newest["id"], newest["ok"], newest["applied_by"], newest["outcome"]) == (
        3, False, "mirror-0", "fetch failed again")
    assert main(["partitions", "actions", "--flow", "dc2->dc1", "--state-db", db]) == 0
    assert capsys.readouterr().out.strip() == "no partition actions recorded"


@pytest.mark.parametrize("offsets", ["3x", "-5", "1-", "3061..3263", "10-9"])
def test_a_bad_offset_range_is_one_line_exit_2_and_nothing_written(
        env: tuple[str, str], capsys: pytest.CaptureFixture[str], offsets: str) -> None:
    _, db = env
    assert main(["partitions", "skip", "--flow", FLOW, "--topic", "orders", "--partition", "0",
                 f"--offsets={offsets}", "--reason", "CRC mismatch", "--state-db", db]) == 2
    line = one_line_error(capsys)
    assert line.startswith("mirror-core: partitions skip: ")
    assert "--offsets" in line or "the first is after the last" in line
    assert recorded(db) == []


@pytest.mark.parametrize("flow", ["dc1>dc2", "dc1-dc2", "dc1->", "->dc2", "dc1 -> dc2", "dc1->dc2->dc3"])
def test_a_malformed_flow_is_one_line_exit_2_and_nothing_written(
        env: tuple[str, str], capsys: pytest.CaptureFixture[str], flow: str) -> None:
    _, db = env
    for argv in (["resume"], ["skip", "--offsets", "1-2"]):
        assert main(["partitions", *argv, f"--flow={flow}", "--topic", "orders", "--partition", "0", "--reason",
                     "leader moved", "--state-db", db]) == 2
        line = one_line_error(capsys)
        assert f"--flow {flow!r} is not a flow" in line and "SOURCE->TARGET" in line
    assert main(["partitions", "actions", f"--flow={flow}", "--state-db", db]) == 2
    one_line_error(capsys)
    assert recorded(db) == []


def test_refusals_by_the_store_and_the_config(env: tuple[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    config, db = env
    assert main(["partitions", "resume", "--flow", FLOW, "--topic", "orders", "--partition", "0", "--reason", " ",
                 "--state-db", db]) == 2
    assert "a reason is needed" in one_line_error(capsys)
    assert main(["partitions", "resume", "--flow", FLOW, "--topic", "orders", "--partition", "-1", "--reason",
                 "x", "--state-db", db]) == 2
    assert "partition -1 is negative" in one_line_error(capsys)
    assert main(["partitions", "resume", "--flow", "dc9->dc2", "--topic", "orders", "--partition", "0",
                 "--reason", "x", "--state-db", db, "--config", config]) == 2
    assert "unknown flow 'dc9->dc2'" in one_line_error(capsys)
    assert main(["partitions", "resume", "--flow", FLOW, "--topic", "__consumer_offsets", "--partition", "0",
                 "--reason", "x", "--state-db", db, "--config", config]) == 2
    assert "is not replicated by flow dc1->dc2" in one_line_error(capsys)
    assert recorded(db) == []

    assert main(["partitions", "resume", "--flow", FLOW, "--topic", "orders", "--partition", "0", "--reason",
                 "leader moved", "--state-db", db]) == 0
    capsys.readouterr()
    assert main(["partitions", "skip", "--flow", FLOW, "--topic", "orders", "--partition", "0", "--offsets",
                 "5-9", "--reason", "damaged", "--by", "bob", "--state-db", db]) == 2
    line = one_line_error(capsys)
    assert "an action on dc1->dc2 orders[0] is pending since" in line and "requested by alice" in line
    assert [(r.action, r.requested_by) for r in recorded(db)] == [("resume", "alice")]


def test_without_a_user_name_by_is_needed(env: tuple[str, str], capsys: pytest.CaptureFixture[str],
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    _, db = env

    def no_user() -> str:
        raise OSError("No username set in the environment")

    monkeypatch.setattr("mirror_core.cli.partitions.getpass.getuser", no_user)
    assert main(["partitions", "resume", "--flow", FLOW, "--topic", "orders", "--partition", "0", "--reason",
                 "x", "--state-db", db]) == 2
    assert "pass --by NAME" in one_line_error(capsys)
    assert recorded(db) == []
