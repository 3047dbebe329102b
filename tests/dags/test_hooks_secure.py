"""The plugin's hook and lag sensor against a SASL_SSL (SCRAM-SHA-512, TLS) cluster, with connections
derived from the mirror config."""

from __future__ import annotations

from pathlib import Path

import pytest

from mirror_core.airflow_support import airflow_connections
from mirror_core.config.loader import load_config
from tests.kafka_harness import create_topic, write_config
from tests.security_harness import running_secure_cluster

PASSWORD = "Hk7-scram-hook-S3CRET-9021"


def test_hook_and_sensor_over_sasl_ssl(dc2, name, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with running_secure_cluster("dc1s", tmp_path / "kafka", PASSWORD) as secure:
        topic = f"{name}.secure"
        create_topic(secure.plain_bootstrap, topic, 1)
        config_path = write_config(tmp_path / "mm2.properties", {"dc1s": secure.sasl_bootstrap, "dc2": dc2},
                                   [*secure.lines("dc1s"), "dc1s->dc2.enabled = true", f"dc1s->dc2.topics = {name}.*",
                                    "emit.heartbeats.enabled = false"])
        for key, value in airflow_connections(load_config(config_path)).items():
            monkeypatch.setenv(key, value)
        monkeypatch.setenv("MIRROR_CORE_CONFIG", str(config_path))
        from mirror_airflow.hooks import KafkaClusterHook
        from mirror_airflow.sensors import ReplicationLagSensor

        hook = KafkaClusterHook("kafka_dc1s")
        assert hook.client_settings()["security.protocol"] == "SASL_SSL"
        ok, message = hook.test_connection()
        assert ok, message
        assert topic in hook.get_conn().list_topics(timeout=10).topics
        assert ReplicationLagSensor(task_id="lag", flow="dc1s->dc2", max_lag=0).poke({}) is True  # empty topic

        wrong = write_config(tmp_path / "wrong.properties", {"dc1s": secure.sasl_bootstrap, "dc2": dc2},
                             [*secure.lines("dc1s", "not-the-password"), "dc1s->dc2.enabled = true"])
        for key, value in airflow_connections(load_config(wrong)).items():
            monkeypatch.setenv(key, value)
        ok, message = KafkaClusterHook("kafka_dc1s").test_connection()
        assert not ok and "authentication failed" in message and "not-the-password" not in message, message
