"""A parser for ``sasl.jaas.config`` lines, with the grammar Java's JAAS configuration uses.

``<LoginModule class> <flag> [<option>=<value> ...];`` — values are bare words or strings quoted
with ``"`` or ``'`` (Java's tokenizer accepts both) in which a backslash escapes the next character
(``\\n``, ``\\t`` and friends are understood). ``//`` and ``/* */`` comments are skipped, as in Java.
Kafka accepts exactly one login module in a client's ``sasl.jaas.config``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from mirror_core.config.errors import JaasError

_FLAGS = ("required", "requisite", "sufficient", "optional")
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f"}
_WORD = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.$-/:@+*#%~[]{}")




@dataclass(frozen=True)
class JaasEntry:
    login_module: str
    flag: str
    options: Mapping[str, str]

    @property
    def module_name(self) -> str:
        """The class name without its package: ``ScramLoginModule``."""
        return self.login_module.rsplit(".", 1)[-1]


class _Tokens:
    def __init__(self, text: str) -> None:
        self.text = text
        self.i = 0

    def _skip(self) -> None:
        t = self.text
        while self.i < len(t):
            if t[self.i].isspace():
                self.i += 1
            elif t.startswith("//", self.i):
                end = t.find("\n", self.i)
                self.i = len(t) if end < 0 else end + 1
            elif t.startswith("/*", self.i):
                end = t.find("*/", self.i + 2)
                if end < 0:
                    raise JaasError("a /* comment is not closed")
                self.i = end + 2
            else:
                return

    def peek(self) -> str:
        self._skip()
        return self.text[self.i] if self.i < len(self.text) else ""

    def expect(self, char: str, context: str) -> None:
        if self.peek() != char:
            found = f"'{self.peek()}'" if self.peek() else "the end"
            raise JaasError(f"expected '{char}' {context}, found {found}")
        self.i += 1

    def word(self, what: str) -> str:
        self._skip()
        start = self.i
        while self.i < len(self.text) and self.text[self.i] in _WORD:
            self.i += 1
        if start == self.i:
            raise JaasError(f"expected {what}")
        return self.text[start:self.i]

    def value(self, option: str) -> str:
        quote = self.peek()
        if quote not in ('"', "'"):
            return self.word(f"a value for option '{option}'")
        self.i += 1
        out: list[str] = []
        t = self.text
        while self.i < len(t):
            ch = t[self.i]
            if ch == quote:
                self.i += 1
                return "".join(out)
            if ch == "\\" and self.i + 1 < len(t):
                nxt = t[self.i + 1]
                out.append(_ESCAPES.get(nxt, nxt))
                self.i += 2
                continue
            out.append(ch)
            self.i += 1
        raise JaasError(f"the value of option '{option}' has no closing {quote}")


def parse_jaas(text: str) -> JaasEntry:
    """Parse one client login module entry. Raises :class:`JaasError` naming what is wrong."""
    tokens = _Tokens(text)
    module = tokens.word("a login module class (e.g. org.apache.kafka.common.security.scram.ScramLoginModule)")
    flag = tokens.word(f"a control flag after {module} ({', '.join(_FLAGS)})")
    if flag.lower() not in _FLAGS:
        raise JaasError(f"'{flag}' is not a control flag ({', '.join(_FLAGS)})")
    options: dict[str, str] = {}
    while tokens.peek() not in (";", ""):
        name = tokens.word("an option name or ';'")
        tokens.expect("=", f"after option '{name}'")
        options[name] = tokens.value(name)
    tokens.expect(";", "at the end of the login module entry")
    if tokens.peek():
        raise JaasError("more than one login module: Kafka clients take exactly one in sasl.jaas.config")
    return JaasEntry(module, flag.lower(), MappingProxyType(options))
