"""Produce v8 as the batch copier sends it (one restamped batch per partition and request), and what each
partition's answer says: the target offset of the batch's first record, the base of its offset-map run; and the
producer id its batches carry (InitProducerId)."""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from typing import NamedTuple

from mirror_core.wire.codec import Buffer, Reader, int16, int32, string
from mirror_core.wire.connection import Connection
from mirror_core.wire.messages import InitProducerIdRequest, InitProducerIdResponse

API_PRODUCE = 0
PRODUCE_VERSION = 8  # the last non-flexible version (Kafka 2.4 up to 4.x)
ACKS_ALL = -1
#: a batch's first part up to this size is joined with what leads it in the request (one part, not two)
SMALL_PART = 1024
#: a partition's entry in a request up to its batch's leader epoch: partition, records size, base offset, length,
#: leader epoch
_LEAD = struct.Struct(">iiqii")
#: a partition's answer without record errors or message: index, error, base offset, append time, log start,
#: record errors (an empty or null array), error message (a null string)
_PLAIN_ANSWER = struct.Struct(">ihqqqih")


class Produced(NamedTuple):
    topic: str
    partition: int
    error: int
    #: target offset of the batch's first record (-1 on an error)
    base_offset: int
    log_start: int
    message: str | None


def produce_request(batches: Mapping[tuple[str, int], Sequence[Buffer]], timeout_ms: int,
                    transactional_id: str | None = None, acks: int = ACKS_ALL) -> list[Buffer]:
    """One v2 batch per partition (a broker takes exactly one per partition and request), each given in parts
    (a whole batch, or :func:`~mirror_core.wire.records.restamp`'s two), sent with base offset 0 and leader epoch
    -1 as a client sends them: neither is covered by the CRC, which stays valid. The request comes in parts too,
    the records where they are: :meth:`Connection.send` writes them without joining them into one buffer (at
    thousands of partitions a request carries tens of MB)."""
    by_topic: dict[str, list[tuple[int, Sequence[Buffer]]]] = {}
    for (topic, partition), parts in batches.items():
        by_topic.setdefault(topic, []).append((partition, parts))
    out: list[Buffer] = [string(transactional_id) + int16(acks) + int32(timeout_ms) + int32(len(by_topic))]
    for topic, of_topic in by_topic.items():
        out.append(string(topic) + int32(len(of_topic)))
        for partition, parts in of_topic:
            size = sum(map(len, parts))
            first = memoryview(parts[0])
            # partition, records size, then the batch's base offset, length and leader epoch
            lead = _LEAD.pack(partition, size, 0, size - 12, -1)
            if len(first) <= SMALL_PART:  # a restamped header: one part with what leads it
                out.append(lead + first[16:])
            else:
                out += (lead, first[16:])
            out.extend(parts[1:])
    return out


def parse_produce(data: memoryview) -> list[Produced]:
    r = Reader(data)
    out: list[Produced] = []
    for _ in range(r.count(6)):  # (each item's least size: a topic's name length and partition count)
        topic = r.string() or ""
        for _ in range(r.count(_PLAIN_ANSWER.size)):
            if r.at + _PLAIN_ANSWER.size <= len(r.data):  # the usual answer, in one read: no record error, no message
                index, error, base, _append_time, log_start, errors, message = _PLAIN_ANSWER.unpack_from(r.data, r.at)
                if errors <= 0 and message < 0:
                    r.at += _PLAIN_ANSWER.size
                    out.append(Produced(topic, index, error, base, log_start, None))
                    continue
            index, error, base, _append_time, log_start = r.take(">ihqqq")
            for _ in range(r.count(6)):  # record errors: (batch index, message); the partition's message says it
                r.int32()
                r.string()
            out.append(Produced(topic, index, error, base, log_start, r.string()))
    return out


def init_producer_id(conn: Connection, transactional_id: str | None,
                     transaction_timeout_ms: int = 60_000) -> tuple[int, int, int]:
    """InitProducerId v1 (declared in mirror_core/wire/messages.py): an idempotent producer's id and epoch (no
    transactional id), or a transactional one's: (error, producer id, epoch)."""
    answer = conn.ask(InitProducerIdRequest(transactional_id=transactional_id,
                                            transaction_timeout_ms=transaction_timeout_ms),
                      InitProducerIdResponse, (1,))
    return answer.error_code, answer.producer_id, answer.producer_epoch
