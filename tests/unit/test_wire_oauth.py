"""The batch-copying client's OAUTHBEARER tokens (mirror_core/wire/oauth.py), from the tests' own OIDC token
endpoint (a real HTTP server, tests/oauth_harness.py): the client-credentials grant as librdkafka asks for it,
one token shared until 80 % of its lifetime, and a refusal said in one line without the secret."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from mirror_core.wire.oauth import USER_AGENT, TokenSource
from mirror_core.wire.sasl import SaslError
from tests.oauth_harness import TokenServer

SECRET = "Zq9-wire-CL1ENT-s3cret"


@pytest.fixture
def idp() -> Iterator[TokenServer]:
    server = TokenServer({"mirror": SECRET}, lifetime_s=2).start()
    yield server
    server.stop()


def settings(idp: TokenServer, secret: str = SECRET) -> dict[str, str]:
    return {"sasl.oauthbearer.method": "oidc", "sasl.oauthbearer.token.endpoint.url": idp.token_url,
            "sasl.oauthbearer.client.id": "mirror", "sasl.oauthbearer.client.secret": secret,
            "sasl.oauthbearer.scope": "kafka"}


def test_one_token_is_shared_until_most_of_its_lifetime_has_passed(idp: TokenServer) -> None:
    tokens = TokenSource(settings(idp), "source cluster dc1")
    first = tokens.token()
    assert tokens.token() == first and idp.issued_to("mirror") == 1
    time.sleep(2 * 0.8 + 0.1)  # past 80 % of the 2 s lifetime
    assert tokens.token() != first and idp.issued_to("mirror") == 2
    asked = idp.requests_by("mirror")
    assert all(r.auth == "basic" and dict(r.form) == {"grant_type": "client_credentials", "scope": "kafka"}
               and {k.lower(): v for k, v in r.headers.items()}["user-agent"] == USER_AGENT for r in asked), asked


def test_a_refused_client_is_one_line_with_the_providers_answer_and_no_secret(idp: TokenServer) -> None:
    with pytest.raises(SaslError) as err:
        TokenSource(settings(idp, "not-" + SECRET), "source cluster dc1").token()
    said = str(err.value)
    assert said.startswith(f"source cluster dc1: OAUTHBEARER token for client 'mirror' from {idp.token_url}: "
                           "refused (HTTP 401: ") and "invalid_client" in said, said
    assert SECRET not in said and "\n" not in said
