"""What the Airflow side needs from mirror_core, importable without Airflow.

The DAGs find the mirror configuration through ``MIRROR_CORE_CONFIG`` (an mm2.properties path,
default ``examples/mm2.properties``) and the state store through ``MIRROR_CORE_DB_URL``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from mirror_core.config.loader import load_config
from mirror_core.config.model import MirrorConfig

REPO = Path(__file__).resolve().parents[1]


def config_path() -> Path:
    return Path(os.environ.get("MIRROR_CORE_CONFIG", REPO / "examples" / "mm2.properties"))


def load_mirror_config() -> MirrorConfig:
    return load_config(config_path(), validate_clients=False)


def connection_id(alias: str) -> str:
    return f"kafka_{alias}"


def airflow_connections(config: MirrorConfig) -> dict[str, str]:
    """``AIRFLOW_CONN_*`` environment values (JSON) for every cluster of the config.

    The admin-client settings go to the connection's extra; secrets stay in the connection (which
    Airflow masks), never in logs.
    """
    out = {}
    for alias, cluster in config.clusters.items():
        extra = dict(cluster.clients.get("admin", {}))
        extra["bootstrap.servers"] = cluster.bootstrap_servers
        out[f"AIRFLOW_CONN_{connection_id(alias).upper()}"] = json.dumps(
            {"conn_type": "generic", "description": f"Kafka cluster {alias} (from {config.source_path})",
             "extra": extra})
    return out
