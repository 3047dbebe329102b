"""Which remote topics deletion propagation considers orphaned (no brokers)."""

from __future__ import annotations

from mirror_core.config.loader import parse_text
from mirror_core.topic_deletions import orphans

BASE = "clusters = dc1, dc2\ndc1.bootstrap.servers = h:1\ndc2.bootstrap.servers = h:2\ndc1->dc2.enabled = true\n"


def test_remote_topics_of_the_flow_whose_source_is_gone() -> None:
    flow = parse_text(BASE + "dc1->dc2.topics = app.*\n", validate_clients=False).flow("dc1->dc2")
    remote = {"dc1.app.a", "dc1.app.b", "dc1.other", "dc3.app.c", "app.local", "dc1.heartbeats"}
    assert orphans(flow, {"app.a"}, remote, set()) == {"dc1.app.b": "app.b"}


def test_identity_policy_only_topics_the_mirror_copied() -> None:
    config = parse_text(BASE + "replication.policy.class = IdentityReplicationPolicy\n", validate_clients=False)
    flow = config.flow("dc1->dc2")
    assert orphans(flow, {"a"}, {"a", "b", "target-own"}, {"a", "b"}) == {"b": "b"}
