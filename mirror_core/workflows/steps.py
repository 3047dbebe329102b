"""What each task of the workflow DAGs does, from its validated Params to its recorded outcome.

A DAG task reads its Airflow context (the Params as a spec from :mod:`.params`, the run id, who
answered a gate), calls one function here and returns the result's ``to_xcom()``. These functions
record in the state store and print what an operator reads in the task log. A step that cannot go on
raises WorkflowError (the DAG fails the task without retry); an execution that fails is recorded
(``failed``, with the error) before its error propagates.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from mirror_core.config.model import MirrorConfig
from mirror_core.errors import ClusterUnavailable
from mirror_core.state.store import StateStore
from mirror_core.topic_sync import sync_flow
from mirror_core.workflows import cutover, drill_failover, failover, topic_failover
from mirror_core.workflows.control import flow_of
from mirror_core.workflows.drill import run_drill
from mirror_core.workflows.drill_plan import DrillPlan
from mirror_core.workflows.errors import WorkflowError
from mirror_core.workflows.params import CutoverParams, FailbackParams, FailoverParams
from mirror_core.workflows.plans import CutoverPlan, DrillOutcome, Execution, FailbackPlan, FailoverPlan


def _record_id(plan: FailoverPlan | FailbackPlan | CutoverPlan) -> int:
    if plan.record_id is None:
        raise WorkflowError(f"the {plan.kind} plan of {plan.flow} was never recorded")
    return plan.record_id


# -- failover and failback -----------------------------------------------------------------------------
def open_failover(config: MirrorConfig, store: StateStore, params: FailoverParams, run_id: str | None,
                  triggered_at: datetime | None = None) -> FailoverPlan:
    """Assess the failover and record it as awaiting approval (``triggered_at``: when the run began)."""
    plan = failover.assess_failover(config, params.flow, list(params.apps), list(params.groups), params.planned,
                                    store, params.topics)
    plan = plan.with_record(store.start_failover("failover", plan.flow, plan.planned, run_id, plan.record(),
                                                 triggered_at))
    print(plan.render())
    return plan


def failback_reverse_flow(config: MirrorConfig, params: FailbackParams) -> str:
    """The reverse flow a failback of ``params.flow`` waits for (configured, usually as a standby flow)."""
    return failover.required_reverse(config, flow_of(config, params.flow)).name


def open_failback(config: MirrorConfig, store: StateStore, params: FailbackParams, run_id: str | None,
                  triggered_at: datetime | None = None) -> FailbackPlan:
    """Assess the failback (the reverse flow caught up to ``max_reverse_lag``) and record it."""
    plan = failover.assess_failback(config, params.flow, list(params.apps), list(params.groups), store, params.topics)
    if plan.reverse_lag is None or plan.reverse_lag > params.max_reverse_lag:
        raise WorkflowError(f"reverse flow {plan.reverse_flow} lag {plan.reverse_lag} is above "
                            f"max_reverse_lag={params.max_reverse_lag}; retry when it caught up")
    plan = plan.with_record(store.start_failover("failback", plan.flow, True, run_id, plan.record(), triggered_at))
    count_loss_of_last_failover(store, plan, run_id)
    print(plan.render())
    return plan


def count_loss_of_last_failover(store: StateStore, plan: FailbackPlan, run_id: str | None) -> int | None:
    """The failback counts the records only the old primary holds: the RPO of the failover before it. Written
    into that failover's record when it could not measure it at the switch (the primary was unreachable);
    the id of the record completed, None when there was none to complete."""
    last = next((f for f in store.failovers(limit=100) if f.kind == "failover" and f.flow == plan.flow), None)
    if last is None or last.status != "done" or last.rpo_measured is not None:
        return None
    store.note_failover(last.id, rpo_measured=plan.unreplicated_total,
                        rpo_measured_note=f"records only the old primary held, counted by the failback run {run_id}")
    return int(last.id)


def run_failover(config: MirrorConfig, store: StateStore, plan: FailoverPlan, who: str, run_id: str | None,
                 drain_timeout: float, approved_at: datetime | None = None,
                 approver_name: str | None = None) -> Execution:
    """Execute an approved failover (``who``: the approver's user id, ``approver_name`` beside it); what
    its steps did and the RPO measured at the switch go into the record as soon as they are known."""
    store.approve_failover(_record_id(plan), who, approved_at)
    if approver_name:
        store.note_failover(_record_id(plan), approved_by_name=approver_name)
    try:
        execute = topic_failover.execute_topic_failover if plan.topics else failover.execute_failover
        steps = execute(config, store, plan, who, run_id, drain_timeout)
    except Exception as exc:
        store.finish_failover(_record_id(plan), "failed", who, error=str(exc))
        raise
    measured = steps.get("rpo_measured") or {}
    store.note_failover(_record_id(plan), steps=steps, rpo_measured=measured.get("records"),
                        rpo_measured_note=measured.get("note"))
    print(steps)
    print(f"RPO measured at the switch: {measured.get('records', 'unknown')} records ({measured.get('note')}); "
          f"estimated at approval: {plan.rpo_records if plan.rpo_records is not None else 'unknown'}")
    return Execution(who, steps)


def run_failback(config: MirrorConfig, store: StateStore, plan: FailbackPlan, unreplicated_action: str, who: str,
                 run_id: str | None, drain_timeout: float, approved_at: datetime | None = None,
                 approver_name: str | None = None) -> Execution:
    store.approve_failover(_record_id(plan), who, approved_at)
    if approver_name:
        store.note_failover(_record_id(plan), approved_by_name=approver_name)
    try:
        execute = topic_failover.execute_topic_failback if plan.topics else failover.execute_failback
        steps = execute(config, store, plan, unreplicated_action, who, run_id, drain_timeout)
    except Exception as exc:
        store.finish_failover(_record_id(plan), "failed", who, error=str(exc))
        raise
    store.note_failover(_record_id(plan), steps=steps)
    print(steps)
    return Execution(who, steps)


def verify_moved_groups(config: MirrorConfig, store: StateStore, plan: FailoverPlan | FailbackPlan,
                        done: Execution) -> dict[str, Any]:
    """Canary consumers resume where the groups were moved; records the workflow done, or failed."""
    try:
        checked = failover.canary(config, plan.destination, list(plan.groups))
    except Exception as exc:
        store.finish_failover(_record_id(plan), "failed", done.who, steps=dict(done.steps), error=str(exc))
        raise
    store.finish_failover(_record_id(plan), "done", done.who, steps=dict(done.steps), canary=checked)
    return checked


def close_failover(store: StateStore, plan: FailoverPlan | FailbackPlan | None, rejected: bool, who: str,
                   verified: bool, refused: str | None = None) -> None:
    """The last task, whatever happened: record a rejection or a refused answer (``refused``: a
    self-approval, a plan that is not the one approved); fail when the workflow did not complete (a
    trigger-rule ``all_done`` leaf would otherwise let a failed run look successful). A rejection fails
    too, once recorded: a run that changed nothing must not show as a successful failover."""
    if plan is None:
        raise WorkflowError("the assessment did not complete (see the log of the task that failed before it); "
                            "nothing was changed")
    if refused and not verified:
        store.finish_failover(_record_id(plan), "refused", error=refused)
        raise WorkflowError(refused)
    if rejected:
        store.finish_failover(_record_id(plan), "rejected", who)
        raise WorkflowError(f"rejected by {who}: nothing changed")
    if not verified:
        raise WorkflowError(f"the {plan.kind} did not complete (see the execute/verify logs; the state store "
                            "records where it stopped)")


# -- cutover ---------------------------------------------------------------------------------------------
def open_cutover(config: MirrorConfig, store: StateStore, params: CutoverParams, run_id: str | None) -> CutoverPlan:
    """The preflight, recorded as a running cutover."""
    plan = cutover.preflight(config, store, params.source, params.target, list(params.topics), list(params.groups),
                             list(params.apps), params.max_lag, params.deny_writes)
    plan = plan.with_record(store.start_cutover(plan.source, plan.target, run_id, plan.record()))
    print(plan.render())
    return plan


def deny_source_writes(config: MirrorConfig, plan: CutoverPlan) -> list[str]:
    """DENY WRITE on the source topics if the plan asks for it; the topics denied."""
    return cutover.deny_writes(config, plan.source, plan.topics) if plan.deny_writes else []


def check_completeness(config: MirrorConfig, plan: CutoverPlan) -> dict[str, Any]:
    report = cutover.completeness(config, plan)
    print(f"complete: {report['records']} records accounted for on {plan.target}")
    return report


def record_cutover_done(store: StateStore, plan: CutoverPlan, who: str, complete: Mapping[str, Any],
                        switched: Mapping[str, Any]) -> bool:
    store.finish_cutover(_record_id(plan), "done", approved_by=who, completeness=dict(complete), switch=dict(switched))
    return True


@dataclass(frozen=True)
class CutoverAnswers:
    """The approvers' answers at the cutover's gates: True yes, False no, None not asked or not answered."""

    started: bool | None  # approve_start
    producers_stopped: bool | None  # quiesce (False: roll back)
    kept: bool | None  # final_approval

    @property
    def declined(self) -> bool:
        return False in (self.started, self.producers_stopped, self.kept)


def close_cutover(config: MirrorConfig, store: StateStore, plan: CutoverPlan | None, answers: CutoverAnswers,
                  done: Mapping[str, Any], recorded: bool, who: str, run_id: str | None,
                  refused: str | None = None) -> list[str]:
    """The last task, whatever happened: unless the cutover was approved to the end, undo what ran
    (``done``: what the steps returned) and record rejected / rolled-back / failed; the run then fails
    (a declined cutover, once undone and recorded, must not show as a successful one). Returns what was
    undone when the cutover was kept (nothing)."""
    if plan is None:
        raise WorkflowError("preflight failed (see its log); nothing was changed")
    if answers.kept:
        if not recorded:
            raise WorkflowError("approved, but recording the cutover failed (see the 'done' log)")
        return []
    undone = cutover.rollback(config, store, plan, dict(done), who, run_id)
    status = "rejected" if answers.started is False else "rolled-back" if answers.declined else \
        "refused" if refused else "failed"
    store.finish_cutover(_record_id(plan), status, undone=undone, **({"error": refused} if refused else {}))
    print(f"cutover {status}; undone: {undone or 'nothing to undo'}")
    if refused and not answers.declined:
        raise WorkflowError(f"{refused} (undone: {', '.join(undone) or 'nothing'})")
    if answers.started is False:
        raise WorkflowError(f"rejected by {who}: nothing changed")
    if answers.declined:
        raise WorkflowError(f"rolled back by {who}: undone {', '.join(undone) or 'nothing'}")
    raise WorkflowError(f"a cutover step failed; rolled back: {undone}")


# -- DR drill ------------------------------------------------------------------------------------------
def drill_and_record(config: MirrorConfig, properties_path: str | Path, plan: DrillPlan, store: StateStore,
                     run_id: str | None) -> DrillOutcome:
    """Run the drill (failover and failback) and record it, whatever its outcome."""
    result = run_drill(config, properties_path, plan)
    store.record_config(config)
    store.record_drill(result.plan.flow, run_id, result.status, result.started_at, result.rpo_records,
                       result.rto_seconds, result.duplicates, result.losses, result.report)
    print(f"DR drill {result.status}: RPO {result.rpo_records} records, RTO {result.rto_seconds}s, "
          f"duplicates {result.duplicates}, losses {result.losses}")
    if result.error:
        raise WorkflowError(f"drill could not complete: {result.error}")
    return DrillOutcome(result.status, tuple(result.missed), result.rpo_records, result.rto_seconds,
                        result.duplicates, result.losses)


def open_drill_failover(config: MirrorConfig, store: StateStore, plan: DrillPlan, run_id: str | None,
                        triggered_at: datetime | None = None) -> tuple[FailoverPlan, drill_failover.DrillData]:
    """A failover-mode drill's assessment: an overlap with production refused, and the failover's scope checked
    (read-only), before anything is produced; then the known sequence, and the failover assessed and recorded
    as the ``failover`` DAG's, marked as the drill's."""
    drill_failover.check_scope(config, store, plan)
    params = drill_failover.failover_params(plan)
    failover.assess_failover(config, params.flow, list(params.apps), list(params.groups), True, store, params.topics)
    data = drill_failover.prepare(config, plan, run_id)
    assessed = open_failover(config, store, params, run_id, triggered_at)
    store.note_failover(_record_id(assessed), **{drill_failover.DRILL_MARK: plan.app, "drill_stamp": data.stamp})
    return assessed, data


def drill_failback(config: MirrorConfig, store: StateStore, plan: DrillPlan, data: drill_failover.DrillData,
                   who: str, run_id: str | None, approved_at: datetime | None = None,
                   approver_name: str | None = None) -> dict[str, Any]:
    """The failback of a failover-mode drill's scope, as the ``failback`` DAG runs it (records the old primary
    alone holds replayed: none after a planned failover), approved by the drill's gate; then what is left."""
    params = drill_failover.failover_params(plan)
    back = failover.assess_failback(config, plan.flow, list(params.apps), list(params.groups), store, params.topics)
    back = back.with_record(store.start_failover("failback", back.flow, True, run_id, back.record()))
    store.note_failover(_record_id(back), **{drill_failover.DRILL_MARK: plan.app})
    done = run_failback(config, store, back, failover.REPLAY, who, run_id, float(plan.drain_timeout_s), approved_at,
                        approver_name)
    verify_moved_groups(config, store, back, done)
    return {"record_id": back.record_id, "unreplicated_total": back.unreplicated_total,
            **drill_failover.left_after_failback(config, store, plan, data)}


def record_failover_drill(store: StateStore, plan: DrillPlan, run_id: str | None, started_at: datetime,
                          measured: Mapping[str, Any] | None, failback: Mapping[str, Any] | None,
                          failover_record: int | None, error: str | None) -> DrillOutcome:
    """Record a failover-mode drill, whatever its outcome (``error``: why it did not complete). Its RTO is the one
    from the approval (the wait at the gate is a person's, not the system's); both are in the report."""
    m = dict(measured or {})
    rpo, rto = m.get("rpo_records"), m.get("rto_from_approval_s")
    dup, loss = m.get("duplicates"), m.get("losses")
    missed: list[str] = []
    if error is None and rpo is not None:
        missed = plan.objectives.missed(rpo, rto, dup or 0, loss or 0)
        if not (failback or {}).get("complete"):
            missed.append("failback: a drill group did not end on the primary with every record read once")
    status = "error" if error else "failed" if missed else "passed"
    report = {"mode": "failover", "plan": plan.to_xcom(), "app": plan.app, "topics": list(plan.topics),
              "groups": list(plan.groups), "failover_record": failover_record, **m, "failback": dict(failback or {}),
              "missed_objectives": missed, "status": status, **({"error": error} if error else {})}
    store.record_drill(plan.flow, run_id, status, started_at, rpo, rto, dup, loss, report)
    print(f"DR drill (failover mode, app {plan.app}) {status}: RPO {rpo} records, RTO {rto}s from the approval "
          f"({m.get('rto_from_trigger_s')}s from the trigger), duplicates {dup}, losses {loss}")
    if error:
        raise WorkflowError(f"drill could not complete: {error}")
    return DrillOutcome(status, tuple(missed), rpo, rto, dup, loss)


def check_objectives(outcome: DrillOutcome) -> DrillOutcome:
    """Fail when an objective was missed (the drill is recorded already)."""
    if outcome.missed:
        raise WorkflowError("DR drill objectives missed: " + "; ".join(outcome.missed))
    return outcome


# -- topic config sync ---------------------------------------------------------------------------------
def sync_schemas(config: MirrorConfig, store: StateStore, flow: str, dry_run: bool,
                 run_id: str | None) -> dict[str, Any]:
    """One flow's schema registries (subjects, versions, compatibility), recorded; a refusal, an unreachable or
    unauthorised registry, or a flow without both registries fails the step in one line, nothing changed."""
    from mirror_core.schema_sync import sync_schemas as sync
    from mirror_core.schemas.registry import RegistryError

    f = config.flow(flow)
    missing = config.without_registry(f)
    if missing:
        raise WorkflowError(f"flow {flow}: no schema registry for {' and '.join(missing)}: set "
                            f"{', '.join(f'{a}.schema.registry.url' for a in missing)}")
    try:
        result = sync(config, f, dry_run, store, run_id)
    except RegistryError as exc:
        raise WorkflowError(str(exc)) from None
    for subject, kind, detail in result.changes:
        print(f"{'proposed' if dry_run else 'applied'}: {kind} {subject}: {detail}")
    if result.refused:
        raise WorkflowError(f"schema sync of {flow} refused: {result.refused}")
    return result.as_dict()


def sync_topics(config: MirrorConfig, store: StateStore, flow: str, dry_run: bool,
                run_id: str | None) -> dict[str, Any]:
    """One flow's partitions, configs and read-only ACLs, recorded; drift it refuses fails the step."""
    store.record_config(config)
    try:
        result = sync_flow(config, config.flow(flow), dry_run, store, run_id=run_id)
    except ClusterUnavailable as exc:  # one line in the task log, and no retry against a cluster that is down
        raise WorkflowError(str(exc)) from None
    for change in result.changes:
        print(f"{'proposed' if result.dry_run else 'applied'}: {change.kind} {change.topic}: {change.detail}")
    if result.refused:
        raise WorkflowError("drift refused: " + "; ".join(f"{c.topic}: {c.detail}" for c in result.refused))
    return result.as_dict()
