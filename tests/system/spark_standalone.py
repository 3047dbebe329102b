"""A Spark standalone cluster on loopback, started from the installed PySpark distribution's own launch
classes: ``bin/spark-class org.apache.spark.deploy.master.Master`` and two
``org.apache.spark.deploy.worker.Worker`` (1 core, modest memory each), as separate JVMs.

The master's and workers' web UIs serve ``/json/``: the harness reads from them which workers are alive
and which executors a worker runs (what the system test asserts before it kills one). Each UI's port is
read from its own log once bound: a JVM whose chosen port was taken meanwhile (by anything on the
machine) binds the next one, and a fixed guess would then read someone else's page.
"""

from __future__ import annotations

import json
import os
import re
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
        body = r.read()
    try:
        return json.loads(body)
    except ValueError:
        raise ValueError(f"{url} answered with something other than JSON: {body[:120]!r}") from None


def bound_port(log: Path, service: str, proc: subprocess.Popen[bytes], timeout: float) -> int:
    """The port ``service`` (``MasterUI``, ``WorkerUI``) really bound, from the JVM's log: Spark moves to
    the next port when the requested one is taken."""
    pattern = re.compile(rf"Successfully started service '{service}' on port (\d+)")
    deadline = time.monotonic() + timeout
    while True:
        found = pattern.search(log.read_text(errors="replace")) if log.exists() else None
        if found:
            return int(found.group(1))
        assert proc.poll() is None, f"{service} exited before binding its port: see {log}"
        assert time.monotonic() < deadline, f"{service} did not bind a port within {timeout:.0f}s: see {log}"
        time.sleep(0.2)


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
        self.ui_port = bound_port(self.root / "master.log", "MasterUI", self.master, timeout)
        for i in range(self.workers_n):
            self.workers.append(SparkWorker(i, free_port(), self.root / f"work{i}"))
            self.start_worker(i)
        self.wait_workers(self.workers_n, timeout)
        return self

    def start_worker(self, i: int, timeout: float = 120) -> None:
        w = self.workers[i]
        log = self.root / f"worker{i}.log"
        log.unlink(missing_ok=True)  # a restarted worker's bound port is read afresh
        w.proc = self._launch(f"worker{i}", [WORKER_CLASS, "--host", "127.0.0.1", "--cores", "1", "--memory",
                                             self.worker_memory, "--webui-port", str(w.ui_port),
                                             "--work-dir", str(w.work_dir), self.url])
        w.ui_port = bound_port(log, "WorkerUI", w.proc, timeout)

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
        while True:
            try:
                alive, seen = self.alive_workers(), ""
            except ValueError as e:  # a page that is not the master's JSON: say which, if it lasts
                alive, seen = -1, f" (last answer: {e})"
            if alive == n:
                return
            assert self.master is not None and self.master.poll() is None, \
                f"the Spark master exited: see {self.root / 'master.log'}"
            assert time.monotonic() < deadline, \
                f"{n} Spark workers not ALIVE within {timeout:.0f}s{seen}: see the logs in {self.root}"
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
