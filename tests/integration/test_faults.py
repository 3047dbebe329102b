"""Fault injection, each verified against sequence-numbered source data: a storm of SIGKILLs, a source
broker bounced mid-stream, a remote topic deleted on the target, a source topic deleted and recreated
(while the mirror runs, and while it is down)."""

from __future__ import annotations

import re
import time

import pytest
from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient

from mirror_core.replication.fencing import Holder, describe_holder
from tests.integration.conftest import flow_lines
from tests.integration.test_resilience import BackgroundProducer, assert_complete_in_order, sequences
from tests.kafka_harness import (
    MirrorProcess,
    create_topic,
    delete_topic,
    end_offsets,
    kill_owners,
    metric,
    new_cluster,
    owns_and_copies,
    produce_sequence,
    read_all,
    wait_until,
    write_config,
)


def caught_up(m, topic: str, partitions: int) -> bool:  # type: ignore[no-untyped-def]
    """The (single) instance owns every partition and all are replicated to the end; a killed
    instance keeps its partitions until its session times out."""
    parts = [p for p in m.partitions() if p["topic"] == topic]
    return len(parts) == partitions and all(p["lag"] == 0 for p in parts)


def test_sigkill_storm_loses_nothing(dc1, dc2, name, start_mirror):
    """12 SIGKILLs under load, each landing on a process that owns partitions and has copied records
    since it got them (static membership: a restart takes them back at once)."""
    t = f"{name}.storm"
    create_topic(dc1, t, 4)
    lines = flow_lines(name)
    args = ("--instance-id", f"{name}-0")
    first = start_mirror(lines, args=args)
    with BackgroundProducer(dc1, t, 4, rate_per_s=2000):
        m, effective = kill_owners(lambda: start_mirror(lines, config=first.config, args=args), first, t,
                                   kills=12, seed=20261122)
    assert effective == 12, f"only {effective} of 12 kills hit a process that owned and copied partitions"
    wait_until(lambda: caught_up(m, t, 4), 120, what="caught up after the storm")
    src = read_all(dc1, t)
    dups = assert_complete_in_order(src, read_all(dc2, f"dc1.{t}"))
    print(f"{effective} effective SIGKILLs, {len(src)} records, none lost, {dups} duplicates (at-least-once)")


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
    delete_topic(dc2, f"dc1.{t}")
    produce_sequence(dc1, t, 2, 40, start=100)
    wait_until(lambda: end_offsets(dc2, f"dc1.{t}") == {0: 20, 1: 20}, 90, what="recreated with the new records")
    got = sequences(read_all(dc2, f"dc1.{t}"))
    assert got == {0: list(range(100, 140, 2)), 1: list(range(101, 140, 2))}
    assert "was recreated" in m.log()
    assert 'kind="remote_topic_recreated"' in m.metrics()
    events = (m.status() or {})["flows"][0]["events"]
    assert any(e["event"] == "remote topic recreated" and e["topic"] == f"dc1.{t}" for e in events)


@pytest.mark.parametrize("path", ["records", "batches"])
def test_source_topic_recreated_is_detected_never_silently_skipped(dc1, dc2, name, start_mirror, path):
    t = f"{name}.phoenix"
    create_topic(dc1, t, 2)
    produce_sequence(dc1, t, 2, 40)
    lines = flow_lines(name, f"replication.data.path = {path}")
    m = start_mirror(lines)
    wait_until(lambda: end_offsets(dc2, f"dc1.{t}") == {0: 20, 1: 20}, 60, what="replicated")
    wait_until(lambda: caught_up(m, t, 2), 30, what="progress committed")

    # 1. Recreated while the mirror runs: the new topic is copied from its beginning.
    delete_topic(dc1, t)
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
    delete_topic(dc1, t)
    create_topic(dc1, t, 2)
    produce_sequence(dc1, t, 2, 60, start=2000)
    m = start_mirror(lines, config=m.config)
    wait_until(lambda: end_offsets(dc2, f"dc1.{t}") == {0: 55, 1: 55}, 90, what="third incarnation copied whole")
    got = sequences(read_all(dc2, f"dc1.{t}"))
    for p in (0, 1):
        assert got[p][-30:] == list(range(2000 + p, 2060, 2)), "every record of the new topic, in order"
    assert "deleted and recreated" in m.log()


def test_static_membership_restart_resumes_before_the_session_timeout(dc1, dc2, name, start_mirror):
    """With --instance-id a SIGKILLed process restarted under the same id gets its partitions back from the
    coordinator at once; without it they stay with the dead member for session.timeout.ms (45 s here)."""
    t = f"{name}.static"
    create_topic(dc1, t, 4)
    lines = flow_lines(name, "dc1.consumer.session.timeout.ms = 45000")
    args = ("--instance-id", f"{name}-0")
    m = start_mirror(lines, args=args)
    with BackgroundProducer(dc1, t, 4, rate_per_s=1000):
        wait_until(lambda: owns_and_copies(m, t), 60, what="copying")
        m.kill()
        killed_at = time.monotonic()
        m = start_mirror(lines, config=m.config, args=args)
        wait_until(lambda: owns_and_copies(m, t), 60, what="copying again")
        resumed = time.monotonic() - killed_at
    # Far below the 45 s a dynamic member would wait (the bound is loose: a functional check, not a speed test).
    assert resumed < 25, f"restart took {resumed:.1f}s: the partitions waited for the dead member's session"
    wait_until(lambda: caught_up(m, t, 4), 60, what="caught up")
    assert_complete_in_order(read_all(dc1, t), read_all(dc2, f"dc1.{t}"))
    print(f"SIGKILL to copying again: {resumed:.1f}s (session timeout 45 s)")


def derived_id(m) -> str:  # type: ignore[no-untyped-def]
    found = re.search(r"static group membership: instance id (\S+) \(derived", m.log())
    assert found, m.log()[-2000:]
    return found.group(1)


def test_without_an_instance_id_a_restart_takes_the_derived_one_again_and_a_stop_hands_over_at_once(
        dc1, dc2, name, start_mirror):
    """No flag: each process derives its id (the host and its lowest free slot). A SIGKILLed one restarted takes
    the same id and gets its partitions back from the coordinator at once; one stopped for good leaves its group
    (librdkafka's static members do not), so the other takes its partitions without waiting for its session
    (45 s here)."""
    t = f"{name}.derived"
    create_topic(dc1, t, 4)
    lines = flow_lines(name, "dc1.consumer.session.timeout.ms = 45000")
    m = start_mirror(lines)
    with BackgroundProducer(dc1, t, 4, rate_per_s=500):
        wait_until(lambda: owns_and_copies(m, t), 60, what="copying")
        first_id = derived_id(m)
        m.kill()
        killed_at = time.monotonic()
        m = start_mirror(lines, config=m.config)
        wait_until(lambda: owns_and_copies(m, t), 60, what="copying again")
        resumed = time.monotonic() - killed_at
        assert derived_id(m) == first_id
        other = start_mirror(lines, config=m.config, name="second")
        wait_until(lambda: any(p["topic"] == t for p in other.partitions()), 60, what="the second one shares")
        assert derived_id(other) != first_id
        assert m.stop() == 0
        stopped_at = time.monotonic()
        wait_until(lambda: len([p for p in other.partitions() if p["topic"] == t]) == 4, 60,
                   what="the remaining process takes every partition")
        handed_over = time.monotonic() - stopped_at
    assert f"static member {first_id} left" in m.log()
    assert resumed < 25 and handed_over < 25, (resumed, handed_over)  # (functional: far below the 45 s session)
    wait_until(lambda: caught_up(other, t, 4), 60, what="caught up")
    assert_complete_in_order(read_all(dc1, t), read_all(dc2, f"dc1.{t}"))
    print(f"SIGKILL to copying again: {resumed:.1f}s; stop to the other owning all: {handed_over:.1f}s")


def _holder(bootstrap: str, group: str, instance_id: str) -> Holder | None:
    return describe_holder(lambda: AdminClient({"bootstrap.servers": bootstrap}), group, instance_id)


def _wait_for_holder(bootstrap: str, group: str, instance_id: str) -> Holder:
    """The member holding ``instance_id`` (none holds it for a moment while its process rejoins)."""
    found: list[Holder] = []

    def held() -> bool:
        holder = _holder(bootstrap, group, instance_id)
        found.extend([holder] if holder is not None else [])
        return holder is not None

    wait_until(held, 60, what=f"a member of {group} holds {instance_id}")
    return found[-1]


def test_a_process_fenced_for_its_own_later_join_rejoins(dc1, dc2, name, start_mirror):
    """A coordinator can give a static member's id to a later join of the same process (librdkafka rejoining
    under a new member id after a coordinator change, seen in tests/system after a broker restart): the
    fenced process must rejoin, not stop for good. Emulated here: a consumer with the mirror's own client.id
    joins under its instance id, as the coordinator then holds it, and goes away without leaving."""
    t = f"{name}.self"
    create_topic(dc1, t, 2)
    lines = flow_lines(name)
    group, iid = f"{name}-workers-dc1-dc2", f"{name}-self"
    a = start_mirror(lines, args=("--instance-id", iid))
    with BackgroundProducer(dc1, t, 2, rate_per_s=500):
        wait_until(lambda: owns_and_copies(a, t), 60, what="a copies")
        own = _holder(dc1, group, iid)
        assert own is not None and own.client_id.startswith(f"mirror-core-{iid}-"), own
        ghost = Consumer({"bootstrap.servers": dc1, "group.id": group, "group.instance.id": iid,
                          "client.id": own.client_id, "partition.assignment.strategy": "cooperative-sticky",
                          "session.timeout.ms": 20000, "enable.auto.commit": False})
        ghost.subscribe([t])
        def ghost_holds() -> bool:
            ghost.poll(0.2)  # joins (its records, if any, are dropped)
            now = _holder(dc1, group, iid)
            return now is not None and now.member_id != own.member_id

        try:
            wait_until(ghost_holds, 60, what="the ghost joined under a's instance id")
        finally:
            ghost.close()  # a static member: it does not leave, the coordinator keeps it
        wait_until(lambda: "FENCED_INSTANCE_ID" in a.log(), 60, what="a is fenced")
        # Rejoined: a second pipeline runs, and the remote topic grows after it started.
        wait_until(lambda: a.log().count("replicating (instance") >= 2
                   and (a.status() or {})["flows"][0]["state"] == "running", 60, what="a rejoined")
        # ... through the path of a fence of its own (not some other restart after the fence).
        assert metric(a, "mirror_errors_total", kind="fenced_by_itself") == 1.0, a.metrics()
        copied = sum(end_offsets(dc2, f"dc1.{t}").values())
        wait_until(lambda: sum(end_offsets(dc2, f"dc1.{t}").values()) > copied, 60, what="a copies again")
    line = next(x for x in a.log().splitlines() if "FENCED_INSTANCE_ID" in x)
    # Judged from the group's description (not a failed describe, which would rejoin too): the holder is this
    # process's own later join, named with its own client.id.
    assert "own later join" in line and "it is held by member" in line, line
    assert f"(client.id {own.client_id}," in line and "rejoining in" in line, line
    assert "another process joined" not in a.log() and "Traceback" not in a.log()
    wait_until(lambda: caught_up(a, t, 2), 60, what="a caught up")
    assert_complete_in_order(read_all(dc1, t), read_all(dc2, f"dc1.{t}"))


def _flow_state(m: MirrorProcess) -> str:
    return str(((m.status() or {}).get("flows") or [{}])[0].get("state", ""))


def test_a_second_process_with_the_same_instance_id_fences_the_first(dc1, dc2, name, start_mirror):
    """Two processes given one --instance-id: one keeps the flow, the other stops it with one line naming
    the holder's client.id (taking it back would fence the other in turn, and both would flap). Usually the
    newer keeps it; the older can take it back once, when it was fenced for its own join (fencing.py)."""
    t = f"{name}.twin"
    create_topic(dc1, t, 2)
    lines = flow_lines(name)
    args = ("--instance-id", f"{name}-twin")
    a = start_mirror(lines, args=args, name="a")
    with BackgroundProducer(dc1, t, 2, rate_per_s=500):
        wait_until(lambda: owns_and_copies(a, t), 60, what="a copies")
        b = start_mirror(lines, config=a.config, args=args, name="b")
        wait_until(lambda: any(_flow_state(m).startswith("stopped: ") for m in (a, b)), 90,
                   what="a or b stops the flow")  # (plain "stopped": not started yet)
    loser, winner = (a, b) if _flow_state(a).startswith("stopped: ") else (b, a)
    print(f"the {'older' if loser is a else 'newer'} process stopped")
    lines = [x for x in loser.log().splitlines() if "FENCED_INSTANCE_ID" in x and "leaves it" in x]
    assert len(lines) == 1, (_flow_state(loser), [x for x in loser.log().splitlines() if "FENCED" in x])
    line = lines[0]
    assert "--instance-id" in line and "another process joined with this instance id" in line, line
    assert "Traceback" not in loser.log()
    # It names the holder: the winner's own client.id (its own would have made it rejoin).
    held = _wait_for_holder(dc1, f"{name}-workers-dc1-dc2", args[1])
    assert f"(client.id {held.client_id}," in line, (held, line)
    own = re.search(r"this process has client\.id (\S+);", line)
    assert own is not None and own.group(1) != held.client_id, line
    assert loser.alive(), "the stopped one keeps serving /status and its other flows"
    wait_until(lambda: (loser.status() or {})["flows"][0]["partitions"] == [], 30, what="its flow stopped")
    # Healthy: a liveness probe must not restart it into the other process (which it would fence back).
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{loser.port}/healthz", timeout=5) as r:
        assert r.status == 200
    assert not _flow_state(loser).startswith("running")
    # The winner may still be in the backoff of its own rejoin (fencing.py): it runs again after it.
    wait_until(lambda: _flow_state(winner) == "running", 60, what="the winner runs")
    wait_until(lambda: caught_up(winner, t, 2), 60, what="the other caught up")
    assert_complete_in_order(read_all(dc1, t), read_all(dc2, f"dc1.{t}"))
