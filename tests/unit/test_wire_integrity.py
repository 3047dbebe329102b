"""wire/integrity.py: fetched batches are cut before the first one whose CRC or offsets fail, which is reported."""

from __future__ import annotations

import pytest

from mirror_core.wire.fetch import FetchedPartition
from mirror_core.wire.integrity import intact
from mirror_core.wire.records import committed, split_batches
from tests.unit.record_batches import batch, marker


def views(*batches: bytes) -> list[memoryview]:
    return split_batches(memoryview(b"".join(batches)))


def flipped(raw: bytes, at: int, bit: int = 0x01) -> bytes:
    return raw[:at] + bytes([raw[at] ^ bit]) + raw[at + 1:]


def test_intact_batches_pass_whole() -> None:
    got, damage = intact(views(batch(0, 4), batch(5, 2), marker(8, 7, 1)), 9)
    assert damage is None and len(got) == 3


@pytest.mark.parametrize("at, bit, what", [
    (22, 0x20, "the control bit"),  # alone it would make committed() drop the batch as a marker
    (22, 0x10, "the transactional bit"),
    (60, 0x05, "the record count"),
    (70, 0x01, "a record byte"),
])
def test_a_damaged_batch_is_cut_off_with_the_batches_after_it_and_named(at: int, bit: int, what: str) -> None:
    good, bad, after = batch(0, 4), flipped(batch(5, 4), at, bit), batch(10, 4)
    got, damage = intact(views(good, bad, after), 15)
    assert [bytes(b) for b in got] == [good], what
    assert damage is not None and (damage.first, damage.last, damage.size) == (5, 9, len(bad))  # (the next: 10)
    assert "CRC32C" in damage.reason and damage.describe().startswith("record batch at offsets 5-9 (")
    _, alone = intact(views(good, bad), 15)
    assert alone is not None and alone.last is None and alone.describe().startswith("record batch at offset 5 (")


def test_the_damage_is_what_committed_would_otherwise_have_dropped_silently() -> None:
    bad = flipped(batch(5, 4), 22, 0x20)  # a data batch that now says "control"
    assert committed(views(batch(0, 4), bad), []) == views(batch(0, 4))[:1]  # the silent drop, unchecked
    got, damage = intact(views(batch(0, 4), bad), 10)
    assert damage is not None and len(got) == 1


def test_base_offsets_outside_the_crc_must_follow_one_another_and_stay_within_the_log() -> None:
    got, damage = intact(views(batch(0, 4), batch(3, 4)), 100)
    assert len(got) == 1 and damage is not None and "do not follow" in damage.reason
    got, damage = intact(views(batch(0, 4), batch(1 << 40, 4)), 100)
    assert len(got) == 1 and damage is not None and "past the partition's end" in damage.reason
    assert damage.describe().startswith(f"record batch at offsets {1 << 40}-{(1 << 40) + 4} ")
    got, damage = intact(views(batch(0, 4)), -1)  # (no high watermark: not checked)
    assert damage is None


def test_a_partition_holding_only_a_damaged_batch_is_a_result_not_nothing_new() -> None:
    part = FetchedPartition("t", 0, 0, 10, 10, 0)
    part.batches, part.damaged = intact(views(flipped(batch(0, 4), 70)), 10)
    assert not part.batches and not part.nothing_new
