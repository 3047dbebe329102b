"""The one description of what the mirror's own Kafka client speaks (config/wire_support.py) and the TLS settings
its connections honour (wire/tls.py tls_context)."""

from __future__ import annotations

import contextlib
import datetime as dt
import ssl
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization

from mirror_core.config.wire_support import (
    OAUTHBEARER_VARIANTS,
    SASL_MECHANISMS,
    TLS_BY_NAME,
    TLS_SETTINGS,
    wire_problems,
)
from mirror_core.wire import sasl
from mirror_core.wire.errors import WireError
from mirror_core.wire.tls import tls_context
from tests.unit.stores import Pki

TLS = {"security.protocol": "SSL"}
#: every ssl.* setting librdkafka 2.15 has (strings of librdkafka.so), and those next to them
LIBRDKAFKA_TLS = {
    "enable.ssl.certificate.verification", "https.ca.location", "https.ca.pem", "ssl.ca.certificate.stores",
    "ssl.ca.location", "ssl.ca.pem", "ssl.certificate.location", "ssl.certificate.pem", "ssl.certificate.verify_cb",
    "ssl.cipher.suites", "ssl.crl.location", "ssl.curves.list", "ssl.endpoint.identification.algorithm",
    "ssl.engine.id", "ssl.engine.location", "ssl.key.location", "ssl.key.password", "ssl.key.pem",
    "ssl.keystore.location", "ssl.keystore.password", "ssl.providers", "ssl.sigalgs.list", "ssl.truststore.location",
    "ssl_ca", "ssl_certificate", "ssl_engine_callback_data", "ssl_key",
}


def test_every_tls_setting_of_librdkafka_is_classified_once_with_why() -> None:
    assert {s.name for s in TLS_SETTINGS} == LIBRDKAFKA_TLS and len(TLS_SETTINGS) == len(LIBRDKAFKA_TLS)
    assert all(s.why for s in TLS_SETTINGS)
    assert TLS_BY_NAME["ssl.ca.certificate.stores"].support == "ignored"
    assert {s.name for s in TLS_SETTINGS if s.support == "refused"} >= {
        "ssl.sigalgs.list", "ssl.providers", "ssl.engine.location", "ssl.engine.id"}
    assert {s.name for s in TLS_SETTINGS if s.support == "honoured"} >= {
        "ssl.cipher.suites", "ssl.crl.location", "ssl.curves.list", "ssl.ca.location", "ssl.key.pem"}


def test_the_wire_client_speaks_the_mechanisms_of_the_description() -> None:
    assert sasl.MECHANISMS == SASL_MECHANISMS
    for mechanism in SASL_MECHANISMS:
        settings = {"security.protocol": "SASL_SSL", "sasl.mechanisms": mechanism, "sasl.oauthbearer.method": "oidc",
                    "sasl.oauthbearer.token.endpoint.url": "https://idp/token", "sasl.oauthbearer.client.id": "m",
                    "sasl.oauthbearer.client.secret": "s"}
        assert sasl.mechanism_for(settings, "cluster dc1") == mechanism
        assert wire_problems(settings) == []
    assert [spoken for spoken, _ in OAUTHBEARER_VARIANTS.values()] == [True, False, False]


@pytest.mark.parametrize(("settings", "says"), [
    ({"security.protocol": "SASL_SSL", "sasl.mechanisms": "OAUTHBEARER", "mirror_core.aws.msk.iam.enabled": "true"},
     "logs in with OAUTHBEARER and AWS MSK IAM tokens, which the mirror's own client does not speak"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "OAUTHBEARER"},
     "logs in with OAUTHBEARER and unsecured JWTs"),
    ({**TLS, "ssl.sigalgs.list": "ECDSA+SHA256"}, "sets ssl.sigalgs.list, which the mirror's own client does not "
                                                  "honour (Python's ssl cannot restrict the signature algorithms)"),
    ({**TLS, "ssl.providers": "default,legacy"}, "sets ssl.providers"),
    ({**TLS, "ssl.engine.id": "pkcs11"}, "sets ssl.engine.id"),
    ({**TLS, "ssl.curves.list": "P-256:X25519"}, "sets ssl.curves.list to a list (P-256:X25519)"),
    ({**TLS, "ssl.curves.list": "no-such-curve"}, "a curve Python's ssl does not know"),
    ({**TLS, "ssl.cipher.suites": "NO-SUCH-CIPHER"}, "selects no cipher Python's ssl knows"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanisms": "PLAIN", "ssl.some.future.setting": "x"},
     "sets ssl.some.future.setting, which the mirror's own client does not know"),
])
def test_what_the_wire_client_cannot_honour_is_named_in_one_phrase(settings: dict[str, str], says: str) -> None:
    problems = wire_problems(settings)
    assert len(problems) == 1 and says in problems[0] and "\n" not in problems[0]


def test_what_it_honours_or_may_ignore_is_no_problem_and_tls_settings_matter_only_over_tls() -> None:
    honoured = {**TLS, "ssl.cipher.suites": "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256",
                "ssl.crl.location": "/etc/crl.pem", "ssl.curves.list": "P-256", "ssl.ca.certificate.stores": "Root",
                "ssl.endpoint.identification.algorithm": "none", "enable.ssl.certificate.verification": "true"}
    assert wire_problems(honoured) == []
    assert wire_problems({"ssl.sigalgs.list": "ECDSA+SHA256", "ssl.engine.id": "x"}) == []  # PLAINTEXT: unread
    assert len(wire_problems({**TLS, "ssl.sigalgs.list": "ECDSA+SHA256", "ssl.engine.id": "x"})) == 2


def _crl(pki: Pki, path: Path, revoked: x509.Certificate | None = None) -> Path:
    now = dt.datetime.now(dt.UTC)
    builder = (x509.CertificateRevocationListBuilder().issuer_name(pki.ca.subject)
               .last_update(now - dt.timedelta(minutes=5)).next_update(now + dt.timedelta(days=1)))
    if revoked is not None:
        builder = builder.add_revoked_certificate(
            x509.RevokedCertificateBuilder().serial_number(revoked.serial_number).revocation_date(now).build())
    path.write_bytes(builder.sign(pki.ca_key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM))
    return path


def test_tls_context_honours_ciphers_crl_and_one_curve(tmp_path: Path) -> None:
    pki = Pki()
    plain = tls_context({"ssl.ca.pem": pki.ca_pem}, "cluster dc1")
    assert not plain.verify_flags & ssl.VERIFY_CRL_CHECK_LEAF
    ctx = tls_context({"ssl.ca.pem": pki.ca_pem, "ssl.crl.location": str(_crl(pki, tmp_path / "crl.pem")),
                       "ssl.cipher.suites": "ECDHE-ECDSA-AES128-GCM-SHA256", "ssl.curves.list": "P-256"},
                      "cluster dc1")
    assert ctx.verify_flags & ssl.VERIFY_CRL_CHECK_LEAF
    assert ctx.get_ca_certs()  # the CA, with the CRL beside it
    tls12 = [c["name"] for c in ctx.get_ciphers() if c["protocol"] != "TLSv1.3"]
    assert tls12 == ["ECDHE-ECDSA-AES128-GCM-SHA256"]
    assert tls_context({"ssl.ca.location": "probe"}, "cluster dc1").verify_mode == ssl.CERT_REQUIRED


def test_a_crl_revoking_the_peer_fails_its_handshake(tmp_path: Path) -> None:
    """The CRL is checked: a server certificate it revokes fails verification over a real (in-memory) handshake."""
    pki = Pki()
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    identity = tmp_path / "server.pem"
    identity.write_bytes(pki.cert.public_bytes(serialization.Encoding.PEM) + pki.key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    server_ctx.load_cert_chain(identity)

    def handshake(crl: Path) -> None:
        client = tls_context({"ssl.ca.pem": pki.ca_pem, "ssl.crl.location": str(crl),
                              "ssl.endpoint.identification.algorithm": "none"}, "cluster dc1")
        c_in, c_out, s_in, s_out = ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO()
        c, s = client.wrap_bio(c_in, c_out), server_ctx.wrap_bio(s_in, s_out, server_side=True)
        for _ in range(10):
            for side, out, into in ((c, c_out, s_in), (s, s_out, c_in)):
                with contextlib.suppress(ssl.SSLWantReadError):
                    side.do_handshake()
                into.write(out.read())
        c.do_handshake()

    handshake(_crl(pki, tmp_path / "empty.pem"))
    with pytest.raises(ssl.SSLCertVerificationError, match="revoked"):
        handshake(_crl(pki, tmp_path / "revoked.pem", revoked=pki.cert))


@pytest.mark.parametrize(("settings", "says"), [
    ({"ssl.curves.list": "P-256:X25519"}, "ssl.curves.list = P-256:X25519 is not taken by Python's ssl"),
    ({"ssl.cipher.suites": "NO-SUCH-CIPHER"}, "ssl.cipher.suites = NO-SUCH-CIPHER is not taken"),
    ({"ssl.crl.location": "/no/such/crl.pem"}, "the TLS settings do not load"),
])
def test_tls_settings_it_cannot_take_are_one_line_naming_the_setting(settings: dict[str, str], says: str) -> None:
    with pytest.raises(WireError) as err:
        tls_context(settings, "cluster dc1")
    assert says in str(err.value) and str(err.value).startswith("cluster dc1") and "\n" not in str(err.value)


def test_check_prints_each_flows_data_path_and_why_and_refuses_batches_in_one_line(tmp_path: Path) -> None:
    import subprocess
    import sys

    base = ("clusters = dc1, dc2\ndc1.bootstrap.servers = 127.0.0.1:9\ndc2.bootstrap.servers = 127.0.0.1:9\n"
            "dc1.security.protocol = SSL\ndc1.ssl.sigalgs.list = ECDSA+SHA256\n"
            "dc1->dc2.enabled = true\ndc2->dc1.enabled = true\nreplication.data.path = auto\n")

    def check(text: str) -> subprocess.CompletedProcess[str]:
        path = tmp_path / "mm2.properties"
        path.write_text(text)
        return subprocess.run([sys.executable, "-m", "mirror_core", "check", "--config", str(path)],
                              capture_output=True, text=True, timeout=60)

    done = check(base)
    assert done.returncode == 0, done.stderr
    lines = {line.split(":")[0]: line for line in done.stdout.splitlines() if line.startswith("flow ")}
    assert "data path records (auto: records, because cluster dc1 sets ssl.sigalgs.list" in lines["flow dc1->dc2"]
    # the reverse flow reads dc2 (plaintext) and writes to dc1, whose producer would carry the setting
    assert "data path records (auto: records, because cluster dc1 sets ssl.sigalgs.list" in lines["flow dc2->dc1"]
    refused = check(base.replace("replication.data.path = auto", "dc1->dc2.replication.data.path = batches"))
    assert refused.returncode != 0
    [line] = [s for s in refused.stderr.strip().splitlines() if "ssl.sigalgs.list" in s]
    assert "replication.data.path = batches: cluster dc1 sets ssl.sigalgs.list" in line
    assert "use replication.data.path = records (or auto)" in line
    plain = check(base.replace("dc1.ssl.sigalgs.list = ECDSA+SHA256\n", ""))
    assert "data path batches (auto: batches)" in plain.stdout
