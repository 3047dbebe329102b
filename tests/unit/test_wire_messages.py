"""The wire client's declared control-plane messages (mirror_core/wire/messages.py) against answers laid out by hand
(tests/unit/wire_messages.py): each reads as its fields through the function that asks for it; any bytes, random
or a valid answer mutated, give a result or a ProtocolError, never the decoder's own exception; a field cut short
at the end of an answer is refused, where the generated decoder alone reads it shorter; and only non-flexible
versions are spoken (the connection's headers are v1/v0)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given

from mirror_core.wire.codec import ProtocolError, array, blob, int16, int32, int64, string
from mirror_core.wire.connection import CONTROL_MAX_ANSWER
from mirror_core.wire.groups import find_coordinator, leave
from mirror_core.wire.messages import (
    AddPartitionsToTxnResponse,
    ApiVersionsResponse,
    EndTxnResponse,
    FindCoordinatorResponse,
    InitProducerIdResponse,
    LeaveGroupResponse,
    MetadataRequest,
    MetadataResponse,
    SaslAuthenticateResponse,
    SaslHandshakeResponse,
    decode,
    encode,
)
from mirror_core.wire.metadata import metadata_request, parse_metadata
from mirror_core.wire.produce import init_producer_id
from mirror_core.wire.sasl import SaslError
from mirror_core.wire.transactions import add_partitions
from tests.unit.test_wire_fuzz import FUZZ, answers, typed_only
from tests.unit.wire_messages import (
    Scripted,
    add_partitions_answer,
    api_versions_answer,
    find_coordinator_answer,
    init_producer_id_answer,
    leave_answer,
    metadata_answer,
    sasl_authenticate_answer,
    sasl_handshake_answer,
)

#: every declared answer the client reads, at the version it reads it, with a valid one laid out by hand
ANSWERS: list[tuple[Any, int, bytes]] = [
    (ApiVersionsResponse, 0, api_versions_answer()),
    (SaslHandshakeResponse, 1, sasl_handshake_answer()),
    (SaslAuthenticateResponse, 1, sasl_authenticate_answer()),
    (MetadataResponse, 4, metadata_answer()),
    (FindCoordinatorResponse, 1, find_coordinator_answer(0, 3)),
    (LeaveGroupResponse, 3, leave_answer()),
    (InitProducerIdResponse, 1, init_producer_id_answer()),
    (AddPartitionsToTxnResponse, 2, add_partitions_answer({"orders": {0: 0, 1: 51}, "mirror-core.progress": {0: 0}})),
    (EndTxnResponse, 2, bytes(4) + b"\x00\x2f"),
]


def test_the_valid_answers_read_as_their_fields() -> None:
    conn = Scripted(api_versions_answer(), sasl_handshake_answer(), sasl_authenticate_answer(),
                    find_coordinator_answer(0, 3), leave_answer(), init_producer_id_answer())
    assert conn._api_versions() == {3: (0, 12), 0: (0, 11)}
    assert conn.ask(*_handshake()).mechanisms == ["PLAIN", "SCRAM-SHA-512"]
    assert conn._sasl_step(1, b"n,,n=user,r=nonce") == b"r=nonce,s=salt,i=4096"
    assert conn.reauth_at is not None  # (the session's lifetime was read)
    assert find_coordinator(conn, "g") == (0, 3)
    assert leave(conn, "g", "mirror-0") == (0, [25])
    assert init_producer_id(conn, None) == (0, 4000, 3)
    meta = parse_metadata(memoryview(metadata_answer()))
    assert {n: (b.host, b.port) for n, b in meta.brokers.items()} == {1: ("broker-1", 9092), 2: ("broker-2", 9093)}
    assert meta.topics["orders"].leaders == {0: 1, 1: 1} and meta.topics["orders"].errors == {0: 0, 1: 0}


def _handshake() -> tuple[Any, Any, tuple[int, ...]]:
    from mirror_core.wire.messages import SaslHandshakeRequest
    return SaslHandshakeRequest(mechanism="PLAIN"), SaslHandshakeResponse, (1,)


def test_requests_are_laid_out_as_the_protocol_says() -> None:
    assert metadata_request(["orders", "x"]) == (b"\x00\x00\x00\x02" + b"\x00\x06orders" + b"\x00\x01x" + b"\x00")
    assert metadata_request([]) == b"\x00\x00\x00\x00\x00"  # an empty array: no topic (null would be all of them)
    conn = Scripted(api_versions_answer(), sasl_handshake_answer(), sasl_authenticate_answer(), leave_answer(),
                    init_producer_id_answer(), init_producer_id_answer())
    conn._api_versions()
    conn.ask(*_handshake())
    conn._sasl_step(1, b"\x00user\x00secret")
    leave(conn, "g", "mirror-0")
    init_producer_id(conn, None)
    init_producer_id(conn, "tid", 30_000)
    assert conn.sent == [(18, 0), (17, 1), (36, 1), (13, 3), (22, 1), (22, 1)]
    assert conn.bodies == [
        b"",  # ApiVersions v0
        string("PLAIN"),  # SaslHandshake v1: the mechanism
        blob(b"\x00user\x00secret"),  # SaslAuthenticate: the bytes
        string("g") + array([string("") + string("mirror-0")]),  # LeaveGroup v3: the member by its instance id
        string(None) + int32(60_000),  # InitProducerId v1: idempotent (no transactional id)
        string("tid") + int32(30_000),
    ]


def test_null_arrays_read_as_empty_and_errors_are_named() -> None:
    null = int32(-1)
    conn = Scripted(int16(0) + null, int16(33) + null, int16(0) + string(None) + blob(b"done"),
                    int32(0) + int16(0) + null, int32(0) + null)
    assert conn._api_versions() == {}
    assert conn.ask(*_handshake()).mechanisms is None  # (the caller names "none" offered)
    assert conn._sasl_step(0, b"x") == b"done" and conn.reauth_at is None  # v0: no session lifetime
    assert leave(conn, "g", "mirror-0") == (0, [])
    assert add_partitions(conn, "tid", 1, 0, {"t": [0]}) == {}
    conn = Scripted(int16(58) + string("no such user") + blob(None) + int64(0))
    with pytest.raises(SaslError, match="no such user"):
        conn._sasl_step(1, b"x")


def test_a_control_plane_answer_is_bounded_before_it_is_read() -> None:
    conn = Scripted(find_coordinator_answer(0, 3))
    find_coordinator(conn, "g")
    assert conn.limits == [min(CONTROL_MAX_ANSWER, conn.max_answer_bytes)]


@pytest.mark.parametrize(("answer", "version", "valid"), ANSWERS, ids=[a[0].__name__ for a in ANSWERS])
def test_every_answer_over_any_bytes_raises_only_protocol_errors(answer: Any, version: int, valid: bytes) -> None:
    decode(answer, version, valid)

    @FUZZ
    @given(answers(valid))
    def check(data: bytes) -> None:
        typed_only(decode, answer, version, memoryview(data))

    check()


def test_a_field_cut_short_at_the_end_of_an_answer_is_refused() -> None:
    cut = memoryview(sasl_handshake_answer()[:-3])  # inside the last mechanism's name
    assert SaslHandshakeResponse.decode(cut, version=1).mechanisms[-1] == "SCRAM-SHA-"  # (the decoder alone: shorter)
    with pytest.raises(ProtocolError, match="ends inside a field of SaslHandshakeResponse v1"):
        decode(SaslHandshakeResponse, 1, cut)
    with pytest.raises(ProtocolError, match="does not read as MetadataResponse v4"):
        decode(MetadataResponse, 4, metadata_answer()[:-7])


def test_only_non_flexible_versions_are_spoken() -> None:
    with pytest.raises(ValueError, match="flexible"):
        encode(MetadataRequest(topics=[], allow_auto_topic_creation=False), 9)
    with pytest.raises(ValueError, match="flexible"):
        decode(MetadataResponse, 9, metadata_answer())


def test_an_array_longer_than_its_answer_is_refused_once_the_answer_ends() -> None:
    # 1,000 items of ApiVersions' 6 bytes, a count of 2**31 - 1: read until the answer ends, then refused
    with pytest.raises(ProtocolError, match="does not read as ApiVersionsResponse v0"):
        decode(ApiVersionsResponse, 0, int16(0) + int32(2**31 - 1) + bytes(6 * 1000))
