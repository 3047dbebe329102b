"""What was approved is what runs: a run's plan bound in the state store, four eyes at its gates.

At assessment the plan (flow, scope, mode, groups and the basis of their target offsets, applications...) is
written to the state store with its digest, the sha256 of its canonical JSON (:func:`bind`). Each gate shows
that digest and records who answered what, by Airflow user id with the display name beside it. Every step
after a gate reads the plan from the store, never from an XCom (:func:`approved_plan`), and runs it only if

1. the stored plan still hashes to its digest,
2. every gate it depends on was answered with an accepting choice, by someone other than the user who
   triggered the run (unless the deployment allows self-approval), on that same digest,
3. what the XComs hand over (the assessed plan, each gate's decision) agrees with the store: an XCom
   edited after approval (Airflow lets users with XCom rights do so through its REST API) stops the run.

Any difference is one line naming it, and nothing is changed on any cluster.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from mirror_core.state.models import BoundPlanRecord, GateAnswer, plan_digest
from mirror_core.state.store import StateStore
from mirror_core.workflows.errors import WorkflowError
from mirror_core.workflows.plans import CutoverPlan, FailbackPlan, FailoverPlan

Plan = FailoverPlan | FailbackPlan | CutoverPlan
PLAN_TYPES: dict[str, type[FailoverPlan] | type[FailbackPlan] | type[CutoverPlan]] = {
    "failover": FailoverPlan, "failback": FailbackPlan, "cutover": CutoverPlan}
SELF_APPROVAL_SETTING = "MIRROR_CORE_ALLOW_SELF_APPROVAL"
#: what the XCom of an assessment carries besides the plan itself
_HANDED_EXTRAS = ("record_id", "body", "digest")


class NotApproved(WorkflowError):
    """A gate was answered with a choice that does not run the step (reject, roll back, timed out)."""


def bind(store: StateStore, dag_id: str, run_id: str, plan: Plan, triggered_by: str | None) -> BoundPlanRecord:
    """Write the recorded plan to the state store with its digest, bound to the run."""
    if plan.record_id is None:
        raise WorkflowError(f"the {plan.kind} plan of {plan.flow} was never recorded")
    return store.bind_plan(dag_id, run_id, plan.kind, plan.record_id, plan.record(), triggered_by)


def plan_of(bound: BoundPlanRecord) -> Plan:
    """The plan object of a bound plan (its state-store record id with it)."""
    return PLAN_TYPES[bound.kind].from_xcom({**bound.plan, "record_id": bound.record_id})


def short(digest: str) -> str:
    return digest[:12]


def self_approval(dag_id: str, triggered_by: str | None, approver_id: str | None, allowed: bool) -> str | None:
    """The one-line refusal of a self-approval (None: four eyes hold, or the deployment allows it)."""
    if allowed or not triggered_by or approver_id != triggered_by:
        return None
    return (f"self-approval refused: {approver_id} triggered this {dag_id} run and cannot approve it (four eyes); "
            f"nothing was changed; another approver must answer the gate of a new run (or the deployment allows "
            f"it: {SELF_APPROVAL_SETTING}_{dag_id.upper()}=true, docs/security.md)")


def gate_footer(bound: BoundPlanRecord, allowed: bool) -> str:
    """The lines every gate shows under its body: the digest approved, who triggered the run, four eyes."""
    who = bound.triggered_by or "unknown"
    if bound.triggered_by and not allowed:
        eyes = f"four eyes: **{who}** cannot approve this run; another approver must"
    elif bound.triggered_by:
        eyes = f"self-approval allowed by the deployment ({SELF_APPROVAL_SETTING})"
    else:
        eyes = "the triggering user is unknown: four eyes cannot be checked"
    return "\n".join(["", "---", f"Plan digest `sha256:{bound.digest}` (state-store {bound.kind} record "
                      f"{bound.record_id}): approving approves exactly this plan; the steps after the gate run it "
                      "from the state store and refuse to run anything else.",
                      f"Triggered by **{who}** — {eyes}."])


def approved_plan(store: StateStore, dag_id: str, run_id: str, gates: Mapping[str, Collection[str]],
                  handed: Mapping[str, Any] | None, decisions: Mapping[str, Mapping[str, Any] | None],
                  allow_self: bool) -> tuple[Plan, dict[str, GateAnswer]]:
    """The run's bound plan and the answers of ``gates`` (gate -> the choices that run the step), after the
    checks of the module docstring; ``handed``: the assessment's XCom, ``decisions``: each gate's decision
    XCom. A check failing raises WorkflowError (one line); a gate answered with another choice NotApproved."""
    bound = store.bound_plan(dag_id, run_id)
    if bound is None:
        raise WorkflowError(f"no plan is bound to {dag_id} run {run_id} in the state store (its assessment did "
                            "not record one); nothing was changed")
    try:
        return _checked(bound, dag_id, run_id, gates, handed, decisions, allow_self)
    except NotApproved:
        raise
    except WorkflowError as exc:
        record_refusal(store, bound, str(exc))
        raise


def record_refusal(store: StateStore, bound: BoundPlanRecord, line: str) -> None:
    """Note on the workflow's record why a step refused to run (a failover not yet executing is closed as
    ``refused``; a cutover's rollback task closes it)."""
    if bound.kind == "cutover":
        store.note_cutover(bound.record_id, refused=line)
        return
    record = store.failover_record(bound.record_id)
    if record is not None and record.status == "awaiting-approval":
        store.finish_failover(bound.record_id, "refused", error=line)


def refusal_of(store: StateStore, bound: BoundPlanRecord) -> str | None:
    """Why the run was refused (a gate's answer, or a later step), if it was."""
    for answer in bound.gates.values():
        if answer.refused:
            return answer.refused
    record = store.failover_record(bound.record_id) if bound.kind != "cutover" else None
    if record is not None:
        return str(record.details.get("error")) if record.status == "refused" else None
    cut = store.cutover_record(bound.record_id) if bound.kind == "cutover" else None
    refused = (cut.details or {}).get("refused") if cut is not None else None
    return str(refused) if refused else None


def _checked(bound: BoundPlanRecord, dag_id: str, run_id: str, gates: Mapping[str, Collection[str]],
             handed: Mapping[str, Any] | None, decisions: Mapping[str, Mapping[str, Any] | None],
             allow_self: bool) -> tuple[Plan, dict[str, GateAnswer]]:
    if not bound.intact:
        raise WorkflowError(f"the plan bound to {dag_id} run {run_id} no longer hashes to its digest "
                            f"{short(bound.digest)} (its state-store row was edited); nothing was changed; "
                            "trigger a new run")
    answers: dict[str, GateAnswer] = {}
    for gate, accepting in gates.items():
        answer = bound.gates.get(gate)
        if answer is None or answer.answered_at is None:
            raise WorkflowError(f"gate {gate} of {dag_id} run {run_id} has no answer in the state store; "
                                "nothing was changed")
        if answer.refused:
            raise WorkflowError(answer.refused)
        if answer.digest != bound.digest:
            raise WorkflowError(f"gate {gate} approved plan {short(answer.digest)} but the run's plan is "
                                f"{short(bound.digest)}; nothing was changed; trigger a new run")
        refusal = self_approval(dag_id, bound.triggered_by, answer.approver_id, allow_self)
        if refusal:
            raise WorkflowError(refusal)
        _check_decision(gate, answer, decisions.get(gate))
        if answer.chosen not in accepting:
            raise NotApproved(f"{answer.chosen or 'no choice'} at {gate} by {answer.approver}")
        answers[gate] = answer
    _check_handed(dag_id, run_id, bound, handed)
    return plan_of(bound), answers


def _check_decision(gate: str, answer: GateAnswer, decision: Mapping[str, Any] | None) -> None:
    """The gate's decision as its XCom hands it over must be the one the state store recorded."""
    handed = (decision or {}).get("who_id"), (decision or {}).get("chosen")
    if handed != (answer.approver_id, answer.chosen):
        raise WorkflowError(f"the decision of gate {gate} handed over by XCom ({handed[0]}: {handed[1]}) is not "
                            f"the one recorded in the state store ({answer.approver_id}: {answer.chosen}): an "
                            "XCom was edited; nothing was changed; trigger a new run (docs/security.md: who may "
                            "edit XComs)")


def _check_handed(dag_id: str, run_id: str, bound: BoundPlanRecord, handed: Mapping[str, Any] | None) -> None:
    """The plan the assessment's XCom hands over must hash to the approved digest."""
    if handed is None:
        raise WorkflowError(f"the assessment of {dag_id} run {run_id} handed over no plan (its XCom is gone); "
                            "nothing was changed")
    digest = plan_digest({k: v for k, v in handed.items() if k not in _HANDED_EXTRAS})
    if digest != bound.digest or handed.get("record_id") != bound.record_id or handed.get("digest") != bound.digest:
        raise WorkflowError(f"the plan handed over by XCom (digest {short(digest)}) is not the approved plan "
                            f"{short(bound.digest)}: an XCom was edited after assessment; nothing was changed; "
                            "trigger a new run (docs/security.md: who may edit XComs)")
