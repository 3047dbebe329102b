"""`make demo` end to end: local clusters, the example config, traffic, live status, clean stop; after a failover
its mirror obeys the state store and its table says so."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

from mirror_core.devcluster.local_cluster import free_port
from mirror_core.state.store import StateStore
from tests.kafka_harness import REPO


def test_demo_runs_and_stops_cleanly(tmp_path: Path) -> None:
    # The store a failover left (make airflow's DAGs write the demo's store): dc1->dc2 stopped, dc2->dc1 running.
    db = f"sqlite:///{tmp_path / 'state.db'}"
    store = StateStore(db)
    store.migrate()
    store.set_flow_desired("dc1->dc2", "stopped", "alice", "planned failover dc1 -> dc2", "run-7")
    store.set_flow_desired("dc2->dc1", "running", "alice", "planned failover dc1 -> dc2", "run-7")
    env = dict(os.environ, MIRROR_CORE_DEV_HOME=str(tmp_path / "dev"), MIRROR_CORE_DB_URL=db,
               # Shift the demo's fixed ports so it never collides with a developer's `dev up`; dc2's
               # (29092 + offset, up to + 3) stay below 32768, where the kernel hands out ephemeral ports: a
               # client's connection took one there once (2026-11-27, dc2 could not bind 32792).
               MIRROR_CORE_DEV_PORT_OFFSET=str(random.randrange(100, 3600, 10)),
               MIRROR_CORE_METRICS_PORT=str(free_port()), COLUMNS="200")
    proc = subprocess.run([sys.executable, "scripts/demo.py", "--duration", "25"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=240)
    out = proc.stdout
    assert proc.returncode == 0, out[-3000:] + proc.stderr[-3000:]
    assert "mirror stopped (exit 0)" in out and "clusters stopped" in out
    assert "dc1.orders" in out and "demo.clicks" in out  # the live table showed replicated topics
    assert "demo.scratch.tmp" not in out.split("excluded by the config")[-1]
    # Each flow's desired state, who set it, what the mirror applies and the command that changes it.
    assert "desired stopped (set by alice" in out and "dc2->dc1 (standby)" in out, out[-3000:]
    assert "=stopped" in out and "=running" in out  # applied by the demo's mirror
    assert "failback starts it: airflow dags trigger failback" in out
    log = (tmp_path / "dev" / "mirror.log").read_text()
    assert "stopped cleanly" in log
