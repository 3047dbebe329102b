"""The long-running service: one replicator thread per running flow, metrics and health over HTTP,
graceful shutdown on SIGTERM/SIGINT (stop fetching, flush, commit progress, exit 0).

With a state store (``--state-db`` / ``MIRROR_CORE_DB_URL``) the service also obeys the control
plane: the failover/failback/cutover workflows set each flow's desired state (running | stopped)
and every instance applies it within a few seconds and reports back what it applies.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import FrameType
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from mirror_core import gc_tuning
from mirror_core.config import reload
from mirror_core.config.loader import load_config
from mirror_core.config.model import FlowConfig, MirrorConfig
from mirror_core.metrics import Metrics
from mirror_core.offsets.checkpoints import CheckpointEmitter
from mirror_core.offsets.pruning import MapPruner
from mirror_core.redaction import scrub_json
from mirror_core.replication.controls import TopicControl
from mirror_core.replication.damage import PartitionAction
from mirror_core.replication.replicator import FlowReplicator, instance_id
from mirror_core.replication.reporting import healthy_state
from mirror_core.throttling import ThrottledLine

log = logging.getLogger(__name__)

#: how often an instance reports what it applies (its heartbeat: a write to the state store); a reader takes an
#: instance silent for 20 s as gone (status_app.INSTANCE_FRESH_S, StateStore.flow_instances)
REPORT_INTERVAL_S = 2.0


class FlowRunner:
    """One flow's replicator and checkpoint emitter, startable and stoppable on their own (the
    control plane stops a forward flow and starts its reverse during a failover)."""

    def __init__(self, service: Service, flow: FlowConfig) -> None:
        self.service, self.flow = service, flow
        self.stop_event = threading.Event()
        self.replicator: FlowReplicator | None = None
        self.threads: list[threading.Thread] = []
        #: set when another process with the same --instance-id fenced this one: the flow is not started
        #: again here (it would fence the other one back); restart the process with its own id.
        self.fenced: str | None = None

    @property
    def running(self) -> bool:
        return self.replicator is not None

    @property
    def stopping(self) -> bool:
        return self.replicator is not None and self.stop_event.is_set()

    @property
    def state(self) -> str:
        """What this instance applies: running | stopping (draining) | stopped."""
        if self.stopping and not any(t.is_alive() for t in self.threads):
            if self.replicator is not None and self.replicator.fenced:
                self.fenced = self.replicator.fenced
            self.threads, self.replicator = [], None  # the drain finished
        return "stopped" if self.replicator is None else "stopping" if self.stopping else "running"

    def start(self) -> None:
        if self.running or self.fenced:
            return
        svc = self.service
        self.stop_event = threading.Event()
        self.replicator = FlowReplicator(svc.config, self.flow, svc.metrics, self.stop_event, svc.instance,
                                         static_id=svc.instance_name)
        t = threading.Thread(target=self.replicator.run, name=f"flow {self.flow.name}", daemon=True)
        t.start()
        pruner = MapPruner(svc.config, self.flow, self.stop_event, svc.metrics, svc.instance)
        pruner.start()
        self.threads = [t, pruner]
        if self.flow.emit_checkpoints or self.flow.sync_group_offsets:
            emitter = CheckpointEmitter(svc.config, self.flow, self.stop_event, svc.metrics)
            emitter.start()
            self.threads.append(emitter)

    def stop(self, wait: bool = True) -> None:
        """Graceful: in-flight records finish and progress is committed before this returns."""
        self.stop_event.set()
        if not wait:
            return
        for t in self.threads:
            while t.is_alive():
                t.join(0.5)
        self.threads, self.replicator = [], None

    def alive(self) -> bool:
        return all(t.is_alive() for t in self.threads)

    def status(self) -> dict[str, Any]:
        replicator = self.replicator  # the control thread may clear it meanwhile
        if replicator is None:
            state = f"stopped: {self.fenced}" if self.fenced else "stopped"
            return {"flow": self.flow.name, "state": state, "partitions": []}
        return replicator.status()


class Service:
    def __init__(self, config: MirrorConfig, metrics_port: int | None = None,
                 metrics_host: str = "127.0.0.1", state_db: str | None = None,
                 control_interval_s: float = 1.0, instance_name: str | None = None) -> None:
        self.config = config
        self.metrics = Metrics()
        self.stop_event = threading.Event()
        # A stable name (--instance-id) is also the static group membership id (see FlowReplicator).
        self.instance_name = instance_name
        self.instance = instance_name or instance_id()
        # Standby flows exist only to be started by the control plane.
        flows = config.all_flows if state_db else config.flows
        self.runners = {f.name: FlowRunner(self, f) for f in flows}
        self._enabled = {f.name for f in config.flows}
        #: each flow's filters as its config file says (the state store's, when set, override them by key)
        self._file_filters = {f.name: (f.topics, f.groups) for f in flows}
        #: the state store's filter applied to each flow: (its id, the keys it sets); absent: the file's
        self._store_filters: dict[str, tuple[int, dict[str, str]]] = {}
        self._state_db = state_db
        self._control_interval_s = control_interval_s
        self._control: threading.Thread | None = None
        self._reload = threading.Event()  # SIGHUP: read the filters from the file again
        self._state: Any = None
        self._http: ThreadingHTTPServer | None = None
        self._metrics_addr = (metrics_host, metrics_port) if metrics_port is not None else None

    # -- HTTP --------------------------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        return {"instance": self.instance, "flows": [r.status() for r in self.runners.values()]}

    def healthy(self) -> bool:
        if self.stop_event.is_set() or (self._control is not None and not self._control.is_alive()):
            return False
        running = [r for r in self.runners.values() if r.running and not r.stopping]
        return all(r.alive() and healthy_state(str(r.status().get("state"))) for r in running)

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
                    body = json.dumps(scrub_json({"healthy": ok, **service.status()})).encode()
                    ctype, code = "application/json", 200 if ok else 503
                elif self.path.startswith("/status"):
                    body, ctype, code = json.dumps(scrub_json(service.status())).encode(), "application/json", 200
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

    # -- lifecycle ---------------------------------------------------------------------------------
    def start(self) -> None:
        for cluster in self.config.clusters:
            self.metrics.reachable.labels(cluster).set(1)
        self._start_http()
        desired = self._desired_states() if self._state_db else self._defaults()
        for name, runner in self.runners.items():
            if desired[name] == "running":
                runner.start()
        if self._state_db:
            self._control = threading.Thread(target=self._control_loop, name="control", daemon=True)
            self._control.start()
        if self.config.source_path is not None:
            threading.Thread(target=self._watch_config, name="config-watch", daemon=True).start()

    def _defaults(self) -> dict[str, str]:
        return {name: "running" if name in self._enabled else "stopped" for name in self.runners}

    # -- control plane ----------------------------------------------------------------------------
    def _store(self) -> Any:
        from mirror_core.state.store import StateStore

        if self._state is None:
            state = StateStore(self._state_db)
            state.migrate()
            self._state = state
        return self._state

    def _desired_states(self) -> dict[str, str]:
        """Desired flow states from the state store; the configured state where it has none."""
        controls = self._store().flow_controls()
        return {name: controls[name].desired if name in controls else default
                for name, default in self._defaults().items()}

    def _control_loop(self) -> None:
        """Obey the desired flow states; report what this instance applies (its heartbeat).

        If the state store is unreachable the flows keep their current state: a control-plane
        outage must never stop replication.
        """
        while True:
            try:
                store = self._store()
                break
            except Exception as exc:  # (a migration lock held elsewhere, a database down): flows go on as configured
                retry_s = max(self._control_interval_s, 5.0)
                log.warning("control plane: the state store cannot be opened (%s); flows keep their current state, "
                            "trying again in %.0fs", exc, retry_s)
                if self.stop_event.wait(retry_s):
                    return
        next_report = 0.0
        said = ThrottledLine()  # a store down is met every round: each line once a minute

        def warn(line: str) -> None:
            if said.due(line):
                log.warning("%s", line)

        while True:
            try:
                desired = self._desired_states()
            except Exception as exc:
                warn(f"control plane unreachable ({exc}); flows keep their current state")
                desired = {}
            for name, want in desired.items():
                runner = self.runners[name]
                if self.stop_event.is_set():
                    break
                state = runner.state
                if want == "running" and state == "stopped" and not runner.fenced:
                    log.info("control plane: starting flow %s", name)
                    runner.start()
                elif want == "stopped" and state == "running":
                    # Drain without blocking this loop: it keeps reporting "stopping" meanwhile, so a
                    # workflow never mistakes a slow drain for an instance that went away.
                    log.info("control plane: stopping flow %s (draining in-flight records)", name)
                    runner.stop(wait=False)
            if self.stop_event.is_set():
                return
            try:
                self._apply_store_filters(store)
            except Exception as exc:
                warn(f"control plane: the flows' filters in the state store not read: {exc}")
            # Desired state is read every round (an operator's pause or limit takes effect within about a second);
            # the heartbeat, a write, every REPORT_INTERVAL_S.
            if time.monotonic() >= next_report:
                next_report = time.monotonic() + REPORT_INTERVAL_S
                try:
                    applied = {n: {**reload.filter_values(r.flow),
                                   "filter_id": self._store_filters.get(n, (None,))[0]}
                               for n, r in self.runners.items()}
                    store.report_flow_states(self.instance, {n: r.state for n, r in self.runners.items()},
                                             self._paused_partitions(), applied)
                except Exception as exc:
                    warn(f"control plane: could not report flow states: {exc}")
            try:
                self._partition_actions(store)
            except Exception as exc:
                warn(f"control plane: operators' partition actions not read: {exc}")
            if self.stop_event.wait(self._control_interval_s):
                return

    def _apply_store_filters(self, store: Any) -> None:
        """Give each flow the filters the state store sets for it (``mirror-core control filter``), over its file's;
        the flow discovers its topics again at once: a topic no longer matched stops with its progress kept, a new
        one starts (at its progress, if it was copied before)."""
        active = store.active_flow_filters(list(self.runners))
        for name, runner in self.runners.items():
            record = active.get(name)
            wanted = (record.id, record.overrides) if record is not None else None
            if wanted == self._store_filters.get(name):
                continue
            self._refilter(runner, wanted[1] if wanted is not None else {})
            if wanted is None:
                self._store_filters.pop(name, None)
                log.info("flow %s: filters from the config file again (the state store's were cleared)", name)
            else:
                self._store_filters[name] = wanted
                log.info("flow %s: filters from the state store (id %d, by %s: %s): %s", name, record.id,
                         record.set_by, record.reason, ", ".join(f"{k} '{v}'" for k, v in wanted[1].items()))

    def _refilter(self, runner: FlowRunner, overrides: dict[str, str]) -> None:
        topics, groups = reload.with_overrides(*self._file_filters[runner.flow.name], overrides)
        runner.flow.refilter(topics, groups)
        if runner.replicator is not None:
            runner.replicator.refresh_topics_soon()

    def _paused_partitions(self) -> dict[str, list[dict[str, Any]]]:
        """Each running flow's paused partitions and why, for the status page (from the flows' /status)."""
        return {name: [{"topic": p["topic"], "partition": p["partition"], "reason": p["paused"]}
                       for p in runner.status().get("partitions", []) if p.get("paused")]
                for name, runner in self.runners.items() if runner.replicator is not None}

    def _partition_actions(self, store: Any) -> None:
        """Hand each running flow the operators' active pauses and limits (replication/controls.py) and pending
        resumes and skips (replication/damage.py), and record what became of those it applied."""
        running = {name: r.replicator for name, r in self.runners.items() if r.replicator is not None}
        if not running:
            return
        pending: dict[str, list[PartitionAction]] = {name: [] for name in running}
        for a in store.pending_partition_actions(list(running)):
            pending[a.flow].append(PartitionAction(a.id, a.topic, a.partition, a.action, a.first_offset,
                                                   a.last_offset, a.requested_by, a.reason))
        controls: dict[str, list[TopicControl]] = {name: [] for name in running}
        for c in store.active_topic_controls(list(running)):
            controls[c.flow].append(TopicControl(c.kind, c.topic, c.partition, c.limit_bytes_per_s, c.set_by,
                                                 c.set_at.strftime("%Y-%m-%d %H:%M:%S UTC"), c.reason))
        for name, replicator in running.items():
            replicator.controls.set(controls[name])
            replicator.operator.offer(pending[name])
            for outcome in replicator.operator.outcomes():
                store.complete_partition_action(outcome.id, self.instance, outcome.line, outcome.ok)

    # -- configuration reload ------------------------------------------------------------------------
    def reload_config(self) -> None:
        """Take the flows' filters from the configuration file again (config/reload.py): applied at once, each flow
        discovering its topics again within seconds; anything else changed is named and waits for a restart. A
        file that does not load changes nothing."""
        path = self.config.source_path
        if path is None:
            return
        try:
            fresh = load_config(path)
        except Exception as exc:  # (any: a half-written file must never stop the flows)
            log.error("configuration %s not reloaded: %s; the flows keep their filters", path, exc)
            return
        apply, later = reload.changes(self.config, fresh)
        for change in apply:
            line = change.describe()
            change.apply()
            runner = self.runners.get(change.flow.name)
            if runner is not None:
                self._file_filters[runner.flow.name] = (change.topics, change.groups)
                stored = self._store_filters.get(runner.flow.name)
                if stored is not None:  # the state store's keys still override the file's
                    self._refilter(runner, stored[1])
                    line += f" (the state store's filter id {stored[0]} still overrides {', '.join(stored[1])})"
            replicator = runner.replicator if runner is not None else None
            if replicator is not None:
                replicator.refresh_topics_soon()
            log.info("configuration reloaded: %s (a topic no longer matched stops with its progress kept; a new one "
                     "starts at the flow's start position)", line)
        for line in later:
            log.warning("configuration reloaded: %s", line)
        if not apply and not later:
            log.info("configuration %s reloaded: nothing changed", path)

    def _watch_config(self) -> None:
        """Reload on SIGHUP or when the file's modification time or size changes (checked every second)."""
        path = self.config.source_path
        assert path is not None

        def stamp() -> tuple[float, int] | None:
            try:
                st = os.stat(path)
                return st.st_mtime, st.st_size
            except OSError:
                return None

        last = stamp()
        while not self.stop_event.is_set():
            asked = self._reload.wait(1.0)
            if self.stop_event.is_set():
                return
            now = stamp()
            if asked or (now is not None and now != last):
                self._reload.clear()
                last = now
                self.reload_config()

    def request_stop(self, *_: object) -> None:
        if not self.stop_event.is_set():
            log.info("stopping: finishing in-flight records and committing progress")
        self.stop_event.set()
        for runner in self.runners.values():
            runner.stop(wait=False)

    def wait(self) -> None:
        for runner in self.runners.values():
            runner.stop()
        if self._control is not None:
            self._control.join(30)  # a daemon: never let a hung state-store call block the exit
            for runner in self.runners.values():
                runner.stop()  # anything it started in the meantime drains too
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
        if self._state is not None:
            with contextlib.suppress(Exception):
                self._state.report_flow_states(self.instance, dict.fromkeys(self.runners, "stopped"))

    def run_forever(self) -> int:
        def on_signal(signum: int, frame: FrameType | None) -> None:
            self.request_stop()

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
        signal.signal(signal.SIGHUP, lambda signum, frame: self._reload.set())
        # Before the flows start: what is frozen is the start-up state, never a flow's (a replicator frozen
        # in a reference cycle would outlive a restart of its flow).
        gc_tuning.tune([f.batch_max_records for f in self.config.flows])
        self.start()
        while not self.stop_event.wait(0.5):
            pass
        self.wait()
        log.info("stopped cleanly")
        return 0
