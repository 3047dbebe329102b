"""Real-world mm2.properties shapes (tests/unit/mm2_shapes/) pass `check`; MirrorMaker 2 and Connect keys are
applied or warned at every level, never fatal; typos get a suggestion; bad sizes get a clear message."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from mirror_core.config.errors import ConfigError
from mirror_core.config.loader import load_config, parse_text
from tests.unit.stores import Pki

SHAPES = Path(__file__).parent / "mm2_shapes"
REPO = Path(__file__).resolve().parents[2]
SECRET = "Shape-Secret-9931"
BASE = "clusters = dc1, dc2\ndc1.bootstrap.servers = a:1\ndc2.bootstrap.servers = b:2\ndc1->dc2.enabled = true\n"


@pytest.fixture(scope="module")
def shapes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The shapes with @DIR@ pointing at real stores, keytab and secrets files made here."""
    out = tmp_path_factory.mktemp("shapes")
    pki = Pki()
    pki.jks_truststore(out / "truststore.jks", SECRET)
    pki.pkcs12_truststore(out / "truststore.p12", SECRET)
    pki.pkcs12(out / "client.p12", SECRET)
    (out / "mirror.keytab").write_bytes(b"\x05\x02")
    secrets = out / "secrets.properties"
    secrets.write_text(f"source.password = {SECRET}\ntruststore.password = {SECRET}\nkeystore.password = {SECRET}\n")
    secrets.chmod(0o600)
    for shape in SHAPES.glob("*.properties"):
        (out / shape.name).write_text(shape.read_text().replace("@DIR@", str(out)))
    return out


def _env() -> dict[str, str]:
    # Fake AWS credentials: the MSK IAM signer must never reach for instance metadata (not on loopback).
    return dict(os.environ, SHAPES_OIDC_SECRET=SECRET, SHAPES_CLOUD_SECRET=SECRET, AWS_ACCESS_KEY_ID="AKIAEXAMPLE",
                AWS_SECRET_ACCESS_KEY="example", AWS_EC2_METADATA_DISABLED="true")


@pytest.mark.parametrize("name", sorted(p.name for p in SHAPES.glob("*.properties")))
def test_every_shape_passes_check_and_no_secret_is_printed(shapes: Path, name: str) -> None:
    done = subprocess.run([sys.executable, "-m", "mirror_core", "check", "--config", str(shapes / name)],
                          capture_output=True, text=True, env=_env(), cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "configuration OK" in done.stdout
    assert SECRET not in done.stdout + done.stderr
    strict = subprocess.run([sys.executable, "-m", "mirror_core", "check", "--strict", "--config", str(shapes / name)],
                            capture_output=True, text=True, env=_env(), cwd=REPO, timeout=120)
    if "warning" in done.stdout:
        assert strict.returncode == 2 and "--strict treats them as errors" in strict.stderr
    else:
        assert strict.returncode == 0


def test_connect_keys_at_every_level_are_warnings(shapes: Path) -> None:
    os.environ.update(_env())
    config = load_config(shapes / "apache-docs-active-active.properties")
    text = "\n".join(config.warnings)
    for key in ("'B.offset.storage.topic'", "'A.exactly.once.source.support'", "'offset.storage.replication.factor'",
                "'tasks.max'"):
        assert key in text
    assert "exactly.once.enabled = true" in text  # what to use instead
    # A cluster named 'source': its Connect keys too (source.offset.storage.replication.factor).
    config = load_config(shapes / "strimzi-scram-jks.properties")
    assert any("'source.offset.storage.replication.factor'" in w for w in config.warnings)
    consumer = config.clusters["source"].client_settings("consumer")
    assert consumer["sasl.password"] == SECRET and consumer["ssl.ca.pem"].startswith("-----BEGIN CERTIFICATE")
    assert "ssl.key.pem" in config.clusters["target"].client_settings("producer")
    assert config.clusters["source"].client_settings("producer")["queue.buffering.max.kbytes"] == "32768"


@pytest.mark.parametrize(("line", "warning"), [
    ("dc1->dc2.replication.factr = 3\n", "did you mean 'replication.factor'?"),
    ("emit.checkpoint.enabled = true\n", "did you mean 'emit.checkpoints.enabled'?"),
    ("dc1->dc2.transforms = x\n", "no effect here"),
    ("dc1.transforms.x.type = org.example.X\n", "no effect here"),
    ("dc2.exactly.once.source.support = enabled\n", "exactly.once.enabled = true"),
])
def test_keys_are_warned_with_what_to_do(line: str, warning: str) -> None:
    config = parse_text(BASE + line)
    key = line.split("=")[0].strip()
    [found] = [w for w in config.warnings if f"'{key}'" in w]
    assert warning in found and "line 5" in found


def test_a_size_with_a_unit_gets_a_clear_message() -> None:
    with pytest.raises(ConfigError) as err:
        parse_text(BASE + "dc2.producer.buffer.memory = 32MB\n")
    assert (err.value.key, err.value.line) == ("dc2.producer.buffer.memory", 5)
    assert "expected a number of bytes, got '32MB'" in str(err.value) and "int()" not in str(err.value)


def test_every_key_of_kafkas_sample_file_is_applied_or_warned_at_each_level() -> None:
    """Apache Kafka's config/connect-mirror-maker.properties: global, per cluster (dc2.<key>) and per flow
    (dc1->dc2.<key>), each key is applied or warned as having no effect, never unknown, never fatal."""
    from mirror_core.config.mm2_keys import CONNECT_MIRROR_MAKER_SAMPLE_KEYS

    values = {"clusters": "dc1, dc2", "bootstrap.servers": "h:3", "enabled": "true", "topics": ".*",
              "replication.policy.separator": "_", "sync.topic.acls.enabled": "false"}
    for key in sorted(CONNECT_MIRROR_MAKER_SAMPLE_KEYS - {"clusters"}):
        for written in (key, f"dc2.{key}", f"dc1->dc2.{key}"):
            if written in ("bootstrap.servers", "dc1->dc2.bootstrap.servers"):
                continue  # a cluster setting only: dc2.bootstrap.servers is the one that applies
            config = parse_text(BASE + f"{written} = {values.get(key, '1')}\n", validate_clients=False)
            assert not any("unknown" in w for w in config.warnings if f"'{written}'" in w), (written, config.warnings)
