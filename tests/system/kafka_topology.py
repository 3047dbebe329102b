"""The Kafka side of the system test: two 3-node clusters and the mirror fleet of tests/system/topology.py
(three processes for dc1->dc2, one for dc2->dc1), each with its stable instance id and the PostgreSQL state
store, each on a fixed metrics port so that a restarted process is the same Prometheus target."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka.admin import NewTopic

from mirror_core.devcluster.multi_node import MultiNodeCluster
from tests.kafka_harness import MirrorProcess, admin, wait_until, write_config
from tests.system.topology import BROKERS_PER_CLUSTER, CLUSTERS, MIRRORS, REPLICATION_FACTOR, Mirror

# Topic patterns of the two flows: disjoint, so the reverse flow never picks up the forward flow's topics.
FLOW_TOPICS = {"dc1->dc2": "fwd.*", "dc2->dc1": "rev.*"}


def new_clusters(root: Path) -> dict[str, MultiNodeCluster]:
    return {alias: MultiNodeCluster.create(alias, root, BROKERS_PER_CLUSTER) for alias in CLUSTERS}


def create_replicated_topic(bootstrap: str, name: str, partitions: int) -> None:
    """A topic with the cluster's default replication (RF 3, min.insync.replicas 2), all replicas in sync."""
    client = admin(bootstrap)  # keep a reference: the future dies with its client
    client.create_topics([NewTopic(name, partitions)])[name].result(30)

    def in_sync() -> bool:
        md = admin(bootstrap).list_topics(topic=name, timeout=5).topics.get(name)
        return (md is not None and md.error is None and len(md.partitions) == partitions
                and all(len(p.isrs) == REPLICATION_FACTOR for p in md.partitions.values()))
    wait_until(in_sync, 60, what=f"topic {name}: every replica in sync")


def leaders(bootstrap: str, topic: str) -> dict[int, int]:
    """Partition -> node id of its leader."""
    md = admin(bootstrap).list_topics(topic=topic, timeout=10).topics[topic]
    return {p: m.leader for p, m in md.partitions.items()}


def replication_factors(bootstrap: str, topic: str) -> set[int]:
    md = admin(bootstrap).list_topics(topic=topic, timeout=10).topics[topic]
    return {len(m.replicas) for m in md.partitions.values()}


def mirror_lines() -> list[str]:
    lines: list[str] = []
    for flow, pattern in FLOW_TOPICS.items():
        lines += [f"{flow}.enabled = true", f"{flow}.topics = {pattern}",
                  f"{flow}.consumer.group.id = system-{flow.replace('->', '-')}"]
    rf = str(REPLICATION_FACTOR)
    return [*lines, f"replication.factor = {rf}", f"offset-syncs.topic.replication.factor = {rf}",
            f"checkpoints.topic.replication.factor = {rf}", f"heartbeats.topic.replication.factor = {rf}",
            "refresh.topics.interval.seconds = 2", "offset.flush.interval.ms = 200", "emit.heartbeats.enabled = false"]


@dataclass
class MirrorFleet:
    """The mirror processes of the topology; ``restart`` keeps a process's instance id and metrics port."""

    clusters: dict[str, MultiNodeCluster]
    state_db: str
    workdir: Path
    procs: dict[str, MirrorProcess] = field(default_factory=dict)

    def config(self, flow: str) -> Path:
        """One file per flow: only that flow enabled (the other flow's processes never claim its partitions)."""
        others = [f for f in FLOW_TOPICS if f != flow]
        lines = [ln for ln in mirror_lines() if not any(ln.startswith(f"{o}.enabled") for o in others)]
        return write_config(self.workdir / f"{flow.replace('->', '-')}.properties",
                            {a: c.bootstrap for a, c in self.clusters.items()}, lines)

    def _spawn(self, mirror: Mirror, port: int | None = None) -> MirrorProcess:
        m = MirrorProcess(self.config(mirror.flow), self.workdir, mirror.instance_id,
                          ["--instance-id", mirror.instance_id, "--state-db", self.state_db])
        if port is not None:
            m.port = port
        self.procs[mirror.instance_id] = m.start()
        return m

    def start(self) -> MirrorFleet:
        for mirror in MIRRORS:
            self._spawn(mirror)
        wait_until(lambda: all(m.status() is not None for m in self.procs.values()), 90,
                   what="every mirror serves /status")
        return self

    def of_flow(self, flow: str) -> list[MirrorProcess]:
        return [self.procs[m.instance_id] for m in MIRRORS if m.flow == flow]

    def restart(self, instance_id: str) -> MirrorProcess:
        """Start the process with this instance id again (after a kill), on the same metrics port."""
        old = self.procs[instance_id]
        old.ensure_dead()
        mirror = next(m for m in MIRRORS if m.instance_id == instance_id)
        return self._spawn(mirror, old.port)

    def targets(self) -> list[str]:
        return [f"127.0.0.1:{m.port}" for m in self.procs.values()]

    def stop(self) -> None:
        for m in self.procs.values():
            m.ensure_dead()
