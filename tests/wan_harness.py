"""The WAN in tests: a toxiproxy proxy in front of a cluster's WAN listener (kafka_harness.new_cluster
with ``wan=True``), and what the WAN tests measure (lag, reachability, catch-up)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from mirror_core.devcluster.local_cluster import LocalCluster
from mirror_core.devcluster.toxiproxy import Toxic, Toxiproxy
from tests.kafka_harness import MirrorProcess, Rec


@dataclass(frozen=True)
class WanLink:
    """The proxy named after the cluster: every client on :attr:`bootstrap` crosses it, for every broker."""

    proxy: Toxiproxy
    cluster: LocalCluster

    @property
    def name(self) -> str:
        return self.cluster.name

    @property
    def bootstrap(self) -> str:
        return self.cluster.bootstrap_for("WAN")

    def open(self) -> WanLink:
        """(Re)create the proxy, clean: no toxics, enabled."""
        self.proxy.create_proxy(self.name, self.cluster.advertised_ports["WAN"],
                                f"127.0.0.1:{self.cluster.extra_listeners['WAN']}")
        return self

    def toxic(self, toxic: Toxic) -> None:
        self.proxy.set_toxic(self.name, toxic)

    def set_enabled(self, enabled: bool) -> None:
        self.proxy.set_enabled(self.name, enabled)

    @contextmanager
    def partitioned(self) -> Iterator[None]:
        self.set_enabled(False)
        try:
            yield
        finally:
            self.set_enabled(True)

    def clear(self) -> None:
        self.proxy.clear(self.name)


def target_reachable(m: MirrorProcess) -> bool | None:
    """``target_reachable`` of the mirror's first flow in /status (None: no answer)."""
    flows = (m.status() or {}).get("flows") or []
    return bool(flows[0].get("target_reachable")) if flows else None


def catch_up(m: MirrorProcess, topic: str, total: int, timeout: float) -> tuple[float, float]:
    """Wait until the mirror acknowledged ``total`` records of ``topic``; (seconds, records/s) of the catch-up."""
    from tests.kafka_harness import copied_by, wait_until

    start, before = time.monotonic(), sum(copied_by(m, topic).values())
    wait_until(lambda: sum(copied_by(m, topic).values()) >= total, timeout, 0.2, f"{topic}: {total} copied")
    took = time.monotonic() - start
    return took, (total - before) / took if took > 0 else float("inf")


def delivered_in_order(src: list[Rec], dst: list[Rec]) -> int:
    """Asserts every source record is on the target, in source order per partition (a record copied twice
    may repeat right after its first copy, at-least-once); returns the number of duplicates."""
    dups = 0
    for part in {r.partition for r in src}:
        expected = [r.value for r in src if r.partition == part]
        got = [r.value for r in dst if r.partition == part]
        firsts = list(dict.fromkeys(got))
        missing = set(expected) - set(got)
        assert firsts == expected, f"partition {part}: {len(missing)} missing, {len(got)} copies; order differs"
        dups += len(got) - len(firsts)
    return dups


def report(**figures: object) -> None:
    """One line the WAN suite prints (``make wan-test`` shows it): what the test measured."""
    print("WAN " + " ".join(f"{k}={v:.2f}" if isinstance(v, float) else f"{k}={v}" for k, v in figures.items()),
          flush=True)
