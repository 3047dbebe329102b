"""The reconciliation job against two real clusters, a real mirror and real Spark (local[2]).

A clean replication reconciles with zero discrepancies; then known faults are injected and the report
must name exactly those partitions and offsets:
- p0: the mirror's copy of source offset 100 has a corrupted value (written in its place on the target);
- p1: an unexpected record written directly to the remote topic (target offset 100);
- p2: the first 5 target records deleted (delete_records) and source offset 100 skipped by the mirror;
- the target group of p1 moved ahead of its translation.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from hypothesis import given
from hypothesis import strategies as st

from mirror_core.config.loader import load_config
from mirror_core.offsets.checkpoints import CheckpointEmitter
from mirror_core.offsets.groups import commit_offsets, committed_offsets
from mirror_core.reconciliation import build_plan
from mirror_core.stores.offset_map import PartitionMap
from mirror_core.stores.progress import ProgressStore
from tests.integration.conftest import flow_lines
from tests.kafka_harness import (
    admin,
    create_topic,
    end_offsets,
    produce_sequence,
    read_all,
    wait_until,
    write_config,
)

GROUP_LINES = ["sync.group.offsets.enabled = true", "sync.group.offsets.interval.seconds = 1"]


def _plan(config_path: Path, topic: str, group: str) -> dict[str, Any]:
    """The flow's plan narrowed to this test's topic and group: the session clusters are shared, and
    the flow also covers every `heartbeats` topic other tests left on dc1."""
    config = load_config(config_path, validate_clients=False)
    plan = build_plan(config, config.flow("dc1->dc2"), None, window="all_retained")
    plan["partitions"] = [p for p in plan["partitions"] if p["topic"] == topic]
    plan["groups"] = [g for g in plan["groups"] if g.get("group") == group]
    return plan


def _partition(report: dict[str, Any], p: int) -> dict[str, Any]:
    return next(x for x in report["partitions"] if x["partition"] == p)


def test_clean_then_faulty_replication(dc1, dc2, name, tmp_path, start_mirror, spark, job) -> None:  # type: ignore[no-untyped-def]
    topic, remote, group = f"{name}.orders", f"dc1.{name}.orders", f"{name}-app"
    create_topic(dc1, topic, 3)
    produce_sequence(dc1, topic, 3, 300)  # 100 records per partition
    at_10 = {(topic, p): 10 for p in range(3)}
    # A fresh cluster may drop a commit while its offsets topic loads: commit until it sticks.
    wait_until(lambda: commit_offsets(admin(dc1), group, at_10) or committed_offsets(admin(dc1), group) == at_10,
               60, interval=1, what="source group committed")
    config = write_config(tmp_path / "mm2.properties", {"dc1": dc1, "dc2": dc2}, flow_lines(name, *GROUP_LINES))
    mirror = start_mirror([], config=config)
    wait_until(lambda: sum(end_offsets(dc2, remote).values()) == 300 if remote in admin(dc2).list_topics(
        timeout=5).topics else False, 90, what="initial replication")
    assert mirror.stop() == 0
    # One checkpoint round in this process (the CheckpointEmitter the mirror runs), so the test does
    # not depend on the emission interval.
    loaded = load_config(config, validate_clients=False)
    emitter = CheckpointEmitter(loaded, loaded.flow("dc1->dc2"), threading.Event(), None)
    want = {(remote, p): 10 for p in range(3)}
    try:
        wait_until(lambda: emitter.emit_once() >= 0 and committed_offsets(admin(dc2), group) == want, 60,
                   interval=1, what="checkpoints published and the target group synced")
    finally:
        emitter.close()

    clean = job.reconcile(spark, _plan(config, topic, group))
    s = clean["summary"]
    assert (s["status"], s["checked"], s["ok"]) == ("ok", 300, 300), s
    assert (s["missing_count"], s["mismatched_count"], s["extra_count"], s["groups_wrong"]) == (0, 0, 0, 0)
    assert s["groups_checked"] == 3 and all(g["checkpoint"] == [10, 10] for g in clean["groups"])

    # -- faults, injected while the mirror is stopped --------------------------------------------------
    produce_sequence(dc1, topic, 3, 30, start=300)  # source offsets 100..109 on every partition
    source_100 = next(r for r in read_all(dc1, topic) if r.partition == 0 and r.offset == 100)
    prod = Producer({"bootstrap.servers": dc2, "linger.ms": 0})
    prod.produce(remote, key=source_100.key, value=b"corrupted", headers=list(source_100.headers), partition=0)
    prod.produce(remote, key=b"intruder", value=b"extra", partition=1)
    store = ProgressStore("mirror-core.progress.dc1.internal",
                          Consumer({"bootstrap.servers": dc2, "group.id": "t", "log_level": "3"}), "test")
    store.write(prod, topic, 0, 101)  # the mirror "already copied" 100 (the corrupted record at target 100)
    store.write(prod, topic, 2, 101)  # ... and skips source offset 100 of p2 altogether
    assert prod.flush(30) == 0
    store.close()
    tgt_admin = admin(dc2)  # keep a reference: the future dies with its client
    for future in tgt_admin.delete_records([TopicPartition(remote, 2, 5)]).values():
        future.result(30)
    wait_until(lambda: commit_offsets(admin(dc2), group, {(remote, 1): 17}) or  # expected translation: 10
               committed_offsets(admin(dc2), group)[(remote, 1)] == 17, 30, interval=1, what="target group moved")

    mirror = start_mirror([], config=config)
    wait_until(lambda: end_offsets(dc2, remote) == {0: 110, 1: 111, 2: 109}, 90, what="fault replication")
    time.sleep(2)  # the last progress and offset syncs
    assert mirror.stop() == 0

    report = job.reconcile(spark, _plan(config, topic, group))
    s = report["summary"]
    assert s["status"] == "discrepancies"
    p0, p1, p2 = (_partition(report, p) for p in range(3))
    assert p0["mismatched"] == [{"source_offset": 100, "target_offset": 100}]
    assert (p0["missing_count"], p0["extra_count"]) == (0, 0)
    assert p1["extra"] == [100] and (p1["missing_count"], p1["mismatched_count"]) == (0, 0)
    assert [(m["source_offset"], m["reason"]) for m in p2["missing"]] == [
        *((o, "absent") for o in range(5)), (100, "skipped")]
    assert (p2["mismatched_count"], p2["extra_count"]) == (0, 0)
    assert (s["missing_count"], s["mismatched_count"], s["extra_count"], s["checked"]) == (6, 1, 0 + 1, 330)
    wrong = [g for g in report["groups"] if g["status"] == "wrong"]
    assert [(g["partition"], g["target_committed"], g["expected_target"]) for g in wrong] == [(1, 17, 10)]
    assert wrong[0]["problems"][0].startswith("target_ahead")


@given(steps=st.lists(st.tuples(st.integers(0, 50), st.integers(0, 50)), min_size=1, max_size=6),
       offset=st.integers(0, 400), progress=st.integers(0, 400))
def test_job_translation_agrees_with_the_offset_map(steps, offset, progress, job) -> None:  # type: ignore[no-untyped-def]
    """The job's standalone translation is an independent twin of PartitionMap.translate: they must agree."""
    pm, s, t = PartitionMap(), 0, 0
    for ds, dt in steps:
        s, t = s + ds, t + dt
        pm.add(s, t)
    runs = [[a, b] for a, b in zip(pm.sources, pm.targets, strict=True)]
    expected = pm.translate(offset, progress)
    got = job.translate(runs, offset, progress)
    assert got == (expected.target_offset if expected.exact else None)
