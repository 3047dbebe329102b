"""docker-compose.yml refers to things that exist and agree with the code (no Docker engine here)."""

from pathlib import Path

import yaml

from mirror_core.config.loader import load_config
from mirror_core.devcluster.kafka_dist import KAFKA_VERSION

REPO = Path(__file__).resolve().parents[2]


def test_compose_file_is_consistent() -> None:
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    services = compose["services"]
    for name in ("kafka-dc1", "kafka-dc2"):
        assert services[name]["image"] == f"apache/kafka:{KAFKA_VERSION}"
        assert "healthcheck" in services[name]
    mirror = services["mirror"]
    assert (REPO / mirror["build"]["context"] / mirror["build"]["dockerfile"]).exists()
    config_arg = mirror["command"][mirror["command"].index("--config") + 1]
    local_config = REPO / config_arg.removeprefix("/app/")
    config = load_config(local_config, validate_clients=False)
    hosts = {c.bootstrap_servers.split(":")[0] for c in config.clusters.values()}
    assert hosts == {"kafka-dc1", "kafka-dc2"}
    port = mirror["command"][mirror["command"].index("--metrics-port") + 1]
    assert f"{port}:{port}" in mirror["ports"]
    assert set(mirror["depends_on"]) == {"kafka-dc1", "kafka-dc2"}
    dockerfile = (REPO / "Dockerfile").read_text()
    assert "constraints.txt" in dockerfile and "examples" in dockerfile
