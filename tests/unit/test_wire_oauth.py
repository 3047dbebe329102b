"""The batch-copying client's OAUTHBEARER tokens (mirror_core/wire/oauth.py), from the tests' own OIDC token
endpoint (a real HTTP server, tests/oauth_harness.py): the client-credentials grant as librdkafka asks for it,
one token shared until 80 % of its lifetime, kept while still valid when the endpoint fails, a failure
remembered for a while, and a refusal said in one line without the secret. And the exchange with a broker
that refuses a token (answered in the SASL bytes with error code 0, as Kafka does), played by a scripted socket."""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mirror_core.config.sasl import ALLOW_HTTP_MARKER
from mirror_core.wire.connection import Connection, WireError
from mirror_core.wire.oauth import USER_AGENT, TokenSource, _lifetime_s
from mirror_core.wire.sasl import SaslError
from tests.oauth_harness import TokenServer

SECRET = "Zq9-wire-CL1ENT-s3cret"


@pytest.fixture
def idp() -> Iterator[TokenServer]:
    server = TokenServer({"mirror": SECRET}, lifetime_s=2).start()
    yield server
    server.stop()


def settings(idp: TokenServer, secret: str = SECRET) -> dict[str, str]:
    return {"sasl.oauthbearer.method": "oidc", "sasl.oauthbearer.token.endpoint.url": idp.token_url,
            "sasl.oauthbearer.client.id": "mirror", "sasl.oauthbearer.client.secret": secret,
            "sasl.oauthbearer.scope": "kafka", ALLOW_HTTP_MARKER: "true"}  # the test endpoint is plain http


def test_one_token_is_shared_until_most_of_its_lifetime_has_passed(idp: TokenServer) -> None:
    tokens = TokenSource(settings(idp), "source cluster dc1")
    first = tokens.token()
    assert tokens.token() == first and idp.issued_to("mirror") == 1
    time.sleep(2 * 0.8 + 0.1)  # past 80 % of the 2 s lifetime (the JWT's exp)
    assert tokens.token() != first and idp.issued_to("mirror") == 2
    asked = idp.requests_by("mirror")
    assert all(r.auth == "basic" and dict(r.form) == {"grant_type": "client_credentials", "scope": "kafka"}
               and {k.lower(): v for k, v in r.headers.items()}["user-agent"] == USER_AGENT for r in asked), asked


def test_a_valid_token_outlives_a_failed_refresh_and_a_failure_is_not_asked_again_at_once(idp: TokenServer) -> None:
    idp.lifetime_s = 4
    tokens = TokenSource(settings(idp), "source cluster dc1")
    first = tokens.token()
    held = tokens._token
    assert held is not None
    idp.clients["mirror"] = "rotated"  # the endpoint now refuses this client
    time.sleep(held.refresh_at + 0.05 - time.monotonic())  # past 80 % of its lifetime (the JWT's exp), not 100 %
    assert tokens.token() == first and idp.refused_for("mirror") == 1  # refused, but the token is still valid
    time.sleep(held.expires_at + 0.05 - time.monotonic())  # expired: the failure stands, no new request meanwhile
    with pytest.raises(SaslError, match="refused"):
        tokens.token()
    assert idp.refused_for("mirror") == 1


def test_a_refused_client_is_one_line_with_the_providers_answer_and_no_secret(idp: TokenServer) -> None:
    with pytest.raises(SaslError) as err:
        TokenSource(settings(idp, "not-" + SECRET), "source cluster dc1").token()
    said = str(err.value)
    assert said == f"OAUTHBEARER token for client 'mirror' from {idp.token_url}: refused (HTTP 401: invalid_client)"
    assert SECRET not in said


def test_the_lifetime_is_the_jwts_exp_else_expires_in_even_as_a_string() -> None:
    assert _lifetime_s({"expires_in": "300"}, "opaque-token") == 300.0
    assert _lifetime_s({}, "opaque-token") is None


def test_the_endpoints_trust_is_read_as_librdkafka_reads_it(idp: TokenServer, tmp_path: Path) -> None:
    https = {**settings(idp), "sasl.oauthbearer.token.endpoint.url": "https://idp.example/token"}
    TokenSource({**https, "https.ca.location": "probe"}, "dc1")  # librdkafka's "find the system's"
    TokenSource({**https, "https.ca.location": str(tmp_path)}, "dc1")  # a directory of CAs
    with pytest.raises(WireError, match=r"^dc1: the OAUTHBEARER token endpoint's trust \(https\.ca\.\*\): the TLS "):
        TokenSource({**https, "https.ca.pem": "not a certificate"}, "dc1")


def _string(s: bytes) -> bytes:
    return struct.pack(">h", len(s)) + s


def scripted_broker(sasl_answers: list[tuple[int, bytes, int]]) -> tuple[int, list[bytes]]:
    """A socket that answers ApiVersions, SaslHandshake (OAUTHBEARER) and then each SaslAuthenticate with the next
    (error code, auth bytes, session lifetime ms); the SASL payloads it received."""
    server = socket.create_server(("127.0.0.1", 0))
    received: list[bytes] = []

    def serve() -> None:
        conn, _ = server.accept()
        with conn, server:
            answers = iter(sasl_answers)
            while True:
                head = conn.recv(4, socket.MSG_WAITALL)
                if len(head) < 4:
                    return
                data = conn.recv(struct.unpack(">i", head)[0], socket.MSG_WAITALL)
                api, _version, correlation = struct.unpack_from(">hhi", data)
                if api == 18:  # ApiVersions v0
                    body = struct.pack(">hi", 0, 2) + struct.pack(">hhh", 17, 0, 1) + struct.pack(">hhh", 36, 0, 1)
                elif api == 17:  # SaslHandshake v1
                    body = struct.pack(">hi", 0, 1) + _string(b"OAUTHBEARER")
                else:  # SaslAuthenticate v1: after the header (client id), the payload as BYTES
                    at = 8 + 2 + struct.unpack_from(">h", data, 8)[0]
                    received.append(data[at + 4:at + 4 + struct.unpack_from(">i", data, at)[0]])
                    error, auth, lifetime = next(answers)
                    body = struct.pack(">hhi", error, -1, len(auth)) + auth + struct.pack(">q", lifetime)
                conn.sendall(struct.pack(">ii", 4 + len(body), correlation) + body)

    threading.Thread(target=serve, daemon=True).start()
    return server.getsockname()[1], received


def test_a_token_the_broker_refuses_is_a_failed_login_and_is_not_used_again(idp: TokenServer) -> None:
    tokens = TokenSource(settings(idp), "source cluster dc1")
    port, received = scripted_broker([(0, b'{"status":"invalid_token"}', 0), (58, b"", 0)])
    oauth = {**settings(idp), "security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "OAUTHBEARER"}
    with pytest.raises(SaslError) as err:
        Connection("127.0.0.1", port, oauth, "source cluster dc1", 5, tokens)
    assert str(err.value) == (f"source cluster dc1 (broker 127.0.0.1:{port}): SASL OAUTHBEARER authentication of user "
                              '\'mirror\' failed: the broker refused the token: {"status":"invalid_token"}')
    token = received[0].split(b"auth=Bearer ")[1].split(b"\x01")[0].decode()
    assert received == [b"n,,\x01auth=Bearer " + token.encode() + b"\x01\x01", b"\x01"]
    assert tokens.token() != token and idp.issued_to("mirror") == 2  # asked again for the next connection


def test_a_session_is_renewed_at_85_percent_of_its_lifetime(idp: TokenServer) -> None:
    tokens = TokenSource(settings(idp), "source cluster dc1")
    port, _ = scripted_broker([(0, b"", 400)])
    oauth = {**settings(idp), "security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "OAUTHBEARER"}
    conn = Connection("127.0.0.1", port, oauth, "source cluster dc1", 5, tokens)
    try:
        assert conn.reauth_at is not None and 0.3 < conn.reauth_at - time.monotonic() <= 0.34
        assert not conn.expiring() and not conn.carried
        time.sleep(0.4)
        assert conn.expiring() and not conn.carried  # the sender still sends one request on it before a new one
        conn.correlation += 1  # (as one request sent)
        assert conn.carried
    finally:
        conn.close()
