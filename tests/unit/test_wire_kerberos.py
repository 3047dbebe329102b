"""The batch path's Kerberos login without a KDC: when it asks for credentials (renewal at half their life, a
refusal backed off but never past the current credentials' end) and when replaced credentials are let go (only
once no security context uses them). The exchange itself runs against a real KDC in
tests/integration/test_security_kerberos.py."""

from __future__ import annotations

import ctypes
import itertools

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
        return _Held(ctypes.c_void_p(n), f"MEMORY:{n}"), 100.0

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
    monkeypatch.setattr(kerberos, "_name", lambda text, kind: ctypes.c_void_p(7))
    monkeypatch.setattr(kerberos, "_release_name", lambda name: None)
    ctx = login.context("kafka", "broker1")
    held = login._held[-1]
    assert held.users == 1 and ctx.target == "kafka@broker1"
    ctx.close()
    ctx.close()
    assert held.users == 0

    def refuse(text: str, kind: str) -> ctypes.c_void_p:
        raise SaslError(f"the Kerberos name {text!r}: bad")

    monkeypatch.setattr(kerberos, "_name", refuse)
    with pytest.raises(SaslError):
        login.context("kafka", "broker1")
    assert held.users == 0
