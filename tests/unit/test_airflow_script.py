"""scripts/airflow.sh (`make airflow`) up to the point where it hands over to `airflow standalone`,
with a stand-in for the airflow command (MIRROR_CORE_AIRFLOW_BIN)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PASSWORDS = "simple_auth_manager_passwords.json.generated"


def start(tmp_path: Path, config: Path | None = None) -> subprocess.CompletedProcess[str]:
    stand_in = tmp_path / "airflow"
    stand_in.write_text('#!/bin/sh\necho "STARTED $* $AIRFLOW_CONN_KAFKA_DC1" > "$AIRFLOW_HOME/started"\n')
    stand_in.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "MIRROR_CORE"))}
    env.update(AIRFLOW_HOME=str(tmp_path / "home"), MIRROR_CORE_DB_URL=f"sqlite:///{tmp_path / 'state.db'}",
               MIRROR_CORE_AIRFLOW_BIN=str(stand_in))
    if config is not None:
        env["MIRROR_CORE_CONFIG"] = str(config)
    return subprocess.run(["bash", str(REPO / "scripts" / "airflow.sh")], env=env, capture_output=True, text=True,
                          timeout=120)


def test_prints_the_login_on_every_start(tmp_path: Path) -> None:
    first = start(tmp_path)
    assert first.returncode == 0, first.stderr
    home = tmp_path / "home"
    assert f"mirror_core: login admin; first start: 'airflow standalone' generates the password, prints it " \
           f"below and keeps it in {home / PASSWORDS}" in first.stdout
    started = (home / "started").read_text()
    assert started == "STARTED standalone \n"  # no Kafka connection derived from the config (no secret copied)

    (home / PASSWORDS).write_text(json.dumps({"admin": "s3cret-Pw"}))  # what the first start generated
    again = start(tmp_path)
    assert again.returncode == 0, again.stderr
    assert "mirror_core: login admin / s3cret-Pw\n" in again.stdout
    assert str(home / PASSWORDS) in again.stdout


def test_a_broken_config_fails_loudly_and_starts_nothing(tmp_path: Path) -> None:
    broken = tmp_path / "mm2.properties"
    broken.write_text("clusters = dc1, dc2\ndc1.bootstrap.servers = a:1\n")  # dc2 has no bootstrap servers
    result = start(tmp_path, broken)
    assert result.returncode != 0
    assert f"mirror_core: the mirror config {broken} is invalid: " in result.stderr
    assert "cluster 'dc2' has no bootstrap servers" in result.stderr
    assert "Airflow not started" in result.stderr
    assert not (tmp_path / "home" / "started").exists()

    missing = start(tmp_path, tmp_path / "nowhere.properties")
    assert missing.returncode != 0 and "configuration file not found" in missing.stderr
    assert not (tmp_path / "home" / "started").exists()
