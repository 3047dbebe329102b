"""The dev cluster's port picker: ports are chosen long before brokers bind them, so one process must never be
handed the same port twice (a system-test session once got one port for two clusters' nodes)."""

from __future__ import annotations

import pytest

from mirror_core.devcluster import local_cluster
from mirror_core.devcluster.local_cluster import free_port


def test_a_port_the_kernel_offers_again_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    first = free_port()
    offered = iter([first, first, first + 1 if first < 65535 else first - 1])

    class Socket:
        """A socket whose bind(0) offers the port already handed out, twice, before a new one."""

        def __init__(self, *_: object) -> None:
            self.port = next(offered)

        def __enter__(self) -> Socket:
            return self

        def __exit__(self, *_: object) -> None:
            return None

        def bind(self, _: object) -> None:
            return None

        def getsockname(self) -> tuple[str, int]:
            return ("127.0.0.1", self.port)

    monkeypatch.setattr(local_cluster.socket, "socket", Socket)
    second = free_port()
    assert second != first


def test_many_ports_are_all_distinct() -> None:
    ports = [free_port() for _ in range(300)]
    assert len(set(ports)) == len(ports)
