"""`make demo`: two local clusters, the mirror running on examples/mm2.properties, sample traffic,
and a live replication status until Ctrl-C (or --duration seconds), then a clean shutdown.

The mirror obeys the local state store (.state/mirror-core.db, or MIRROR_CORE_DB_URL): the one `make airflow`
gives the DAGs, so a failover approved there reaches it. The table shows every flow, standby ones too, with
its desired state (who set it and why), what the mirror applies and the command that changes it."""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path

from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from rich.console import Console, Group
from rich.live import Live
from rich.text import Text

from mirror_core.cli.common import default_state_db, existing_state_db
from mirror_core.config.loader import load_config
from mirror_core.config.model import MirrorConfig
from mirror_core.devcluster.dev_env import dev_clusters, dev_home, start_clusters
from mirror_core.devcluster.local_cluster import ClusterStartError
from mirror_core.status import FlowControlView, collect_status, flow_controls, status_table

REPO = Path(__file__).resolve().parents[1]
SAMPLE_TOPICS = {"orders": 3, "payments": 2, "demo.clicks": 4, "demo.scratch.tmp": 1}


def demo_config(bootstraps: dict[str, str]) -> Path:
    """The example config with the dev clusters' actual addresses."""
    text = (REPO / "examples" / "mm2.properties").read_text()
    for alias, bootstrap in bootstraps.items():
        text = re.sub(rf"(?m)^{alias}\.bootstrap\.servers\s*=.*$", f"{alias}.bootstrap.servers = {bootstrap}", text)
    path = dev_home() / "demo-mm2.properties"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def create_topics(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(t, n, 1, config={"retention.ms": "86400000"})
                                   for t, n in SAMPLE_TOPICS.items()])
    for fut in futures.values():
        try:
            fut.result(30)
        except KafkaException as exc:
            if "already exists" not in str(exc):
                raise


def controls(config: MirrorConfig, url: str) -> Mapping[str, str | FlowControlView] | None:
    """Each flow's desired and applied state from the store the mirror obeys (None until the mirror created it)."""
    from mirror_core.state.store import StateStore

    names = [f.name for f in config.all_flows]
    if existing_state_db(url) is None:
        return None
    try:
        return flow_controls(StateStore(url), names, config)
    except Exception as exc:  # e.g. the mirror is still creating its tables: the next refresh shows them
        return dict.fromkeys(names, f"state store not readable yet: {' '.join(str(exc).split())[:200]}")


class Traffic(threading.Thread):
    def __init__(self, bootstrap: str, rate: int) -> None:
        super().__init__(daemon=True)
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
        self.rate, self.count, self.stop = rate, 0, threading.Event()

    def run(self) -> None:
        topics = list(SAMPLE_TOPICS)
        while not self.stop.is_set():
            for _ in range(max(1, self.rate // 10)):
                i = self.count
                topic = topics[i % len(topics)]
                self.producer.produce(topic, key=f"customer-{i % 97}".encode(),
                                      value=f'{{"id": {i}, "amount": {i % 1000}}}'.encode(),
                                      headers=[("source", b"demo")])
                self.count += 1
            self.producer.poll(0)
            self.stop.wait(0.1)
        self.producer.flush(10)
        del self.producer  # closes the client before the clusters go away


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--duration", type=float, default=None, help="stop after N seconds (default: Ctrl-C)")
    parser.add_argument("--rate", type=int, default=500, help="sample records per second")
    parser.add_argument("--keep-clusters", action="store_true", help="leave dc1/dc2 running afterwards")
    args = parser.parse_args()
    console = Console()
    clusters = dev_clusters()
    console.print("[bold]mirror_core demo[/bold]: starting local clusters dc1 and dc2 (Apache Kafka, KRaft)...")
    try:
        start_clusters(clusters, lambda c, _running, _s: console.print(f"  {c.name}: {c.bootstrap}"))
    except ClusterStartError as exc:  # a port taken, a broker that exits: what the demo started is stopped
        console.print(f"[red]demo: {exc} (MIRROR_CORE_DEV_PORT_OFFSET shifts the demo's ports)[/red]")
        return 1
    bootstraps = {c.name: c.bootstrap for c in clusters}
    config_path = demo_config(bootstraps)
    config = load_config(config_path)
    create_topics(bootstraps["dc1"])
    console.print(f"sample topics on dc1: {', '.join(SAMPLE_TOPICS)} (demo.scratch.tmp is excluded by the config)")
    state_db = default_state_db(REPO)
    log_path = dev_home() / "mirror.log"
    log = open(log_path, "ab")  # noqa: SIM115 - handed to the child
    mirror = subprocess.Popen([sys.executable, "-m", "mirror_core", "run", "--config", str(config_path),
                               "--metrics-port", os.environ.get("MIRROR_CORE_METRICS_PORT", "9464"),
                               # the same state store `make airflow` gives the DAGs: failovers reach this mirror
                               "--state-db", state_db],
                              stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
    log.close()
    console.print(f"mirror-core run started (pid {mirror.pid}, log {log_path}); "
                  f"metrics on http://127.0.0.1:{os.environ.get('MIRROR_CORE_METRICS_PORT', '9464')}/metrics; "
                  f"flow states from {state_db.split('@')[-1]}")
    traffic = Traffic(bootstraps["dc1"], args.rate)
    traffic.start()
    interrupted = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: interrupted.set())
    signal.signal(signal.SIGTERM, lambda *_: interrupted.set())
    started = time.monotonic()
    exit_code = 0
    try:
        with Live(console=console, refresh_per_second=2) as live:
            while not interrupted.is_set():
                if args.duration is not None and time.monotonic() - started >= args.duration:
                    break
                if mirror.poll() is not None:
                    console.print(f"[red]mirror exited with {mirror.returncode}; see {log_path}[/red]")
                    exit_code = 1
                    break
                # Every flow, standby ones too: after a failover the reverse flow is the one that runs.
                statuses = collect_status(config, None, controls(config, state_db))
                lag = sum(s.total_lag or 0 for s in statuses)
                header = Text(f"produced {traffic.count} records on dc1 · total lag {lag} · "
                              f"{time.monotonic() - started:.0f}s · Ctrl-C to stop", style="bold")
                live.update(Group(header, status_table(statuses)))
                interrupted.wait(2)
    finally:
        console.print("stopping: traffic, then the mirror (graceful), then the clusters...")
        traffic.stop.set()
        traffic.join(15)
        if mirror.poll() is None:
            mirror.send_signal(signal.SIGTERM)
            try:
                rc = mirror.wait(60)
                console.print(f"mirror stopped (exit {rc})")
                exit_code = exit_code or rc
            except subprocess.TimeoutExpired:
                mirror.kill()
                exit_code = 1
        if not args.keep_clusters:
            for c in clusters:
                c.stop()
            console.print("clusters stopped")
    final = collect_status(config, None, controls(config, state_db)) if args.keep_clusters else None
    if final:
        console.print(status_table(final))
    return exit_code


if __name__ == "__main__":
    sys.exit(main())
