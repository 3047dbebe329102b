"""cloud_migration_cutover end to end against two real clusters and a mirror obeying the control
plane: reject at the start changes nothing; reject at the end rolls every step back; approved to
the end, the groups and applications are on the target with exact offsets and nothing missing."""

from __future__ import annotations

from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AclBindingFilter, AclOperation, AclPermissionType, ResourcePatternType, ResourceType

from mirror_core.offsets.groups import commit_offsets, committed_offsets
from tests.dags.test_failover_dags import run, setup, states  # noqa: F401 - setup is a fixture
from tests.kafka_harness import admin, app_client, create_topic, end_offsets, produce_sequence, wait_until


def deny_acls(bootstrap: str, topic: str) -> int:
    flt = AclBindingFilter(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, None, None,
                           AclOperation.WRITE, AclPermissionType.DENY)
    a = admin(bootstrap)
    return len(a.describe_acls(flt, request_timeout=10).result(10))


def refused_write(client: dict[str, str], topic: str) -> KafkaError | None:
    """The error of one write by this principal (None: the write landed)."""
    errors: list[KafkaError | None] = []
    p = Producer({**client, "message.timeout.ms": 15000})
    p.produce(topic, b"after the cutover", partition=0, on_delivery=lambda err, _msg: errors.append(err))
    p.flush(20)
    assert len(errors) == 1
    return errors[0]


def test_cutover_reject_rollback_and_complete(dc1, dc2, name, setup, clusters) -> None:  # type: ignore[no-untyped-def] # noqa: F811
    store, mirror = setup
    app_client_conf = app_client(clusters["dc1"])  # not a super user: ACLs apply to it
    t, group, app = f"{name}.ledger", f"{name}-ledger-app", f"{name}-ledger"
    create_topic(dc1, t, 2)
    produce_sequence(dc1, t, 2, 40)
    commit_offsets(admin(dc1), group, {(t, 0): 10, (t, 1): 10})
    wait_until(lambda: end_offsets(dc2, f"dc1.{t}") == {0: 20, 1: 20}, 60, what="replicated")
    wait_until(lambda: all(p["lag"] == 0 for p in mirror.partitions() if p["topic"] == t), 30, what="progress")
    conf = {"source": "dc1", "target": "dc2", "topics": [t], "groups": [group], "apps": [app], "max_lag": 100,
            "deny_writes": True, "drain_timeout_s": 60}

    dr, gate = run("cloud_migration_cutover", conf, {"approve_start": "Reject"})
    assert dr.state == "failed" and states(dr)["drain"] == "skipped" and states(dr)["rollback"] == "failed"
    assert f"dc1.{t}" in gate.bodies["approve_start"]
    assert store.cutovers()[0].status == "rejected"
    assert deny_acls(dc1, t) == 0 and store.flow_controls() == {} and store.registry() == []

    # Approved up to the switch, rejected at the end: every step is undone.
    dr, _ = run("cloud_migration_cutover", conf, {"approve_start": "Approve",
                                                  "quiesce": "Producers are stopped on the source",
                                                  "final_approval": "Reject"})
    assert dr.state == "failed", states(dr)
    assert states(dr)["switch"] == "success" and states(dr)["done"] == "skipped" and states(dr)["rollback"] == "failed"
    record = store.cutovers()[0]
    assert record.status == "rolled-back", record.details
    assert deny_acls(dc1, t) == 0
    assert store.flow_controls()["dc1->dc2"].desired == "running"
    assert store.active_cluster(app).cluster == "dc1"  # type: ignore[union-attr]
    assert committed_offsets(admin(dc2), group) == {}

    # All the way: exact offsets on the target, applications moved, the flow stopped for good.
    # The application (a non-super principal) writes to the source before the cutover: it may.
    produce_sequence(dc1, t, 2, 10, start=40, **app_client_conf)
    assert end_offsets(dc1, t) == {0: 25, 1: 25}
    dr, _ = run("cloud_migration_cutover", conf, {"approve_start": "Approve",
                                                  "quiesce": "Producers are stopped on the source",
                                                  "final_approval": "Approve"})
    assert dr.state == "success", states(dr)
    record = store.cutovers()[0]
    assert record.status == "done"
    assert record.details["completeness"]["records"] == 50
    assert committed_offsets(admin(dc2), group) == {(f"dc1.{t}", 0): 10, (f"dc1.{t}", 1): 10}
    assert store.active_cluster(app).cluster == "dc2"  # type: ignore[union-attr]
    assert store.flow_controls()["dc1->dc2"].desired == "stopped"
    assert deny_acls(dc1, t) == 1  # producers stay fenced off the old cluster
    # ... and the DENY really fences them: the same application's write is refused and nothing lands.
    err = refused_write(app_client_conf, t)
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, err
    assert end_offsets(dc1, t) == {0: 25, 1: 25}
    assert end_offsets(dc2, f"dc1.{t}") == {0: 25, 1: 25}
