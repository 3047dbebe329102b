"""The batch-forwarding prototype (bench/batch_forward.py, bench only) copies records exactly: what its
benchmark figures in bench/results/batch-forward-2026-11-26.md rest on. In its idempotent mode it copies
what a read_committed consumer sees of idempotent and transactional sources, as one idempotent producer."""
from __future__ import annotations

import struct
import subprocess
import sys
import time

from bench import batch_forward
from tests.kafka_harness import REPO, create_topic, end_offsets, produce_sequence, producer, read_all, wait_until

PARTITIONS, RECORDS = 4, 20_000


def test_forwarded_batches_hold_the_same_records_at_the_same_offsets(dc1: str, dc2: str, name: str) -> None:
    topic, remote = f"{name}.fwd", f"{name}.fwd.copy"
    create_topic(dc1, topic, PARTITIONS)
    create_topic(dc2, remote, PARTITIONS)
    # Not idempotent: the prototype refuses batches whose producer id it would have to rewrite.
    produce_sequence(dc1, topic, PARTITIONS, RECORDS, **{"enable.idempotence": False})
    proc = subprocess.Popen([sys.executable, "-m", "bench.copy_ceiling", "--forward", dc1, dc2, topic, remote,
                             str(PARTITIONS)], cwd=REPO)
    try:
        wait_until(lambda: sum(end_offsets(dc2, remote).values()) >= RECORDS, 60, what="backlog forwarded")
        assert proc.poll() is None, "the prototype exited"
    finally:
        proc.kill()
        proc.wait()
    source, target = read_all(dc1, topic), read_all(dc2, remote)
    assert len(source) == RECORDS and all(r.headers for r in source)
    assert target == source  # partition, offset, key, value, headers and timestamp of every record


def _transactions(bootstrap: str, topic: str, partitions: int, count: int, per_txn: int) -> int:
    """``count`` transactions of ``per_txn`` records over every partition, every other one aborted: the
    gappy, partly aborted source a Kafka Streams application leaves. Returns how many were committed."""
    p = producer(bootstrap, **{"transactional.id": f"{topic}-txn"})
    p.init_transactions(30)
    committed = 0
    for t in range(count):
        p.begin_transaction()
        for i in range(per_txn):
            p.produce(topic, value=b"txn-%d-%d" % (t, i), key=b"t%d" % i, partition=i % partitions,
                      headers=[("txn", str(t).encode())])
        p.flush(30)  # nothing in flight when aborting (Kafka 4: INVALID_TXN_STATE otherwise)
        if t % 2:
            p.abort_transaction(30)
        else:
            p.commit_transaction(30)
            committed += per_txn
    return committed


def _producer_ids(bootstrap: str, topic: str, partitions: int) -> set[int]:
    """The producer ids of the record batches ``topic`` holds, read with the prototype's own fetch."""
    where = batch_forward.leaders(bootstrap, topic)
    wire = batch_forward.Wire(*where.brokers[next(iter(where.partitions.values()))])
    response = wire.call(batch_forward.API_FETCH, 11, batch_forward.fetch_request(
        topic, dict.fromkeys(range(partitions), 0), 4 << 20, 64 << 20))
    wire.sock.close()
    return {struct.unpack_from(">q", b, 43)[0] for batches, _aborted in
            batch_forward.parse_fetch(response, topic, any_producer=True).values() for b in batches}


def test_idempotent_mode_copies_committed_records_of_idempotent_and_transactional_producers(
        dc1: str, dc2: str, name: str) -> None:
    topic, remote = f"{name}.fwdi", f"{name}.fwdi.copy"
    create_topic(dc1, topic, PARTITIONS)
    create_topic(dc2, remote, PARTITIONS)
    produce_sequence(dc1, topic, PARTITIONS, 5_000)  # idempotent (the harness producer's default)
    committed = 5_000 + _transactions(dc1, topic, PARTITIONS, 20, 400)
    produce_sequence(dc1, topic, PARTITIONS, 5_000, start=5_000)
    committed += 5_000
    source = read_all(dc1, topic)
    # Preconditions: the source has aborted records and markers (gaps) and more than one producer.
    assert len(source) == committed < sum(end_offsets(dc1, topic, "read_uncommitted").values())
    assert len(_producer_ids(dc1, topic, PARTITIONS) - {-1}) >= 3
    proc = subprocess.Popen([sys.executable, "-m", "bench.copy_ceiling", "--forward-idempotent", dc1, dc2, topic,
                             remote, str(PARTITIONS)], cwd=REPO)
    try:
        wait_until(lambda: sum(end_offsets(dc2, remote).values()) >= committed, 60, what="committed records forwarded")
        time.sleep(1)  # nothing beyond them arrives
        assert proc.poll() is None, "the prototype exited (a refused sequence would stop it)"
    finally:
        proc.kill()
        proc.wait()
    target = read_all(dc2, remote)
    assert sum(end_offsets(dc2, remote, "read_uncommitted").values()) == committed  # no gaps, no extras
    for p in range(PARTITIONS):
        mine = [(r.key, r.value, r.headers, r.timestamp) for r in target if r.partition == p]
        assert mine == [(r.key, r.value, r.headers, r.timestamp) for r in source if r.partition == p], p
        assert [r.offset for r in target if r.partition == p] == list(range(len(mine)))
    assert len(_producer_ids(dc2, remote, PARTITIONS)) == 1  # one idempotent producer: the copier
