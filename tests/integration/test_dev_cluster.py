"""`mirror-core dev down` and LocalCluster signal only the broker they started, never a process that
reused the number of a stale PID file (a broker killed without its PID file being removed)."""

from __future__ import annotations

import os
import random
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from mirror_core.devcluster.local_cluster import LocalCluster, free_port
from tests.kafka_harness import REPO


@pytest.fixture
def bystander() -> Iterator[subprocess.Popen[bytes]]:
    """Some other process of the same user, alive: what a reused PID points at."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    yield proc
    proc.kill()
    proc.wait()


def cluster(base: Path) -> LocalCluster:
    base.mkdir(parents=True, exist_ok=True)
    return LocalCluster(name="dc1", base_dir=base, port=free_port(), controller_port=free_port())


def test_a_stale_pid_file_is_never_signalled(tmp_path: Path, bystander: subprocess.Popen[bytes]) -> None:
    c = cluster(tmp_path / "dc1")
    c.pid_file.write_text(str(bystander.pid))
    assert c.pid() is None and not c.is_running()
    assert c.stop() is False  # nothing signalled; the stale file is removed
    c.pid_file.write_text(str(bystander.pid))
    c.kill()
    assert bystander.poll() is None and not c.pid_file.exists()


def test_dev_down_leaves_a_process_that_reused_the_pid_alone(tmp_path: Path,
                                                            bystander: subprocess.Popen[bytes]) -> None:
    c = cluster(tmp_path / "dc1")
    c.pid_file.write_text(str(bystander.pid))
    proc = subprocess.run([sys.executable, "-m", "mirror_core", "dev", "down", "--clusters", "dc1"],
                          capture_output=True, text=True, cwd=REPO, timeout=60,
                          env={**os.environ, "MIRROR_CORE_DEV_HOME": str(tmp_path)})
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "dc1: was not running\n", "")
    assert bystander.poll() is None and not c.pid_file.exists()


def test_the_broker_it_started_is_still_stopped(tmp_path: Path) -> None:
    """The check recognises this cluster's broker by its command line (a stand-in process with the
    broker's arguments here: no JVM needed to test which process gets the signal)."""
    c = cluster(tmp_path / "dc1")
    other = cluster(tmp_path / "dc2")  # another cluster's broker: same main class, other config
    argv = [sys.executable, "-c", "import time; time.sleep(120)", "kafka.Kafka"]
    mine = subprocess.Popen([*argv, str(c.base_dir / "server.properties")])
    theirs = subprocess.Popen([*argv, str(other.base_dir / "server.properties")])
    try:
        c.pid_file.write_text(str(theirs.pid))
        assert c.pid() is None  # another cluster's broker is not this one's
        c.pid_file.write_text(str(mine.pid))
        assert c.pid() == mine.pid and c.stop(timeout=10) is True
        assert not Path(f"/proc/{mine.pid}").exists()  # stopped (and reaped by stop())
        assert theirs.poll() is None
    finally:
        for p in (mine, theirs):
            p.kill()
            p.wait()


def test_dev_up_that_cannot_start_a_cluster_leaves_nothing_running(tmp_path: Path) -> None:
    """dc2's port is taken: `dev up` says so in one line, exits 1 and stops dc1, which it had started."""
    offset = random.randrange(100, 3600, 10)  # below the ephemeral range, as in test_demo
    taken = socket.socket()
    taken.bind(("127.0.0.1", 29092 + offset))
    taken.listen()
    try:
        proc = subprocess.run([sys.executable, "-m", "mirror_core", "dev", "up"], capture_output=True, text=True,
                              cwd=REPO, timeout=180, env={**os.environ, "MIRROR_CORE_DEV_HOME": str(tmp_path),
                                                          "MIRROR_CORE_DEV_PORT_OFFSET": str(offset)})
    finally:
        taken.close()
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stdout.startswith("dc1: bootstrap")  # the precondition: dc1 was started by this command
    assert proc.stderr == (f"mirror-core: dev up: cluster dc2: port {29092 + offset} is already in use; "
                           "stopped again: dc1\n")
    dc1 = LocalCluster.load(tmp_path / "dc1")
    assert dc1.pid() is None and not dc1.is_running()
