"""A SASL_PLAINTEXT/OAUTHBEARER source cluster whose tokens come from an OIDC provider (client-credentials
grant, RS256 JWTs the broker checks against the provider's JWKS): replication works end to end through
token refreshes, the client secret never shows up in logs, status output or ``check``, and a wrong
secret gives a clear error naming the cluster instead of a hang. The batches data path's own client gets its
own tokens and renews its sessions before the broker ends them (KIP-368).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient
from cryptography.hazmat.primitives.asymmetric import rsa

from mirror_core.config.loader import load_config
from mirror_core.wire.oauth import USER_AGENT
from tests.integration.conftest import flow_lines
from tests.kafka_harness import (
    MirrorProcess,
    create_topic,
    produce_sequence,
    read_all,
    wait_until,
    write_config,
)
from tests.oauth_harness import OAuthCluster, running_oauth_cluster
from tests.security_harness import DebugMirror, cli

CLIENT_ID = "mirror-client"
SECRET = "Vx7-oidc-CL1ENT-s3cret-9052"  # distinctive: grepped for everywhere it must not be
WRONG_SECRET = "Qm4-not-the-CL1ENT-s3cret"
LIFETIME_S = 20  # short: the mirror must refresh its tokens during the test
FLOW = "dc1o->dc2"

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def oauth(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OAuthCluster]:
    # connections.max.reauth.ms > 0 makes the broker end sessions when their token expires (KIP-368),
    # so the mirror only keeps reading if it really refreshes its tokens.
    with running_oauth_cluster("dc1o", tmp_path_factory.mktemp("kafka-oauth"), {CLIENT_ID: SECRET},
                               lifetime_s=LIFETIME_S, reauth_ms=60_000) as oc:
        yield oc


def _connect_with(oc: OAuthCluster, token: Callable[[], str], timeout: float = 15) -> str | None:
    """None if the OAUTHBEARER listener accepts this token, else the authentication error."""
    errors: list[KafkaError] = []

    def oauth_cb(_config: str) -> tuple[str, float, str]:
        return token(), time.time() + LIFETIME_S, CLIENT_ID

    client = AdminClient({"bootstrap.servers": oc.sasl_bootstrap, "security.protocol": "SASL_PLAINTEXT",
                          "sasl.mechanisms": "OAUTHBEARER", "oauth_cb": oauth_cb, "error_cb": errors.append,
                          "log_level": "0"})
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        client.poll(0.2)  # serves oauth_cb and error_cb
        if auth := [e for e in errors if e.code() == KafkaError._AUTHENTICATION]:
            return str(auth[0].str())
        try:
            if client.list_topics(timeout=1).brokers:
                return None
        except KafkaException:
            pass
    raise AssertionError(f"neither accepted nor refused within {timeout:.0f}s: {errors}")


def test_broker_accepts_only_tokens_signed_by_the_provider(oauth: OAuthCluster) -> None:
    idp = oauth.idp
    assert _connect_with(oauth, lambda: idp.mint(CLIENT_ID, "kafka")) is None  # the control
    forger = rsa.generate_private_key(65537, 2048)
    # token -> what the broker's validator says about it (server.log)
    cases: dict[str, tuple[Callable[[], str], str]] = {
        "unsigned": (lambda: idp.mint(CLIENT_ID, "kafka", alg="none"), "Malformed JWT"),
        "signed by another key": (lambda: idp.mint(CLIENT_ID, "kafka", key=forger), "invalid signature"),
        "expired": (lambda: idp.mint(CLIENT_ID, "kafka", now=time.time() - 600), "no longer valid"),
        "from another issuer": (lambda: idp.mint(CLIENT_ID, "kafka", issuer="http://127.0.0.1:9"), "Issuer (iss)"),
    }
    for what, (token, reason) in cases.items():
        seen = len(oauth.cluster.log_file.read_text(errors="replace"))
        error = _connect_with(oauth, token)
        assert error is not None and "invalid_token" in error, f"the broker accepted a token {what}: {error}"

        def logged(reason: str = reason, seen: int = seen) -> bool:
            return reason in oauth.cluster.log_file.read_text(errors="replace")[seen:]

        wait_until(logged, 10, what=f"'{reason}' in the broker log for a token {what}")


def test_replication_through_token_refresh_and_no_secret_anywhere(oauth: OAuthCluster, dc2: str, name: str,
                                                                  tmp_path: Path,
                                                                  mirrors: list[MirrorProcess]) -> None:
    idp = oauth.idp
    topic = f"{name}.orders"
    create_topic(oauth.plain_bootstrap, topic, 2)
    produce_sequence(oauth.plain_bootstrap, topic, 2, 40)
    config = write_config(tmp_path / "mm2.properties", {"dc1o": oauth.sasl_bootstrap, "dc2": dc2},
                          oauth.java_lines("dc1o", CLIENT_ID) + flow_lines(name, flow=FLOW))
    settings = load_config(config).cluster("dc1o").client_settings("consumer")
    assert (settings["sasl.oauthbearer.method"], settings["sasl.oauthbearer.client.id"],
            settings["sasl.oauthbearer.token.endpoint.url"]) == ("oidc", CLIENT_ID, idp.token_url)
    before = len(idp.requests)
    m = DebugMirror(config, tmp_path, "oauth").start()
    mirrors.append(m)

    def replicated(n: int) -> bool:
        return len(read_all(dc2, f"dc1o.{topic}", timeout=10)) == n

    wait_until(lambda: replicated(40), 60, interval=0.5, what="40 records replicated")
    source, target = read_all(oauth.plain_bootstrap, topic), read_all(dc2, f"dc1o.{topic}")
    assert [(r.partition, r.offset, r.key, r.value, r.headers, r.timestamp) for r in target] == \
        [(r.partition, r.offset, r.key, r.value, r.headers, r.timestamp) for r in source]

    # The mirror got its tokens from the provider: client-credentials grant, Basic auth, the scope asked.
    mine = idp.requests[before:]
    assert mine and all(r.client_id == CLIENT_ID and r.status == 200 and r.auth == "basic" for r in mine), mine
    assert all(dict(r.form) == {"grant_type": "client_credentials", "scope": "kafka"}
               and r.headers.get("Content-Type") == "application/x-www-form-urlencoded" for r in mine), mine

    # Tokens expire after LIFETIME_S: records written once every first token has expired still arrive,
    # read with refreshed tokens (the broker ends sessions whose token expired).
    first = mine[0].at
    issued = idp.issued_to(CLIENT_ID)
    time.sleep(max(0.0, first + LIFETIME_S + 1 - time.time()))
    produce_sequence(oauth.plain_bootstrap, topic, 2, 20, start=40)
    wait_until(lambda: replicated(60), 60, interval=0.5, what="20 more records replicated after token expiry")
    assert idp.issued_to(CLIENT_ID) > issued, "no token was refreshed"

    # Operator-facing output: check, status, the service's own /status and /metrics.
    check = cli("check", "--config", str(config))
    assert check.returncode == 0, check.stderr
    status = cli("status", "--config", str(config), "--json")
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["flows"][0]["reachable"]
    outputs = {"check": check.stdout + check.stderr, "status": status.stdout + status.stderr,
               "/status": json.dumps(m.status()), "/metrics": m.metrics()}
    assert m.stop() == 0
    outputs["mirror log (DEBUG)"] = m.log()
    for where, text in outputs.items():
        assert SECRET not in text, f"the client secret appears in {where}"
    assert "Traceback" not in outputs["mirror log (DEBUG)"]


def test_wrong_client_secret_gives_a_clear_error(oauth: OAuthCluster, dc2: str, name: str, tmp_path: Path) -> None:
    idp = oauth.idp
    config = write_config(tmp_path / "mm2.properties", {"dc1o": oauth.sasl_bootstrap, "dc2": dc2},
                          oauth.java_lines("dc1o", CLIENT_ID, WRONG_SECRET) + flow_lines(name, flow=FLOW))
    refused = idp.refused_for(CLIENT_ID)
    # The running service says the same while it waits (and keeps running: the secret may be fixed). It runs
    # while the status command waits out the refusal, and check (validation only: the wrong secret is not its
    # business) with them.
    m = MirrorProcess(config, tmp_path, "bad-secret").start()
    try:
        started = time.monotonic()
        with ThreadPoolExecutor(2) as pool:
            checked = pool.submit(cli, "check", "--config", str(config))
            res = cli("status", "--config", str(config), "--json", timeout=60)
            took = time.monotonic() - started
            check = checked.result()
        out = res.stdout + res.stderr
        assert res.returncode == 1, out
        error = json.loads(res.stdout)["flows"][0]["error"]
        # librdkafka's words carry the provider's answer ({"error": "invalid_client"}), not the HTTP status: the
        # token endpoint was asked, and refused.
        assert error.startswith("cluster dc1o: authentication failed") and "OAUTHBEARER token" in error \
            and "invalid_client" in error, error
        assert took < 45, "the failure took too long to report"
        assert idp.refused_for(CLIENT_ID) > refused, "the token endpoint refused nothing (asked by the status " \
            "command, whose error carries its answer, and by the mirror)"
        assert check.returncode == 0, check.stdout + check.stderr
        wait_until(lambda: "cluster dc1o: authentication failed" in m.log() and "OAUTHBEARER token" in m.log(), 45,
                   interval=0.5, what="the token failure in the mirror log")
        assert m.alive()
    finally:
        m.ensure_dead()
    for where, text in {"status": out, "check": check.stdout + check.stderr, "mirror log": m.log()}.items():
        assert WRONG_SECRET not in text and SECRET not in text, f"a client secret appears in {where}"
        assert "Traceback" not in text, where


def test_the_batches_path_reads_and_writes_with_its_own_tokens_and_renews_sessions_before_they_expire(
        oauth: OAuthCluster, name: str, tmp_path: Path, mirrors: list[MirrorProcess]) -> None:
    """replication.data.path = batches from the OAuth cluster to itself under a second alias, so that both its
    fetcher and its sender log in with OAUTHBEARER: the wire client gets its own tokens from the provider
    (client-credentials grant) and opens new connections before the broker ends their sessions (KIP-368, the
    token's expiry): copying goes on past the first tokens' expiry with no connection ended by the broker."""
    idp = oauth.idp
    topic = f"{name}.wire"
    create_topic(oauth.plain_bootstrap, topic, 2)
    produce_sequence(oauth.plain_bootstrap, topic, 2, 40)
    # The copies are dc1o.<topic>, outside the flow's <name>.* topics: nothing is copied twice
    config = write_config(tmp_path / "mm2.properties", {"dc1o": oauth.sasl_bootstrap, "back": oauth.sasl_bootstrap},
                          oauth.java_lines("dc1o", CLIENT_ID) + oauth.java_lines("back", CLIENT_ID)
                          + flow_lines(name, "replication.data.path = batches", flow="dc1o->back"))
    before = len(idp.requests)
    m = DebugMirror(config, tmp_path, "oauth-wire").start()
    mirrors.append(m)

    def replicated(n: int) -> bool:
        return len(read_all(oauth.plain_bootstrap, f"dc1o.{topic}", timeout=10)) == n

    wait_until(lambda: replicated(40), 60, interval=0.5, what="40 records replicated")
    assert "data path: batches" in m.log()  # the precondition: the wire client copies, not librdkafka
    first = idp.requests[before].at
    # Past the first tokens' expiry, and far enough for the broker to have ended a session that was not renewed
    time.sleep(max(0.0, first + 2 * LIFETIME_S + 1 - time.time()))
    produce_sequence(oauth.plain_bootstrap, topic, 2, 20, start=40)
    wait_until(lambda: replicated(60), 60, interval=0.5, what="20 more records replicated after token expiry")
    source, target = read_all(oauth.plain_bootstrap, topic), read_all(oauth.plain_bootstrap, f"dc1o.{topic}")
    assert [(r.partition, r.offset, r.key, r.value, r.headers, r.timestamp) for r in target] == \
        [(r.partition, r.offset, r.key, r.value, r.headers, r.timestamp) for r in source]
    # Its own token requests (librdkafka's clients ask for their own), renewed before they expired: the same
    # grant, Basic auth and scope as librdkafka's
    wire_asked = [r for r in idp.requests[before:] if {k.lower(): v for k, v in r.headers.items()}.get("user-agent")
                  == USER_AGENT]
    assert len(wire_asked) >= 2, idp.requests[before:]
    assert all(r.client_id == CLIENT_ID and r.status == 200 and r.auth == "basic"
               and dict(r.form) == {"grant_type": "client_credentials", "scope": "kafka"} for r in wire_asked)
    assert m.stop() == 0
    log = m.log()
    wire = [line for line in log.splitlines() if "mirror_core.wire" in line]
    assert not [line for line in wire if "WARNING" in line or "ERROR" in line], wire
    assert SECRET not in log and "Traceback" not in log
