"""What a real target broker answers the batches path's own producer, and what the sender decides for each answer
(wire/sender.py): a resent batch still cached lands once (its first offset given again), a sequence the broker
cannot place is renewed under a new producer id and lands, and a corrupt batch is the caller's, never retried
blind."""

from __future__ import annotations

import time

from mirror_core.wire.connection import Connection
from mirror_core.wire.metadata import Brokers, address
from mirror_core.wire.produce import (
    API_PRODUCE,
    PRODUCE_VERSION,
    Produced,
    init_producer_id,
    parse_produce,
    produce_request,
)
from mirror_core.wire.records import restamp
from mirror_core.wire.sender import BatchSender, Outgoing, Sent
from tests.kafka_harness import create_topic, read_all
from tests.unit.record_batches import KEPT, batch

# A record: length, attributes, timestamp delta, offset delta, key (null), value (5 bytes), no headers.
RECORD = bytes([0x18, 0, 0, 0, 0x01, 0x0A]) + b"hello" + bytes([0])


def records(n: int) -> bytes:
    """``n`` records with offset deltas 0..n-1."""
    out = b""
    for i in range(n):
        body = RECORD[1:3] + bytes([i * 2]) + RECORD[4:]  # (offset delta as a zigzag varint, n < 64)
        out += bytes([len(body) * 2]) + body
    return out


def produce(conn: Connection, topic: str, data: bytes, pid: int, epoch: int, seq: int) -> Produced:
    head, rest = restamp(data, pid, epoch, seq)
    answer = parse_produce(conn.call(API_PRODUCE, PRODUCE_VERSION, b"".join(
        bytes(p) for p in produce_request({(topic, 0): [head, rest]}, 10_000))))
    return answer[0]


def test_the_broker_answers_resent_gapped_unknown_and_corrupt_batches_as_the_sender_expects(dc2: str,
                                                                                              name: str) -> None:
    topic = f"{name}.answers"
    create_topic(dc2, topic, 1, KEPT)
    five = batch(0, 4, records(5))
    with Connection(*address(dc2), {}, "dc2") as conn:
        deadline = time.monotonic() + 30
        while True:  # (a fresh broker answers COORDINATOR_LOAD_IN_PROGRESS for a while)
            error, pid, epoch = init_producer_id(conn, None)
            if error != 14 or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert error == 0
        landed = [produce(conn, topic, five, pid, epoch, 5 * i) for i in range(7)]
        assert [(a.error, a.base_offset) for a in landed] == [(0, 5 * i) for i in range(7)]
        # Resent while among the producer's last five batches: no error, and where it landed the first time.
        again = produce(conn, topic, five, pid, epoch, 5 * 5)
        assert (again.error, again.base_offset) == (0, 25)
        # Resent once older than that: refused as out of order (Kafka 4 never answers DUPLICATE_SEQUENCE_NUMBER).
        assert produce(conn, topic, five, pid, epoch, 0).error == 45  # OUT_OF_ORDER_SEQUENCE_NUMBER
        assert produce(conn, topic, five, pid, epoch, 5 * 7 + 10).error == 45  # a gap
        # A producer id the broker does not know takes any first sequence: why the sender sends a partition one
        # batch at a time until the broker has acknowledged one of the current producer id (sender._Partition.known).
        assert produce(conn, topic, five, pid + 1_000_000, 0, 10).error == 0
        # Bytes that do not match their CRC: the broker checks on append.
        damaged = bytearray(five)
        damaged[-3] ^= 1
        assert produce(conn, topic, bytes(damaged), pid, epoch, 5 * 7).error == 2  # CORRUPT_MESSAGE
    assert len(read_all(dc2, topic)) == 40  # nothing of the refused or resent batches written


def test_the_sender_renews_its_producer_for_a_sequence_the_broker_cannot_place_and_hands_back_a_corrupt_batch(
        dc2: str, name: str) -> None:
    topic = f"{name}.renew"
    create_topic(dc2, topic, 2, KEPT)
    sender = BatchSender(Brokers(dc2, {}, "dc2"))
    try:
        def sent(n: int) -> list[Sent]:
            out: list[Sent] = []
            deadline = time.monotonic() + 30
            while len(out) < n and time.monotonic() < deadline:
                out += sender.poll(0.5)
            return out

        sender.send([Outgoing(topic, 0, batch(0, 4, records(5)), token=1)])
        assert [r.error for r in sent(1)] == [0]
        first_pid = sender.producer_id
        # The broker's sequence for partition 0 is 5; the sender is made to believe otherwise (as after a lost
        # answer whose batch the broker had forgotten): OUT_OF_ORDER_SEQUENCE_NUMBER, a new producer id, landed.
        part = sender._parts[(topic, 0)]
        part.acked_seq = part.next_seq = 50
        sender.send([Outgoing(topic, 0, batch(0, 4, records(5)), token=2)])
        answers = sent(1)
        assert [(r.error, r.base_offset) for r in answers] == [(0, 5)], [r.describe() for r in answers]
        assert sender.producer_id != first_pid and sender.retried >= 1
        # A batch damaged in the mirror after its source CRC was checked: the caller's (batch_path.py decides),
        # with the answer's name, not sent again here.
        damaged = bytearray(batch(0, 4, records(5)))
        damaged[-3] ^= 1
        sender.send([Outgoing(topic, 1, bytes(damaged), token=3)])
        answers = sent(1)
        assert [r.error for r in answers] == [2] and "CORRUPT_MESSAGE" in answers[0].describe()
    finally:
        sender.close()
    assert len(read_all(dc2, topic)) == 10
