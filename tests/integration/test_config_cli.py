"""Malformed configurations: exit code 2, a message naming the key and line, nothing started."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.kafka_harness import REPO, topics

CASES = [
    ("dc1.bootstrap.servers = x:1\n", "'clusters'"),
    ("clusters = dc1, dc2\ndc1.bootstrap.servers = {dc1}\ndc2.bootstrap.servers = {dc2}\n"
     "dc1->dc3.enabled = true\n", "line 4"),
    ("clusters = dc1, dc2\ndc1.bootstrap.servers = {dc1}\ndc2.bootstrap.servers = {dc2}\n"
     "dc1->dc2.enabled = yes\n", "dc1->dc2.enabled"),
    ("clusters = dc1, dc2\ndc1.bootstrap.servers = {dc1}\ndc2.bootstrap.servers = {dc2}\n"
     "dc1->dc2.enabled = true\ndc1->dc2.topics = orders, ([\n", "dc1->dc2.topics"),
    ("clusters = dc1, dc2\ndc1.bootstrap.servers = {dc1}\ndc2.bootstrap.servers = {dc2}\n"
     "dc1->dc2.enabled = true\nreplication.policy.class = com.example.Custom\n", "replication.policy.class"),
    ("clusters = dc1, dc2\ndc1.bootstrap.servers = {dc1}\n"
     "dc1->dc2.enabled = true\n", "dc2.bootstrap.servers"),
    ("clusters = dc1, dc2\ndc1.bootstrap.servers = {dc1}\ndc2.bootstrap.servers = {dc2}\n"
     "dc1->dc2.enabled = true\ndc2.producer.linger.ms = soon\n", "dc2.producer.linger.ms"),
    ("clusters = dc1, dc2\ndc1.bootstrap.servers = {dc1}\ndc2.bootstrap.servers = {dc2}\n"
     "dc1->dc2.enabled = true\nrefresh.topics.interval.seconds = -5\n", "refresh.topics.interval.seconds"),
    ("clusters = dc1, dc2\ndc1.bootstrap.servers = {dc1}\ndc2.bootstrap.servers = {dc2}\n"
     "dc1->dc2.enabled = true\ndc1->dc2.consumer.fetch.min.bytes = many\n",
     "line 5, key 'dc1->dc2.consumer.fetch.min.bytes'"),
    ("clusters = dc1, dc2\ndc1.bootstrap.servers = {dc1}\ndc2.bootstrap.servers = {dc2}\n"
     "dc1->dc2.enabled = true\ndc2.producer.buffer.memory = 32MB\n", "line 5, key 'dc2.producer.buffer.memory'"),
    ("clusters = dc1, dc2\ndc1.bootstrap.servers = {dc1}\ndc2.bootstrap.servers = {dc2}\n"
     "dc1->dc2.enabled = true\nc.security.protocol = SSL\n", "line 5, key 'c.security.protocol'"),
]


@pytest.mark.parametrize(("text", "named"), CASES)
def test_malformed_config_exits_2_naming_the_key(tmp_path: Path, dc1, dc2, text: str, named: str) -> None:
    before = topics(dc2)
    path = tmp_path / "bad.properties"
    path.write_text(text.format(dc1=dc1, dc2=dc2))
    proc = subprocess.run([sys.executable, "-m", "mirror_core", "run", "--config", str(path)],
                          capture_output=True, text=True, cwd=REPO, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert "configuration error" in proc.stderr and named in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    assert topics(dc2) == before  # nothing started, nothing created


def test_unknown_keys_warn_and_mm2_file_is_accepted(tmp_path: Path, dc1, dc2) -> None:
    path = tmp_path / "mm2.properties"
    path.write_text(
        f"clusters = A, B\nA.bootstrap.servers = {dc1}\nB.bootstrap.servers = {dc2}\n"
        "A->B.enabled = true\nA->B.topics = .*\ngroups = .*\ntasks.max = 8\n"
        "replication.policy.class = org.apache.kafka.connect.mirror.IdentityReplicationPolicy\n"
        "topics.blacklist = .*\\.internal\nA.consumer.max.poll.records = 500\nfrobnicate = 1\n")
    proc = subprocess.run([sys.executable, "-m", "mirror_core", "check", "--config", str(path)],
                          capture_output=True, text=True, cwd=REPO, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "configuration OK" in proc.stdout
    assert "unknown key 'frobnicate'" in proc.stderr and "tasks.max" in proc.stderr
    assert "IdentityReplicationPolicy" in proc.stdout


def test_missing_topic_gives_a_clear_error(tmp_path: Path, dc1, dc2, name) -> None:
    from tests.integration.conftest import flow_lines
    from tests.kafka_harness import write_config

    config = write_config(tmp_path / "mm2.properties", {"dc1": dc1, "dc2": dc2}, flow_lines(name))
    for topic, says in (("elsewhere", "not replicated by flow dc1->dc2"), (f"{name}.nope", "does the topic exist")):
        proc = subprocess.run([sys.executable, "-m", "mirror_core", "offsets", "translate", "--config", str(config),
                               "--from", "dc1", "--to", "dc2", "--group", f"{name}-g", "--topic", topic],
                              capture_output=True, text=True, cwd=REPO, timeout=60)
        assert proc.returncode == 1 and says in proc.stderr and topic in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr


def test_status_reports_an_unreachable_target(tmp_path: Path, dc1, name) -> None:
    """A down target is reported as such, with the reason (not as reachable with the backlog as lag)."""
    import json

    from mirror_core.devcluster.local_cluster import free_port
    from tests.integration.conftest import flow_lines
    from tests.kafka_harness import create_topic, produce_sequence, write_config

    t = f"{name}.s"
    create_topic(dc1, t, 2)
    produce_sequence(dc1, t, 2, 10)
    closed = f"127.0.0.1:{free_port()}"  # nothing listens there
    config = write_config(tmp_path / "mm2.properties", {"dc1": dc1, "dc2": closed}, flow_lines(name))
    for args in ((), ("--json",)):
        proc = subprocess.run([sys.executable, "-m", "mirror_core", "status", "--config", str(config), *args],
                              capture_output=True, text=True, cwd=REPO, timeout=120)
        out = proc.stdout + proc.stderr
        assert proc.returncode == 1, out
        assert "Traceback" not in out
        if args:
            [flow] = json.loads(proc.stdout)["flows"]
            assert flow["reachable"] is False and flow["unreachable_cluster"] == "dc2", flow
            assert flow["error"].startswith("cluster dc2: cannot connect"), flow
            assert flow["partitions"] == [] and flow["total_lag"] is None
        else:
            assert "unreachable" in out and "cluster dc2: cannot connect" in out, out


def test_status_shows_every_configured_flow_with_its_control_state(tmp_path: Path, dc1, dc2, name) -> None:
    """After a failover the reverse (standby) flow is the one that runs: `status` shows it, alone with
    --flow, and with a state store what the workflows want and what the live instances apply."""
    import json

    from mirror_core.state.store import StateStore
    from tests.kafka_harness import create_topic, produce_sequence, write_config

    create_topic(dc1, f"{name}.fwd", 1)
    create_topic(dc2, f"{name}.back", 2)
    produce_sequence(dc2, f"{name}.back", 2, 6)
    config = write_config(tmp_path / "mm2.properties", {"dc1": dc1, "dc2": dc2}, [
        "dc1->dc2.enabled = true", f"dc1->dc2.topics = {name}.fwd", "dc2->dc1.enabled = false",
        f"dc2->dc1.topics = {name}.back", "emit.heartbeats.enabled = false"])

    def status(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if k != "MIRROR_CORE_DB_URL"}  # the default store: cwd's
        return subprocess.run([sys.executable, "-m", "mirror_core", "status", "--config", str(config), *args],
                              capture_output=True, text=True, cwd=cwd, env=env, timeout=120)

    flows = {f["flow"]: f for f in json.loads(status("--json").stdout)["flows"]}
    assert {k: v["configured"] for k, v in flows.items()} == {"dc1->dc2": "enabled", "dc2->dc1": "standby"}
    back = status("--flow", "dc2->dc1")
    assert back.returncode == 0, back.stderr
    assert "dc2->dc1 (standby)" in back.stdout and f"{name}.back" in back.stdout and "dc1->dc2 " not in back.stdout
    assert [p["lag"] for p in flows["dc2->dc1"]["partitions"]] == [3, 3]  # nothing copied yet: all is lag
    unknown = status("--flow", "dc3->dc1")
    assert unknown.returncode == 2 and len(unknown.stderr.strip().splitlines()) == 1
    assert "unknown flow 'dc3->dc1'" in unknown.stderr

    url = f"sqlite:///{tmp_path / '.state' / 'mirror-core.db'}"  # where status run in tmp_path looks by default
    store = StateStore(url)
    store.migrate()
    store.set_flow_desired("dc2->dc1", "running", "failover", "test")
    store.set_flow_desired("dc1->dc2", "stopped", "alice", "planned failover dc1 -> dc2", "run-7")
    store.report_flow_states("mirror-0", {"dc2->dc1": "running", "dc1->dc2": "stopped"})
    flows = {f["flow"]: f for f in json.loads(status("--json", "--state-db", url).stdout)["flows"]}
    back, fwd = flows["dc2->dc1"]["control_detail"], flows["dc1->dc2"]["control_detail"]
    assert (back["desired"], back["applied"]) == ("running", "mirror-0=running")
    assert back["change"] == """failback stops it: airflow dags trigger failback --conf '{"flow": "dc1->dc2"}'"""
    assert (fwd["desired"], fwd["applied"]) == ("stopped", "mirror-0=stopped")
    assert fwd["set_by"].startswith("alice ") and fwd["set_by"].endswith(": planned failover dc1 -> dc2, run run-7")
    assert fwd["change"] == """failback starts it: airflow dags trigger failback --conf '{"flow": "dc1->dc2"}'"""
    assert flows["dc1->dc2"]["control"].startswith("desired stopped (set by alice ")
    # Without --state-db: the default store if there is one (here the working directory's), none created else.
    table = status(cwd=tmp_path).stdout
    assert "desired stopped (set by alice" in table and "airflow dags trigger failback" in table, table
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    assert all(f["control"] is None for f in json.loads(status("--json", cwd=elsewhere).stdout)["flows"])
    assert not (elsewhere / ".state").exists()
