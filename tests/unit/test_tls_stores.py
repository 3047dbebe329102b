"""JKS / PKCS12 / PEM stores read as Java does, handed to librdkafka as PEM; each failure names its key."""

from __future__ import annotations

from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric import ec

from mirror_core.config.errors import SettingError
from mirror_core.config.tls_stores import read_stores
from tests.unit.stores import Pki, make_cert

PW = "St0re-Pw-5521"


@pytest.fixture(scope="module")
def pki() -> Pki:
    return Pki()


def test_jks_truststore_without_a_type_is_read_as_java_does(pki: Pki, tmp_path: Path) -> None:
    store = pki.jks_truststore(tmp_path / "truststore.jks", PW)
    out = read_stores({"ssl.truststore.location": str(store), "ssl.truststore.password": PW})
    assert out.settings["ssl.ca.pem"] == pki.ca_pem and out.sources["ssl.ca.pem"] == "ssl.truststore.location"
    # Java reads a truststore without a password (no integrity check): so do we.
    assert read_stores({"ssl.truststore.location": str(store)}).settings["ssl.ca.pem"] == pki.ca_pem


def test_pkcs12_truststore_and_keystore(pki: Pki, tmp_path: Path) -> None:
    trust = pki.pkcs12_truststore(tmp_path / "trust.p12", PW)
    keystore = pki.pkcs12(tmp_path / "client.p12", PW)
    out = read_stores({"ssl.truststore.location": str(trust), "ssl.truststore.type": "PKCS12",
                       "ssl.truststore.password": PW, "ssl.keystore.location": str(keystore),
                       "ssl.keystore.type": "PKCS12", "ssl.keystore.password": PW, "ssl.key.password": PW})
    assert out.settings["ssl.ca.pem"] == pki.ca_pem
    assert out.settings["ssl.certificate.pem"].startswith("-----BEGIN CERTIFICATE")
    assert "PRIVATE KEY" in out.settings["ssl.key.pem"] and PW not in str(out.settings)


@pytest.mark.parametrize("key_password", [None, "Other-Key-Pw-88"])
def test_jks_keystore_with_store_or_own_key_password(pki: Pki, tmp_path: Path, key_password: str | None) -> None:
    store = pki.jks_keystore(tmp_path / "client.jks", PW, key_password)
    java = {"ssl.keystore.location": str(store), "ssl.keystore.password": PW}
    if key_password:
        java["ssl.key.password"] = key_password
    out = read_stores(java)
    assert "PRIVATE KEY" in out.settings["ssl.key.pem"]
    if key_password:
        java["ssl.key.password"] = "wrong"
        with pytest.raises(SettingError, match="wrong password") as err:
            read_stores(java)
        assert err.value.key == "ssl.key.password"


def test_pem_truststore_is_checked_and_left_to_librdkafka(pki: Pki, tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text(pki.ca_pem)
    out = read_stores({"ssl.truststore.location": str(ca), "ssl.truststore.type": "PEM"})
    assert out.settings == {"ssl.ca.location": str(ca)}
    # Without a type Java would refuse a PEM file as JKS; we read it and say so.
    out = read_stores({"ssl.truststore.location": str(ca)})
    assert out.settings == {"ssl.ca.location": str(ca)} and "is a PEM file" in out.warnings[0]


def test_inline_pem_keystore(pki: Pki) -> None:
    from cryptography.hazmat.primitives import serialization

    key = pki.key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.BestAvailableEncryption(PW.encode())).decode()
    chain = pki.cert.public_bytes(serialization.Encoding.PEM).decode()
    out = read_stores({"ssl.keystore.type": "PEM", "ssl.keystore.key": key, "ssl.keystore.certificate.chain": chain,
                       "ssl.key.password": PW, "ssl.truststore.type": "PEM", "ssl.truststore.certificates": pki.ca_pem})
    assert out.settings["ssl.certificate.pem"] == chain and out.settings["ssl.ca.pem"] == pki.ca_pem


def test_errors_name_the_key_and_never_the_password(pki: Pki, tmp_path: Path) -> None:
    jks = pki.jks_truststore(tmp_path / "t.jks", PW)
    p12 = pki.pkcs12(tmp_path / "c.p12", PW)
    other_key = ec.generate_private_key(ec.SECP256R1())
    mismatched = pki.jks_keystore(tmp_path / "mismatch.jks", PW, key=other_key)
    expired = pki.pkcs12(tmp_path / "expired.p12", PW, cert=make_cert("old", pki.key, pki.ca, pki.ca_key, days=-1))
    cases = [
        ({"ssl.truststore.location": str(jks), "ssl.truststore.password": "nope-nope"}, "ssl.truststore.password",
         "wrong password"),
        ({"ssl.truststore.location": str(tmp_path / "missing.jks")}, "ssl.truststore.location", "does not exist"),
        ({"ssl.truststore.location": str(jks), "ssl.truststore.type": "PEM"}, "ssl.truststore.type",
         "is a JKS file, not PEM"),
        ({"ssl.keystore.location": str(p12), "ssl.keystore.type": "PKCS12", "ssl.keystore.password": "bad-pw"},
         "ssl.keystore.password", "wrong password"),
        ({"ssl.keystore.location": str(mismatched), "ssl.keystore.password": PW}, "ssl.keystore.location",
         "does not match its certificate"),
        ({"ssl.keystore.location": str(expired), "ssl.keystore.password": PW}, "ssl.keystore.location", "expired on"),
        ({"ssl.truststore.location": str(tmp_path)}, "ssl.truststore.location", "is a directory"),
    ]
    for java, key, message in cases:
        with pytest.raises(SettingError) as err:
            read_stores(java)
        assert err.value.key == key and message in str(err.value), (java, str(err.value))
        assert PW not in str(err.value) and "nope-nope" not in str(err.value)


def test_a_key_store_used_as_trust_store_trusts_its_key_entries_certificate(pki: Pki, tmp_path: Path) -> None:
    """As Java's trust manager does (KeyStores.getTrustedCerts)."""
    store = pki.jks_keystore(tmp_path / "client.jks", PW)
    out = read_stores({"ssl.truststore.location": str(store), "ssl.truststore.password": PW})
    assert out.settings["ssl.ca.pem"].startswith("-----BEGIN CERTIFICATE")
