"""The command line's manners: --version, checked --log-level, no silent example config, one-line errors
(a traceback only with --debug), and `run` obeying MIRROR_CORE_DB_URL like the DAGs do."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from mirror_core import __version__

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "mm2.properties"


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in ("MIRROR_CORE_CONFIG", "MIRROR_CORE_DB_URL")}
    return subprocess.run([sys.executable, "-m", "mirror_core", *args], capture_output=True, text=True, cwd=REPO,
                          timeout=60, env={**base, **(env or {})})


def test_version_and_log_level() -> None:
    done = cli("--version")
    assert done.returncode == 0 and done.stdout.strip() == f"mirror-core {__version__}"
    bad = cli("--log-level", "FOO", "check", "--config", str(EXAMPLE))
    assert bad.returncode == 2 and "invalid choice: 'FOO'" in bad.stderr
    assert cli("--log-level", "debug", "check", "--config", str(EXAMPLE)).returncode == 0  # any case


def test_clusters_never_falls_back_to_the_example_config() -> None:
    done = cli("clusters", "active", "orders-app")
    assert done.returncode == 2
    [line] = done.stderr.strip().splitlines()
    assert "--config" in line and "MIRROR_CORE_CONFIG" in line


def test_a_state_store_error_is_one_line_and_the_traceback_is_opt_in(tmp_path: Path) -> None:
    url = "postgresql://nobody@127.0.0.1:9/nothing"  # nothing listens on port 9
    done = cli("clusters", "history", "--config", str(EXAMPLE), "--db-url", url)
    assert done.returncode == 1, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("mirror-core: clusters: ") and "--debug" in line and "Traceback" not in done.stderr
    debug = cli("--debug", "clusters", "history", "--config", str(EXAMPLE), "--db-url", url)
    assert debug.returncode == 1 and "Traceback" in debug.stderr


def test_run_obeys_the_state_store_named_by_mirror_core_db_url(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'state.db'}"
    base = {k: v for k, v in os.environ.items() if k != "MIRROR_CORE_CONFIG"}
    log = tmp_path / "run.log"
    # The log goes to a file: an undrained pipe fills with the (unreachable) clusters' warnings and
    # blocks the process. Killed at the end: its graceful stop against clusters that are down is not
    # what this test is about (and takes ~20 s).
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "mirror_core", "run", "--config", str(EXAMPLE)], cwd=REPO,
                                stdout=subprocess.DEVNULL, stderr=out, env={**base, "MIRROR_CORE_DB_URL": url})
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and "control plane" not in log.read_text(errors="replace"):
            time.sleep(0.2)
        assert f"control plane: obeying flow states in {url}" in log.read_text(errors="replace")
    finally:
        proc.kill()
        proc.wait(30)


def test_instance_id_is_checked_from_the_flag_and_the_environment() -> None:
    bad = cli("run", "--config", str(EXAMPLE), "--instance-id", "pod 0")
    assert bad.returncode == 2
    assert "'pod 0'" in bad.stderr and "instance id" in bad.stderr and "Traceback" not in bad.stderr
    env_bad = cli("run", "--config", str(EXAMPLE), env={"MIRROR_CORE_INSTANCE_ID": "a/b"})
    assert env_bad.returncode == 2 and "MIRROR_CORE_INSTANCE_ID" in env_bad.stderr and "'a/b'" in env_bad.stderr
