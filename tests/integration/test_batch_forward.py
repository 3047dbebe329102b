"""The batch-forwarding prototype (bench/batch_forward.py, bench only) copies records exactly: what its
benchmark figures in bench/results/batch-forward-2026-11-26.md rest on. In its idempotent mode it copies
what a read_committed consumer sees of idempotent and transactional sources, as one idempotent producer."""
from __future__ import annotations

import subprocess
import sys
import time

import pytest

from bench import batch_forward
from mirror_core.wire.connection import Connection
from mirror_core.wire.records import CONTROL, TRANSACTIONAL, attributes, control_type, producer_id
from tests.kafka_harness import (
    REPO,
    create_topic,
    end_offsets,
    produce_sequence,
    produce_transactions,
    read_all,
    wait_until,
)

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


def _batches(bootstrap: str, topic: str, partitions: int) -> dict[int, list[memoryview]]:
    """Each partition's record batches (data and control), read with the prototype's own fetch."""
    where = batch_forward.leaders(bootstrap, topic, {})
    wire = Connection(*where.brokers[next(iter(where.partitions.values()))], {}, bootstrap)
    response = wire.call(batch_forward.API_FETCH, 11, batch_forward.fetch_request(
        topic, dict.fromkeys(range(partitions), 0), 4 << 20, 64 << 20))
    wire.sock.close()
    return {p: batches for p, (batches, _aborted) in
            batch_forward.parse_fetch(response, topic, any_producer=True).items()}


@pytest.mark.parametrize("mode", ["idempotent", "transactional"])
def test_idempotent_and_transactional_modes_copy_what_read_committed_sees_of_any_producer(
        dc1: str, dc2: str, name: str, mode: str) -> None:
    topic, remote = f"{name}.fwd{mode[0]}", f"{name}.fwd{mode[0]}.copy"
    create_topic(dc1, topic, PARTITIONS)
    create_topic(dc2, remote, PARTITIONS)
    produce_sequence(dc1, topic, PARTITIONS, 5_000)  # idempotent (the harness producer's default)
    first = 5_000 + produce_transactions(dc1, topic, PARTITIONS, 20, 400)
    # Preconditions: the source has aborted records and markers (gaps) and more than one producer.
    assert len(read_all(dc1, topic)) == first < sum(end_offsets(dc1, topic, "read_uncommitted").values())
    assert len({producer_id(b) for bs in _batches(dc1, topic, PARTITIONS).values() for b in bs} - {-1}) >= 2
    proc = subprocess.Popen([sys.executable, "-m", "bench.copy_ceiling", f"--forward-{mode}", dc1, dc2, topic,
                             remote, str(PARTITIONS)], cwd=REPO)
    try:
        # Records, not end offsets: the transactional mode's commit markers take offsets too.
        wait_until(lambda: len(read_all(dc2, remote)) >= first, 60, interval=1, what="first records forwarded")
        # More after the copier went idle (committed, in the transactional mode): a second transaction adds the
        # partitions again, and the sequences go on from where the first left them.
        produce_sequence(dc1, topic, PARTITIONS, 5_000, start=5_000)
        committed = first + 5_000
        wait_until(lambda: len(read_all(dc2, remote)) >= committed, 60, interval=1, what="all records forwarded")
        time.sleep(1)  # nothing beyond them arrives
        assert proc.poll() is None, "the prototype exited (a refused sequence would stop it)"
    finally:
        proc.kill()
        proc.wait()
    source, target = read_all(dc1, topic), read_all(dc2, remote)
    assert len(source) == len(target) == committed
    for p in range(PARTITIONS):
        mine = [(r.key, r.value, r.headers, r.timestamp) for r in target if r.partition == p]
        assert mine == [(r.key, r.value, r.headers, r.timestamp) for r in source if r.partition == p], p
        offsets = [r.offset for r in target if r.partition == p]
        if mode == "idempotent":  # gapless: no markers, no aborted records
            assert offsets == list(range(len(offsets))), p
    copied = _batches(dc2, remote, PARTITIONS)
    assert len({producer_id(b) for bs in copied.values() for b in bs}) == 1  # one producer: the copier
    for p, batches in copied.items():
        data = [b for b in batches if not attributes(b) & CONTROL]
        markers = [control_type(b) for b in batches if attributes(b) & CONTROL]
        if mode == "idempotent":  # nothing transactional, nothing beyond the committed records
            assert not markers and not any(attributes(b) & TRANSACTIONAL for b in data), p
        else:  # every data batch in a transaction of the copier's; at least two transactions, each committed
            assert all(attributes(b) & TRANSACTIONAL for b in data), p
            assert len(markers) >= 2 and set(markers) == {1}, (p, markers)
    if mode == "idempotent":
        assert sum(end_offsets(dc2, remote, "read_uncommitted").values()) == committed
