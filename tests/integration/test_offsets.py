"""Failover-grade offsets against real brokers: exact translation across offset gaps (aborted
transactions, compaction), checkpoints in MM2's layout, group offset sync, failback helpers."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import threading
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from mirror_core.config.loader import load_config
from mirror_core.offsets.translate import FlowOffsets, translate_group
from mirror_core.stores.records import decode_checkpoint_key, decode_checkpoint_value
from tests.integration.conftest import flow_lines
from tests.kafka_harness import REPO, alter_topic, create_topic, end_offsets, read_all, unique, wait_until


def transactional_data(bootstrap: str, topic: str, partitions: int) -> None:
    """Committed and aborted transactions: aborted records and markers leave offset gaps."""
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": unique("txn-")})
    p.init_transactions(30)
    n = 0
    for round_ in range(12):
        p.begin_transaction()
        for _ in range(5):
            p.produce(topic, value=f"{'aborted' if round_ % 3 == 1 else 'seq'}-{n}".encode(), partition=n % partitions)
            n += 1
        if round_ % 3 == 1:
            p.flush(30)  # Kafka 4.x may refuse to abort with records still in flight (INVALID_TXN_STATE)
            p.abort_transaction(30)
        else:
            p.commit_transaction(30)


def compacted_data(bootstrap: str, topic: str) -> None:
    """Overwrite keys in waves so the cleaner (segment.ms=100) removes older values: offset gaps."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    n = 0
    for wave in range(6):
        for k in range(6):
            # Unique keys survive; the "hot" key is overwritten, so the cleaner punches holes between them.
            key = f"unique-{wave}-{k}" if k % 2 else "hot"
            p.produce(topic, key=key.encode(), value=f"seq-{n}".encode(), partition=0)
            n += 1
        p.flush(10)
        time.sleep(0.3)


def has_gaps(bootstrap: str, topic: str) -> bool:
    offsets = [r.offset for r in read_all(bootstrap, topic)]
    return bool(offsets) and offsets != list(range(offsets[0], offsets[0] + len(offsets)))


def commit_source_group(bootstrap: str, group: str, topic: str, offsets: dict[int, int]) -> None:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    c.commit(offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()], asynchronous=False)
    c.close()


def assert_exact_at_every_position(m, dc1: str, dc2: str, names: tuple[str, ...]) -> int:  # type: ignore[no-untyped-def]
    """Every record of ``names`` copied in order, and the flow's offset map exact at every source position:
    a group committed there resumes on the target at the same next record. Returns the positions checked."""
    config = load_config(m.config)
    flow = config.flows[0]
    offsets = FlowOffsets.load(config, flow)
    checked = 0
    for topic in names:
        source = read_all(dc1, topic)
        target = read_all(dc2, f"dc1.{topic}")
        ends = end_offsets(dc1, topic)
        target_ends = end_offsets(dc2, f"dc1.{topic}")
        for partition, end in ends.items():
            src = [r for r in source if r.partition == partition]
            tgt = [r for r in target if r.partition == partition]
            assert [r.value for r in src] == [r.value for r in tgt]
            start = src[0].offset if src else 0
            for committed in range(start, end + 1):
                tr = offsets.offset_map.translate(topic, partition, committed, offsets.progress.get((topic, partition)))
                assert tr.exact and tr.target_offset is not None, (topic, partition, committed, tr)
                # The map alone (no cap at the log end) is right up to a caught-up group, whose
                # position lies past the source's trailing commit marker.
                assert tr.target_offset <= target_ends[partition], (topic, partition, committed, tr)
                if committed == end:
                    assert tr.target_offset == target_ends[partition], (topic, partition, committed, tr)
                expected = [r.value for r in src if r.offset >= committed]
                resumed = [r.value for r in tgt if r.offset >= tr.target_offset]
                assert resumed == expected, f"{topic}[{partition}] committed {committed}"
                checked += 1
    print(f"exact at {checked} positions; offset map entries: {offsets.offset_map.entries()}")
    return checked


def test_translation_is_exact_at_every_position_across_gaps(dc1, dc2, name, start_mirror):
    txn, compact = f"{name}.txn", f"{name}.compact"
    create_topic(dc1, txn, 2)
    create_topic(dc1, compact, 1, {"cleanup.policy": "compact", "segment.ms": "100",
                                   "min.cleanable.dirty.ratio": "0.001", "delete.retention.ms": "100"})
    transactional_data(dc1, txn, 2)
    compacted_data(dc1, compact)
    wait_until(lambda: has_gaps(dc1, compact), 90, interval=1, what="compaction to remove older values")
    assert has_gaps(dc1, txn)
    m = start_mirror(flow_lines(name, "emit.checkpoints.enabled = false"))
    wait_until(lambda: all(p["lag"] == 0 for p in m.partitions() if p["topic"] in (txn, compact))
               and len([p for p in m.partitions() if p["topic"] in (txn, compact)]) == 3, 90, what="caught up")
    checked = assert_exact_at_every_position(m, dc1, dc2, (txn, compact))
    assert checked > 50

    # The same through the CLI: a group committed mid-way on the source, applied to the target.
    group = unique("app-")
    half = {p: e // 2 for p, e in end_offsets(dc1, txn).items()}
    commit_source_group(dc1, group, txn, half)
    out = subprocess.run([sys.executable, "-m", "mirror_core", "offsets", "apply", "--config", str(m.config),
                          "--from", "dc1", "--to", "dc2", "--group", group, "--json"],
                         capture_output=True, text=True, cwd=REPO, timeout=60)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert all(r["exact"] for r in result["partitions"]) and len(result["committed"]) == 2
    c = Consumer({"bootstrap.servers": dc2, "group.id": group, "isolation.level": "read_committed",
                  "auto.offset.reset": "error", "enable.auto.commit": False})
    c.subscribe([f"dc1.{txn}"])
    got = []
    deadline = time.monotonic() + 30
    expected = sorted(r.value for r in read_all(dc1, txn) if r.offset >= half[r.partition])
    while len(got) < len(expected) and time.monotonic() < deadline:
        got += [m.value() for m in c.consume(100, 0.5) if m.error() is None]
    c.close()
    assert sorted(got) == expected  # zero duplicates, zero loss for the failed-over consumer


def test_checkpoints_and_group_offset_sync(dc1, dc2, name, start_mirror):
    t = f"{name}.cp"
    create_topic(dc1, t, 2)
    transactional_data(dc1, t, 2)
    idle, active, ahead = unique("idle-"), unique("active-"), unique("ahead-")
    for g in (idle, active, ahead):
        commit_source_group(dc1, g, t, {0: 10, 1: 12})
    # A caught-up group sits past the trailing commit marker: it must resume at the remote log end.
    caught_up = unique("caught-up-")
    commit_source_group(dc1, caught_up, t, end_offsets(dc1, t))
    excluded = unique("excluded-")  # listed in groups, but groups.exclude wins
    commit_source_group(dc1, excluded, t, {0: 10, 1: 12})
    remote = f"dc1.{t}"
    # `ahead` already consumed further on the target: sync must never move it back.
    create_topic(dc2, remote, 2)  # the mirror would create it; created here to commit `ahead` first
    commit_source_group(dc2, ahead, remote, {0: 30, 1: 30})
    stop = threading.Event()

    def hold_active_member() -> None:
        c = Consumer({"bootstrap.servers": dc2, "group.id": active, "enable.auto.commit": False,
                      "auto.offset.reset": "latest"})
        c.subscribe([remote])
        while not stop.is_set():
            c.poll(0.2)
        c.close()

    member = threading.Thread(target=hold_active_member, daemon=True)
    member.start()
    try:
        m = start_mirror(flow_lines(name, "emit.checkpoints.interval.seconds = 1", "sync.group.offsets.enabled = true",
                                   "sync.group.offsets.interval.seconds = 1",
                                   f"dc1->dc2.groups = {idle}, {active}, {ahead}, {caught_up}, {excluded}",
                                   f"dc1->dc2.groups.exclude = {excluded}"))
        config = load_config(m.config)

        def checkpoints() -> dict[tuple[str, str, int], tuple[int, int]]:
            out = {}
            for r in read_all(dc2, "dc1.checkpoints.internal"):
                out[decode_checkpoint_key(r.key)] = decode_checkpoint_value(r.value)[:2]
            return out

        wait_until(lambda: (idle, remote, 0) in checkpoints() and (idle, remote, 1) in checkpoints(), 60,
                   what="checkpoints for the idle group")
        rows = {r.partition: r for r in translate_group(config, idle, "dc1", "dc2")}
        cps = checkpoints()
        for p in (0, 1):
            assert cps[(idle, remote, p)] == (rows[p].source_offset, rows[p].target_offset)
            assert rows[p].exact and rows[p].target_offset != rows[p].source_offset  # gaps made them differ
        from mirror_core.offsets.groups import committed_offsets
        from tests.kafka_harness import admin

        tgt_admin = admin(dc2)
        wait_until(lambda: committed_offsets(tgt_admin, idle) == {(remote, p): rows[p].target_offset for p in (0, 1)},
                   60, what="idle group synced on the target")
        time.sleep(3)  # several sync rounds
        assert committed_offsets(tgt_admin, active) == {}  # active members: untouched
        assert committed_offsets(tgt_admin, ahead) == {(remote, 0): 30, (remote, 1): 30}  # never backwards
        ends = end_offsets(dc2, remote)
        wait_until(lambda: committed_offsets(tgt_admin, caught_up) == {(remote, p): ends[p] for p in (0, 1)}, 60,
                   what="caught-up group synced at the remote log end")
        assert {p: checkpoints()[(caught_up, remote, p)][1] for p in (0, 1)} == ends
        assert not [k for k in checkpoints() if k[0] == excluded] and committed_offsets(tgt_admin, excluded) == {}
    finally:
        stop.set()
        member.join(10)


def test_apply_refuses_active_group_and_time_index_fallback(dc1, dc2, name, start_mirror):
    t = f"{name}.late"
    create_topic(dc1, t, 1)
    p = Producer({"bootstrap.servers": dc1})
    base = int(time.time() * 1000) - 200_000  # recent: older records would fall to the 7-day retention
    for i in range(50):
        p.produce(t, value=f"old-{i}".encode(), partition=0, timestamp=base + i * 1000)
    p.flush(10)
    # The mirror starts at the end: the 50 old records are not replicated and have no mapping.
    m = start_mirror(flow_lines(name, "source.start.position = latest"))
    wait_until(lambda: any(x["topic"] == t for x in m.partitions()), 60, what="assigned")
    time.sleep(2)
    for i in range(50, 80):
        p.produce(t, value=f"new-{i}".encode(), partition=0, timestamp=base + i * 1000)
    p.flush(10)
    wait_until(lambda: end_offsets(dc2, f"dc1.{t}") == {0: 30}, 60, what="new records replicated")
    config = load_config(m.config)
    group = unique("late-")
    commit_source_group(dc1, group, t, {0: 10})
    rows = translate_group(config, group, "dc1", "dc2")
    assert len(rows) == 1 and not rows[0].exact and rows[0].basis == "time-index"
    assert rows[0].target_offset == 0 and "approximate" in rows[0].note
    apply = [sys.executable, "-m", "mirror_core", "offsets", "apply", "--config", str(m.config), "--from", "dc1",
             "--to", "dc2", "--group", group]
    # An approximate position is never committed unless asked for.
    out = subprocess.run(apply, capture_output=True, text=True, cwd=REPO, timeout=60)
    assert out.returncode == 3 and f"no exact translation for {t}[0]" in out.stderr, out.stderr

    # apply refuses while the group has an active member on the target.
    c = Consumer({"bootstrap.servers": dc2, "group.id": group, "auto.offset.reset": "latest"})
    c.subscribe([f"dc1.{t}"])
    wait_until(lambda: c.poll(0.2) is None and c.assignment(), 30, what="active member")
    out = subprocess.run([*apply, "--allow-approximate"], capture_output=True, text=True, cwd=REPO, timeout=60)
    c.close()
    assert out.returncode == 3 and "active member" in out.stderr, out.stderr
    out = subprocess.run([*apply, "--allow-approximate"], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert out.returncode == 0, out.stderr
    from mirror_core.offsets.groups import committed_offsets
    from tests.kafka_harness import admin

    assert committed_offsets(admin(dc2), group) == {(f"dc1.{t}", 0): 0}


def test_progress_never_covers_an_offset_map_entry_the_target_rejected(dc1, dc2, name, start_mirror, tmp_path):
    """The map and progress live in different partitions: one can land without the other. Progress
    must wait for the map entries of the records it covers, or a translation would be silently wrong."""

    from tests.kafka_harness import write_config

    src, tgt = unique("src"), unique("tgt")  # own aliases: own offset-syncs topic to break
    topic = f"{name}.mapfail"
    create_topic(dc1, topic, 1)
    transactional_data(dc1, topic, 1)
    config_path = write_config(tmp_path / f"{src}.properties", {src: dc1, tgt: dc2}, [
        f"{src}->{tgt}.enabled = true", f"{src}->{tgt}.topics = {topic}", "refresh.topics.interval.seconds = 2",
        "offset.flush.interval.ms = 200", "emit.heartbeats.enabled = false", "emit.checkpoints.enabled = false"])
    m = start_mirror([], config=config_path)
    remote = f"{src}.{topic}"
    wait_until(lambda: [p["lag"] for p in m.partitions()] == [0], 90, what="caught up")
    config = load_config(config_path)
    flow = config.flows[0]
    wait_until(lambda: FlowOffsets.load(config, flow).progress.get((topic, 0)) == end_offsets(dc1, topic)[0], 30,
               what="progress at the source end")
    first_end = end_offsets(dc1, topic)[0]

    # Every new offset-map entry is now rejected by the target (record too large); data still lands.
    syncs = f"mirror-core.offset-syncs.{src}.internal"
    alter_topic(dc2, syncs, {"max.message.bytes": "1"})
    try:
        transactional_data(dc1, topic, 1)
        source = [r.offset for r in read_all(dc1, topic) if r.offset >= first_end]
        first_gap = next(o for prev, o in itertools.pairwise(source) if o != prev + 1)
        wait_until(lambda: len(read_all(dc2, remote)) == len(read_all(dc1, topic)), 60, what="new records copied")
        wait_until(lambda: 'kind="offset_sync"' in m.metrics(), 30, what="offset-sync errors reported")
        wait_until(lambda: "offset-map entries not written to mirror-core.offset-syncs" in m.log(), 30,
                   what="the refusal said in the log, not only counted")
        time.sleep(2)  # ten commit rounds
        progress = FlowOffsets.load(config, flow).progress[(topic, 0)]
        # Records up to the first new gap continue the last run (no new entry needed); past it, not.
        assert first_end <= progress <= first_gap, (first_end, progress, first_gap)
    finally:
        alter_topic(dc2, syncs, {"max.message.bytes": None})
    # The rejected entries are sent again: progress reaches the end, and the map is exact everywhere.
    end = end_offsets(dc1, topic)[0]
    wait_until(lambda: FlowOffsets.load(config, flow).progress.get((topic, 0)) == end, 60, what="progress at the end")
    offsets = FlowOffsets.load(config, flow)
    src_records, tgt_records = read_all(dc1, topic), read_all(dc2, remote)
    for committed in range(0, end + 1):
        tr = offsets.offset_map.translate(topic, 0, committed, offsets.progress[(topic, 0)])
        assert tr.exact and tr.target_offset is not None
        assert [r.value for r in tgt_records if r.offset >= tr.target_offset] == \
            [r.value for r in src_records if r.offset >= committed], committed


def test_checkpoints_the_target_refuses_are_said_and_published_again(dc1, dc2, name, start_mirror, tmp_path):
    """A checkpoint is published once per change of its group's offset: one the target refused used to be
    forgotten (no line, never sent again while the group stood still)."""

    from mirror_core.offsets.checkpoints import CHECKPOINTS_TOPIC_CONFIG
    from tests.kafka_harness import write_config

    src, tgt = unique("src"), unique("tgt")  # own aliases: a checkpoints topic of this test's own
    topic, checkpoints = f"{name}.cp", f"{src}.checkpoints.internal"
    create_topic(dc1, topic, 2)
    transactional_data(dc1, topic, 2)
    group = unique("standing-")
    commit_source_group(dc1, group, topic, {0: 10, 1: 12})  # and never again: nothing changes for it
    # Takes less than one checkpoint record: every one is refused.
    create_topic(dc2, checkpoints, 1, {**CHECKPOINTS_TOPIC_CONFIG, "max.message.bytes": "60"})
    config_path = write_config(tmp_path / f"{src}.properties", {src: dc1, tgt: dc2}, [
        f"{src}->{tgt}.enabled = true", f"{src}->{tgt}.topics = {topic}", f"{src}->{tgt}.groups = {group}",
        "refresh.topics.interval.seconds = 2", "offset.flush.interval.ms = 200", "emit.heartbeats.enabled = false",
        "emit.checkpoints.interval.seconds = 1"])
    m = start_mirror([], config=config_path)
    wait_until(lambda: f"2 checkpoints not written to {checkpoints}" in m.log(), 90, what="the refusal said")
    assert read_all(dc2, checkpoints) == []
    alter_topic(dc2, checkpoints, {"max.message.bytes": None})
    wait_until(lambda: {decode_checkpoint_key(r.key)[2] for r in read_all(dc2, checkpoints)} == {0, 1}, 60,
               what="both checkpoints published again once the topic takes them")


def test_many_groups_are_read_together_and_an_unreadable_one_stops_no_other(dc1, name):
    """committed_offsets_of (translate and each checkpoint round ask every group at once): each group gets its
    own offsets, and a group the broker refuses to describe (an empty id) maps to its error alone."""
    from confluent_kafka import KafkaException

    from mirror_core.offsets.groups import PARALLEL_GROUPS, committed_offsets_of
    from tests.kafka_harness import admin

    t = f"{name}.many-groups"
    create_topic(dc1, t, 2)
    groups = [unique("many-") for _ in range(PARALLEL_GROUPS + 4)]  # more than are asked at once
    for i, g in enumerate(groups):
        commit_source_group(dc1, g, t, {0: i, 1: 2 * i})
    got = committed_offsets_of(admin(dc1), [*groups, ""], timeout=10)
    assert list(got) == [*groups, ""]
    assert [got[g] for g in groups] == [{(t, 0): i, (t, 1): 2 * i} for i in range(len(groups))]
    assert isinstance(got[""], KafkaException), got[""]


def test_a_group_whose_offsets_cannot_be_read_is_said_and_the_others_are_checkpointed(dc1, dc2, name, start_mirror,
                                                                                      monkeypatch, caplog):
    """A checkpoint round over real brokers in which one group's offsets cannot be read (its coordinator
    unavailable, injected): the other group's checkpoints are published, the unread group is named once (not
    again in the next round), and only a round in which no group can be read fails."""
    import logging

    from confluent_kafka import KafkaError, KafkaException

    import mirror_core.offsets.checkpoints as checkpoints
    from mirror_core.offsets.groups import committed_offsets_of

    t = f"{name}.unread"
    create_topic(dc1, t, 2)
    transactional_data(dc1, t, 2)
    ok, broken = unique("ok-"), unique("broken-")
    for g in (ok, broken):
        commit_source_group(dc1, g, t, {0: 10, 1: 12})
    m = start_mirror(flow_lines(name, "emit.checkpoints.enabled = false"))  # its own rounds publish nothing
    wait_until(lambda: len([p for p in m.partitions() if p["topic"] == t and p["lag"] == 0]) == 2, 90,
               what="caught up")
    conf = m.config.parent / "rounds.properties"
    conf.write_text(m.config.read_text().replace("emit.checkpoints.enabled = false", "emit.checkpoints.enabled = true")
                    + f"dc1->dc2.groups = {ok}, {broken}\n")
    config = load_config(conf)
    unreadable = {broken}

    def fails_some(admin, groups, timeout=15, stop=None):  # type: ignore[no-untyped-def]
        got = committed_offsets_of(admin, groups, timeout, stop)
        return {g: KafkaException(KafkaError(KafkaError.COORDINATOR_NOT_AVAILABLE)) if g in unreadable else v
                for g, v in got.items()}

    monkeypatch.setattr(checkpoints, "committed_offsets_of", fails_some)
    emitter = checkpoints.CheckpointEmitter(config, config.flows[0], threading.Event(), None)
    try:
        with caplog.at_level(logging.WARNING, logger="mirror_core.offsets.checkpoints"):
            assert emitter.emit_once() == 2  # ok's two partitions
            assert emitter.emit_once() == 0  # nothing changed; the unread group is not said again
        said = [r.getMessage() for r in caplog.records if broken in r.getMessage()]
        assert len(said) == 1 and "not read on dc1" in said[0] and ok not in said[0], said
        remote = f"dc1.{t}"
        published = {decode_checkpoint_key(r.key) for r in read_all(dc2, "dc1.checkpoints.internal")}
        assert {(ok, remote, 0), (ok, remote, 1)} <= published
        assert not [k for k in published if k[0] == broken]
        unreadable.add(ok)
        with pytest.raises(KafkaException):  # no group could be read: the round fails (and is said by run())
            emitter.emit_once()
    finally:
        emitter.close()
