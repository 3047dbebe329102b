"""One connection to one broker, set up from a cluster's librdkafka settings as librdkafka would: TLS
(``ssl.*``), SASL PLAIN, SCRAM, OAUTHBEARER or GSSAPI (``sasl.*``), then the versions the broker serves
(ApiVersions).

Requests use header v1 and non-flexible versions; answers come in the order the requests were sent, so a
caller may keep several in flight (:meth:`Connection.send`, then :meth:`Connection.receive` for each).
"""

from __future__ import annotations

import contextlib
import select
import socket
import ssl
import struct
import time
from collections import deque
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any

from mirror_core.errors import MirrorError
from mirror_core.wire import sasl
from mirror_core.wire.codec import Buffer, ProtocolError
from mirror_core.wire.errors import WireError as WireError  # where its callers have always found it
from mirror_core.wire.errors import name
from mirror_core.wire.kerberos import KerberosLogin
from mirror_core.wire.messages import (
    ApiMessage,
    ApiVersionsRequest,
    ApiVersionsResponse,
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
    decode,
    encode,
)
from mirror_core.wire.tls import tls_context

if TYPE_CHECKING:
    from mirror_core.wire.oauth import TokenSource

API_API_VERSIONS = ApiVersionsRequest.API_KEY
API_NAMES = {0: "Produce", 1: "Fetch", 2: "ListOffsets", 3: "Metadata", 10: "FindCoordinator", 17: "SaslHandshake",
             18: "ApiVersions", 22: "InitProducerId", 24: "AddPartitionsToTxn", 26: "EndTxn", 36: "SaslAuthenticate"}
PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
CLIENT_ID = b"mirror-core"
#: parts one ``sendmsg`` writes at most (Linux takes up to 1,024 buffers per call)
MAX_PARTS = 512
#: over TLS, parts are joined up to this many bytes per write
WRITE_CHUNK = 1 << 20
#: answers under a quarter of the reused answer buffer in a row after which it is let go (at most 0.5 s apart
#: while a fetch waits for records: about half a minute)
SHRINK_AFTER = 64
#: the largest answer taken while a connection is set up (ApiVersions, the SASL exchange: a few KB at most), so that
#: a size prefix from a peer not yet authenticated allocates nothing large
SETUP_MAX_ANSWER = 1 << 20
#: the largest answer taken afterwards unless the cluster's ``receive.message.max.bytes`` says otherwise
#: (librdkafka's default); a caller that knows its request's bound passes less (:meth:`Connection.receive`)
MAX_ANSWER = 100_000_000
#: the largest answer to a declared control-plane request (:meth:`Connection.ask`: coordinators, producer ids,
#: transactions, a group's leave; a few KB at most), read into objects (about ten times its size in memory). Metadata,
#: which grows with the partitions asked for, is bounded by ``receive.message.max.bytes`` like a fetch
CONTROL_MAX_ANSWER = 1 << 20


class AnswerTooLarge(ProtocolError):
    """An answer's size prefix over what the connection takes: the connection is closed, nothing allocated."""


def max_answer_bytes(settings: Mapping[str, str], where: str) -> int:
    """The cluster's ``receive.message.max.bytes`` (librdkafka's name and default, :data:`MAX_ANSWER`)."""
    raw = settings.get("receive.message.max.bytes", "").strip()
    try:
        value = int(raw) if raw else MAX_ANSWER
    except ValueError:
        value = 0
    if value < 1000:  # librdkafka's own floor
        raise WireError(f"{where}: receive.message.max.bytes = {raw!r} is not a number of bytes of 1000 or more")
    return value


def broker_where(where: str, host: str, port: int) -> str:
    """How error lines name one broker of the cluster ``where`` names."""
    return f"{where} (broker {host}:{port})"


class Connection:
    """A broker connection speaking request header v1 / response header v0."""

    def __init__(self, host: str, port: int, settings: Mapping[str, str], where: str, timeout: float = 30.0,
                 login: TokenSource | KerberosLogin | None = None) -> None:
        """``where`` names the cluster in every error line; ``timeout`` bounds each socket operation; ``login``:
        the cluster's OAUTHBEARER tokens or Kerberos credentials (those mechanisms only)."""
        self.where = broker_where(where, host, port)
        # client.id as the records path's clients send it (brokers' quotas, logs and metrics go by it)
        client_id = settings.get("client.id", "").encode() or CLIENT_ID
        self._client_id = struct.pack(">h", len(client_id)) + client_id
        #: monotonic time from which the broker may end this session (KIP-368: its token expires); None: never
        self.reauth_at: float | None = None
        protocol = settings.get("security.protocol", "PLAINTEXT").strip().upper()
        #: the largest answer taken once set up (see receive); until then, SETUP_MAX_ANSWER
        self.max_answer_bytes = max_answer_bytes(settings, self.where)
        self._set_up = False
        if protocol not in PROTOCOLS:
            raise WireError(f"{self.where}: security.protocol {protocol} is not one of {', '.join(PROTOCOLS)}")
        try:
            sock = socket.create_connection((host, port), timeout=timeout)
        except OSError as exc:
            raise WireError(f"{self.where}: cannot connect: {exc}") from None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8 << 20)
        self.sock: socket.socket = sock
        self.correlation = 0
        #: correlation ids of requests not yet answered, in order (one thread may send while another receives)
        self.sent: deque[int] = deque()
        self._answers: bytearray | None = None  # see receive(reuse=True)
        self._small_answers = 0
        try:
            if protocol.endswith("SSL"):
                ctx = tls_context(settings, where)
                try:
                    self.sock = ctx.wrap_socket(sock, server_hostname=host)
                except (ssl.SSLError, OSError) as exc:
                    raise WireError(f"{self.where}: TLS handshake failed: {exc}") from None
            self.versions = self._api_versions()
            if protocol.startswith("SASL"):
                self._authenticate(settings, host, login)
            self._setup_calls = self.correlation  # the requests that set it up (carried counts those after)
            self._set_up = True
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        self.sock.close()

    def version(self, api: int, spoken: tuple[int, ...]) -> int:
        """The highest of the versions this client speaks (``spoken``) that the broker serves."""
        low, high = self.versions.get(api, (0, -1))
        usable = [v for v in spoken if low <= v <= high]
        if not usable:
            served = f"versions {low}-{high}" if high >= 0 else "no version"
            raise WireError(f"{self.where}: the broker serves {API_NAMES.get(api, api)} {served}; this client speaks "
                            f"{', '.join(map(str, spoken))}")
        return max(usable)

    def send(self, api: int, version: int, body: bytes | Sequence[Buffer]) -> int:
        """Sends a request; ``body`` whole or in parts, written in order as they are (not joined first)."""
        self.correlation += 1
        parts = [body] if isinstance(body, (bytes, bytearray, memoryview)) else body
        header = struct.pack(">hhi", api, version, self.correlation) + self._client_id
        self.sent.append(self.correlation)  # before the bytes leave: the answer may be read at once elsewhere
        try:
            self._write([struct.pack(">i", len(header) + sum(len(p) for p in parts)) + header, *parts])
        except OSError as exc:
            raise WireError(f"{self.where}: sending {API_NAMES.get(api, api)} failed: {exc}") from None
        return self.correlation

    def _write(self, parts: list[Buffer]) -> None:
        """All of ``parts``, in order, without joining them into one buffer (a large one is fresh memory each
        time): as many as one ``sendmsg`` takes at once, or over TLS, which has no ``sendmsg``, joined a
        ``WRITE_CHUNK`` at a time."""
        if isinstance(self.sock, ssl.SSLSocket):
            pending: list[Buffer] = []
            size = 0
            for part in parts:
                if len(part) >= WRITE_CHUNK:  # large enough alone: written as it is, not copied into a join
                    if pending:
                        self.sock.sendall(b"".join(pending))
                        pending, size = [], 0
                    self.sock.sendall(part)
                    continue
                pending.append(part)
                size += len(part)
                if size >= WRITE_CHUNK:
                    self.sock.sendall(b"".join(pending))
                    pending, size = [], 0
            if pending:
                self.sock.sendall(b"".join(pending))
            return
        views = [memoryview(part) for part in parts if len(part)]
        at = 0
        while at < len(views):
            sent = self.sock.sendmsg(views[at:at + MAX_PARTS])
            while sent:  # past what was written; a part written in part is cut
                n = len(views[at])
                if sent < n:
                    views[at] = views[at][sent:]
                    break
                sent -= n
                at += 1

    def receive(self, reuse: bool = False, limit: int | None = None) -> memoryview:
        """The answer to the oldest request not yet answered (its body, after the correlation id). ``reuse``: read
        into this connection's own buffer, read into again by its next such answer, so that the caller keeps no
        view of it once parsed (a fetch copies its records out): a large answer (tens of MB at thousands of
        partitions) then costs no fresh memory, which the kernel must clear page by page.

        ``limit``: the largest answer this request allows (e.g. a fetch's max bytes and the headroom of one batch
        over it), in place of :attr:`max_answer_bytes`; while the connection is set up, ``SETUP_MAX_ANSWER``. A
        size prefix over it is an :class:`AnswerTooLarge` before anything is allocated, and an answer that breaks
        the framing closes the connection (what follows it can no longer be read as answers)."""
        size = struct.unpack(">i", self._exactly(4))[0]
        if not self._set_up:
            cap, why = SETUP_MAX_ANSWER, "taken before the connection is set up"
        elif limit is None:
            cap, why = self.max_answer_bytes, "of receive.message.max.bytes"
        else:
            cap, why = limit, "this request allows"
        if size > cap:
            self.close()
            raise AnswerTooLarge(f"{self.where}: an answer of {size} bytes, over the {cap} {why}; connection closed")
        if size < 4:
            self.close()
            raise ProtocolError(f"{self.where}: an answer of {size} bytes, shorter than its correlation id; "
                                "connection closed")
        data = memoryview(self._exactly(size, self._reusable(size) if reuse else None))[:size]
        correlation = struct.unpack_from(">i", data)[0]
        expected = self.sent.popleft() if self.sent else None
        if correlation != expected:
            self.close()
            raise ProtocolError(f"{self.where}: an answer to request {correlation} where {expected} was due; "
                                "connection closed")
        return data[4:]

    def answer_ready(self, timeout: float) -> bool:
        """Whether the next answer has begun to arrive (waiting up to ``timeout`` seconds): :meth:`receive` would
        not wait for its first bytes."""
        if isinstance(self.sock, ssl.SSLSocket) and self.sock.pending():
            return True
        return bool(select.select([self.sock], [], [], timeout)[0])

    def call(self, api: int, version: int, body: bytes, reuse: bool = False, limit: int | None = None) -> memoryview:
        """:meth:`send`, then :meth:`receive` (``limit``: see there)."""
        self.send(api, version, body)
        return self.receive(reuse, limit)

    def ask(self, request: ApiMessage, answer: type[ApiMessage], spoken: tuple[int, ...]) -> Any:
        """A declared request (mirror_core/wire/messages.py) at the highest version of ``spoken`` the broker serves,
        and its answer read into ``answer``'s fields."""
        version = self.version(request.API_KEY, spoken)
        return decode(answer, version, self.call(request.API_KEY, version, encode(request, version),
                                                 limit=min(CONTROL_MAX_ANSWER, self.max_answer_bytes)))

    def _reusable(self, n: int) -> bytearray:
        """The connection's answer buffer, at least ``n`` bytes: a new one when it is too small, when a view of it
        is still alive (CPython refuses to resize a bytearray then), which reading into would overwrite, or when
        the answers have been far smaller for ``SHRINK_AFTER`` in a row (a backlog copied: its memory given back)."""
        buf = self._answers
        if buf is not None and len(buf) >= n:
            self._small_answers = self._small_answers + 1 if n * 4 < len(buf) else 0
            if self._small_answers < SHRINK_AFTER:
                try:
                    buf.append(0)
                    del buf[-1]
                    return buf
                except BufferError:
                    pass
        self._small_answers = 0
        self._answers = bytearray(n + n // 4)  # room to grow: answers under backlog vary by a few percent
        return self._answers

    def _exactly(self, n: int, into: bytearray | None = None) -> bytearray:
        buf = bytearray(n) if into is None else into
        view, got = memoryview(buf), 0
        while got < n:
            try:
                k = self.sock.recv_into(view[got:], n - got)
            except OSError as exc:
                raise WireError(f"{self.where}: receiving failed: {exc}") from None
            if not k:
                raise WireError(f"{self.where}: the broker closed the connection")
            got += k
        return buf

    def _api_versions(self) -> dict[int, tuple[int, int]]:
        """ApiVersions v0: every broker answers it, before any SASL exchange too."""
        answer = decode(ApiVersionsResponse, 0, self.call(API_API_VERSIONS, 0, encode(ApiVersionsRequest(), 0)))
        if answer.error_code:
            raise WireError(f"{self.where}: ApiVersions failed: {name(answer.error_code)}")
        return {api.api_key: (api.min_version, api.max_version) for api in answer.api_keys or ()}

    def expiring(self) -> bool:
        """The broker ends this session soon (its token expires): the caller reconnects between requests."""
        return self.reauth_at is not None and time.monotonic() >= self.reauth_at

    @property
    def carried(self) -> bool:
        """A request went on it since it was set up (a session shorter than a round trip still carries one)."""
        return self.correlation > self._setup_calls

    def _authenticate(self, settings: Mapping[str, str], host: str, login: TokenSource | KerberosLogin | None) -> None:
        mechanism = sasl.mechanism_for(settings, self.where)
        handshake = self.ask(SaslHandshakeRequest(mechanism=mechanism), SaslHandshakeResponse, (1,))
        if handshake.error_code:
            offered = ", ".join(m or "" for m in handshake.mechanisms or ())
            raise sasl.SaslError(f"{self.where}: the broker does not take SASL {mechanism} on this listener (it "
                                 f"offers {offered or 'none'})")
        username, password = settings.get("sasl.username", ""), settings.get("sasl.password", "")
        version = self.version(SaslAuthenticateRequest.API_KEY, (0, 1))
        try:
            if mechanism == "OAUTHBEARER":
                if login is None or isinstance(login, KerberosLogin):
                    raise sasl.SaslError("no token source for this cluster")
                username = login.client_id
                token = login.token()
                refused = self._sasl_step(version, sasl.oauthbearer(token, sasl.extensions(settings)))
                if refused:  # RFC 7628: the server's error (JSON) in place of an empty success, error code 0
                    login.refused(token)  # (a key rotated, a scope changed: the next connection asks a new one)
                    with contextlib.suppress(MirrorError):  # the client's answer ending it; the broker fails it
                        self._sasl_step(version, b"\x01")
                    raise sasl.SaslError(f"the broker refused the token: {refused.decode(errors='replace')}")
            elif mechanism == "GSSAPI":
                if not isinstance(login, KerberosLogin):
                    raise sasl.SaslError("no Kerberos login for this cluster")
                username = login.who
                self._kerberos(version, settings, login, host)
            elif mechanism == "PLAIN":
                self._sasl_step(version, sasl.plain(username, password))
            else:
                scram = sasl.ScramClient(mechanism, username, password)
                server_first = self._sasl_step(version, scram.first())
                scram.verify(self._sasl_step(version, scram.final(server_first)))
        except sasl.SaslError as exc:
            raise sasl.SaslError(f"{self.where}: SASL {mechanism} authentication of user '{username}' failed: "
                                 f"{exc}") from None

    def _kerberos(self, version: int, settings: Mapping[str, str], login: KerberosLogin, host: str) -> None:
        """RFC 4752: security-context tokens until the context is complete (the broker's last one proves it
        is the service: mutual authentication), then the security-layer offer and the answer, both wrapped."""
        service = settings.get("sasl.kerberos.service.name", "kafka").strip() or "kafka"
        with login.context(service, host) as ctx:
            answer = self._sasl_step(version, ctx.step(b""))
            while not ctx.complete:
                token = ctx.step(answer)
                if not ctx.complete or token:
                    answer = self._sasl_step(version, token)
            # The broker sends its offer in answer to an empty message once its side is complete too.
            offer = self._sasl_step(version, b"")
            self._sasl_step(version, ctx.wrap(sasl.security_layer_choice(ctx.unwrap(offer))))

    def _sasl_step(self, version: int, payload: bytes) -> bytes:
        answer = self.ask(SaslAuthenticateRequest(auth_bytes=payload), SaslAuthenticateResponse, (version,))
        if answer.error_code:
            raise sasl.SaslError(answer.error_message or f"error {answer.error_code}")
        lifetime_ms = answer.session_lifetime_ms if version >= 1 else 0
        if lifetime_ms > 0:  # reconnected at 85 % of it, as Java clients re-authenticate (librdkafka too)
            self.reauth_at = time.monotonic() + 0.85 * lifetime_ms / 1000
        return bytes(answer.auth_bytes or b"")
