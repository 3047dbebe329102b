"""Kerberos for the copier's own connections (SASL GSSAPI, RFC 4752): security contexts from the system's MIT
GSS-API library (``libgssapi_krb5.so.2``, installed with the Kerberos client packages the record path's
GSSAPI needs too), called through the ``gssapi`` package (python-gssapi, as kafka-python and aiokafka use it),
whose typed bindings turn every library error into an exception. The SASL framing around the tokens is in
:mod:`sasl`.

Credentials come as librdkafka's settings name them: ``sasl.kerberos.keytab`` and ``.principal`` give a
client keytab, from which the library gets the principal's tickets (again at half their lifetime: see
:class:`KerberosLogin`) in a ticket cache in memory of this process's own; without a keytab the default ticket cache
(``KRB5CCNAME``, filled by ``kinit`` or a sidecar) is used. The broker's service principal is
``<sasl.kerberos.service.name>/<the host this connection dialled>``, as librdkafka names it."""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING

from mirror_core.wire.sasl import SaslError

try:  # the package, and the MIT library it is linked with: missing, GSSAPI fails with a line saying so
    from gssapi.raw.ext_cred_imp_exp import export_cred, import_cred
    from gssapi.raw.ext_cred_store import acquire_cred_from
    from gssapi.raw.message import unwrap, wrap
    from gssapi.raw.misc import GSSError
    from gssapi.raw.names import import_name
    from gssapi.raw.oids import OID
    from gssapi.raw.sec_contexts import delete_sec_context, init_sec_context
    from gssapi.raw.types import NameType, RequirementFlag
except ImportError as exc:
    _UNAVAILABLE = str(exc)
else:
    _UNAVAILABLE = ""
    _KRB5 = OID.from_int_seq("1.2.840.113554.1.2.2")
    #: mutual authentication (the broker proves it is the service), sequence checks, integrity, confidentiality
    _FLAGS = [RequirementFlag.mutual_authentication, RequirementFlag.out_of_sequence_detection,
              RequirementFlag.integrity, RequirementFlag.confidentiality]

if TYPE_CHECKING:
    from gssapi.raw.creds import Creds
    from gssapi.raw.names import Name
    from gssapi.raw.sec_contexts import SecurityContext

_now = time.monotonic  # (a unit test's clock)
#: seconds until a failed renewal is tried again (and the renewal period of credentials of unknown lifetime)
RETRY_RENEWAL_S = 60.0
_lock = threading.Lock()
#: the process's logins by keytab and principal, kept for its life (a refusal's back-off outlives a flow's restart)
_logins: dict[tuple[str, str], KerberosLogin] = {}


def _require() -> None:
    """A line saying what to install when the ``gssapi`` package or the MIT library cannot be loaded."""
    if _UNAVAILABLE:
        raise SaslError(f"the MIT Kerberos GSS-API library cannot be used ({_UNAVAILABLE}): install the Kerberos "
                        "client packages (Debian: libgssapi-krb5-2 krb5-user) and the gssapi package "
                        "(`make install` does)")


def _said(exc: Exception, what: str) -> SaslError:
    """A library error as one line: the library's own words, the mechanism's first."""
    if not isinstance(exc, GSSError):
        return SaslError(f"{what}: {exc}".replace("\n", " "))
    said: list[str] = []
    for code, major in ((exc.min_code, False), (exc.maj_code, True)):
        if code:  # (a minor 0 reads "Unknown error")
            try:
                said += exc.get_all_statuses(code, major)
            except Exception:  # the line goes out without the library's words
                continue
    said = [s.replace("\n", " ") for s in said if s and "gss_display_status call returned failure" not in s]
    return SaslError(f"{what}: {'; '.join(dict.fromkeys(said)) or f'GSS-API status {exc.maj_code:#x}'}")


def _name(text: str, kind: str) -> Name:
    """A GSS-API name: ``kind`` is "principal" (``user@REALM``) or "service" (``service@host``)."""
    _require()
    try:
        return import_name(text.encode(), NameType.kerberos_principal if kind == "principal"
                           else NameType.hostbased_service)
    except (GSSError, ValueError) as exc:
        raise _said(exc, f"the Kerberos name {text!r}") from None


@dataclass
class Renewal:
    """When a keytab login asks the KDC for credentials (the times are the caller's monotonic clock)."""

    renew_at: float = 0.0  # half the current credentials' lifetime
    expires_at: float = 0.0
    retry_at: float = 0.0  # after a refusal
    refused: str | None = None  # the last refusal, until credentials are acquired again

    def due(self, now: float) -> bool:
        return now >= self.renew_at and now >= self.retry_at

    def acquired(self, now: float, lifetime_s: float) -> None:
        self.renew_at, self.expires_at = now + lifetime_s / 2, now + lifetime_s
        self.retry_at, self.refused = 0.0, None

    def failed(self, now: float, why: str) -> None:
        """Asked again after :data:`RETRY_RENEWAL_S`, or when the current credentials end if that is sooner (a
        retry must not be scheduled past them). Until then connections fail with ``why`` without asking the KDC:
        a stale keytab retried by every connection would be a stream of failed logins, which a KDC's lockout
        policy counts against the principal (the record path's login too)."""
        self.refused = why
        self.retry_at = min(now + RETRY_RENEWAL_S, self.expires_at) if now < self.expires_at else now + RETRY_RENEWAL_S

    def valid(self, now: float) -> bool:
        return now < self.expires_at


@dataclass(eq=False)
class _Held:
    """Credentials acquired from the keytab, the ticket cache they were fetched into, and the contexts using
    them."""

    cred: Creds | None
    ccache: str
    users: int = 0
    retired: bool = False  # replaced by newer ones: let go once no context uses them


def login_for(settings: Mapping[str, str]) -> KerberosLogin:
    """The process's login for the keytab and principal of these settings: one for every flow and cluster that
    uses them, restarts included, so a refused login is asked of the KDC once per back-off, not once per flow
    and restart."""
    key = (settings.get("sasl.kerberos.keytab", "").strip(), settings.get("sasl.kerberos.principal", "").strip())
    with _lock:
        login = _logins.get(key)
        if login is None:
            login = _logins[key] = KerberosLogin(*key)
        return login


class KerberosLogin:
    """Kerberos credentials of one keytab and principal, shared by every connection that uses them (the library
    locks them; :func:`login_for` gives each pair's one).

    From a keytab, new credentials are acquired once half of the current ones' lifetime has passed, into a new
    ticket cache in memory: MIT's library keeps using a cache's tickets until they expire and then fails the
    next connection ("Ticket expired") rather than getting new ones from the keytab. The security contexts use
    a copy of them (exported and imported) in a ticket cache of the copy's own, which the library destroys, the
    service tickets with it, when the replaced credentials are let go, once no security context uses them; the
    cache the tickets were fetched into keeps their ticket-granting ticket (a kilobyte or two per renewal) until
    the process ends, as the library destroys no cache that it was asked to fill. A login lives as long as the
    process."""

    def __init__(self, keytab: str, principal: str) -> None:
        self.keytab, self.principal = keytab, principal
        self.renewal = Renewal()
        self._held: list[_Held] = []  # the current credentials last
        self._lock = threading.Lock()

    @property
    def who(self) -> str:
        """The principal as error lines name it."""
        if self.keytab:
            return self.principal or "the keytab's first principal"
        return "the default ticket cache's principal"

    def take(self) -> _Held | None:
        """Credentials for a new security context, counted as used until :meth:`give_back` (None: the default
        ticket cache's). From a keytab they are acquired at the first connection and renewed at half their
        lifetime; while a renewal is refused the current ones serve until they end."""
        if not self.keytab:
            return None
        with self._lock:
            now = _now()
            if self.renewal.due(now):
                try:
                    held, lifetime_s = self._acquire()
                except SaslError as exc:
                    self.renewal.failed(now, str(exc))
                else:
                    self.renewal.acquired(now, lifetime_s)
                    for old in self._held:
                        old.retired = True
                    self._held.append(held)
                    self._sweep()
            current = self._held[-1] if self._held else None
            if current is None or not self.renewal.valid(now):
                raise SaslError(self.renewal.refused or f"the Kerberos credentials of {self.who} have ended")
            current.users += 1
            return current

    def give_back(self, held: _Held | None) -> None:
        if held is not None:
            with self._lock:
                held.users -= 1
                self._sweep()

    def _sweep(self) -> None:
        done = [h for h in self._held if h.retired and h.users == 0]
        for h in done:
            self._held.remove(h)
        _let_go(done)

    def _acquire(self) -> tuple[_Held, float]:
        """Credentials from the keytab into a new ticket cache in memory, and their lifetime in seconds."""
        _require()
        what = f"Kerberos credentials of {self.who} from {self.keytab}"
        path = _keytab_file(self.keytab)
        if path is not None and not os.path.isfile(path):
            raise SaslError(f"{what}: the keytab does not exist")
        name = _name(self.principal, "principal") if self.principal else None
        ccache = f"MEMORY:mirror-core-{uuid.uuid4().hex}"
        store: dict[bytes | str, bytes | str] = {"client_keytab": self.keytab, "ccache": ccache}
        try:
            got = acquire_cred_from(store, name=name, mechs=[_KRB5], usage="initiate")
            # The contexts' copy, in a cache the library destroys when the copy is released
            cred = import_cred(export_cred(got.creds))
        except (GSSError, ValueError) as exc:
            error = _said(exc, what)
            if "No credentials cache found" in str(error):  # what MIT says of a keytab without the principal
                raise SaslError(f"{error} (`klist -kt {self.keytab}` lists whose keys it holds)") from None
            raise error from None
        lifetime = got.lifetime or 0  # (None: indefinite)
        return _Held(cred, ccache), float(lifetime) if lifetime > 0 else 2 * RETRY_RENEWAL_S

    def context(self, service: str, host: str) -> KerberosContext:
        return KerberosContext(self, service, host)


def _keytab_file(name: str) -> str | None:
    """The file of a keytab name (``FILE:`` and ``WRFILE:`` names too); None for another type (``MEMORY:``...)."""
    kind, colon, rest = name.partition(":")
    if not colon or "/" in kind:
        return name
    return rest if kind.upper() in ("FILE", "WRFILE") else None


def _let_go(held: list[_Held]) -> None:
    """Release credentials: the package releases a handle when its last reference goes, and the library then
    destroys the copy's ticket cache in memory."""
    for h in held:
        h.cred = None
    held.clear()


class KerberosContext:
    """One security context with the broker at ``host``: :meth:`step` until :attr:`complete`, then
    :meth:`unwrap` and :meth:`wrap` for the SASL security-layer negotiation. Its credentials are taken once,
    at the start, and given back at :meth:`close`."""

    def __init__(self, login: KerberosLogin, service: str, host: str) -> None:
        self.login, self.service, self.host = login, service, host
        self.target = f"{service}@{host}"
        self.complete = False
        self._ctx: SecurityContext | None = None
        _require()
        self._held = login.take()
        self._cred = self._held.cred if self._held is not None else None
        try:
            self._name = _name(self.target, "service")
        except BaseException:
            login.give_back(self._held)
            raise

    def __enter__(self) -> KerberosContext:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def step(self, token: bytes) -> bytes:
        """The next token for the broker (``token``: the broker's last one; empty at the start)."""
        try:
            res = init_sec_context(self._name, creds=self._cred, context=self._ctx, mech=_KRB5, flags=_FLAGS,
                                   input_token=token or None)
        except (GSSError, ValueError) as exc:
            raise _said(exc, f"a Kerberos ticket for {self.service}/{self.host}") from None
        self._ctx = res.context
        if not res.more_steps and not int(res.flags) & int(RequirementFlag.mutual_authentication):
            raise SaslError("the broker did not prove its identity (no mutual authentication)")
        self.complete = not res.more_steps
        return res.token or b""

    def unwrap(self, data: bytes) -> bytes:
        if self._ctx is None or not self.complete:
            raise SaslError("the broker's security-layer offer came before the security context was complete")
        try:  # (gssapi 1.12's stub names the package's high-level subclass of the raw context this takes)
            return unwrap(self._ctx, data).message  # type: ignore[arg-type]
        except (GSSError, ValueError) as exc:
            raise _said(exc, "the broker's security-layer offer") from None

    def wrap(self, data: bytes) -> bytes:
        """``data`` with integrity protection only (RFC 4752 wraps the negotiation without confidentiality)."""
        if self._ctx is None or not self.complete:
            raise SaslError("the security-layer answer came before the security context was complete")
        try:  # (the same stub as unwrap's)
            return wrap(self._ctx, data, confidential=False).message  # type: ignore[arg-type]
        except (GSSError, ValueError) as exc:
            raise _said(exc, "the security-layer answer") from None

    def close(self) -> None:
        held, self._held, self._cred = self._held, None, None
        ctx, self._ctx = self._ctx, None
        try:
            if ctx is not None:
                delete_sec_context(ctx)
        except GSSError:
            pass  # (a context the library no longer knows: nothing to delete)
        finally:
            self.login.give_back(held)
