"""Fault injection, each verified against sequence-numbered source data: a storm of SIGKILLs, a source
broker bounced mid-stream, a remote topic deleted on the target, a source topic deleted and recreated
(while the mirror runs, and while it is down)."""

from __future__ import annotations

import random
import time

from tests.integration.conftest import flow_lines
from tests.integration.test_resilience import BackgroundProducer, assert_complete_in_order, sequences
from tests.kafka_harness import (
    admin,
    create_topic,
    end_offsets,
    new_cluster,
    produce_sequence,
    read_all,
    topics,
    wait_until,
    write_config,
)


def caught_up(m, topic: str, partitions: int) -> bool:  # type: ignore[no-untyped-def]
    """The (single) instance owns every partition and all are replicated to the end; a killed
    instance keeps its partitions until its session times out."""
    parts = [p for p in m.partitions() if p["topic"] == topic]
    return len(parts) == partitions and all(p["lag"] == 0 for p in parts)


def test_sigkill_storm_loses_nothing(dc1, dc2, name, start_mirror):
    """12 SIGKILLs at random moments under load (with the resilience and exactly-once suites: > 20)."""
    t = f"{name}.storm"
    create_topic(dc1, t, 4)
    lines = flow_lines(name)
    m = start_mirror(lines)
    rnd = random.Random(20261122)
    kills = 0
    with BackgroundProducer(dc1, t, 4, rate_per_s=2000):
        for _ in range(12):
            time.sleep(rnd.uniform(0.5, 2.5))
            m.kill()
            kills += 1
            m = start_mirror(lines, config=m.config)
    wait_until(lambda: caught_up(m, t, 4), 120, what="caught up after the storm")
    src = read_all(dc1, t)
    dups = assert_complete_in_order(src, read_all(dc2, f"dc1.{t}"))
    print(f"{kills} SIGKILLs, {len(src)} records, none lost, {dups} duplicates (at-least-once)")


def test_source_broker_bounced_mid_stream(dc2, name, start_mirror, tmp_path):
    src = new_cluster("bounce", tmp_path)
    src.start()
    try:
        t = f"{name}.bounce"
        create_topic(src.bootstrap, t, 3)
        lines = [line.replace("dc1->dc2", "bounce->dc2") for line in flow_lines(name)]
        config = write_config(tmp_path / "bounce.properties", {"bounce": src.bootstrap, "dc2": dc2}, lines)
        m = start_mirror(lines, config=config)
        with BackgroundProducer(src.bootstrap, t, 3, rate_per_s=1000):
            wait_until(lambda: sum(end_offsets(dc2, f"bounce.{t}").values() or [0]) > 500, 60, what="replicating")
            src.stop()
            wait_until(lambda: 'mirror_cluster_reachable{cluster="bounce"} 0.0' in m.metrics(), 60,
                       what="source reported unreachable")
            time.sleep(2)
            src.start()
            time.sleep(3)
        wait_until(lambda: caught_up(m, t, 3), 120, what="caught up after the bounce")
        assert_complete_in_order(read_all(src.bootstrap, t), read_all(dc2, f"bounce.{t}"))
    finally:
        src.stop()


def test_remote_topic_deleted_on_target_is_recreated_and_reported(dc1, dc2, name, start_mirror):
    t = f"{name}.victim"
    create_topic(dc1, t, 2)
    produce_sequence(dc1, t, 2, 100)
    m = start_mirror(flow_lines(name))
    wait_until(lambda: end_offsets(dc2, f"dc1.{t}") == {0: 50, 1: 50}, 60, what="replicated")
    client = admin(dc2)
    client.delete_topics([f"dc1.{t}"])[f"dc1.{t}"].result(10)
    wait_until(lambda: f"dc1.{t}" not in topics(dc2), 30, what="deleted")
    produce_sequence(dc1, t, 2, 40, start=100)
    wait_until(lambda: end_offsets(dc2, f"dc1.{t}") == {0: 20, 1: 20}, 90, what="recreated with the new records")
    got = sequences(read_all(dc2, f"dc1.{t}"))
    assert got == {0: list(range(100, 140, 2)), 1: list(range(101, 140, 2))}
    assert "was recreated" in m.log()
    assert 'kind="remote_topic_recreated"' in m.metrics()
    events = (m.status() or {})["flows"][0]["events"]
    assert any(e["event"] == "remote topic recreated" and e["topic"] == f"dc1.{t}" for e in events)


def test_source_topic_recreated_is_detected_never_silently_skipped(dc1, dc2, name, start_mirror):
    t = f"{name}.phoenix"
    create_topic(dc1, t, 2)
    produce_sequence(dc1, t, 2, 40)
    lines = flow_lines(name)
    m = start_mirror(lines)
    wait_until(lambda: end_offsets(dc2, f"dc1.{t}") == {0: 20, 1: 20}, 60, what="replicated")
    wait_until(lambda: caught_up(m, t, 2), 30, what="progress committed")

    # 1. Recreated while the mirror runs: the new topic is copied from its beginning.
    client = admin(dc1)
    client.delete_topics([t])[t].result(10)
    wait_until(lambda: t not in topics(dc1), 30, what="deleted")
    create_topic(dc1, t, 2)
    produce_sequence(dc1, t, 2, 10, start=1000)
    wait_until(lambda: end_offsets(dc2, f"dc1.{t}") == {0: 25, 1: 25}, 90, what="new incarnation copied")
    assert "deleted and recreated" in m.log()
    events = (m.status() or {})["flows"][0]["events"]
    assert any(e["event"] == "source topic recreated" and e["topic"] == t for e in events)
    wait_until(lambda: caught_up(m, t, 2), 30, what="progress committed")
    assert m.stop() == 0

    # 2. Recreated while the mirror is down, with MORE records than the old position (25 per
    #    partition here > 5): resuming at the stored position would silently skip the first ones.
    client.delete_topics([t])[t].result(10)
    wait_until(lambda: t not in topics(dc1), 30, what="deleted again")
    create_topic(dc1, t, 2)
    produce_sequence(dc1, t, 2, 60, start=2000)
    m = start_mirror(lines, config=m.config)
    wait_until(lambda: end_offsets(dc2, f"dc1.{t}") == {0: 55, 1: 55}, 90, what="third incarnation copied whole")
    got = sequences(read_all(dc2, f"dc1.{t}"))
    for p in (0, 1):
        assert got[p][-30:] == list(range(2000 + p, 2060, 2)), "every record of the new topic, in order"
    assert "deleted and recreated" in m.log()
