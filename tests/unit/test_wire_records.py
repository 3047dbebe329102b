"""Record batches as the wire client handles them (mirror_core/wire/records.py): which whole batches a
fetched record set holds, where the next fetch starts, which batches a read_committed reader keeps, and how a
batch is restamped for the copier's own producer id."""

from __future__ import annotations

import random
import struct

import google_crc32c
import pytest

from mirror_core.wire import records
from mirror_core.wire.codec import ProtocolError
from tests.unit.record_batches import batch, marker


def _crc32c_table() -> list[int]:
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _crc32c_table()


def crc32c(data: bytes) -> int:
    """CRC32C in pure Python, its table made from the polynomial: a check of the product's sums (google_crc32c)
    that shares no code with them."""
    c = 0xFFFFFFFF
    for x in data:
        c = _TABLE[(c ^ x) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def test_whole_batches_are_taken_and_a_trailing_partial_one_waits_for_the_next_fetch() -> None:
    first, second = batch(100, 4), batch(105, 2)
    got = records.split_batches(memoryview(first + second + batch(108, 1)[:30]))
    assert [bytes(b) for b in got] == [first, second]
    assert records.next_offset(got[-1]) == 108


def test_control_batches_say_whether_they_commit_or_abort() -> None:
    assert records.control_type(memoryview(marker(9, 7, 0))) == records.ABORT_MARKER
    assert records.control_type(memoryview(marker(9, 7, 1))) == 1


def test_read_committed_keeps_committed_and_plain_batches_and_drops_aborted_ones_and_every_marker() -> None:
    aborted_1, aborted_2 = batch(0, 1, attributes=0x10, producer_id=7), batch(2, 0, attributes=0x10, producer_id=7)
    committed_txn = batch(3, 1, attributes=0x10, producer_id=8)
    abort, commit = marker(5, 7, 0), marker(6, 8, 1)
    again = batch(7, 0, attributes=0x10, producer_id=7)  # producer 7's next transaction, after its abort
    plain = batch(8, 2)
    late = batch(11, 0, attributes=0x10, producer_id=3)  # an aborted transaction of a lower producer id, later
    batches = [memoryview(b) for b in (aborted_1, aborted_2, committed_txn, abort, commit, again, plain, late)]
    aborted = [(7, 0), (3, 11)]
    assert [bytes(b) for b in records.committed(batches, aborted)] == [committed_txn, again, plain]
    # A fetch starting inside the aborted transaction (its first batch came in an earlier fetch): the broker
    # lists it all the same, with a first offset below this fetch's first batch.
    assert [bytes(b) for b in records.committed(batches[1:], aborted)] == [committed_txn, again, plain]
    assert [bytes(b) for b in records.committed(batches, [])] == [aborted_1, aborted_2, committed_txn, again,
                                                                  plain, late]


def test_a_batch_compaction_left_empty_has_nothing_to_copy() -> None:
    empty = bytearray(batch(20, 3, records=b""))
    struct.pack_into(">i", empty, 57, 0)
    assert records.committed([memoryview(bytes(empty)), memoryview(batch(24, 0))], []) == [batch(24, 0)]


def test_any_producers_batches_and_markers_are_split_alike() -> None:
    data = marker(0, 7, 1) + batch(1, 0, producer_id=42)
    assert len(records.split_batches(memoryview(data))) == 2


def test_a_batch_of_an_older_format_or_shorter_than_its_header_is_refused_in_a_line_naming_it() -> None:
    old = bytearray(batch(40, 0))
    old[16] = 1  # magic 1: Kafka before 0.11
    with pytest.raises(ProtocolError, match="magic 1 at offset 40: only magic 2"):
        records.split_batches(memoryview(bytes(old)))
    with pytest.raises(ProtocolError, match="shorter than its header"):
        records.split_batches(memoryview(struct.pack(">qi", 0, 20) + b"x" * 20))


def test_a_batch_missing_offsets_inside_its_range_is_not_contiguous() -> None:
    assert records.contiguous(batch(10, 4))  # 5 records over offsets 10-14
    compacted = bytearray(batch(10, 4))
    struct.pack_into(">i", compacted, 57, 3)  # compaction kept 3 of the 5 records, and the batch's range
    assert not records.contiguous(compacted) and records.next_offset(compacted) == 15


def test_a_restamped_batch_carries_this_producers_id_epoch_and_sequences_with_a_valid_crc() -> None:
    first, second, other = batch(10, 4, attributes=0x10 | 0x04, producer_id=7), batch(15, 1), batch(0, 0)
    # Partition 2 gets the first two (sequences 0, then 5), another partition the third (sequence 0).
    after_first = records.next_sequence(0, first)
    out = [b"".join(records.restamp(first, 1234, 3, 0)), b"".join(records.restamp(second, 1234, 3, after_first)),
           b"".join(records.restamp(other, 1234, 3, 0))]
    assert [struct.unpack_from(">qhi", b, 43) for b in out] == [(1234, 3, 0), (1234, 3, 5), (1234, 3, 0)]
    assert struct.unpack_from(">h", out[0], 21)[0] == 0x04  # compression kept; not transactional, as this producer
    assert all(struct.unpack_from(">I", b, 17)[0] == crc32c(bytes(b[21:])) for b in out)
    assert out[0][61:] == first[61:] and out[0][:17] == first[:17]  # records, offsets and length as they were
    assert (records.next_sequence(after_first, second), records.next_sequence(0, other)) == (7, 1)


@pytest.mark.parametrize("size", [0, 1, 3, 4096, 8191, 16379, 16380, 16381, 20000, (1 << 20) - 1, 1 << 20,
                                  (5 << 20) + 77])
def test_restamp_corrects_the_crc_for_what_it_changed_without_reading_the_records(size: int) -> None:
    """The CRC a restamp gives equals one computed over the whole restamped batch, for records of any length
    (the correction runs over up to 16 KiB of zeros at once, or over powers of two of zeros up to a MiB, then
    whole MiBs; 16380 bytes of records and their count are the 16 KiB), and the records are a
    view of the batch, not a copy."""
    original = batch(3, 0, records=random.Random(size).randbytes(size), attributes=0x10, producer_id=55)
    head, rest = records.restamp(original, 2**40 + 7, 9, 0x7FFFFFF0)
    assert rest.obj is original and rest == original[records.RESTAMPED:]
    assert struct.unpack_from(">I", head, 17)[0] == google_crc32c.value(head[21:] + original[records.RESTAMPED:])


def test_a_batch_whose_crc_did_not_match_its_bytes_still_does_not_after_a_restamp() -> None:
    """The copy does not vouch for bytes it never checked: a batch damaged on the source's disk keeps a CRC that
    does not match, and the target refuses it (CORRUPT_MESSAGE) as it refuses any corrupt batch."""
    damaged = bytearray(batch(0, 0, records=b"r" * 100))
    damaged[80] ^= 0x01
    head, rest = records.restamp(damaged, 1, 0, 0)
    assert struct.unpack_from(">I", head, 17)[0] != google_crc32c.value(head[21:] + bytes(rest))
    damaged[80] ^= 0x01  # the same bytes undamaged: the corrected CRC matches them
    head, rest = records.restamp(damaged, 1, 0, 0)
    assert struct.unpack_from(">I", head, 17)[0] == google_crc32c.value(head[21:] + bytes(rest))


def test_sequences_wrap_at_the_int32_maximum_as_the_broker_expects() -> None:
    assert records.next_sequence(0x7FFFFFFE, batch(0, 4)) == 3


def test_a_transactional_producer_marks_every_batch_it_restamps_as_transactional() -> None:
    head, rest = records.restamp(batch(0, 0, attributes=0x03), 9, 0, 0, transactional=True)  # zstd, plain producer
    out = head + rest
    assert len(head) == records.RESTAMPED and rest == batch(0, 0, attributes=0x03)[records.RESTAMPED:]
    assert struct.unpack_from(">h", out, 21)[0] == 0x13
    assert struct.unpack_from(">I", out, 17)[0] == crc32c(bytes(out[21:]))
