"""A local OIDC identity provider and a cluster with a ``SASL_PLAINTEXT`` listener for OAUTHBEARER.

The provider implements the OAuth 2 client-credentials grant as librdkafka's
``sasl.oauthbearer.method=oidc`` (and Java's ``OAuthBearerLoginCallbackHandler``) call it: ``POST``
of ``grant_type=client_credentials[&scope=...]`` with the client id and secret in HTTP Basic auth.
It issues RS256 JWTs signed by a key made on the spot and serves the matching JWKS document, which
the broker's ``OAuthBearerValidatorCallbackHandler`` fetches: signatures, expiry, issuer and audience
are really checked. Every token request is recorded, so tests can assert who asked and what was sent.

The broker keeps its PLAINTEXT listener (inter-broker traffic and the harness's own admin as the
super user ``User:ANONYMOUS``); the mirror under test authenticates as the JWT subject.
"""

from __future__ import annotations

import base64
import binascii
import json
import threading
import time
import urllib.parse
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from mirror_core.devcluster.local_cluster import LocalCluster, free_port
from tests.kafka_harness import new_cluster

LOGIN_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
LOGIN_HANDLER = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler"
VALIDATOR = "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler"
AUDIENCE = "kafka"


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _b64url_uint(n: int) -> str:
    return _b64url(n.to_bytes((n.bit_length() + 7) // 8, "big"))


@dataclass(frozen=True)
class TokenRequest:
    """One call of the token endpoint, as received (the secret itself is not kept)."""

    client_id: str | None  # from Basic auth (or the form, for client_secret_post)
    auth: str  # "basic", "post" or "none": where the credentials came from
    form: Mapping[str, str]  # the decoded form body, client_secret removed
    raw_body: str  # exactly what was posted, client_secret removed (to see what is URL-encoded)
    headers: Mapping[str, str]  # Accept, Content-Type, User-Agent (never Authorization)
    status: int
    at: float  # time.time() when answered


@dataclass
class TokenServer:
    """OIDC token + JWKS endpoint on 127.0.0.1 (stdlib HTTP server in a daemon thread)."""

    #: client id -> client secret
    clients: dict[str, str]
    #: token lifetime in seconds (``exp - iat``); short, so refreshes can be observed
    lifetime_s: int = 60
    key: rsa.RSAPrivateKey = field(default_factory=lambda: rsa.generate_private_key(65537, 2048))
    kid: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    requests: list[TokenRequest] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: ThreadingHTTPServer | None = None

    # -- lifecycle -----------------------------------------------------------------------------------

    def start(self) -> TokenServer:
        server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        server.daemon_threads = True
        self._server = server
        threading.Thread(target=server.serve_forever, name="oidc-token-server", daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    @property
    def port(self) -> int:
        assert self._server is not None, "token server not started"
        return int(self._server.server_address[1])

    @property
    def issuer(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def token_url(self) -> str:
        return f"{self.issuer}/token"

    @property
    def jwks_url(self) -> str:
        return f"{self.issuer}/jwks"

    # -- what tests assert on ------------------------------------------------------------------------

    def requests_by(self, client_id: str) -> list[TokenRequest]:
        with self._lock:
            return [r for r in self.requests if r.client_id == client_id]

    def issued_to(self, client_id: str) -> int:
        """How many tokens this client obtained."""
        return sum(1 for r in self.requests_by(client_id) if r.status == 200)

    def refused_for(self, client_id: str) -> int:
        return sum(1 for r in self.requests_by(client_id) if r.status == 401)

    # -- tokens --------------------------------------------------------------------------------------

    def jwks(self) -> dict[str, Any]:
        pub = self.key.public_key().public_numbers()
        return {"keys": [{"kty": "RSA", "use": "sig", "alg": "RS256", "kid": self.kid,
                          "n": _b64url_uint(pub.n), "e": _b64url_uint(pub.e)}]}

    def mint(self, sub: str, scope: str = "", lifetime_s: int | None = None, *, alg: str = "RS256",
             key: rsa.RSAPrivateKey | None = None, issuer: str | None = None, now: float | None = None) -> str:
        """A JWT for ``sub``; ``alg="none"`` gives an unsigned one, ``key`` signs with another key (forgery)."""
        iat = int(time.time() if now is None else now)
        claims: dict[str, Any] = {"iss": self.issuer if issuer is None else issuer, "sub": sub, "aud": AUDIENCE,
                                  "iat": iat, "exp": iat + (self.lifetime_s if lifetime_s is None else lifetime_s),
                                  "jti": uuid.uuid4().hex}
        if scope:  # Kafka's validator rejects an empty "scope" claim; IdPs leave it out
            claims["scope"] = scope
        header = {"alg": alg, "typ": "JWT"} | ({} if alg == "none" else {"kid": self.kid})
        signing_input = f"{_b64url(json.dumps(header).encode())}.{_b64url(json.dumps(claims).encode())}"
        if alg == "none":
            return signing_input + "."
        assert alg == "RS256", alg
        signature = (key or self.key).sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256())
        return f"{signing_input}.{_b64url(signature)}"

    def answer_token_request(self, headers: Mapping[str, str], body: str) -> tuple[int, dict[str, Any], str | None]:
        """(status, JSON body, client id) for one POST /token."""
        form = dict(urllib.parse.parse_qsl(body, keep_blank_values=True))
        payload: dict[str, Any]
        client_id, secret, auth = None, None, "none"
        basic = headers.get("Authorization", "")
        if basic.lower().startswith("basic "):
            try:
                client_id, _, secret = base64.b64decode(basic[6:].strip(), validate=True).decode().partition(":")
                auth = "basic"
            except (binascii.Error, UnicodeDecodeError):
                return 400, {"error": "invalid_request"}, None
        elif "client_id" in form:
            client_id, secret, auth = form.get("client_id"), form.get("client_secret"), "post"
        status, payload = 200, {}
        if form.get("grant_type") != "client_credentials":
            status, payload = 400, {"error": "unsupported_grant_type"}
        elif client_id is None or secret is None or self.clients.get(client_id) != secret:
            status, payload = 401, {"error": "invalid_client"}
        else:
            scope = form.get("scope", "")
            payload = {"access_token": self.mint(client_id, scope), "token_type": "Bearer",
                       "expires_in": self.lifetime_s, "scope": scope}
        safe_form = {k: v for k, v in form.items() if k != "client_secret"}
        raw = "&".join(p for p in body.split("&") if not p.startswith("client_secret="))
        kept = {k: v for k, v in headers.items() if k.lower() in ("accept", "content-type", "user-agent")}
        with self._lock:
            self.requests.append(TokenRequest(client_id, auth, safe_form, raw, kept, status, time.time()))
        return status, payload, client_id


def _handler(server: TokenServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _send(self, status: int, payload: dict[str, Any]) -> None:
            body = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            if status == 401:
                self.send_header("WWW-Authenticate", 'Basic realm="oidc"')
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:  # http.server calls these by name
            if self.path == "/jwks":
                self._send(200, server.jwks())
            elif self.path == "/.well-known/openid-configuration":
                self._send(200, {"issuer": server.issuer, "token_endpoint": server.token_url,
                                 "jwks_uri": server.jwks_url,
                                 "grant_types_supported": ["client_credentials"],
                                 "token_endpoint_auth_methods_supported": ["client_secret_basic",
                                                                           "client_secret_post"]})
            else:
                self._send(404, {"error": "not_found"})

        def do_POST(self) -> None:  # http.server calls these by name
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length).decode(errors="replace")
            if self.path != "/token":
                self._send(404, {"error": "not_found"})
                return
            status, payload, _ = server.answer_token_request(dict(self.headers.items()), body)
            self._send(status, payload)

        def log_message(self, format: str, *args: Any) -> None:  # quiet: no access log on stderr
            pass

    return Handler


def new_oauth_cluster(name: str, root: Path, idp: TokenServer, reauth_ms: int | None = None) -> LocalCluster:
    """A cluster with PLAINTEXT (harness) and SASL_PLAINTEXT/OAUTHBEARER (JWTs from ``idp``) listeners.

    ``reauth_ms`` sets ``connections.max.reauth.ms``: the broker then closes connections that do not
    re-authenticate with a fresh token before the old one (or that period) runs out (KIP-368).
    """
    listener = "listener.name.sasl_plaintext.oauthbearer"
    extra = {
        "sasl.enabled.mechanisms": "OAUTHBEARER",
        f"{listener}.sasl.jaas.config": f"{LOGIN_MODULE} required;",
        f"{listener}.sasl.server.callback.handler.class": VALIDATOR,
        "sasl.oauthbearer.jwks.endpoint.url": idp.jwks_url,
        "sasl.oauthbearer.expected.issuer": idp.issuer,
        "sasl.oauthbearer.expected.audience": AUDIENCE,
    }
    if reauth_ms is not None:
        extra["connections.max.reauth.ms"] = str(reauth_ms)
    cluster = new_cluster(name, root, **extra)
    cluster.extra_listeners["SASL_PLAINTEXT"] = free_port()
    # Kafka 4 refuses every OAuth URL not listed in this system property (CVE-2025-27817).
    cluster.jvm_options.append(f"-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls={idp.jwks_url}")
    return cluster


def java_client_lines(alias: str, token_url: str, client_id: str, secret: str, scope: str = "kafka") -> list[str]:
    """mm2.properties lines for an OAUTHBEARER cluster, as Java/MirrorMaker 2 users write them."""
    return [
        f"{alias}.security.protocol = SASL_PLAINTEXT",
        f"{alias}.sasl.mechanism = OAUTHBEARER",
        f"{alias}.sasl.login.callback.handler.class = {LOGIN_HANDLER}",
        f"{alias}.sasl.oauthbearer.token.endpoint.url = {token_url}",
        f"{alias}.sasl.oauthbearer.token.endpoint.allow.http = true",  # the test endpoint is plain http
        f'{alias}.sasl.jaas.config = {LOGIN_MODULE} required clientId="{client_id}" clientSecret="{secret}" '
        f'scope="{scope}";',
    ]


def librdkafka_client_lines(alias: str, token_url: str, client_id: str, secret: str,
                            scope: str = "kafka") -> list[str]:
    """The same in librdkafka's names (unknown client keys pass through the config translation)."""
    return [
        f"{alias}.security.protocol = SASL_PLAINTEXT",
        f"{alias}.sasl.mechanisms = OAUTHBEARER",
        f"{alias}.sasl.oauthbearer.method = oidc",
        f"{alias}.sasl.oauthbearer.token.endpoint.url = {token_url}",
        f"{alias}.sasl.oauthbearer.client.id = {client_id}",
        f"{alias}.sasl.oauthbearer.client.secret = {secret}",
        f"{alias}.sasl.oauthbearer.scope = {scope}",
        f"{alias}.sasl.oauthbearer.token.endpoint.allow.http = true",
    ]


def librdkafka_oidc_settings(bootstrap: str, token_url: str, client_id: str, secret: str,
                             scope: str = "kafka") -> dict[str, str]:
    """confluent-kafka client settings for the OAUTHBEARER listener (harness-side clients)."""
    return {"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "OAUTHBEARER",
            "sasl.oauthbearer.method": "oidc", "sasl.oauthbearer.token.endpoint.url": token_url,
            "sasl.oauthbearer.client.id": client_id, "sasl.oauthbearer.client.secret": secret,
            "sasl.oauthbearer.scope": scope}


@dataclass(frozen=True)
class OAuthCluster:
    cluster: LocalCluster
    idp: TokenServer

    @property
    def sasl_bootstrap(self) -> str:
        return self.cluster.bootstrap_for("SASL_PLAINTEXT")

    @property
    def plain_bootstrap(self) -> str:  # the harness's own super-user access
        return self.cluster.bootstrap

    def java_lines(self, alias: str, client_id: str, secret: str | None = None, scope: str = "kafka") -> list[str]:
        return java_client_lines(alias, self.idp.token_url, client_id,
                                 self.idp.clients[client_id] if secret is None else secret, scope)

    def librdkafka_lines(self, alias: str, client_id: str, secret: str | None = None,
                         scope: str = "kafka") -> list[str]:
        return librdkafka_client_lines(alias, self.idp.token_url, client_id,
                                       self.idp.clients[client_id] if secret is None else secret, scope)


@contextmanager
def running_oauth_cluster(name: str, root: Path, clients: dict[str, str], lifetime_s: int = 60,
                          reauth_ms: int | None = None) -> Iterator[OAuthCluster]:
    """The identity provider first (the broker fetches the JWKS at start-up), then the cluster."""
    idp = TokenServer(dict(clients), lifetime_s).start()
    cluster = new_oauth_cluster(name, root, idp, reauth_ms)
    try:
        cluster.start()
        yield OAuthCluster(cluster, idp)
    finally:
        cluster.stop()
        idp.stop()
