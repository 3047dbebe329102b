"""The long-running service: one replicator thread per enabled flow, metrics and health over HTTP,
graceful shutdown on SIGTERM/SIGINT (stop fetching, flush, commit progress, exit 0)."""

from __future__ import annotations

import json
import logging
import signal
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import FrameType
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from mirror_core.config.model import MirrorConfig
from mirror_core.metrics import Metrics
from mirror_core.offsets.checkpoints import CheckpointEmitter
from mirror_core.replication.replicator import FlowReplicator, instance_id

log = logging.getLogger(__name__)


class Service:
    def __init__(self, config: MirrorConfig, metrics_port: int | None = None,
                 metrics_host: str = "127.0.0.1") -> None:
        self.config = config
        self.metrics = Metrics()
        self.stop_event = threading.Event()
        self.instance = instance_id()
        self.replicators = [FlowReplicator(config, f, self.metrics, self.stop_event, self.instance)
                            for f in config.flows]
        self._threads: list[threading.Thread] = []
        self._http: ThreadingHTTPServer | None = None
        self._metrics_addr = (metrics_host, metrics_port) if metrics_port is not None else None

    # -- HTTP --------------------------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        return {"instance": self.instance, "flows": [r.status() for r in self.replicators]}

    def healthy(self) -> bool:
        alive = all(t.is_alive() for t in self._threads) and not self.stop_event.is_set()
        return alive and all(r.status().get("state") == "running" for r in self.replicators)

    def _start_http(self) -> None:
        if self._metrics_addr is None:
            return
        service = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.startswith("/metrics"):
                    body, ctype, code = generate_latest(service.metrics.registry), CONTENT_TYPE_LATEST, 200
                elif self.path.startswith("/healthz"):
                    ok = service.healthy()
                    body = json.dumps({"healthy": ok, **service.status()}).encode()
                    ctype, code = "application/json", 200 if ok else 503
                elif self.path.startswith("/status"):
                    body, ctype, code = json.dumps(service.status()).encode(), "application/json", 200
                else:
                    body, ctype, code = b"not found\n", "text/plain", 404
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                return

        self._http = ThreadingHTTPServer(self._metrics_addr, Handler)
        self._http.daemon_threads = True
        threading.Thread(target=self._http.serve_forever, name="metrics-http", daemon=True).start()
        log.info("metrics on http://%s:%d/metrics (also /healthz, /status)", *self._http.server_address[:2])

    @property
    def metrics_port(self) -> int | None:
        return int(self._http.server_address[1]) if self._http else None

    # -- lifecycle ---------------------------------------------------------------------------------
    def start(self) -> None:
        for cluster in self.config.clusters:
            self.metrics.reachable.labels(cluster).set(1)
        self._start_http()
        for r in self.replicators:
            t = threading.Thread(target=r.run, name=f"flow {r.flow.name}", daemon=True)
            t.start()
            self._threads.append(t)
            if r.flow.emit_checkpoints or r.flow.sync_group_offsets:
                emitter = CheckpointEmitter(self.config, r.flow, self.stop_event, self.metrics)
                emitter.start()
                self._threads.append(emitter)

    def request_stop(self, *_: object) -> None:
        if not self.stop_event.is_set():
            log.info("stopping: finishing in-flight records and committing progress")
        self.stop_event.set()

    def wait(self) -> None:
        for t in self._threads:
            while t.is_alive():
                t.join(0.5)
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()

    def run_forever(self) -> int:
        def on_signal(signum: int, frame: FrameType | None) -> None:
            self.request_stop()

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
        self.start()
        while not self.stop_event.wait(0.5):
            pass
        self.wait()
        log.info("stopped cleanly")
        return 0
