"""SASL as Java clients configure it (``sasl.mechanism`` + ``sasl.jaas.config``) mapped to librdkafka.

============== ====================================== ==============================================
mechanism      JAAS login module (options)            librdkafka
============== ====================================== ==============================================
PLAIN, SCRAM-* PlainLoginModule / ScramLoginModule    sasl.username, sasl.password
               (username, password)
OAUTHBEARER    OAuthBearerLoginModule (clientId,      sasl.oauthbearer.method=oidc, client id/secret,
               clientSecret, scope, extension_*) and  scope, token endpoint, extensions; without an
               sasl.oauthbearer.token.endpoint.url    endpoint, unsecured JWTs (unsecuredLoginStringClaim_sub)
GSSAPI         Krb5LoginModule (useKeyTab, keyTab,    sasl.kerberos.keytab, .principal, .service.name
               principal, useTicketCache)             (kinit runs with the keytab, as librdkafka does)
AWS_MSK_IAM    IAMLoginModule (awsProfileName,        OAUTHBEARER with a token from the AWS MSK IAM
               awsRoleArn, awsStsRegion)              signer (optional extra: mirror-core[aws])
============== ====================================== ==============================================

AWS MSK IAM needs a Python callback, which librdkafka settings cannot carry as text: the translation
emits ``mirror_core.aws.msk.iam.*`` markers, and :func:`client_conf` (used by every client factory)
turns them into the callback.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from mirror_core.config.errors import JaasError, SettingError
from mirror_core.config.jaas import JaasEntry, parse_jaas

SASL_KEYS = frozenset({
    "sasl.kerberos.kinit.cmd", "sasl.mechanism", "sasl.mechanisms", "sasl.jaas.config", "sasl.oauthbearer.method",
    "sasl.oauthbearer.client.id",
    "sasl.oauthbearer.client.secret", "sasl.login.callback.handler.class", "sasl.client.callback.handler.class",
    "sasl.oauthbearer.token.endpoint.url", "sasl.oauthbearer.scope", "sasl.oauthbearer.client.credentials.client.id",
    "sasl.oauthbearer.client.credentials.client.secret", "sasl.oauthbearer.jwt.retriever.class",
    "sasl.oauthbearer.token.endpoint.allow.http",
})
#: what lets an OIDC token endpoint be plain http (refused otherwise: the client secret would go out in clear);
#: passed on to the batches path's own client (mirror_core.wire.oauth) as a marker, which librdkafka never sees
ALLOW_HTTP_KEY = "sasl.oauthbearer.token.endpoint.allow.http"
ALLOW_HTTP_MARKER = "mirror_core.oauthbearer.token.endpoint.allow.http"
AWS_MARKER = "mirror_core.aws.msk.iam."
_AWS_REGION = re.compile(r"\.kafka(?:-serverless)?\.([a-z]{2}(?:-[a-z]+)+-\d)\.amazonaws\.com")
_KNOWN_HANDLERS = frozenset({
    "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler",
    "org.apache.kafka.common.security.oauthbearer.secured.OAuthBearerLoginCallbackHandler",
    "software.amazon.msk.auth.iam.IAMClientCallbackHandler",
    "software.amazon.msk.auth.iam.IAMOAuthBearerLoginCallbackHandler",
})
_MODULES = {
    "PLAIN": "PlainLoginModule", "SCRAM-SHA-256": "ScramLoginModule", "SCRAM-SHA-512": "ScramLoginModule",
    "OAUTHBEARER": "OAuthBearerLoginModule", "GSSAPI": "Krb5LoginModule", "AWS_MSK_IAM": "IAMLoginModule",
}




def _jaas(java: Mapping[str, str]) -> JaasEntry | None:
    text = java.get("sasl.jaas.config")
    if text is None or not text.strip():
        return None
    try:
        return parse_jaas(text)
    except JaasError as exc:
        raise SettingError("sasl.jaas.config", f"not a valid JAAS entry: {exc}") from None


def _require(entry: JaasEntry, *names: str) -> list[str]:
    missing = [n for n in names if not entry.options.get(n)]
    if missing:
        example = " ".join(f'{n}="..."' for n in names)
        raise SettingError("sasl.jaas.config", f"{entry.module_name} needs {' and '.join(missing)} ({example})")
    return [entry.options[n] for n in names]


def _mechanism(java: Mapping[str, str], entry: JaasEntry | None) -> str | None:
    declared = java.get("sasl.mechanism") or java.get("sasl.mechanisms")
    mechanism = declared.strip().upper() if declared else None
    if entry is None:
        return mechanism
    if mechanism is None:
        guess = {"ScramLoginModule": "SCRAM-SHA-512", "PlainLoginModule": "PLAIN",
                 "OAuthBearerLoginModule": "OAUTHBEARER", "IAMLoginModule": "AWS_MSK_IAM"}.get(entry.module_name)
        if guess and java.get("security.protocol", "").upper().startswith("SASL"):
            raise SettingError("sasl.mechanism", f"sasl.mechanism is not set (Kafka's default is GSSAPI) while "
                                              f"sasl.jaas.config uses {entry.module_name}: set sasl.mechanism={guess}")
        mechanism = "GSSAPI"
    expected = _MODULES.get(mechanism)
    if expected is not None and entry.module_name != expected:
        raise SettingError("sasl.jaas.config", f"{entry.module_name} does not go with sasl.mechanism={mechanism} "
                                            f"(it takes {expected})")
    return mechanism


def _oauthbearer(java: Mapping[str, str], entry: JaasEntry | None, out: dict[str, str]) -> None:
    options = entry.options if entry else {}
    extensions = [f"{k[len('extension_'):]}={v}" for k, v in options.items() if k.startswith("extension_")]
    if extensions:
        out["sasl.oauthbearer.extensions"] = ",".join(extensions)
    retriever = java.get("sasl.oauthbearer.jwt.retriever.class", "").strip()
    if retriever.endswith("JwtBearerJwtRetriever"):
        raise SettingError("sasl.oauthbearer.jwt.retriever.class",
                           "the jwt-bearer grant (JwtBearerJwtRetriever) is not supported here: use the client "
                           "credentials grant (clientId and clientSecret with sasl.oauthbearer.token.endpoint.url)")
    endpoint = java.get("sasl.oauthbearer.token.endpoint.url")
    if endpoint:
        # clientId/clientSecret in the JAAS line; Kafka 4.1's own keys; or librdkafka's names written directly.
        client_id = (options.get("clientId") or java.get("sasl.oauthbearer.client.credentials.client.id")
                     or java.get("sasl.oauthbearer.client.id"))
        secret = (options.get("clientSecret") or java.get("sasl.oauthbearer.client.credentials.client.secret")
                  or java.get("sasl.oauthbearer.client.secret"))
        if not client_id or not secret:
            raise SettingError("sasl.jaas.config", "OAUTHBEARER with a token endpoint needs clientId=\"...\" and "
                                                "clientSecret=\"...\" in sasl.jaas.config")
        if endpoint.strip().lower().startswith("http:"):
            if java.get(ALLOW_HTTP_KEY, "false").strip().lower() != "true":
                raise SettingError("sasl.oauthbearer.token.endpoint.url",
                                   f"{endpoint.strip()} is plain http: the client secret would go out in clear; use "
                                   f"https, or set {ALLOW_HTTP_KEY} = true (a test endpoint on a trusted network)")
            out[ALLOW_HTTP_MARKER] = "true"
        out.update({"sasl.oauthbearer.method": java.get("sasl.oauthbearer.method", "oidc"),
                    "sasl.oauthbearer.token.endpoint.url": endpoint.strip(),
                    "sasl.oauthbearer.client.id": client_id, "sasl.oauthbearer.client.secret": secret})
        scope = options.get("scope") or java.get("sasl.oauthbearer.scope")
        if scope:
            out["sasl.oauthbearer.scope"] = scope
        _token_endpoint_trust(options, out)
        return
    subject = options.get("unsecuredLoginStringClaim_sub")
    if subject:  # Kafka's unsecured tokens (development clusters)
        parts = [f"principal={subject}"]
        if options.get("unsecuredLoginListClaim_scope"):
            parts.append(f"scope={options['unsecuredLoginListClaim_scope']}")
        if options.get("unsecuredLoginLifetimeSeconds"):
            parts.append(f"lifeSeconds={options['unsecuredLoginLifetimeSeconds']}")
        out.update({"enable.sasl.oauthbearer.unsecure.jwt": "true", "sasl.oauthbearer.config": " ".join(parts)})
        return
    raise SettingError("sasl.oauthbearer.token.endpoint.url",
                    "OAUTHBEARER needs sasl.oauthbearer.token.endpoint.url (the OIDC token endpoint) with clientId "
                    "and clientSecret in sasl.jaas.config")


def _token_endpoint_trust(options: Mapping[str, str], out: dict[str, str]) -> None:
    """Java takes the token endpoint's TLS trust from ``ssl.*`` options of the JAAS line
    (JaasOptionsUtils); librdkafka from ``https.ca.*``."""
    from mirror_core.config.tls_stores import read_stores

    trust = {k: v for k, v in options.items() if k.startswith("ssl.truststore.")}
    if not trust:
        return
    try:
        settings = read_stores(trust).settings
    except SettingError as exc:
        raise SettingError("sasl.jaas.config", f"{exc} (the token endpoint's {exc.key} in the JAAS line)") from None
    if "ssl.ca.pem" in settings:
        out["https.ca.pem"] = settings["ssl.ca.pem"]
    elif "ssl.ca.location" in settings:
        out["https.ca.location"] = settings["ssl.ca.location"]


def _gssapi(java: Mapping[str, str], entry: JaasEntry | None, out: dict[str, str]) -> None:
    service = java.get("sasl.kerberos.service.name") or (entry.options.get("serviceName") if entry else None)
    if service:
        out["sasl.kerberos.service.name"] = service.strip()
    if entry is None:
        return  # librdkafka's own sasl.kerberos.* settings, if any, pass through
    options = entry.options
    (principal,) = _require(entry, "principal")
    out["sasl.kerberos.principal"] = principal
    kinit = java.get("sasl.kerberos.kinit.cmd", "").strip()
    if kinit and not any(c.isspace() for c in kinit):
        # Java's setting is the kinit binary; librdkafka's is the whole command (its default, with this binary).
        keytab_args = '-t "%{sasl.kerberos.keytab}" -k %{sasl.kerberos.principal}'
        out["sasl.kerberos.kinit.cmd"] = f"{kinit} -R {keytab_args} || {kinit} {keytab_args}"
    if options.get("useKeyTab", "false").lower() == "true":
        (keytab,) = _require(entry, "keyTab")
        path = Path(keytab).expanduser()
        if not path.is_file():
            raise SettingError("sasl.jaas.config", f"keyTab {keytab} does not exist")
        try:
            path.open("rb").close()
        except PermissionError:
            raise SettingError("sasl.jaas.config", f"keyTab {keytab} is not readable by this process") from None
        out["sasl.kerberos.keytab"] = str(path)
    elif options.get("useTicketCache", "false").lower() == "true":
        # Tickets come from the cache (kinit by the operator or a sidecar): librdkafka must not run kinit.
        out["sasl.kerberos.kinit.cmd"] = ""
        out["sasl.kerberos.min.time.before.relogin"] = "0"
    else:
        raise SettingError("sasl.jaas.config", "Krb5LoginModule needs useKeyTab=true with keyTab=\"...\" (or "
                                            "useTicketCache=true with a ticket cache kept fresh outside the mirror)")


def _aws_msk_iam(entry: JaasEntry | None, out: dict[str, str]) -> None:
    out["sasl.mechanisms"] = "OAUTHBEARER"
    options = entry.options if entry else {}
    out[f"{AWS_MARKER}enabled"] = "true"
    for option, marker in (("awsProfileName", "profile"), ("awsRoleArn", "role.arn"),
                           ("awsRoleSessionName", "role.session.name"), ("awsStsRegion", "sts.region")):
        if options.get(option):
            out[f"{AWS_MARKER}{marker}"] = options[option]


def translate_sasl(java: Mapping[str, str], warn: Callable[[str], None]) -> tuple[dict[str, str], dict[str, str]]:
    """(librdkafka settings, librdkafka key -> Java key it came from) for the SASL keys of ``java``."""
    entry = _jaas(java)
    mechanism = _mechanism(java, entry)
    out: dict[str, str] = {}
    for key in ("sasl.login.callback.handler.class", "sasl.client.callback.handler.class"):
        handler = java.get(key, "").strip()
        if handler and handler not in _KNOWN_HANDLERS:
            warn(f"'{key}' = {handler}: a custom Java callback handler cannot run here; ignored "
                 "(authentication uses the mechanism's built-in login)")
    if java.get("sasl.oauthbearer.jwt.retriever.class") and mechanism != "OAUTHBEARER":
        warn("'sasl.oauthbearer.jwt.retriever.class' has no effect without sasl.mechanism=OAUTHBEARER; ignored")
    if mechanism is not None:
        out["sasl.mechanisms"] = mechanism
    if mechanism in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512") and entry is not None:
        out["sasl.username"], out["sasl.password"] = _require(entry, "username", "password")
    elif mechanism == "OAUTHBEARER":
        _oauthbearer(java, entry, out)
    elif mechanism == "GSSAPI":
        _gssapi(java, entry, out)
    elif mechanism == "AWS_MSK_IAM":
        _aws_msk_iam(entry, out)
    elif entry is not None and mechanism not in _MODULES:
        raise SettingError("sasl.mechanism", f"{mechanism}: unknown SASL mechanism (PLAIN, SCRAM-SHA-256, "
                                          "SCRAM-SHA-512, OAUTHBEARER, GSSAPI, AWS_MSK_IAM)")
    source = "sasl.jaas.config" if entry is not None else "sasl.mechanism"
    sources = {k: ("sasl.mechanism" if k == "sasl.mechanisms" else source) for k in out}
    return out, sources


def client_conf(settings: Mapping[str, str], validate_only: bool = False) -> dict[str, Any]:
    """librdkafka configuration for ``settings``: the ``mirror_core.*`` markers replaced by callbacks
    (``validate_only``: by a stand-in that is never called, for a client that never connects)."""
    conf: dict[str, Any] = {k: v for k, v in settings.items() if not k.startswith("mirror_core.")}
    if settings.get(f"{AWS_MARKER}enabled") == "true":
        conf["oauth_cb"] = _stand_in_token if validate_only else aws_msk_iam_token_cb(settings)
    if validate_only and conf.get("sasl.oauthbearer.method") == "oidc":
        conf["oauth_cb"] = _stand_in_token  # librdkafka then checks the OIDC settings without fetching a token
    if validate_only and conf.get("sasl.mechanisms") == "GSSAPI":
        conf["sasl.kerberos.kinit.cmd"] = "true"  # librdkafka runs kinit when the client is created
    return conf


def _stand_in_token(_config: str) -> tuple[str, float]:
    """confluent-kafka waits for a first token when a client is created: one that is never sent."""
    import time

    return "validation-only", time.time() + 3600


def aws_region(settings: Mapping[str, str]) -> str | None:
    """The AWS region of an MSK cluster: from its broker host names, else ``AWS_REGION``."""
    import os

    match = _AWS_REGION.search(settings.get("bootstrap.servers", ""))
    return match.group(1) if match else os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")


def aws_msk_iam_token_cb(settings: Mapping[str, str]) -> Callable[[str], tuple[str, float]]:
    """librdkafka's ``oauth_cb``: a fresh AWS MSK IAM token (signed with the process's AWS credentials)."""
    try:
        from aws_msk_iam_sasl_signer import MSKAuthTokenProvider
    except ImportError:
        raise ValueError("AWS_MSK_IAM needs the AWS signer: pip install 'mirror-core[aws]' "
                         "(aws-msk-iam-sasl-signer-python)") from None
    region = aws_region(settings)
    if region is None:
        raise ValueError("AWS_MSK_IAM: cannot tell the AWS region from bootstrap.servers; set AWS_REGION")
    profile = settings.get(f"{AWS_MARKER}profile")
    role = settings.get(f"{AWS_MARKER}role.arn")
    session = settings.get(f"{AWS_MARKER}role.session.name", "mirror-core")

    def token(_config: str) -> tuple[str, float]:
        if role:
            value, expiry_ms = MSKAuthTokenProvider.generate_auth_token_from_role_arn(region, role, session)
        elif profile:
            value, expiry_ms = MSKAuthTokenProvider.generate_auth_token_from_profile(region, profile)
        else:
            value, expiry_ms = MSKAuthTokenProvider.generate_auth_token(region)
        return value, expiry_ms / 1000

    return token


def declared_mechanism(settings: Mapping[str, str]) -> str:
    """The SASL mechanism these librdkafka settings name (librdkafka's default: GSSAPI)."""
    return (settings.get("sasl.mechanisms") or settings.get("sasl.mechanism") or "GSSAPI").strip().upper()
