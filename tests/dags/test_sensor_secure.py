"""The plugin's lag sensor against a SASL_SSL (SCRAM-SHA-512, TLS) cluster, its settings (secrets included)
from the mirror config, as every DAG reads them; a wrong password is one clear line without the secret."""

from __future__ import annotations

from pathlib import Path

import pytest

from mirror_core.config.loader import load_config
from mirror_core.status import flow_status
from tests.kafka_harness import create_topic, write_config
from tests.security_harness import running_secure_cluster

PASSWORD = "Hk7-scram-hook-S3CRET-9021"


def test_sensor_over_sasl_ssl(dc2, name, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with running_secure_cluster("dc1s", tmp_path / "kafka", PASSWORD) as secure:
        topic = f"{name}.secure"
        create_topic(secure.plain_bootstrap, topic, 1)
        config_path = write_config(tmp_path / "mm2.properties", {"dc1s": secure.sasl_bootstrap, "dc2": dc2},
                                   [*secure.lines("dc1s"), "dc1s->dc2.enabled = true", f"dc1s->dc2.topics = {name}.*",
                                    "emit.heartbeats.enabled = false"])
        monkeypatch.setenv("MIRROR_CORE_CONFIG", str(config_path))
        from mirror_airflow.sensors import ReplicationLagSensor

        assert ReplicationLagSensor(task_id="lag", flow="dc1s->dc2", max_lag=0).poke({}) is True  # empty topic
        status = flow_status(load_config(config_path), load_config(config_path).flow("dc1s->dc2"))
        assert status.reachable and topic in {p.topic for p in status.partitions}, status

        wrong = write_config(tmp_path / "wrong.properties", {"dc1s": secure.sasl_bootstrap, "dc2": dc2},
                             [*secure.lines("dc1s", "not-the-password"), "dc1s->dc2.enabled = true"])
        config = load_config(wrong)
        status = flow_status(config, config.flow("dc1s->dc2"))
        assert not status.reachable and status.unreachable_cluster == "dc1s", status
        assert "authentication failed" in (status.error or "") and "not-the-password" not in (status.error or "")
