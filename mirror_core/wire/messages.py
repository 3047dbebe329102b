"""The control-plane requests and answers the wire client speaks (ApiVersions, SASL, Metadata, FindCoordinator,
LeaveGroup, InitProducerId, AddPartitionsToTxn, EndTxn), as Kafka's own JSON message specs declare them: kafka-python
3's classes generated from those specs, built from named fields and read into them. Produce and Fetch stay
hand-packed (wire/produce.py, wire/fetch.py), where each declared one costs more per batch or partition
(``bench.probes.declared_cost``).

Only non-flexible versions: the connection speaks request header v1 and reads response header v0. An answer that
does not parse, or whose fields run past its end, is a :class:`~mirror_core.wire.codec.ProtocolError`."""

from __future__ import annotations

import struct
from typing import Any

from kafka.protocol.api_message import ApiMessage
from kafka.protocol.consumer.group import LeaveGroupRequest, LeaveGroupResponse
from kafka.protocol.metadata import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    MetadataRequest,
    MetadataResponse,
)
from kafka.protocol.producer.transaction import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
)
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

from mirror_core.wire.codec import ProtocolError

__all__ = [
    "AddPartitionsToTxnRequest", "AddPartitionsToTxnResponse", "ApiMessage", "ApiVersionsRequest",
    "ApiVersionsResponse", "EndTxnRequest", "EndTxnResponse", "FindCoordinatorRequest", "FindCoordinatorResponse",
    "InitProducerIdRequest", "InitProducerIdResponse", "LeaveGroupRequest", "LeaveGroupResponse", "MetadataRequest",
    "MetadataResponse", "SaslAuthenticateRequest", "SaslAuthenticateResponse", "SaslHandshakeRequest",
    "SaslHandshakeResponse", "decode", "encode",
]

#: what a declared message's decoder raises on bytes it cannot read (a cut field, a bad length, text not UTF-8; an
#: index past the end from a compact field's varint)
_UNREADABLE = (struct.error, IndexError, ValueError)


def _plain(message: type[ApiMessage], version: int) -> None:
    if not message.min_version <= version <= message.max_version:
        raise ValueError(f"{message.name} has no version {version}")
    if message.flexible_version_q(version):
        raise ValueError(f"{message.name} v{version} is a flexible version: the connection speaks header v1 only")


def encode(request: ApiMessage, version: int) -> bytes:
    """The request's body at ``version`` (no header, no size)."""
    _plain(type(request), version)
    return bytes(request.encode(version=version))


def decode(answer: type[ApiMessage], version: int, data: memoryview | bytes) -> Any:
    """The answer's body at ``version`` read into its declared fields. Its fields must end within ``data``: the
    generated decoder reads a string or bytes field cut short as shorter, which this refuses."""
    _plain(answer, version)
    read = answer._struct.compiled_decode_from(version, compact=False, tagged=False, data_class=answer[None])
    try:
        value, end = read(memoryview(data), 0)
    except _UNREADABLE as exc:
        raise ProtocolError(f"an answer of {len(data)} bytes does not read as {answer.name} v{version}: "
                            f"{type(exc).__name__}: {exc}") from None
    if end > len(data):
        raise ProtocolError(f"an answer of {len(data)} bytes ends inside a field of {answer.name} v{version} "
                            f"(its fields need {end})")
    return value
