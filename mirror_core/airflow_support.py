"""What the Airflow side needs from mirror_core, importable without Airflow.

The DAGs find the mirror configuration through ``MIRROR_CORE_CONFIG`` (an mm2.properties path,
default ``examples/mm2.properties``) and the state store through ``MIRROR_CORE_DB_URL``. Cluster
settings and their secrets come from that config only (its config providers resolve them, and
the values are handed to Airflow's masker), as for the mirror service: no Airflow connection holds
a copy.
"""

from __future__ import annotations

import os
from pathlib import Path

from mirror_core.config.loader import load_config
from mirror_core.config.model import MirrorConfig

REPO = Path(__file__).resolve().parents[1]


def config_path() -> Path:
    return Path(os.environ.get("MIRROR_CORE_CONFIG", REPO / "examples" / "mm2.properties"))


def load_mirror_config() -> MirrorConfig:
    return load_config(config_path(), validate_clients=False)
