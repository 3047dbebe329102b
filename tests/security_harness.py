"""A local cluster with a ``SASL_SSL`` listener (SCRAM-SHA-512 over TLS), certificates made on the spot.

The broker keeps its PLAINTEXT listener (inter-broker traffic and the harness's own admin as the
super user ``User:ANONYMOUS``); the mirror under test talks to the ``SASL_SSL`` listener as a SCRAM
user that is not a super user. On request the broker also gets an ``SSL`` listener that requires a
client certificate (mutual TLS).

Clients get their stores the way Java users have them: JKS trust stores and PKCS12 / JKS key stores
written by the JDK's own ``keytool`` (not by a Python library that might share the reader's bugs).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from mirror_core.devcluster.kafka_dist import java_executable
from mirror_core.devcluster.local_cluster import LocalCluster, free_port
from tests.kafka_harness import AUTHORIZER, REPO, MirrorProcess, mirror_env, new_cluster

SCRAM_USER = "mirror"
SCRAM_JAAS = "org.apache.kafka.common.security.scram.ScramLoginModule required"
# No ACL, no access; the harness's own PLAINTEXT clients (and the broker itself) stay super users.
STRICT_AUTHORIZER = {**AUTHORIZER, "allow.everyone.if.no.acl.found": "false"}


@dataclass(frozen=True)
class Pki:
    ca_pem: Path  # trust store for clients (PEM)
    keystore_pem: Path  # broker: PKCS#8 private key followed by its certificate chain
    ca_key_pem: Path | None = None  # signs client certificates (make_client_cert)


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
    ca_key_pem = directory / "ca-key.pem"
    ca_key_pem.write_bytes(ca_key.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                                                serialization.NoEncryption()))
    return Pki(ca_pem, keystore, ca_key_pem)


@dataclass(frozen=True)
class ClientCert:
    cert_pem: Path  # the client certificate alone
    key_pem: Path  # its private key, unencrypted PKCS#8
    chain_pem: Path  # the certificate followed by the CA's: what a key store entry holds


def make_client_cert(pki: Pki, directory: Path, cn: str = "mirror-client", expired: bool = False) -> ClientCert:
    """A TLS client certificate (clientAuth) signed by the PKI's CA; ``expired``: its validity ended yesterday."""
    assert pki.ca_key_pem is not None, "this Pki has no CA key (made by make_pki?)"
    directory.mkdir(parents=True, exist_ok=True)
    ca_cert = x509.load_pem_x509_certificate(pki.ca_pem.read_bytes())
    ca_key = serialization.load_pem_private_key(pki.ca_key_pem.read_bytes(), None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    now = dt.datetime.now(dt.UTC)
    start, end = (now - dt.timedelta(days=10), now - dt.timedelta(days=1)) if expired else (
        now - dt.timedelta(minutes=5), now + dt.timedelta(days=2))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(ca_cert.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(start).not_valid_after(end)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    pem = serialization.Encoding.PEM
    stem = directory / cn
    out = ClientCert(stem.with_suffix(".pem"), stem.with_suffix(".key.pem"), stem.with_suffix(".chain.pem"))
    out.cert_pem.write_bytes(cert.public_bytes(pem))
    out.key_pem.write_bytes(key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    out.chain_pem.write_bytes(cert.public_bytes(pem) + ca_cert.public_bytes(pem))
    return out


def make_other_ca(path: Path, cn: str, use_rsa: bool = False) -> Path:
    """A self-signed CA unrelated to the PKI (PEM): real trust stores hold many CAs, not just the one needed."""
    now = dt.datetime.now(dt.UTC)
    key: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey = (
        rsa.generate_private_key(65537, 2048) if use_rsa else ec.generate_private_key(ec.SECP384R1()))
    cert = (x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(_name(cn))
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return path


def keytool(*args: str) -> str:
    """Run the JDK's keytool (the one next to the java that runs the brokers); its output, or an error with it."""
    exe = Path(java_executable()).resolve().parent / "keytool"
    proc = subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=60, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"keytool {args[0]} failed ({proc.returncode}): {proc.stdout}{proc.stderr}")
    return proc.stdout + proc.stderr


def jks_truststore(path: Path, password: str, *ca_pems: Path) -> Path:
    """A JKS trust store holding each certificate as a trusted entry (alias ``ca<i>``), made by keytool."""
    for i, ca in enumerate(ca_pems):
        keytool("-importcert", "-storetype", "JKS", "-noprompt", "-alias", f"ca{i}", "-file", str(ca),
                "-keystore", str(path), "-storepass", password)
    return path


def keystore(client: ClientCert, path: Path, store_type: str, store_password: str,
             key_password: str | None = None, legacy: bool = False) -> Path:
    """The client's key and chain as a PKCS12 or JKS key store (alias ``client``), made by keytool.

    cryptography writes a PKCS12 and keytool imports it into the store Java users would have. keytool
    cannot give a PKCS12 entry a key password of its own (it warns and uses the store password), so a
    different ``key_password`` is only accepted for JKS. ``legacy``: the PKCS12 algorithms Java 8 used
    (RC2-40 for certificates, 3DES for the key, SHA-1 MAC), which OpenSSL 3 reads only with its legacy provider.
    """
    store_type = store_type.upper()
    key_password = store_password if key_password is None else key_password
    if store_type == "PKCS12" and key_password != store_password:
        raise ValueError("keytool writes PKCS12 key entries with the store password only")
    key = serialization.load_pem_private_key(client.key_pem.read_bytes(), None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    leaf, *cas = x509.load_pem_x509_certificates(client.chain_pem.read_bytes())
    with tempfile.TemporaryDirectory() as work:
        source = Path(work) / "source.p12"
        source.write_bytes(pkcs12.serialize_key_and_certificates(
            b"client", key, leaf, cas, serialization.BestAvailableEncryption(b"transient")))
        path.unlink(missing_ok=True)
        keytool(*(["-J-Dkeystore.pkcs12.legacy"] if legacy else []),
                "-importkeystore", "-noprompt", "-srckeystore", str(source), "-srcstoretype", "PKCS12",
                "-srcstorepass", "transient", "-srcalias", "client", "-destalias", "client",
                "-destkeystore", str(path), "-deststoretype", store_type, "-deststorepass", store_password,
                *(["-destkeypass", key_password] if store_type == "JKS" else []))
    return path


# keytool, cryptography and openssl all refuse to pair a key with a certificate it does not belong to;
# Java's KeyStore API does not check, so a few lines of it write such a store.
_MISMATCHED_STORE_JAVA = """
import java.nio.file.*; import java.security.*; import java.security.cert.Certificate;
import java.security.cert.CertificateFactory; import java.security.spec.PKCS8EncodedKeySpec;
public class MismatchedStore {
    public static void main(String[] a) throws Exception {
        String pem = Files.readString(Path.of(a[3])).replaceAll("-----[A-Z ]+-----", "");
        PrivateKey key = KeyFactory.getInstance("EC").generatePrivate(
            new PKCS8EncodedKeySpec(java.util.Base64.getMimeDecoder().decode(pem)));
        Certificate[] chain = CertificateFactory.getInstance("X.509")
            .generateCertificates(Files.newInputStream(Path.of(a[4]))).toArray(new Certificate[0]);
        KeyStore ks = KeyStore.getInstance(a[1]);
        ks.load(null, null);
        ks.setKeyEntry("client", key, a[2].toCharArray(), chain);
        try (var out = Files.newOutputStream(Path.of(a[0]))) { ks.store(out, a[2].toCharArray()); }
    }
}
"""


def mismatched_keystore(client: ClientCert, other: ClientCert, path: Path, store_type: str, password: str) -> Path:
    """A key store whose entry pairs ``other``'s private key with ``client``'s certificate chain."""
    with tempfile.TemporaryDirectory() as work:
        source = Path(work) / "MismatchedStore.java"
        source.write_text(_MISMATCHED_STORE_JAVA)
        proc = subprocess.run([java_executable(), str(source), str(path), store_type.upper(), password,
                               str(other.key_pem), str(client.chain_pem)],
                              capture_output=True, text=True, timeout=120, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"writing a mismatched key store failed: {proc.stdout}{proc.stderr}")
    return path


def new_secure_cluster(name: str, root: Path, pki: Pki, password: str, mtls: bool = False,
                       strict_acls: bool = False, users: dict[str, str] | None = None,
                       sasl_client_auth: bool = False) -> LocalCluster:
    """A cluster with PLAINTEXT (harness) and SASL_SSL (SCRAM-SHA-512 user ``mirror``) listeners; with
    ``mtls`` also an ``SSL`` listener that requires a client certificate signed by the PKI's CA.

    ``strict_acls``: what production runs — a principal without a matching ACL is refused (only the
    harness's PLAINTEXT ``User:ANONYMOUS`` stays a super user). ``users``: more SCRAM users (name ->
    password). ``sasl_client_auth``: the SASL_SSL listener also requires a client certificate (SASL
    names the principal; the certificate is a second factor)."""
    props = {
        "sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": f"{SCRAM_JAAS};",
        "listener.name.sasl_ssl.ssl.keystore.type": "PEM",
        "listener.name.sasl_ssl.ssl.keystore.location": str(pki.keystore_pem),
    }
    if mtls:
        props.update({
            "listener.name.ssl.ssl.client.auth": "required",
            "listener.name.ssl.ssl.keystore.type": "PEM",
            "listener.name.ssl.ssl.keystore.location": str(pki.keystore_pem),
            "listener.name.ssl.ssl.truststore.type": "PEM",
            "listener.name.ssl.ssl.truststore.location": str(pki.ca_pem),
        })
    if sasl_client_auth:
        props.update({"listener.name.sasl_ssl.ssl.client.auth": "required",
                      "listener.name.sasl_ssl.ssl.truststore.type": "PEM",
                      "listener.name.sasl_ssl.ssl.truststore.location": str(pki.ca_pem)})
    if strict_acls:
        props.update(STRICT_AUTHORIZER)
    cluster = new_cluster(name, root, **props)
    cluster.extra_listeners["SASL_SSL"] = free_port()
    if mtls:
        cluster.extra_listeners["SSL"] = free_port()
    for user, pw in {SCRAM_USER: password, **(users or {})}.items():
        cluster.format_args.extend(["--add-scram", f"SCRAM-SHA-512=[name={user},password={pw}]"])
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
    def ssl_bootstrap(self) -> str:  # mutual TLS (running_secure_cluster(..., mtls=True) only)
        return self.cluster.bootstrap_for("SSL")

    @property
    def plain_bootstrap(self) -> str:  # the harness's own super-user access
        return self.cluster.bootstrap

    def lines(self, alias: str, password: str | None = None) -> list[str]:
        return client_lines(alias, self.pki.ca_pem, self.password if password is None else password)


@contextmanager
def running_secure_cluster(name: str, root: Path, password: str, pki: Pki | None = None,
                           mtls: bool = False, strict_acls: bool = False, users: dict[str, str] | None = None,
                           sasl_client_auth: bool = False) -> Iterator[SecureCluster]:
    pki = pki or make_pki(root / f"{name}-pki")
    cluster = new_secure_cluster(name, root, pki, password, mtls, strict_acls, users, sasl_client_auth)
    try:
        cluster.start()
        yield SecureCluster(cluster, pki, password)
    finally:
        cluster.stop()


def cli(*args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mirror_core", *args], capture_output=True, text=True,
                          cwd=REPO, timeout=timeout, env=dict(os.environ))


class DebugMirror(MirrorProcess):
    """``mirror-core --log-level DEBUG run``: the most talkative the service gets."""

    def start(self) -> DebugMirror:
        log = open(self.log_path, "ab")  # noqa: SIM115 - owned by the child
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "mirror_core", "--log-level", "DEBUG", "run", "--config", str(self.config),
             "--metrics-port", str(self.port)], stdout=log, stderr=subprocess.STDOUT,
            env=mirror_env(), cwd=REPO)
        log.close()
        return self
