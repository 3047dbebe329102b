"""Toxiproxy on loopback: the "WAN" between two local clusters (tests, ``make bench``, ``dev up --wan``).

A :class:`ToxiproxyServer` runs ``toxiproxy-server`` (built by ``scripts/ensure-toxiproxy.sh`` into the
mirror-core cache); :class:`Toxiproxy` talks to its HTTP API with urllib only. A proxy forwards one
listen port to one upstream; toxics shape the traffic on it (latency with jitter, bandwidth, slow close,
connection resets, timeouts, slicer) and disabling the proxy is a full partition (connections are cut
and new ones refused).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

#: Keep in step with the default of scripts/ensure-toxiproxy.sh.
TOXIPROXY_VERSION = "v2.12.0"

Stream = Literal["upstream", "downstream"]


class ToxiproxyError(RuntimeError):
    """Toxiproxy is missing, did not start, or refused a request (the message says which)."""


def toxiproxy_binary() -> Path:
    """``$MIRROR_CORE_TOXIPROXY``, else the pinned build in the mirror-core cache, else ``toxiproxy-server``
    on the PATH."""
    env = os.environ.get("MIRROR_CORE_TOXIPROXY")
    if env:
        return Path(env)
    cache = Path(os.environ.get("MIRROR_CORE_CACHE", Path.home() / ".cache" / "mirror-core"))
    cached = cache / "bin" / f"toxiproxy-server-{TOXIPROXY_VERSION}"
    if cached.is_file():
        return cached
    found = shutil.which("toxiproxy-server")
    if found:
        return Path(found)
    raise ToxiproxyError(f"toxiproxy-server not found (looked for {cached}); run scripts/ensure-toxiproxy.sh "
                         "(needs Go) or set MIRROR_CORE_TOXIPROXY")


@dataclass(frozen=True)
class Toxic:
    """One toxic on a proxy. ``stream`` is the direction it affects: ``downstream`` is broker -> client."""

    name: str
    type: str
    attributes: dict[str, int] = field(default_factory=dict)
    stream: Stream = "downstream"
    toxicity: float = 1.0

    def body(self) -> dict[str, Any]:
        return {"name": self.name, "type": self.type, "stream": self.stream, "toxicity": self.toxicity,
                "attributes": self.attributes}

    # The toxic types toxiproxy knows; each helper names its toxic after its type and direction.
    @classmethod
    def latency(cls, ms: int, jitter_ms: int = 0, stream: Stream = "downstream") -> Toxic:
        return cls(f"latency_{stream}", "latency", {"latency": ms, "jitter": jitter_ms}, stream)

    @classmethod
    def bandwidth(cls, kb_per_s: int, stream: Stream = "downstream") -> Toxic:
        return cls(f"bandwidth_{stream}", "bandwidth", {"rate": kb_per_s}, stream)

    @classmethod
    def slow_close(cls, delay_ms: int, stream: Stream = "downstream") -> Toxic:
        return cls(f"slow_close_{stream}", "slow_close", {"delay": delay_ms}, stream)

    @classmethod
    def reset_peer(cls, timeout_ms: int = 0, stream: Stream = "downstream", toxicity: float = 1.0) -> Toxic:
        return cls(f"reset_peer_{stream}", "reset_peer", {"timeout": timeout_ms}, stream, toxicity)

    @classmethod
    def timeout(cls, timeout_ms: int = 0, stream: Stream = "downstream") -> Toxic:
        """Data stops flowing; the connection closes after ``timeout_ms`` (0: never)."""
        return cls(f"timeout_{stream}", "timeout", {"timeout": timeout_ms}, stream)

    @classmethod
    def slicer(cls, average_size: int, size_variation: int = 0, delay_us: int = 0,
               stream: Stream = "downstream") -> Toxic:
        return cls(f"slicer_{stream}", "slicer",
                   {"average_size": average_size, "size_variation": size_variation, "delay": delay_us}, stream)


@dataclass(frozen=True)
class Toxiproxy:
    """Client of one toxiproxy-server's API (``http://127.0.0.1:<api_port>``)."""

    api_port: int

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{self.api_port}{path}", data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                raw = r.read()
        except urllib.error.HTTPError as exc:
            raise ToxiproxyError(f"toxiproxy {method} {path}: HTTP {exc.code} {exc.read().decode(errors='replace')}"
                                 ) from None
        return json.loads(raw) if raw.strip() else None

    def alive(self) -> bool:
        try:
            self._call("GET", "/version")
        except (OSError, ToxiproxyError):
            return False
        return True

    def proxies(self) -> dict[str, Any]:
        result: dict[str, Any] = self._call("GET", "/proxies")
        return result

    def create_proxy(self, name: str, listen_port: int, upstream: str) -> None:
        """Create (or replace) proxy ``name``: 127.0.0.1:``listen_port`` -> ``upstream`` (host:port)."""
        if name in self.proxies():
            self._call("DELETE", f"/proxies/{name}")
        self._call("POST", "/proxies", {"name": name, "listen": f"127.0.0.1:{listen_port}",
                                        "upstream": upstream, "enabled": True})

    def delete_proxy(self, name: str) -> None:
        self._call("DELETE", f"/proxies/{name}")

    def set_enabled(self, name: str, enabled: bool) -> None:
        """Disabled: every connection through the proxy is closed and new ones refused (a full partition)."""
        self._call("POST", f"/proxies/{name}", {"enabled": enabled})

    def toxics(self, name: str) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self._call("GET", f"/proxies/{name}/toxics")
        return result

    def add_toxic(self, proxy: str, toxic: Toxic) -> None:
        self._call("POST", f"/proxies/{proxy}/toxics", toxic.body())

    def update_toxic(self, proxy: str, toxic: Toxic) -> None:
        self._call("POST", f"/proxies/{proxy}/toxics/{toxic.name}", toxic.body())

    def set_toxic(self, proxy: str, toxic: Toxic) -> None:
        """Add the toxic, or update it when one of that name is there."""
        present = {t["name"] for t in self.toxics(proxy)}
        (self.update_toxic if toxic.name in present else self.add_toxic)(proxy, toxic)

    def remove_toxic(self, proxy: str, toxic_name: str) -> None:
        self._call("DELETE", f"/proxies/{proxy}/toxics/{toxic_name}")

    def clear(self, proxy: str) -> None:
        """Remove every toxic and enable the proxy: a clean link."""
        for t in self.toxics(proxy):
            self.remove_toxic(proxy, t["name"])
        self.set_enabled(proxy, True)

    def bytes_sent(self, proxy: str) -> dict[str, float]:
        """Bytes that crossed ``proxy`` per direction (``upstream``: client -> broker), from the server's
        Prometheus metrics (the server runs with ``-proxy-metrics``)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.api_port}/metrics", timeout=10) as r:
            text = r.read().decode()
        out = {"upstream": 0.0, "downstream": 0.0}
        for line in text.splitlines():
            if line.startswith("toxiproxy_proxy_sent_bytes_total{") and f'proxy="{proxy}"' in line:
                direction = line.split('direction="', 1)[1].split('"', 1)[0]
                out[direction] = out.get(direction, 0.0) + float(line.rsplit(" ", 1)[1])
        return out


@dataclass
class ToxiproxyServer:
    """A toxiproxy-server process on 127.0.0.1:``api_port``; its PID lives in ``base_dir/pid`` so
    ``mirror-core dev down`` can stop a server ``dev up`` started."""

    base_dir: Path
    api_port: int

    @property
    def client(self) -> Toxiproxy:
        return Toxiproxy(self.api_port)

    @property
    def pid_file(self) -> Path:
        return self.base_dir / "pid"

    def pid(self) -> int | None:
        try:
            pid = int(self.pid_file.read_text().strip())
            args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except (OSError, ValueError):
            return None
        # Only our server (its API port on its command line) is ever signalled, not a reused PID.
        return pid if any(b"toxiproxy" in a for a in args) and str(self.api_port).encode() in args else None

    def start(self, timeout: float = 15.0) -> Toxiproxy:
        client = self.client
        if self.pid() is not None and client.alive():
            return client
        self.base_dir.mkdir(parents=True, exist_ok=True)
        log = open(self.base_dir / "toxiproxy.log", "ab")  # noqa: SIM115 - handed to the child
        proc = subprocess.Popen([str(toxiproxy_binary()), "-host", "127.0.0.1", "-port", str(self.api_port),
                                 "-proxy-metrics"], stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        log.close()
        self.pid_file.write_text(str(proc.pid))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise ToxiproxyError(f"toxiproxy-server exited with {proc.returncode}; see "
                                     f"{self.base_dir / 'toxiproxy.log'}")
            if client.alive():
                return client
            time.sleep(0.1)
        raise ToxiproxyError(f"toxiproxy-server not ready after {timeout:.0f}s; see {self.base_dir / 'toxiproxy.log'}")

    def stop(self) -> bool:
        """False when it was not running."""
        pid = self.pid()
        self.pid_file.unlink(missing_ok=True)
        if pid is None:
            return False
        os.kill(pid, signal.SIGTERM)
        for _ in range(50):
            with contextlib.suppress(ChildProcessError):  # reap it when it is our child
                os.waitpid(pid, os.WNOHANG)
            if not Path(f"/proc/{pid}").exists() or "Z" in _state(pid):
                return True
            time.sleep(0.1)
        os.kill(pid, signal.SIGKILL)
        return True


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except (OSError, IndexError):
        return "Z"
