"""Kafka config providers (${file:...}, ${env:...}, ${dir:...}): resolution and its error messages."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mirror_core.config.errors import ConfigError
from mirror_core.config.loader import load_config, parse_text
from mirror_core.redaction import scrub

PROVIDERS = ("config.providers = file, env, dir\n"
             "config.providers.file.class = org.apache.kafka.common.config.provider.FileConfigProvider\n"
             "config.providers.env.class = org.apache.kafka.common.config.provider.EnvVarConfigProvider\n"
             "config.providers.dir.class = org.apache.kafka.common.config.provider.DirectoryConfigProvider\n")
BASE = "clusters = dc1, dc2\ndc1.bootstrap.servers = a:1\ndc2.bootstrap.servers = b:2\ndc1->dc2.enabled = true\n"
JAAS = "dc1.sasl.jaas.config = org.apache.kafka.common.security.plain.PlainLoginModule required "
SECRET = "Pw-7731-provider-SECRET"  # distinctive: must never appear in messages


def settings(text: str, environ: dict[str, str] | None = None) -> dict[str, str]:
    config = parse_text(PROVIDERS + BASE + "dc1.security.protocol = SASL_PLAINTEXT\ndc1.sasl.mechanism = PLAIN\n"
                        + text, validate_clients=False, environ=environ or {})
    return config.clusters["dc1"].client_settings("consumer")


def test_file_env_and_directory_providers_resolve_anywhere_in_a_value(tmp_path: Path) -> None:
    secrets = tmp_path / "secrets.properties"
    secrets.write_text(f"dc1.user = alice\ndc1.password = {SECRET}\n")
    os.chmod(secrets, 0o600)  # readable by this process only, as production secret files are
    (tmp_path / "bootstrap").write_text("broker-from-dir:9093")
    text = (f'{JAAS}username="${{file:{secrets}:dc1.user}}" password="${{file:{secrets}:dc1.password}}";\n'
            f"dc2.client.id = mirror-${{env:POD}}\n")
    config = parse_text(PROVIDERS + BASE.replace("a:1", f"${{dir:{tmp_path}:bootstrap}}")
                        + "dc1.security.protocol = SASL_PLAINTEXT\ndc1.sasl.mechanism = PLAIN\n" + text,
                        validate_clients=False, environ={"POD": "mirror-0"})
    consumer = config.clusters["dc1"].client_settings("consumer")
    assert consumer["sasl.username"] == "alice" and consumer["sasl.password"] == SECRET
    assert config.clusters["dc1"].bootstrap_servers == "broker-from-dir:9093"
    assert config.clusters["dc2"].client_settings("producer")["client.id"] == "mirror-mirror-0"
    # The resolved password is registered as a secret: masked wherever text is scrubbed.
    assert SECRET not in scrub(f"oops {SECRET} leaked")
    assert SECRET not in repr(config) and SECRET not in str(config.clusters["dc1"].redacted())


@pytest.mark.parametrize(("value", "message"), [
    ("${vault:secret/kafka:pw}", "config provider 'vault', which is not declared"),
    ("${env:NOT_SET_ANYWHERE}", "environment variable NOT_SET_ANYWHERE is not set"),
    ("${file:/nonexistent/secrets.properties:pw}", "file /nonexistent/secrets.properties does not exist"),
    ("${dir:/nonexistent:pw}", "directory /nonexistent does not exist"),
])
def test_unresolvable_placeholders_name_file_line_and_key(tmp_path: Path, value: str, message: str) -> None:
    path = tmp_path / "mm2.properties"
    path.write_text(PROVIDERS + BASE + f'{JAAS}username="u" password="{value}";\n')
    with pytest.raises(ConfigError) as err:
        load_config(path, validate_clients=False)
    text = str(err.value)
    assert (err.value.key, err.value.line) == ("dc1.sasl.jaas.config", 9)
    assert str(path) in text and "line 9" in text and message in text


def test_missing_key_in_the_secrets_file_and_unreadable_file(tmp_path: Path) -> None:
    secrets = tmp_path / "s.properties"
    secrets.write_text(f"other = {SECRET}\n")
    with pytest.raises(ConfigError, match="has no key 'pw'") as err:
        settings(f'{JAAS}username="u" password="${{file:{secrets}:pw}}";\n')
    assert SECRET not in str(err.value)
    if os.geteuid() != 0:  # root reads any file
        secrets.chmod(0)
        with pytest.raises(ConfigError, match="not readable by this process"):
            settings(f'{JAAS}username="u" password="${{file:{secrets}:other}}";\n')


def test_allowed_paths_and_env_allowlist_are_enforced(tmp_path: Path) -> None:
    inside, outside = tmp_path / "ok", tmp_path / "no"
    inside.mkdir(), outside.mkdir()
    (outside / "pw").write_text(SECRET)
    text = (PROVIDERS + f"config.providers.dir.param.allowed.paths = {inside}\n"
            "config.providers.env.param.allowlist.pattern = KAFKA_.*\n" + BASE)
    with pytest.raises(ConfigError, match=r"outside config\.providers\.dir\.param\.allowed\.paths"):
        parse_text(text + f"dc1.client.id = ${{dir:{outside}:pw}}\n", validate_clients=False)
    with pytest.raises(ConfigError, match=r"not allowed by config\.providers\.env\.param\.allowlist\.pattern"):
        parse_text(text + "dc1.client.id = ${env:HOME}\n", validate_clients=False, environ={"HOME": "/root"})
    ok = parse_text(text + "dc1.client.id = ${env:KAFKA_ID}\n", validate_clients=False, environ={"KAFKA_ID": "m"})
    assert ok.clusters["dc1"].client_settings("admin")["client.id"] == "m"


def test_provider_class_not_available_is_an_error_only_when_used() -> None:
    text = ("config.providers = vault\nconfig.providers.vault.class = com.example.VaultConfigProvider\n" + BASE)
    config = parse_text(text, validate_clients=False)
    assert any("com.example.VaultConfigProvider" in w and "not available" in w for w in config.warnings)
    with pytest.raises(ConfigError, match="is not available here") as err:
        parse_text(text + "dc1.client.id = ${vault:kv/x:y}\n", validate_clients=False)
    assert err.value.key == "dc1.client.id"


def test_a_provider_without_class_is_an_error() -> None:
    with pytest.raises(ConfigError, match=r"config provider 'file' has no class") as err:
        parse_text("config.providers = file\n" + BASE, validate_clients=False)
    assert err.value.line == 1
