"""What the mirror's own Kafka client (:mod:`mirror_core.wire`, the batches data path) speaks, described once.

The loader refuses ``replication.data.path = batches`` for a flow whose clients need something named here as
not honoured, ``auto`` chooses the records path for it (naming the setting), and the wire client takes its SASL
mechanisms from here: a setting is never silently ignored by one client while the other honours it.

* security protocols: :data:`PROTOCOLS` (all of librdkafka's);
* SASL mechanisms: :data:`SASL_MECHANISMS`; OAUTHBEARER only with tokens from an OIDC endpoint
  (:data:`OAUTHBEARER_VARIANTS`: AWS MSK IAM tokens and unsecured JWTs are records only);
* every librdkafka ``ssl.*`` setting (and ``enable.ssl.certificate.verification``, ``https.ca.*``) in
  :data:`TLS_SETTINGS`, as honoured, harmless to ignore or not honoured, with why. A ``ssl.*`` setting not
  listed there (a newer librdkafka's) counts as not honoured.

TLS settings matter only on a TLS connection (``security.protocol`` SSL or SASL_SSL), as for librdkafka.
:func:`wire_problems` names each setting or feature of one client's librdkafka settings that the wire client
cannot honour.
"""

from __future__ import annotations

import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from mirror_core.config.sasl import AWS_MARKER, declared_mechanism

#: how the mirror's own client stands to a setting
Support = Literal["honoured", "ignored", "refused"]
#: the client the description is about, as error lines name it
CLIENT = "the mirror's own client"
#: security.protocol values it speaks (librdkafka's four)
PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
TLS_PROTOCOLS = ("SSL", "SASL_SSL")
#: SASL mechanisms it speaks (mirror_core.wire.sasl, connection.py): OAUTHBEARER only as OAUTHBEARER_VARIANTS says
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER", "GSSAPI")
#: where OAUTHBEARER tokens come from -> (spoken by the mirror's own client, in words)
OAUTHBEARER_VARIANTS: Mapping[str, tuple[bool, str]] = {
    "oidc": (True, "tokens from an OIDC endpoint (sasl.oauthbearer.method = oidc, the client-credentials grant)"),
    "aws-msk-iam": (False, "AWS MSK IAM tokens"),
    "unsecured-jwt": (False, "unsecured JWTs (sasl.oauthbearer.method is not oidc)"),
}


@dataclass(frozen=True)
class TlsSetting:
    """One librdkafka TLS setting and how the mirror's own client (wire/tls.py tls_context) takes it."""

    name: str
    support: Support
    why: str


TLS_SETTINGS: tuple[TlsSetting, ...] = (
    # honoured: tls_context builds the same context librdkafka would
    TlsSetting("ssl.ca.location", "honoured", "trusted CAs from a file or a directory (probe: the system's)"),
    TlsSetting("ssl.ca.pem", "honoured", "trusted CAs in memory (what the loader makes of a Java trust store)"),
    TlsSetting("ssl.certificate.location", "honoured", "the client certificate chain from a file"),
    TlsSetting("ssl.certificate.pem", "honoured", "the client certificate chain in memory (from a Java key store)"),
    TlsSetting("ssl.key.location", "honoured", "the client key from a file"),
    TlsSetting("ssl.key.pem", "honoured", "the client key in memory, loaded through an anonymous in-memory file"),
    TlsSetting("ssl.key.password", "honoured", "the client key's password"),
    TlsSetting("enable.ssl.certificate.verification", "honoured", "false: the broker's certificate is not checked"),
    TlsSetting("ssl.endpoint.identification.algorithm", "honoured",
               "https checks the broker's host name against its certificate, none does not"),
    TlsSetting("ssl.cipher.suites", "honoured",
               "OpenSSL cipher-list syntax, as librdkafka takes it (TLS 1.2 and below, as librdkafka's)"),
    TlsSetting("ssl.crl.location", "honoured",
               "the CRL file loaded and the broker's certificate checked against it (leaf only, as librdkafka)"),
    TlsSetting("ssl.curves.list", "honoured",
               "one curve only: Python's ssl sets a single key-exchange group (a list is not honoured)"),
    TlsSetting("ssl.keystore.location", "honoured",
               "read by the loader (config/tls_stores.py) into ssl.certificate.pem and ssl.key.pem for every client"),
    TlsSetting("ssl.keystore.password", "honoured", "opens ssl.keystore.location at load (config/tls_stores.py)"),
    TlsSetting("ssl.truststore.location", "honoured",
               "read by the loader (config/tls_stores.py) into ssl.ca.pem or ssl.ca.location for every client"),
    TlsSetting("https.ca.location", "honoured", "the OIDC token endpoint's trusted CAs (wire/oauth.py)"),
    TlsSetting("https.ca.pem", "honoured", "the OIDC token endpoint's trusted CAs in memory (wire/oauth.py)"),
    # harmless to ignore
    TlsSetting("ssl.ca.certificate.stores", "ignored",
               "Windows certificate stores: librdkafka reads them on Windows only, and the mirror runs on Linux"),
    # not honoured: a flow that sets one is refused on batches and copied on records by auto
    TlsSetting("ssl.sigalgs.list", "refused", "Python's ssl cannot restrict the signature algorithms"),
    TlsSetting("ssl.providers", "refused", "Python's ssl loads no OpenSSL 3 providers of its own"),
    TlsSetting("ssl.engine.location", "refused", "Python's ssl loads no OpenSSL engine (keys in an HSM)"),
    TlsSetting("ssl.engine.id", "refused", "Python's ssl loads no OpenSSL engine (keys in an HSM)"),
    TlsSetting("ssl_engine_callback_data", "refused", "an OpenSSL engine's C data: Python's ssl loads no engine"),
    TlsSetting("ssl.certificate.verify_cb", "refused", "a C callback of librdkafka's API, not available to the wire"),
    TlsSetting("ssl_key", "refused", "set through librdkafka's C API (an object), not read by the wire client"),
    TlsSetting("ssl_certificate", "refused", "set through librdkafka's C API (an object), not read by the wire client"),
    TlsSetting("ssl_ca", "refused", "set through librdkafka's C API (an object), not read by the wire client"),
)
TLS_BY_NAME: Mapping[str, TlsSetting] = {s.name: s for s in TLS_SETTINGS}
#: names of the settings :func:`wire_problems` looks at as TLS settings
_TLS_PREFIXES = ("ssl.", "ssl_", "https.ca.")
_CURVE_SEPARATORS = re.compile(r"[:,]")
#: NIST names librdkafka (OpenSSL's curves list) takes for what Python's ssl knows by OpenSSL's short name
NIST_CURVES = {"P-256": "prime256v1", "P-384": "secp384r1", "P-521": "secp521r1"}


def oauthbearer_variant(settings: Mapping[str, str]) -> str:
    """Where a client with these librdkafka OAUTHBEARER settings gets its tokens (a key of OAUTHBEARER_VARIANTS)."""
    if any(k.startswith(AWS_MARKER) for k in settings):
        return "aws-msk-iam"
    if settings.get("sasl.oauthbearer.method", "default").strip().lower() != "oidc":
        return "unsecured-jwt"
    return "oidc"


def oauthbearer_problem(settings: Mapping[str, str]) -> str | None:
    """Why the mirror's own client cannot get tokens with these librdkafka OAUTHBEARER settings (None: it can;
    it asks an OIDC endpoint, mirror_core.wire.oauth)."""
    spoken, words = OAUTHBEARER_VARIANTS[oauthbearer_variant(settings)]
    if not spoken:
        return words
    missing = [k for k in ("sasl.oauthbearer.token.endpoint.url", "sasl.oauthbearer.client.id",
                           "sasl.oauthbearer.client.secret") if not settings.get(k)]
    return f"oidc without {' and '.join(missing)}" if missing else None


def login_problem(settings: Mapping[str, str]) -> str | None:
    """How a client with these librdkafka settings logs in, when the mirror's own client cannot
    ("SASL AWS_MSK_IAM", "OAUTHBEARER and unsecured JWTs ..."); None when it can."""
    if "SASL" not in settings.get("security.protocol", "PLAINTEXT").upper():
        return None
    mechanism = declared_mechanism(settings)
    if mechanism not in SASL_MECHANISMS:
        return f"SASL {mechanism}"
    problem = oauthbearer_problem(settings) if mechanism == "OAUTHBEARER" else None
    return None if problem is None else f"OAUTHBEARER and {problem}"


def curve_name(value: str) -> str | None:
    """The one curve ``ssl.curves.list`` names, as Python's ssl knows it; None for a list of several."""
    curves = [c.strip() for c in _CURVE_SEPARATORS.split(value) if c.strip()]
    if len(curves) != 1:
        return None
    return NIST_CURVES.get(curves[0], curves[0])


def _tls_value_problem(key: str, value: str) -> str | None:
    """Why Python's ssl cannot take this value of a setting it honours (None: it can)."""
    if key == "ssl.curves.list" and value.strip():
        curve = curve_name(value)
        if curve is None:
            return (f"sets ssl.curves.list to a list ({value.strip()}), which {CLIENT} does not honour "
                    "(Python's ssl sets one curve): name one curve")
        try:
            ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).set_ecdh_curve(curve)
        except (ValueError, ssl.SSLError):
            return f"sets ssl.curves.list = {value.strip()}, a curve Python's ssl does not know: name another"
    if key == "ssl.cipher.suites" and value.strip():
        try:
            ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).set_ciphers(value.strip())
        except ssl.SSLError:
            return (f"sets ssl.cipher.suites = {value.strip()}, which selects no cipher Python's ssl knows "
                    "(OpenSSL cipher-list syntax)")
    return None


def tls_problems(settings: Mapping[str, str]) -> list[str]:
    """The TLS settings of one client that the mirror's own client would not honour (on a TLS connection)."""
    if settings.get("security.protocol", "PLAINTEXT").strip().upper() not in TLS_PROTOCOLS:
        return []  # librdkafka reads no ssl.* setting without TLS either
    problems: list[str] = []
    for key, value in settings.items():
        if not key.startswith(_TLS_PREFIXES):
            continue
        known = TLS_BY_NAME.get(key)
        if known is None:
            problems.append(f"sets {key}, which {CLIENT} does not know")
        elif known.support == "refused":
            problems.append(f"sets {key}, which {CLIENT} does not honour ({known.why})")
        elif (problem := _tls_value_problem(key, value)) is not None:
            problems.append(problem)
    return problems


def wire_problems(settings: Mapping[str, str]) -> list[str]:
    """Each setting or feature of one client's librdkafka settings that the mirror's own client cannot honour,
    as the rest of a line after "cluster <alias> " ("sets ssl.sigalgs.list, which ... does not honour (...)",
    "logs in with OAUTHBEARER and AWS MSK IAM tokens, which ... does not speak"); empty when it honours them all."""
    problems: list[str] = []
    protocol = settings.get("security.protocol", "PLAINTEXT").strip().upper()
    if protocol not in PROTOCOLS:
        problems.append(f"uses security.protocol {protocol}, which {CLIENT} does not speak")
    login = login_problem(settings)
    if login is not None:
        problems.append(f"logs in with {login}, which {CLIENT} does not speak (it speaks "
                        f"{', '.join(SASL_MECHANISMS)}; OAUTHBEARER with {OAUTHBEARER_VARIANTS['oidc'][1]})")
    return problems + tls_problems(settings)
