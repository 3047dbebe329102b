"""Multi-node KRaft clusters on loopback: N combined broker+controller nodes (``LocalCluster`` each, with its
own directory, ports and PID file) sharing one quorum and one cluster id.

Replication is production-like: replication factor 3 (or N, if smaller) for the internal and default
topics and ``min.insync.replicas = 2``, so one node can die (SIGKILL) with no acknowledged write lost and
writes with ``acks=all`` still accepted. A node is stopped, killed and started on its own.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from mirror_core.devcluster.local_cluster import ClusterStartError, LocalCluster, free_port


def replicated_props(size: int) -> dict[str, str]:
    """Broker settings of a cluster of ``size`` nodes: RF min(3, size), min.insync.replicas min(2, RF)."""
    rf = min(3, size)
    isr = str(min(2, rf))
    return {
        "offsets.topic.replication.factor": str(rf),
        "transaction.state.log.replication.factor": str(rf),
        "transaction.state.log.min.isr": isr,
        "share.coordinator.state.topic.replication.factor": str(rf),
        "share.coordinator.state.topic.min.isr": isr,
        "default.replication.factor": str(rf),
        "min.insync.replicas": isr,
        "unclean.leader.election.enable": "false",
    }


@dataclass
class MultiNodeCluster:
    name: str
    nodes: list[LocalCluster] = field(default_factory=list)

    @classmethod
    def create(cls, name: str, base_dir: Path, size: int = 3, extra_props: dict[str, str] | None = None,
               heap: str = "384m", port: Callable[[], int] = free_port) -> MultiNodeCluster:
        """``size`` nodes under ``base_dir/<name>/node-<id>``, node ids 1..size, free loopback ports."""
        if size < 1:
            raise ValueError(f"cluster {name}: size must be at least 1, got {size}")
        ports = [(port(), port()) for _ in range(size)]
        voters = ",".join(f"{i + 1}@127.0.0.1:{ctl}" for i, (_, ctl) in enumerate(ports))
        cluster_id = uuid.uuid4().hex[:22]
        props = {**replicated_props(size), **(extra_props or {})}
        nodes = [LocalCluster(name=f"{name}-{i + 1}", base_dir=base_dir / name / f"node-{i + 1}", port=client,
                              controller_port=ctl, extra_props=dict(props), heap=heap, node_id=i + 1,
                              quorum_voters=voters, cluster_id=cluster_id)
                 for i, (client, ctl) in enumerate(ports)]
        return cls(name, nodes)

    @property
    def bootstrap(self) -> str:
        return ",".join(n.bootstrap for n in self.nodes)

    def node(self, node_id: int) -> LocalCluster:
        return self.nodes[node_id - 1]

    def start(self, timeout: float = 120.0) -> None:
        """Launch every node that is not running, then wait until every node is a registered broker."""
        procs = [(n, n.launch()) for n in self.nodes]
        deadline = time.monotonic() + timeout
        for n, proc in procs:
            if proc is not None:
                n.wait_ready(max(1.0, deadline - time.monotonic()), proc)
        self.wait_registered(len(self.nodes), max(1.0, deadline - time.monotonic()))

    def start_node(self, node_id: int, timeout: float = 120.0) -> None:
        """Start one node again (its data kept) and wait until the cluster counts it as a broker."""
        self.node(node_id).start(timeout)
        self.wait_registered(len(self.nodes), timeout)

    def stop_node(self, node_id: int) -> bool:
        return self.node(node_id).stop()

    def kill_node(self, node_id: int) -> None:
        """SIGKILL one node (a crashed broker and controller)."""
        self.node(node_id).kill()

    def running(self) -> list[int]:
        return [n.node_id for n in self.nodes if n.is_running()]

    def stop(self, timeout: float = 30.0) -> None:
        """Stop every node at once: one by one, the last ones would wait for a quorum that is gone."""
        with ThreadPoolExecutor(len(self.nodes)) as pool:
            list(pool.map(lambda n: n.stop(timeout), self.nodes))

    def wait_registered(self, count: int, timeout: float) -> None:
        """Wait until the metadata lists ``count`` brokers (a restarted node has re-registered)."""
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": "0"})
        deadline, seen = time.monotonic() + timeout, 0
        while time.monotonic() < deadline:
            try:
                seen = len(admin.list_topics(timeout=2.0).brokers)
            except Exception:  # a node still starting: not ready yet
                seen = 0
            if seen >= count:
                return
            time.sleep(0.3)
        raise ClusterStartError(f"cluster {self.name}: {seen} of {count} brokers registered after {timeout:.0f}s; "
                                f"see {self.nodes[0].base_dir.parent}/node-*/logs/server.log")
