"""SASL exchanges the copier's own connections run (RFC 4616 PLAIN, RFC 5802/7677 SCRAM-SHA-256/512, RFC 7628
OAUTHBEARER with tokens from an OIDC endpoint, oauth.py; RFC 4752 GSSAPI with Kerberos contexts from
kerberos.py): pure message logic, the connection carries the bytes (SaslAuthenticate). OAUTHBEARER with
unsecured JWTs or AWS MSK IAM tokens is not spoken here yet; :func:`mechanism_for` says so in one line."""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from collections.abc import Mapping

from mirror_core.config.sasl import declared_mechanism as declared
from mirror_core.config.wire_support import OAUTHBEARER_VARIANTS, SASL_MECHANISMS, oauthbearer_problem
from mirror_core.errors import MirrorError

SCRAM_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
#: the mechanisms spoken here: the one description's (config/wire_support.py)
MECHANISMS = SASL_MECHANISMS
#: RFC 4752 security layers (the first octet of the server's offer and of the client's choice)
NO_SECURITY_LAYER = 1
#: Kafka's own floor (ScramMechanism.minIterations): fewer from a server is a downgrade, refused
MIN_ITERATIONS = 4096
#: Kafka's own ceiling (ScramMechanism.maxIterations: kafka-configs refuses to store credentials with more), so no
#: Kafka broker asks more; a server that does would hold a worker in PBKDF2 for as long as it likes
MAX_ITERATIONS = 16384


class SaslError(MirrorError):
    """The exchange failed: wrong credentials, a server that does not prove it knows them, or a mechanism
    not spoken here."""


def speaks_oauthbearer(settings: Mapping[str, str]) -> bool:
    """Whether connections with these settings authenticate with OAUTHBEARER tokens this client gets."""
    return settings.get("security.protocol", "").strip().upper().startswith("SASL") \
        and declared(settings) == "OAUTHBEARER" and oauthbearer_problem(settings) is None


def speaks_gssapi(settings: Mapping[str, str]) -> bool:
    """Whether connections with these settings authenticate with Kerberos (SASL GSSAPI)."""
    return settings.get("security.protocol", "").strip().upper().startswith("SASL") and declared(settings) == "GSSAPI"


def mechanism_for(settings: Mapping[str, str], where: str) -> str:
    """The mechanism of a SASL connection with these librdkafka settings (``where`` names the cluster in the
    line of a mechanism not spoken here)."""
    mechanism = declared(settings)
    if mechanism not in MECHANISMS:
        raise SaslError(f"{where}: sasl.mechanism {mechanism} is not spoken by the batch-copying client yet (it speaks "
                        f"{', '.join(MECHANISMS)}); the records data path takes it (auto chooses it)")
    problem = oauthbearer_problem(settings) if mechanism == "OAUTHBEARER" else None
    if problem is not None:
        raise SaslError(f"{where}: OAUTHBEARER with {problem} is not spoken by the batch-copying client yet (it gets "
                        f"{OAUTHBEARER_VARIANTS['oidc'][1]}); the records data path takes it (auto chooses it)")
    return mechanism


def security_layer_choice(offer: bytes) -> bytes:
    """The client's answer to the broker's (unwrapped) GSSAPI security-layer offer: no security layer, as
    Kafka's own clients choose (TLS, not SASL, protects the bytes), a maximum message size of 0 (RFC 4752:
    none without a layer), and no authorization identity (the broker then takes the authenticated one)."""
    if len(offer) != 4:
        raise SaslError(f"the broker's security-layer offer is {len(offer)} bytes, not 4")
    if not offer[0] & NO_SECURITY_LAYER:
        raise SaslError(f"the broker requires a SASL security layer (offer {offer[0]:#04x}; Kafka's clients use none: "
                        "check the listener's javax.security.sasl.qop)")
    return bytes((NO_SECURITY_LAYER, 0, 0, 0))


def plain(username: str, password: str) -> bytes:
    return b"\0" + username.encode() + b"\0" + password.encode()


def _escape(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


class ScramClient:
    """One SCRAM exchange: :meth:`first`, then :meth:`final` with the server's first message, then
    :meth:`verify` with its final message (the server proves it holds the credentials too)."""

    def __init__(self, mechanism: str, username: str, password: str, nonce: str | None = None) -> None:
        self.hash = SCRAM_HASHES[mechanism]
        self.password = password.encode()
        self.nonce = nonce or secrets.token_urlsafe(24)
        self.first_bare = f"n={_escape(username)},r={self.nonce}"
        self._server_signature = b""

    def first(self) -> bytes:
        return ("n,," + self.first_bare).encode()

    def _hmac(self, key: bytes, msg: bytes) -> bytes:
        return hmac.new(key, msg, self.hash).digest()

    def final(self, server_first: bytes) -> bytes:
        try:
            return self._final(server_first)
        except (ValueError, UnicodeDecodeError) as exc:  # binascii.Error is a ValueError
            raise SaslError(f"SCRAM: the server's first message does not parse: {exc}") from None

    def _final(self, server_first: bytes) -> bytes:
        text = server_first.decode()
        fields = dict(part.split("=", 1) for part in text.split(",") if "=" in part)
        if "e" in fields:
            raise SaslError(f"SCRAM: the server refused the first message: {fields['e']}")
        nonce, salt, iterations = fields.get("r", ""), fields.get("s"), int(fields.get("i", "0"))
        if not nonce.startswith(self.nonce) or nonce == self.nonce or salt is None:
            raise SaslError("SCRAM: the server's first message does not continue this exchange")
        if iterations < MIN_ITERATIONS:
            raise SaslError(f"SCRAM: the server asks for {iterations} iterations, fewer than {MIN_ITERATIONS}")
        if iterations > MAX_ITERATIONS:
            raise SaslError(f"SCRAM: the server asks for {iterations} iterations, more than Kafka's maximum of "
                            f"{MAX_ITERATIONS}")
        salted = hashlib.pbkdf2_hmac(self.hash, self.password, base64.b64decode(salt), iterations)
        client_key = self._hmac(salted, b"Client Key")
        stored_key = hashlib.new(self.hash, client_key).digest()
        without_proof = f"c=biws,r={nonce}"  # biws: base64 of the GS2 header "n,,"
        auth = f"{self.first_bare},{text},{without_proof}".encode()
        proof = bytes(a ^ b for a, b in zip(client_key, self._hmac(stored_key, auth), strict=True))
        self._server_signature = self._hmac(self._hmac(salted, b"Server Key"), auth)
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def verify(self, server_final: bytes) -> None:
        try:
            fields = dict(part.split("=", 1) for part in server_final.decode().split(",") if "=" in part)
            signature = base64.b64decode(fields.get("v", ""))
        except (ValueError, UnicodeDecodeError) as exc:
            raise SaslError(f"SCRAM: the server's final message does not parse: {exc}") from None
        if "e" in fields:
            raise SaslError(f"SCRAM: the server refused the proof: {fields['e']}")
        if not hmac.compare_digest(signature, self._server_signature):
            raise SaslError("SCRAM: the server's signature does not match: it does not hold these credentials")


def extensions(settings: Mapping[str, str]) -> dict[str, str]:
    """``sasl.oauthbearer.extensions`` (``k=v,k2=v2``) as sent in the client's first message."""
    text = settings.get("sasl.oauthbearer.extensions", "")
    return dict(part.split("=", 1) for part in text.split(",") if "=" in part)


def oauthbearer(token: str, extra: Mapping[str, str]) -> bytes:
    """The client's first (and only) OAUTHBEARER message (RFC 7628 with Kafka's SASL extensions, KIP-342)."""
    kvs = "".join(f"{k}={v}\x01" for k, v in extra.items())
    return f"n,,\x01auth=Bearer {token}\x01{kvs}\x01".encode()
