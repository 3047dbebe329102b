"""Throw-away TLS material for unit tests: a CA, a client identity, and the stores Java users have
(PKCS12 written by ``cryptography``, JKS written by pyjks). No Java needed."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import NameOID

_PEM = serialization.Encoding.PEM


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def make_cert(cn: str, key: ec.EllipticCurvePrivateKey, issuer: x509.Certificate | None,
              issuer_key: ec.EllipticCurvePrivateKey, days: float = 2, ca: bool = False) -> x509.Certificate:
    now = dt.datetime.now(dt.UTC)
    start, end = (now - dt.timedelta(days=3), now - dt.timedelta(days=1)) if days < 0 else \
        (now - dt.timedelta(minutes=5), now + dt.timedelta(days=days))
    builder = (x509.CertificateBuilder().subject_name(_name(cn))
               .issuer_name(issuer.subject if issuer else _name(cn)).public_key(key.public_key())
               .serial_number(x509.random_serial_number()).not_valid_before(start).not_valid_after(end))
    if ca:
        builder = builder.add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
    return builder.sign(issuer_key, hashes.SHA256())


class Pki:
    def __init__(self) -> None:
        self.ca_key = ec.generate_private_key(ec.SECP256R1())
        self.ca = make_cert("unit CA", self.ca_key, None, self.ca_key, ca=True)
        self.key = ec.generate_private_key(ec.SECP256R1())
        self.cert = make_cert("mirror-client", self.key, self.ca, self.ca_key)

    @property
    def ca_pem(self) -> str:
        return self.ca.public_bytes(_PEM).decode()

    def pkcs12(self, path: Path, password: str, key: ec.EllipticCurvePrivateKey | None = None,
               cert: x509.Certificate | None = None) -> Path:
        data = pkcs12.serialize_key_and_certificates(
            b"client", key or self.key, cert or self.cert, [self.ca],
            serialization.BestAvailableEncryption(password.encode()))
        path.write_bytes(data)
        return path

    def pkcs12_truststore(self, path: Path, password: str) -> Path:
        data = pkcs12.serialize_key_and_certificates(None, None, None, [self.ca],
                                                     serialization.BestAvailableEncryption(password.encode()))
        path.write_bytes(data)
        return path

    def jks_truststore(self, path: Path, password: str) -> Path:
        import jks

        entry = jks.TrustedCertEntry.new("ca", self.ca.public_bytes(serialization.Encoding.DER))
        path.write_bytes(jks.KeyStore.new("jks", [entry]).saves(password))
        return path

    def jks_keystore(self, path: Path, password: str, key_password: str | None = None,
                     key: ec.EllipticCurvePrivateKey | None = None) -> Path:
        """``key``: another key than the certificate's (keytool would refuse; a damaged store has it)."""
        import jks

        der_key = (key or self.key).private_bytes(serialization.Encoding.DER, serialization.PrivateFormat.PKCS8,
                                         serialization.NoEncryption())
        chain = [self.cert.public_bytes(serialization.Encoding.DER), self.ca.public_bytes(serialization.Encoding.DER)]
        entry = jks.PrivateKeyEntry.new("client", chain, der_key, "pkcs8")
        entry.encrypt(key_password or password)
        path.write_bytes(jks.KeyStore.new("jks", [entry]).saves(password))
        return path


def make_ca_pem() -> str:
    return Pki().ca_pem
