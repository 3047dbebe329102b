"""Keeping secrets out of every output: which settings are secret, and masking known secret values.

Two lines of defence. Secret *settings* (by name: passwords, JAAS lines, client secrets, private keys)
are replaced whole wherever settings are displayed (:func:`redact`). Secret *values* met while loading
a configuration (a password taken from a JAAS line or a config provider) are registered here, and
:func:`scrub` / :class:`SecretFilter` mask them in any text: log records (ours and librdkafka's),
error messages, command output. A value shorter than :data:`MIN_SECRET_LENGTH` is not registered:
masking every "a" would make output unreadable and such a value protects nothing anyway. Nor is a
boolean (``sasl.oauthbearer.token.endpoint.allow.http = true`` names a token but holds a flag).
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Mapping
from typing import Any

MASK = "********"
MIN_SECRET_LENGTH = 4
SECRET_PATTERN = re.compile(r"password|secret|jaas|token|credential|private|key\.pem|sasl\.oauthbearer\.config",
                            re.IGNORECASE)

_FLAGS = frozenset({"true", "false"})
_lock = threading.Lock()
_values: set[str] = set()
_pattern: re.Pattern[str] | None = None


def is_secret(key: str) -> bool:
    """Whether a setting's value must never be shown (``sasl.jaas.config``, ``*.password``, ...). An
    address is not (``sasl.oauthbearer.token.endpoint.url``: it is what an operator needs to see)."""
    return bool(SECRET_PATTERN.search(key)) and not key.endswith((".url", ".urls"))


def redact(props: Mapping[str, str]) -> dict[str, str]:
    """A copy safe to log or display: secret values replaced."""
    return {k: (MASK if is_secret(k) else scrub(v)) for k, v in props.items()}


def register_secret(value: str) -> None:
    """Remember ``value`` as secret: :func:`scrub` masks it from now on, in this process."""
    global _pattern
    value = value.strip()
    if len(value) < MIN_SECRET_LENGTH or value.lower() in _FLAGS:
        return
    with _lock:
        if value not in _values:
            _values.add(value)
            # Longest first, so that a secret containing another is masked whole.
            _pattern = re.compile("|".join(re.escape(v) for v in sorted(_values, key=len, reverse=True)))
    # Every time, not once per process: Airflow resets its masker for each task it supervises
    # (reset_secrets_masker), and a task process forked from one that already loaded the config
    # inherits _values but not Airflow's memory of them.
    _tell_airflow(value)


def scrub(text: str) -> str:
    """``text`` with every registered secret value masked."""
    pattern = _pattern
    return text if pattern is None or not text else pattern.sub(MASK, text)


def scrub_json(value: Any) -> Any:
    """A JSON-ready value (dicts, lists, strings, numbers) with every registered secret masked in its strings,
    keys included: for answers built from error messages (``/status``, ``/healthz``). Masked before encoding,
    since JSON escaping could split a secret holding a quote or a backslash."""
    if _pattern is None:
        return value
    if isinstance(value, str):
        return scrub(value)
    if isinstance(value, dict):
        return {scrub_json(k): scrub_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [scrub_json(v) for v in value]
    return value


def _tell_airflow(value: str) -> None:
    """Inside an Airflow task, Airflow's own masker then hides the value in the task log and rendered
    template fields too (not in XCom values: Airflow stores those as returned). Outside Airflow this
    does nothing."""
    import sys

    if "airflow" not in sys.modules:
        return
    try:
        from airflow.sdk.log import mask_secret
    except ImportError:  # an Airflow without the task SDK: our own filter still applies
        return
    mask_secret(value)


class SecretFilter(logging.Filter):
    """Masks registered secret values in a log record's final message (arguments included)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if _pattern is None:
            return True
        message = record.getMessage()
        cleaned = scrub(message)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        if record.exc_info and record.exc_info[1] is not None:
            text = logging.Formatter().formatException(record.exc_info)
            if scrub(text) != text:
                record.msg = f"{record.msg}\n{scrub(text)}"
                record.exc_info, record.exc_text = None, None
        return True


def install_log_filter() -> None:
    """Mask registered secrets in everything the root logger's handlers write."""
    root = logging.getLogger()
    for handler in root.handlers:
        if not any(isinstance(f, SecretFilter) for f in handler.filters):
            handler.addFilter(SecretFilter())
