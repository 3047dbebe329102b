"""The deployment recipes declare the topology the system test proves (tests/system/topology.py): the
compose services per role, the brokers' replication, the mirrors' instance ids and flows, and the
Kubernetes and systemd recipes' instance ids."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any

import yaml

from mirror_core.config.loader import load_config
from tests.system.topology import (
    CLUSTERS,
    MIN_INSYNC_REPLICAS,
    MIRRORS,
    REPLICATION_FACTOR,
    ROLES,
)

REPO = Path(__file__).resolve().parents[2]
# Compose services outside the proven topology: a one-shot migration and the dashboard.
NOT_IN_TOPOLOGY = {"airflow-init", "grafana"}


def _services() -> dict[str, Any]:
    services: dict[str, Any] = yaml.safe_load((REPO / "docker-compose.yml").read_text())["services"]
    return services


def role_of(service: str) -> str:
    """The topology role of a compose service: its name without the replica number (kafka-dc1-2 ->
    kafka-dc1, airflow-worker-1 -> airflow-worker) and every mirror-* as ``mirror``."""
    if service.startswith("mirror-"):
        return "mirror"
    return re.sub(r"-\d+$", "", service)


def test_role_of() -> None:
    assert [role_of(s) for s in ("kafka-dc1-3", "mirror-dc2-dc1-0", "airflow-worker-2", "redis")] == [
        "kafka-dc1", "mirror", "airflow-worker", "redis"]


def test_compose_services_are_the_system_test_topology() -> None:
    services = set(_services()) - NOT_IN_TOPOLOGY
    assert Counter(role_of(s) for s in services) == Counter({r.name: r.count for r in ROLES})


def test_compose_brokers_form_three_node_quorums_with_rf3_and_min_isr2() -> None:
    services = _services()
    for cluster in CLUSTERS:
        nodes = sorted(s for s in services if role_of(s) == f"kafka-{cluster}")
        voters = {services[n]["environment"]["KAFKA_CONTROLLER_QUORUM_VOTERS"] for n in nodes}
        assert voters == {",".join(f"{i}@{n}:9093" for i, n in enumerate(nodes, 1))}
        assert [services[n]["environment"]["KAFKA_NODE_ID"] for n in nodes] == [str(i) for i in range(1, 4)]
        assert len({services[n]["environment"]["CLUSTER_ID"] for n in nodes}) == 1
        for n in nodes:
            env = services[n]["environment"]
            assert env["KAFKA_DEFAULT_REPLICATION_FACTOR"] == env["KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR"] == \
                env["KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR"] == str(REPLICATION_FACTOR)
            assert env["KAFKA_MIN_INSYNC_REPLICAS"] == env["KAFKA_TRANSACTION_STATE_LOG_MIN_ISR"] == \
                str(MIN_INSYNC_REPLICAS)


def test_compose_mirrors_have_the_topology_ids_and_flows() -> None:
    services = _services()
    for mirror in MIRRORS:
        service = services[mirror.instance_id]
        assert service["environment"]["MIRROR_CORE_INSTANCE_ID"] == mirror.instance_id
        command = service["command"]
        config_path = REPO / command[command.index("--config") + 1].removeprefix("/app/")
        config = load_config(config_path, validate_clients=False)
        assert [f.name for f in config.flows] == [mirror.flow], mirror
        assert config.flows[0].replication_factor == REPLICATION_FACTOR


def test_kubernetes_statefulset_and_systemd_unit_take_the_instance_id_from_their_name() -> None:
    docs = list(yaml.safe_load_all((REPO / "deploy" / "k8s" / "mirror-core.yaml").read_text()))
    sts = next(d for d in docs if d["kind"] == "StatefulSet")
    container = sts["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e for e in container["env"]}
    assert env["MIRROR_CORE_INSTANCE_ID"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert sts["spec"]["replicas"] == sum(1 for m in MIRRORS if m.flow == "dc1->dc2")
    unit = (REPO / "deploy" / "systemd" / "mirror-core@.service").read_text()
    assert re.search(r"^Environment=MIRROR_CORE_INSTANCE_ID=%i$", unit, re.MULTILINE)
    assert re.search(r"^ExecStart=.*mirror-core run --config ", unit, re.MULTILINE)
