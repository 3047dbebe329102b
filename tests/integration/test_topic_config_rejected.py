"""A topic config the target rejects never stops a flow: the topic is created (or synced) without it,
records keep flowing, and the rejection is reported (log, errors metric, /status event, refused drift).

The target here is a cluster of its own whose default ``max.compaction.lag.ms`` is one hour: a source
topic's ``min.compaction.lag.ms`` of two hours is valid on the source and conflicts with that default
on the target (Kafka refuses min > max), the way a differently configured cluster refuses a config.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import ConfigResource, ConfigSource, ResourceType

from mirror_core.devcluster.local_cluster import LocalCluster
from mirror_core.state.store import StateStore
from tests.integration.conftest import flow_lines
from tests.integration.test_topic_sync import run_sync
from tests.kafka_harness import (
    admin,
    alter_topic,
    create_topic,
    end_offsets,
    new_cluster,
    produce_sequence,
    topics,
    wait_until,
    write_config,
)

REJECTED = {"min.compaction.lag.ms": "7200000"}  # > the strict target's default max.compaction.lag.ms


@pytest.fixture(scope="module")
def strict(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    cluster: LocalCluster = new_cluster("strict", tmp_path_factory.mktemp("strict"),
                                        **{"log.cleaner.max.compaction.lag.ms": "3600000"})
    cluster.start()
    try:
        yield cluster.bootstrap
    finally:
        cluster.stop()


def explicit(bootstrap: str, topic: str) -> dict[str, str]:
    client = admin(bootstrap)
    res = ConfigResource(ResourceType.TOPIC, topic)
    entries = client.describe_configs([res])[res].result(10)
    return {k: e.value for k, e in entries.items() if e.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value}


def rejection_events(m, topic: str) -> list[dict]:  # type: ignore[no-untyped-def]
    events = ((m.status() or {}).get("flows") or [{}])[0].get("events", [])
    return [e for e in events if e["event"] == "topic config rejected by the target" and e["topic"] == topic]


def test_rejected_configs_never_stop_replication(dc1, strict, name, start_mirror, tmp_path: Path) -> None:
    # Created on the target without the config it rejects, with the others.
    born, remote_born = f"{name}.born", f"dc1.{name}.born"
    create_topic(dc1, born, 2, {**REJECTED, "retention.ms": "86400000"})
    produce_sequence(dc1, born, 2, 100)
    lines = flow_lines(name, flow="dc1->strict")
    config = write_config(tmp_path / "strict.properties", {"dc1": dc1, "strict": strict}, lines)
    m = start_mirror(lines, config=config)
    wait_until(lambda: end_offsets(strict, remote_born) == end_offsets(dc1, born), 60, what="replicated")
    assert explicit(strict, remote_born) == {"retention.ms": "86400000"}
    [event] = wait_until(lambda: rejection_events(m, remote_born), 30, what="creation rejection reported")
    assert "created without min.compaction.lag.ms=7200000" in event["detail"]
    assert "max.compaction.lag.ms" in event["detail"]  # the target's reason

    # A config change the target rejects: the rest of the change is applied, replication goes on.
    later, remote_later = f"{name}.later", f"dc1.{name}.later"
    create_topic(dc1, later, 1)
    produce_sequence(dc1, later, 1, 10)
    wait_until(lambda: end_offsets(strict, remote_later) == {0: 10}, 60, what="second topic replicated")
    alter_topic(dc1, later, {**REJECTED, "retention.ms": "43200000"})
    wait_until(lambda: explicit(strict, remote_later) == {"retention.ms": "43200000"}, 60,
               what="the accepted config synced")
    [event] = wait_until(lambda: rejection_events(m, remote_later), 30, what="sync rejection reported")
    assert event["detail"].startswith("rejected min.compaction.lag.ms=7200000 (")

    # Discovery goes on: a topic created after the rejections is picked up, and everything flows.
    new, remote_new = f"{name}.new", f"dc1.{name}.new"
    create_topic(dc1, new, 1)
    for topic in (born, later, new):
        produce_sequence(dc1, topic, 1, 5, start=1000)
    for topic, remote in ((born, remote_born), (later, remote_later), (new, remote_new)):
        wait_until(lambda t=topic, r=remote: r in topics(strict) and end_offsets(strict, r) == end_offsets(dc1, t),
                   60, what=f"{topic} replicated")
    # Config syncs run every 2 s: each rejection is reported once, not at every sync.
    assert len(rejection_events(m, remote_born)) == 1 and len(rejection_events(m, remote_later)) == 1
    assert 'mirror_errors_total{flow="dc1->strict",kind="topic_config"} 2.0' in m.metrics()
    log = m.log()
    assert f"remote topic {remote_born} created without configs the target strict rejects" in log
    assert f"rejects config changes of remote topic {remote_later}" in log
    assert "restarting" not in (m.status() or {})["flows"][0]["state"]


def test_topics_sync_reports_rejected_configs_and_syncs_the_rest(dc1, strict, name, tmp_path: Path) -> None:
    bad, good = f"{name}.bad", f"{name}.good"
    create_topic(dc1, bad, 2, {**REJECTED, "cleanup.policy": "compact"})
    create_topic(dc1, good, 1, {"retention.ms": "86400000"})
    config = write_config(tmp_path / "mm2.properties", {"dc1": dc1, "strict": strict},
                          ["dc1->strict.enabled = true", f"dc1->strict.topics = {name}.*"])
    db = f"sqlite:///{tmp_path / 'state.db'}"
    result = run_sync(config, db)
    assert result.returncode == 1  # the run fails loudly at the end, after syncing everything else
    assert f"dc1.{bad}" in result.stderr and "min.compaction.lag.ms" in result.stderr
    [flow] = json.loads(result.stdout)
    assert flow["status"] == "failed"
    assert [(c["topic"], c["kind"]) for c in flow["refused"]] == [(f"dc1.{bad}", "config-rejected")]
    assert {c["topic"] for c in flow["changes"] if c["kind"] == "created"} == {f"dc1.{bad}", f"dc1.{good}"}
    assert explicit(strict, f"dc1.{bad}") == {"cleanup.policy": "compact"}
    assert explicit(strict, f"dc1.{good}") == {"retention.ms": "86400000"}
    refused = [d for d in StateStore(db).recent_drift("dc1->strict") if d.action == "refused"]
    assert [(d.topic, d.kind) for d in refused] == [(f"dc1.{bad}", "config-rejected")]

    # The next run still reports it (the target still rejects it), and changes nothing else.
    again = json.loads(run_sync(config, db).stdout)[0]
    assert again["changes"] == [] and [c["kind"] for c in again["refused"]] == ["config-rejected"]
    assert "rejected min.compaction.lag.ms=7200000" in again["refused"][0]["detail"]


def test_remote_topic_the_target_refuses_does_not_hold_back_the_others(dc1, dc2, name, start_mirror) -> None:
    """A source topic whose remote name is too long for Kafka (249 characters at most) cannot be
    mirrored: it is reported, and every other topic of the flow is replicated."""
    long, ok = f"{name}.{'x' * (249 - len(name) - 1)}", f"{name}.ok"
    create_topic(dc1, long, 1)
    create_topic(dc1, ok, 2)
    produce_sequence(dc1, ok, 2, 50)
    m = start_mirror(flow_lines(name))
    wait_until(lambda: end_offsets(dc2, f"dc1.{ok}") == {0: 25, 1: 25}, 60, what="the other topic replicated")
    events = (m.status() or {})["flows"][0]["events"]
    [event] = [e for e in events if e["event"] == "remote topic cannot be created"]
    assert event["topic"] == f"dc1.{long}" and "longer than the max allowed length" in event["detail"]
    assert 'kind="remote_topic_create"} 1.0' in m.metrics()
    assert f"source topic {long} is not replicated" in m.log()
