from mirror_core.policy import IdentityReplicationPolicy, ReplicationPolicy, policy_from_name


def test_default_policy_names_and_cycles() -> None:
    p = ReplicationPolicy(".")
    assert p.format_remote_topic("dc1", "orders") == "dc1.orders"
    assert p.topic_source("dc1.orders") == "dc1" and p.upstream_topic("dc1.orders") == "orders"
    assert p.topic_source("orders") is None
    assert p.is_cycle("dc2.orders", "dc2")
    assert p.is_cycle("dc3.dc2.orders", "dc2")  # multi-hop
    assert not p.is_cycle("dc1.orders", "dc2")
    assert ReplicationPolicy("_").format_remote_topic("dc1", "a") == "dc1_a"


def test_identity_policy_keeps_names_but_not_for_heartbeats() -> None:
    p = policy_from_name("org.apache.kafka.connect.mirror.IdentityReplicationPolicy", ".")
    assert isinstance(p, IdentityReplicationPolicy) and p.uses_provenance
    assert p.format_remote_topic("dc1", "orders") == "orders"
    assert p.format_remote_topic("dc1", "heartbeats") == "dc1.heartbeats"
    assert not p.is_cycle("orders", "dc1")


def test_internal_topics() -> None:
    p = ReplicationPolicy(".")
    for t in ("__consumer_offsets", ".hidden", "mm2-offset-syncs.dc2.internal", "connect-configs-internal",
              "mirror-core.progress.dc1.internal"):
        assert p.is_internal_topic(t)
    assert not p.is_internal_topic("orders")
