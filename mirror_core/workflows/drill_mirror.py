"""The DR drill's own mirror process (a real ``mirror-core run`` on the generated drill config), and
waiting for it: until its progress on the standby covers what was produced, or any condition."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from mirror_core.clients import make_consumer
from mirror_core.config.model import MirrorConfig
from mirror_core.kafka_io import QUIET
from mirror_core.stores.progress import ProgressStore
from mirror_core.workflows.control import WorkflowError
from mirror_core.workflows.drill_config import DrillNames


class DrillMirror:
    """A real ``mirror-core run`` on the generated drill config, killed to simulate the disaster."""

    def __init__(self, config_file: Path, log_path: Path) -> None:
        self.config_file, self.log_path = config_file, log_path
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> DrillMirror:
        env = {k: v for k, v in os.environ.items() if k != "MIRROR_CORE_DB_URL"}  # never the control plane
        with open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "mirror_core", "run", "--config",
                                          str(self.config_file)], stdout=out, stderr=subprocess.STDOUT,
                                         env={**env, "PYTHONUNBUFFERED": "1"}, cwd=self.config_file.parent)
        return self

    def ensure_running(self) -> subprocess.Popen[bytes]:
        if self.proc is None:
            raise WorkflowError("drill mirror not started")
        if self.proc.poll() is not None:
            raise WorkflowError(f"drill mirror exited with {self.proc.returncode}: {self.log_tail()}")
        return self.proc

    def freeze(self) -> None:
        self.ensure_running().send_signal(signal.SIGSTOP)

    def kill(self) -> None:
        proc = self.ensure_running()
        proc.kill()
        proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    def log_tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def wait_until(predicate: Any, timeout: float, what: str, interval: float = 0.25) -> float:
    """Poll ``predicate`` until it holds; returns the seconds it took (WorkflowError after ``timeout``)."""
    start = time.monotonic()
    while not predicate():
        if time.monotonic() - start > timeout:
            raise WorkflowError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)
    return time.monotonic() - start


def wait_replicated(drill_config: MirrorConfig, names: DrillNames, mirror: DrillMirror, ends: dict[int, int],
                    timeout: float) -> float:
    """Wait until the drill mirror's progress on the standby covers ``ends`` (every record acknowledged)."""
    flow = drill_config.flow(names.flow)
    store = ProgressStore(flow.progress_topic, make_consumer(drill_config.cluster(flow.target),
                                                             f"{names.canary_group}.progress", QUIET), "drill")

    def covered() -> bool:
        mirror.ensure_running()
        try:
            progress = store.refresh(5)
        except Exception:  # the progress topic may not exist yet
            return False
        return all(progress.get((names.topic, p), 0) >= end for p, end in ends.items())

    try:
        return wait_until(covered, timeout, f"the drill mirror to replicate {sum(ends.values())} records")
    finally:
        store.close()
