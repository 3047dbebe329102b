"""A source batch damaged on the broker's disk (brokers do not re-check CRCs when they serve a fetch): on each data
path nothing of it or after it reaches the target, nothing is skipped silently, its partition pauses with one line
naming cluster, topic, partition and offsets, the other partitions go on, and an operator's recorded skip of the
range lets copying go on with the skip reported."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mirror_core.state.store import StateStore
from tests.integration.conftest import flow_lines
from tests.kafka_harness import (
    REPO,
    create_topic,
    metric,
    mirror_env,
    producer,
    read_all,
    wait_until,
    wait_until_equal,
)

PER_BATCH, BATCHES = 40, 3
#: partition -> how its middle batch is damaged (partition 3 stays intact)
DAMAGE = {0: "a record byte", 1: "the control bit", 2: "the record count"}


def batch_positions(segment: Path) -> list[tuple[int, int, int]]:
    """(file position, base offset, size) of each batch stored in ``segment``."""
    data, pos, out = segment.read_bytes(), 0, []
    while pos + 61 <= len(data):
        base, length = struct.unpack_from(">qi", data, pos)
        out.append((pos, base, 12 + length))
        pos += 12 + length
    return out


def damage(segment: Path, how: str) -> tuple[int, int]:
    """Damages the middle batch of ``segment`` in place (the broker serves it from the page cache as it is now);
    its first and last offset."""
    pos, base, size = batch_positions(segment)[1]
    with segment.open("r+b") as f:
        if how == "a record byte":
            at = pos + size - 3  # inside the last record's value
        elif how == "the control bit":
            at = pos + 22  # attributes' low byte: bit 5 (0x20) is the control flag
        else:
            at = pos + 57  # record count: zeroed below
        f.seek(at)
        old = f.read(1)
        f.seek(at)
        f.write(b"\x00\x00\x00\x00" if how == "the record count" else bytes([old[0] ^ (0x20 if at == pos + 22 else 1)]))
    return base, base + PER_BATCH - 1


def partitions_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mirror_core", "partitions", *args], capture_output=True,
                          text=True, timeout=60, cwd=REPO, env=mirror_env())


@pytest.mark.parametrize("path", ["records", "batches"])
def test_a_damaged_source_batch_pauses_its_partition_and_a_recorded_skip_goes_past_it(
        clusters, dc1, dc2, name, start_mirror, tmp_path, path):  # type: ignore[no-untyped-def]
    topic = f"{name}.orders"
    create_topic(dc1, topic, 4)
    p = producer(dc1, **{"linger.ms": 5000})
    for b in range(BATCHES):
        for part in range(4):
            for i in range(PER_BATCH):
                p.produce(topic, value=b"%d-%d-%d" % (part, b, i), partition=part)
        assert p.flush(30) == 0  # one batch per partition and round
    segments = {part: clusters["dc1"].base_dir / "data" / f"{topic}-{part}" / "00000000000000000000.log"
                for part in range(4)}
    for part, segment in segments.items():
        assert [base for _, base, _ in batch_positions(segment)] == [0, 40, 80], f"partition {part}'s batches"
    ranges = {part: damage(segments[part], how) for part, how in DAMAGE.items()}

    db = f"sqlite:///{tmp_path / 'state.db'}"
    m = start_mirror(flow_lines(name, f"replication.data.path = {path}"), args=["--state-db", db])
    remote = f"dc1.{topic}"

    def paused() -> dict[int, str]:
        return {q["partition"]: q["paused"] for q in m.partitions() if q["topic"] == topic and q["paused"]}

    wait_until(lambda: len(paused()) == 3, 90, what="the three damaged partitions to pause")
    reasons = paused()
    for part, (first, _last) in ranges.items():
        assert "source cluster dc1" in reasons[part] and "damaged" in reasons[part], reasons[part]
        assert f"offset {first}" in reasons[part] or f"offsets {first}-" in reasons[part], reasons[part]
        assert "mirror-core partitions skip" in reasons[part], reasons[part]
        assert (metric(m, "mirror_damaged_batches_total", topic=topic, partition=str(part)) or 0) >= 1
    assert f"{topic}[0] paused: source cluster dc1" in m.log()
    # The status page reads them from the state store, as the instance reports them.
    wait_until(lambda: {(q.topic, q.partition) for q in StateStore(db).paused_partitions()} ==
               {(topic, part) for part in DAMAGE}, 30, what="the paused partitions reported to the store")

    # The intact partition is copied whole and goes on; the damaged ones hold exactly what precedes the damage.
    p.produce(topic, value=b"3-late", partition=3)
    assert p.flush(30) == 0
    want = {0: PER_BATCH, 1: PER_BATCH, 2: PER_BATCH, 3: PER_BATCH * BATCHES + 1}
    wait_until_equal(lambda: _per_partition(dc2, remote), want, 60, "the intact partition to be copied")
    values: dict[int, list[bytes]] = {}
    for r in read_all(dc2, remote):
        values.setdefault(r.partition, []).append(r.value)
    for part in DAMAGE:
        assert values[part] == [b"%d-0-%d" % (part, i) for i in range(PER_BATCH)], f"partition {part}"

    # The operator skips partition 0's damaged batch (recorded, who and why); the others stay paused.
    first, last = ranges[0]
    bad = partitions_cli("skip", "--state-db", db, "--flow", "dc1->dc2", "--topic", topic, "--partition", "0",
                         "--offsets", f"{first + 1}-{last}", "--reason", "bit rot on dc1", "--by", "alice")
    assert bad.returncode == 0, bad.stderr  # recorded; the mirror refuses it: it does not start at the damage
    wait_until(lambda: "does not cover the damaged batch" in str(actions(db)), 30, what="the short skip to be refused")
    ok = partitions_cli("skip", "--state-db", db, "--flow", "dc1->dc2", "--topic", topic, "--partition", "0",
                        "--offsets", f"{first}-{last}", "--reason", "bit rot on dc1", "--by", "alice")
    assert ok.returncode == 0, ok.stderr
    want[0] = PER_BATCH * (BATCHES - 1)
    wait_until_equal(lambda: _per_partition(dc2, remote), want, 60, "partition 0 to go on past the skip")
    assert metric(m, "mirror_skipped_records_total", topic=topic, partition="0") == PER_BATCH
    done = [a for a in actions(db) if a["ok"]]
    assert len(done) == 1 and done[0]["requested_by"] == "alice", done
    assert f"skipped offsets {first}-{last} ({PER_BATCH} offsets" in done[0]["outcome"], done
    assert set(paused()) == {1, 2}
    values.clear()
    for r in read_all(dc2, remote):
        values.setdefault(r.partition, []).append(r.value)
    assert values[0] == [b"0-%d-%d" % (b, i) for b in (0, 2) for i in range(PER_BATCH)]


def actions(db: str) -> list[dict[str, Any]]:
    listed: list[dict[str, Any]] = json.loads(partitions_cli("actions", "--json", "--state-db", db).stdout)
    return listed


def _per_partition(bootstrap: str, topic: str) -> dict[int, int]:
    out: dict[int, int] = {}
    for r in read_all(bootstrap, topic, timeout=10):
        out[r.partition] = out.get(r.partition, 0) + 1
    return out
