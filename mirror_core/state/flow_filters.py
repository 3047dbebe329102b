"""Checks and refusal lines of the flow filters set in the state store (``mirror-core control filter``); the
:class:`~mirror_core.state.store.StateStore` methods that write them use these. Every refusal is one line ending in
"nothing was recorded"."""

from __future__ import annotations

from collections.abc import Mapping

from mirror_core.config.keys import parse_patterns
from mirror_core.state import topic_controls as tc
from mirror_core.state.errors import StateStoreError
from mirror_core.state.models import FILTER_KEYS, FlowFilterRecord


def check(verb: str, flow: str, who: str, reason: str, values: Mapping[str, str | None]) -> dict[str, str | None]:
    """The values by config key, each a comma-separated list of regexes that compiles; or one StateStoreError."""
    tc.check(verb, flow, None, None, who, reason)  # the flow's name, who and why, as the topic controls check them
    unknown = sorted(set(values) - set(FILTER_KEYS))
    if unknown:
        raise refusal(verb, flow, f"unknown filter key {', '.join(unknown)} (keys: {', '.join(FILTER_KEYS)})")
    out: dict[str, str | None] = {k: values.get(k) for k in FILTER_KEYS}
    if verb == "filter" and all(v is None for v in out.values()):
        raise refusal(verb, flow, "no filter given: set topics, topics.exclude, groups or groups.exclude")
    for key, value in out.items():
        if value is None:
            continue
        try:
            out[key] = str(parse_patterns(value))
        except ValueError as exc:
            raise refusal(verb, flow, f"{key} {value!r}: {exc}") from None
    return out


def refusal(verb: str, flow: str, problem: str) -> StateStoreError:
    return StateStoreError(f"{verb} refused on {flow}: {tc.one_line(problem)}; nothing was recorded")


def describe(f: FlowFilterRecord) -> str:
    """``topics 'orders, audit', groups.exclude 'tmp-.*' set at ... UTC by alice (why)``"""
    keys = ", ".join(f"{k} '{v}'" for k, v in f.overrides.items())
    return f"{keys} set at {f.set_at:%Y-%m-%d %H:%M:%S} UTC by {f.set_by} ({f.reason})"


def changed_meanwhile(verb: str, flow: str, now: FlowFilterRecord | None) -> StateStoreError:
    """Another operator changed the flow's filters between our read and our write."""
    state = describe(now) if now is not None else "back to the config file's"
    return refusal(verb, flow, f"another operator changed its filters at the same moment: now {state}; check "
                               "`mirror-core control filters` and retry if still needed")


def filter_json(f: FlowFilterRecord) -> dict[str, object]:
    return {"id": f.id, "flow": f.flow, **f.values, "reason": f.reason, "set_by": f.set_by,
            "set_at": f.set_at.isoformat(), "cleared_by": f.cleared_by,
            "cleared_at": f.cleared_at.isoformat() if f.cleared_at else None, "clear_reason": f.clear_reason,
            "active": f.active}
