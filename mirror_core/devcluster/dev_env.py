"""``mirror-core dev up|down|status``: the two local clusters (dc1, dc2) used by the demo."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

from mirror_core.devcluster.local_cluster import ClusterStartError, LocalCluster
from mirror_core.devcluster.toxiproxy import ToxiproxyServer
from mirror_core.devcluster.wan_spec import WanSpec, WanSpecError

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


def start_clusters(clusters: list[LocalCluster], started: Callable[[LocalCluster, bool, float], None]) -> None:
    """Start each cluster in turn, calling ``started(cluster, was_running, seconds)`` after each. When one cannot
    start (a port taken, a broker that exits) stop it and the ones this call started, so nothing is left
    running that was not before, and raise ClusterStartError saying which were stopped again."""
    ours: list[LocalCluster] = []
    for c in clusters:
        t0, was_running = time.monotonic(), c.is_running()
        try:
            c.start()
        except ClusterStartError as exc:
            for done in (*ours, c):
                done.stop()
            undone = f"; stopped again: {', '.join(x.name for x in ours)}" if ours else ""
            raise ClusterStartError(f"{exc}{undone}") from exc
        if not was_running:
            ours.append(c)
        started(c, was_running, time.monotonic() - t0)


# `dev up --wan`: the cluster's WAN listener binds port+2 and is advertised on port+3, where toxiproxy listens.
TOXIPROXY_API_PORT = 18474


def dev_toxiproxy() -> ToxiproxyServer:
    offset = int(os.environ.get("MIRROR_CORE_DEV_PORT_OFFSET", "0"))
    return ToxiproxyServer(dev_home() / "toxiproxy", TOXIPROXY_API_PORT + offset)


def add_wan_listener(cluster: LocalCluster) -> None:
    """Give a stopped cluster its WAN listener (kept in cluster.json); a running one must be restarted."""
    if "WAN" in cluster.extra_listeners:
        return
    if cluster.is_running():
        raise WanSpecError(f"--wan: {cluster.name} runs without a WAN listener; run `mirror-core dev down` "
                           "first, then `mirror-core dev up --wan ...`")
    cluster.extra_listeners["WAN"] = cluster.port + 2
    cluster.advertised_ports["WAN"] = cluster.port + 3


def start_wan(cluster: LocalCluster, spec: WanSpec) -> str:
    """Start toxiproxy (if needed), put a proxy with the spec's toxics in front of the cluster's WAN
    listener; returns the line ``dev up`` prints."""
    server = dev_toxiproxy()
    client = server.start()
    client.create_proxy(cluster.name, cluster.advertised_ports["WAN"],
                        f"127.0.0.1:{cluster.extra_listeners['WAN']}")
    for toxic in spec.toxics():
        client.add_toxic(cluster.name, toxic)
    return (f"{cluster.name}: WAN bootstrap {cluster.bootstrap_for('WAN')} ({spec.describe()}; toxiproxy API "
            f"http://127.0.0.1:{server.api_port}, log {server.base_dir / 'toxiproxy.log'})")
