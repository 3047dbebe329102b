"""Session fixtures of the system test (`make system-test`): the two 3-node KRaft clusters, the PostgreSQL
state store and the mirror fleet of tests/system/topology.py, each started once, on first use.

``clusters`` overrides the single-node pair of tests/conftest.py under tests/system: the same shape
(alias -> object with ``.bootstrap``), so a module written against the session clusters runs here on the
3-node ones unchanged.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from mirror_core.devcluster.multi_node import MultiNodeCluster
from mirror_core.state.store import StateStore
from tests.pg_harness import postgres_server
from tests.system.kafka_topology import MirrorFleet, new_clusters


@pytest.fixture(scope="session")
def clusters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, MultiNodeCluster]]:
    """dc1 and dc2: three combined broker+controller nodes each (RF 3, min.insync.replicas 2); a test may
    kill and restart single nodes (``kill_node``/``start_node``) and must leave all of them running."""
    pair = new_clusters(tmp_path_factory.mktemp("kafka3"))
    try:
        for c in pair.values():
            c.start()
        yield pair
    finally:
        for c in pair.values():
            c.stop()


@pytest.fixture(scope="session")
def state_db() -> Iterator[str]:
    """SQLAlchemy URL of a throwaway PostgreSQL database with mirror_core's state-store schema."""
    with postgres_server() as url:
        StateStore(url).migrate()  # once, before several mirrors would race to migrate it
        yield url


@pytest.fixture(scope="session")
def mirror_fleet(clusters: dict[str, MultiNodeCluster], state_db: str,
                 tmp_path_factory: pytest.TempPathFactory) -> Iterator[MirrorFleet]:
    """The four mirror processes (tests/system/topology.MIRRORS) on ``clusters`` and ``state_db``."""
    fleet = MirrorFleet(clusters, state_db, tmp_path_factory.mktemp("mirrors"))
    try:
        yield fleet.start()
    finally:
        fleet.stop()
