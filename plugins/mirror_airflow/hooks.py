"""Hooks that own connections: Kafka cluster admin access from an Airflow connection."""

from __future__ import annotations

import json
from typing import Any

from airflow.sdk import BaseHook
from confluent_kafka.admin import AdminClient


class KafkaClusterHook(BaseHook):
    """Admin access to one Kafka cluster; the connection's extra holds librdkafka settings
    (``bootstrap.servers`` plus any security settings), as `make airflow` derives them from the
    mirror config."""

    conn_name_attr = "kafka_conn_id"
    default_conn_name = "kafka_dc1"
    conn_type = "generic"
    hook_name = "Kafka cluster (mirror_core)"

    def __init__(self, kafka_conn_id: str = default_conn_name) -> None:
        super().__init__()
        self.kafka_conn_id = kafka_conn_id

    def client_settings(self) -> dict[str, Any]:
        conn = self.get_connection(self.kafka_conn_id)
        extra = conn.extra_dejson if hasattr(conn, "extra_dejson") else json.loads(conn.extra or "{}")
        settings = {k: str(v) for k, v in extra.items()}
        if "bootstrap.servers" not in settings and conn.host:
            settings["bootstrap.servers"] = f"{conn.host}:{conn.port or 9092}"
        if "bootstrap.servers" not in settings:
            raise ValueError(f"connection {self.kafka_conn_id} has no bootstrap servers")
        return settings

    def get_conn(self) -> AdminClient:
        from mirror_core.config.sasl import client_conf

        return AdminClient(client_conf(self.client_settings()))

    def test_connection(self) -> tuple[bool, str]:
        """(ok, message); on failure the message says why (authentication, TLS, unknown host), never a secret."""
        from mirror_core.clients import ClusterHealth, explain_failure
        from mirror_core.config.sasl import client_conf

        health = ClusterHealth(self.kafka_conn_id)
        admin = AdminClient({**client_conf(self.client_settings()), "error_cb": health.error_cb, "log_level": 0})
        try:
            md = admin.list_topics(timeout=10)
            return True, f"{len(md.brokers)} broker(s), {len(md.topics)} topic(s)"
        except Exception as exc:
            return False, explain_failure(exc, (admin, health))
