"""Configuration errors: each names the key and, when known, the file line."""

from __future__ import annotations

from mirror_core.redaction import scrub


class ConfigError(Exception):
    """An invalid configuration value or reference; nothing is started when this is raised."""

    def __init__(self, message: str, key: str | None = None, line: int | None = None,
                 source: str | None = None) -> None:
        self.key = key
        self.line = line
        self.source = source
        self.message = message
        super().__init__(self.describe())

    def describe(self) -> str:
        where = []
        if self.source:
            where.append(self.source if self.line is None else f"{self.source}, line {self.line}")
        elif self.line is not None:
            where.append(f"line {self.line}")
        if self.key:
            where.append(f"key '{self.key}'")
        prefix = ", ".join(where)
        # Masked: a value resolved from a config provider must not come back in an error message.
        return scrub(f"{prefix}: {self.message}" if prefix else self.message)


class SettingError(ValueError):
    """A client setting cannot work as written; ``key`` is the Java setting to fix. The message says what
    to do and never quotes a secret."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key


class JaasError(ValueError):
    """``sasl.jaas.config`` does not follow the JAAS grammar (the message never quotes a value)."""
