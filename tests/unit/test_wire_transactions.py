"""The transaction coordinator's answers as mirror_core/wire/transactions.py parses them: any bytes give a parse or
a typed error (ProtocolError), never another exception; a valid answer built from random content parses back
to that content; and the requests are laid out as the protocol's non-flexible versions say."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from mirror_core.wire.codec import Reader, array, int16, int32, int64, string
from mirror_core.wire.groups import parse_find_coordinator
from mirror_core.wire.transactions import (
    add_partitions_request,
    end_txn_request,
    find_transaction_coordinator_request,
    parse_add_partitions,
    parse_end_txn,
)
from tests.unit.test_wire_fuzz import FUZZ, ROUND_TRIPS, answers, typed_only

topics = st.dictionaries(st.text(min_size=1, max_size=12),
                         st.dictionaries(st.integers(0, 2**31 - 1), st.integers(-1, 120), min_size=1, max_size=5),
                         max_size=4)


def add_partitions_answer(results: dict[str, dict[int, int]]) -> bytes:
    return int32(0) + array(string(t) + array(int32(p) + int16(e) for p, e in ps.items())
                            for t, ps in results.items())


def find_coordinator_answer(error: int, node: int) -> bytes:
    return int32(0) + int16(error) + string(None) + int32(node) + string("broker-1") + int32(9092)


@FUZZ
@given(answers(add_partitions_answer({"orders": {0: 0, 1: 51}, "mirror-core.progress": {0: 0}})))
def test_add_partitions_answers_raise_only_typed_errors(data: bytes) -> None:
    typed_only(parse_add_partitions, memoryview(data))


@FUZZ
@given(answers(int32(0) + int16(47)))
def test_end_txn_answers_raise_only_typed_errors(data: bytes) -> None:
    typed_only(parse_end_txn, memoryview(data))


@FUZZ
@given(answers(find_coordinator_answer(0, 3)))
def test_find_coordinator_answers_raise_only_typed_errors(data: bytes) -> None:
    typed_only(parse_find_coordinator, memoryview(data))


@ROUND_TRIPS
@given(topics)
def test_an_add_partitions_answer_parses_to_each_partitions_error(results: dict[str, dict[int, int]]) -> None:
    assert parse_add_partitions(memoryview(add_partitions_answer(results))) == {
        (t, p): e for t, ps in results.items() for p, e in ps.items()}


@ROUND_TRIPS
@given(st.integers(-(2**15), 2**15 - 1), st.integers(-1, 2**31 - 1))
def test_end_txn_and_find_coordinator_answers_parse_to_their_fields(error: int, node: int) -> None:
    assert parse_end_txn(memoryview(int32(5) + int16(error))) == error
    assert parse_find_coordinator(memoryview(find_coordinator_answer(error, node))) == (error, node)


@ROUND_TRIPS
@given(st.text(min_size=1, max_size=30), st.integers(0, 2**63 - 1), st.integers(0, 2**15 - 1), topics,
       st.booleans())
def test_requests_carry_the_id_producer_and_partitions(tid: str, pid: int, epoch: int,
                                                      results: dict[str, dict[int, int]], commit: bool) -> None:
    partitions = {t: list(ps) for t, ps in results.items()}
    head = string(tid) + int64(pid) + int16(epoch)
    assert end_txn_request(tid, pid, epoch, commit) == head + bytes([commit])
    assert find_transaction_coordinator_request(tid) == string(tid) + b"\x01"
    body = add_partitions_request(tid, pid, epoch, partitions)
    assert body.startswith(head)
    r = Reader(body[len(head):])
    got = {}
    for _ in range(r.int32()):
        topic = r.string() or ""
        got[topic] = [r.int32() for _ in range(r.int32())]
    assert r.at == len(body) - len(head)
    assert got == {t: sorted(ps) for t, ps in partitions.items()}
