"""A local cluster with a ``SASL_SSL`` listener (SCRAM-SHA-512 over TLS), certificates made on the spot.

The broker keeps its PLAINTEXT listener (inter-broker traffic and the harness's own admin as the
super user ``User:ANONYMOUS``); the mirror under test talks to the ``SASL_SSL`` listener as a SCRAM
user that is not a super user.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from mirror_core.devcluster.local_cluster import LocalCluster, free_port
from tests.kafka_harness import new_cluster

SCRAM_USER = "mirror"
SCRAM_JAAS = "org.apache.kafka.common.security.scram.ScramLoginModule required"


@dataclass(frozen=True)
class Pki:
    ca_pem: Path  # trust store for clients (PEM)
    keystore_pem: Path  # broker: PKCS#8 private key followed by its certificate chain


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def make_pki(directory: Path) -> Pki:
    """A throw-away CA and a server certificate for 127.0.0.1 / localhost signed by it."""
    directory.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("mirror-core test CA")
    ca_cert = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
               .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=2))
               .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
               .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                            content_commitment=False, key_encipherment=False, data_encipherment=False,
                                            key_agreement=False, encipher_only=False, decipher_only=False),
                              critical=True)
               .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder().subject_name(_name("localhost")).issuer_name(ca_cert.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=2))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                        x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    pem = serialization.Encoding.PEM
    ca_pem = directory / "ca.pem"
    ca_pem.write_bytes(ca_cert.public_bytes(pem))
    keystore = directory / "broker-keystore.pem"
    keystore.write_bytes(key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
                         + cert.public_bytes(pem) + ca_cert.public_bytes(pem))
    return Pki(ca_pem, keystore)


def new_secure_cluster(name: str, root: Path, pki: Pki, password: str) -> LocalCluster:
    """A cluster with PLAINTEXT (harness) and SASL_SSL (SCRAM-SHA-512 user ``mirror``) listeners."""
    cluster = new_cluster(name, root, **{
        "sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": f"{SCRAM_JAAS};",
        "listener.name.sasl_ssl.ssl.keystore.type": "PEM",
        "listener.name.sasl_ssl.ssl.keystore.location": str(pki.keystore_pem),
    })
    cluster.extra_listeners["SASL_SSL"] = free_port()
    cluster.format_args.extend(["--add-scram", f"SCRAM-SHA-512=[name={SCRAM_USER},password={password}]"])
    return cluster


def client_lines(alias: str, ca_pem: Path, password: str, user: str = SCRAM_USER) -> list[str]:
    """mm2.properties lines for a SASL_SSL/SCRAM cluster, in the Java client names MM2 users have."""
    return [
        f"{alias}.security.protocol = SASL_SSL",
        f"{alias}.sasl.mechanism = SCRAM-SHA-512",
        f'{alias}.sasl.jaas.config = {SCRAM_JAAS} username="{user}" password="{password}";',
        f"{alias}.ssl.truststore.type = PEM",
        f"{alias}.ssl.truststore.location = {ca_pem}",
    ]


@dataclass(frozen=True)
class SecureCluster:
    cluster: LocalCluster
    pki: Pki
    password: str

    @property
    def sasl_bootstrap(self) -> str:
        return self.cluster.bootstrap_for("SASL_SSL")

    @property
    def plain_bootstrap(self) -> str:  # the harness's own super-user access
        return self.cluster.bootstrap

    def lines(self, alias: str, password: str | None = None) -> list[str]:
        return client_lines(alias, self.pki.ca_pem, self.password if password is None else password)


@contextmanager
def running_secure_cluster(name: str, root: Path, password: str) -> Iterator[SecureCluster]:
    pki = make_pki(root / f"{name}-pki")
    cluster = new_secure_cluster(name, root, pki, password)
    try:
        cluster.start()
        yield SecureCluster(cluster, pki, password)
    finally:
        cluster.stop()
