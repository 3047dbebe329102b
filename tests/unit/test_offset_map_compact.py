"""The compact offset map (runs + bitmap blocks) against a reference model: the runs alone.

``RunsModel`` is the offset map as it was before blocks (issue 62), a few lines over two lists: a later
entry supersedes every earlier one at or after its source offset, inside a gap the next run's target,
linear after the last entry. The compact map, folded after every few runs (small ``Folding`` limits so
that short histories fold), must answer every position exactly as the model does.
"""

from __future__ import annotations

import bisect
import random

from hypothesis import given, settings
from hypothesis import strategies as st
from pyroaring import BitMap

from mirror_core.stores.dense_bits import DenseBits
from mirror_core.stores.map_snapshots import decode_chunk, encode_chunks, partition_from_chunks
from mirror_core.stores.offset_blocks import Folding
from mirror_core.stores.offset_map import PartitionMap

TINY = Folding(at=4, min_runs=2, long_run=6, span=40)


class RunsModel:
    def __init__(self) -> None:
        self.sources: list[int] = []
        self.targets: list[int] = []

    def add(self, source: int, target: int) -> None:
        cut = bisect.bisect_left(self.sources, source)
        del self.sources[cut:], self.targets[cut:]
        if self.sources and self.targets[-1] - self.sources[-1] == target - source:
            return
        self.sources.append(source)
        self.targets.append(target)

    def translate(self, x: int, replicated_next: int | None = None) -> int | None:
        if not self.sources or x < self.sources[0]:
            return None
        i = bisect.bisect_right(self.sources, x) - 1
        target = self.targets[i] + x - self.sources[i]
        if i + 1 < len(self.sources):
            return min(target, self.targets[i + 1])
        if replicated_next is not None and x > replicated_next:
            return self.targets[i] + replicated_next - self.sources[i]
        return target

    def source_of(self, y: int) -> int | None:
        if not self.targets or y < self.targets[0]:
            return None
        i = bisect.bisect_right(self.targets, y) - 1
        source = self.sources[i] + y - self.targets[i]
        return min(source, self.sources[i + 1]) if i + 1 < len(self.sources) else source


def assert_same(pm: PartitionMap, model: RunsModel, upto: int, floor: int = 0) -> None:
    for x in range(floor, upto):
        assert pm.translate(x).target_offset == model.translate(x), (x, pm.runs(), model.sources, model.targets)
    assert pm.translate(upto + 5, upto).target_offset == model.translate(upto + 5, upto)


def mirror_history(spec: list[tuple[int, int, int, int]]) -> list[tuple[int, int]]:
    """Entries as a mirror writes them: records copied with source gaps (compaction, markers) and target
    gaps (the target's own markers); now and then a crash replays from an earlier source position, the
    copies landing after everything the target holds."""
    entries: list[tuple[int, int]] = []
    src = tgt = 0
    delta: int | None = None
    copied: list[int] = []
    for src_gap, tgt_gap, records, replay in spec:
        if replay and copied:
            src = copied[-min(replay, len(copied))]  # progress was behind what landed
            del copied[-min(replay, len(copied)):]
            delta = None
        src += src_gap
        for i in range(records):
            if delta != tgt - src:
                delta = tgt - src
                entries.append((src, tgt))
            copied.append(src)
            src += 1
            tgt += 1 + (tgt_gap if i == records - 1 else 0)
    return entries


histories = st.lists(st.tuples(st.integers(0, 4), st.integers(0, 2), st.integers(1, 7), st.integers(0, 12)),
                     min_size=1, max_size=120)


@settings(max_examples=300, deadline=None)
@given(histories)
def test_mirror_histories_translate_as_the_runs_do(spec: list[tuple[int, int, int, int]]) -> None:
    pm, model = PartitionMap(TINY), RunsModel()
    for s, t in mirror_history(spec):
        pm.add(s, t)
        model.add(s, t)
    pm.compact()
    assert_same(pm, model, max(model.sources) + 10)
    for y in range(0, max(model.targets) + 10):
        assert pm.source_of(y) == model.source_of(y), y
    assert pm.runs() == list(zip(model.sources, model.targets, strict=True)) or \
        all(pm.translate(x).target_offset == model.translate(x) for x in range(max(model.sources) + 1))


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 80), st.integers(0, 80)), min_size=1, max_size=80))
def test_any_entries_translate_as_the_runs_do(steps: list[tuple[bool, int, int]]) -> None:
    """Entries no mirror writes too (targets going back, as after a recreated remote topic; a replay that
    continues the last run): mostly small steps forward, so that runs fold, and anywhere now and then."""
    pm, model = PartitionMap(TINY), RunsModel()
    for jump, a, b in steps:
        s, t = (a, b) if jump or not model.sources else (model.sources[-1] + 1 + a % 4, model.targets[-1] + 1 + b % 4)
        pm.add(s, t)
        model.add(s, t)
        assert_same(pm, model, max(model.sources) + 10)
    if model.targets == sorted(model.targets):
        for y in range(0, max(model.targets) + 10):
            assert pm.source_of(y) == model.source_of(y), y


@settings(max_examples=200, deadline=None)
@given(histories, st.lists(st.integers(0, 400), min_size=1, max_size=4))
def test_pruned_map_is_exact_from_the_log_start_and_beyond_retention_below(
        spec: list[tuple[int, int, int, int]], starts: list[int]) -> None:
    pm, model = PartitionMap(TINY), RunsModel()
    entries = mirror_history(spec)
    for s, t in entries:
        pm.add(s, t)
        model.add(s, t)
    end = max(model.sources) + 10
    floor = 0
    for log_start in sorted(starts):
        pm.prune(log_start)
        floor = max(floor, log_start)
        assert pm.horizon <= floor
        assert_same(pm, model, end, floor)
        if pm.horizon:
            below = pm.translate(pm.horizon - 1)
            assert below.beyond_retention and below.target_offset is None
        # the snapshot of the pruned map translates the same
        again = partition_from_chunks([decode_chunk(v) for v in encode_chunks(pm, 1)])
        assert again.horizon == pm.horizon
        for x in range(floor, end):
            assert again.translate(x).target_offset == pm.translate(x).target_offset


def alternating(n: int, folding: Folding | None = None) -> tuple[PartitionMap, dict[int, int]]:
    """Every other source record compacted away: a run per record."""
    pm, truth = PartitionMap(folding), {}
    for i in range(n):
        pm.add(2 * i, i)
        truth[2 * i] = i
    return pm, truth


def test_an_alternating_history_costs_about_a_bit_per_source_offset() -> None:
    pm, truth = alternating(500_000)
    offsets = 2 * len(truth)
    assert pm.nbytes() / offsets < 0.2, pm.nbytes()
    rng = random.Random(3)
    for x in rng.sample(range(offsets), 2000):
        assert pm.translate(x).target_offset == (x + 1) // 2
    values = [decode_chunk(v) for v in encode_chunks(pm, 9)]
    assert sum(len(v) for v in encode_chunks(pm, 9)) / offsets < 0.2
    again = partition_from_chunks(values)
    for x in rng.sample(range(offsets), 2000):
        assert again.translate(x).target_offset == (x + 1) // 2


def test_a_transactional_history_costs_a_few_bytes_per_transaction() -> None:
    pm, s, t = PartitionMap(), 0, 0
    for _ in range(20_000):  # 100 records then a marker
        pm.add(s, t)
        s, t = s + 101, t + 100
    assert pm.nbytes() / s < 0.1
    assert pm.translate(100).target_offset == 100 and pm.translate(101).target_offset == 100
    assert pm.translate(150).target_offset == 149


def test_a_replay_into_folded_history_supersedes_it() -> None:
    pm, _ = alternating(10_000)
    assert pm.blocks
    pm.add(5_001, 20_000)  # a crash: source 5,001 on was copied again from target 20,000
    assert pm.translate(5_000).target_offset == 2_500
    assert pm.translate(5_001).target_offset == 20_000  # the newest copy
    assert pm.translate(9_000).target_offset == 20_000 + 3_999


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 40), st.integers(1, 30)), min_size=1, max_size=30), st.integers(0, 900))
def test_dense_bits_answer_as_roaring_does(ranges: list[tuple[int, int]], cut: int) -> None:
    """The plain bit array a small block may hold its source offsets in, against roaring itself."""
    dense, roaring, end = DenseBits(), BitMap(), 0
    for gap, length in ranges:  # appended in order, as a block appends runs
        dense.add_range(end + gap, end + gap + length)
        roaring.add_range(end + gap, end + gap + length)
        end += gap + length
    assert len(dense) == len(roaring) and dense.max() == roaring.max()
    assert list(dense.to_array()) == list(roaring) and list(DenseBits.of(roaring).to_array()) == list(roaring)
    assert DenseBits(dense.serialize()).to_array() == dense.to_array()
    for v in range(-1, end + 10):
        assert dense.rank(v) == roaring.rank(v) if v >= 0 else dense.rank(v) == 0
    assert [dense[i] for i in range(len(dense))] == list(roaring)
    assert list(dense.shift(-cut).to_array()) == [v - cut for v in roaring if v >= cut]
    dense.remove_range(cut, 1 << 32)
    roaring.remove_range(cut, 1 << 32)
    assert list(dense.to_array()) == list(roaring) and len(dense) == len(roaring)


def test_small_gappy_blocks_cost_a_bit_per_offset() -> None:
    """5,000 offsets a partition, every other one removed: plain bits, not roaring's 8 KiB container."""
    pm, _ = alternating(2_500)
    pm.compact()
    assert any(isinstance(b.src, DenseBits) for b in pm.blocks.values())
    assert pm.nbytes() / 5_000 < 0.2, pm.nbytes()
    for x in range(5_000):
        assert pm.translate(x).target_offset == (x + 1) // 2


def test_dense_bits_rank_and_select_across_its_directory() -> None:
    """Spans of many 512-byte stretches (the rank directory), changed after it was built."""
    rng = random.Random(62)
    dense, roaring, end = DenseBits(), BitMap(), 0
    for _ in range(3):
        for _ in range(2_000):
            gap, length = rng.randrange(0, 9), rng.randrange(1, 12)
            dense.add_range(end + gap, end + gap + length)
            roaring.add_range(end + gap, end + gap + length)
            end += gap + length
        for v in rng.sample(range(end + 5), 3_000):
            assert dense.rank(v) == roaring.rank(v), v
        for i in rng.sample(range(len(roaring)), 300):
            assert dense[i] == roaring[i]
    cut = end // 3
    dense.remove_range(cut, 1 << 32)
    roaring.remove_range(cut, 1 << 32)
    for v in rng.sample(range(end + 5), 3_000):
        assert dense.rank(v) == roaring.rank(v), v
