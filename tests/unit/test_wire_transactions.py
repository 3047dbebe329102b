"""The transaction coordinator's requests and answers as mirror_core/wire/transactions.py sends and reads them
(declared in wire/messages.py): a valid answer built by hand from random content reads back to that content, the
requests are laid out byte for byte as the protocol's non-flexible versions say, and any answer's bytes give a
result or a typed error (tests/unit/test_wire_messages.py)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mirror_core.wire.codec import Reader, int16, int32, int64, string
from mirror_core.wire.groups import TRANSACTION_KEY, find_coordinator
from mirror_core.wire.metadata import Brokers
from mirror_core.wire.transactions import RETRY_S, TransactionCoordinator, add_partitions, end_txn
from tests.unit.test_wire_fuzz import ROUND_TRIPS
from tests.unit.wire_messages import Scripted, add_partitions_answer, find_coordinator_answer

topics = st.dictionaries(st.text(min_size=1, max_size=12),
                         st.dictionaries(st.integers(0, 2**31 - 1), st.integers(-1, 120), min_size=1, max_size=5),
                         max_size=4)


@ROUND_TRIPS
@given(topics)
def test_an_add_partitions_answer_reads_as_each_partitions_error(results: dict[str, dict[int, int]]) -> None:
    conn = Scripted(add_partitions_answer(results), serves=(0, 2))
    assert add_partitions(conn, "tid", 1, 0, {"orders": [0]}) == {
        (t, p): e for t, ps in results.items() for p, e in ps.items()}
    assert conn.sent == [(24, 2)]


@ROUND_TRIPS
@given(st.integers(-(2**15), 2**15 - 1), st.integers(-1, 2**31 - 1))
def test_end_txn_and_find_coordinator_answers_read_as_their_fields(error: int, node: int) -> None:
    assert end_txn(Scripted(int32(5) + int16(error)), "tid", 1, 0, True) == error
    assert find_coordinator(Scripted(find_coordinator_answer(error, node)), "g") == (error, node)


@ROUND_TRIPS
@given(st.text(min_size=1, max_size=30), st.integers(0, 2**63 - 1), st.integers(0, 2**15 - 1), topics,
       st.booleans())
def test_requests_carry_the_id_producer_and_partitions(tid: str, pid: int, epoch: int,
                                                      results: dict[str, dict[int, int]], commit: bool) -> None:
    partitions = {t: list(ps) for t, ps in results.items()}
    head = string(tid) + int64(pid) + int16(epoch)
    conn = Scripted(int32(0) + int16(0), serves=(0, 1))
    end_txn(conn, tid, pid, epoch, commit)
    assert conn.bodies == [head + bytes([commit])] and conn.sent == [(26, 1)]
    conn = Scripted(find_coordinator_answer(0, 1))
    find_coordinator(conn, tid, TRANSACTION_KEY)
    assert conn.bodies == [string(tid) + b"\x01"]
    conn = Scripted(add_partitions_answer({}))
    add_partitions(conn, tid, pid, epoch, partitions)
    body = conn.bodies[0]
    assert body.startswith(head)
    r = Reader(body[len(head):])
    got = {}
    for _ in range(r.int32()):
        topic = r.string() or ""
        got[topic] = [r.int32() for _ in range(r.int32())]
    assert r.at == len(body) - len(head)
    assert got == {t: sorted(ps) for t, ps in partitions.items()}


def test_a_coordinator_completing_the_last_transaction_is_asked_again_soon_then_less_often(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """CONCURRENT_TRANSACTIONS answers the first AddPartitionsToTxn after a commit while its markers are written (a
    few milliseconds): asked again after 2 ms, twice as long each time, at most RETRY_S apart."""
    busy = {"orders": {0: 51}}
    conn = Scripted(*[add_partitions_answer(busy)] * 8, add_partitions_answer({"orders": {0: 0}}), serves=(0, 2))
    txn = TransactionCoordinator(Brokers("127.0.0.1:1", {}, "dc2"), "tid")
    txn._conn = conn
    txn.producer_id, txn.epoch = 7, 0
    waits: list[float] = []
    monkeypatch.setattr("mirror_core.wire.transactions.time.sleep", waits.append)
    txn.add([("orders", 0)])
    assert txn.partitions == {("orders", 0)} and len(conn.sent) == 9
    assert waits == [0.002, 0.004, 0.008, 0.016, 0.032, 0.064, RETRY_S, RETRY_S]
