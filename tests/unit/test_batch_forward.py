"""The batch-forwarding prototype's own pure parts (bench/batch_forward.py): what it changes in a batch
before producing it, how it reads a fetch response, what its plain mode refuses, and its transaction
requests (the record-batch steps it shares with the product: test_wire_records.py)."""

from __future__ import annotations

import struct

import pytest

from bench import batch_forward
from mirror_core.wire.codec import string
from mirror_core.wire.connection import Connection
from tests.unit.record_batches import batch


@pytest.mark.parametrize("attributes,producer_id", [(0x10, 5), (0x20, -1), (0, 42)])
def test_batches_whose_producer_fields_the_crc_covers_stop_the_plain_mode(attributes: int, producer_id: int) -> None:
    with pytest.raises(RuntimeError, match="plain source"):
        batch_forward.plain_only([memoryview(batch(0, 0, attributes=attributes, producer_id=producer_id))])


def test_a_produced_batch_changes_only_base_offset_and_leader_epoch_which_the_crc_does_not_cover() -> None:
    original = batch(500, 3)
    request = batch_forward.produce_request("t", {2: memoryview(original)})
    sent = request[-len(original):]
    assert struct.unpack_from(">qii", sent) == (0, len(original) - 12, -1)
    assert sent[16:] == original[16:]  # magic, CRC and everything the CRC covers: untouched
    assert struct.unpack_from(">ii", request, len(request) - len(original) - 8) == (2, len(original))


def test_a_fetch_response_gives_each_partitions_batches_and_aborted_transactions() -> None:
    first, second = batch(0, 1), batch(4, 0, attributes=0x10, producer_id=9)
    partitions = [(0, [(9, 4), (11, 2)], first + second), (1, [], b""), (2, [], batch(7, 0)[:20])]
    body = b"".join(struct.pack(">ihqqqi", index, 0, 10, 10, 0, len(aborted))
                    + b"".join(struct.pack(">qq", pid, offset) for pid, offset in aborted)
                    + struct.pack(">ii", -1, len(records)) + records for index, aborted, records in partitions)
    response = struct.pack(">ihii", 0, 0, 0, 1) + string("t") + struct.pack(">i", 3) + body
    got = batch_forward.parse_fetch(memoryview(response), "t", any_producer=True)
    assert list(got) == [0]  # an empty partition and one holding only a partial batch give nothing yet
    batches, aborted = got[0]
    assert [bytes(b) for b in batches] == [first, second] and aborted == [(9, 4), (11, 2)]


def test_transaction_requests_carry_id_producer_and_partitions_in_their_v1_layout() -> None:
    sent: list[tuple[int, int, bytes]] = []

    class Recorder(Connection):
        def __init__(self) -> None:  # no socket: answers every request with "no error"
            self.correlation = 0

        def call(self, api: int, version: int, body: bytes) -> memoryview:
            sent.append((api, version, body))
            if api == batch_forward.API_ADD_PARTITIONS_TO_TXN:
                return memoryview(struct.pack(">ii", 0, 1) + string("t")
                                  + struct.pack(">iihih", 2, 3, 0, 1, 0))
            return memoryview(struct.pack(">ih", 0, 0))

    txn = batch_forward.Transaction.__new__(batch_forward.Transaction)
    txn.wire, txn.id, txn.topic, txn.added, txn.began = Recorder(), "tx", "t", set(), 0.0
    txn.producer = batch_forward.ProducerStamp(77, 2, transactional=True)
    txn.add([3, 1])
    txn.add([1])  # already in the transaction: nothing sent
    txn.commit()
    txn.commit()  # nothing added since: nothing sent
    head = string("tx") + struct.pack(">qh", 77, 2)
    assert sent == [(batch_forward.API_ADD_PARTITIONS_TO_TXN, 1, head + struct.pack(">i", 1) + string("t")
                     + struct.pack(">iii", 2, 1, 3)),
                    (batch_forward.API_END_TXN, 1, head + b"\x01")]
    assert txn.added == set()
