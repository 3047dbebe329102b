"""The wire client's request layouts and answers (mirror_core/wire/metadata.py, fetch.py, produce.py), read
from responses built by hand in the versions it speaks: where leaders are, what a fetch returned per
partition, and the target offset a produce answer gives each batch."""

from __future__ import annotations

import socket
import ssl
import struct
import threading
from collections import deque
from pathlib import Path

import pytest

from mirror_core.wire.codec import ProtocolError, string
from mirror_core.wire.connection import MAX_ANSWER, SHRINK_AFTER, Connection, WireError
from mirror_core.wire.fetch import fetch_request, parse_fetch
from mirror_core.wire.metadata import NO_LEADER, Broker, parse_metadata
from mirror_core.wire.produce import parse_produce, produce_request
from mirror_core.wire.records import restamp
from tests.security_harness import make_pki
from tests.unit.record_batches import batch


def test_metadata_gives_brokers_leaders_and_each_partitions_error() -> None:
    brokers = struct.pack(">i", 2) + b"".join(struct.pack(">i", n) + string(h) + struct.pack(">i", p) + string(None)
                                              for n, h, p in ((1, "b1", 9092), (2, "b2", 9093)))
    partitions = (struct.pack(">hii", 0, 0, 2) + struct.pack(">ii", 1, 2) + struct.pack(">ii", 1, 2)
                  + struct.pack(">hii", 5, 1, NO_LEADER) + struct.pack(">i", 0) + struct.pack(">i", 0))
    topics = (struct.pack(">i", 2) + struct.pack(">h", 0) + string("orders") + b"\x00" + struct.pack(">i", 2)
              + partitions + struct.pack(">h", 3) + string("gone") + b"\x00" + struct.pack(">i", 0))
    meta = parse_metadata(memoryview(struct.pack(">i", 0) + brokers + string("cluster") + struct.pack(">i", 1)
                                     + topics))
    assert meta.brokers == {1: Broker(1, "b1", 9092), 2: Broker(2, "b2", 9093)}
    assert meta.topics["orders"].leaders == {0: 2, 1: NO_LEADER}
    assert meta.topics["orders"].errors == {0: 0, 1: 5}  # LEADER_NOT_AVAILABLE while an election runs
    assert meta.topics["gone"].error == 3 and not meta.topics["gone"].leaders


def test_a_fetch_asks_each_partition_at_its_position_read_committed_and_reads_back_what_bounds_the_log() -> None:
    request = fetch_request({("a", 0): 5, ("a", 3): 9, ("b", 1): 0}, 500, 1, 64 << 20, 4 << 20)
    assert struct.unpack_from(">iiiib", request) == (-1, 500, 1, 64 << 20, 1)
    assert request.count(string("a")) == 1  # partitions grouped under their topic
    assert struct.pack(">iiqqi", 3, -1, 9, -1, 4 << 20) in request
    first = batch(5, 1)
    body = (struct.pack(">ihqqqi", 0, 0, 7, 7, 2, 1) + struct.pack(">qq", 9, 5) + struct.pack(">ii", -1, len(first))
            + first + struct.pack(">ihqqqi", 3, 1, -1, -1, -1, -1) + struct.pack(">ii", -1, -1))
    got = parse_fetch(memoryview(struct.pack(">ihi", 0, 0, 0) + struct.pack(">i", 1) + string("a")
                                 + struct.pack(">i", 2) + body), "dc1")
    assert [(p.partition, p.error, p.high_watermark, p.log_start, p.aborted) for p in got] == \
        [(0, 0, 7, 2, [(9, 5)]), (3, 1, -1, -1, [])]  # OFFSET_OUT_OF_RANGE reported, not raised
    assert [bytes(b) for b in got[0].batches] == [first]


def test_a_fetch_asks_a_partition_given_a_size_of_its_own_for_that_much() -> None:
    request = fetch_request({("a", 0): 7, ("a", 1): 9}, 500, 1, 64 << 20, 4096, sizes={("a", 0): 1 << 20})
    assert struct.pack(">iiqqi", 0, -1, 7, -1, 1 << 20) in request
    assert struct.pack(">iiqqi", 1, -1, 9, -1, 4096) in request


def test_a_produce_answer_gives_each_batch_its_target_base_offset_or_its_error() -> None:
    request = b"".join(produce_request({("r", 2): (batch(40, 2),)}, 30_000, None))
    assert request[:8] == struct.pack(">hhi", -1, -1, 30_000)  # no transactional id, acks=all
    sent = request[-len(batch(40, 2)):]
    assert struct.unpack_from(">qii", sent) == (0, len(sent) - 12, -1) and sent[16:] == batch(40, 2)[16:]
    answer = (struct.pack(">i", 1) + string("r") + struct.pack(">i", 2)
              + struct.pack(">ihqqq", 2, 0, 1200, -1, 0) + struct.pack(">i", 0) + string(None)
              + struct.pack(">ihqqq", 3, 10, -1, -1, 0) + struct.pack(">i", 1) + struct.pack(">i", 0) + string("big")
              + string("MESSAGE_TOO_LARGE") + struct.pack(">i", 0))
    got = parse_produce(memoryview(answer))
    assert [(p.partition, p.error, p.base_offset, p.message) for p in got] == \
        [(2, 0, 1200, None), (3, 10, -1, "MESSAGE_TOO_LARGE")]


def test_bootstrap_servers_are_read_as_librdkafka_reads_them() -> None:
    from mirror_core.errors import MirrorError
    from mirror_core.wire.metadata import Brokers, address

    assert Brokers("kafka-a:19092, SASL_SSL://kafka-b, [::1]:9093,[fe80::1]", {}, "x").bootstrap == [
        ("kafka-a", 19092), ("kafka-b", 9092), ("::1", 9093), ("fe80::1", 9092)]
    with pytest.raises(MirrorError, match="'kafka-c:x': the port is not a number"):
        address("kafka-c:x")


def test_a_batch_in_parts_makes_the_same_request_as_the_whole_batch_and_leaves_its_records_where_they_are() -> None:
    """The sender hands restamp's two parts over: the request is the one the joined batch makes, and the records
    part is passed on as it is, not copied into a large buffer."""
    head, rest = restamp(batch(40, 2), 77, 1, 5)
    whole = {("r", 2): (head + rest,), ("r", 3): (batch(9, 1),), ("s", 0): (batch(3, 0),)}
    parted = {("r", 2): (head, rest), ("r", 3): (batch(9, 1),), ("s", 0): (batch(3, 0),)}
    got = produce_request(parted, 30_000, "txn")
    assert b"".join(got) == b"".join(produce_request(whole, 30_000, "txn"))
    assert any(part is rest for part in got)


def test_a_request_in_parts_arrives_whole_and_in_order_over_a_socket() -> None:
    """Connection._write: thousands of parts (more than one sendmsg takes), some empty, some larger than the
    socket's buffer (a partial write cuts a part), read back as one stream."""
    left, right = socket.socketpair()
    left.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    conn = Connection.__new__(Connection)
    conn.sock = left
    parts: list[bytes | memoryview] = [bytes([i % 251]) * (i % 7) for i in range(3000)]
    parts += [memoryview(bytes(range(256)) * 4096), b"", b"end"]
    expected = b"".join(parts)
    got = bytearray()
    reader = threading.Thread(target=lambda: got.extend(_read(right, len(expected))))
    reader.start()
    conn._write(parts)
    reader.join(10)
    left.close()
    right.close()
    assert bytes(got) == expected


def _read(sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(1 << 16)
        if not chunk:
            break
        out += chunk
    return bytes(out)


def test_an_answer_read_for_reuse_is_never_overwritten_while_a_view_of_it_lives() -> None:
    """Connection.receive(reuse=True): the next answer goes into the same buffer once the last is let go, and
    into a new one while a view of the last is still held (a batch handed on from it)."""
    left, right = socket.socketpair()
    conn = Connection.__new__(Connection)
    conn.sock, conn.where, conn._answers, conn._small_answers = left, "test", None, 0
    conn._set_up, conn.max_answer_bytes = True, MAX_ANSWER
    conn.sent = deque([1, 2, 3])
    for correlation, body in ((1, b"first answer"), (2, b"second"), (3, b"third")):
        right.sendall(struct.pack(">ii", 4 + len(body), correlation) + body)
    held = conn.receive(reuse=True)
    first_buffer = conn._answers
    second = conn.receive(reuse=True)
    assert bytes(held) == b"first answer" and bytes(second) == b"second"  # not overwritten
    assert conn._answers is not first_buffer
    second_buffer = conn._answers
    del second
    assert bytes(conn.receive(reuse=True)) == b"third" and conn._answers is second_buffer
    left.close()
    right.close()


def test_the_answer_buffer_is_let_go_after_answers_far_smaller_than_it_and_never_takes_a_short_frame() -> None:
    left, right = socket.socketpair()
    conn = Connection.__new__(Connection)
    conn.sock, conn.where, conn._answers, conn._small_answers = left, "test", None, 0
    conn._set_up, conn.max_answer_bytes = True, MAX_ANSWER
    conn.sent = deque(range(1, SHRINK_AFTER + 3))
    big = b"x" * 4000
    right.sendall(struct.pack(">ii", 4 + len(big), 1) + big)
    assert len(conn.receive(reuse=True)) == len(big)
    large = conn._answers
    for correlation in range(2, SHRINK_AFTER + 2):
        right.sendall(struct.pack(">ii", 4 + 10, correlation) + b"s" * 10)
        assert bytes(conn.receive(reuse=True)) == b"s" * 10
    assert conn._answers is not large and conn._answers is not None and len(conn._answers) < 100
    right.sendall(struct.pack(">i", 2))
    with pytest.raises(ProtocolError, match="shorter than its correlation id"):
        conn.receive(reuse=True)
    left.close()
    right.close()


def test_a_request_in_parts_arrives_whole_and_in_order_over_tls(tmp_path: Path) -> None:
    """Over TLS (no sendmsg) small parts are joined a MiB at a time and a part of a MiB or more goes as it is."""
    pki = make_pki(tmp_path)
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(str(pki.keystore_pem))
    client_ctx = ssl.create_default_context(cafile=str(pki.ca_pem))
    listener = socket.create_server(("127.0.0.1", 0))
    parts: list[bytes | memoryview] = [bytes([i % 251]) * (i % 300) for i in range(5000)]
    parts += [memoryview(bytes(range(256)) * 8192), b"", b"end"]  # the large part: 2 MiB
    expected = b"".join(parts)
    got = bytearray()

    def serve() -> None:
        raw, _ = listener.accept()
        with server_ctx.wrap_socket(raw, server_side=True) as tls:
            got.extend(_read(tls, len(expected)))

    server = threading.Thread(target=serve)
    server.start()
    conn = Connection.__new__(Connection)
    conn.sock = client_ctx.wrap_socket(socket.create_connection(listener.getsockname()), server_hostname="localhost")
    conn._write(parts)
    server.join(20)
    conn.sock.close()
    listener.close()
    assert bytes(got) == expected


@pytest.mark.parametrize(("settings", "sent"), [({"client.id": "dc1-mirror-7"}, b"dc1-mirror-7"), ({}, b"mirror-core")])
def test_requests_carry_the_clusters_client_id(settings: dict[str, str], sent: bytes) -> None:
    """client.id goes in every request header, as librdkafka sends it (brokers apply quotas and log requests by
    it); without one, mirror-core."""
    listener = socket.create_server(("127.0.0.1", 0))
    seen: list[bytes] = []

    def serve() -> None:
        peer, _ = listener.accept()
        with peer:  # size, api key, version, correlation id, then the client id's length and bytes
            request = bytearray()
            while len(request) < 4 or len(request) < 4 + struct.unpack(">i", request[:4])[0]:
                request += peer.recv(1 << 16) or b"!"  # (a request cut short fails the test)
            seen.append(bytes(request[14:14 + struct.unpack(">h", request[12:14])[0]]))

    server = threading.Thread(target=serve)
    server.start()
    with pytest.raises(WireError):  # the first request (ApiVersions) read, then the connection closed unanswered
        Connection("127.0.0.1", listener.getsockname()[1], settings, "cluster dc1", timeout=5)
    server.join(10)
    listener.close()
    assert seen == [sent]
