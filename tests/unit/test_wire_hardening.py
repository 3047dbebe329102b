"""The wire client against bad bytes from a peer (issue 60, items 2 and 3): an answer's size prefix checked
before anything is allocated (small until the connection is set up, receive.message.max.bytes after, less when
the caller knows its request's bound), the connection closed after a framing error; a malformed metadata answer
from one bootstrap broker makes the next one asked; a batch's record count and record lengths checked against its
bytes, and decompression bounded; SCRAM's iteration count capped; an http:// OAUTHBEARER token endpoint refused
unless allowed. Brokers are played by an in-process socket server that speaks just enough of the protocol."""

from __future__ import annotations

import gzip
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator

import cramjam
import google_crc32c
import pytest

from mirror_core.config.errors import SettingError
from mirror_core.config.sasl import ALLOW_HTTP_KEY, ALLOW_HTTP_MARKER, translate_sasl
from mirror_core.errors import MirrorError
from mirror_core.wire import recode
from mirror_core.wire.codec import ProtocolError, array, int16, int32, string
from mirror_core.wire.connection import SETUP_MAX_ANSWER, AnswerTooLarge, Connection, WireError
from mirror_core.wire.metadata import API_METADATA, DOWN_AFTER_S, Brokers
from mirror_core.wire.oauth import TokenSource
from mirror_core.wire.sasl import MAX_ITERATIONS, SaslError, ScramClient
from tests.unit.record_batches import batch

#: what a fake broker answers a request with: the answer's body (after the correlation id), or raw bytes that
#: replace the whole frame (a size prefix of its own)
Answer = Callable[[int], bytes | tuple[bytes]]


def api_versions(_: int) -> bytes:
    return int16(0) + array([int16(api) + int16(0) + int16(high) for api, high in ((3, 9), (18, 3))])


def metadata(port: int) -> Callable[[int], bytes]:
    def answer(_: int) -> bytes:
        brokers = array([int32(1) + string("127.0.0.1") + int32(port) + string(None)])
        partition = int16(0) + int32(0) + int32(1) + array([int32(1)]) + array([int32(1)])
        return int32(0) + brokers + string("c") + int32(1) + array([int16(0) + string("orders") + b"\x00"
                                                                    + array([partition])])
    return answer


class FakeBroker:
    """A listener answering each request (by API key) as ``answers`` says, one connection after another."""

    def __init__(self, answers: dict[int, Answer]) -> None:
        self.answers = answers
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.listener.getsockname()[1])
        self.closed_by_client = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            with conn:
                try:
                    self._talk(conn)
                except OSError:  # the client closed it (e.g. after an answer it refused, unread)
                    self.closed_by_client.set()

    def _talk(self, conn: socket.socket) -> None:
        while True:
            head = conn.recv(4, socket.MSG_WAITALL)
            if len(head) < 4:
                self.closed_by_client.set()
                return
            body = conn.recv(struct.unpack(">i", head)[0], socket.MSG_WAITALL)
            api, _version, correlation = struct.unpack_from(">hhi", body)
            answer = self.answers[api](correlation)
            if isinstance(answer, tuple):
                conn.sendall(answer[0])
            else:
                conn.sendall(struct.pack(">ii", 4 + len(answer), correlation) + answer)

    def close(self) -> None:
        self.listener.close()


@pytest.fixture
def brokers() -> Iterator[Callable[[dict[int, Answer]], FakeBroker]]:
    made: list[FakeBroker] = []

    def make(answers: dict[int, Answer]) -> FakeBroker:
        made.append(FakeBroker(answers))
        return made[-1]

    yield make
    for b in made:
        b.close()


GARBAGE: dict[str, Answer] = {
    "a host name that is not UTF-8": lambda _: int32(0) + array([int32(1) + int16(2) + b"\xff\xfe" + int32(1)]),
    "an answer cut short": lambda _: int32(0) + int32(3),
    "an array longer than the answer": lambda _: int32(0) + int32(2**31 - 1),
    "a size prefix of 2 GB": lambda _: (struct.pack(">i", 2**31 - 1),),
    "a correlation id of another request": lambda c: (struct.pack(">ii", 4, c + 7),),
}


@pytest.mark.parametrize("garbage", sorted(GARBAGE))
def test_a_malformed_metadata_answer_from_one_bootstrap_broker_makes_the_next_one_asked(
        brokers: Callable[[dict[int, Answer]], FakeBroker], garbage: str) -> None:
    bad = brokers({18: api_versions, API_METADATA: GARBAGE[garbage]})
    good = brokers({18: api_versions})
    good.answers[API_METADATA] = metadata(good.port)
    meta = Brokers(f"127.0.0.1:{bad.port},127.0.0.1:{good.port}", {}, "source cluster dc1").metadata(["orders"])
    assert meta.topics["orders"].leaders == {0: 1} and meta.brokers[1].port == good.port
    # and with the bad one alone: one typed line naming the cluster and that broker
    with pytest.raises(WireError, match=rf"source cluster dc1: no broker answered .*broker 127.0.0.1:{bad.port}"):
        Brokers(f"127.0.0.1:{bad.port}", {}, "source cluster dc1").metadata(["orders"])


def test_a_huge_size_prefix_before_authentication_is_refused_before_anything_is_allocated(
        brokers: Callable[[dict[int, Answer]], FakeBroker]) -> None:
    """The reported case: a 600 MB prefix followed by EOF was allocated whole, every 0.5 s per worker."""
    hostile = brokers({18: lambda _: (struct.pack(">i", 600_000_000),)})
    with pytest.raises(AnswerTooLarge, match=rf"broker 127.0.0.1:{hostile.port}\): an answer of 600000000 bytes, "
                                             rf"over the {SETUP_MAX_ANSWER}.*connection closed"):
        Connection("127.0.0.1", hostile.port, {}, "source cluster dc1", timeout=5)
    assert hostile.closed_by_client.wait(5)


def test_after_setup_answers_are_held_to_receive_message_max_bytes_or_the_callers_limit(
        brokers: Callable[[dict[int, Answer]], FakeBroker]) -> None:
    big = brokers({18: api_versions, API_METADATA: lambda _: b"x" * 5000})
    with Connection("127.0.0.1", big.port, {"receive.message.max.bytes": "4096"}, "dc1", timeout=5) as conn:
        assert conn.max_answer_bytes == 4096
        with pytest.raises(AnswerTooLarge, match="an answer of 5004 bytes, over the 4096"):
            conn.call(API_METADATA, 4, b"")
    with Connection("127.0.0.1", big.port, {}, "dc1", timeout=5) as conn:
        assert len(conn.call(API_METADATA, 4, b"")) == 5000
        with pytest.raises(AnswerTooLarge, match="over the 1000 "):
            conn.call(API_METADATA, 4, b"", limit=1000)
    with pytest.raises(WireError, match=r"receive\.message\.max\.bytes = 'lots' is not a number"):
        Connection("127.0.0.1", big.port, {"receive.message.max.bytes": "lots"}, "dc1")


def crc_valid(data: bytearray) -> bytes:
    struct.pack_into(">I", data, 17, google_crc32c.value(bytes(data[21:])))
    return bytes(data)


def test_a_65_byte_batch_claiming_2_31_records_of_length_minus_1_is_refused_at_once() -> None:
    """The reported case: a CRC-valid batch whose record length varint is -1 made contiguous_copy revisit one
    record ``count`` times (2^31 claimed; 1M took 2 s and 95 MB)."""
    hostile = bytearray(batch(0, 5, records=b"\x01\x00\x00\x00", count=2**31 - 1))  # varint -1, then zeros
    assert len(hostile) == 65
    started = time.monotonic()
    with pytest.raises(ProtocolError, match="record batch at offset 0: claims 2147483647 records; its 4 bytes"):
        recode.contiguous_copy(crc_valid(hostile))
    assert time.monotonic() - started < 0.1
    one = bytearray(batch(0, 5, records=b"\x01" + b"\x00" * 13, count=2))  # two records' room, the first of -1
    with pytest.raises(ProtocolError, match="record 0 at byte 0 of its records is -1 bytes long"):
        recode.contiguous_copy(crc_valid(one))


BOMBS = {
    1: lambda zeros: gzip.compress(zeros, 1),
    2: lambda zeros: bytes(cramjam.snappy.compress_raw(zeros)),
    3: lambda zeros: recode.compress(3, zeros),
    4: lambda zeros: recode.compress(4, zeros),
}


@pytest.mark.parametrize("codec", sorted(BOMBS))
def test_a_compression_bomb_is_a_protocol_error_not_a_memory_error(codec: int) -> None:
    bomb = BOMBS[codec](bytes(4 << 20))
    with pytest.raises(ProtocolError, match=r"decompresses to \d+ bytes or more, over the limit of 1048576"):
        recode.decompress(codec, bomb, limit=1 << 20)
    assert len(recode.decompress(codec, bomb, limit=4 << 20)) == 4 << 20
    hostile = batch(0, 0, records=bomb, attributes=codec, count=1)
    with pytest.raises(ProtocolError, match=r"record batch at offset 0: .* over the limit of 1048576"):
        recode.contiguous_copy(hostile, limit=1 << 20)


def test_a_xerial_snappy_block_of_negative_size_is_refused_not_looped_on() -> None:
    framed = recode.XERIAL_MAGIC + struct.pack(">iii", 1, 1, -4)
    with pytest.raises(ProtocolError, match="xerial snappy block of -4 bytes"):
        recode.decompress(2, framed)


def test_scram_iterations_above_kafkas_maximum_are_refused_in_one_line() -> None:
    client = ScramClient("SCRAM-SHA-256", "mirror", "secret", nonce="abc")
    with pytest.raises(SaslError, match=f"asks for 2272333240 iterations, more than Kafka's maximum of "
                                        f"{MAX_ITERATIONS}"):
        client.final(b"r=abcdef,s=c2FsdA==,i=2272333240")  # (hashlib itself overflows above 2^31: untyped)
    assert client.final(b"r=abcdef,s=c2FsdA==,i=%d" % MAX_ITERATIONS).startswith(b"c=biws,r=abcdef,p=")


OIDC = {"sasl.mechanism": "OAUTHBEARER", "sasl.oauthbearer.method": "oidc", "sasl.oauthbearer.client.id": "m",
        "sasl.oauthbearer.client.secret": "s", "sasl.oauthbearer.token.endpoint.url": "http://idp/token"}


def test_an_http_token_endpoint_is_refused_unless_allowed() -> None:
    with pytest.raises(SettingError, match="http://idp/token is plain http: the client secret would go out in "
                                           f"clear; use https, or set {ALLOW_HTTP_KEY} = true") as refused:
        translate_sasl(OIDC, lambda w: None)
    assert refused.value.key == "sasl.oauthbearer.token.endpoint.url"
    allowed = translate_sasl({**OIDC, ALLOW_HTTP_KEY: "true"}, lambda w: None)[0]
    assert allowed[ALLOW_HTTP_MARKER] == "true"
    assert ALLOW_HTTP_MARKER not in translate_sasl({**OIDC, "sasl.oauthbearer.token.endpoint.url": "https://idp/t"},
                                                   lambda w: None)[0]
    # the wire client's own check (settings that did not come through the configuration)
    with pytest.raises(SaslError, match="token endpoint http://idp/token is plain http"):
        TokenSource({k: v for k, v in OIDC.items() if k != "sasl.mechanism"}, "source cluster dc1")
    TokenSource(allowed, "source cluster dc1")


def test_every_parser_failure_is_a_mirror_error() -> None:
    """Brokers.metadata (and every worker) moves on after a MirrorError; a parser's failure must be one."""
    assert issubclass(ProtocolError, MirrorError) and issubclass(AnswerTooLarge, ProtocolError)


class Health:
    """What a flow's cluster health is told by the wire client (the Reachability protocol)."""

    def __init__(self) -> None:
        self.told: list[str | None] = []  # None: answered

    def mark_ok(self) -> None:
        self.told.append(None)

    def mark_down(self, why: str) -> None:
        self.told.append(why)


def test_the_cluster_health_is_told_whether_the_wire_client_reaches_the_cluster(
        brokers: Callable[[dict[int, Answer]], FakeBroker]) -> None:
    """A flow whose only client of its target is the wire client (exactly-once on batches) showed the target
    reachable through a whole partition: a metadata request no broker answers, or a connection refused once none
    has answered for DOWN_AFTER_S, marks the cluster down; each metadata answer and connection set up marks it up."""
    good = brokers({18: api_versions})
    good.answers[API_METADATA] = metadata(good.port)
    with socket.create_server(("127.0.0.1", 0)) as s:
        closed = int(s.getsockname()[1])  # nothing listens there once closed
    health = Health()
    down = Brokers(f"127.0.0.1:{closed}", {}, "target cluster dc2", timeout=2, reachability=health)
    with pytest.raises(WireError):
        down.metadata([])
    assert len(health.told) == 1 and health.told[0] is not None and "target cluster dc2" in health.told[0]
    up = Brokers(f"127.0.0.1:{good.port}", {}, "target cluster dc2", timeout=2, reachability=health)
    up.metadata(["orders"])
    assert health.told[-1] is None
    up.connect(1).close()
    assert health.told[-1] is None
    up.known[1] = type(up.known[1])(1, "127.0.0.1", closed)  # the leader stops answering
    with pytest.raises(WireError, match="cannot connect"):
        up.connect(1)
    # one broker out of reach while the cluster answers is a moved leader, not a cluster down ...
    assert health.told == [health.told[0], None, None]
    assert up._failing_since is not None
    up._failing_since -= DOWN_AFTER_S  # ... until connections have failed that long with no answer between
    with pytest.raises(WireError, match="cannot connect"):
        up.connect(1)
    assert health.told[-1] is not None and "cannot connect" in health.told[-1]
