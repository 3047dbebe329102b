"""A Java ``.properties`` reader that remembers the line each key came from.

MirrorMaker 2 reads ``mm2.properties`` with ``java.util.Properties``; we accept the same syntax:
``#``/``!`` comments, ``=``, ``:`` or whitespace separators, backslash line continuations and the
usual escapes (``\\t``, ``\\n``, ``\\uXXXX``, escaped separators). The last occurrence of a key wins,
as in Java.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mirror_core.config.errors import ConfigError

_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


@dataclass(frozen=True)
class Property:
    key: str
    value: str
    line: int


def _unescape(text: str, line: int) -> str:
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch != "\\" or i + 1 >= len(text):
            out.append(ch)
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "u":
            digits = text[i + 2 : i + 6]
            if len(digits) != 4 or any(c not in "0123456789abcdefABCDEF" for c in digits):
                raise ConfigError(f"malformed \\u escape '\\u{digits}'", line=line)
            out.append(chr(int(digits, 16)))
            i += 6
            continue
        out.append(_ESCAPES.get(nxt, nxt))
        i += 2
    return "".join(out)


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """Join backslash-continued lines; return (first physical line number, logical line)."""
    result: list[tuple[int, str]] = []
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.lstrip() if pending else raw
        if not pending:
            start = number
            if not stripped.strip() or stripped.lstrip()[:1] in ("#", "!"):
                continue
        trailing = len(stripped) - len(stripped.rstrip("\\"))
        if trailing % 2 == 1:  # an odd number of trailing backslashes continues the line
            pending.append(stripped[:-1])
            continue
        pending.append(stripped)
        result.append((start, "".join(pending)))
        pending = []
    if pending:
        result.append((start, "".join(pending)))
    return result


def _split(logical: str) -> tuple[str, str]:
    text = logical.lstrip()
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\":
            i += 2
            continue
        if ch in "=: \t\f":
            break
        i += 1
    key = text[:i]
    rest = text[i:].lstrip(" \t\f")
    if rest[:1] in ("=", ":"):
        rest = rest[1:]
    return key, rest.lstrip(" \t\f")


def parse_properties(text: str) -> list[Property]:
    """Parse properties text into an ordered list (duplicates kept, in file order)."""
    props: list[Property] = []
    for line, logical in _logical_lines(text):
        raw_key, raw_value = _split(logical)
        key = _unescape(raw_key, line)
        if not key:
            raise ConfigError("a line has a value but no key", line=line)
        # Trailing blanks are dropped (Java keeps them; they are never intended in mm2.properties).
        props.append(Property(key, _unescape(raw_value.rstrip(" \t\f"), line), line))
    return props


def load_properties(path: str | Path) -> list[Property]:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"configuration file not found: {p}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"configuration file is not UTF-8 text: {exc}", source=str(p)) from None
    except OSError as exc:
        raise ConfigError(f"cannot read configuration file: {exc}", source=str(p)) from None
    try:
        return parse_properties(text)
    except ConfigError as exc:
        raise ConfigError(exc.message, key=exc.key, line=exc.line, source=str(p)) from None
