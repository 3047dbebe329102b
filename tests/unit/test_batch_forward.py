"""The batch-forwarding prototype's pure parts (bench/batch_forward.py): which batches of a fetched record
set it forwards, where the next fetch starts, and what it changes in a batch before producing it."""

from __future__ import annotations

import struct

import pytest

from bench import batch_forward


def batch(base: int, last_delta: int, records: bytes = b"r" * 10, attributes: int = 0, producer_id: int = -1) -> bytes:
    tail = struct.pack(">hiqqqhii", attributes, last_delta, 1, 1, producer_id, -1, -1, last_delta + 1) + records
    return struct.pack(">qiibI", base, 4 + 1 + 4 + len(tail), 7, 2, 0xDEADBEEF) + tail


def test_whole_batches_are_forwarded_and_a_trailing_partial_one_waits_for_the_next_fetch() -> None:
    first, second = batch(100, 4), batch(105, 2)
    got = batch_forward.split_batches(memoryview(first + second + batch(108, 1)[:30]))
    assert [bytes(b) for b in got] == [first, second]
    assert batch_forward.next_offset(got[-1]) == 108


@pytest.mark.parametrize("attributes,producer_id", [(0x10, 5), (0x20, -1), (0, 42)])
def test_batches_whose_producer_fields_the_crc_covers_stop_the_prototype(attributes: int, producer_id: int) -> None:
    with pytest.raises(RuntimeError, match="plain source"):
        batch_forward.split_batches(memoryview(batch(0, 0, attributes=attributes, producer_id=producer_id)))


def test_a_produced_batch_changes_only_base_offset_and_leader_epoch_which_the_crc_does_not_cover() -> None:
    original = batch(500, 3)
    request = batch_forward.produce_request("t", {2: memoryview(original)})
    sent = request[-len(original):]
    assert struct.unpack_from(">qii", sent) == (0, len(original) - 12, -1)
    assert sent[16:] == original[16:]  # magic, CRC and everything the CRC covers: untouched
    assert struct.unpack_from(">ii", request, len(request) - len(original) - 8) == (2, len(original))
