"""The distributed topology, described once: the system test starts it (tests/system) and the deployment
recipes declare it (docker-compose.yml, deploy/); tests/unit/test_deploy_topology.py holds the compose file
to this description, so the recipe cannot drift from what was proven."""

from __future__ import annotations

from dataclasses import dataclass

BROKERS_PER_CLUSTER = 3
REPLICATION_FACTOR = 3
MIN_INSYNC_REPLICAS = 2
CLUSTERS = ("dc1", "dc2")


@dataclass(frozen=True)
class Mirror:
    """One mirror process: the flow it copies and its stable instance id (``--instance-id``)."""

    flow: str
    instance_id: str


# Three processes share the dc1->dc2 flow (one consumer group, partitions spread over them); one copies back.
MIRRORS = (
    Mirror("dc1->dc2", "mirror-dc1-dc2-0"),
    Mirror("dc1->dc2", "mirror-dc1-dc2-1"),
    Mirror("dc1->dc2", "mirror-dc1-dc2-2"),
    Mirror("dc2->dc1", "mirror-dc2-dc1-0"),
)


@dataclass(frozen=True)
class Role:
    """A kind of process of the deployment and how many of it run."""

    name: str
    count: int


ROLES = (
    *(Role(f"kafka-{c}", BROKERS_PER_CLUSTER) for c in CLUSTERS),
    Role("mirror", len(MIRRORS)),
    Role("postgres", 1),
    Role("redis", 1),
    Role("airflow-api-server", 1),
    Role("airflow-scheduler", 1),
    Role("airflow-dag-processor", 1),
    Role("airflow-triggerer", 1),
    Role("airflow-worker", 2),
    Role("spark-master", 1),
    Role("spark-worker", 2),
    Role("prometheus", 1),
)


def broker_properties() -> dict[str, str]:
    """What every topic of the deployment gets: the default and internal topics' replication."""
    return {"default.replication.factor": str(REPLICATION_FACTOR), "min.insync.replicas": str(MIN_INSYNC_REPLICAS)}
