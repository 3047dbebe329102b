"""Single-node KRaft Kafka clusters on loopback, for development, the demo and the test suite.

A cluster lives in one directory (``server.properties``, ``data/``, ``logs/``, ``pid``); stopping and
starting it again keeps its data, which is what broker-restart tests need.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import threading
import time
import uuid
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path

from mirror_core.devcluster.kafka_dist import classpath, java_executable

_BROKER_DEFAULTS = {
    "process.roles": "broker,controller",
    "node.id": "1",
    "controller.listener.names": "CONTROLLER",
    "inter.broker.listener.name": "PLAINTEXT",
    "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "4",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "transaction.state.log.num.partitions": "4",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "group.initial.rebalance.delay.ms": "0",
    "num.partitions": "1",
    "default.replication.factor": "1",
    # A mirror must create remote topics itself, with the right partition count and configs.
    "auto.create.topics.enable": "false",
    "log.retention.check.interval.ms": "5000",
    "log.cleaner.backoff.ms": "1000",
}

_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


#: Every port ``free_port`` has handed out in this process. Ports are picked long before a broker binds them
#: (a quorum's voter list names every node's port up front), and the kernel may offer a port again once the
#: probing socket is closed: two clusters of one test session were once given the same port that way.
_HANDED_OUT: set[int] = set()
_HANDED_OUT_LOCK = threading.Lock()


def free_port() -> int:
    """A loopback port nothing listens on, never the same one twice in this process."""
    with _HANDED_OUT_LOCK:
        for _ in range(1000):
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                s.bind(("127.0.0.1", 0))
                port = int(s.getsockname()[1])
            if port not in _HANDED_OUT:
                _HANDED_OUT.add(port)
                return port
    raise ClusterStartError(f"no loopback port left that this process has not handed out ({len(_HANDED_OUT)} so far)")


def port_in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


class ClusterStartError(RuntimeError):
    """A local broker did not come up; the message points at its log."""


@dataclass
class LocalCluster:
    name: str
    base_dir: Path
    port: int
    controller_port: int
    extra_props: dict[str, str] = field(default_factory=dict)
    heap: str = "768m"
    #: Additional client listeners, name -> port (e.g. ``{"SASL_SSL": 19093}``); the name doubles as the
    #: security protocol unless ``listener.security.protocol.map`` in ``extra_props`` says otherwise.
    #: PLAINTEXT stays the inter-broker listener and the one :attr:`bootstrap` points at.
    extra_listeners: dict[str, int] = field(default_factory=dict)
    #: Extra arguments for ``kafka-storage format`` on first start (e.g. ``--add-scram ...``).
    format_args: list[str] = field(default_factory=list)
    #: Extra JVM options for the broker and the storage tool (e.g. ``-Djava.security.krb5.conf=...``,
    #: ``-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls=...``): java is started directly, not via KAFKA_OPTS.
    jvm_options: list[str] = field(default_factory=list)
    #: Advertised port of an extra listener whose clients come through a proxy (e.g. ``{"WAN": <toxiproxy
    #: port>}``): a client that bootstraps there is told to reach every broker through the proxy too.
    #: A listener name that is not a security protocol (``WAN``) is PLAINTEXT.
    advertised_ports: dict[str, int] = field(default_factory=dict)
    #: One node of a multi-node cluster (devcluster.multi_node): its node.id, the shared
    #: ``controller.quorum.voters`` and the shared cluster id. Defaults: a single-node cluster of its own.
    node_id: int = 1
    quorum_voters: str = ""
    cluster_id: str = ""

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def bootstrap_for(self, listener: str) -> str:
        """Bootstrap servers of one listener (``PLAINTEXT`` or a name of :attr:`extra_listeners`)."""
        if listener == "PLAINTEXT":
            return self.bootstrap
        return f"127.0.0.1:{self.advertised_ports.get(listener, self.extra_listeners[listener])}"

    @property
    def pid_file(self) -> Path:
        return self.base_dir / "pid"

    @property
    def log_file(self) -> Path:
        return self.base_dir / "logs" / "server.log"

    def properties(self) -> dict[str, str]:
        props = dict(_BROKER_DEFAULTS)
        extra = "".join(f",{name}://127.0.0.1:{port}" for name, port in self.extra_listeners.items())
        advertised = "".join(f",{name}://127.0.0.1:{self.advertised_ports.get(name, port)}"
                             for name, port in self.extra_listeners.items())
        props.update({
            "node.id": str(self.node_id),
            "controller.quorum.voters": self.quorum_voters or f"{self.node_id}@127.0.0.1:{self.controller_port}",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}{extra}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}{advertised}",
            "log.dirs": str(self.base_dir / "data"),
        })
        props["listener.security.protocol.map"] += "".join(
            f",{name}:{name if name in _PROTOCOLS else 'PLAINTEXT'}" for name in self.extra_listeners)
        props.update(self.extra_props)
        return props

    def _write_files(self) -> Path:
        self.base_dir.mkdir(parents=True, exist_ok=True)
        (self.base_dir / "logs").mkdir(exist_ok=True)
        conf = self.base_dir / "server.properties"
        conf.write_text("".join(f"{k}={v}\n" for k, v in self.properties().items()))
        log4j = resources.files("mirror_core.devcluster").joinpath("log4j2.properties").read_text()
        (self.base_dir / "log4j2.properties").write_text(log4j)
        (self.base_dir / "cluster.json").write_text(json.dumps(
            {k: str(v) if isinstance(v, Path) else v for k, v in asdict(self).items()}, indent=2))
        return conf

    def _java(self, main: str, *args: str) -> list[str]:
        return [
            java_executable(), f"-Xmx{self.heap}", "-Xms128m", "-XX:+UseG1GC",
            "-XX:TieredStopAtLevel=1" if main != "kafka.Kafka" else "-XX:+UseStringDeduplication",
            f"-Dkafka.logs.dir={self.base_dir / 'logs'}",
            f"-Dlog4j2.configurationFile={self.base_dir / 'log4j2.properties'}",
            *self.jvm_options,
            "-cp", classpath(), main, *args,
        ]

    def pid(self) -> int | None:
        """The PID of this cluster's broker, if it runs. The PID file outlives a killed broker and its
        number may since belong to another process: only a process whose command line is this broker's
        (``kafka.Kafka`` with this cluster's ``server.properties``) counts, so nothing else is signalled."""
        try:
            pid = int(self.pid_file.read_text().strip())
        except (FileNotFoundError, ValueError):
            return None
        return pid if self._is_broker(pid) else None

    def _is_broker(self, pid: int) -> bool:
        if not Path("/proc/self").exists():  # no /proc (not Linux): existence is all that can be checked
            try:
                os.kill(pid, 0)
            except OSError:
                return False
            return True
        try:
            args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:  # gone, or not ours to read: not the broker we started
            return False
        return b"kafka.Kafka" in args and str(self.base_dir / "server.properties").encode() in args

    def is_running(self) -> bool:
        return self.pid() is not None

    def start(self, timeout: float = 90.0) -> None:
        """Format (first time only) and start the broker; return once it answers metadata requests."""
        proc = self.launch()
        if proc is not None:
            self.wait_ready(timeout, proc)

    def launch(self) -> subprocess.Popen[bytes] | None:
        """Format (first time only) and start the broker without waiting for it (None: it already runs).
        The nodes of a quorum are all launched before any can become ready."""
        if self.is_running():
            return None
        for p in (self.port, self.controller_port, *self.extra_listeners.values()):
            if port_in_use(p):
                raise ClusterStartError(f"cluster {self.name}: port {p} is already in use")
        conf = self._write_files()
        if not (self.base_dir / "data" / "meta.properties").exists():
            fmt = subprocess.run(
                self._java("kafka.tools.StorageTool", "format", "-t", self.cluster_id or uuid.uuid4().hex[:22],
                           "-c", str(conf), "--ignore-formatted", *self.format_args),
                capture_output=True, text=True, check=False)
            if fmt.returncode != 0:
                raise ClusterStartError(f"cluster {self.name}: storage format failed:\n{fmt.stdout}{fmt.stderr}")
        out = open(self.base_dir / "logs" / "stdout.log", "ab")  # noqa: SIM115 - handed to the child
        proc = subprocess.Popen(self._java("kafka.Kafka", str(conf)), stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        out.close()
        self.pid_file.write_text(str(proc.pid))
        return proc

    def wait_ready(self, timeout: float, proc: subprocess.Popen[bytes] | None = None) -> None:
        from confluent_kafka.admin import AdminClient

        deadline = time.monotonic() + timeout
        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": "0"})
        while time.monotonic() < deadline:
            if proc is not None and proc.poll() is not None:
                raise ClusterStartError(f"cluster {self.name} exited with {proc.returncode}; see {self.log_file}")
            try:
                md = admin.list_topics(timeout=1.0)
                if md.brokers:
                    return
            except Exception:
                pass
            time.sleep(0.3)
        raise ClusterStartError(f"cluster {self.name} not ready after {timeout:.0f}s; see {self.log_file}")

    def stop(self, timeout: float = 30.0) -> bool:
        """Controlled shutdown (SIGTERM), escalating to SIGKILL after ``timeout``. False when the broker
        was not running (a stale PID file is removed, its process left alone)."""
        pid = self.pid()
        if pid is None:
            self.pid_file.unlink(missing_ok=True)
            return False
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self._alive(pid):
            time.sleep(0.2)
        if self._alive(pid) and self._is_broker(pid):
            os.kill(pid, signal.SIGKILL)
            while self._alive(pid):
                time.sleep(0.1)
        self.pid_file.unlink(missing_ok=True)
        return True

    def kill(self) -> None:
        """SIGKILL the broker (a lost data center), if it runs."""
        pid = self.pid()
        if pid is not None:
            os.kill(pid, signal.SIGKILL)
            while self._alive(pid):
                time.sleep(0.1)
        self.pid_file.unlink(missing_ok=True)

    @staticmethod
    def _alive(pid: int) -> bool:
        try:
            waited, _ = os.waitpid(pid, os.WNOHANG)
            if waited == pid:
                return False
        except ChildProcessError:
            pass
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        # A zombie that is not our child still answers kill(0); check its state.
        try:
            state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
            return state != "Z"
        except (FileNotFoundError, IndexError):
            return False

    @classmethod
    def load(cls, base_dir: Path) -> LocalCluster:
        data = json.loads((base_dir / "cluster.json").read_text())
        data["base_dir"] = Path(data["base_dir"])
        return cls(**data)
