"""Client quotas copied to the target (the cutover's step), proved with a really throttled client."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from mirror_core.config.loader import load_config
from mirror_core.devcluster.local_cluster import LocalCluster
from mirror_core.quotas import Entity, alter_quotas, copy_quotas, describe_quotas, record_quota_changes
from mirror_core.state.store import StateStore
from tests.kafka_harness import create_topic, wait_until, write_config


def throttled_ms(bootstrap: str, topic: str, client_id: str, seconds: float = 6.0) -> int:
    """The throttle time the cluster gave a producer with this client.id writing 2 MB as fast as it can."""
    throttles: list[int] = []

    def on_throttle(event: Any) -> None:
        throttles.append(int(event.throttle_time * 1000))

    p = Producer({"bootstrap.servers": bootstrap, "client.id": client_id, "throttle_cb": on_throttle,
                  "linger.ms": 5, "log_level": "3"})
    deadline = time.monotonic() + seconds
    for _ in range(200):
        p.produce(topic, b"x" * 10_000)
        p.poll(0)
    while time.monotonic() < deadline and not throttles and len(p):
        p.poll(0.2)
    p.purge()
    p.flush(2)
    return sum(throttles)


def test_client_quotas_are_copied_and_a_client_is_really_throttled(clusters: dict[str, LocalCluster], name: str,
                                                                     tmp_path: Path) -> None:
    dc1, dc2 = clusters["dc1"].bootstrap, clusters["dc2"].bootstrap
    config = load_config(write_config(tmp_path / "mm2.properties", {"dc1": dc1, "dc2": dc2},
                                      ["dc1->dc2.enabled = true", f"dc1->dc2.topics = {name}.*"]))
    src, tgt = config.cluster("dc1"), config.cluster("dc2")
    client = f"{name}-app"
    entity: Entity = (("client-id", client),)
    user: Entity = (("client-id", client), ("user", f"{name}-u"))
    topic = f"{name}.q"
    create_topic(dc2, topic)
    store = StateStore(f"sqlite:///{tmp_path / 'state.db'}")
    store.migrate()
    try:
        assert throttled_ms(dc2, topic, client) == 0  # precondition: the target does not throttle it yet
        alter_quotas(src, {entity: {"producer_byte_rate": 4096.0, "consumer_byte_rate": 8192.0},
                           user: {"request_percentage": 50.0}}, validate_only=False)
        wait_until(lambda: {entity, user} <= set(describe_quotas(src)), 10, what="the quotas on the source")

        dry = copy_quotas(src, tgt, dry_run=True)
        record_quota_changes(store, "dc1->dc2", dry, True)
        mine = [c for c in dry if client in c.entity]
        assert [(c.entity, c.key, c.before, c.after) for c in mine] == [
            (f"client-id={client}", "consumer_byte_rate", None, 8192.0),
            (f"client-id={client}", "producer_byte_rate", None, 4096.0),
            (f"client-id={client},user={name}-u", "request_percentage", None, 50.0)]
        assert entity not in describe_quotas(tgt)  # a dry run changes nothing

        applied = copy_quotas(src, tgt)
        record_quota_changes(store, "dc1->dc2", applied, False)
        assert applied == dry
        wait_until(lambda: describe_quotas(tgt).get(entity) == {"producer_byte_rate": 4096.0,
                                                                "consumer_byte_rate": 8192.0},
                   10, what="the quotas on the target")  # the brokers learn them from the controller
        assert copy_quotas(src, tgt) == []  # idempotent
        waited = throttled_ms(dc2, topic, client)
        assert waited > 0  # the migrated client meets the source's throttling
        rows = {(d.topic, d.kind, d.action) for d in store.recent_drift("dc1->dc2")}
        assert {(f"client-id={client}", "quota", "proposed"), (f"client-id={client}", "quota", "applied")} <= rows
    finally:
        for cluster in (src, tgt):
            alter_quotas(cluster, {entity: {"producer_byte_rate": None, "consumer_byte_rate": None},
                                   user: {"request_percentage": None}}, validate_only=False)
