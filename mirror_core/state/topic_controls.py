"""Checks, queries and refusal lines of the operators' topic controls (pauses and bandwidth limits); the
:class:`~mirror_core.state.store.StateStore` methods that write them use these. Every refusal is one line
ending in "nothing was recorded"."""

from __future__ import annotations

import re

from sqlalchemy import Select, select

from mirror_core.state.errors import StateStoreError
from mirror_core.state.models import TopicControl, TopicControlRecord, control_scope

TOPIC_CONTROL_KINDS = ("pause", "limit")
_FLOW = re.compile(r"[A-Za-z0-9_\-]+->[A-Za-z0-9_\-]+")  # cluster aliases as the config allows them
_TOPIC = re.compile(r"[A-Za-z0-9._\-]{1,249}")  # Kafka's legal topic names
_INT32_MAX, _INT64_MAX = 2**31 - 1, 2**63 - 1


def where(flow: str, topic: str | None, partition: int | None) -> str:
    """``dc1->dc2 orders[3]``, ``dc1->dc2 orders``, ``dc1->dc2 (whole flow)`` (as the records say it)."""
    return f"{flow} {control_scope(topic, partition) or '(whole flow)'}"


def one_line(text: str) -> str:
    return " ".join(text.split())


def check(verb: str, flow: str, topic: str | None, partition: int | None, who: str, reason: str,
          bytes_per_s: int | None = None, needs_rate: bool = False) -> None:
    """Raise the one-line StateStoreError naming what is wrong with ``verb``'s arguments, if anything."""
    problem = None
    if not isinstance(flow, str) or not _FLOW.fullmatch(flow) or len(flow) > 300:
        problem = (f"{flow!r} is not a flow: use SOURCE->TARGET with the clusters' aliases, e.g. 'dc1->dc2'")
    elif topic is not None and not _TOPIC.fullmatch(topic):
        problem = (f"topic {topic!r} is not a topic name (1-249 letters, digits, '.', '_' or '-'): name one "
                   "source topic, not a pattern" if topic.strip() else "the topic is empty: name one source topic")
    elif partition is not None and (isinstance(partition, bool) or not isinstance(partition, int)):
        problem = f"partition {partition!r} is not an integer"
    elif partition is not None and partition < 0:
        problem = f"partition {partition} is negative: partitions are numbered from 0"
    elif partition is not None and partition > _INT32_MAX:
        problem = f"partition {partition} is beyond Kafka's partition numbers (at most {_INT32_MAX})"
    elif not isinstance(reason, str) or not reason.strip():
        problem = "a reason is needed (why, e.g. 'backfill of orders saturates the WAN link')"
    elif not isinstance(who, str) or not who.strip() or len(who) > 250:
        problem = "who does it is needed (1-250 characters)"
    elif needs_rate and (isinstance(bytes_per_s, bool) or not isinstance(bytes_per_s, int)):
        problem = f"bytes per second must be an integer, got {bytes_per_s!r}"
    elif needs_rate and bytes_per_s <= 0:  # type: ignore[operator]
        problem = f"bytes per second must be > 0, got {bytes_per_s} (to lift a limit, unlimit it)"
    elif needs_rate and bytes_per_s > _INT64_MAX:  # type: ignore[operator]
        problem = f"bytes per second {bytes_per_s} is beyond what can be recorded (at most {_INT64_MAX})"
    if problem is not None:
        raise refusal(verb, where(flow, topic, partition) if isinstance(flow, str) else repr(flow), problem)


def refusal(verb: str, at: str, problem: str) -> StateStoreError:
    return StateStoreError(f"{verb} refused on {at}: {one_line(problem)}; nothing was recorded")


def active_on(flow: str, kind: str, topic: str | None, partition: int | None) -> Select[TopicControl]:
    """The active control of exactly this scope (at most one row)."""
    return select(TopicControl).where(TopicControl.flow == flow, TopicControl.kind == kind,
                                      TopicControl.scope == control_scope(topic, partition),
                                      TopicControl.cleared_at.is_(None))


def describe(c: TopicControlRecord) -> str:
    """``paused since 2026-12-06 07:30:00 UTC by alice (backfill)``; a limit says its rate."""
    what = "paused" if c.kind == "pause" else f"limited to {c.limit_bytes_per_s} bytes/s"
    return f"{what} since {c.set_at:%Y-%m-%d %H:%M:%S} UTC by {c.set_by} ({c.reason})"


def already_paused(c: TopicControlRecord) -> StateStoreError:
    return refusal("pause", c.where, f"{c.where} is {describe(c)} (id {c.id}); resume it first to pause it "
                                     "again with another reason")


def not_paused(at: str, cleared: TopicControlRecord | None = None) -> StateStoreError:
    if cleared is not None and cleared.cleared_at is not None:
        return refusal("resume", at, f"{at} is not paused by an operator: {cleared.cleared_by} resumed it at "
                                     f"{cleared.cleared_at:%Y-%m-%d %H:%M:%S} UTC ({cleared.clear_reason})")
    return refusal("resume", at, f"{at} is not paused by an operator")


def not_limited(at: str, cleared: TopicControlRecord | None = None) -> StateStoreError:
    if cleared is not None and cleared.cleared_at is not None:
        return refusal("unlimit", at, f"{at} has no bandwidth limit: {cleared.cleared_by} changed it at "
                                      f"{cleared.cleared_at:%Y-%m-%d %H:%M:%S} UTC ({cleared.clear_reason})")
    return refusal("unlimit", at, f"{at} has no bandwidth limit")


def changed_meanwhile(verb: str, at: str, now: TopicControlRecord | None) -> StateStoreError:
    """Another operator changed the same scope between our read and our write."""
    state = describe(now) if now is not None else "changed"
    return refusal(verb, at, f"another operator changed it at the same moment: it is now {state}; check "
                             "`mirror-core control list` and retry if still needed")


def control_json(c: TopicControlRecord) -> dict[str, object]:
    """A control as JSON (the CLI's ``--json``, the status page's API): times ISO 8601, UTC."""
    return {"id": c.id, "flow": c.flow, "kind": c.kind, "topic": c.topic, "partition": c.partition,
            "limit_bytes_per_s": c.limit_bytes_per_s, "reason": c.reason, "set_by": c.set_by,
            "set_at": c.set_at.isoformat(), "cleared_by": c.cleared_by,
            "cleared_at": c.cleared_at.isoformat() if c.cleared_at else None, "clear_reason": c.clear_reason,
            "active": c.active}
