"""Session fixtures: two real KRaft clusters (started once), unique names, mirror processes."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from mirror_core.devcluster.local_cluster import LocalCluster, free_port
from mirror_core.devcluster.toxiproxy import Toxiproxy, ToxiproxyServer
from tests.kafka_harness import MirrorProcess, new_cluster, unique, write_config
from tests.registry_harness import RegistryServer, registry_jar
from tests.wan_harness import WanLink


@pytest.fixture(scope="session")
def clusters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, LocalCluster]]:
    """dc1 and dc2: independent single-node KRaft clusters on loopback, for the whole session (dc1 also
    has the non-super ``app`` user: kafka_harness.app_client; dc2 a WAN listener: the ``wan`` fixture)."""
    root = tmp_path_factory.mktemp("kafka")
    pair = {"dc1": new_cluster("dc1", root, app_user=True), "dc2": new_cluster("dc2", root, wan=True)}
    try:
        for c in pair.values():
            c.start()
        yield pair
    finally:
        for c in pair.values():
            c.stop()


@pytest.fixture(scope="session")
def registries(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RegistryServer, RegistryServer]]:
    """Two real schema registries (Apicurio, Confluent-compatible API) on loopback, for the whole session: the
    source's and the target's (started only by tests that use them)."""
    jar = registry_jar()
    a = RegistryServer(tmp_path_factory.mktemp("registry-src"), jar).start()
    try:
        b = RegistryServer(tmp_path_factory.mktemp("registry-tgt"), jar).start()
        try:
            yield a, b
        finally:
            b.stop()
    finally:
        a.stop()


@pytest.fixture
def dc1(clusters: dict[str, LocalCluster]) -> str:
    return clusters["dc1"].bootstrap


@pytest.fixture
def dc2(clusters: dict[str, LocalCluster]) -> str:
    return clusters["dc2"].bootstrap


@pytest.fixture
def name() -> str:
    """A unique topic-name prefix for one test."""
    return unique("t")


@pytest.fixture
def mirrors(tmp_path: Path) -> Iterator[list[MirrorProcess]]:
    """Mirror processes started by a test; killed at the end whatever happens."""
    started: list[MirrorProcess] = []
    yield started
    for m in started:
        m.ensure_dead()


#: lines of each mirror's log a failed test's report shows (its warnings and errors, the newest last)
FAILURE_LOG_LINES = 60


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A failed test's report carries the warnings and errors of each mirror it started: a CI run keeps no files."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    started = getattr(item, "funcargs", {}).get("mirrors")
    if report.when != "call" or not report.failed or not started:
        return
    for m in started:
        try:
            lines = [line for line in m.log().splitlines() if " WARNING " in line or " ERROR " in line]
        except OSError as exc:
            lines = [f"(log not readable: {exc})"]
        report.sections.append((f"{m.log_path.name}: warnings and errors, last {FAILURE_LOG_LINES}",
                                "\n".join(lines[-FAILURE_LOG_LINES:])))


@pytest.fixture
def start_mirror(tmp_path: Path, mirrors: list[MirrorProcess], clusters: dict[str, LocalCluster]):  # type: ignore[no-untyped-def]
    """Write an mm2.properties for dc1/dc2 plus ``lines`` and start a mirror on it."""

    def start(lines: list[str], config: Path | None = None, name: str = "mirror",
              args: Sequence[str] = ()) -> MirrorProcess:
        if config is None:
            config = write_config(tmp_path / f"{unique('mm2-')}.properties",
                                  {a: c.bootstrap for a, c in clusters.items()}, lines)
        m = MirrorProcess(config, tmp_path, name, args).start()
        mirrors.append(m)
        return m

    return start


@pytest.fixture(scope="session")
def toxiproxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Toxiproxy]:
    """A toxiproxy-server for the session (started only by tests that use the WAN)."""
    server = ToxiproxyServer(tmp_path_factory.mktemp("toxiproxy"), free_port())
    try:
        yield server.start()
    finally:
        server.stop()


@pytest.fixture
def wan(toxiproxy: Toxiproxy, clusters: dict[str, LocalCluster]) -> Iterator[WanLink]:
    """The WAN in front of dc2, clean for each test (no toxics, enabled): clients on ``wan.bootstrap``
    reach dc2 only through it."""
    link = WanLink(toxiproxy, clusters["dc2"]).open()
    try:
        yield link
    finally:
        link.clear()
