from hypothesis import given, settings
from hypothesis import strategies as st

from mirror_core.stores.offset_map import PartitionMap
from mirror_core.stores.records import (
    decode_checkpoint_key,
    decode_checkpoint_value,
    decode_sync_key,
    decode_sync_value,
    encode_checkpoint_key,
    encode_checkpoint_value,
    encode_sync_key,
    encode_sync_value,
)


def test_runs_record_only_delta_changes_and_translate_exactly() -> None:
    pm = PartitionMap()
    # source 0..9 -> target 0..9, then source gap (compaction) 10..19 missing, then 20..29 -> 10..19
    pm.add(0, 0)
    pm.add(5, 5)  # same delta: not recorded
    pm.add(20, 10)
    assert (list(pm.sources), list(pm.targets)) == ([0, 20], [0, 10])
    assert pm.translate(7).target_offset == 7
    assert pm.translate(10).target_offset == 10  # committed inside the gap: next record is target 10
    assert pm.translate(15).target_offset == 10
    assert pm.translate(25).target_offset == 15


def test_replay_supersedes_newer_entries() -> None:
    pm = PartitionMap()
    pm.add(0, 0)
    pm.add(100, 103)  # e.g. after transaction markers
    pm.add(50, 200)  # replay from 50 after a crash: the newest copy starts at target 200
    assert (list(pm.sources), list(pm.targets)) == ([0, 50], [0, 200])
    assert pm.translate(60).target_offset == 210


def test_not_yet_replicated_and_before_map() -> None:
    pm = PartitionMap()
    pm.add(10, 0)
    assert pm.translate(5).target_offset is None and not pm.translate(5).exact
    t = pm.translate(30, replicated_next=20)
    assert not t.exact and t.target_offset == 10 and "not replicated" in t.note


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(1, 5), st.integers(0, 2)), min_size=1, max_size=200))
def test_translation_matches_a_record_by_record_copy(spec) -> None:  # type: ignore[no-untyped-def]
    """Model: copy records with source gaps (skip) and target gaps (markers); record runs as the
    mirror does; every committed position must translate to the target offset of the next record."""
    pm = PartitionMap()
    src, tgt = 0, 0
    copies: list[tuple[int, int]] = []
    for keep, src_step, tgt_gap in spec:
        if keep:
            copies.append((src, tgt))
            pm.add(src, tgt)
            tgt += 1 + tgt_gap
        src += src_step
    for committed in range(0, src + 1):
        following = [t for s, t in copies if s >= committed]
        if not copies or committed < copies[0][0]:
            continue
        expected = following[0] if following else None
        got = pm.translate(committed).target_offset
        if expected is not None:
            assert got == expected or (got is not None and got > max(t for s, t in copies if s < committed)
                                       and got <= expected)


def test_mm2_layouts_roundtrip() -> None:
    assert decode_sync_key(encode_sync_key("orders", 3)) == ("orders", 3)
    assert decode_sync_value(encode_sync_value(10, 20)) == (10, 20)
    assert encode_sync_key("a", 1) == b"\x00\x01a\x00\x00\x00\x01"
    key = encode_checkpoint_key("g", "dc1.orders", 2)
    assert decode_checkpoint_key(key) == ("g", "dc1.orders", 2)
    assert decode_checkpoint_value(encode_checkpoint_value(5, 7, "m")) == (5, 7, "m")


def test_inverse_maps_target_positions_back_to_source_positions() -> None:
    pm = PartitionMap()
    pm.add(0, 0)
    pm.add(10, 8)  # two source records (8, 9) were not copied (e.g. compacted away)
    pm.add(20, 18)
    assert pm.source_of(0) == 0
    assert pm.source_of(5) == 5
    assert pm.source_of(8) == 10  # the copy of source 10 is at target 8
    assert pm.source_of(12) == 14
    assert pm.source_of(30) == 32  # linear after the last run
    assert PartitionMap().source_of(3) is None
    for s in (0, 3, 10, 15, 20, 25):  # round trip through the forward translation
        t = pm.translate(s).target_offset
        assert t is not None and pm.source_of(t) == s
