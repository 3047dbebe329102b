"""sasl.jaas.config parsing as Java does it, and SASL mechanism mapping to librdkafka."""

from __future__ import annotations

import pytest

from mirror_core.config.errors import JaasError, SettingError
from mirror_core.config.jaas import parse_jaas
from mirror_core.config.sasl import client_conf, translate_sasl

SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"


@pytest.mark.parametrize(("text", "user", "password"), [
    (f'{SCRAM} required username="alice" password="s3cret";', "alice", "s3cret"),
    (f"{SCRAM} required username='alice' password='s3cret';", "alice", "s3cret"),
    (f'{SCRAM} required\n  username="alice"\n  password="p\\"w;x";', "alice", 'p"w;x'),
    (f"{SCRAM} required username='al\\'ice' password='it''s';", None, None),
    (f'{SCRAM} required username=alice password="a b=c";', "alice", "a b=c"),
    (f'/* ours */ {SCRAM} required // comment\n username="u" password="p\\\\q";', "u", "p\\q"),
])
def test_quote_styles_escapes_and_comments(text: str, user: str | None, password: str | None) -> None:
    if user is None:
        with pytest.raises(JaasError):
            parse_jaas(text)
        return
    entry = parse_jaas(text)
    assert entry.module_name == "ScramLoginModule" and entry.flag == "required"
    assert (entry.options["username"], entry.options["password"]) == (user, password)


@pytest.mark.parametrize(("text", "message"), [
    (f'{SCRAM} username="a";', "not a control flag"),
    (f'{SCRAM} required username="a" password="b"', "expected ';'"),
    (f'{SCRAM} required username="a;', "no closing"),
    (f'{SCRAM} required username="a"; {SCRAM} required;', "more than one login module"),
])
def test_malformed_entries_say_what_is_wrong_without_values(text: str, message: str) -> None:
    with pytest.raises(JaasError, match=message) as err:
        parse_jaas(text)
    assert "password" not in str(err.value) or "b" not in str(err.value).split("password")[-1][:3]


def sasl(**java: str) -> dict[str, str]:
    warnings: list[str] = []
    out, _ = translate_sasl({k.replace("_", "."): v for k, v in java.items()}, warnings.append)
    return out


def test_scram_and_plain() -> None:
    out = sasl(sasl_mechanism="SCRAM-SHA-256", sasl_jaas_config=f"{SCRAM} required username='u' password='p';")
    assert out == {"sasl.mechanisms": "SCRAM-SHA-256", "sasl.username": "u", "sasl.password": "p"}


def test_oauthbearer_oidc_client_credentials() -> None:
    out = translate_sasl({
        "sasl.mechanism": "OAUTHBEARER",
        "sasl.login.callback.handler.class":
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler",
        "sasl.oauthbearer.token.endpoint.url": "https://idp.example.com/oauth2/token",
        "sasl.jaas.config": "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
                            "clientId='mirror' clientSecret='sh!' scope='kafka' extension_logicalCluster='lkc-1';",
    }, lambda w: None)[0]
    assert out == {"sasl.mechanisms": "OAUTHBEARER", "sasl.oauthbearer.method": "oidc",
                   "sasl.oauthbearer.token.endpoint.url": "https://idp.example.com/oauth2/token",
                   "sasl.oauthbearer.client.id": "mirror", "sasl.oauthbearer.client.secret": "sh!",
                   "sasl.oauthbearer.scope": "kafka", "sasl.oauthbearer.extensions": "logicalCluster=lkc-1"}


def test_oauthbearer_unsecured_tokens_for_development_clusters() -> None:
    out = sasl(sasl_mechanism="OAUTHBEARER", sasl_jaas_config="org.apache.kafka.common.security.oauthbearer."
               "OAuthBearerLoginModule required unsecuredLoginStringClaim_sub='admin';")
    assert out["enable.sasl.oauthbearer.unsecure.jwt"] == "true" and out["sasl.oauthbearer.config"] == "principal=admin"


def test_gssapi_from_krb5_login_module(tmp_path) -> None:  # type: ignore[no-untyped-def]
    keytab = tmp_path / "mirror.keytab"
    keytab.write_bytes(b"\x05\x02")
    out = sasl(sasl_mechanism="GSSAPI", sasl_kerberos_service_name="kafka",
               sasl_jaas_config=f'com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true '
                                f'storeKey=true keyTab="{keytab}" principal="mirror@EXAMPLE.COM";')
    assert out == {"sasl.mechanisms": "GSSAPI", "sasl.kerberos.service.name": "kafka",
                   "sasl.kerberos.principal": "mirror@EXAMPLE.COM", "sasl.kerberos.keytab": str(keytab)}
    with pytest.raises(SettingError, match="does not exist") as err:
        sasl(sasl_mechanism="GSSAPI", sasl_jaas_config="com.sun.security.auth.module.Krb5LoginModule required "
             "useKeyTab=true keyTab='/nope.keytab' principal='m@R';")
    assert err.value.key == "sasl.jaas.config"


@pytest.mark.parametrize(("java", "key", "message"), [
    ({"sasl.mechanism": "SCRAM-SHA-512", "sasl.jaas.config": f"{SCRAM} required username='u';"},
     "sasl.jaas.config", "needs password"),
    ({"sasl.mechanism": "PLAIN", "sasl.jaas.config": f"{SCRAM} required username='u' password='p';"},
     "sasl.jaas.config", "does not go with sasl.mechanism=PLAIN"),
    ({"security.protocol": "SASL_SSL", "sasl.jaas.config": f"{SCRAM} required username='u' password='p';"},
     "sasl.mechanism", "set sasl.mechanism=SCRAM-SHA-512"),
    ({"sasl.mechanism": "OAUTHBEARER", "sasl.jaas.config": "org.apache.kafka.common.security.oauthbearer."
      "OAuthBearerLoginModule required clientId='a';", "sasl.oauthbearer.token.endpoint.url": "https://x/t"},
     "sasl.jaas.config", "clientSecret"),
    ({"sasl.mechanism": "OAUTHBEARER", "sasl.jaas.config": "org.apache.kafka.common.security.oauthbearer."
      "OAuthBearerLoginModule required;"}, "sasl.oauthbearer.token.endpoint.url", "token endpoint"),
])
def test_sasl_errors_name_the_key(java: dict[str, str], key: str, message: str) -> None:
    with pytest.raises(SettingError, match=message) as err:
        translate_sasl(java, lambda w: None)
    assert err.value.key == key and "'p'" not in str(err.value)


def test_aws_msk_iam_becomes_oauthbearer_with_a_signer_callback() -> None:
    out = sasl(sasl_mechanism="AWS_MSK_IAM", sasl_client_callback_handler_class=
               "software.amazon.msk.auth.iam.IAMClientCallbackHandler",
               sasl_jaas_config="software.amazon.msk.auth.iam.IAMLoginModule required awsProfileName='prod';")
    assert out["sasl.mechanisms"] == "OAUTHBEARER" and out["mirror_core.aws.msk.iam.profile"] == "prod"
    conf = client_conf({**out, "bootstrap.servers": "b-1.c.abc.c2.kafka.eu-west-1.amazonaws.com:9098"}) \
        if _has_signer() else None
    if conf is not None:
        assert callable(conf["oauth_cb"]) and not any(k.startswith("mirror_core.") for k in conf)


def _has_signer() -> bool:
    try:
        import aws_msk_iam_sasl_signer  # noqa: F401
    except ImportError:
        return False
    return True


def test_oidc_with_librdkafka_names_passes_through_and_the_endpoint_is_not_secret() -> None:
    from mirror_core.redaction import is_secret

    out = translate_sasl({"sasl.mechanisms": "OAUTHBEARER", "sasl.oauthbearer.method": "oidc",
                          "sasl.oauthbearer.client.id": "m", "sasl.oauthbearer.client.secret": "s",
                          "sasl.oauthbearer.token.endpoint.url": "https://idp/token"}, lambda w: None)[0]
    assert out["sasl.oauthbearer.token.endpoint.url"] == "https://idp/token"
    assert out["sasl.oauthbearer.method"] == "oidc"
    assert not is_secret("sasl.oauthbearer.token.endpoint.url") and is_secret("sasl.oauthbearer.client.secret")


def test_a_flag_under_a_secret_looking_name_is_never_masked() -> None:
    from mirror_core.config.client_props import translate
    from mirror_core.redaction import scrub

    translate({"sasl.oauthbearer.token.endpoint.allow.http": "true", "ssl.key.password": "FALSE"})
    assert scrub("exactly.once.enabled = true, enable.idempotence = false") == (
        "exactly.once.enabled = true, enable.idempotence = false")


def test_token_endpoint_trust_from_the_jaas_line_and_jwt_bearer_is_refused(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from tests.unit.stores import Pki

    pki = Pki()
    store = pki.jks_truststore(tmp_path / "idp.jks", "pw-1234")
    module = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
    java = {"sasl.mechanism": "OAUTHBEARER", "sasl.oauthbearer.token.endpoint.url": "https://idp/token",
            "sasl.jaas.config": f"{module} required clientId='m' clientSecret='s' "
                                f"ssl.truststore.location='{store}' ssl.truststore.password='pw-1234';"}
    assert translate_sasl(java, lambda w: None)[0]["https.ca.pem"] == pki.ca_pem
    java["sasl.oauthbearer.jwt.retriever.class"] = \
        "org.apache.kafka.common.security.oauthbearer.JwtBearerJwtRetriever"
    with pytest.raises(SettingError, match="jwt-bearer grant") as err:
        translate_sasl(java, lambda w: None)
    assert err.value.key == "sasl.oauthbearer.jwt.retriever.class"


def test_java_kinit_path_becomes_librdkafka_command_and_one_principal_per_process(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from mirror_core.config.errors import ConfigError
    from mirror_core.config.loader import parse_text

    keytab = tmp_path / "k.keytab"
    keytab.write_bytes(b"\x05\x02")
    krb = "com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true keyTab=\"{k}\" principal=\"{p}\";"
    out = sasl(sasl_mechanism="GSSAPI", sasl_kerberos_kinit_cmd="/usr/bin/kinit",
               sasl_jaas_config=krb.format(k=keytab, p="m@R"))
    assert out["sasl.kerberos.kinit.cmd"].startswith("/usr/bin/kinit -R -t ")
    text = ("clusters = a, b\na.bootstrap.servers = h:1\nb.bootstrap.servers = h:2\na->b.enabled = true\n"
            "a.security.protocol = SASL_PLAINTEXT\na.sasl.mechanism = GSSAPI\n"
            f"a.sasl.jaas.config = {krb.format(k=keytab, p='one@R')}\n"
            "b.security.protocol = SASL_PLAINTEXT\nb.sasl.mechanism = GSSAPI\n"
            f"b.sasl.jaas.config = {krb.format(k=keytab, p='two@R')}\n")
    with pytest.raises(ConfigError, match="different Kerberos principals") as err:
        parse_text(text, validate_clients=False)
    assert err.value.key == "b.sasl.jaas.config" and err.value.line == 10
