"""The wire client's SASL and protocol primitives (mirror_core/wire/sasl.py, codec.py): the SCRAM exchange
against RFC 7677's published example, the checks that keep a server from downgrading or faking it, and a
truncated response read as a clear error."""

from __future__ import annotations

import pytest

from mirror_core.wire import sasl
from mirror_core.wire.codec import ProtocolError, Reader, string

# RFC 7677 section 3: user "user", password "pencil", client nonce rOprNGfwEbeRWgbNEkqO.
SERVER_FIRST = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
CLIENT_FINAL = (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def rfc_client() -> sasl.ScramClient:
    return sasl.ScramClient("SCRAM-SHA-256", "user", "pencil", nonce="rOprNGfwEbeRWgbNEkqO")


def test_scram_sha_256_produces_rfc_7677s_messages_and_accepts_its_server_signature() -> None:
    client = rfc_client()
    assert client.first() == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    assert client.final(SERVER_FIRST) == CLIENT_FINAL
    client.verify(SERVER_FINAL)


def test_a_server_that_cannot_prove_the_credentials_is_refused() -> None:
    client = rfc_client()
    client.final(SERVER_FIRST)
    with pytest.raises(sasl.SaslError, match="does not hold these credentials"):
        client.verify(b"v=" + b"A" * 44)


@pytest.mark.parametrize("server_first,reason", [
    (SERVER_FIRST.replace(b"i=4096", b"i=1024"), "fewer than 4096"),  # a downgrade of the key stretching
    (b"r=someone-elses-nonce,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096", "does not continue this exchange"),
    (b"e=unknown-user", "refused the first message: unknown-user"),
    (b"r=rOprNGfwEbeRWgbNEkqOxyz,s=not*base64,i=4096", "first message does not parse"),
    (b"r=rOprNGfwEbeRWgbNEkqOxyz,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=many", "first message does not parse"),
])
def test_a_server_first_message_that_weakens_or_breaks_the_exchange_is_refused(server_first: bytes,
                                                                               reason: str) -> None:
    with pytest.raises(sasl.SaslError, match=reason):
        rfc_client().final(server_first)


def test_a_final_message_that_does_not_parse_is_a_sasl_error() -> None:
    client = rfc_client()
    client.final(SERVER_FIRST)
    with pytest.raises(sasl.SaslError, match="final message does not parse"):
        client.verify(b"v=not*base64")


def test_user_names_are_escaped_and_plain_carries_no_authorization_id() -> None:
    assert sasl.ScramClient("SCRAM-SHA-512", "a=b,c", "pw", nonce="n").first() == b"n,,n=a=3Db=2Cc,r=n"
    assert sasl.plain("alice", "s3cret") == b"\0alice\0s3cret"


def test_a_mechanism_the_client_does_not_speak_is_named_with_what_to_do() -> None:
    assert sasl.mechanism_for({"sasl.mechanisms": "scram-sha-512"}, "dc1") == "SCRAM-SHA-512"
    assert sasl.mechanism_for({"sasl.mechanisms": "GSSAPI"}, "dc1") == "GSSAPI"
    with pytest.raises(sasl.SaslError, match=r"dc1: sasl\.mechanism DIGEST-MD5 is not spoken by the batch-copying"):
        sasl.mechanism_for({"sasl.mechanisms": "DIGEST-MD5"}, "dc1")


def test_gssapi_chooses_no_security_layer_and_refuses_a_broker_that_requires_one() -> None:
    """RFC 4752: the broker offers layers (bit 1: none) and its buffer size; the client answers with none, a size of
    0 and no authorization identity (the broker then authorizes the authenticated principal)."""
    assert sasl.security_layer_choice(bytes((0x07, 0x01, 0x00, 0x00))) == b"\x01\x00\x00\x00"
    assert sasl.security_layer_choice(bytes((0x01, 0xFF, 0xFF, 0xFF))) == b"\x01\x00\x00\x00"
    with pytest.raises(sasl.SaslError, match=r"requires a SASL security layer \(offer 0x06"):
        sasl.security_layer_choice(bytes((0x06, 0x01, 0x00, 0x00)))
    with pytest.raises(sasl.SaslError, match="offer is 5 bytes, not 4"):
        sasl.security_layer_choice(b"\x01\x00\x00\x00x")
    kerberos = {"security.protocol": "SASL_SSL", "sasl.mechanisms": "GSSAPI"}
    assert sasl.speaks_gssapi(kerberos) and sasl.speaks_gssapi({"security.protocol": "SASL_PLAINTEXT"})
    assert not sasl.speaks_gssapi({**kerberos, "security.protocol": "SSL"})
    assert not sasl.speaks_gssapi({**kerberos, "sasl.mechanisms": "PLAIN"})


def test_oauthbearer_sends_the_token_and_extensions_and_needs_an_oidc_endpoint() -> None:
    """RFC 7628's client message with Kafka's extensions (KIP-342); tokens only from an OIDC endpoint here."""
    assert sasl.oauthbearer("eyJ.a.b", {"logicalCluster": "lkc-1"}) == \
        b"n,,\x01auth=Bearer eyJ.a.b\x01logicalCluster=lkc-1\x01\x01"
    assert sasl.oauthbearer("t", {}) == b"n,,\x01auth=Bearer t\x01\x01"
    assert sasl.extensions({"sasl.oauthbearer.extensions": "a=1,b=x=y"}) == {"a": "1", "b": "x=y"}
    oidc = {"security.protocol": "SASL_SSL", "sasl.mechanisms": "OAUTHBEARER", "sasl.oauthbearer.method": "oidc",
            "sasl.oauthbearer.token.endpoint.url": "https://idp/token", "sasl.oauthbearer.client.id": "c",
            "sasl.oauthbearer.client.secret": "s"}
    assert sasl.mechanism_for(oidc, "dc1") == "OAUTHBEARER" and sasl.speaks_oauthbearer(oidc)
    for settings, says in [({**oidc, "sasl.oauthbearer.method": "default"}, "unsecured JWTs"),
                           ({**oidc, "sasl.oauthbearer.client.secret": ""},
                            "oidc without sasl.oauthbearer.client.secret"),
                           ({**oidc, "mirror_core.aws.msk.iam.region": "eu-west-1"}, "AWS MSK IAM")]:
        assert not sasl.speaks_oauthbearer(settings)
        with pytest.raises(sasl.SaslError, match=f"dc1: OAUTHBEARER with {says}.*the records data path takes it"):
            sasl.mechanism_for(settings, "dc1")


def test_a_truncated_response_is_a_protocol_error_naming_where_it_ends() -> None:
    r = Reader(string("topic")[:4])
    with pytest.raises(ProtocolError, match="ends inside a field of 5 at byte 2"):
        r.string()
    with pytest.raises(ProtocolError, match="ends at byte 0 inside a field"):
        Reader(b"\x00").int32()
