"""A Spark standalone cluster on loopback, started from the installed PySpark distribution's own launch
classes: ``bin/spark-class org.apache.spark.deploy.master.Master`` and two
``org.apache.spark.deploy.worker.Worker`` (1 core, modest memory each), as separate JVMs.

The master's and workers' web UIs serve ``/json/``: the harness reads from them which workers are alive
and which executors a worker runs (what the system test asserts before it kills one).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mirror_core.devcluster.local_cluster import free_port

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


def _json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.load(r)


@dataclass
class SparkWorker:
    index: int
    ui_port: int
    work_dir: Path
    proc: subprocess.Popen[bytes] | None = None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def executors(self) -> list[dict[str, Any]]:
        """The executors this worker runs now (its UI's JSON)."""
        return list(_json(f"http://127.0.0.1:{self.ui_port}/json/").get("executors", []))

    def tasks_started(self) -> int:
        """Tasks this worker's executors have started, from their logs (``<work>/<app>/<id>/stderr``): an
        executor in the UI may still be starting, this says it works for the job."""
        return sum(f.read_text(errors="replace").count("Running task") for f in self.work_dir.glob("*/*/stderr"))


@dataclass
class SparkStandalone:
    root: Path
    workers_n: int = 2
    worker_memory: str = "1g"
    port: int = field(default_factory=free_port)
    ui_port: int = field(default_factory=free_port)
    master: subprocess.Popen[bytes] | None = None
    workers: list[SparkWorker] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def _launch(self, name: str, args: list[str]) -> subprocess.Popen[bytes]:
        env = {**os.environ, "SPARK_HOME": str(spark_home()), "SPARK_LOCAL_IP": "127.0.0.1",
               "SPARK_LOG_DIR": str(self.root), "SPARK_WORKER_DIR": str(self.root / "work")}
        log = open(self.root / f"{name}.log", "ab")  # noqa: SIM115 - the child keeps it
        # A session of its own: kill() takes the worker's executor JVMs with it, as a host failure does.
        return subprocess.Popen([str(spark_home() / "bin" / "spark-class"), *args], stdout=log,
                                stderr=subprocess.STDOUT, env=env, start_new_session=True)

    def start(self, timeout: float = 120) -> SparkStandalone:
        self.root.mkdir(parents=True, exist_ok=True)
        self.master = self._launch("master", [MASTER_CLASS, "--host", "127.0.0.1", "--port", str(self.port),
                                              "--webui-port", str(self.ui_port)])
        for i in range(self.workers_n):
            self.workers.append(SparkWorker(i, free_port(), self.root / f"work{i}"))
            self.start_worker(i)
        self.wait_workers(self.workers_n, timeout)
        return self

    def start_worker(self, i: int) -> None:
        w = self.workers[i]
        w.proc = self._launch(f"worker{i}", [WORKER_CLASS, "--host", "127.0.0.1", "--cores", "1", "--memory",
                                             self.worker_memory, "--webui-port", str(w.ui_port),
                                             "--work-dir", str(w.work_dir), self.url])

    def state(self) -> dict[str, Any]:
        """The master's view: workers (with their state) and applications."""
        return dict(_json(f"http://127.0.0.1:{self.ui_port}/json/"))

    def alive_workers(self) -> int:
        try:
            return sum(w["state"] == "ALIVE" for w in self.state()["workers"])
        except OSError:
            return 0

    def wait_workers(self, n: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while self.alive_workers() != n:
            assert self.master is not None and self.master.poll() is None, \
                f"the Spark master exited: see {self.root / 'master.log'}"
            assert time.monotonic() < deadline, \
                f"{n} Spark workers not ALIVE within {timeout:.0f}s: see the logs in {self.root}"
            time.sleep(0.5)

    def kill_worker(self, i: int) -> None:
        """SIGKILL worker ``i`` and its executors (its whole process group)."""
        w = self.workers[i]
        assert w.proc is not None
        os.killpg(w.proc.pid, signal.SIGKILL)
        w.proc.wait(30)

    def stop(self) -> None:
        for p in [w.proc for w in self.workers] + [self.master]:
            if p is not None and p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in [w.proc for w in self.workers] + [self.master]:
            if p is not None:
                try:
                    p.wait(20)
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait(10)
