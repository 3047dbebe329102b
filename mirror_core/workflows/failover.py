"""Failover and failback: assess -> (approval) -> execute -> verify, each step recorded.

Failover moves applications from a flow's source (the primary) to its target (the standby): stop
the forward flow (planned: after draining it), commit exactly translated offsets to the consumer
groups on the standby, switch the registry, and start the reverse flow so the old primary receives
the new data when it returns. Failback is the way home without rebuilding the old primary: drain
and stop the reverse flow, translate every group position back (through the reverse flow's map for
records written on the standby, through the forward map inverted for replicated records), decide
what happens to records only the old primary holds, switch back and restore the forward flow.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection, Sequence
from typing import Any

from confluent_kafka import KafkaException, TopicPartition

from mirror_core.clients import make_admin, make_consumer
from mirror_core.config.model import FlowConfig, MirrorConfig
from mirror_core.errors import ReadIncomplete
from mirror_core.kafka_io import QUIET, first_visible
from mirror_core.offsets.failback import seed_progress, unreplicated
from mirror_core.offsets.groups import active_members, committed_offsets
from mirror_core.offsets.translate import (
    FlowOffsets,
    GroupActive,
    PartitionTranslation,
    apply_translation,
    translate_from_checkpoints,
)
from mirror_core.offsets.translate import (
    translate_groups as translate_all,
)
from mirror_core.replication.topic_changes import error_reason
from mirror_core.state.store import StateStore
from mirror_core.status import FlowStatus, flow_status
from mirror_core.topic_sync import lift_remote_read_only
from mirror_core.workflows import scope
from mirror_core.workflows.control import WorkflowError, flow_of, set_flow
from mirror_core.workflows.plans import (
    DataLag,
    FailbackPlan,
    FailoverPlan,
    PartitionLag,
    RegistryMove,
    SampleRecord,
    StrandedRange,
    group_offsets,
)

log = logging.getLogger(__name__)


# -- shared pieces ------------------------------------------------------------------------------------
def reverse_of(config: MirrorConfig, flow: FlowConfig) -> FlowConfig | None:
    try:
        return config.flow(f"{flow.target}->{flow.source}")
    except KeyError:
        return None


def required_reverse(config: MirrorConfig, flow: FlowConfig) -> FlowConfig:
    """The reverse flow a failback needs (configured, usually as a standby flow)."""
    reverse = reverse_of(config, flow)
    if reverse is None:
        raise WorkflowError(f"failback needs the reverse flow {flow.target}->{flow.source} in the config "
                            f"('{flow.target}->{flow.source}.enabled = false')")
    return reverse


def data_lag(status: FlowStatus, flow: FlowConfig, topics: Collection[str] = ()) -> DataLag:
    """Lag of the flow's data topics (heartbeats excluded: they never stop while a flow runs; ``topics``: only
    these source topics); the partitions listed are those lagging."""
    parts = [p for p in status.partitions if not flow.policy.is_heartbeats_topic(p.topic)
             and (not topics or p.topic in topics)]
    unknown = tuple(f"{p.topic}[{p.partition}]" for p in parts if p.lag is None)
    total = None if unknown or not status.reachable else sum(p.lag or 0 for p in parts)
    return DataLag(total, unknown, tuple(PartitionLag(p.topic, p.partition, p.lag, p.position, p.source_end)
                                         for p in parts if p.lag))


REACHABILITY_TIMEOUT_S = 10.0


def reachable(config: MirrorConfig, alias: str, timeout: float = REACHABILITY_TIMEOUT_S) -> tuple[bool, str]:
    try:
        md = make_admin(config.cluster(alias)).list_topics(timeout=timeout)
        return True, f"{len(md.brokers)} broker(s)"
    except KafkaException as exc:
        return False, error_reason(exc)


def translate_groups(config: MirrorConfig, flow: FlowConfig, groups: list[str],
                     primary_reachable: bool) -> dict[str, list[PartitionTranslation]]:
    """Each group's translation: from its committed offsets on the primary when it answered, else from
    the checkpoints on the standby straight away — a primary found unreachable once is not asked again
    (each ask would wait out its timeout against a cluster the operator declared lost)."""
    if primary_reachable:
        return translate_all(config, groups, flow.source, flow.target)
    return {g: translate_from_checkpoints(config, flow, g, None, 30) for g in groups}


def wait_data_lag(config: MirrorConfig, flow: FlowConfig, timeout: float, topics: Collection[str] = ()) -> int:
    deadline = time.monotonic() + timeout
    while True:
        current = data_lag(flow_status(config, flow), flow, topics).total
        if current == 0:
            return 0
        if time.monotonic() > deadline:
            raise WorkflowError(f"flow {flow.name}: data lag still {current} after {timeout:.0f}s; "
                                "are producers still writing on the primary?")
        time.sleep(1.0)


def require_idle(config: MirrorConfig, cluster: str, groups: list[str]) -> None:
    """Refuse (WorkflowError) while any of ``groups`` has active members on ``cluster``."""
    admin = make_admin(config.cluster(cluster))
    busy = {g: n for g in groups if (n := active_members(admin, g))}
    if busy:
        raise WorkflowError(f"consumer group(s) with active members on {cluster}: "
                            + ", ".join(f"{g} ({n})" for g, n in busy.items())
                            + "; stop those consumers before switching them")


def registry_moves(store: StateStore | None, apps: list[str], to: str) -> dict[str, RegistryMove]:
    """Where each application alias points now (per the registry) and where it will point."""
    moves = {}
    for alias in apps:
        row = store.active_cluster(alias) if store is not None else None
        moves[alias] = RegistryMove(row.cluster if row else None, to)
    return moves


def commit_translations(config: MirrorConfig, cluster: str,
                        groups: dict[str, list[PartitionTranslation]]) -> list[dict[str, Any]]:
    """Commit each group's translated offsets on ``cluster``, group by group. A group with a partition
    left untranslated, or with active members there, raises WorkflowError before any of its offsets is
    committed."""
    committed: list[dict[str, Any]] = []
    for group, rows in groups.items():
        missing = [f"{r.topic}[{r.partition}]" for r in rows if r.target_offset is None]
        if missing:
            raise WorkflowError(f"group {group}: no translation for {', '.join(missing)}; nothing committed")
        try:
            committed += apply_translation(config, cluster, rows)
        except GroupActive as exc:
            raise WorkflowError(str(exc)) from None
    return committed


def canary(config: MirrorConfig, cluster: str, groups: list[str], timeout: float = 15.0) -> dict[str, Any]:
    """Resume each group on ``cluster`` the way its consumers will and check where they land.

    Reads (never commits) from each committed position, as the applications' ``read_committed``
    consumers will: the position must lie within the partition, and the rows say which offset is
    read first and how many invisible offsets (transaction markers, aborted records — an
    exactly-once target has a commit marker after each transaction) come before it.
    """
    admin = make_admin(config.cluster(cluster))
    out: dict[str, Any] = {}
    problems: list[str] = []
    for group in groups:
        committed = committed_offsets(admin, group)
        rows = []
        consumer = make_consumer(config.cluster(cluster), f"mirror-core.canary.{group}", QUIET)
        try:
            for (topic, p), offset in sorted(committed.items()):
                low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout)
                first = None
                skipped = 0
                if offset > high or offset < low:
                    problems.append(f"{group} {topic}[{p}]: committed {offset} outside [{low}, {high}]")
                elif offset < high:
                    # A read_committed consumer never skips a committed record: offsets before the
                    # first one it reads are markers or aborted records, nothing a consumer would miss.
                    try:
                        first = first_visible(consumer, topic, p, offset, high, timeout)
                    except ReadIncomplete as exc:
                        raise WorkflowError(str(exc)) from None
                    skipped = (first if first is not None else high) - offset
                rows.append({"topic": topic, "partition": p, "committed": offset, "first_read": first,
                             "end": high, "invisible_skipped": skipped})
        finally:
            consumer.close()
        out[group] = rows
    if problems:
        raise WorkflowError("canary consumers did not resume where expected: " + "; ".join(problems))
    return out


# -- failover -----------------------------------------------------------------------------------------
def assess_failover(config: MirrorConfig, flow_name: str, apps: list[str], groups: list[str], planned: bool,
                    store: StateStore | None = None, topics: Sequence[str] = ()) -> FailoverPlan:
    """What a failover would do and cost, computed without changing anything; ``topics`` (names or patterns of
    source topics): only those switch, the rest stay mirrored (:mod:`.scope`)."""
    flow = flow_of(config, flow_name)
    if not topics:
        scope.refuse_whole_flow(store, flow.name, "failover", flow.target)
    standby_ok, standby_note = reachable(config, flow.target)
    if not standby_ok:
        raise WorkflowError(f"standby cluster {flow.target} is unreachable ({standby_note}); cannot fail over")
    primary_ok, primary_note = reachable(config, flow.source)
    if planned and not primary_ok:
        raise WorkflowError(f"planned failover needs the primary {flow.source}, which is unreachable "
                            f"({primary_note}); run an unplanned failover")
    warnings: list[str] = []
    lag = DataLag(None)
    status = flow_status(config, flow) if primary_ok else None
    switching: tuple[str, ...] = ()
    staying: tuple[str, ...] = ()
    if topics:
        known = ({p.topic for p in status.partitions} if status is not None
                 else {t for t, _ in FlowOffsets.load(config, flow).progress})
        switching, staying = scope.resolve(topics, {t for t in known if not flow.policy.is_heartbeats_topic(t)},
                                           flow.name)
    if status is not None:
        lag = data_lag(status, flow, switching)
        rpo: int | None = lag.total
        rpo_note = "records on the primary not yet replicated (0 once a planned failover drains)" if planned \
            else "records on the primary not yet replicated; they stay there for failback to report"
    else:
        rpo, rpo_note = None, ("primary unreachable: unknown; the records it had not replicated are listed by the "
                               "failback workflow when it returns")
    translations = translate_groups(config, flow, groups, primary_ok)
    if switching:
        scope.split_groups(translations, switching)
    warnings += [f"group {g}: no committed offsets for the flow's topics (nothing to translate)"
                 for g, rows in translations.items() if not rows]
    reverse = reverse_of(config, flow)
    if reverse is None:
        warnings.append(f"no reverse flow {flow.target}->{flow.source} is configured (add "
                        f"'{flow.target}->{flow.source}.enabled = false'): new data will not flow back")
    registry = registry_moves(store, apps, flow.target)
    warnings += [f"application {alias} already uses {flow.target}" for alias, move in registry.items()
                 if move.current == flow.target]
    failed_over = already_failed_over(store, flow, reverse, registry, switching)
    return FailoverPlan(flow.name, flow.source, flow.target, planned, primary_ok, primary_note, lag, rpo, rpo_note,
                        group_offsets(translations), registry, reverse.name if reverse else None, tuple(warnings),
                        failed_over, switching, staying)


def already_failed_over(store: StateStore | None, flow: FlowConfig, reverse: FlowConfig | None,
                        registry: dict[str, RegistryMove], topics: Sequence[str] = ()) -> tuple[str, ...]:
    """Why the standby is active already (the flow controls and the registry say so); empty when it is not.
    A stopped forward flow reads lag 0 while the primary goes on taking writes: "lag 0" would mislead.
    ``topics``: a failover of these only (the reverse flow may run for other topics switched before)."""
    controls = store.flow_controls() if store is not None else {}
    forward, back = controls.get(flow.name), controls.get(reverse.name) if reverse else None
    why = []
    if forward is not None and forward.desired == "stopped":
        why.append(f"the forward flow {flow.name} is stopped (by {forward.changed_by})")
    switched = scope.switched_already(store, flow.name, topics)
    if switched:
        why.append(f"the topics {', '.join(switched)} are switched already (paused in {flow.name} by a failover)")
    if not topics and reverse is not None and back is not None and back.desired == "running":
        why.append(f"the reverse flow {reverse.name} is running (by {back.changed_by})")
    if registry and all(move.current == flow.target for move in registry.values()):
        why.append(f"every application listed already uses {flow.target}")
    return tuple(why)


def measured_loss(config: MirrorConfig, flow: FlowConfig, primary_reachable: bool,
                  topics: Collection[str] = ()) -> dict[str, Any]:
    """The RPO measured at the switch of an unplanned failover, once the forward flow stopped: the records on
    the primary not on the standby (its data lag), or None with why it could not be read."""
    if not primary_reachable:
        return {"records": None, "note": "primary unreachable at the switch: the records it had not replicated are "
                                         "counted by the failback when it returns"}
    try:
        lag = data_lag(flow_status(config, flow), flow, topics)
    except Exception as exc:  # measuring must not fail a failover under way
        return {"records": None, "note": f"not measured: {' '.join(str(exc).split())}"}
    if lag.total is None:
        return {"records": None, "note": "not measured: the primary's end offsets were unreadable at the switch"}
    return {"records": lag.total, "note": "records on the primary not on the standby when the forward flow stopped"}


def execute_failover(config: MirrorConfig, store: StateStore, plan: FailoverPlan, who: str, run_id: str | None,
                     drain_timeout: float = 300.0) -> dict[str, Any]:
    """Stop forward, commit translated offsets on the standby, switch the registry, start reverse.

    Any failure before the registry switch restores the forward flow (nothing else has changed).
    """
    flow = flow_of(config, plan.flow)
    groups = list(plan.groups)
    why = f"{'planned' if plan.planned else 'unplanned'} failover {flow.source} -> {flow.target}"
    require_idle(config, flow.target, groups)
    steps: dict[str, Any] = {}
    if plan.planned:
        wait_data_lag(config, flow, drain_timeout)
        steps["drained"] = True
    reverse = reverse_of(config, flow)
    try:
        steps["stop_forward"] = set_flow(store, flow.name, "stopped", who, why, run_id)
        if plan.planned:
            residual = data_lag(flow_status(config, flow), flow).total
            if residual:
                raise WorkflowError(f"{residual} records arrived on the primary after the drain; stop the producers "
                                    "and run the failover again")
            steps["rpo_measured"] = {"records": residual, "note": "drained, then the forward flow stopped: records "
                                     "on the primary not on the standby at the switch"}
        else:
            steps["rpo_measured"] = measured_loss(config, flow, plan.primary_reachable)
        # Positions are final now that the flow stopped: translate again rather than reuse the plan
        # (newer checkpoints may have arrived; a primary unreachable at assessment is not asked again).
        final = translate_groups(config, flow, groups, plan.planned or plan.primary_reachable)
        steps["committed"] = commit_translations(config, flow.target, final)
        if flow.remote_topics_read_only:  # the standby's copies become what applications write
            steps["read_only_lifted"] = lift_remote_read_only(config, flow, None, store, run_id, why)
        if reverse is not None and reverse.policy.uses_provenance:
            # Same topic names on both sides: the reverse flow starts exactly at the failover point
            # (seeded before any application is pointed at the standby), so the standby's copies of
            # the primary's records never flow back and nothing new is missed.
            steps["reverse_seeded"] = {f"{t}[{p}]": o for (t, p), o in seed_progress(config, reverse).items()}
    except Exception:
        set_flow(store, flow.name, "running", who, f"rollback of {why}", run_id)
        raise
    return switch_to_standby(store, plan, flow, reverse, who, why, run_id, steps)


def switch_to_standby(store: StateStore, plan: FailoverPlan, flow: FlowConfig, reverse: FlowConfig | None, who: str,
                      why: str, run_id: str | None, steps: dict[str, Any]) -> dict[str, Any]:
    """The last steps of a failover, whole flow or some topics: the plan's apps pointed at the standby in the
    registry, then the reverse flow started (seeded before, so the standby's copies never flow back)."""
    for alias in plan.apps:
        store.set_active_cluster(alias, flow.target, who, why, run_id)
    steps["registry"] = {alias: flow.target for alias in plan.apps}
    if reverse is not None:
        steps["start_reverse"] = set_flow(store, reverse.name, "running", who, why, run_id)
    return steps


# -- failback -----------------------------------------------------------------------------------------
def translate_back(config: MirrorConfig, forward: FlowConfig, reverse: FlowConfig, group: str,
                   timeout: float = 30) -> list[PartitionTranslation]:
    """Where ``group`` resumes on the old primary, from its committed positions on the standby.

    Records written on the standby reached the primary through the reverse flow: its map applies.
    Records the standby holds as copies of the primary's own records: the forward map, inverted.
    """
    standby = config.cluster(forward.target)
    committed = committed_offsets(make_admin(standby), group, timeout)
    fwd = FlowOffsets.load(config, forward, timeout)
    rev = FlowOffsets.load(config, reverse, timeout)
    out: list[PartitionTranslation] = []
    for (topic, p), offset in sorted(committed.items()):
        pm = rev.offset_map.partitions.get((topic, p)) if reverse.should_replicate(topic) else None
        if pm is not None and pm.sources and offset >= pm.sources[0]:
            tr = pm.translate(offset, rev.progress.get((topic, p)))
            out.append(PartitionTranslation(group, topic, p, reverse.remote_topic(topic), offset, tr.target_offset,
                                            tr.exact, tr.note, "reverse offset map"))
            continue
        upstream = topic if forward.policy.uses_provenance else forward.policy.upstream_topic(topic)
        if upstream is None or (not forward.policy.uses_provenance
                                and forward.policy.topic_source(topic) != forward.source):
            continue  # not one of this flow's topics
        fpm = fwd.offset_map.partitions.get((upstream, p))
        source = fpm.source_of(offset) if fpm is not None else None
        note = "" if source is not None else "before the forward offset map"
        progress = fwd.progress.get((upstream, p))
        if source is not None and progress is not None and source > progress:
            # Past the last replicated record (e.g. a transaction marker): never beyond what the
            # standby actually received, or the primary's unreplicated records would be skipped.
            source, note = progress, "capped at the forward flow's progress"
        out.append(PartitionTranslation(group, topic, p, upstream, offset, source, source is not None and not note,
                                        note, "forward offset map (inverse)"))
    return out


def home_topic(row: PartitionTranslation) -> str:
    """The forward flow's source topic a failback row belongs to: a replica's upstream, or the standby's own topic
    (written there after the failover, named as the source topic it stands in for)."""
    return row.remote_topic if row.basis.startswith("forward") else row.topic


def assess_failback(config: MirrorConfig, flow_name: str, apps: list[str], groups: list[str],
                    store: StateStore | None = None, topics: Sequence[str] = ()) -> FailbackPlan:
    """What a failback would do, computed without changing anything; ``topics``: only these source topics (names
    or patterns) come back, as a failover of some topics switched them."""
    forward = flow_of(config, flow_name)
    if not topics:
        scope.refuse_whole_flow(store, forward.name, "failback", forward.target)
    reverse = required_reverse(config, forward)
    for alias in (forward.source, forward.target):
        ok, note = reachable(config, alias)
        if not ok:
            raise WorkflowError(f"failback needs both clusters; {alias} is unreachable ({note})")
    ranges = [StrandedRange(r.topic, r.partition, r.first, r.end,
                            tuple(SampleRecord(x["offset"], x["timestamp"], x["key"]) for x in r.records))
              for r in unreplicated(config, forward)]
    if forward.policy.uses_provenance:
        # Same topic on both sides: beyond the forward progress, the old primary also holds what the
        # reverse flow copied back; only the records before the first such copy were never replicated.
        rev_map = FlowOffsets.load(config, reverse).offset_map
        for i, r in enumerate(ranges):
            pm = rev_map.partitions.get((r.topic, r.partition))
            if pm is not None and pm.targets:
                ranges[i] = r.ending_at(pm.targets[0])
        ranges = [r for r in ranges if r.count > 0]
    translations = {g: translate_back(config, forward, reverse, g) for g in groups}
    switching: tuple[str, ...] = ()
    if topics:
        known = {p.topic for p in flow_status(config, forward).partitions
                 if not forward.policy.is_heartbeats_topic(p.topic)}
        switching = scope.resolve(topics, known, forward.name)[0]
        unswitched = sorted(set(switching) - set(scope.switched_already(store, forward.name, switching)))
        if store is not None and unswitched:
            raise WorkflowError(f"topics {', '.join(unswitched)} were not switched by a failover of some topics (no "
                                f"failover pause of them in {forward.name}); nothing was changed")
        scope.split_groups(translations, switching, home_topic)
        ranges = [r for r in ranges if r.topic in switching]
    return FailbackPlan(forward.name, reverse.name, forward.source, forward.target,
                        data_lag(flow_status(config, reverse), reverse).total, tuple(ranges),
                        group_offsets(translations), registry_moves(store, apps, forward.source), topics=switching)


SKIP, REPLAY = "skip", "replay"


def skip_unreplicated(final: dict[str, list[PartitionTranslation]], plan: FailbackPlan) -> None:
    """Move each position that falls among the records only the old primary holds past them (``skip``)."""
    ends = {(r.topic, r.partition): (r.first, r.end) for r in plan.unreplicated}
    for rows in final.values():
        for row in rows:
            first_end = ends.get((row.remote_topic, row.partition))
            if first_end and row.target_offset is not None and first_end[0] <= row.target_offset < first_end[1]:
                row.target_offset = max(row.target_offset, first_end[1])
                row.note = "moved past the records never replicated (skip)"


def execute_failback(config: MirrorConfig, store: StateStore, plan: FailbackPlan, unreplicated_action: str,
                     who: str, run_id: str | None, drain_timeout: float = 300.0) -> dict[str, Any]:
    """Drain and stop the reverse flow, move the groups home, switch back, restore the forward flow.

    ``unreplicated_action``: ``replay`` — consumers on the old primary will read the records that
    never reached the standby; ``skip`` — they resume after them (the records stay on the topic and
    are listed in the report).
    """
    if unreplicated_action not in (SKIP, REPLAY):
        raise WorkflowError(f"unreplicated_action must be '{SKIP}' or '{REPLAY}', got {unreplicated_action!r}")
    forward = flow_of(config, plan.flow)
    reverse = flow_of(config, plan.reverse_flow)
    groups = list(plan.groups)
    why = f"failback {forward.target} -> {forward.source}"
    require_idle(config, forward.source, groups)
    steps: dict[str, Any] = {}
    wait_data_lag(config, reverse, drain_timeout)
    try:
        steps["stop_reverse"] = set_flow(store, reverse.name, "stopped", who, why, run_id)
        residual = data_lag(flow_status(config, reverse), reverse).total
        if residual:
            raise WorkflowError(f"{residual} records arrived on {forward.target} after the drain; stop the "
                                "applications there and run the failback again")
        final = {g: translate_back(config, forward, reverse, g) for g in groups}
        if unreplicated_action == SKIP:
            skip_unreplicated(final, plan)
        steps["committed"] = commit_translations(config, forward.source, final)
        if reverse.remote_topics_read_only:  # the reverse flow's copies are written again at home
            steps["read_only_lifted"] = lift_remote_read_only(config, reverse, None, store, run_id, why)
    except Exception:
        set_flow(store, reverse.name, "running", who, f"rollback of {why}", run_id)
        raise
    for alias in plan.apps:
        store.set_active_cluster(alias, forward.source, who, why, run_id)
    steps["registry"] = {alias: forward.source for alias in plan.apps}
    steps["start_forward"] = set_flow(store, forward.name, "running", who, why, run_id)
    steps["unreplicated_action"] = unreplicated_action
    return steps
