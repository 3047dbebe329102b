"""The batch path's Kerberos login without a KDC: when it asks for credentials (renewal at half their life, a
refusal backed off but never past the current credentials' end) and when replaced credentials are let go (only
once no security context uses them), and that whatever the library says is one typed line, never a crash (the
library's real answers to keytabs it cannot use, without a KDC). The exchange itself runs against a real KDC in
tests/integration/test_security_kerberos.py."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from mirror_core.wire import kerberos
from mirror_core.wire.kerberos import RETRY_RENEWAL_S, KerberosLogin, Renewal, _Held
from mirror_core.wire.sasl import SaslError


def test_renewal_at_half_the_lifetime_and_a_refusal_backed_off_but_not_past_the_end() -> None:
    r = Renewal()
    assert r.due(0.0) and not r.valid(0.0)
    r.acquired(0.0, 600.0)
    assert not r.due(299.0) and r.due(300.0) and r.valid(599.0) and not r.valid(600.0)
    r.failed(300.0, "KDC unreachable")  # the current credentials serve on; asked again a minute later
    assert r.refused == "KDC unreachable" and not r.due(359.0) and r.due(360.0)
    r.failed(590.0, "KDC unreachable")  # ten seconds before the end: asked again at the end, not a minute later
    assert r.retry_at == 600.0
    r.failed(600.0, "KDC unreachable")  # ended: connections fail with the refusal for a minute, the KDC not asked
    assert not r.valid(600.0) and not r.due(600.0 + RETRY_RENEWAL_S - 1) and r.due(600.0 + RETRY_RENEWAL_S)
    r.acquired(700.0, 600.0)
    assert r.refused is None and r.valid(1299.0)


@pytest.fixture
def fake_library(monkeypatch: pytest.MonkeyPatch) -> tuple[list[str], list[str]]:
    """(acquisitions' answers to give, caches let go): ``_acquire`` hands out numbered credentials of 100 s (or
    raises when the next answer is an error text); ``_let_go`` records which caches it destroys."""
    answers: list[str] = []
    gone: list[str] = []
    numbers = itertools.count(1)

    def acquire(self: KerberosLogin) -> tuple[_Held, float]:
        answer = answers.pop(0) if answers else "ok"
        if answer != "ok":
            raise SaslError(answer)
        n = next(numbers)
        return _Held(None, f"MEMORY:{n}"), 100.0

    def let_go(held: list[_Held]) -> None:
        gone.extend(h.ccache for h in held)
        held.clear()

    monkeypatch.setattr(KerberosLogin, "_acquire", acquire)
    monkeypatch.setattr(kerberos, "_let_go", let_go)
    return answers, gone


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The login's clock, moved by the test."""
    now = [1000.0]
    monkeypatch.setattr(kerberos, "_now", lambda: now[0])
    return now


def test_replaced_credentials_are_let_go_only_once_no_context_uses_them(
        fake_library: tuple[list[str], list[str]], clock: list[float]) -> None:
    _answers, gone = fake_library
    login = KerberosLogin("/k.keytab", "m@R")
    first = login.take()  # a handshake still in progress (say, waiting on a slow KDC)
    assert first is not None and first.ccache == "MEMORY:1"
    clock[0] += 50  # half the lifetime: renewed
    second = login.take()
    assert second is not None and second.ccache == "MEMORY:2" and gone == []  # the first is still in use
    login.give_back(second)
    clock[0] += 50
    third = login.take()
    assert third is not None and third.ccache == "MEMORY:3" and gone == ["MEMORY:2"]
    login.give_back(first)  # the slow handshake ends: only now are its credentials let go
    assert gone == ["MEMORY:2", "MEMORY:1"]
    login.give_back(third)
    assert gone == ["MEMORY:2", "MEMORY:1"]  # the current ones stay


def test_a_refused_login_is_not_asked_again_by_every_connection(
        fake_library: tuple[list[str], list[str]], clock: list[float]) -> None:
    answers, _gone = fake_library
    login = KerberosLogin("/k.keytab", "m@R")
    answers.extend(["Preauthentication failed", "Preauthentication failed"])
    for _ in range(3):  # one request to the KDC; the other connections get the same line
        with pytest.raises(SaslError, match="Preauthentication failed"):
            login.take()
    assert answers == ["Preauthentication failed"]
    clock[0] += RETRY_RENEWAL_S
    with pytest.raises(SaslError):
        login.take()
    assert answers == []
    clock[0] += RETRY_RENEWAL_S
    held = login.take()  # fixed keytab
    assert held is not None and login.renewal.refused is None
    # A renewal refused near the end: the current credentials serve, and it is asked again at their end
    clock[0] += 95
    answers.append("KDC unreachable")
    assert login.take() is held
    clock[0] += 5
    renewed = login.take()
    assert renewed is not None and renewed is not held


def test_without_a_keytab_the_default_ticket_cache_is_used_and_named() -> None:
    login = KerberosLogin("", "m@R")
    assert login.take() is None
    assert login.who == "the default ticket cache's principal"
    assert KerberosLogin("/k", "").who == "the keytab's first principal"
    assert KerberosLogin("/k", "m@R").who == "m@R"


def test_one_login_per_keytab_and_principal_for_every_flow_and_cluster() -> None:
    a = kerberos.login_for({"sasl.kerberos.keytab": "/unit/a.keytab", "sasl.kerberos.principal": "m@R",
                            "sasl.kerberos.service.name": "kafka"})
    assert kerberos.login_for({"sasl.kerberos.keytab": "/unit/a.keytab", "sasl.kerberos.principal": "m@R",
                               "sasl.kerberos.service.name": "other", "bootstrap.servers": "b:9092"}) is a
    assert kerberos.login_for({"sasl.kerberos.keytab": "/unit/b.keytab", "sasl.kerberos.principal": "m@R"}) is not a


def test_keytab_names_with_a_type_are_checked_as_files_when_they_are_files() -> None:
    assert kerberos._keytab_file("/etc/k.keytab") == "/etc/k.keytab"
    assert kerberos._keytab_file("FILE:/etc/k.keytab") == "/etc/k.keytab"
    assert kerberos._keytab_file("WRFILE:/etc/k.keytab") == "/etc/k.keytab"
    assert kerberos._keytab_file("MEMORY:k") is None
    assert kerberos._keytab_file("./dir:x/k.keytab") == "./dir:x/k.keytab"


def test_a_context_takes_the_credentials_once_and_gives_them_back_once(
        fake_library: tuple[list[str], list[str]], monkeypatch: pytest.MonkeyPatch) -> None:
    """Taken when the context starts, given back once however often it is closed, and given back when the context
    cannot be set up."""
    login = KerberosLogin("/k.keytab", "m@R")
    monkeypatch.setattr(kerberos, "_name", lambda text, kind: kerberos.import_name(b"kafka@broker1",
                                                                                  kerberos.NameType.hostbased_service))
    ctx = login.context("kafka", "broker1")
    held = login._held[-1]
    assert held.users == 1 and ctx.target == "kafka@broker1"
    ctx.close()
    ctx.close()
    assert held.users == 0

    def refuse(text: str, kind: str) -> object:
        raise SaslError(f"the Kerberos name {text!r}: bad")

    monkeypatch.setattr(kerberos, "_name", refuse)
    with pytest.raises(SaslError):
        login.context("kafka", "broker1")
    assert held.users == 0


def test_replaced_credentials_are_released(monkeypatch: pytest.MonkeyPatch) -> None:
    """Letting go drops the login's handle of the credentials (the package releases it, and the library destroys
    the copy's ticket cache, when the last reference goes)."""
    held = [_Held(object(), "MEMORY:a"), _Held(object(), "MEMORY:b")]  # (stand-ins for the handles)
    first = held[0]
    kerberos._let_go(held)
    assert held == [] and first.cred is None


@pytest.mark.parametrize("keytab", ["junk", "empty", "MEMORY:nothing"])
@pytest.mark.parametrize("principal", ["m@R", ""])
def test_a_keytab_the_library_cannot_use_is_one_line_naming_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, keytab: str, principal: str) -> None:
    """The library's real answer (no KDC is asked: the keytab has no key for anyone) is a SaslError of one line,
    the library's words and what to run, never a crash or a traceback."""
    monkeypatch.setenv("KRB5_CONFIG", str(tmp_path / "krb5.conf"))  # (no realm: nothing is asked of a network)
    (tmp_path / "krb5.conf").write_text("[libdefaults]\n default_realm = R\n dns_lookup_kdc = false\n")
    files = {"junk": bytes(range(256)) * 2, "empty": b"\x05\x02"}
    if keytab in files:
        (tmp_path / keytab).write_bytes(files[keytab])
        keytab = str(tmp_path / keytab)
    login = KerberosLogin(keytab, principal)
    with pytest.raises(SaslError) as err:
        login.take()
    line = str(err.value)
    assert line.startswith(f"Kerberos credentials of {login.who} from {keytab}: ") and "\n" not in line
    assert f"`klist -kt {keytab}` lists whose keys it holds" in line
    assert login.renewal.refused == line  # backed off: the next connection gets the same line


def test_a_library_error_is_one_line_of_the_librarys_words() -> None:
    """The library's words for the status codes, the mechanism's first; a code it cannot put in words (a
    mechanism's code raised outside a call, whose words the library keeps per call and thread) is left out rather
    than quoted as a failure of the library."""
    refused = kerberos.GSSError(0x70000, 2529639107)  # GSS_S_NO_CRED, KRB5_FCC_NOFILE
    line = str(kerberos._said(refused, "Kerberos credentials of x@R"))
    assert line.startswith("Kerberos credentials of x@R: ") and "\n" not in line and "gss_display_status" not in line
    assert line.endswith("No credentials were supplied, or the credentials were unavailable or inaccessible")
    assert str(kerberos._said(kerberos.GSSError(0x70000, 0), "x")) == \
        "x: No credentials were supplied, or the credentials were unavailable or inaccessible"
    assert str(kerberos._said(ValueError("bad\ntoken"), "the offer")) == "the offer: bad token"


def test_a_security_context_turns_every_library_error_into_a_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """No default ticket cache: the library's refusal is a SaslError naming the broker's service; wrap and unwrap
    before the context is complete are refused too, and closing it twice is harmless."""
    monkeypatch.setenv("KRB5CCNAME", "MEMORY:mirror-core-unit-empty")
    with KerberosLogin("", "").context("kafka", "broker1") as ctx:
        with pytest.raises(SaslError, match=r"^a Kerberos ticket for kafka/broker1: .*credentials"):
            ctx.step(b"")
        with pytest.raises(SaslError, match="before the security context was complete"):
            ctx.wrap(b"\x01")
        with pytest.raises(SaslError, match="before the security context was complete"):
            ctx.unwrap(b"\x01")
    ctx.close()


def test_without_the_gssapi_package_gssapi_is_a_line_saying_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kerberos, "_UNAVAILABLE", "No module named 'gssapi'")
    with pytest.raises(SaslError, match=r"cannot be used \(No module named 'gssapi'\): install .*gssapi package"):
        KerberosLogin("", "").context("kafka", "broker1")
    login = KerberosLogin("/k.keytab", "m@R")
    with pytest.raises(SaslError, match="install"):
        login.take()
