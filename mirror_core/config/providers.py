"""Kafka config providers: ``${provider:[path:]key}`` placeholders, resolved before anything else.

Production ``mm2.properties`` files keep secrets out of the file with Kafka's config providers::

    config.providers = file, env, dir
    config.providers.file.class = org.apache.kafka.common.config.provider.FileConfigProvider
    config.providers.env.class  = org.apache.kafka.common.config.provider.EnvVarConfigProvider
    config.providers.dir.class  = org.apache.kafka.common.config.provider.DirectoryConfigProvider
    dc1.sasl.jaas.config = ... password="${file:/etc/kafka/secrets.properties:dc1.password}";

The three providers Apache Kafka ships behave as in Kafka: ``file`` reads key ``key`` of the
properties file ``path``; ``dir`` returns the content of the file ``key`` in directory ``path`` (a
mounted Kubernetes secret); ``env`` returns the environment variable ``key``. Their parameters
``config.providers.<name>.param.allowed.paths`` (file, dir) and ``...param.allowlist.pattern`` (env)
restrict what may be read. Unlike Kafka, which leaves an unresolvable placeholder in place (and so
sends it to the broker as a password), every placeholder must resolve: a missing provider, file, key
or variable is a :class:`ConfigError` naming the file line and key — never the value.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from mirror_core.config.errors import ConfigError
from mirror_core.config.properties import Property, parse_properties
from mirror_core.redaction import is_secret, register_secret

# Kafka's ConfigTransformer pattern: ${provider:[path:]key}.
PLACEHOLDER = re.compile(r"\$\{([^}]*?):(?:([^}]*?):)?([^}]*?)\}")
PROVIDER_KEYS = "config.providers"

_KAFKA_PACKAGE = "org.apache.kafka.common.config.provider."
_FILE, _DIR, _ENV = "FileConfigProvider", "DirectoryConfigProvider", "EnvVarConfigProvider"


class _Unresolvable(Exception):
    """Why one placeholder cannot be resolved (the message never contains a resolved value)."""


@dataclass(frozen=True)
class _Provider:
    name: str
    kind: str  # one of _FILE, _DIR, _ENV
    allowed_paths: tuple[Path, ...] = ()
    allowlist: re.Pattern[str] | None = None

    def check_path(self, path: str) -> Path:
        if not path:
            raise _Unresolvable(f"provider '{self.name}' needs a path: ${{{self.name}:<path>:<key>}}")
        resolved = Path(path).expanduser().resolve()
        if self.allowed_paths and not any(resolved.is_relative_to(a) for a in self.allowed_paths):
            allowed = ", ".join(str(a) for a in self.allowed_paths)
            raise _Unresolvable(f"{path} is outside config.providers.{self.name}.param.allowed.paths ({allowed})")
        return resolved

    def resolve(self, path: str | None, key: str, environ: Mapping[str, str]) -> str:
        if self.kind == _ENV:
            if path:
                raise _Unresolvable(f"provider '{self.name}' takes no path: write ${{{self.name}:{key}}}")
            if self.allowlist is not None and not self.allowlist.fullmatch(key):
                raise _Unresolvable(f"environment variable {key} is not allowed by "
                                    f"config.providers.{self.name}.param.allowlist.pattern")
            if key not in environ:
                raise _Unresolvable(f"environment variable {key} is not set")
            return environ[key]
        where = self.check_path(path or "")
        if self.kind == _DIR:
            if not where.is_dir():
                raise _Unresolvable(f"directory {path} does not exist")
            target = (where / key).resolve()
            if target.parent != where:
                raise _Unresolvable(f"'{key}' is not a file name inside {path}")
            return _read(target, f"file {key} in directory {path}")
        values = {p.key: p.value for p in _parse(_read(where, f"file {path}"), path or "")}
        if key not in values:
            raise _Unresolvable(f"file {path} has no key '{key}'")
        return values[key]


def _read(path: Path, what: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise _Unresolvable(f"{what} does not exist") from None
    except PermissionError:
        raise _Unresolvable(f"{what} is not readable by this process (user id {os.geteuid()})") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise _Unresolvable(f"cannot read {what}: {type(exc).__name__}") from None


def _parse(text: str, path: str) -> list[Property]:
    try:
        return parse_properties(text)
    except ConfigError as exc:
        raise _Unresolvable(f"{path}: {exc.describe()}") from None


_KINDS: dict[str, str] = {_FILE: _FILE, _DIR: _DIR, _ENV: _ENV,
                          **{f"{_KAFKA_PACKAGE}{k}": k for k in (_FILE, _DIR, _ENV)}}


def _declared(props: Mapping[str, Property], error: Callable[[str, Property], ConfigError],
              warn: Callable[[str], None]) -> dict[str, _Provider | Property]:
    """Providers declared by ``config.providers``: name -> provider, or -> the ``class`` property of
    a provider class this implementation does not have (an error only if a placeholder uses it)."""
    listing = props.get(PROVIDER_KEYS)
    if listing is None:
        return {}
    out: dict[str, _Provider | Property] = {}
    for name in (n.strip() for n in listing.value.split(",")):
        if not name:
            continue
        cls = props.get(f"{PROVIDER_KEYS}.{name}.class")
        if cls is None:
            raise error(f"config provider '{name}' has no class (set {PROVIDER_KEYS}.{name}.class, e.g. "
                        f"{_KAFKA_PACKAGE}{_FILE})", listing)
        kind = _KINDS.get(cls.value.strip())
        if kind is None:
            out[name] = cls
            warn(f"{cls.key}: config provider class '{cls.value.strip()}' is not available here (mirror_core "
                 f"has Kafka's {_FILE}, {_DIR} and {_ENV}); placeholders '${{{name}:...}}' cannot be resolved")
            continue
        paths = props.get(f"{PROVIDER_KEYS}.{name}.param.allowed.paths")
        pattern = props.get(f"{PROVIDER_KEYS}.{name}.param.allowlist.pattern")
        allowlist = None
        if pattern is not None:
            try:
                allowlist = re.compile(pattern.value)
            except re.error as exc:
                raise error(f"invalid regular expression: {exc}", pattern) from None
        allowed = tuple(Path(p.strip()).expanduser().resolve() for p in (paths.value.split(",") if paths else ())
                        if p.strip())
        out[name] = _Provider(name, kind, allowed, allowlist)
    return out


def is_provider_key(key: str) -> bool:
    return key == PROVIDER_KEYS or key.startswith(f"{PROVIDER_KEYS}.")


def resolve_placeholders(props: Iterable[Property], source: str | None, warn: Callable[[str], None],
                         environ: Mapping[str, str] | None = None) -> list[Property]:
    """Every property with its placeholders resolved (``config.providers*`` keys dropped).

    A resolved value that lands in a secret-looking key (password, jaas, secret...) or comes from a
    secret-looking provider key is registered with :mod:`mirror_core.redaction`, so that it is masked
    wherever it might be printed.
    """
    props = list(props)
    env = os.environ if environ is None else environ
    by_key = {p.key: p for p in props}

    def error(message: str, p: Property) -> ConfigError:
        return ConfigError(message, key=p.key, line=p.line, source=source)

    providers = _declared(by_key, error, warn)
    out: list[Property] = []
    for p in props:
        if is_provider_key(p.key):
            continue
        if "${" not in p.value:
            out.append(p)
            continue

        def substitute(match: re.Match[str], p: Property = p) -> str:
            name, path, key = match.group(1), match.group(2), match.group(3)
            provider = providers.get(name)
            if provider is None:
                declared = ", ".join(providers) or "none"
                raise error(f"placeholder {match.group(0)} uses config provider '{name}', which is not declared "
                            f"in '{PROVIDER_KEYS}' (declared: {declared})", p)
            if isinstance(provider, Property):
                raise error(f"placeholder {match.group(0)}: config provider class '{provider.value.strip()}' "
                            f"({provider.key}, line {provider.line}) is not available here; use Kafka's "
                            f"{_FILE}, {_DIR} or {_ENV}", p)
            try:
                value = provider.resolve(path, key, env)
            except _Unresolvable as exc:
                raise error(f"placeholder {match.group(0)}: {exc}", p) from None
            if is_secret(p.key) or is_secret(key):
                register_secret(value)
            return value

        resolved = PLACEHOLDER.sub(substitute, p.value)
        out.append(replace(p, value=resolved))
        if is_secret(p.key):
            register_secret(resolved)
    return out
