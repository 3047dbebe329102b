"""What a running process takes from its configuration file again (on SIGHUP or when the file changes): each flow's
topic and group filters (``topics``, ``topics.exclude``, ``groups``, ``groups.exclude``). Anything else that changed
is named in one line and taken at the next restart."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from mirror_core.config.keys import parse_patterns
from mirror_core.config.model import FlowConfig, MirrorConfig
from mirror_core.filters import NameFilter

FILTERS = ("topics", "groups")


@dataclass(frozen=True)
class FilterChange:
    """New filters for a running flow."""

    flow: FlowConfig  # the running flow's own config (refilter() changes it in place)
    topics: NameFilter
    groups: NameFilter

    def describe(self) -> str:
        parts = []
        for what, old, new in (("topics", self.flow.topics, self.topics), ("groups", self.flow.groups, self.groups)):
            if old.include != new.include:
                parts.append(f"{what} '{old.include}' -> '{new.include}'")
            if old.exclude != new.exclude:
                parts.append(f"{what}.exclude '{old.exclude}' -> '{new.exclude}'")
        return f"flow {self.flow.name}: {', '.join(parts)}"

    def apply(self) -> None:
        self.flow.refilter(self.topics, self.groups)


def _same(a: object, b: object) -> bool:
    if a == b:
        return True
    # (objects without an equality of their own, e.g. a replication policy: the same class and attributes)
    return type(a) is type(b) and hasattr(a, "__dict__") and vars(a) == vars(b)


def changes(running: MirrorConfig, fresh: MirrorConfig) -> tuple[list[FilterChange], list[str]]:
    """The filter changes to apply now, and one line for each thing that changed too but waits for a restart."""
    apply: list[FilterChange] = []
    later: list[str] = []
    for flow in running.all_flows:
        try:
            new = fresh.flow(flow.name)
        except KeyError:
            later.append(f"flow {flow.name} is no longer in the file: it runs until the next restart")
            continue
        if not (_same(new.topics, flow.topics) and _same(new.groups, flow.groups)):
            apply.append(FilterChange(flow, new.topics, new.groups))
        others = [f.name for f in fields(FlowConfig)
                  if f.name not in FILTERS and not _same(getattr(new, f.name), getattr(flow, f.name))]
        if others:
            later.append(f"flow {flow.name}: {', '.join(others)} changed in the file: taken at the next restart")
    known = {f.name for f in running.all_flows}
    for flow in fresh.all_flows:
        if flow.name not in known:
            later.append(f"flow {flow.name} is new in the file: it starts at the next restart")
    changed = [alias for alias in fresh.clusters if alias in running.clusters
               and not _same(fresh.clusters[alias], running.clusters[alias])]
    if changed:
        later.append(f"cluster settings of {', '.join(changed)} changed in the file: taken at the next restart")
    return apply, later


def with_overrides(topics: NameFilter, groups: NameFilter,
                   overrides: Mapping[str, str]) -> tuple[NameFilter, NameFilter]:
    """A flow's filters from its file (``topics``, ``groups``) with the keys the state store sets (``overrides``, by
    config key: ``topics``, ``topics.exclude``, ``groups``, ``groups.exclude``; checked when they were stored)."""
    def pick(key: str, default: Any) -> Any:
        return parse_patterns(overrides[key]) if key in overrides else default
    return (NameFilter(pick("topics", topics.include), pick("topics.exclude", topics.exclude)),
            NameFilter(pick("groups", groups.include), pick("groups.exclude", groups.exclude)))


def filter_values(flow: FlowConfig) -> dict[str, str]:
    """The filters a flow applies now, by config key (as a mirror instance reports them)."""
    return {"topics": str(flow.topics.include), "topics.exclude": str(flow.topics.exclude),
            "groups": str(flow.groups.include), "groups.exclude": str(flow.groups.exclude)}
