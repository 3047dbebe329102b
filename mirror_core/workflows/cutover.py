"""Cloud-migration cutover: move producers and consumers of some topics from a source cluster to a
target cluster for good, in checked steps, each with a way back.

preflight (configs/ACLs in sync, replication healthy, lag under a threshold) -> quiesce producers
(confirmed by the approver; optionally DENY WRITE ACLs on the source topics) -> drain to lag 0 and
stop the flow -> completeness (the offset map accounts for every source record) -> commit translated
offsets on the target -> switch the registry -> final approval. :func:`rollback` undoes whatever
steps ran, in reverse order, from what they recorded.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
)

from mirror_core.clients import make_admin, make_consumer
from mirror_core.config.model import FlowConfig, MirrorConfig
from mirror_core.errors import ReadIncomplete
from mirror_core.kafka_io import QUIET, first_visible
from mirror_core.offsets.groups import commit_offsets
from mirror_core.offsets.translate import FlowOffsets, translate_group
from mirror_core.quotas import QuotaChange, QuotaError, copy_quotas, record_quota_changes
from mirror_core.replication.acls import topic_acls
from mirror_core.state.store import StateStore
from mirror_core.status import flow_status
from mirror_core.topic_sync import lift_remote_read_only, sync_flow
from mirror_core.workflows.control import WorkflowError, flow_of, set_flow
from mirror_core.workflows.failover import (
    commit_translations,
    reachable,
    registry_moves,
    require_idle,
)
from mirror_core.workflows.plans import CutoverPlan, DataLag, PartitionLag, group_offsets

log = logging.getLogger(__name__)
DENY_PRINCIPAL = "User:*"


def _topic_lag(config: MirrorConfig, flow: FlowConfig, topics: tuple[str, ...] | list[str]) -> DataLag:
    status = flow_status(config, flow)
    if not status.reachable:
        raise WorkflowError(f"flow {flow.name}: status unavailable: {status.error}")
    parts = [p for p in status.partitions if p.topic in topics]
    missing = sorted(set(topics) - {p.topic for p in parts})
    if missing:
        raise WorkflowError(f"topic(s) not replicated by flow {flow.name}: {', '.join(missing)}")
    unknown = tuple(f"{p.topic}[{p.partition}]" for p in parts if p.lag is None)
    total = None if unknown else sum(p.lag or 0 for p in parts)
    return DataLag(total, unknown, tuple(PartitionLag(p.topic, p.partition, p.lag, p.position, p.source_end)
                                         for p in parts))


def preflight(config: MirrorConfig, store: StateStore, source: str, target: str, topics: list[str],
              groups: list[str], apps: list[str], max_lag: int, deny_writes: bool = False) -> CutoverPlan:
    """Everything checked before anyone is asked; raises WorkflowError naming what is not ready."""
    flow = flow_of(config, f"{source}->{target}")
    if not topics:
        raise WorkflowError("Param 'topics': name at least one topic to cut over")
    refused = [t for t in topics if not flow.should_replicate(t)]
    if refused:
        raise WorkflowError(f"Param 'topics': not replicated by {flow.name} (topic filter): {', '.join(refused)}")
    for alias in (source, target):
        ok, note = reachable(config, alias)
        if not ok:
            raise WorkflowError(f"cluster {alias} is unreachable: {note}")
    sync = sync_flow(config, flow, dry_run=True)
    remotes = {flow.remote_topic(t) for t in topics}
    drift = [f"{c.kind} {c.topic}: {c.detail}" for c in sync.changes + sync.refused if c.topic in remotes]
    if drift:
        raise WorkflowError("topic configs/ACLs not in sync (run the topic_config_sync DAG first): " + "; ".join(drift))
    lag = _topic_lag(config, flow, topics)
    if lag.total is None or lag.total > max_lag:
        raise WorkflowError(f"replication lag {lag.total} on {', '.join(topics)} is above the threshold "
                            f"{max_lag} (or unknown: {', '.join(lag.unknown)})")
    warnings = _write_acl_warnings(config, flow, topics)
    warnings += [f"client quota {c.entity} {c.describe()} is copied to {target} at the switch"
                 for c in _quotas(config, store, flow, dry_run=True, run_id=None)]
    others = sorted(p.topic for p in flow_status(config, flow).partitions
                    if p.topic not in topics and not flow.policy.is_heartbeats_topic(p.topic))
    if others:
        warnings.append(f"the flow {flow.name} also replicates {', '.join(sorted(set(others)))}: the cutover stops "
                        "the whole flow, so those stop being replicated too")
    translations = {g: translate_group(config, g, source, target) for g in groups}
    return CutoverPlan(flow.name, source, target, tuple(topics), {t: flow.remote_topic(t) for t in topics}, lag,
                       group_offsets(translations), registry_moves(store, apps, target), tuple(warnings), deny_writes)


def _write_acl_warnings(config: MirrorConfig, flow: FlowConfig, topics: list[str]) -> list[str]:
    """Producers allowed to write a source topic but not its remote copy (mirrors never copy WRITE)."""
    out: list[str] = []
    src, tgt = make_admin(config.cluster(flow.source)), make_admin(config.cluster(flow.target))
    for t in topics:
        try:
            writers = {e.principal for e in topic_acls(src, t) if e.operation in (AclOperation.WRITE, AclOperation.ALL)
                       and e.permission == AclPermissionType.ALLOW}
            if not writers:
                continue
            remote_writers = {e.principal for e in topic_acls(tgt, flow.remote_topic(t))
                              if e.operation in (AclOperation.WRITE, AclOperation.ALL)
                              and e.permission == AclPermissionType.ALLOW}
        except Exception as exc:  # no authorizer on the cluster: nothing to compare
            log.info("ACLs not readable (%s); skipping the WRITE check", exc)
            return out
        for principal in sorted(writers - remote_writers):
            out.append(f"{principal} may write {t} on {flow.source} but not {flow.remote_topic(t)} on "
                       f"{flow.target}: grant it before producers move")
    return out


def _deny_binding(topic: str) -> AclBinding:
    return AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, DENY_PRINCIPAL, "*",
                      AclOperation.WRITE, AclPermissionType.DENY)


def deny_writes(config: MirrorConfig, source: str, topics: tuple[str, ...] | list[str]) -> list[str]:
    """DENY WRITE for every principal on the source topics (super users, e.g. the mirror, are exempt)."""
    admin = make_admin(config.cluster(source))
    futures = admin.create_acls([_deny_binding(t) for t in topics], request_timeout=15)
    for f in futures.values():
        f.result(15)
    return list(topics)


def allow_writes_again(config: MirrorConfig, source: str, topics: tuple[str, ...] | list[str]) -> None:
    admin = make_admin(config.cluster(source))
    filters = [AclBindingFilter(ResourceType.TOPIC, t, ResourcePatternType.LITERAL, DENY_PRINCIPAL, "*",
                                AclOperation.WRITE, AclPermissionType.DENY) for t in topics]
    for f in admin.delete_acls(filters, request_timeout=15).values():
        f.result(15)


def drain_and_stop(config: MirrorConfig, store: StateStore, plan: CutoverPlan, who: str, run_id: str | None,
                   timeout: float) -> dict[str, Any]:
    flow = flow_of(config, plan.flow)
    deadline = time.monotonic() + timeout
    while (lag := _topic_lag(config, flow, plan.topics).total) != 0:
        if time.monotonic() > deadline:
            raise WorkflowError(f"lag still {lag} after {timeout:.0f}s: are producers really stopped on "
                                f"{flow.source}?")
        time.sleep(1.0)
    stopped = set_flow(store, flow.name, "stopped", who, f"cutover {flow.source} -> {flow.target}", run_id)
    try:
        residual = _topic_lag(config, flow, plan.topics).total
    except Exception:
        set_flow(store, flow.name, "running", who, "cutover: status unavailable after the stop; flow restored",
                 run_id)
        raise
    if residual:
        set_flow(store, flow.name, "running", who, "cutover: producers still writing; flow restored", run_id)
        raise WorkflowError(f"{residual} records arrived after the drain: producers are still writing on "
                            f"{flow.source}; the flow was restarted")
    return stopped


def completeness(config: MirrorConfig, plan: CutoverPlan) -> dict[str, Any]:
    """Every source record of the cutover topics accounted for on the target, by the exact offset map.

    Per partition: the flow's committed progress is the source end, and the offset map translates
    the source end to the remote topic's end (no record missing, none extra after the last one).
    """
    flow = flow_of(config, plan.flow)
    status = flow_status(config, flow)
    offsets = FlowOffsets.load(config, flow)
    reader = make_consumer(config.cluster(flow.target), "mirror-core.cutover", QUIET)
    try:
        return _completeness(plan, flow, status, offsets, reader)
    except ReadIncomplete as exc:
        raise WorkflowError(str(exc)) from None
    finally:
        reader.close()


def _completeness(plan: CutoverPlan, flow: FlowConfig, status: Any, offsets: FlowOffsets,
                  reader: Any) -> dict[str, Any]:
    rows, problems = [], []
    for p in status.partitions:
        if p.topic not in plan.topics:
            continue
        expected = None
        if p.source_end is not None:
            pm = offsets.offset_map.partitions.get((p.topic, p.partition))
            if pm is not None and len(pm):
                expected = pm.translate(p.source_end, p.position).target_offset
            elif p.source_end == (p.source_start or 0):
                expected = p.remote_end  # empty partition: nothing to account for
        markers = 0
        if expected is not None and p.remote_end is not None and expected < p.remote_end and \
                first_visible(reader, flow.remote_topic(p.topic), p.partition, expected, p.remote_end, 10) is None:
            # Exactly-once: the remote log ends with the commit marker of the mirror's last transaction.
            markers = p.remote_end - expected
        ok = p.position == p.source_end and expected is not None and expected + markers == p.remote_end
        rows.append({"topic": p.topic, "partition": p.partition, "source_end": p.source_end,
                     "replicated": p.position, "remote_end": p.remote_end, "expected_remote_end": expected,
                     "trailing_markers": markers, "complete": ok})
        if not ok:
            problems.append(f"{p.topic}[{p.partition}]: source end {p.source_end}, replicated {p.position}, "
                            f"remote end {p.remote_end} (expected {expected})")
    if problems:
        raise WorkflowError("completeness check failed: " + "; ".join(problems))
    return {"partitions": rows, "records": sum((r["source_end"] or 0) for r in rows)}


def switch(config: MirrorConfig, store: StateStore, plan: CutoverPlan, who: str,
           run_id: str | None) -> dict[str, Any]:
    """Commit translated offsets for the groups on the target, then point the applications there."""
    source, target = plan.source, plan.target
    groups = list(plan.groups)
    require_idle(config, target, groups)
    final = {g: [r for r in translate_group(config, g, source, target) if r.topic in plan.topics] for g in groups}
    quotas = _quotas(config, store, flow_of(config, plan.flow), dry_run=False, run_id=run_id)  # before: all or nothing
    committed = commit_translations(config, target, final)
    flow = flow_of(config, plan.flow)  # exactly the cut-over topics become writable (remote.topics.read.only)
    lifted = (lift_remote_read_only(config, flow, list(plan.topics), store, run_id, "cutover")
              if flow.remote_topics_read_only else [])
    previous = {a: m.current for a, m in plan.apps.items()}
    for alias in plan.apps:
        store.set_active_cluster(alias, target, who, f"cutover {source} -> {target}", run_id)
    return {"committed": committed, "registry_previous": previous, "read_only_lifted": lifted,
            "quotas": [f"{c.entity} {c.describe()}" for c in quotas]}


def _quotas(config: MirrorConfig, store: StateStore, flow: FlowConfig, dry_run: bool,
            run_id: str | None) -> list[QuotaChange]:
    """The source's client quotas copied to the target (mirror_core.quotas), in the drift history."""
    try:
        changes = copy_quotas(config.cluster(flow.source), config.cluster(flow.target), dry_run=dry_run)
    except QuotaError as exc:
        raise WorkflowError(str(exc)) from None
    record_quota_changes(store, flow.name, changes, dry_run, run_id)
    return changes


def rollback(config: MirrorConfig, store: StateStore, plan: CutoverPlan, done: dict[str, Any], who: str,
             run_id: str | None) -> list[str]:
    """Undo what this run changed, latest first; every step is attempted even when one fails.

    ``done`` holds what the steps returned (``switched``); what a failed step may have half-done is
    undone from the plan and the state store instead: the registry goes back to where the plan found
    it, the flow restarts if this run stopped it, the DENY WRITE ACLs go if the plan asked for them.
    """
    undone: list[str] = []
    errors: list[str] = []

    def attempt(what: str, step: Any) -> None:
        try:
            step()
            undone.append(what)
        except Exception as exc:
            errors.append(f"{what}: {exc}")

    def registry() -> None:
        for alias, move in plan.apps.items():
            row = store.active_cluster(alias)
            before = move.current or plan.source  # not registered before: it used the source
            if row is not None and row.cluster != before:
                store.set_active_cluster(alias, before, who, "cutover rolled back", run_id)

    def groups() -> None:
        # Back to what the groups had on the target before the switch: their previous offsets, or
        # no group at all (so they do not resume from the cutover's positions later by surprise).
        admin = make_admin(config.cluster(plan.target))
        restore: dict[str, dict[tuple[str, int], int]] = {}
        for c in (done.get("switched") or {}).get("committed", []):
            offsets = restore.setdefault(c["group"], {})
            if c["previous"] is not None:
                offsets[(c["topic"], c["partition"])] = c["previous"]
        for group, offsets in restore.items():
            if offsets:
                commit_offsets(admin, group, offsets)
            else:
                admin.delete_consumer_groups([group], request_timeout=15)[group].result(15)

    control = store.flow_controls().get(plan.flow)
    attempt("registry restored", registry)
    if done.get("switched"):
        attempt("group offsets on the target restored", groups)
    if control is not None and control.desired == "stopped" and control.run_id == run_id:
        attempt(f"flow {plan.flow} running again",
                lambda: set_flow(store, plan.flow, "running", who, "cutover rolled back", run_id))
    if plan.deny_writes:
        attempt("DENY WRITE ACLs removed from the source topics",
                lambda: allow_writes_again(config, plan.source, plan.topics))
    if errors:
        raise WorkflowError("rollback incomplete: " + "; ".join(errors) + f" (done: {', '.join(undone) or 'nothing'})")
    return undone
