"""`mirror-core clusters active|history`: what applications read from the registry; every command that reads the
state store takes --state-db with one default."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mirror_core.cli import build_parser
from mirror_core.state.store import StateStore


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args))


@pytest.fixture()
def env(tmp_path: Path) -> tuple[str, str]:
    config = tmp_path / "mm2.properties"
    config.write_text("clusters = dc1, dc2\ndc1.bootstrap.servers = a:9092\ndc2.bootstrap.servers = b:9092\n"
                      "dc1->dc2.enabled = true\n")
    return str(config), f"sqlite:///{tmp_path / 'state.db'}"


def test_active_prints_the_registered_clusters_bootstrap(env, capsys) -> None:  # type: ignore[no-untyped-def]
    config, db = env
    assert main(["clusters", "active", "orders", "--config", config, "--db-url", db]) == 1
    assert "not in the registry" in capsys.readouterr().err
    assert main(["clusters", "active", "orders", "--config", config, "--db-url", db, "--default", "dc1"]) == 0
    assert capsys.readouterr().out.strip() == "a:9092"
    StateStore(db).set_active_cluster("orders", "dc2", "alice", "failover drill", "run-7")
    assert main(["clusters", "active", "orders", "--config", config, "--db-url", db, "--default", "dc1"]) == 0
    assert capsys.readouterr().out.strip() == "b:9092"
    assert main(["clusters", "active", "orders", "--config", config, "--state-db", db, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["cluster"], data["changed_by"], data["run_id"]) == ("dc2", "alice", "run-7")
    assert main(["clusters", "history", "orders", "--config", config, "--db-url", db, "--json"]) == 0
    assert [(h["from"], h["to"], h["by"]) for h in json.loads(capsys.readouterr().out)] == [(None, "dc2", "alice")]


@pytest.mark.parametrize("command", [
    ["status", "--config", "c"], ["clusters", "active", "app"], ["clusters", "history"],
    ["topics", "sync", "--config", "c"], ["control", "list"], ["control", "history"], ["partitions", "actions"],
    ["control", "pause", "--flow", "a->b", "--topic", "t", "--reason", "r"],
    ["partitions", "resume", "--flow", "a->b", "--topic", "t", "--partition", "0", "--reason", "r"]])
def test_every_command_that_reads_the_state_store_takes_state_db_with_one_default(
        command: list[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from mirror_core.cli.common import default_state_db

    assert build_parser().parse_args([*command, "--state-db", "sqlite:///x.db"]).state_db == "sqlite:///x.db"
    # Not given: None, resolved by the command to MIRROR_CORE_DB_URL, else the working directory's SQLite store
    # (the one StateStore opens when given none, and the one `make demo` hands its mirror).
    assert build_parser().parse_args(command).state_db is None
    monkeypatch.delenv("MIRROR_CORE_DB_URL", raising=False)
    monkeypatch.chdir(tmp_path)
    assert default_state_db() == f"sqlite:///{tmp_path / '.state' / 'mirror-core.db'}"
    monkeypatch.setenv("MIRROR_CORE_DB_URL", "postgresql://db/mirror")
    assert default_state_db() == "postgresql://db/mirror"
