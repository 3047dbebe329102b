"""OAUTHBEARER tokens for the copier's own connections, from an OIDC token endpoint by the client-credentials
grant, as librdkafka's ``sasl.oauthbearer.method = oidc`` gets them: ``POST grant_type=client_credentials``
(``&scope=``), the client id and secret in HTTP Basic auth (never sent on to a redirect), the endpoint's TLS trust
from ``https.ca.pem`` or ``https.ca.location`` (else the system's). One token serves every connection of a
cluster; it is asked again once 80 % of its lifetime (the JWT's ``exp``, else ``expires_in``) has passed, and
kept while still valid if the endpoint does not answer then. A failure is remembered for a few seconds (doubling
to a minute), so workers reconnecting do not each ask the endpoint again."""

from __future__ import annotations

import base64
import binascii
import json
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mirror_core.config.sasl import ALLOW_HTTP_KEY, ALLOW_HTTP_MARKER
from mirror_core.wire.sasl import SaslError
from mirror_core.wire.tls import tls_context

#: a token is asked again once this share of its lifetime has passed
REFRESH_AT = 0.8
#: how long one token request may take
TIMEOUT_S = 30.0
#: after a failed request, how long the failure stands before the endpoint is asked again (doubling to the max)
FAILURE_HOLD_S, FAILURE_HOLD_MAX_S = 2.0, 60.0
#: the provider's logs tell these requests from librdkafka's (the flow's consumer asks for its own tokens too)
USER_AGENT = "mirror-core-wire"
#: the largest token answer read (a JWT is a few KB): an endpoint that sends more is refused, not read to its end
MAX_ANSWER_BYTES = 1 << 20


@dataclass(frozen=True)
class Token:
    value: str
    #: monotonic times: asked again from the first; no longer used after the second
    refresh_at: float
    expires_at: float


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect is not followed: urllib would send the client's Basic credentials on to any host."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def _lifetime_s(body: Mapping[str, Any], token: str) -> float | None:
    """Seconds the token stays valid: the JWT's ``exp`` (what the broker checks), else ``expires_in`` (a number,
    or a string of one, as some providers send it)."""
    try:
        payload = token.split(".")[1]
        exp = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))).get("exp")
        if isinstance(exp, int | float):
            return float(exp) - time.time()
    except (IndexError, ValueError, binascii.Error, AttributeError):
        pass  # not a JWT this client can read: the endpoint's own word
    try:
        return float(body.get("expires_in"))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None


def _refusal(exc: urllib.error.HTTPError) -> str:
    """The provider's reason: its JSON ``error`` (and the HTTP status), not the whole body, whose trace ids and
    timestamps change at every request (and would make every retry a new line)."""
    try:
        said = json.loads(exc.read(2000).decode(errors="replace")).get("error")
    except (OSError, ValueError, AttributeError):  # no body, not JSON, or the connection broke while reading it
        said = None
    return f"HTTP {exc.code}: {said}" if isinstance(said, str) else f"HTTP {exc.code}: {exc.reason}"


class TokenSource:
    """Tokens for one cluster's connections (thread-safe: every worker of the cluster asks it)."""

    def __init__(self, settings: Mapping[str, str], where: str) -> None:
        self.url = settings["sasl.oauthbearer.token.endpoint.url"].strip()
        self.client_id = settings["sasl.oauthbearer.client.id"]
        self._secret = settings["sasl.oauthbearer.client.secret"]
        self.scope = settings.get("sasl.oauthbearer.scope", "").strip()
        if self.url.lower().startswith("http:") and settings.get(ALLOW_HTTP_MARKER) != "true":
            raise SaslError(f"{where}: the OAUTHBEARER token endpoint {self.url} is plain http (the client secret "
                            f"would go out in clear): use https, or set {ALLOW_HTTP_KEY} = true")
        handlers: list[urllib.request.BaseHandler] = [_NoRedirect()]
        if self.url.lower().startswith("https"):
            location = settings.get("https.ca.location", "")
            trust = {"ssl.ca.pem": settings.get("https.ca.pem", ""),
                     "ssl.ca.location": "" if location == "probe" else location}
            handlers.append(urllib.request.HTTPSHandler(context=tls_context(
                trust, f"{where}: the OAUTHBEARER token endpoint's trust (https.ca.*)")))
        self._opener = urllib.request.build_opener(*handlers)
        self._lock = threading.Lock()
        self._token: Token | None = None
        self._failure: tuple[SaslError, float, float] | None = None  # (what, until when, how long it held)

    def token(self) -> str:
        with self._lock:
            now = time.monotonic()
            if self._token is not None and now < self._token.refresh_at:
                return self._token.value
            if self._failure is not None and now < self._failure[1]:
                if self._token is not None and now < self._token.expires_at:
                    return self._token.value
                raise self._failure[0]
            try:
                self._token, self._failure = self._ask(), None
            except SaslError as exc:
                hold = min(FAILURE_HOLD_MAX_S, 2 * self._failure[2]) if self._failure else FAILURE_HOLD_S
                self._failure = (exc, time.monotonic() + hold, hold)
                if self._token is not None and now < self._token.expires_at:  # still valid: used meanwhile
                    return self._token.value
                raise
            return self._token.value

    def refused(self, value: str) -> None:
        """A broker refused this token: the next connection asks for a new one."""
        with self._lock:
            if self._token is not None and self._token.value == value:
                self._token = None

    def _ask(self) -> Token:
        form = {"grant_type": "client_credentials", **({"scope": self.scope} if self.scope else {})}
        basic = base64.b64encode(f"{self.client_id}:{self._secret}".encode())  # as librdkafka sends them
        request = urllib.request.Request(self.url, data=urllib.parse.urlencode(form).encode(), method="POST", headers={
            "Authorization": f"Basic {basic.decode()}", "Content-Type": "application/x-www-form-urlencoded",
            "Accept": "application/json", "User-Agent": USER_AGENT})
        what = f"OAUTHBEARER token for client '{self.client_id}' from {self.url}"
        asked = time.monotonic()
        try:
            with self._opener.open(request, timeout=TIMEOUT_S) as answer:
                raw = answer.read(MAX_ANSWER_BYTES + 1)
            if len(raw) > MAX_ANSWER_BYTES:
                raise SaslError(f"{what}: an answer of more than {MAX_ANSWER_BYTES} bytes, not a token")
            body = json.loads(raw)
        except urllib.error.HTTPError as exc:  # the provider's own answer ({"error": "invalid_client"}) is the why
            raise SaslError(f"{what}: refused ({_refusal(exc)})") from None
        except (OSError, ValueError, RecursionError) as exc:  # unreachable, TLS, or an answer that is not JSON
            raise SaslError(f"{what}: {exc}") from None
        value = body.get("access_token") if isinstance(body, dict) else None
        if not isinstance(value, str) or not value:
            raise SaslError(f"{what}: the answer holds no access_token")
        life = _lifetime_s(body, value)
        if life is None or life <= 0:
            raise SaslError(f"{what}: the answer says neither when the token expires (exp, expires_in) nor a "
                            "time still to come")
        return Token(value, asked + REFRESH_AT * life, asked + life)
