"""The batch-forwarding prototype's pure parts (bench/batch_forward.py): which batches of a fetched record
set it forwards, where the next fetch starts, and what it changes in a batch before producing it; in its
idempotent mode, which batches read_committed keeps and how a batch is restamped."""

from __future__ import annotations

import struct

import pytest

from bench import batch_forward
from bench.batch_forward_checks import crc32c, varint


def batch(base: int, last_delta: int, records: bytes = b"r" * 10, attributes: int = 0, producer_id: int = -1) -> bytes:
    tail = struct.pack(">hiqqqhii", attributes, last_delta, 1, 1, producer_id, -1, -1, last_delta + 1) + records
    return struct.pack(">qiibI", base, 4 + 1 + 4 + len(tail), 7, 2, 0xDEADBEEF) + tail


def marker(base: int, producer_id: int, kind: int) -> bytes:
    """A control batch holding one commit (1) or abort (0) marker, as a transaction coordinator writes it."""
    key, value = struct.pack(">hh", 0, kind), struct.pack(">hi", 0, 3)
    body = b"\x00" + varint(0) + varint(0) + varint(len(key)) + key + varint(len(value)) + value + varint(0)
    return batch(base, 0, varint(len(body)) + body, attributes=0x30, producer_id=producer_id)


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


def test_control_batches_say_whether_they_commit_or_abort() -> None:
    assert batch_forward.control_type(memoryview(marker(9, 7, 0))) == batch_forward.ABORT_MARKER
    assert batch_forward.control_type(memoryview(marker(9, 7, 1))) == 1


def test_read_committed_keeps_committed_and_plain_batches_and_drops_aborted_ones_and_every_marker() -> None:
    aborted_1, aborted_2 = batch(0, 1, attributes=0x10, producer_id=7), batch(2, 0, attributes=0x10, producer_id=7)
    committed_txn = batch(3, 1, attributes=0x10, producer_id=8)
    abort, commit = marker(5, 7, 0), marker(6, 8, 1)
    again = batch(7, 0, attributes=0x10, producer_id=7)  # producer 7's next transaction, after its abort
    plain = batch(8, 2)
    late = batch(11, 0, attributes=0x10, producer_id=3)  # an aborted transaction of a lower producer id, later
    batches = [memoryview(b) for b in (aborted_1, aborted_2, committed_txn, abort, commit, again, plain, late)]
    aborted = [(7, 0), (3, 11)]
    assert [bytes(b) for b in batch_forward.committed(batches, aborted)] == [committed_txn, again, plain]
    # A fetch starting inside the aborted transaction (its first batch came in an earlier fetch): the broker
    # lists it all the same, with a first offset below this fetch's first batch.
    assert [bytes(b) for b in batch_forward.committed(batches[1:], aborted)] == [committed_txn, again, plain]
    assert [bytes(b) for b in batch_forward.committed(batches, [])] == [aborted_1, aborted_2, committed_txn, again,
                                                                        plain, late]


def test_a_fetch_response_gives_each_partitions_batches_and_aborted_transactions() -> None:
    first, second = batch(0, 1), batch(4, 0, attributes=0x10, producer_id=9)
    partitions = [(0, [(9, 4), (11, 2)], first + second), (1, [], b""), (2, [], batch(7, 0)[:20])]
    body = b"".join(struct.pack(">ihqqqi", index, 0, 10, 10, 0, len(aborted))
                    + b"".join(struct.pack(">qq", pid, offset) for pid, offset in aborted)
                    + struct.pack(">ii", -1, len(records)) + records for index, aborted, records in partitions)
    response = struct.pack(">ihii", 0, 0, 0, 1) + batch_forward.string("t") + struct.pack(">i", 3) + body
    got = batch_forward.parse_fetch(memoryview(response), "t", any_producer=True)
    assert list(got) == [0]  # an empty partition and one holding only a partial batch give nothing yet
    batches, aborted = got[0]
    assert [bytes(b) for b in batches] == [first, second] and aborted == [(9, 4), (11, 2)]


def test_split_batches_takes_any_producer_in_the_idempotent_mode() -> None:
    records = marker(0, 7, 1) + batch(1, 0, producer_id=42)
    assert len(batch_forward.split_batches(memoryview(records), any_producer=True)) == 2


def test_a_restamped_batch_carries_this_producers_id_epoch_and_sequences_with_a_valid_crc() -> None:
    producer = batch_forward.Idempotence(producer_id=1234, epoch=3)
    first = batch(10, 4, attributes=0x10 | 0x04, producer_id=7)  # transactional, lz4
    out = [producer.stamp(2, memoryview(first)), producer.stamp(2, memoryview(batch(15, 1))),
           producer.stamp(5, memoryview(batch(0, 0)))]
    assert [struct.unpack_from(">qhi", b, 43) for b in out] == [(1234, 3, 0), (1234, 3, 5), (1234, 3, 0)]
    assert struct.unpack_from(">h", out[0], 21)[0] == 0x04  # compression kept; not transactional, as this producer
    assert all(struct.unpack_from(">I", b, 17)[0] == crc32c(bytes(b[21:])) for b in out)
    assert out[0][61:] == first[61:] and out[0][:17] == first[:17]  # records, offsets and length as they were
    assert producer.sequences == {2: 7, 5: 1}


def test_a_transactional_producer_marks_every_batch_it_restamps_as_transactional() -> None:
    producer = batch_forward.Idempotence(producer_id=9, epoch=0, transactional=True)
    out = producer.stamp(0, memoryview(batch(0, 0, attributes=0x03)))  # zstd, from a plain producer
    assert struct.unpack_from(">h", out, 21)[0] == 0x13
    assert struct.unpack_from(">I", out, 17)[0] == crc32c(bytes(out[21:]))


def test_transaction_requests_carry_id_producer_and_partitions_in_their_v1_layout() -> None:
    sent: list[tuple[int, int, bytes]] = []

    class Recorder(batch_forward.Wire):
        def __init__(self) -> None:  # no socket: answers every request with "no error"
            self.correlation = 0

        def call(self, api: int, version: int, body: bytes) -> memoryview:
            sent.append((api, version, body))
            if api == batch_forward.API_ADD_PARTITIONS_TO_TXN:
                return memoryview(struct.pack(">ii", 0, 1) + batch_forward.string("t")
                                  + struct.pack(">iihih", 2, 3, 0, 1, 0))
            return memoryview(struct.pack(">ih", 0, 0))

    txn = batch_forward.Transaction.__new__(batch_forward.Transaction)
    txn.wire, txn.id, txn.topic, txn.added, txn.began = Recorder(), "tx", "t", set(), 0.0
    txn.producer = batch_forward.Idempotence(77, 2, transactional=True)
    txn.add([3, 1])
    txn.add([1])  # already in the transaction: nothing sent
    txn.commit()
    txn.commit()  # nothing added since: nothing sent
    head = batch_forward.string("tx") + struct.pack(">qh", 77, 2)
    assert sent == [(batch_forward.API_ADD_PARTITIONS_TO_TXN, 1, head + struct.pack(">i", 1) + batch_forward.string("t")
                     + struct.pack(">iii", 2, 1, 3)),
                    (batch_forward.API_END_TXN, 1, head + b"\x01")]
    assert txn.added == set()
