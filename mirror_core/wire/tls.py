"""The TLS client context of a cluster, built from its librdkafka ``ssl.*`` settings as librdkafka would: one
place for the mirror's own connections and for the OAuth token endpoint's HTTPS."""

from __future__ import annotations

import os
import ssl
from collections.abc import Callable, Mapping

from mirror_core.config.wire_support import curve_name
from mirror_core.wire.errors import WireError


def tls_context(settings: Mapping[str, str], where: str) -> ssl.SSLContext:
    """The TLS client context librdkafka would build from these settings: trusted CAs (``ssl.ca.pem`` in
    memory, ``ssl.ca.location`` a file or directory, ``probe`` or nothing: the system's), the client certificate
    (``ssl.certificate.pem``/``ssl.key.pem`` in memory or ``.location`` files, ``ssl.key.password``),
    verification (``enable.ssl.certificate.verification``, ``ssl.endpoint.identification.algorithm``: https
    checks the broker's host name, as librdkafka does by default), ``ssl.cipher.suites`` (OpenSSL's cipher-list
    syntax, as librdkafka), ``ssl.crl.location`` (the broker's certificate checked against the CRL, leaf only, as
    librdkafka) and ``ssl.curves.list`` of one curve. What else of ``ssl.*`` it honours or not is described once,
    in config/wire_support.py: the loader refuses a flow on this client whose settings it does not honour."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    verify = settings.get("enable.ssl.certificate.verification", "true").strip().lower() != "false"
    ctx.check_hostname = verify and settings.get("ssl.endpoint.identification.algorithm", "https").lower() == "https"
    ctx.verify_mode = ssl.CERT_REQUIRED if verify else ssl.CERT_NONE
    try:
        location = settings.get("ssl.ca.location", "").strip()
        if settings.get("ssl.ca.pem"):
            ctx.load_verify_locations(cadata=settings["ssl.ca.pem"])
        elif location and location != "probe":
            if os.path.isdir(location):
                ctx.load_verify_locations(capath=location)
            else:
                ctx.load_verify_locations(cafile=location)
        else:
            ctx.load_default_certs()
        crl = settings.get("ssl.crl.location", "").strip()
        if crl:
            ctx.load_verify_locations(cafile=crl)
            ctx.verify_flags |= ssl.VERIFY_CRL_CHECK_LEAF
        # An empty password, never none: OpenSSL would prompt on the terminal for an encrypted key's.
        password = settings.get("ssl.key.password") or ""
        in_memory = [k for k in ("ssl.certificate.pem", "ssl.key.pem") if settings.get(k)]
        if len(in_memory) == 1:
            raise WireError(f"{where}: {in_memory[0]} is set without "
                            f"{({'ssl.certificate.pem', 'ssl.key.pem'} - set(in_memory)).pop()}: the client "
                            "certificate and its key are given together")
        if in_memory:
            _load_identity_in_memory(ctx, settings["ssl.certificate.pem"], settings["ssl.key.pem"], password)
        elif settings.get("ssl.certificate.location"):
            ctx.load_cert_chain(settings["ssl.certificate.location"], settings.get("ssl.key.location"), password)
    except (ssl.SSLError, OSError) as exc:
        raise WireError(f"{where}: the TLS settings do not load: {exc.__class__.__name__}: {exc}") from None
    for key, apply in (("ssl.cipher.suites", ctx.set_ciphers), ("ssl.curves.list", _curve_setter(ctx))):
        value = settings.get(key, "").strip()
        if value:
            try:
                apply(value)
            except (ssl.SSLError, ValueError) as exc:
                raise WireError(f"{where}: {key} = {value} is not taken by Python's ssl ({exc}): set it as "
                                "config/wire_support.py describes, or use replication.data.path = records") from None
    return ctx


def _curve_setter(ctx: ssl.SSLContext) -> Callable[[str], None]:
    """``ssl.curves.list`` of one curve (Python's ssl sets one key-exchange group; a list is refused)."""
    def apply(value: str) -> None:
        curve = curve_name(value)
        if curve is None:
            raise ValueError("a list of curves: Python's ssl sets one")
        ctx.set_ecdh_curve(curve)

    return apply


def _load_identity_in_memory(ctx: ssl.SSLContext, cert_pem: str, key_pem: str, password: str | None) -> None:
    """``ssl`` loads a certificate chain from files only: an anonymous in-memory file (never on a disk)
    holds the key while it loads."""
    fd = os.memfd_create("mirror-core-identity", os.MFD_CLOEXEC)
    try:
        os.write(fd, (cert_pem.rstrip() + "\n" + key_pem.rstrip() + "\n").encode())
        ctx.load_cert_chain(f"/proc/self/fd/{fd}", password=password)
    finally:
        os.close(fd)
