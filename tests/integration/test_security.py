"""A SASL_SSL source cluster (SCRAM-SHA-512 over TLS, certificates made by the harness): replication,
checkpoints and the CLI work against it; the password never shows up in logs, status output, metrics
or the state store; wrong credentials and unknown hosts give a clear error naming the cluster.

(The remote-topic ACLs never granting WRITE is covered by test_topic_sync.py::test_topic_config_sync_end_to_end.)
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from mirror_core.config.loader import load_config
from mirror_core.errors import MirrorError
from mirror_core.state.store import StateStore
from mirror_core.stores.records import decode_checkpoint_key
from mirror_core.wire.connection import Connection, WireError
from mirror_core.wire.fetch import API_FETCH
from mirror_core.wire.sasl import SaslError
from tests.integration.conftest import flow_lines
from tests.kafka_harness import (
    MirrorProcess,
    create_topic,
    produce_sequence,
    read_all,
    wait_until,
    write_config,
)
from tests.security_harness import DebugMirror, SecureCluster, cli, jks_truststore, running_secure_cluster

PASSWORD = "Zq8-scram-S3CRET-pw-4471"  # distinctive: grepped for everywhere it must not be
FLOW = "dc1s->dc2"


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureCluster]:
    with running_secure_cluster("dc1s", tmp_path_factory.mktemp("kafka-secure"), PASSWORD) as sc:
        yield sc


def test_replication_checkpoints_and_no_password_anywhere(secure: SecureCluster, dc2: str, name: str,
                                                          tmp_path: Path, mirrors: list[MirrorProcess]) -> None:
    topic, group = f"{name}.orders", f"{name}-app"
    create_topic(secure.plain_bootstrap, topic, 2)
    produce_sequence(secure.plain_bootstrap, topic, 2, 40)
    config = write_config(tmp_path / "mm2.properties", {"dc1s": secure.sasl_bootstrap, "dc2": dc2},
                          secure.lines("dc1s") + flow_lines(name, "emit.checkpoints.interval.seconds = 1",
                                                            flow=FLOW))
    assert load_config(config).cluster("dc1s").client_settings("consumer")["security.protocol"] == "SASL_SSL"
    m = DebugMirror(config, tmp_path, "secure").start()
    mirrors.append(m)

    # Replication over SASL_SSL with a SCRAM user that is not a super user.
    wait_until(lambda: len(read_all(dc2, f"dc1s.{topic}", timeout=10)) == 40, 90, what="40 records replicated")

    # A consumer group on the source: its checkpoint appears on the target and translates exactly.
    c = Consumer({"bootstrap.servers": secure.plain_bootstrap, "group.id": group, "log_level": "3"})
    c.commit(offsets=[TopicPartition(topic, 0, 15), TopicPartition(topic, 1, 20)], asynchronous=False)
    c.close()

    def checkpointed() -> bool:
        keys = {decode_checkpoint_key(r.key) for r in read_all(dc2, "dc1s.checkpoints.internal", timeout=10)}
        return {(group, f"dc1s.{topic}", 0), (group, f"dc1s.{topic}", 1)} <= keys

    wait_until(checkpointed, 60, interval=1, what="checkpoints of the source group")
    tr = cli("offsets", "translate", "--config", str(config), "--from", "dc1s", "--to", "dc2", "--group", group,
             "--json")
    assert tr.returncode == 0, tr.stderr
    rows = {r["partition"]: r for r in json.loads(tr.stdout)["partitions"]}
    assert (rows[0]["target_offset"], rows[1]["target_offset"]) == (15, 20)  # no gaps: offsets match 1:1

    # Operator-facing output: status, check, the service's own /status and /metrics.
    status = cli("status", "--config", str(config), "--json")
    assert status.returncode == 0, status.stderr
    flows = json.loads(status.stdout)["flows"]
    assert flows[0]["reachable"] and flows[0]["total_lag"] == 0
    check = cli("check", "--config", str(config))
    assert check.returncode == 0, check.stderr
    outputs = {"status": status.stdout + status.stderr, "check": check.stdout + check.stderr,
               "translate": tr.stdout + tr.stderr, "/status": json.dumps(m.status()), "/metrics": m.metrics()}

    # The state store: the config and a topic-sync run (which reads the source over SASL_SSL).
    db_file = tmp_path / "state.db"
    url = f"sqlite:///{db_file}"
    store = StateStore(url)
    store.migrate()
    store.record_config(load_config(config))
    sync = cli("--log-level", "DEBUG", "topics", "sync", "--config", str(config), "--db-url", url)
    assert sync.returncode == 0, sync.stderr
    outputs["topics sync"] = sync.stdout + sync.stderr

    assert m.stop() == 0
    outputs["mirror log (DEBUG)"] = m.log()
    for where, text in outputs.items():
        assert PASSWORD not in text, f"the SCRAM password appears in {where}"
    assert PASSWORD.encode() not in db_file.read_bytes(), "the SCRAM password is in the state store"
    assert "Traceback" not in outputs["mirror log (DEBUG)"]


@pytest.mark.parametrize("problem", ["wrong password", "unknown host"])
def test_bad_credentials_and_unknown_hosts_give_clear_errors(secure: SecureCluster, dc2: str, name: str,
                                                             tmp_path: Path, problem: str) -> None:
    if problem == "wrong password":
        bootstrap, lines, expect = secure.sasl_bootstrap, secure.lines("dc1s", "not-the-password"), "authentication"
    else:
        bootstrap, lines, expect = "no-such-broker.invalid:9093", secure.lines("dc1s"), "unknown host"
    config = write_config(tmp_path / "mm2.properties", {"dc1s": bootstrap, "dc2": dc2},
                          lines + flow_lines(name, flow=FLOW))
    # The running service says the same while it waits (and keeps running: the cluster may come back). It and
    # the two status commands run at once: each waits out the cluster's answer (or its absence) on its own.
    m = MirrorProcess(config, tmp_path, "bad").start()
    try:
        every = (("status", "--config", str(config)), ("status", "--config", str(config), "--json"))
        with ThreadPoolExecutor(len(every)) as pool:
            results = list(pool.map(lambda args: (args, cli(*args)), every))
        for args, res in results:
            out = res.stdout + res.stderr
            assert res.returncode == 1, out
            assert "Traceback" not in out and "not-the-password" not in out and PASSWORD not in out
            if "--json" in args:
                error = json.loads(res.stdout)["flows"][0]["error"]
                assert error.startswith("cluster dc1s: ") and expect in error, error
            else:
                assert "dc1s" in out and expect in out, out
        wait_until(lambda: f"cluster dc1s: {expect}" in m.log(), 60, interval=1, what=f"'{expect}' in the mirror log")
        assert m.alive()
    finally:
        m.ensure_dead()
    assert "Traceback" not in m.log()


def test_password_from_a_secrets_file_only_the_mirror_reads(secure: SecureCluster, dc2: str, name: str,
                                                             tmp_path: Path, mirrors: list[MirrorProcess]) -> None:
    """The production shape: SASL_SSL + SCRAM, a JKS trust store made by keytool with no type line (Java's
    default), the SCRAM and trust store passwords in a secrets file only this user reads (0600) through
    ${file:...}, the trust store path from ${env:...}. Replication works unchanged, the passwords are nowhere
    in check output or the mirror's DEBUG log, and a missing key names file, line and key."""
    topic = f"{name}.secrets"
    create_topic(secure.plain_bootstrap, topic, 1)
    produce_sequence(secure.plain_bootstrap, topic, 1, 25)
    store_password = "Jks-Trust-Pw-6620"
    truststore = jks_truststore(tmp_path / "truststore.jks", store_password, secure.pki.ca_pem)
    secrets = tmp_path / "kafka-secrets.properties"
    secrets.write_text(f"dc1s.password = {PASSWORD}\ntruststore.password = {store_password}\n")
    secrets.chmod(0o600)
    jaas = f"org.apache.kafka.common.security.scram.ScramLoginModule required username='mirror' " \
           f"password='${{file:{secrets}:dc1s.password}}';"
    providers = ["config.providers = file, env",
                 "config.providers.file.class = org.apache.kafka.common.config.provider.FileConfigProvider",
                 "config.providers.env.class = org.apache.kafka.common.config.provider.EnvVarConfigProvider"]
    lines = [line for line in secure.lines("dc1s") if "jaas" not in line and "truststore" not in line]
    lines += [f"dc1s.sasl.jaas.config = {jaas}", "dc1s.ssl.truststore.location = ${env:MIRROR_TEST_CA}",
              f"dc1s.ssl.truststore.password = ${{file:{secrets}:truststore.password}}"]
    config = write_config(tmp_path / "mm2.properties", {"dc1s": secure.sasl_bootstrap, "dc2": dc2},
                          providers + lines + flow_lines(name, flow=FLOW))
    assert PASSWORD not in config.read_text() and store_password not in config.read_text()
    assert "truststore.type" not in config.read_text()
    os.environ["MIRROR_TEST_CA"] = str(truststore)
    try:
        check = cli("check", "--config", str(config))
        assert check.returncode == 0, check.stderr
        m = DebugMirror(config, tmp_path, "secrets").start()
        mirrors.append(m)
        wait_until(lambda: len(read_all(dc2, f"dc1s.{topic}", timeout=10)) == 25, 90, what="25 records replicated")
        assert m.stop() == 0
        for where, text in {"check": check.stdout + check.stderr, "mirror log (DEBUG)": m.log()}.items():
            assert PASSWORD not in text and store_password not in text, f"a password appears in {where}"

        broken = tmp_path / "broken.properties"
        broken.write_text(config.read_text().replace(":dc1s.password}", ":dc1s.pasword}"))
        bad = cli("check", "--config", str(broken))
        assert bad.returncode == 2
        [line] = bad.stderr.strip().splitlines()
        assert str(broken) in line and "key 'dc1s.sasl.jaas.config'" in line and "has no key 'dc1s.pasword'" in line
        assert PASSWORD not in bad.stdout + bad.stderr
    finally:
        del os.environ["MIRROR_TEST_CA"]


def _wire_settings(secure: SecureCluster, tmp_path: Path, password: str | None = None) -> dict[str, str]:
    """The SASL_SSL cluster's consumer settings as the product loads them from mm2.properties lines."""
    config = write_config(tmp_path / "wire.properties", {"dc1s": secure.sasl_bootstrap, "dc2": "127.0.0.1:1"},
                          secure.lines("dc1s", password) + flow_lines("wire", flow=FLOW))
    return load_config(config).cluster("dc1s").client_settings("consumer")


def test_the_wire_client_copies_record_batches_over_sasl_ssl_with_the_configs_settings(
        secure: SecureCluster, dc2: str, name: str, tmp_path: Path, mirrors: list[MirrorProcess]) -> None:
    """mirror_core.wire (TLS from the trust store, SCRAM-SHA-512) as the batches data path's fetcher."""
    topic = f"{name}.wire"
    create_topic(secure.plain_bootstrap, topic, 2)
    produce_sequence(secure.plain_bootstrap, topic, 2, 300)
    settings = _wire_settings(secure, tmp_path)
    host, port = secure.sasl_bootstrap.rsplit(":", 1)
    # Precondition: the listener takes nothing but TLS and SASL (a plaintext client gets no answer it can read).
    with pytest.raises(MirrorError):
        Connection(host, int(port), {}, "dc1s", timeout=5).close()
    with Connection(host, int(port), settings, "dc1s") as c:
        assert c.version(API_FETCH, (11,)) == 11  # authenticated: the broker answers past the handshake
    config = write_config(tmp_path / "mm2.properties", {"dc1s": secure.sasl_bootstrap, "dc2": dc2},
                          secure.lines("dc1s") + flow_lines(name, "replication.data.path = batches", flow=FLOW))
    m = DebugMirror(config, tmp_path, "secure-wire").start()
    mirrors.append(m)
    wait_until(lambda: len(read_all(dc2, f"dc1s.{topic}", timeout=10)) >= 300, 90, interval=1,
               what="300 records copied")
    assert "data path: batches" in m.log()  # the precondition: the wire client copies, not librdkafka
    source, target = read_all(secure.plain_bootstrap, topic), read_all(dc2, f"dc1s.{topic}")
    for p in range(2):
        assert [(r.key, r.value) for r in target if r.partition == p] == \
            [(r.key, r.value) for r in source if r.partition == p], p


def test_the_wire_client_says_which_cluster_broker_and_user_a_refusal_is_about(secure: SecureCluster,
                                                                               tmp_path: Path) -> None:
    host, port = secure.sasl_bootstrap.rsplit(":", 1)
    wrong = "Wr0ng-" + PASSWORD
    with pytest.raises(SaslError) as refused:
        Connection(host, int(port), _wire_settings(secure, tmp_path, wrong), "dc1s")
    line = str(refused.value)
    assert f"dc1s (broker {host}:{port}): SASL SCRAM-SHA-512 authentication of user 'mirror' failed" in line
    assert "\n" not in line and wrong not in line and PASSWORD not in line
    untrusted = {k: v for k, v in _wire_settings(secure, tmp_path).items() if not k.startswith("ssl.ca.")}
    with pytest.raises(WireError, match=r"dc1s \(broker .*\): TLS handshake failed: .*CERTIFICATE_VERIFY_FAILED"):
        Connection(host, int(port), untrusted, "dc1s")
