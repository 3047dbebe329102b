"""Answers laid out by hand, byte for byte as the protocol's non-flexible versions say (not through the declared
messages they test), and a connection that answers from a script: what the unit tests of the wire client's
control-plane requests need."""

from __future__ import annotations

from collections.abc import Sequence

from mirror_core.wire.codec import Buffer, array, blob, int16, int32, int64, string
from mirror_core.wire.connection import Connection


class Scripted(Connection):
    """A connection set up with nothing: each request is recorded (api, version and body) and answered with the next
    of ``answers``; the broker serves every API at versions ``serves``."""

    def __init__(self, *answers: bytes, serves: tuple[int, int] = (0, 3)) -> None:  # (no socket: super() not called)
        self.where = "dc1 (broker scripted:9092)"
        self.answers = list(answers)
        self.serves = serves
        self.sent: list[tuple[int, int]] = []
        self.bodies: list[bytes] = []
        self.limits: list[int | None] = []
        self.max_answer_bytes = 100_000_000
        self.reauth_at = None

    def version(self, api: int, spoken: tuple[int, ...]) -> int:
        return max(v for v in spoken if self.serves[0] <= v <= self.serves[1])

    def call(self, api: int, version: int, body: bytes | Sequence[Buffer], reuse: bool = False,
             limit: int | None = None) -> memoryview:
        self.sent.append((api, version))
        self.limits.append(limit)
        self.bodies.append(bytes(body) if isinstance(body, (bytes, bytearray, memoryview)) else b"".join(body))
        return memoryview(self.answers.pop(0))


def metadata_answer() -> bytes:
    """Metadata v4: two brokers, topic ``orders`` with partitions 0 and 1 led by broker 1."""
    brokers = array([int32(1) + string("broker-1") + int32(9092) + string(None),
                     int32(2) + string("broker-2") + int32(9093) + string("rack")])
    partitions = array([int16(0) + int32(p) + int32(1) + array([int32(1), int32(2)]) + array([int32(1)])
                        for p in range(2)])
    topics = array([int16(0) + string("orders") + b"\x00" + partitions])
    return int32(0) + brokers + string("cluster") + int32(1) + topics


def api_versions_answer() -> bytes:
    """ApiVersions v0: Metadata 0-12, Produce 0-11."""
    return int16(0) + array([int16(3) + int16(0) + int16(12), int16(0) + int16(0) + int16(11)])


def sasl_handshake_answer(error: int = 0) -> bytes:
    return int16(error) + array([string("PLAIN"), string("SCRAM-SHA-512")])


def sasl_authenticate_answer(payload: bytes = b"r=nonce,s=salt,i=4096", lifetime_ms: int = 3_600_000) -> bytes:
    """SaslAuthenticate v1."""
    return int16(0) + string(None) + blob(payload) + int64(lifetime_ms)


def find_coordinator_answer(error: int, node: int) -> bytes:
    """FindCoordinator v1."""
    return int32(0) + int16(error) + string(None) + int32(node) + string("broker-1") + int32(9092)


def leave_answer(error: int = 0, member_error: int = 25) -> bytes:
    """LeaveGroup v3: one member."""
    return int32(0) + int16(error) + array([string("") + string("mirror-0") + int16(member_error)])


def init_producer_id_answer(error: int = 0, producer_id: int = 4000, epoch: int = 3) -> bytes:
    """InitProducerId v1."""
    return int32(0) + int16(error) + int64(producer_id) + int16(epoch)


def add_partitions_answer(results: dict[str, dict[int, int]]) -> bytes:
    """AddPartitionsToTxn v1-2: each partition's error, by topic."""
    return int32(0) + array(string(t) + array(int32(p) + int16(e) for p, e in ps.items())
                            for t, ps in results.items())
