"""The topic subset of a per-topic failover or failback: which source topics switch, which stay mirrored.

A failover of a subset does not stop the forward flow: the switched topics get a pause in the state store
attributed to the failover run (the running mirrors apply it within a second, like an operator's pause), the
other topics go on being copied. A consumer group moves only when every topic of the flow it reads switches;
a group that reads a switched and a staying topic is refused in one line at assessment (it cannot be on two
clusters at once), nothing changed. Its failback clears exactly those pauses.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from operator import attrgetter
from typing import TypeVar

from mirror_core.state.store import StateStore
from mirror_core.workflows.errors import WorkflowError

#: how the reason of a failover's topic pause begins (its failback clears only pauses that begin so)
PAUSE_MARK = "switched to "

R = TypeVar("R")


def resolve(wanted: Sequence[str], known: Iterable[str], flow: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(switching, staying): the flow's source topics ``known`` that a name or pattern of ``wanted`` matches
    (whole name, as the config's topic filters), and the rest. One WorkflowError, naming the entry, when an
    entry is not a pattern or matches none of them."""
    names = sorted(set(known))
    chosen: set[str] = set()
    for entry in wanted:
        try:
            pattern = re.compile(entry)
        except re.error as exc:
            raise WorkflowError(f"topics: {entry!r} is not a topic name or pattern ({exc}); nothing was "
                                "changed") from None
        hit = {t for t in names if pattern.fullmatch(t)}
        if not hit:
            shown = ", ".join(names[:10]) + (" ..." if len(names) > 10 else "")
            raise WorkflowError(f"topics: {entry!r} matches no source topic of flow {flow} ({shown or 'none'}); "
                                "nothing was changed")
        chosen |= hit
    return tuple(t for t in names if t in chosen), tuple(t for t in names if t not in chosen)


def split_groups(rows_by_group: Mapping[str, Sequence[R]], switching: Sequence[str],
                 topic_of: Callable[[R], str] = attrgetter("topic")) -> None:
    """Refuse in one line a group that reads a switched and a staying topic of the flow, or none of the switched
    ones (``topic_of``: a row's topic as the forward flow's source names it)."""
    moving = set(switching)
    problems = []
    for group, rows in rows_by_group.items():
        topics = {topic_of(r) for r in rows}
        if topics & moving and topics - moving:
            problems.append(f"group {group} reads switching {', '.join(sorted(topics & moving))} and staying "
                            f"{', '.join(sorted(topics - moving))}")
        elif rows and not topics & moving:
            problems.append(f"group {group} reads none of the switching topics ({', '.join(sorted(topics))})")
    if problems:
        raise WorkflowError("; ".join(problems) + ": a group moves with all of its topics of the flow; switch them "
                            "together or leave the group out; nothing was changed")


def pause_reason(standby: str, run_id: str | None, why: str) -> str:
    return f"{PAUSE_MARK}{standby} by failover run {run_id or '(no run id)'} ({why})"


def pause_switched(store: StateStore, flow: str, topics: Sequence[str], standby: str, who: str, run_id: str | None,
                   why: str) -> dict[str, int]:
    """Pause each switched topic of the forward flow (attributed to the failover run); a topic paused already
    (by an operator) is refused in one line, with the pauses made here cleared again."""
    made: dict[str, int] = {}
    try:
        for topic in topics:
            made[topic] = store.pause_topic(flow, topic, who, pause_reason(standby, run_id, why)).id
    except Exception:
        resume_switched(store, flow, list(made), who, f"rollback of {why}")
        raise
    return made


def resume_switched(store: StateStore, flow: str, topics: Sequence[str], who: str, why: str) -> list[str]:
    """Clear the failover pauses of ``topics`` on the forward flow (an operator's own pause is left alone): the
    topics resumed."""
    active = {c.topic: c for c in store.active_topic_controls([flow])
              if c.kind == "pause" and c.partition is None and c.reason.startswith(PAUSE_MARK)}
    done = []
    for topic in topics:
        if topic in active:
            store.resume_topic(flow, topic, who, why)
            done.append(topic)
    return done


def switched_already(store: StateStore | None, flow: str, topics: Sequence[str]) -> list[str]:
    """The topics of ``topics`` a failover paused on the forward flow already (switched to the standby)."""
    if store is None:
        return []
    return sorted(c.topic for c in store.active_topic_controls([flow]) if c.kind == "pause" and c.partition is None
                  and c.topic in topics and c.reason.startswith(PAUSE_MARK) and c.topic is not None)


def other_switched(store: StateStore, flow: str, topics: Sequence[str]) -> list[str]:
    """Topics of the forward flow switched by another failover (still on the standby besides ``topics``)."""
    return sorted(c.topic for c in store.active_topic_controls([flow]) if c.kind == "pause" and c.partition is None
                  and c.topic is not None and c.topic not in topics and c.reason.startswith(PAUSE_MARK))


def refuse_whole_flow(store: StateStore | None, flow: str, verb: str, standby: str) -> None:
    """A failover or failback of the whole flow while some of its topics are switched by a failover of those
    topics: refused in one line (their groups' offsets on the standby would be committed again from the primary's,
    rewinding what their applications read there since)."""
    switched = other_switched(store, flow, ()) if store is not None else []
    if switched:
        raise WorkflowError(f"the topics {', '.join(switched)} of flow {flow} are switched to {standby} already by a "
                            f"failover of those topics: a {verb} of the whole flow would commit their groups' offsets "
                            f"again; fail them back first (failback with topics = {', '.join(switched)}), or name the "
                            f"topics of this {verb} with the topics Param; nothing was changed")


def wait_paused(store: StateStore, flow: str, partitions: Iterable[tuple[str, int]], timeout: float) -> None:
    """Until every live instance of ``flow`` paused the switched partitions it owns (its in-flight records landed
    first): each partition reported paused for the failover, or no instance running the flow."""
    import time

    wanted = set(partitions)
    deadline = time.monotonic() + timeout
    while True:
        if not [i for i in store.flow_instances(flow) if i.state == "running"]:
            return
        reported = {(p.topic, p.partition) for p in store.paused_partitions(flow=flow) if PAUSE_MARK in p.reason}
        if wanted <= reported:
            return
        if time.monotonic() > deadline:
            left = sorted(wanted - reported)
            raise WorkflowError(f"flow {flow}: the running mirror did not pause "
                                + ", ".join(f"{t}[{p}]" for t, p in left[:10])
                                + f" within {timeout:.0f}s; nothing was switched")
        time.sleep(0.5)
