"""Kerberos for the copier's own connections (SASL GSSAPI, RFC 4752): security contexts from the system's MIT
GSS-API library (``libgssapi_krb5.so.2``, installed with the Kerberos client packages the record path's
GSSAPI needs too), called through ctypes. The SASL framing around the tokens is in :mod:`sasl`.

Credentials come as librdkafka's settings name them: ``sasl.kerberos.keytab`` and ``.principal`` give a
client keytab, from which the library gets the principal's tickets (again at half their lifetime: see
:class:`KerberosLogin`) in a ticket cache in memory of this process's own; without a keytab the default ticket cache
(``KRB5CCNAME``, filled by ``kinit`` or a sidecar) is used. The broker's service principal is
``<sasl.kerberos.service.name>/<the host this connection dialled>``, as librdkafka names it."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from types import TracebackType

from mirror_core.wire.sasl import SaslError

_OM = ctypes.c_uint32
_MUTUAL, _SEQUENCE, _CONF, _INTEG = 2, 8, 16, 32
_INITIATE = 1
_GSS_CODE, _MECH_CODE = 1, 2
_CONTINUE_NEEDED = 1
_INDEFINITE = 0xFFFFFFFF
_now = time.monotonic  # (a unit test's clock)
#: seconds until a failed renewal is tried again (and the renewal period of credentials of unknown lifetime)
RETRY_RENEWAL_S = 60.0


class _Buffer(ctypes.Structure):
    _fields_ = [("length", ctypes.c_size_t), ("value", ctypes.c_void_p)]


class _KeyValue(ctypes.Structure):
    _fields_ = [("key", ctypes.c_char_p), ("value", ctypes.c_char_p)]


class _KeyValueSet(ctypes.Structure):
    _fields_ = [("count", _OM), ("elements", ctypes.POINTER(_KeyValue))]


_P = ctypes.c_void_p
_B = ctypes.POINTER(_Buffer)
_O = ctypes.POINTER(_OM)
_SIGNATURES: dict[str, list[type]] = {
    "gss_import_name": [_O, _B, _P, ctypes.POINTER(_P)],
    "gss_release_name": [_O, ctypes.POINTER(_P)],
    "gss_acquire_cred_from": [_O, _P, _OM, _P, ctypes.c_int, ctypes.POINTER(_KeyValueSet), ctypes.POINTER(_P),
                              ctypes.POINTER(_P), _O],
    "gss_release_cred": [_O, ctypes.POINTER(_P)],
    "gss_init_sec_context": [_O, _P, ctypes.POINTER(_P), _P, _P, _OM, _OM, _P, _B, ctypes.POINTER(_P), _B, _O, _O],
    "gss_delete_sec_context": [_O, ctypes.POINTER(_P), _B],
    "gss_wrap": [_O, _P, ctypes.c_int, _OM, _B, ctypes.POINTER(ctypes.c_int), _B],
    "gss_unwrap": [_O, _P, _B, _B, ctypes.POINTER(ctypes.c_int), _O],
    "gss_release_buffer": [_O, _B],
    "gss_display_status": [_O, _OM, ctypes.c_int, _P, _O, _B],
}
_lock = threading.Lock()
_loaded: ctypes.CDLL | None = None
#: the process's logins by keytab and principal, kept for its life (a refusal's back-off outlives a flow's restart)
_logins: dict[tuple[str, str], KerberosLogin] = {}
_loaded_krb5: ctypes.CDLL | None = None


def _lib() -> ctypes.CDLL:
    """The GSS-API library, loaded once (a missing one is a line saying what to install)."""
    global _loaded
    with _lock:
        if _loaded is None:
            path = ctypes.util.find_library("gssapi_krb5") or "libgssapi_krb5.so.2"
            try:
                lib = ctypes.CDLL(path)
            except OSError as exc:
                raise SaslError(f"the MIT Kerberos GSS-API library is not installed ({exc}): install the Kerberos "
                                "client packages (Debian: libgssapi-krb5-2 krb5-user; `make install` does)") from None
            for name, args in _SIGNATURES.items():
                fn = getattr(lib, name)
                fn.argtypes, fn.restype = args, _OM
            _loaded = lib
        return _loaded


def _krb5() -> ctypes.CDLL:
    """MIT's Kerberos library (ticket caches), which the GSS-API library itself is linked with."""
    global _loaded_krb5
    with _lock:
        if _loaded_krb5 is None:
            lib = ctypes.CDLL(ctypes.util.find_library("krb5") or "libkrb5.so.3")
            lib.krb5_init_context.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
            lib.krb5_cc_resolve.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)]
            lib.krb5_cc_destroy.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
            lib.krb5_free_context.argtypes = [ctypes.c_void_p]
            lib.krb5_free_context.restype = None
            _loaded_krb5 = lib
        return _loaded_krb5


def _oid(name: str) -> int | None:
    """An OID the library exports (``gss_OID`` variables: the pointer they hold)."""
    return ctypes.c_void_p.in_dll(_lib(), name).value


def _bytes(buf: _Buffer) -> bytes:
    return ctypes.string_at(buf.value, buf.length) if buf.length else b""


def _release(buf: _Buffer) -> None:
    minor = _OM()
    _lib().gss_release_buffer(ctypes.byref(minor), ctypes.byref(buf))


def _status(code: int, kind: int) -> list[str]:
    lines: list[str] = []
    context, minor = _OM(0), _OM()
    while True:
        buf = _Buffer()
        if _lib().gss_display_status(ctypes.byref(minor), code, kind, None, ctypes.byref(context),
                                     ctypes.byref(buf)) != 0:
            break
        lines.append(_bytes(buf).decode(errors="replace"))
        _release(buf)
        if context.value == 0:
            break
    return lines


def _check(major: int, minor: _OM, what: str) -> None:
    """An error status (a routine or calling error) as one line: the library's own words, mechanism's first."""
    if major >> 16:
        mech = _status(minor.value, _MECH_CODE) if minor.value else []  # (0 reads "Unknown error")
        said = [s for s in (*mech, *_status(major, _GSS_CODE)) if s]
        raise SaslError(f"{what}: {'; '.join(dict.fromkeys(said)) or f'GSS-API status {major:#x}'}")


def _buffer(data: bytes) -> tuple[_Buffer, ctypes.Array[ctypes.c_char]]:
    """A buffer over ``data`` (and the array that must outlive it)."""
    raw = ctypes.create_string_buffer(data, len(data))
    return _Buffer(len(data), ctypes.cast(raw, ctypes.c_void_p)), raw


def _name(text: str, kind: str) -> ctypes.c_void_p:
    minor, name = _OM(), ctypes.c_void_p()
    buf, _raw = _buffer(text.encode())
    _check(_lib().gss_import_name(ctypes.byref(minor), ctypes.byref(buf), _oid(kind), ctypes.byref(name)), minor,
           f"the Kerberos name {text!r}")
    return name


def _release_name(name: ctypes.c_void_p) -> None:
    if name.value:
        minor = _OM()
        _lib().gss_release_name(ctypes.byref(minor), ctypes.byref(name))


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
    """Credentials acquired from the keytab, their ticket cache, and the contexts using them."""

    cred: ctypes.c_void_p
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
    next connection ("Ticket expired") rather than getting new ones from the keytab. The replaced ones are let
    go (their cache destroyed) once no security context uses them; a login lives as long as the process."""

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
        what = f"Kerberos credentials of {self.who} from {self.keytab}"
        path = _keytab_file(self.keytab)
        if path is not None and not os.path.isfile(path):
            raise SaslError(f"{what}: the keytab does not exist")
        ccache = f"MEMORY:mirror-core-{uuid.uuid4().hex}"
        store = (_KeyValue * 2)(_KeyValue(b"client_keytab", self.keytab.encode()),
                                _KeyValue(b"ccache", ccache.encode()))
        kv = _KeyValueSet(2, store)
        name = _name(self.principal, "GSS_KRB5_NT_PRINCIPAL_NAME") if self.principal else ctypes.c_void_p()
        held, minor, lifetime = _Held(ctypes.c_void_p(), ccache), _OM(), _OM()
        try:
            major = _lib().gss_acquire_cred_from(ctypes.byref(minor), name, _INDEFINITE, None, _INITIATE,
                                                 ctypes.byref(kv), ctypes.byref(held.cred), None,
                                                 ctypes.byref(lifetime))
            try:
                _check(major, minor, what)
            except SaslError as exc:
                _let_go([held])
                if "No credentials cache found" in str(exc):  # what MIT says of a keytab without the principal
                    raise SaslError(f"{exc} (`klist -kt {self.keytab}` lists whose keys it holds)") from None
                raise
        finally:
            _release_name(name)
        return held, lifetime.value if 0 < lifetime.value < _INDEFINITE else 2 * RETRY_RENEWAL_S

    def context(self, service: str, host: str) -> KerberosContext:
        return KerberosContext(self, service, host)


def _keytab_file(name: str) -> str | None:
    """The file of a keytab name (``FILE:`` and ``WRFILE:`` names too); None for another type (``MEMORY:``...)."""
    kind, colon, rest = name.partition(":")
    if not colon or "/" in kind:
        return name
    return rest if kind.upper() in ("FILE", "WRFILE") else None


def _let_go(held: list[_Held]) -> None:
    """Release credentials and destroy their ticket caches in memory."""
    minor = _OM()
    for h in held:
        if h.cred.value:
            _lib().gss_release_cred(ctypes.byref(minor), ctypes.byref(h.cred))
        _destroy_ccache(h.ccache)
    held.clear()


def _destroy_ccache(name: str) -> None:
    try:
        krb5 = _krb5()
    except OSError:  # the GSS-API library is loaded, so this one is too; the cache is only memory, in any case
        return
    context, cache = ctypes.c_void_p(), ctypes.c_void_p()
    if krb5.krb5_init_context(ctypes.byref(context)) != 0:
        return
    try:
        if krb5.krb5_cc_resolve(context, name.encode(), ctypes.byref(cache)) == 0:
            krb5.krb5_cc_destroy(context, cache)
    finally:
        krb5.krb5_free_context(context)


class KerberosContext:
    """One security context with the broker at ``host``: :meth:`step` until :attr:`complete`, then
    :meth:`unwrap` and :meth:`wrap` for the SASL security-layer negotiation. Its credentials are taken once,
    at the start, and given back at :meth:`close`."""

    def __init__(self, login: KerberosLogin, service: str, host: str) -> None:
        self.login, self.service, self.host = login, service, host
        self.target = f"{service}@{host}"
        self.complete = False
        self._ctx = ctypes.c_void_p()
        self._held = login.take()
        self._cred = self._held.cred if self._held is not None else ctypes.c_void_p()
        try:
            self._name = _name(self.target, "GSS_C_NT_HOSTBASED_SERVICE")
        except BaseException:
            login.give_back(self._held)
            raise

    def __enter__(self) -> KerberosContext:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def step(self, token: bytes) -> bytes:
        """The next token for the broker (``token``: the broker's last one; empty at the start)."""
        minor, out, flags = _OM(), _Buffer(), _OM()
        given, _raw = _buffer(token)
        major = _lib().gss_init_sec_context(
            ctypes.byref(minor), self._cred, ctypes.byref(self._ctx), self._name, _oid("gss_mech_krb5"),
            _MUTUAL | _SEQUENCE | _INTEG | _CONF, 0, None, ctypes.byref(given) if token else None, None,
            ctypes.byref(out), ctypes.byref(flags), None)
        try:
            _check(major, minor, f"a Kerberos ticket for {self.service}/{self.host}")
            if not major & _CONTINUE_NEEDED and not flags.value & _MUTUAL:
                raise SaslError("the broker did not prove its identity (no mutual authentication)")
            self.complete = not major & _CONTINUE_NEEDED
            return _bytes(out)
        finally:
            _release(out)

    def unwrap(self, data: bytes) -> bytes:
        minor, out, conf, qop = _OM(), _Buffer(), ctypes.c_int(), _OM()
        given, _raw = _buffer(data)
        major = _lib().gss_unwrap(ctypes.byref(minor), self._ctx, ctypes.byref(given), ctypes.byref(out),
                                  ctypes.byref(conf), ctypes.byref(qop))
        try:
            _check(major, minor, "the broker's security-layer offer")
            return _bytes(out)
        finally:
            _release(out)

    def wrap(self, data: bytes) -> bytes:
        """``data`` with integrity protection only (RFC 4752 wraps the negotiation without confidentiality)."""
        minor, out, conf = _OM(), _Buffer(), ctypes.c_int()
        given, _raw = _buffer(data)
        major = _lib().gss_wrap(ctypes.byref(minor), self._ctx, 0, 0, ctypes.byref(given), ctypes.byref(conf),
                                ctypes.byref(out))
        try:
            _check(major, minor, "the security-layer answer")
            return _bytes(out)
        finally:
            _release(out)

    def close(self) -> None:
        held, self._held = self._held, None
        try:
            minor = _OM()
            if self._ctx.value:
                _lib().gss_delete_sec_context(ctypes.byref(minor), ctypes.byref(self._ctx), None)
            _release_name(self._name)
        finally:
            self.login.give_back(held)
