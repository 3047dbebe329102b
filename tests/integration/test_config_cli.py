"""Malformed configurations: exit code 2, a message naming the key and line, nothing started."""

from __future__ import annotations

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
