"""DR drill, failover mode: the production flow's own failover and failback, for a drill application only.

Where the canary drill (:mod:`.drill`) copies its own topic with a mirror of its own, this mode drills the real
path: the production flow and its running mirrors, the failover workflow of the ``failover`` DAG (assess, the
bound plan, the approval gate with four eyes, the per-topic execute of :mod:`.topic_failover`, verify) and its
failback, scoped to a *drill application* the operator designates: its alias in the active-cluster registry, its
topics (mirrored by the production flow, e.g. ``drill.app.*``) and its consumer groups. The forward flow goes on
copying every other topic; nothing of another application moves.

1. :func:`check_scope`: refused in one line, nothing changed, when the scope touches a production application
   registered in the state store (an alias of the registry or of a failover/cutover record that is not a drill's,
   a group of such a record, or a drill topic one of those groups reads);
2. :func:`prepare`: a known sequence (``records`` per topic, sequence-numbered and stamped with the run) produced
   on the primary; each drill group is positioned at the first of them and consumes ``consume_before_failure``
   per topic there and commits;
3. the failover as the ``failover`` DAG runs it (planned, ``topics`` = the drill topics, ``apps`` = the drill
   application), through the approval gate of the ``dr_drill`` DAG;
4. :func:`measure`: each drill group resumes on the standby where the failover committed it and reads the rest:
   RPO (records of the run the standby lacks after the switch), RTO from the trigger and from the approval (to the
   first record read on the standby), duplicates and losses per group over the whole sequence;
5. the failback of the same scope (``steps.drill_failback``: approved by the same gate, the drill is one change),
   then :func:`left_after_failback`: each group must find nothing of the run left to read on the primary.

The drill application's topics keep their records (they are the operator's); the run's records carry its stamp,
so the next drill counts only its own.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from mirror_core.clients import make_admin, make_consumer
from mirror_core.config.model import MirrorConfig
from mirror_core.kafka_io import QUIET
from mirror_core.offsets.groups import committed_offsets
from mirror_core.state.store import StateStore
from mirror_core.workflows import failover
from mirror_core.workflows.drill_canary import Canary, commit_positions, end_offsets, next_offsets, read_canary
from mirror_core.workflows.drill_plan import DrillPlan
from mirror_core.workflows.errors import WorkflowError
from mirror_core.workflows.params import FailoverParams

#: the key a drill's failover and failback records carry (their apps and groups are not production's)
DRILL_MARK = "drill_app"


def failover_params(plan: DrillPlan) -> FailoverParams:
    """The failover the drill runs: planned, of the drill application's topics (exact names), groups and alias."""
    return FailoverParams(flow=plan.flow, apps=(plan.app,), groups=plan.groups, mode="planned",
                          drain_timeout_s=plan.drain_timeout_s, topics=tuple(re.escape(t) for t in plan.topics))


# -- 1. the scope --------------------------------------------------------------------------------------------
def production_scope(store: StateStore) -> tuple[dict[str, str], dict[str, str]]:
    """(application alias -> where it is registered, consumer group -> where) of every production application:
    the registry (an alias any change of which was not a drill's) and the failover/cutover records not made by
    a drill."""
    apps: dict[str, str] = {}
    groups: dict[str, str] = {}
    drill_runs: set[str | None] = set()
    records: list[tuple[str, Any]] = [("failover", r) for r in store.failovers(limit=10_000)]
    records += [("cutover", r) for r in store.cutovers(limit=10_000)]
    for kind, rec in records:
        details = rec.details or {}
        if details.get(DRILL_MARK):
            drill_runs.add(rec.run_id)
            continue
        where = f"{getattr(rec, 'kind', kind)} record {rec.id}"
        for alias in details.get("apps") or ():
            apps.setdefault(str(alias), where)
        for group in details.get("groups") or ():
            groups.setdefault(str(group), where)
    for row in store.registry():
        if any(change.run_id not in drill_runs for change in store.registry_history(row.app_alias, limit=10_000)):
            apps.setdefault(row.app_alias, "the active-cluster registry")
    return apps, groups


def check_scope(config: MirrorConfig, store: StateStore, plan: DrillPlan) -> None:
    """Refuse (one WorkflowError line, nothing changed) a drill scope that overlaps a production application."""
    flow = config.flow(plan.flow)
    apps, groups = production_scope(store)
    problems = []
    if plan.app in apps:
        problems.append(f"app {plan.app} is a production application ({apps[plan.app]})")
    problems += [f"group {g} is a production group ({groups[g]})" for g in plan.groups if g in groups]
    drill_topics = set(plan.topics) | {flow.remote_topic(t) for t in plan.topics}
    for cluster in (flow.source, flow.target):
        admin = make_admin(config.cluster(cluster))
        for group, where in sorted(groups.items()):
            if group in plan.groups:
                continue
            read = sorted({t for t, _ in committed_offsets(admin, group)} & drill_topics)
            problems += [f"topic {t} is read by production group {group} ({where}) on {cluster}" for t in read]
    if problems:
        raise WorkflowError("drill scope overlaps production: " + "; ".join(problems) + "; nothing was changed; "
                            "designate a drill application of its own (app, topics, groups)")


# -- 2. the known sequence -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class DrillData:
    """What the drill produced and consumed before the failover: the scenario the measurements compare with."""

    stamp: str
    produced: Mapping[str, int]  # topic -> records of this run (sequence numbers 0..n-1)
    partitions: Mapping[str, int]  # topic -> partition count
    consumed: Mapping[str, Mapping[str, list[int]]]  # group -> topic -> sequence numbers consumed on the primary

    def to_xcom(self) -> dict[str, Any]:
        return {"stamp": self.stamp, "produced": dict(self.produced), "partitions": dict(self.partitions),
                "consumed": {g: dict(t) for g, t in self.consumed.items()}}

    @classmethod
    def from_xcom(cls, data: Mapping[str, Any]) -> DrillData:
        return cls(data["stamp"], data["produced"], data["partitions"], data["consumed"])


def prepare(config: MirrorConfig, plan: DrillPlan, run_id: str | None) -> DrillData:
    """Produce the known sequence on the primary; each drill group consumes ``consume_before_failure`` of every
    drill topic from the run's first record and commits. Missing topics or busy groups: one line, nothing done."""
    flow = config.flow(plan.flow)
    src = config.cluster(flow.source)
    admin = make_admin(src)
    listed = admin.list_topics(timeout=15).topics
    missing = [t for t in plan.topics if t not in listed]
    if missing:
        raise WorkflowError(f"topics: {', '.join(missing)} do not exist on {flow.source}; create the drill "
                            "application's topics first; nothing was changed")
    failover.require_idle(config, flow.source, list(plan.groups))
    stamp = f"{run_id or 'drill'}-{datetime.now(UTC).strftime('%Y%m%dT%H%M%S')}"
    partitions = {t: len(listed[t].partitions) for t in plan.topics}
    reader = make_consumer(src, f"mirror-core.drill-reader.{stamp}", QUIET)
    try:
        starts = {t: end_offsets(reader, t, partitions[t]) for t in plan.topics}
        for t in plan.topics:
            canary = Canary(src, t, partitions[t], stamp)
            canary.produce(plan.records)
            canary.flush()
        ends = {t: end_offsets(reader, t, partitions[t]) for t in plan.topics}
    finally:
        reader.close()
    consumed: dict[str, dict[str, list[int]]] = {}
    for group in plan.groups:
        consumer = make_consumer(src, group, QUIET)
        try:
            for t in plan.topics:
                rows = read_canary(consumer, t, starts[t], ends[t], plan.timeout_s, limit=plan.consume_before_failure,
                                   stamp=stamp)
                commit_positions(admin, group, {(t, p): o for p, o in {**starts[t], **next_offsets(rows)}.items()})
                consumed.setdefault(group, {})[t] = [s for _, _, s in rows]
        finally:
            consumer.close()
    return DrillData(stamp, {t: plan.records for t in plan.topics}, partitions, consumed)


# -- 4. measured on the standby ------------------------------------------------------------------------------
def _wall(mono: float) -> datetime:
    """A monotonic moment as UTC wall time."""
    return datetime.fromtimestamp(time.time() - (time.monotonic() - mono), UTC)


def _seconds(later: datetime, earlier: datetime | None) -> float | None:
    if earlier is None:
        return None
    if earlier.tzinfo is None:
        earlier = earlier.replace(tzinfo=UTC)
    return round((later - earlier).total_seconds(), 3)


def measure(config: MirrorConfig, plan: DrillPlan, data: DrillData, triggered_at: datetime | None,
            approved_at: datetime | None) -> dict[str, Any]:
    """Each drill group reads the rest on the standby from where the failover committed it (and commits, as the
    application would); RPO, RTO (from the trigger and from the approval), duplicates and losses."""
    flow = config.flow(plan.flow)
    tgt = config.cluster(flow.target)
    admin = make_admin(tgt)
    reader = make_consumer(tgt, f"mirror-core.drill-reader.{data.stamp}", QUIET)
    remote = {t: flow.remote_topic(t) for t in plan.topics}
    try:
        ends = {t: end_offsets(reader, remote[t], data.partitions[t]) for t in plan.topics}
        on_standby = {t: {s for _, _, s in read_canary(reader, remote[t], {}, ends[t], plan.timeout_s,
                                                       stamp=data.stamp)} for t in plan.topics}
    finally:
        reader.close()
    missing = {t: sorted(set(range(data.produced[t])) - on_standby[t]) for t in plan.topics}
    firsts: list[float] = []
    groups: dict[str, Any] = {}
    for group in plan.groups:
        committed = committed_offsets(admin, group)
        consumer = make_consumer(tgt, group, QUIET)
        per_topic: dict[str, Any] = {}
        try:
            for t in plan.topics:
                starts = {p: committed.get((remote[t], p), 0) for p in range(data.partitions[t])}
                first_at: list[float] = []
                rows = read_canary(consumer, remote[t], starts, ends[t], plan.timeout_s, first_at=first_at,
                                   stamp=data.stamp)
                firsts += first_at
                commit_positions(admin, group, {(remote[t], p): o for p, o in {**starts, **next_offsets(rows)}.items()})
                seen = Counter([*data.consumed[group][t], *(s for _, _, s in rows)])
                per_topic[t] = {"consumed_on_primary": len(data.consumed[group][t]),
                                "consumed_on_standby": len(rows), "resumed_at": {str(p): o for p, o in starts.items()},
                                "duplicates": sum(n - 1 for n in seen.values() if n > 1),
                                "losses": len(set(range(data.produced[t])) - set(seen))}
        finally:
            consumer.close()
        groups[group] = per_topic
    first = _wall(min(firsts)) if firsts else datetime.now(UTC)
    rto_trigger, rto_approval = _seconds(first, triggered_at), _seconds(first, approved_at)
    return {"rpo_records": sum(len(m) for m in missing.values()),
            "rpo_missing": {t: m[:20] for t, m in missing.items() if m},
            "rto_from_trigger_s": rto_trigger, "rto_from_approval_s": rto_approval,
            "rto_basis": "first record read on the standby" if any(
                g[t]["consumed_on_standby"] for g in groups.values() for t in g) else "positioned at the end",
            "duplicates": sum(g[t]["duplicates"] for g in groups.values() for t in g),
            "losses": sum(g[t]["losses"] for g in groups.values() for t in g),
            "groups": groups, "first_on_standby_at": first.isoformat()}


# -- 5. after the failback -----------------------------------------------------------------------------------
def left_after_failback(config: MirrorConfig, store: StateStore, plan: DrillPlan, data: DrillData) -> dict[str, Any]:
    """Once the failback moved the groups home: what each group still finds of the run on the primary from its
    position there (nothing, or it would read records again), and where the drill application points."""
    flow = config.flow(plan.flow)
    src = config.cluster(flow.source)
    admin = make_admin(src)
    left: dict[str, int] = {}
    for group in plan.groups:
        committed = committed_offsets(admin, group)
        consumer = make_consumer(src, group, QUIET)
        try:
            for t in plan.topics:
                starts = {p: committed.get((t, p), 0) for p in range(data.partitions[t])}
                ends = end_offsets(consumer, t, data.partitions[t])
                left[f"{group} {t}"] = len(read_canary(consumer, t, starts, ends, plan.timeout_s, stamp=data.stamp))
        finally:
            consumer.close()
    row = store.active_cluster(plan.app)
    return {"read_after_failback": left, "app_on": row.cluster if row else None,
            "complete": not any(left.values()) and row is not None and row.cluster == flow.source}
