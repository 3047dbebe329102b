"""Topic and group filters: comma-separated regex lists matched against the whole name (as MM2)."""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class PatternList:
    """A list of regexes; ``matches`` is a full match against any of them."""

    patterns: tuple[str, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "_compiled", re.compile("|".join(f"(?:{p})" for p in self.patterns))
                           if self.patterns else None)

    def matches(self, name: str) -> bool:
        compiled: re.Pattern[str] | None = self._compiled  # type: ignore[attr-defined]
        return bool(compiled and compiled.fullmatch(name))

    def __str__(self) -> str:
        return ", ".join(self.patterns)


@dataclass(frozen=True)
class NameFilter:
    """Include/exclude filter: a name passes when it matches ``include`` and not ``exclude``."""

    include: PatternList
    exclude: PatternList

    def accepts(self, name: str) -> bool:
        return self.include.matches(name) and not self.exclude.matches(name)
