"""A Kerberos source cluster (SASL_PLAINTEXT with GSSAPI) backed by a real MIT KDC on loopback: the broker
refuses clients without a ticket, the mirror logs in from a keytab given in the Java/MM2 form
(``Krb5LoginModule`` in ``sasl.jaas.config``) and replicates records exactly; a keytab that does not
match the principal gives a clear authentication error naming the cluster, not a hang.

Needs confluent-kafka built with SASL GSSAPI (``scripts/ensure-gssapi-client.sh``, run by ``make install``:
the PyPI wheel has no GSSAPI) and the MIT Kerberos programs (installed by the same script).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaException, Producer

from mirror_core.config.loader import load_config
from mirror_core.errors import MirrorError
from tests.integration.conftest import flow_lines
from tests.kafka_harness import REPO, MirrorProcess, create_topic, produce_sequence, read_all, wait_until, write_config
from tests.kerberos_harness import KerberosCluster, missing_tools, running_kerberos_cluster

FLOW = "dc1k->dc2"


def _gssapi_client() -> str | None:
    """Why this client cannot do GSSAPI, or None."""
    try:
        Producer({"builtin.features": "sasl_gssapi", "log_level": 0})
    except KafkaException as exc:
        return f"confluent-kafka has no SASL GSSAPI ({exc}); run: bash scripts/ensure-gssapi-client.sh"
    if missing := missing_tools():
        return f"MIT Kerberos programs missing ({', '.join(missing)}); run: bash scripts/ensure-gssapi-client.sh"
    return None


@pytest.fixture(scope="module")
def kerberos(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KerberosCluster]:
    # A missing install step fails loudly here instead of skipping: `make install` provides both.
    problem = _gssapi_client()
    assert problem is None, problem
    with running_kerberos_cluster("dc1k", tmp_path_factory.mktemp("kafka-kerberos")) as kc:
        yield kc


class KerberosMirror(MirrorProcess):
    """``mirror-core run`` with the KDC's ``KRB5_CONFIG`` and a ticket cache of its own (``KRB5CCNAME``)."""

    def __init__(self, config: Path, log_dir: Path, name: str, env: dict[str, str]) -> None:
        super().__init__(config, log_dir, name)
        self.env = env

    def start(self) -> KerberosMirror:
        log = open(self.log_path, "ab")  # noqa: SIM115 - owned by the child
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "mirror_core", "run", "--config", str(self.config),
             "--metrics-port", str(self.port)],
            stdout=log, stderr=subprocess.STDOUT, cwd=REPO,
            env={**{k: v for k, v in self.env.items() if k != "MIRROR_CORE_DB_URL"}, "PYTHONUNBUFFERED": "1"})
        log.close()
        return self


# Run in a child process: the Kerberos library reads KRB5_CONFIG / KRB5CCNAME from its own environment.
# Error callbacks are served by poll(), so poll between short metadata requests: a refusal is seen at once.
_PROBE = """
import json, sys, time
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient
errors = []
conf = dict(json.loads(sys.argv[1]), error_cb=lambda e: errors.append([e.name(), e.str()]), log_level=0)
client = AdminClient(conf)
ok, deadline = False, time.monotonic() + 15
while not ok and time.monotonic() < deadline and not any(n == "_AUTHENTICATION" for n, _ in errors):
    try:
        ok = bool(client.list_topics(timeout=0.5).brokers)
    except KafkaException:
        client.poll(0.1)
print(json.dumps({"ok": ok, "errors": errors}))
"""


def probe(settings: dict[str, str], env: dict[str, str]) -> tuple[bool, list[tuple[str, str]]]:
    """(metadata request answered, [(error name, message) from the error callback])."""
    res = subprocess.run([sys.executable, "-c", _PROBE, json.dumps(settings)], capture_output=True, text=True,
                         env=env, timeout=30, check=True)
    out = json.loads(res.stdout.strip().splitlines()[-1])
    return bool(out["ok"]), [(str(n), str(s)) for n, s in out["errors"]]


def test_kerberos_source_replicates_exactly(kerberos: KerberosCluster, dc2: str, name: str, tmp_path: Path,
                                           mirrors: list[MirrorProcess]) -> None:
    # Precondition: the listener really requires Kerberos. Without a ticket (kinit disabled, empty cache)
    # the client is refused; the same client with a ticket from the keytab gets in.
    no_ticket = dict(kerberos.librdkafka_settings(), **{"sasl.kerberos.min.time.before.relogin": "0"})
    ok, errors = probe(no_ticket, kerberos.client_env(tmp_path / "no-ticket.ccache"))
    assert not ok and any(n == "_AUTHENTICATION" for n, _ in errors), errors
    ok, errors = probe(kerberos.librdkafka_settings(), kerberos.client_env(tmp_path / "probe.ccache"))
    assert ok, errors

    topic = f"{name}.orders"
    create_topic(kerberos.plain_bootstrap, topic, 2)
    produce_sequence(kerberos.plain_bootstrap, topic, 2, 200)
    config = write_config(tmp_path / "mm2.properties", {"dc1k": kerberos.sasl_bootstrap, "dc2": dc2},
                          kerberos.lines("dc1k") + flow_lines(name, flow=FLOW))
    # The Java lines become exactly the librdkafka settings the probe above used.
    settings = load_config(config).cluster("dc1k").client_settings("consumer")
    for key, value in kerberos.librdkafka_settings().items():
        assert settings[key] == value, (key, settings.get(key))

    ccache = tmp_path / "mirror.ccache"
    m = KerberosMirror(config, tmp_path, "kerberos", kerberos.client_env(ccache)).start()
    mirrors.append(m)
    remote = f"dc1k.{topic}"
    wait_until(lambda: len(read_all(dc2, remote, timeout=10)) >= 200, 60, interval=0.5, what="200 records replicated")
    assert m.stop(30) == 0

    # Exactly the source records: same partitions, offsets, keys, values, headers and timestamps.
    source, target = read_all(kerberos.plain_bootstrap, topic), read_all(dc2, remote)
    assert len(target) == 200
    assert [(r.partition, r.offset, r.key, r.value, r.timestamp) for r in target] == \
        [(r.partition, r.offset, r.key, r.value, r.timestamp) for r in source]
    assert all(dict(r.headers).get("seq") == dict(s.headers).get("seq") for r, s in zip(target, source, strict=True))

    # It was Kerberos, with the mirror's own ticket cache: it holds a service ticket for the broker. The
    # broker's log is the judge of who logged in (librdkafka's "Authenticated as" repeats its own config).
    klist = subprocess.run(["klist", "-c", f"FILE:{ccache}"], capture_output=True, text=True,
                           env=kerberos.client_env(ccache), timeout=10, check=False)
    assert klist.returncode == 0 and f"kafka/127.0.0.1@{kerberos.kdc.realm}" in klist.stdout, klist
    assert f"{kerberos.client_principal} for kafka/127.0.0.1@" in kerberos.kdc.log_file.read_text()
    assert f"authenticationID={kerberos.client_principal};" in kerberos.cluster.log_file.read_text()
    assert "Traceback" not in m.log()


@pytest.mark.parametrize("problem", ["keytab of another principal", "principal deleted from the KDC"])
def test_wrong_keytab_or_principal_gives_an_authentication_error_not_a_hang(
        kerberos: KerberosCluster, dc2: str, name: str, tmp_path: Path, mirrors: list[MirrorProcess],
        problem: str) -> None:
    if problem == "keytab of another principal":  # refused locally: kinit finds no key for mirror@
        principal, keytab = kerberos.client_principal, kerberos.kdc.principal(f"other-{name}", tmp_path / "o.keytab")
        kinit_says = f"Keytab contains no suitable keys for {principal}"
    else:  # refused by the KDC: a keytab that was valid, of a principal removed since
        principal = f"gone-{name}@{kerberos.kdc.realm}"
        keytab = kerberos.kdc.principal(f"gone-{name}", tmp_path / "gone.keytab")
        kerberos.kdc.delete(f"gone-{name}")
        kinit_says = f"Client '{principal}' not found in Kerberos database"
    config = write_config(tmp_path / "mm2.properties", {"dc1k": kerberos.sasl_bootstrap, "dc2": dc2},
                          kerberos.lines("dc1k", principal=principal, keytab=keytab) + flow_lines(name, flow=FLOW))
    env = kerberos.client_env(tmp_path / "bad.ccache")

    # The running service (started first: it and the CLI wait in parallel) reports the cluster and keeps
    # running, since the keytab may be fixed; kinit's own reason reaches its log too.
    m = KerberosMirror(config, tmp_path, "bad", env).start()
    mirrors.append(m)
    res = subprocess.run([sys.executable, "-m", "mirror_core", "status", "--config", str(config), "--json"],
                         capture_output=True, text=True, cwd=REPO, timeout=60, env=env)
    assert res.returncode == 1, res.stdout + res.stderr
    error = json.loads(res.stdout)["flows"][0]["error"]
    assert error.startswith("cluster dc1k: ") and "authentication" in error, error
    assert "Traceback" not in res.stderr
    wait_until(lambda: "cluster dc1k: authentication" in m.log(), 45, interval=0.5,
               what="'cluster dc1k: authentication' in the mirror log")
    assert m.alive()
    assert kinit_says in m.log() and "Traceback" not in m.log()


def test_the_batches_path_logs_in_with_kerberos_and_copies_exactly(
        kerberos: KerberosCluster, name: str, tmp_path: Path, mirrors: list[MirrorProcess]) -> None:
    """replication.data.path = batches from the Kerberos cluster to itself under a second alias: the config names
    only the GSSAPI listener, so the batch path's own fetcher and sender (not librdkafka) can only copy by logging
    in with Kerberos themselves, from the keytab of the Java form."""
    topic = f"{name}.wire"
    create_topic(kerberos.plain_bootstrap, topic, 2)
    produce_sequence(kerberos.plain_bootstrap, topic, 2, 200)
    # The copies are dc1k.<topic>, outside the flow's <name>.* topics: nothing is copied twice
    config = write_config(tmp_path / "mm2.properties",
                          {"dc1k": kerberos.sasl_bootstrap, "back": kerberos.sasl_bootstrap},
                          kerberos.lines("dc1k") + kerberos.lines("back")
                          + flow_lines(name, "replication.data.path = batches", flow="dc1k->back"))
    m = KerberosMirror(config, tmp_path, "kerberos-wire", kerberos.client_env(tmp_path / "wire.ccache")).start()
    mirrors.append(m)
    remote = f"dc1k.{topic}"
    wait_until(lambda: len(read_all(kerberos.plain_bootstrap, remote, timeout=10)) >= 200, 60, interval=0.5,
               what="200 records replicated over the batch path")
    assert "data path: batches" in m.log()  # the precondition: the wire client copies, not librdkafka
    assert m.stop(30) == 0
    source, target = read_all(kerberos.plain_bootstrap, topic), read_all(kerberos.plain_bootstrap, remote)
    assert [(r.partition, r.offset, r.key, r.value, r.headers, r.timestamp) for r in target] == \
        [(r.partition, r.offset, r.key, r.value, r.headers, r.timestamp) for r in source]
    log = m.log()
    assert "Traceback" not in log and "GSSAPI authentication" not in log, log[-3000:]


def test_the_wire_clients_kerberos_login_renews_its_tickets_and_names_a_bad_keytab(
        kerberos: KerberosCluster, name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The batch path's Kerberos login (in this process): a principal whose tickets last 6 s still connects after
    they have ended, because the login gets new ones from the keytab at half their life (MIT's library alone
    fails with "Ticket expired"); without a keytab it uses the default ticket cache (kinit's), and an empty one is
    refused; a keytab without the principal, and a principal the KDC no longer has, are one line naming the
    cluster, the principal and the keytab."""
    from mirror_core.wire.metadata import Brokers

    env = kerberos.client_env(tmp_path / "in-process.ccache")
    for key in ("KRB5_CONFIG", "KRB5CCNAME"):
        monkeypatch.setenv(key, env[key])
    short = f"short-{name}"
    keytab = kerberos.kdc.principal(short, tmp_path / "short.keytab")
    kerberos.kdc._kadmin(f'modprinc -maxlife "6 seconds" {short}@{kerberos.kdc.realm}')
    settings = kerberos.librdkafka_settings(f"{short}@{kerberos.kdc.realm}", keytab)
    brokers = Brokers(kerberos.sasl_bootstrap, settings, "source cluster dc1k")

    def issued() -> int:  # tickets the KDC issued to the short-lived principal from its keytab (AS exchanges)
        return sum(1 for line in kerberos.kdc.log_file.read_text().splitlines()
                   if "AS_REQ" in line and "ISSUE" in line and f"{short}@{kerberos.kdc.realm} for krbtgt/" in line)

    assert brokers.metadata([]).brokers
    first = issued()
    assert first >= 1
    time.sleep(7)  # past the first ticket's end
    assert brokers.metadata([]).brokers
    assert issued() > first  # new tickets, from the keytab

    # Without a keytab (Java's useTicketCache=true): the tickets kinit put in the default cache
    ccache = tmp_path / "kinit.ccache"
    assert kerberos.kdc.kinit(kerberos.client_principal, kerberos.client_keytab, ccache).returncode == 0
    monkeypatch.setenv("KRB5CCNAME", f"FILE:{ccache}")
    from_cache = {k: v for k, v in kerberos.librdkafka_settings().items() if k != "sasl.kerberos.keytab"}
    assert Brokers(kerberos.sasl_bootstrap, from_cache, "source cluster dc1k").metadata([]).brokers
    monkeypatch.setenv("KRB5CCNAME", f"FILE:{tmp_path / 'empty.ccache'}")
    with pytest.raises(MirrorError, match=r"No Kerberos credentials available|credentials cache"):
        Brokers(kerberos.sasl_bootstrap, from_cache, "source cluster dc1k").metadata([])

    other = kerberos.kdc.principal(f"other-{name}", tmp_path / "other.keytab")
    gone = f"gone-{name}"
    gone_keytab = kerberos.kdc.principal(gone, tmp_path / "gone.keytab")
    kerberos.kdc.delete(gone)
    for principal, tab, says in [
            (kerberos.client_principal, other, f"`klist -kt {other}` lists whose keys it holds"),
            (f"{gone}@{kerberos.kdc.realm}", gone_keytab, f"Client '{gone}@{kerberos.kdc.realm}' not found in Kerberos "
                                                          "database")]:
        bad = Brokers(kerberos.sasl_bootstrap, kerberos.librdkafka_settings(principal, tab), "source cluster dc1k")
        with pytest.raises(MirrorError) as err:
            bad.metadata([])
        line = str(err.value)
        assert "source cluster dc1k" in line and f"SASL GSSAPI authentication of user '{principal}' failed" in line
        assert f"Kerberos credentials of {principal} from {tab}" in line and says in line and "\n" not in line
