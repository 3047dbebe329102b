"""The batch-forwarding prototype (bench/batch_forward.py, bench only) copies records exactly: what its
benchmark figures in bench/results/batch-forward-2026-11-26.md rest on."""
from __future__ import annotations

import subprocess
import sys

from tests.kafka_harness import REPO, create_topic, end_offsets, produce_sequence, read_all, wait_until

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
