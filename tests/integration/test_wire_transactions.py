"""The wire client's transactions against real brokers (mirror_core/wire/transactions.py and the batch sender's
transactional mode): a source's committed batches (its aborted transactions dropped as a read_committed reader
drops them) copied whole in one transaction with a record of the mirror's own on another topic, invisible to a
read_committed reader until EndTxn commits and never after an abort; and a zombie fenced by the broker: a second
producer of the same transactional id bumps the epoch, after which the first one's batches are refused and its
EndTxn raises ProducerFenced."""

from __future__ import annotations

import struct
import time

import google_crc32c
import pytest

from mirror_core.wire.errors import NAMES, ProducerFenced
from mirror_core.wire.fetcher import BatchFetcher, FetchLimits
from mirror_core.wire.metadata import Brokers
from mirror_core.wire.recode import varint
from mirror_core.wire.records import record_count
from mirror_core.wire.sender import BatchSender, Outgoing, Sent
from mirror_core.wire.transactions import TransactionCoordinator
from tests.integration.test_wire import _copy, _log_ends
from tests.kafka_harness import create_topic, end_offsets, produce_sequence, produce_transactions, read_all

PARTITIONS = 4
#: INVALID_PRODUCER_EPOCH, PRODUCER_FENCED: what a broker answers a fenced producer's batch
FENCED_ANSWERS = {47, 90}


def _progress_batch(value: bytes) -> bytes:
    """One record (no key, ``value``) as a batch stamped now: the mirror's own record in the same transaction."""
    body = b"\x00" + varint(0) + varint(0) + varint(-1) + varint(len(value)) + value + varint(0)
    now = int(time.time() * 1000)
    tail = struct.pack(">hiqqqhii", 0, 0, now, now, -1, -1, -1, 1) + varint(len(body)) + body
    return struct.pack(">qiibI", 0, 4 + 1 + 4 + len(tail), 0, 2, google_crc32c.value(tail)) + tail


def _wait(sender: BatchSender, count: int) -> list[Sent]:
    out: list[Sent] = []
    for _ in range(600):
        out += sender.poll(0.05)
        if len(out) >= count:
            return out
    raise AssertionError(f"{len(out)} of {count} batches answered")


def _copy_in_transaction(dc1: str, dc2: str, topic: str, remote: str, progress: str, tid: str,
                         commit: bool) -> tuple[TransactionCoordinator, list[Sent]]:
    brokers = Brokers(dc1, {}, "dc1")
    ends = {p: part.high_watermark for p, part in _log_ends(brokers, topic).items()}
    txn = TransactionCoordinator(Brokers(dc2, {}, "dc2"), tid)
    sender = BatchSender(Brokers(dc2, {}, "dc2"), transaction=txn)
    fetcher = BatchFetcher(brokers, FetchLimits(max_wait_ms=100, partition_max_bytes=4096))
    try:
        sender.use_producer(*txn.init())
        fetcher.assign({(topic, p): 0 for p in range(PARTITIONS)})
        results = _copy(fetcher, sender, topic, remote, ends)
        sender.send([Outgoing(progress, 0, _progress_batch(b"progress"))])
        results += _wait(sender, 1)
        assert txn.partitions == {(remote, p) for p in range(PARTITIONS)} | {(progress, 0)}  # added before produced
        assert [r.describe() for r in results if r.error] == []
        # Written and acknowledged, not yet visible: a read_committed reader stops at the open transaction.
        assert sum(end_offsets(dc2, remote).values()) == 0
        assert sum(end_offsets(dc2, remote, "read_uncommitted").values()) == sum(
            record_count(r.batch.data) for r in results if r.batch.topic == remote)
        txn.end(commit)
    finally:
        fetcher.close()
        sender.close()
        txn.close()
    return txn, results


@pytest.mark.parametrize("commit", [False, True], ids=["abort", "commit"])
def test_copied_batches_and_the_mirrors_own_record_land_in_one_transaction(dc1: str, dc2: str, name: str,
                                                                           commit: bool) -> None:
    topic, remote, progress = f"{name}.src", f"{name}.src.copy", f"{name}.progress"
    create_topic(dc1, topic, PARTITIONS)
    create_topic(dc2, remote, PARTITIONS)
    create_topic(dc2, progress, 1)
    produce_sequence(dc1, topic, PARTITIONS, 400)
    committed = produce_transactions(dc1, topic, PARTITIONS, 6, 20)  # every other transaction aborted
    source = read_all(dc1, topic)
    assert committed == 60 and len(source) == 460
    assert len(read_all(dc1, topic, "read_uncommitted")) == 520  # the aborted ones are on the source
    _copy_in_transaction(dc1, dc2, topic, remote, progress, f"{name}-txn", commit)
    target, mine = read_all(dc2, remote), read_all(dc2, progress)
    if not commit:
        assert target == [] and mine == []  # nothing of an aborted transaction is visible
        return
    assert [(r.partition, r.key, r.value, r.headers) for r in target] == \
        [(r.partition, r.key, r.value, r.headers) for r in source]  # no aborted source record, none twice
    assert [r.value for r in mine] == [b"progress"]


def test_a_zombie_is_fenced_by_the_broker_once_another_producer_takes_its_transactional_id(dc2: str,
                                                                                           name: str) -> None:
    remote = f"{name}.fenced"
    create_topic(dc2, remote, 1)
    tid = f"{name}-slot-0"
    zombie_txn, new_txn = (TransactionCoordinator(Brokers(dc2, {}, "dc2"), tid) for _ in range(2))
    zombie = BatchSender(Brokers(dc2, {}, "dc2"), transaction=zombie_txn)
    owner = BatchSender(Brokers(dc2, {}, "dc2"), transaction=new_txn)
    try:
        pid, epoch = zombie_txn.init()
        zombie.use_producer(pid, epoch)
        zombie.send([Outgoing(remote, 0, _progress_batch(b"zombie-1"))])
        assert [r.error for r in _wait(zombie, 1)] == [0]
        pid2, epoch2 = new_txn.init()  # the take-over: aborts the zombie's open transaction
        # The same producer id, the epoch bumped (by two when a transaction was open: its abort takes one too).
        assert pid2 == pid and epoch2 > epoch, (pid, epoch, pid2, epoch2)
        owner.use_producer(pid2, epoch2)
        # The zombie goes on writing: its partition is in a transaction already, so no coordinator call stops it;
        # the partition leader refuses the batch for its old epoch.
        zombie.send([Outgoing(remote, 0, _progress_batch(b"zombie-2"))])
        refused = _wait(zombie, 1)
        assert [r.error for r in refused if r.error in FENCED_ANSWERS] == [refused[0].error], \
            [NAMES.get(r.error, r.error) for r in refused]
        with pytest.raises(ProducerFenced, match="fenced"):
            zombie_txn.end(True)
        with pytest.raises(ProducerFenced):  # nor may it start writing another partition
            zombie_txn.partitions.clear()
            zombie_txn.add([(remote, 0)])
        owner.send([Outgoing(remote, 0, _progress_batch(b"owner"))])
        assert [r.error for r in _wait(owner, 1)] == [0]
        new_txn.end(True)
    finally:
        for s in (zombie, owner):
            s.close()
        for t in (zombie_txn, new_txn):
            t.close()
    assert [r.value for r in read_all(dc2, remote)] == [b"owner"]  # nothing the zombie wrote is visible
