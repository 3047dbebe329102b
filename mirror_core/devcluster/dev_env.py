"""``mirror-core dev up|down|status``: the two local clusters (dc1, dc2) used by the demo."""

from __future__ import annotations

import os
from pathlib import Path

from mirror_core.devcluster.local_cluster import LocalCluster

DEFAULT_CLUSTERS = ("dc1", "dc2")
# Fixed ports so examples/mm2.properties works unchanged: dc1 -> 19092, dc2 -> 29092.
BASE_PORTS = {"dc1": 19092, "dc2": 29092}


def dev_home() -> Path:
    return Path(os.environ.get("MIRROR_CORE_DEV_HOME", Path.cwd() / ".dev"))


def dev_cluster(name: str, index: int) -> LocalCluster:
    home = dev_home() / name
    if (home / "cluster.json").exists():
        return LocalCluster.load(home)
    # MIRROR_CORE_DEV_PORT_OFFSET shifts every port (e.g. to run the demo beside other clusters).
    offset = int(os.environ.get("MIRROR_CORE_DEV_PORT_OFFSET", "0"))
    port = BASE_PORTS.get(name, 39092 + 10000 * index) + offset
    return LocalCluster(name=name, base_dir=home, port=port, controller_port=port + 1)


def dev_clusters(names: tuple[str, ...] = DEFAULT_CLUSTERS) -> list[LocalCluster]:
    return [dev_cluster(n, i) for i, n in enumerate(names)]
