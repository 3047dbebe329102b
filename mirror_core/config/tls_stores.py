"""Java TLS stores (JKS, PKCS12, PEM) turned into the PEM text librdkafka takes in memory.

mm2.properties files name Java key stores: ``ssl.truststore.location`` (type JKS unless
``ssl.truststore.type`` says otherwise, as in Kafka's Java client), ``ssl.keystore.location`` with
``ssl.keystore.password`` and ``ssl.key.password`` for mutual TLS, or PEM given inline
(``ssl.truststore.certificates``, ``ssl.keystore.key`` + ``ssl.keystore.certificate.chain``).
librdkafka reads none of the Java formats, so the stores are read here (JKS with pyjks, PKCS12 with
``cryptography``) and handed over as ``ssl.ca.pem`` / ``ssl.certificate.pem`` / ``ssl.key.pem``:
nothing is written to disk. The decrypted key exists only in this process's memory.

Problems are reported as :class:`SettingError` naming the Java key at fault and what to do; the
message never contains a password or key material.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes
from cryptography.hazmat.primitives.serialization import pkcs12

from mirror_core.config.errors import SettingError

_PEM = serialization.Encoding.PEM
_JKS_MAGIC, _JCEKS_MAGIC = b"\xfe\xed\xfe\xed", b"\xce\xce\xce\xce"
STORE_KEYS = frozenset({
    "ssl.truststore.location", "ssl.truststore.type", "ssl.truststore.password", "ssl.truststore.certificates",
    "ssl.keystore.location", "ssl.keystore.type", "ssl.keystore.password", "ssl.key.password",
    "ssl.keystore.key", "ssl.keystore.certificate.chain",
})




@dataclass
class TlsSettings:
    """librdkafka settings made from the Java store settings, and warnings for the operator."""

    settings: dict[str, str] = field(default_factory=dict)
    #: librdkafka setting -> the Java key it was made from
    sources: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


def _sniff(data: bytes) -> str:
    if data[:4] == _JKS_MAGIC:
        return "JKS"
    if data[:4] == _JCEKS_MAGIC:
        return "JCEKS"
    if b"-----BEGIN" in data[:4096]:
        return "PEM"
    if data[:1] == b"\x30":  # a DER SEQUENCE: PKCS12
        return "PKCS12"
    return "unknown"


def _read(key: str, location: str) -> bytes:
    path = Path(location).expanduser()
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise SettingError(key, f"{location} does not exist") from None
    except PermissionError:
        raise SettingError(key, f"{location} is not readable by this process") from None
    except IsADirectoryError:
        raise SettingError(key, f"{location} is a directory, not a key store") from None


def _store_type(kind: str, declared: str | None, data: bytes, location: str, warn: Callable[[str], None]) -> str:
    """The format to read: the declared one (Kafka's default: JKS) checked against the file itself."""
    key = f"ssl.{kind}.type"
    wanted = (declared or "JKS").strip().upper()
    if wanted not in ("JKS", "PKCS12", "PEM", "JCEKS"):
        raise SettingError(key, f"{wanted}: unknown {kind} type (JKS, PKCS12 or PEM)")
    found = _sniff(data)
    if found == "unknown":
        raise SettingError(f"ssl.{kind}.location", f"{location} is neither a JKS, PKCS12 nor PEM file")
    if found != wanted and {found, wanted} != {"JKS", "PKCS12"}:  # Java's JKS loader reads PKCS12 too
        said = f"{key}={declared}" if declared else f"{key} unset (Kafka's default: JKS)"
        if wanted == "PEM" or found in ("JCEKS",):
            raise SettingError(key, f"{location} is a {found} file, not {wanted} ({said}): set {key}={found}")
        warn(f"{location} is a {found} file while {said}; read as {found}")
    return found


def _pem_certs(certs: list[x509.Certificate]) -> str:
    return "".join(c.public_bytes(_PEM).decode() for c in certs)


def _check_validity(key: str, location: str, cert: x509.Certificate, what: str) -> None:
    now = dt.datetime.now(dt.UTC)
    subject = cert.subject.rfc4514_string()
    if cert.not_valid_after_utc < now:
        raise SettingError(key, f"the {what} in {location} ({subject}) expired on "
                              f"{cert.not_valid_after_utc:%Y-%m-%d %H:%M} UTC: renew it")
    if cert.not_valid_before_utc > now:
        raise SettingError(key, f"the {what} in {location} ({subject}) is not valid before "
                              f"{cert.not_valid_before_utc:%Y-%m-%d %H:%M} UTC (check this host's clock)")


def _wrong_password(key: str, location: str) -> SettingError:
    return SettingError(key, f"wrong password for {location} (or the file is damaged): check {key}")


def _load_pkcs12(data: bytes, password: str | None, key: str, location: str) -> pkcs12.PKCS12KeyAndCertificates:
    try:
        return pkcs12.load_pkcs12(data, password.encode() if password else None)
    except ValueError:
        raise _wrong_password(key, location) from None


def _load_jks(data: bytes, password: str | None, key: str, location: str, decrypt: bool) -> object:
    import jks  # pyjks: only needed for JKS stores

    try:
        return jks.KeyStore.loads(data, password, try_decrypt_keys=decrypt)
    except jks.util.KeystoreSignatureException:
        raise _wrong_password(key, location) from None
    except (jks.util.BadKeystoreFormatException, jks.util.UnsupportedKeystoreVersionException) as exc:
        raise SettingError(f"ssl.{key.split('.')[1]}.location", f"{location} is not a readable JKS store: "
                                                              f"{type(exc).__name__}") from None


def _truststore(java: Mapping[str, str], out: TlsSettings) -> None:
    inline = java.get("ssl.truststore.certificates")
    if inline:
        _trusted_from_pem("ssl.truststore.certificates", inline.encode(), "ssl.truststore.certificates", out)
        return
    location = java.get("ssl.truststore.location")
    if not location:
        return
    key = "ssl.truststore.location"
    data = _read(key, location)
    kind = _store_type("truststore", java.get("ssl.truststore.type"), data, location, out.warnings.append)
    password = java.get("ssl.truststore.password") or None
    certs: list[x509.Certificate]
    if kind == "PEM":  # checked here, read by librdkafka itself from the file (as before)
        _trusted_from_pem(key, data, location, out)
        del out.settings["ssl.ca.pem"], out.sources["ssl.ca.pem"]
        out.settings["ssl.ca.location"], out.sources["ssl.ca.location"] = location, key
        return
    if kind == "PKCS12":
        store = _load_pkcs12(data, password, "ssl.truststore.password", location)
        certs = [c.certificate for c in store.additional_certs] + ([store.cert.certificate] if store.cert else [])
    else:
        jks_store: Any = _load_jks(data, password, "ssl.truststore.password", location, decrypt=False)
        certs = [x509.load_der_x509_certificate(e.cert) for e in jks_store.certs.values()]
        # Java also trusts the certificate of each key entry found in a trust store.
        certs += [x509.load_der_x509_certificate(e.cert_chain[0][1]) for e in jks_store.private_keys.values()
                  if e.cert_chain]
    _trusted(key, location, certs, out)


def _trusted_from_pem(key: str, data: bytes, location: str, out: TlsSettings) -> None:
    try:
        certs = x509.load_pem_x509_certificates(data)
    except ValueError:
        raise SettingError(key, f"{location} holds no readable PEM certificate") from None
    _trusted(key, location, certs, out)


def _trusted(key: str, location: str, certs: list[x509.Certificate], out: TlsSettings) -> None:
    if not certs:
        raise SettingError(key, f"{location} holds no trusted certificate")
    now = dt.datetime.now(dt.UTC)
    valid = [c for c in certs if c.not_valid_after_utc >= now]
    for c in certs:
        if c.not_valid_after_utc < now:
            out.warnings.append(f"{key}: trusted certificate {c.subject.rfc4514_string()} in {location} expired "
                                f"on {c.not_valid_after_utc:%Y-%m-%d}")
    if not valid:
        raise SettingError(key, f"every trusted certificate in {location} has expired: renew the trust store")
    out.settings["ssl.ca.pem"] = _pem_certs(certs)
    out.sources["ssl.ca.pem"] = key


def _keystore(java: Mapping[str, str], out: TlsSettings) -> None:
    inline_key, inline_chain = java.get("ssl.keystore.key"), java.get("ssl.keystore.certificate.chain")
    key_password = java.get("ssl.key.password") or None
    if inline_key or inline_chain:
        if not (inline_key and inline_chain):
            missing = "ssl.keystore.certificate.chain" if inline_key else "ssl.keystore.key"
            raise SettingError(missing, "PEM key stores need both ssl.keystore.key and ssl.keystore.certificate.chain")
        pkey = _pem_key(inline_key.encode(), key_password, "ssl.keystore.key")
        chain = _pem_chain(inline_chain.encode(), "ssl.keystore.certificate.chain", "ssl.keystore.certificate.chain")
        _client_identity("ssl.keystore.certificate.chain", "ssl.keystore.certificate.chain", pkey, chain, out)
        return
    location = java.get("ssl.keystore.location")
    if not location:
        if key_password:  # for librdkafka's own ssl.key.location (same name in both clients)
            out.settings["ssl.key.password"] = key_password
            out.sources["ssl.key.password"] = "ssl.key.password"
        return
    key = "ssl.keystore.location"
    data = _read(key, location)
    kind = _store_type("keystore", java.get("ssl.keystore.type"), data, location, out.warnings.append)
    password = java.get("ssl.keystore.password") or None
    if kind == "PEM":
        pkey = _pem_key(data, key_password, key)
        _client_identity(key, location, pkey, _pem_chain(data, key, location), out)
    elif kind == "PKCS12":
        store = _load_pkcs12(data, password, "ssl.keystore.password", location)
        if key_password is not None and key_password != (password or ""):
            # keytool gives PKCS12 keys the store password (it ignores -keypass): Java opens the key with
            # ssl.key.password and fails when it differs, so do we.
            raise SettingError("ssl.key.password", f"ssl.key.password does not open the key in {location} (a "
                                                   "PKCS12 key store's key has the store's password): check it")
        if store.key is None or store.cert is None:
            raise SettingError(key, f"{location} holds no private key with its certificate")
        chain = [store.cert.certificate] + [c.certificate for c in store.additional_certs]
        _client_identity(key, location, store.key, chain, out)
    else:
        _jks_identity(data, password, key_password, location, out)


def _jks_identity(data: bytes, password: str | None, key_password: str | None, location: str,
                  out: TlsSettings) -> None:
    import jks

    store: Any = _load_jks(data, password, "ssl.keystore.password", location, decrypt=True)
    entries = list(store.private_keys.values())
    if not entries:
        raise SettingError("ssl.keystore.location", f"{location} holds no private key entry")
    if len(entries) > 1:
        out.warnings.append(f"ssl.keystore.location: {location} holds {len(entries)} private keys; using "
                            f"'{entries[0].alias}'")
    entry = entries[0]
    if key_password is not None or not entry.is_decrypted():
        if key_password is None:
            raise SettingError("ssl.key.password", f"the key in {location} has its own password: set ssl.key.password")
        try:
            if entry.is_decrypted():  # opened with the store password: Java uses ssl.key.password and must agree
                if key_password != password:
                    raise jks.util.DecryptionFailureException("key password differs")
            else:
                entry.decrypt(key_password)
        except jks.util.DecryptionFailureException:
            raise _wrong_password("ssl.key.password", location) from None
    pkey = serialization.load_der_private_key(entry.pkey_pkcs8, None)
    chain = [x509.load_der_x509_certificate(der) for _, der in entry.cert_chain]
    _client_identity("ssl.keystore.location", location, pkey, chain, out)


def _pem_key(data: bytes, password: str | None, key: str) -> PrivateKeyTypes:
    blocks = [b for b in data.split(b"-----END") if b"PRIVATE KEY-----" in b]
    if not blocks:
        raise SettingError(key, "holds no PEM private key")
    text = blocks[0][blocks[0].index(b"-----BEGIN"):]
    end = text.split(b"-----BEGIN ", 1)[1].split(b"-----", 1)[0]
    pem = text + b"-----END " + end + b"-----\n"
    try:
        return serialization.load_pem_private_key(pem, password.encode() if password else None)
    except TypeError:
        raise SettingError("ssl.key.password", "the private key is encrypted: set ssl.key.password") from None
    except ValueError:
        raise SettingError("ssl.key.password", "cannot decrypt the private key: check ssl.key.password") from None


def _pem_chain(data: bytes, key: str, location: str) -> list[x509.Certificate]:
    try:
        return x509.load_pem_x509_certificates(data)
    except ValueError:
        raise SettingError(key, f"{location} holds no PEM certificate") from None


def _client_identity(key: str, location: str, pkey: PrivateKeyTypes, chain: list[x509.Certificate],
                     out: TlsSettings) -> None:
    if not chain:
        raise SettingError(key, f"{location} holds a private key without its certificate")
    leaf = chain[0]
    _check_validity(key, location, leaf, "client certificate")
    public = pkey.public_key()
    if public.public_bytes(_PEM, serialization.PublicFormat.SubjectPublicKeyInfo) != \
            leaf.public_key().public_bytes(_PEM, serialization.PublicFormat.SubjectPublicKeyInfo):
        raise SettingError(key, f"the private key in {location} does not match its certificate "
                              f"({leaf.subject.rfc4514_string()}): rebuild the key store from the right pair")
    out.settings["ssl.certificate.pem"] = _pem_certs(chain)
    out.settings["ssl.key.pem"] = pkey.private_bytes(
        _PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()).decode()
    out.sources["ssl.certificate.pem"] = key
    out.sources["ssl.key.pem"] = key


def read_stores(java: Mapping[str, str]) -> TlsSettings:
    """librdkafka TLS settings for the Java store settings in ``java`` (other keys are ignored)."""
    out = TlsSettings()
    _truststore(java, out)
    _keystore(java, out)
    return out
