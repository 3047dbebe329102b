"""Test harness: a real Prometheus server (Debian's, installed by scripts/ensure-test-servers.sh) on loopback,
scraping given /metrics endpoints every second and evaluating the shipped rule files every second."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mirror_core.devcluster.local_cluster import free_port

REPO = Path(__file__).resolve().parents[1]
RULES = (REPO / "deploy" / "prometheus" / "alerts.yml", REPO / "deploy" / "prometheus" / "mm2-compat.yml")


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("promtool")
    assert exe, "promtool is missing: run scripts/ensure-test-servers.sh (make install does)"
    return subprocess.run([exe, *args], capture_output=True, text=True, timeout=60)


class PrometheusServer:
    def __init__(self, workdir: Path, targets: Sequence[str]) -> None:
        self.port = free_port()
        self.workdir = workdir
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(r) for r in RULES],
            "scrape_configs": [{"job_name": "mirror-core", "static_configs": [{"targets": list(targets)}]}],
        }
        self.config = workdir / "prometheus.yml"
        self.config.write_text(json.dumps(config))  # JSON is YAML
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> PrometheusServer:
        exe = shutil.which("prometheus")
        assert exe, "prometheus is missing: run scripts/ensure-test-servers.sh (make install does)"
        log = open(self.workdir / "prometheus.log", "wb")  # noqa: SIM115 - owned by the child
        self.proc = subprocess.Popen([exe, f"--config.file={self.config}",
                                      f"--storage.tsdb.path={self.workdir / 'tsdb'}",
                                      f"--web.listen-address=127.0.0.1:{self.port}"],
                                     stdout=log, stderr=subprocess.STDOUT)
        log.close()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=2) as r:
                    if r.status == 200:
                        return self
            except OSError:
                time.sleep(0.2)
        raise AssertionError(f"prometheus did not become ready; see {self.workdir / 'prometheus.log'}")

    def query(self, expr: str) -> list[dict[str, Any]]:
        url = f"http://127.0.0.1:{self.port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        with urllib.request.urlopen(url, timeout=10) as r:
            body = json.load(r)
        assert body["status"] == "success", body
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def rule_health(self) -> list[tuple[str, str, str]]:
        """(rule name, health, last error) of every loaded rule."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/api/v1/rules", timeout=10) as r:
            groups = json.load(r)["data"]["groups"]
        return [(rule["name"], rule["health"], rule.get("lastError", "")) for g in groups for rule in g["rules"]]

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
