"""OAUTHBEARER tokens for the copier's own connections, from an OIDC token endpoint by the client-credentials
grant, as librdkafka's ``sasl.oauthbearer.method = oidc`` gets them: ``POST grant_type=client_credentials``
(``&scope=``), the client id and secret in HTTP Basic auth, the endpoint's TLS trust from ``https.ca.pem`` or
``https.ca.location`` (else the system's). One token serves every connection of a cluster until 80 % of its
lifetime has passed (librdkafka refreshes then too)."""

from __future__ import annotations

import base64
import json
import ssl
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass

from mirror_core.wire.sasl import SaslError

#: a token is asked again once this share of its lifetime has passed
REFRESH_AT = 0.8
#: how long one token request may take
TIMEOUT_S = 30.0
#: the provider's logs tell these requests from librdkafka's (the flow's consumer asks for its own tokens too)
USER_AGENT = "mirror-core-wire"


@dataclass(frozen=True)
class Token:
    value: str
    #: monotonic time after which it is asked again
    refresh_at: float


class TokenSource:
    """Tokens for one cluster's connections (thread-safe: every worker of the cluster asks it)."""

    def __init__(self, settings: Mapping[str, str], where: str) -> None:
        self.url = settings["sasl.oauthbearer.token.endpoint.url"].strip()
        self.client_id = settings["sasl.oauthbearer.client.id"]
        self._secret = settings["sasl.oauthbearer.client.secret"]
        self.scope = settings.get("sasl.oauthbearer.scope", "").strip()
        self.where = where
        self._tls: ssl.SSLContext | None = None
        if self.url.lower().startswith("https"):
            self._tls = ssl.create_default_context(cafile=settings.get("https.ca.location") or None,
                                                   cadata=settings.get("https.ca.pem") or None)
        self._lock = threading.Lock()
        self._token: Token | None = None

    def token(self) -> str:
        with self._lock:
            if self._token is None or time.monotonic() >= self._token.refresh_at:
                self._token = self._ask()
            return self._token.value

    def _ask(self) -> Token:
        form = {"grant_type": "client_credentials", **({"scope": self.scope} if self.scope else {})}
        basic = base64.b64encode(f"{self.client_id}:{self._secret}".encode())  # as librdkafka sends them
        request = urllib.request.Request(self.url, data=urllib.parse.urlencode(form).encode(), method="POST", headers={
            "Authorization": f"Basic {basic.decode()}", "Content-Type": "application/x-www-form-urlencoded",
            "Accept": "application/json", "User-Agent": USER_AGENT})
        what = f"{self.where}: OAUTHBEARER token for client '{self.client_id}' from {self.url}"
        asked = time.monotonic()
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT_S, context=self._tls) as answer:
                body = json.loads(answer.read())
        except urllib.error.HTTPError as exc:  # the provider's own answer ({"error": "invalid_client"}) is the why
            said = exc.read(500).decode(errors="replace").strip()
            raise SaslError(f"{what}: refused (HTTP {exc.code}: {said or exc.reason})") from None
        except (OSError, ValueError) as exc:  # unreachable, TLS, or an answer that is not JSON
            raise SaslError(f"{what}: {exc}") from None
        value, lifetime = body.get("access_token"), body.get("expires_in")
        if not isinstance(value, str) or not value:
            raise SaslError(f"{what}: the answer holds no access_token")
        # Without expires_in, librdkafka reads the JWT's exp; an hour is asked again well before most expire.
        life = float(lifetime) if isinstance(lifetime, int | float) and lifetime > 0 else 3600.0
        return Token(value, asked + REFRESH_AT * life)
