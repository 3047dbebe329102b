"""TLS stores as Java users have them: a JKS trust store (no ``ssl.truststore.type``, Kafka's default
is JKS) and PKCS12 / JKS key stores for mutual TLS, written by the JDK's ``keytool``, against a real
broker with a SASL_SSL listener and an SSL listener that requires a client certificate.

Each main form replicates records exactly through a ``mirror-core run`` (further forms Java accepts are
checked by connecting); each broken one is refused by ``mirror-core check`` with one line naming the
file, line and key, never showing a password. Every form here was first tried with Kafka's Java client.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from mirror_core.config.loader import load_config
from tests.integration.conftest import flow_lines
from tests.kafka_harness import (
    MirrorProcess,
    create_topic,
    produce_sequence,
    read_all,
    wait_until,
    write_config,
)
from tests.security_harness import (
    SCRAM_JAAS,
    SCRAM_USER,
    ClientCert,
    DebugMirror,
    Pki,
    SecureCluster,
    cli,
    jks_truststore,
    keystore,
    make_client_cert,
    make_other_ca,
    make_pki,
    mismatched_keystore,
    running_secure_cluster,
)

# Distinctive values: each is grepped for in every output where it must not be.
SCRAM_PASSWORD = "Jq3-scram-S3CRET-pw-5180"
TRUST_PASSWORD = "Tr7-trust-S3CRET-pw-2264"
STORE_PASSWORD = "Ks5-store-S3CRET-pw-9937"
KEY_PASSWORD = "Kp2-key-S3CRET-pw-4051"  # JKS key entries only: keytool gives PKCS12 keys the store password
WRONG_PASSWORD = "Wx9-wrong-S3CRET-pw-6613"
SECRETS = (SCRAM_PASSWORD, TRUST_PASSWORD, STORE_PASSWORD, KEY_PASSWORD, WRONG_PASSWORD)
RECORDS = 30


@dataclass(frozen=True)
class Stores:
    pki: Pki
    client: ClientCert
    truststore: Path  # JKS: the test CA between two unrelated CAs, as real trust stores hold many
    truststore_no_password: Path  # JKS, read without a password (Java then skips the integrity check)
    pkcs12: Path
    pkcs12_legacy: Path  # the format Java 8 wrote (RC2-40 / 3DES, SHA-1 MAC): still in production
    jks: Path  # key password KEY_PASSWORD, not the store password
    expired: Path  # PKCS12, client certificate expired yesterday
    mismatched: Path  # PKCS12, private key of another certificate


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> Stores:
    d = tmp_path_factory.mktemp("tls-stores")
    pki = make_pki(d / "pki")
    client = make_client_cert(pki, d / "client")
    others = (make_other_ca(d / "other-ec-ca.pem", "Other EC CA"),
              make_other_ca(d / "other-rsa-ca.pem", "Other RSA CA", use_rsa=True))
    return Stores(
        pki=pki,
        client=client,
        truststore=jks_truststore(d / "truststore.jks", TRUST_PASSWORD, others[0], pki.ca_pem, others[1]),
        truststore_no_password=jks_truststore(d / "truststore-nopw.jks", TRUST_PASSWORD, pki.ca_pem),
        pkcs12=keystore(client, d / "client.p12", "PKCS12", STORE_PASSWORD),
        pkcs12_legacy=keystore(client, d / "client-legacy.p12", "PKCS12", STORE_PASSWORD, legacy=True),
        jks=keystore(client, d / "client.jks", "JKS", STORE_PASSWORD, KEY_PASSWORD),
        expired=keystore(make_client_cert(pki, d / "expired", expired=True), d / "expired.p12", "PKCS12",
                         STORE_PASSWORD),
        mismatched=mismatched_keystore(client, make_client_cert(pki, d / "other", cn="other-client"),
                                       d / "mismatched.p12", "PKCS12", STORE_PASSWORD),
    )


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory, stores: Stores) -> Iterator[SecureCluster]:
    with running_secure_cluster("dc1t", tmp_path_factory.mktemp("kafka-stores"), SCRAM_PASSWORD, pki=stores.pki,
                                mtls=True) as sc:
        yield sc


def sasl_lines(alias: str, truststore: Path, trust_password: str | None = TRUST_PASSWORD) -> list[str]:
    """SASL_SSL/SCRAM with a JKS trust store, as most production files have it: no ssl.truststore.type,
    single quotes in the JAAS line (valid for Java)."""
    return [
        f"{alias}.security.protocol = SASL_SSL",
        f"{alias}.sasl.mechanism = SCRAM-SHA-512",
        f"{alias}.sasl.jaas.config = {SCRAM_JAAS} username='{SCRAM_USER}' password='{SCRAM_PASSWORD}';",
        f"{alias}.ssl.truststore.location = {truststore}",
        *([f"{alias}.ssl.truststore.password = {trust_password}"] if trust_password is not None else []),
    ]


def mtls_lines(alias: str, stores: Stores, location: Path, store_type: str | None, store_password: str,
               key_password: str | None) -> list[str]:
    """Mutual TLS with a key store (type line omitted when ``store_type`` is None) and the JKS trust store."""
    return [
        f"{alias}.security.protocol = SSL",
        f"{alias}.ssl.truststore.location = {stores.truststore}",
        f"{alias}.ssl.truststore.password = {TRUST_PASSWORD}",
        *([f"{alias}.ssl.keystore.type = {store_type}"] if store_type else []),
        f"{alias}.ssl.keystore.location = {location}",
        f"{alias}.ssl.keystore.password = {store_password}",
        *([f"{alias}.ssl.key.password = {key_password}"] if key_password is not None else []),
    ]


def assert_no_secrets(where: str, text: str) -> None:
    for secret in SECRETS:
        assert secret not in text, f"a password appears in {where}"
    assert "PRIVATE KEY" not in text, f"key material appears in {where}"


def replicate_exactly(secure: SecureCluster, dc2: str, name: str, tmp_path: Path, mirrors: list[MirrorProcess],
                      alias: str, bootstrap: str, lines: list[str]) -> None:
    """A mirror (DEBUG logging: the most talkative) on ``lines`` copies a 2-partition topic record for record."""
    topic = f"{name}.orders"
    create_topic(secure.plain_bootstrap, topic, 2)
    produce_sequence(secure.plain_bootstrap, topic, 2, RECORDS)
    config = write_config(tmp_path / "mm2.properties", {alias: bootstrap, "dc2": dc2},
                          lines + flow_lines(name, flow=f"{alias}->dc2"))
    check = cli("check", "--config", str(config))
    assert check.returncode == 0, check.stderr
    m = DebugMirror(config, tmp_path, alias).start()
    mirrors.append(m)

    def copied() -> bool:
        assert m.alive(), f"the mirror exited:\n{m.log()[-3000:]}"
        return len(read_all(dc2, f"{alias}.{topic}", timeout=10)) == RECORDS

    wait_until(copied, 60, interval=0.5, what=f"{RECORDS} records replicated")
    source, target = read_all(secure.plain_bootstrap, topic), read_all(dc2, f"{alias}.{topic}")
    assert [(r.partition, r.key, r.value, r.headers, r.timestamp) for r in target] == [
        (r.partition, r.key, r.value, r.headers, r.timestamp) for r in source]
    assert m.stop() == 0
    log = m.log()
    assert "Traceback" not in log
    assert_no_secrets("the mirror log (DEBUG)", log)
    assert_no_secrets("check output", check.stdout + check.stderr)


def line_of(path: Path, key: str) -> int | None:
    lines = path.read_text().splitlines()
    return next((i for i, line in enumerate(lines, 1) if line.split("=", 1)[0].strip() == key), None)


def test_mtls_listener_refuses_a_client_without_a_certificate(secure: SecureCluster, stores: Stores) -> None:
    base = {"bootstrap.servers": secure.ssl_bootstrap, "security.protocol": "SSL",
            "ssl.ca.location": str(stores.pki.ca_pem), "log_level": "0"}
    errors: list[str] = []
    anonymous = AdminClient({**base, "error_cb": lambda e: errors.append(e.str())})
    with pytest.raises(KafkaException):
        anonymous.list_topics(timeout=8)
    anonymous.poll(1)  # serves error_cb
    # The broker's TLS alert for a missing client certificate (TLS 1.3 servers may say "certificate required").
    assert any(a in e for e in errors for a in ("bad certificate", "certificate required")), errors
    # The same client with the certificate gets in: what was refused was the missing certificate.
    named = AdminClient({**base, "ssl.certificate.location": str(stores.client.cert_pem),
                         "ssl.key.location": str(stores.client.key_pem)})
    assert named.list_topics(timeout=15).brokers


def test_sasl_ssl_with_a_jks_truststore_and_no_type(secure: SecureCluster, stores: Stores, dc2: str, name: str,
                                                    tmp_path: Path, mirrors: list[MirrorProcess]) -> None:
    replicate_exactly(secure, dc2, name, tmp_path, mirrors, "dc1j", secure.sasl_bootstrap,
                      sasl_lines("dc1j", stores.truststore))


MTLS: dict[str, Callable[[Stores], list[str]]] = {
    # librdkafka's own names for PEM files pass through unchanged: the broker side without any translation.
    "librdkafka PEM files": lambda s: [
        "dc1m.security.protocol = SSL",
        f"dc1m.ssl.ca.location = {s.pki.ca_pem}",
        f"dc1m.ssl.certificate.location = {s.client.cert_pem}",
        f"dc1m.ssl.key.location = {s.client.key_pem}",
    ],
    "PKCS12": lambda s: mtls_lines("dc1m", s, s.pkcs12, "PKCS12", STORE_PASSWORD, STORE_PASSWORD),
    "JKS": lambda s: mtls_lines("dc1m", s, s.jks, "JKS", STORE_PASSWORD, KEY_PASSWORD),
    "JKS, no type": lambda s: mtls_lines("dc1m", s, s.jks, None, STORE_PASSWORD, KEY_PASSWORD),
}


@pytest.mark.parametrize("form", list(MTLS))
def test_mutual_tls_with_a_java_keystore(secure: SecureCluster, stores: Stores, dc2: str, name: str, tmp_path: Path,
                                         mirrors: list[MirrorProcess], form: str) -> None:
    replicate_exactly(secure, dc2, name, tmp_path, mirrors, "dc1m", secure.ssl_bootstrap, MTLS[form](stores))


# More forms Java clients accept, checked with the clients the loaded configuration makes (no mirror run).
CONNECT: dict[str, Callable[[Stores], list[str]]] = {
    "PKCS12 in Java 8's format": lambda s: mtls_lines("dc1m", s, s.pkcs12_legacy, "PKCS12", STORE_PASSWORD,
                                                      STORE_PASSWORD),
    # Kafka's default type is JKS, and Java's JKS loader reads PKCS12 files too.
    "PKCS12, no type": lambda s: mtls_lines("dc1m", s, s.pkcs12, None, STORE_PASSWORD, STORE_PASSWORD),
    # Java uses the store password for the key when ssl.key.password is not set.
    "PKCS12, no key password": lambda s: mtls_lines("dc1m", s, s.pkcs12, "PKCS12", STORE_PASSWORD, None),
    # Java reads a trust store without a password, skipping only its integrity check.
    "JKS truststore, no password": lambda s: sasl_lines("dc1m", s.truststore_no_password, None),
}


@pytest.mark.parametrize("form", list(CONNECT))
def test_more_java_forms_connect(secure: SecureCluster, stores: Stores, dc2: str, name: str, tmp_path: Path,
                                 form: str) -> None:
    lines = CONNECT[form](stores)
    bootstrap = secure.cluster.bootstrap_for(lines[0].split("=")[1].strip())  # listener name = protocol
    config = write_config(tmp_path / "mm2.properties", {"dc1m": bootstrap, "dc2": dc2},
                          lines + flow_lines(name, flow="dc1m->dc2"))
    settings = load_config(config).cluster("dc1m").client_settings("admin")
    assert AdminClient({**settings, "log_level": "0"}).list_topics(timeout=15).brokers


# Each refused by Kafka's Java client too (checked against a 4.3.1 client: "keystore password was incorrect",
# "Get Key failed", "Cannot recover key"), except the last two, which Java only finds in the handshake.
BROKEN: dict[str, tuple[Callable[[Stores, Path], list[str]], str]] = {
    "wrong truststore password": (
        lambda s, d: sasl_lines("dc1j", s.truststore, WRONG_PASSWORD), "dc1j.ssl.truststore.password"),
    "missing truststore": (
        lambda s, d: sasl_lines("dc1j", d / "no-such-truststore.jks"), "dc1j.ssl.truststore.location"),
    # The key password is right: it must not stand in for the store password (Java checks the store's MAC).
    "wrong keystore password (PKCS12)": (
        lambda s, d: mtls_lines("dc1m", s, s.pkcs12, "PKCS12", WRONG_PASSWORD, STORE_PASSWORD),
        "dc1m.ssl.keystore.password"),
    "wrong key password (PKCS12)": (
        lambda s, d: mtls_lines("dc1m", s, s.pkcs12, "PKCS12", STORE_PASSWORD, WRONG_PASSWORD),
        "dc1m.ssl.key.password"),
    "wrong keystore password (JKS)": (
        lambda s, d: mtls_lines("dc1m", s, s.jks, "JKS", WRONG_PASSWORD, KEY_PASSWORD), "dc1m.ssl.keystore.password"),
    "wrong key password (JKS)": (
        lambda s, d: mtls_lines("dc1m", s, s.jks, "JKS", STORE_PASSWORD, WRONG_PASSWORD), "dc1m.ssl.key.password"),
    # Java tries the store password, which is not this key's: the missing setting is named (no line to cite).
    "no key password for a JKS key that has its own": (
        lambda s, d: mtls_lines("dc1m", s, s.jks, "JKS", STORE_PASSWORD, None), "dc1m.ssl.key.password"),
    "expired client certificate": (
        lambda s, d: mtls_lines("dc1m", s, s.expired, "PKCS12", STORE_PASSWORD, STORE_PASSWORD),
        "dc1m.ssl.keystore.location"),
    "key does not match the certificate": (
        lambda s, d: mtls_lines("dc1m", s, s.mismatched, "PKCS12", STORE_PASSWORD, STORE_PASSWORD),
        "dc1m.ssl.keystore.location"),
}


@pytest.mark.parametrize("problem", list(BROKEN))
def test_broken_stores_are_refused_naming_the_key(stores: Stores, tmp_path: Path, problem: str) -> None:
    make_lines, key = BROKEN[problem]
    alias = key.split(".")[0]
    # Nothing connects: the stores are read and refused before any client exists.
    config = write_config(tmp_path / "mm2.properties", {alias: "127.0.0.1:9", "dc2": "127.0.0.1:9"},
                          make_lines(stores, tmp_path) + flow_lines("t", flow=f"{alias}->dc2"))
    res = cli("check", "--config", str(config))
    out = res.stdout + res.stderr
    assert res.returncode == 2, out
    assert res.stdout == "" and len(res.stderr.strip().splitlines()) == 1, out
    line = line_of(config, key)
    assert (f"{config}, line {line}, key '{key}'" if line else f"{config}, key '{key}'") in res.stderr, out
    assert "Traceback" not in out
    assert_no_secrets("check output", out)
