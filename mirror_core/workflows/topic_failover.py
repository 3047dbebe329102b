"""Failover and failback of some topics of a flow (the plan's ``topics``): the forward flow goes on copying the
others. The switched topics are paused in it by the failover run (:mod:`.scope`), not the flow stopped; their groups
get translated offsets on the standby, their read-only guard is lifted, the applications listed are re-pointed and
the reverse flow started (when it is not running for an earlier switch already). The failback undoes exactly that:
the groups translated back, the pauses cleared, the reverse flow stopped once no topic of the flow is switched.
"""

from __future__ import annotations

from typing import Any

from mirror_core.config.model import MirrorConfig
from mirror_core.offsets.failback import seed_progress
from mirror_core.state.store import StateStore
from mirror_core.status import flow_status
from mirror_core.topic_sync import lift_remote_read_only
from mirror_core.workflows import scope
from mirror_core.workflows.control import WorkflowError, flow_of, set_flow
from mirror_core.workflows.failover import (
    REPLAY,
    SKIP,
    commit_translations,
    home_topic,
    measured_loss,
    require_idle,
    reverse_of,
    skip_unreplicated,
    switch_to_standby,
    translate_back,
    translate_groups,
    wait_data_lag,
)
from mirror_core.workflows.plans import FailbackPlan, FailoverPlan

#: how long the running mirrors get to apply the failover's pauses (they do within about a second)
PAUSE_TIMEOUT_S = 30.0
#: how long the switched topics' last records get to be committed as progress once paused
SETTLE_TIMEOUT_S = 15.0


def execute_topic_failover(config: MirrorConfig, store: StateStore, plan: FailoverPlan, who: str, run_id: str | None,
                           drain_timeout: float = 300.0) -> dict[str, Any]:
    """Pause the switched topics in the forward flow, commit their groups' translated offsets on the standby,
    lift their read-only guard, switch the registry, start the reverse flow. Any failure before the registry
    switch clears the pauses again (nothing else has changed)."""
    flow = flow_of(config, plan.flow)
    topics = list(plan.topics)
    groups = list(plan.groups)
    why = (f"{'planned' if plan.planned else 'unplanned'} failover of {', '.join(topics)} "
           f"{flow.source} -> {flow.target}")
    require_idle(config, flow.target, groups)
    steps: dict[str, Any] = {"topics": topics, "staying": list(plan.staying)}
    if plan.planned:
        wait_data_lag(config, flow, drain_timeout, topics)
        steps["drained"] = True
    steps["paused"] = scope.pause_switched(store, flow.name, topics, flow.target, who, run_id, why)
    reverse = reverse_of(config, flow)
    try:
        if plan.primary_reachable:
            partitions = [(p.topic, p.partition) for p in flow_status(config, flow).partitions if p.topic in topics]
            scope.wait_paused(store, flow.name, partitions, PAUSE_TIMEOUT_S)
        if plan.planned:
            try:  # what was in flight when the pause came lands and is committed as progress within a flush
                wait_data_lag(config, flow, SETTLE_TIMEOUT_S, topics)
            except WorkflowError as exc:
                raise WorkflowError(f"records arrived on the primary's switched topics after the drain ({exc}); "
                                    "stop their producers and run the failover again") from None
            steps["rpo_measured"] = {"records": 0, "note": "drained, then the switched topics paused: records on "
                                                           "the primary not on the standby at the switch"}
        else:
            steps["rpo_measured"] = measured_loss(config, flow, plan.primary_reachable, topics)
        final = translate_groups(config, flow, groups, plan.planned or plan.primary_reachable)
        scope.split_groups(final, topics)  # (a group may have committed on a staying topic since)
        steps["committed"] = commit_translations(config, flow.target, final)
        if flow.remote_topics_read_only:
            steps["read_only_lifted"] = lift_remote_read_only(config, flow, topics, store, run_id, why)
        running = store.flow_controls().get(reverse.name) if reverse is not None else None
        if reverse is not None and reverse.policy.uses_provenance and (running is None or running.desired != "running"):
            steps["reverse_seeded"] = {f"{t}[{p}]": o for (t, p), o in seed_progress(config, reverse).items()}
    except Exception:
        scope.resume_switched(store, flow.name, topics, who, f"rollback of {why}")
        raise
    return switch_to_standby(store, plan, flow, reverse, who, why, run_id, steps)


def execute_topic_failback(config: MirrorConfig, store: StateStore, plan: FailbackPlan, unreplicated_action: str,
                           who: str, run_id: str | None, drain_timeout: float = 300.0) -> dict[str, Any]:
    """Move the groups of the switched topics home, switch the registry back and clear the failover's pauses in
    the forward flow; the reverse flow is drained first and stopped unless other topics are still switched."""
    if unreplicated_action not in (SKIP, REPLAY):
        raise WorkflowError(f"unreplicated_action must be '{SKIP}' or '{REPLAY}', got {unreplicated_action!r}")
    forward = flow_of(config, plan.flow)
    reverse = flow_of(config, plan.reverse_flow)
    topics = list(plan.topics)
    groups = list(plan.groups)
    why = f"failback of {', '.join(topics)} {forward.target} -> {forward.source}"
    require_idle(config, forward.source, groups)
    wait_data_lag(config, reverse, drain_timeout)
    others = scope.other_switched(store, forward.name, topics)
    steps: dict[str, Any] = {"topics": topics, "still_switched": others}
    stopped = not others
    if stopped:
        steps["stop_reverse"] = set_flow(store, reverse.name, "stopped", who, why, run_id)
    try:
        wait_data_lag(config, reverse, SETTLE_TIMEOUT_S)
        final = {g: translate_back(config, forward, reverse, g) for g in groups}
        scope.split_groups(final, topics, home_topic)
        if unreplicated_action == SKIP:
            skip_unreplicated(final, plan)
        steps["committed"] = commit_translations(config, forward.source, final)
    except Exception:
        if stopped:
            set_flow(store, reverse.name, "running", who, f"rollback of {why}", run_id)
        raise
    for alias in plan.apps:
        store.set_active_cluster(alias, forward.source, who, why, run_id)
    steps["registry"] = {alias: forward.source for alias in plan.apps}
    steps["resumed"] = scope.resume_switched(store, forward.name, topics, who, why)
    steps["unreplicated_action"] = unreplicated_action
    return steps
