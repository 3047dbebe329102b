"""Pruning and snapshots of the offset map (pure logic; the Kafka side is in tests/integration)."""

import random

import pytest

from mirror_core.errors import ProgressError
from mirror_core.stores.map_snapshots import CHUNK_BYTES, decode_chunk, encode_chunks, partition_from_chunks
from mirror_core.stores.offset_blocks import Folding
from mirror_core.stores.offset_map import PartitionMap


def gappy(records: int, txn: int = 100, seed: int = 1) -> tuple[PartitionMap, dict[int, int]]:
    """A transactional source: a marker (an offset gap) after every ``txn`` records, some aborted."""
    rng = random.Random(seed)
    pm, s, t = PartitionMap(), 0, 0
    truth: dict[int, int] = {}
    while len(truth) < records:
        aborted = rng.random() < 0.1
        for _ in range(txn):
            if not aborted:
                truth[s] = t
                pm.add(s, t)
                t += 1
            s += 1
        s += 1  # the commit/abort marker
    return pm, truth


def test_prune_keeps_every_offset_at_or_after_the_log_start_exact() -> None:
    pm, truth = gappy(20_000)
    before = [pm.translate(o) for o in range(0, max(truth) + 1)]
    log_start = max(truth) // 2 + 37
    dropped = pm.prune(log_start)
    assert dropped > 0 and len(pm) < len(before)
    assert pm.horizon <= log_start
    for o in range(log_start, max(truth) + 1):
        assert pm.translate(o) == before[o], o
    below = pm.translate(pm.horizon - 1)
    assert below.beyond_retention and below.target_offset is None and not below.exact
    assert "beyond retention" in below.note


def test_prune_below_the_first_run_changes_nothing() -> None:
    pm, _ = gappy(1000)
    runs = len(pm)
    assert pm.prune(0) == 0 and len(pm) == runs and pm.horizon == 0


def test_pieces_are_typed_arrays() -> None:
    pm, _ = gappy(1000)
    assert pm.sources.typecode == "q" and pm.targets.typecode == "q"


@pytest.mark.parametrize("runs", [0, 1, 40_000])
def test_snapshot_chunks_round_trip(runs: int) -> None:
    pm = PartitionMap(Folding(at=1 << 30))  # never folds: runs only
    for i in range(runs):
        pm.add(i * 3, i * 2)
    pm.horizon = 7
    values = encode_chunks(pm, 4242)
    chunks = [decode_chunk(v) for v in values]
    assert len(chunks) == max(1, -(-runs * 16 // CHUNK_BYTES))
    assert all(c.position == 4242 and c.horizon == 7 and c.count == len(chunks) for c in chunks)
    assert [s for c in chunks for s in c.sources] == list(pm.sources)
    assert [t for c in chunks for t in c.targets] == list(pm.targets)
    assert all(len(v) < 1_000_000 for v in values)


def test_snapshot_of_blocks_round_trips_in_chunks_under_the_limit() -> None:
    pm, truth = gappy(300_000, txn=3)
    pm.add(max(truth) + 10, truth[max(truth)] + 7)
    assert pm.blocks
    values = encode_chunks(pm, 5)
    again = partition_from_chunks([decode_chunk(v) for v in values])
    assert list(again.sources) == list(pm.sources) and set(again.blocks) == set(pm.blocks)
    assert all(len(v) < 1_000_000 for v in values)
    for o in range(0, max(truth) + 20, 7):
        assert again.translate(o) == pm.translate(o)


def test_a_version_1_snapshot_loads_folded() -> None:
    """Maps written before blocks existed (runs only, version 1) still load, folded into blocks."""
    import struct
    pm, truth = gappy(20_000, txn=2)
    runs = pm.runs()
    header = struct.pack(">hqqii", 1, 77, 0, 1, len(runs))
    body = b"".join(struct.pack(">q", s) for s, _ in runs) + b"".join(struct.pack(">q", t) for _, t in runs)
    chunk = decode_chunk(header + body)
    assert chunk.version == 1 and chunk.position == 77
    loaded = partition_from_chunks([chunk])
    assert loaded.blocks and len(loaded) < len(runs) // 10
    for o in range(0, max(truth) + 1):
        assert loaded.translate(o) == pm.translate(o), o


def test_unknown_snapshot_version_is_one_clear_error() -> None:
    raw = bytearray(encode_chunks(PartitionMap(), 1)[0])
    raw[1] = 9
    with pytest.raises(ProgressError, match="version 9 not understood"):
        decode_chunk(bytes(raw))
