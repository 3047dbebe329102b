"""Test harness: a real schema registry, Apicurio Registry 2.0.2.Final (built from Maven Central by
scripts/ensure-schema-registry.sh), on loopback with in-memory storage. Its Confluent-compatible API is at
:attr:`RegistryServer.url` (``/apis/ccompat/v6``)."""

from __future__ import annotations

import subprocess
import time
import urllib.request
from pathlib import Path

from mirror_core.devcluster.local_cluster import free_port

REPO = Path(__file__).resolve().parents[1]


def registry_jar() -> str:
    """The runnable registry, built into the mirror-core cache the first time (about a minute)."""
    out = subprocess.run(["bash", str(REPO / "scripts" / "ensure-schema-registry.sh")], capture_output=True,
                         text=True, timeout=900)
    assert out.returncode == 0, f"ensure-schema-registry.sh failed: {out.stderr.strip()}"
    return out.stdout.strip().splitlines()[-1]


class RegistryServer:
    def __init__(self, workdir: Path, jar: str) -> None:
        self.port = free_port()
        self.workdir = workdir
        self.jar = jar
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/apis/ccompat/v6"

    def start(self) -> RegistryServer:
        log = open(self.workdir / "registry.log", "wb")  # noqa: SIM115 - owned by the child
        self.proc = subprocess.Popen(["java", "-Xmx256m", f"-Dquarkus.http.port={self.port}",
                                      "-Dquarkus.http.host=127.0.0.1", "-jar", self.jar],
                                     stdout=log, stderr=subprocess.STDOUT, cwd=self.workdir)
        log.close()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"the registry exited; see {self.workdir / 'registry.log'}"
            try:
                with urllib.request.urlopen(f"{self.url}/subjects", timeout=2) as r:
                    if r.status == 200:
                        return self
            except OSError:
                time.sleep(0.3)
        raise AssertionError(f"the registry did not answer; see {self.workdir / 'registry.log'}")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
