"""ACL sync decisions without brokers: what is copied where, what the sync may remove, whose ACLs are the mirror's."""

from __future__ import annotations

from typing import Any

from mirror_core.config.loader import parse_text
from mirror_core.replication.acls import AclRule, AclSync, principals_of

BASE = "clusters = dc1, dc2\ndc1.bootstrap.servers = h:1\ndc2.bootstrap.servers = h:2\ndc1->dc2.enabled = true\n"


def sync(*lines: str) -> AclSync:
    config = parse_text(BASE + "".join(f"{line}\n" for line in lines), validate_clients=False)
    none: Any = None
    return AclSync(config.flow("dc1->dc2"), none, none, frozenset({"User:mirror"}))


def rule(resource: str, name: str, pattern: str = "LITERAL", who: str = "User:app", op: str = "READ",
         perm: str = "ALLOW") -> AclRule:
    return AclRule(resource, name, pattern, who, "*", op, perm)


def test_names_are_mapped_through_the_policy_and_groups_kept() -> None:
    s = sync("dc1->dc2.groups = app-.*")
    topics = {"orders", "payments"}
    assert s.remote(rule("TOPIC", "orders"), topics) == rule("TOPIC", "dc1.orders")
    assert s.remote(rule("TOPIC", "ord", "PREFIXED"), topics) == rule("TOPIC", "dc1.ord", "PREFIXED")
    assert s.remote(rule("TOPIC", "inv", "PREFIXED"), topics) is None  # applies to no replicated topic
    assert s.remote(rule("TOPIC", "other"), topics) is None
    assert s.remote(rule("GROUP", "app-1"), topics) == rule("GROUP", "app-1")
    assert s.remote(rule("GROUP", "batch"), topics) is None  # not a group of the flow
    assert s.remote(rule("TOPIC", "orders", op="WRITE"), topics) is None  # read-only
    assert s.remote(rule("TOPIC", "orders", op="ALL"), topics) == rule("TOPIC", "dc1.orders")  # ALL -> READ
    assert s.remote(rule("TOPIC", "orders", op="ALL", perm="DENY"), topics) == rule("TOPIC", "dc1.orders", op="ALL",
                                                                                 perm="DENY")
    assert s.remote(rule("TOPIC", "orders", who="User:mirror"), topics) is None  # the mirror's own
    assert s.remote(rule("TOPIC", "*"), topics) is None  # a wildcard would reach target-local topics


def test_identity_policy_keeps_names() -> None:
    s = sync("replication.policy.class = IdentityReplicationPolicy")
    assert s.remote(rule("TOPIC", "ord", "PREFIXED"), {"orders"}) == rule("TOPIC", "ord", "PREFIXED")


def test_what_the_sync_may_remove() -> None:
    s = sync()
    remotes = {"dc1.orders"}
    assert s.managed(rule("TOPIC", "dc1.orders"), remotes)
    assert s.managed(rule("TOPIC", "dc1.o", "PREFIXED"), remotes)  # in the source's remote namespace
    assert not s.managed(rule("TOPIC", "orders"), remotes)  # a target-local topic
    assert not s.managed(rule("TOPIC", "dc1.orders", op="WRITE"), remotes)  # producers' grants
    assert not s.managed(rule("TOPIC", "dc1.orders", who="User:mirror"), remotes)
    assert not s.managed(rule("GROUP", "app"), remotes)  # never seen on the source: target-local
    s.previous = {rule("GROUP", "app")}
    assert s.managed(rule("GROUP", "app"), remotes)  # copied before, revoked since


def test_the_mirrors_principal_from_its_settings() -> None:
    assert principals_of({}) == {"User:ANONYMOUS"}
    assert principals_of({"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
                          "sasl.username": "mirror"}) == {"User:mirror"}
    assert principals_of({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "GSSAPI",
                          "sasl.kerberos.principal": "mirror/host@EXAMPLE.COM"}) == {"User:mirror"}
    assert principals_of({"security.protocol": "SSL", "ssl.certificate.location": "/c.pem"}) == set()
    assert principals_of({"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER"}) == set()
    config = parse_text(BASE + "mirror.principals = User:CN=mirror\n", validate_clients=False)
    assert config.flow("dc1->dc2").mirror_principals == ("User:CN=mirror",)


def test_the_running_mirrors_acl_changes_go_to_the_drift_history(tmp_path: Any) -> None:
    from mirror_core.replication.topic_changes import TopicChange
    from mirror_core.state.store import StateStore
    from mirror_core.topic_sync import record_watcher_changes

    store = StateStore(f"sqlite:///{tmp_path / 'state.db'}")
    store.migrate()
    assert record_watcher_changes(store, "dc1->dc2", []) is None
    record_watcher_changes(store, "dc1->dc2", [TopicChange("acl-removed", "dc1.orders", "ALLOW User:app@* READ")])
    assert [(d.topic, d.kind, d.action) for d in store.recent_drift("dc1->dc2")] == [
        ("dc1.orders", "acl-removed", "applied")]
    assert store.sync_runs("dc1->dc2")[0].status == "drift"
