"""Exactly-once mode: SIGKILLs at any moment leave every source record exactly once on the target;
a second instance taking over a slot fences the first."""

from __future__ import annotations

import os
import re
import signal
import time

from mirror_core.replication.slots import slot_of
from tests.integration.conftest import DATA_PATHS, flow_lines
from tests.integration.test_resilience import BackgroundProducer
from tests.kafka_harness import (
    SLOTS,
    create_topic,
    end_offsets,
    kill_owners,
    partition_count,
    produce_sequence,
    produce_transactions,
    read_all,
    settled,
    slot_topic_of,
    wait_until,
)

EOS = ["exactly.once.enabled = true", "exactly.once.slots = 4", "dc2.consumer.session.timeout.ms = 6000",
       "dc2.consumer.heartbeat.interval.ms = 1000"]


def assert_exactly_once(src_records, dst_records) -> None:  # type: ignore[no-untyped-def]
    for partition in {r.partition for r in src_records}:
        expected = [r.value for r in src_records if r.partition == partition]
        got = [r.value for r in dst_records if r.partition == partition]
        assert got == expected, (f"partition {partition}: {len(got)} records on the target for {len(expected)} "
                                 f"on the source; duplicates {len(got) - len(set(got))}, "
                                 f"missing {len(set(expected) - set(got))}")


def caught_up(*instances, topic: str, target: str, partitions: int = 4) -> bool:  # type: ignore[no-untyped-def]
    """Together the instances own every partition and all are committed to the end (a killed
    instance's slots stay with it until its session times out: partial ownership is not caught up), and the
    last commit's markers are on the remote topic on ``target`` (until then a read_committed reader stops before
    that transaction)."""
    parts = [p for m in instances for p in m.partitions() if p["topic"] == topic]
    return (len({p["partition"] for p in parts}) == partitions and all(p["lag"] == 0 for p in parts)
            and settled(target, f"dc1.{topic}"))


@DATA_PATHS
def test_sigkill_repeatedly_gives_no_duplicates_and_no_gaps(dc1, dc2, name, start_mirror, path):
    """10 SIGKILLs, each on a process that owns slots and has copied records of their partitions."""
    t = f"{name}.eos"
    slot_topic_of(dc2, 4)
    create_topic(dc1, t, 4)
    lines = flow_lines(name, *EOS, f"replication.data.path = {path}")
    args = ("--instance-id", f"{name}-0")
    first = start_mirror(lines, args=args)
    with BackgroundProducer(dc1, t, 4, rate_per_s=3000):
        m, effective = kill_owners(lambda: start_mirror(lines, config=first.config, args=args), first, t,
                                   kills=10, seed=20261123)
        time.sleep(2)
    assert effective == 10, f"only {effective} of 10 kills hit a process that owned and copied slots"
    wait_until(lambda: caught_up(m, topic=t, target=dc2), 120, what="caught up after the kills")
    src, dst = read_all(dc1, t), read_all(dc2, f"dc1.{t}")
    assert len(src) > 10000
    assert_exactly_once(src, dst)
    assert f"data path: {path}" in m.log(), "the flow ran on the data path asked"
    assert m.stop() == 0
    print(f"{effective} effective SIGKILLs, {len(src)} records, exactly once ({path})")


def owned_slots(log: str) -> set[str]:
    """The slots a mirror's log says it holds now (took, minus released since)."""
    owned: set[str] = set()
    for verb, k in re.findall(r"(took|released) exactly-once slot (\d+)", log):
        (owned.add if verb == "took" else owned.discard)(k)
    return owned


def slot_story(m) -> str:  # type: ignore[no-untyped-def]
    """The lines of a mirror's log about its slots and its membership: what a timeout in the test needs said."""
    lines = [line for line in m.log().splitlines()
             if re.search(r"exactly-once slot|session|rebalance|rejoin|ERROR|Traceback|Error:", line)]
    return f"{m.log_path.name} (alive: {m.alive()}):\n  " + "\n  ".join(lines[-40:])


@DATA_PATHS
def test_second_instance_fences_a_zombie(dc1, dc2, name, start_mirror, path):
    t, partitions = f"{name}.fence", 8
    # The precondition: every slot has partitions of the topic, so both instances own some whichever slots they
    # get. (slot_of is crc32, affine over GF(2): partitions 0-3 fall in only 2 of 4 slots, whatever the name, and
    # with 4 partitions both slots went to one instance now and then.)
    assert len({slot_of(t, p, 4) for p in range(partitions)}) == 4
    slot_topic_of(dc2, 4)  # (with 8 partitions there, b got slots 4-7 now and then: slots holding nothing)
    create_topic(dc1, t, partitions)
    lines = flow_lines(name, *EOS, f"replication.data.path = {path}")
    a = start_mirror(lines, name="a")
    with BackgroundProducer(dc1, t, partitions, rate_per_s=2000):
        wait_until(lambda: sum(end_offsets(dc2, f"dc1.{t}").values() or [0]) > 0, 60, what="replicating")
        b = start_mirror(lines, config=a.config, name="b")
        try:
            wait_until(lambda: a.partitions() and b.partitions(), 60, what="both instances own slots")
        except AssertionError as exc:  # say what each instance did with the slots (CI keeps no mirror logs)
            raise AssertionError(f"{exc}\n{slot_story(a)}\n{slot_story(b)}") from None
        assert a.proc is not None
        zombie_slots = owned_slots(a.log())
        assert zombie_slots, "the zombie-to-be owns slots"
        b_before = len(b.log())
        os.kill(a.proc.pid, signal.SIGSTOP)  # a zombie: alive, but silent past its session timeout
        try:
            wait_until(lambda: len([p for p in b.partitions() if p["topic"] == t]) == partitions, 90,
                       what="b takes over every slot")
        finally:
            os.kill(a.proc.pid, signal.SIGCONT)  # the zombie wakes up with an open transaction
        time.sleep(4)
    wait_until(lambda: caught_up(a, b, topic=t, target=dc2, partitions=partitions), 90,
               what="caught up (b, and the zombie if it rejoined)")
    assert_exactly_once(read_all(dc1, t), read_all(dc2, f"dc1.{t}"))
    # Fencing happened: b took, while the zombie was alive, slots the zombie held (init_transactions with
    # the same transactional id bumps the epoch) ...
    taken = set(re.findall(r"took exactly-once slot (\d+)", b.log()[b_before:]))
    assert zombie_slots <= taken, (zombie_slots, taken)
    # ... and whenever the zombie's producer went to the broker afterwards (a commit or an abort of a
    # transaction it had sent records in), the broker refused it: counted as slot_fenced, never a commit.
    # (A transaction that had only queued records locally is aborted locally: nothing to refuse.)
    woke = a.log().split("released exactly-once slot", 1)[-1]
    if path == "batches":  # the zombie's next batch or AddPartitionsToTxn is refused for its old epoch, unless it
        # learned of its lost session first and released every slot with nothing sent (then nothing reached the
        # broker at all; the copy is exactly-once either way, asserted above)
        try:
            wait_until(lambda: 'mirror_errors_total{flow="dc1->dc2",kind="slot_fenced"}' in a.metrics(), 30,
                       what="the zombie's wire producer refused by the broker")
        except AssertionError:  # then the zombie released its slots and sent nothing: no commit or flush it tried
            woke = a.log().split("released exactly-once slot", 1)[-1]
            released = set(re.findall(r"released exactly-once slot (\d+)", a.log()))
            assert zombie_slots <= released and not re.search(r"commit failed|flush failed", woke), slot_story(a)
        else:
            woke = a.log().split("released exactly-once slot", 1)[-1]
            assert re.search(r"PRODUCER_FENCED|INVALID_PRODUCER_EPOCH", woke), slot_story(a)
    elif "commit failed" in woke or "flush failed" in woke:
        wait_until(lambda: 'mirror_errors_total{flow="dc1->dc2",kind="slot_fenced"}' in a.metrics(), 30,
                   what="the zombie's producer refused by the broker")


def test_fewer_slots_than_the_slot_topic_has_are_refused_in_one_line(dc1, dc2, name, start_mirror):
    """Each partition of the slot topic is a slot: with fewer configured, instances got slots that hold no
    partition (one could own all the work, another none), and instances counting slots differently map a partition
    to different transactional ids, so neither fences the other."""
    slot_topic_of(dc2, 4)
    t = f"{name}.few"
    create_topic(dc1, t, 2)
    produce_sequence(dc1, t, 2, 100)
    m = start_mirror(flow_lines(name, "exactly.once.enabled = true", "exactly.once.slots = 2"))
    line = (f"exactly.once.slots = 2, but the slot topic {SLOTS} on dc2 has 4 partitions (slots cannot be fewer "
            f"than before in place; every instance of a flow needs the same count): set exactly.once.slots = 4, or "
            f"stop every instance of the flow and delete {SLOTS}")
    wait_until(lambda: line in m.log(), 60, what="the refusal said")
    time.sleep(2)
    assert m.alive() and sum(end_offsets(dc2, f"dc1.{t}").values() or [0]) == 0, "nothing copied"
    assert partition_count(dc2, SLOTS) == 4


@DATA_PATHS
def test_aborted_source_transactions_are_never_visible_on_the_target(dc1, dc2, name, start_mirror, path):
    """A source written in transactions, every other one aborted, among plain records: the target holds exactly
    the committed ones, once each, whether it is read committed or not (nothing of an aborted transaction is
    copied, and the mirror's own transactions all committed)."""
    t = f"{name}.aborted"
    slot_topic_of(dc2, 4)
    create_topic(dc1, t, 4)
    produce_sequence(dc1, t, 4, 2000)
    committed = produce_transactions(dc1, t, 4, 20, 50)
    produce_sequence(dc1, t, 4, 2000, start=2000)
    src = read_all(dc1, t)
    assert committed == 500 and len(src) == 4500
    assert len(read_all(dc1, t, "read_uncommitted")) == 5000, "aborted records are on the source"
    m = start_mirror(flow_lines(name, *EOS, f"replication.data.path = {path}"))
    wait_until(lambda: caught_up(m, topic=t, target=dc2), 120, what="caught up")
    assert f"data path: {path}" in m.log()
    remote = f"dc1.{t}"
    assert_exactly_once(src, read_all(dc2, remote))
    assert not [r for r in read_all(dc2, remote, "read_uncommitted") if r.value not in {s.value for s in src}]
    assert m.stop() == 0
