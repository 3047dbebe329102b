"""Airflow glue the workflow DAGs share: Params to typed specs, errors to failed tasks, gate answers."""

from __future__ import annotations

import os
from collections.abc import Collection, Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any, TypeVar

from airflow.providers.standard.operators.hitl import ApprovalOperator, HITLOperator
from airflow.sdk import get_current_context
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException
from airflow.sdk.execution_time.hitl import HITLUser

from mirror_airflow.notifiers import WebhookNotifier
from mirror_core.airflow_support import config_path, load_mirror_config

S = TypeVar("S")


def flows_for_params() -> tuple[list[str], str | None]:
    """Flow names for Param enums; the DAG must still parse with a broken config (runs then fail)."""
    try:
        return [f.name for f in load_mirror_config().flows], None
    except Exception as exc:
        return [], f"{config_path()}: {exc}"


def clusters_for_params() -> tuple[list[str], str | None]:
    """Cluster aliases for Param enums, like :func:`flows_for_params`."""
    try:
        return list(load_mirror_config().clusters), None
    except Exception as exc:
        return [], f"{config_path()}: {exc}"


@contextmanager
def failing_fast(*errors: type[Exception]) -> Iterator[None]:
    """A WorkflowError (or one of ``errors``) fails the task at once: retrying cannot help."""
    from mirror_core.workflows.errors import WorkflowError

    try:
        yield
    except (WorkflowError, *errors) as exc:
        raise AirflowFailException(str(exc)) from None


@contextmanager
def failing(what: str) -> Iterator[None]:
    """Any error fails the task at once as ``what: error`` (the step recorded it already)."""
    try:
        yield
    except Exception as exc:
        raise AirflowFailException(f"{what}: {exc}") from exc


def mirror_config(config_error: str | None) -> Any:
    """The mirror config; fails the task when it was broken when the DAG was parsed (``config_error``)."""
    if config_error:
        raise AirflowFailException(f"mirror config invalid: {config_error}")
    return load_mirror_config()


def run_params(spec: type[S], config_error: str | None) -> tuple[Any, S]:
    """(mirror config, this run's Params as ``spec``), checked before any cluster is touched."""
    from mirror_core.workflows.params import validate_params

    config = mirror_config(config_error)
    with failing_fast():
        return config, validate_params(spec, get_current_context()["params"], config)


def state_store(migrate: bool = False) -> Any:
    """The state store (``MIRROR_CORE_DB_URL``), its schema brought up to date if ``migrate``."""
    from mirror_core.state.store import StateStore

    store = StateStore()
    if migrate:
        store.migrate()
    return store


DECISION_KEY = "decision"


def record_decision(context: Any, result: Any) -> None:
    """Push who chose what at a gate under a key of its own (read back by :func:`responder`): the user id
    (``who``, ``who_id``) and the display name beside it (``who_name``). The state store records the same
    (:func:`answer_gate`); the steps after the gate check that the two agree."""
    user = result.get("responded_by_user") or {}
    at = result.get("responded_at")
    # No responder: Airflow applied the gate's defaults (do nothing) when its response timeout passed.
    who_id = str(user.get("id") or "") or None
    who = who_id or "nobody (the gate timed out)"
    context["ti"].xcom_push(DECISION_KEY, {"chosen": (result.get("chosen_options") or [None])[0], "who": who,
                                           "who_id": who_id, "who_name": user.get("name"),
                                           "at": at.isoformat() if isinstance(at, datetime) else at})


def responder(ti: Any, gate: str) -> tuple[str | None, str]:
    """(chosen option, who) from a gate; (None, 'unknown') when nobody answered it."""
    decision = ti.xcom_pull(task_ids=gate, key=DECISION_KEY) or {}
    return decision.get("chosen"), decision.get("who", "unknown")


def run_started(context: Any) -> datetime | None:
    """When this DAG run began: the trigger time a failover's RTO counts from."""
    dag_run = context.get("dag_run")
    return getattr(dag_run, "start_date", None) or getattr(dag_run, "queued_at", None)


def triggered_by(context: Any) -> str | None:
    """The Airflow user id who triggered this run (None: not known, e.g. a run older than Airflow 3.1)."""
    return getattr(context.get("dag_run"), "triggering_user_name", None) or None


# -- what was approved is what runs (mirror_core.workflows.binding) -----------------------------------------
def self_approval_allowed(dag_id: str) -> bool:
    """``MIRROR_CORE_ALLOW_SELF_APPROVAL[_<DAG_ID>]`` (deployment environment, like the approvers): true lets
    the user who triggered a run approve it; unset or false (the default): four eyes."""
    from mirror_core.workflows.binding import SELF_APPROVAL_SETTING

    raw = _env(SELF_APPROVAL_SETTING, dag_id)
    value = (raw or "false").strip().lower()
    if value not in ("true", "false"):
        raise AirflowFailException(f"{SELF_APPROVAL_SETTING}: {raw!r} is neither true nor false; set true to let "
                                   "the user who triggered a run approve it, or unset it (four eyes)")
    return value == "true"


def bind_plan(context: Any, plan: Any) -> dict[str, Any]:
    """The assessment's last act: the plan written to the state store with its digest, bound to this run;
    the XCom handed to the later tasks (they check it against the store, they do not trust it)."""
    from mirror_core.workflows.binding import bind

    ti = context["ti"]
    bound = bind(state_store(), ti.dag_id, ti.run_id, plan, triggered_by(context))
    print(f"plan bound to run {ti.run_id}: sha256:{bound.digest} (triggered by {bound.triggered_by or 'unknown'})")
    return {**plan.to_xcom(), "digest": bound.digest}


def ask_gate(context: Any, gate: str, body: str | None, shows_plan: bool) -> str:
    """The body a gate shows: the plan as bound in the state store (``shows_plan``) or ``body``, then its
    digest and who may not approve it; the digest shown is recorded with the gate."""
    from mirror_core.workflows.binding import gate_footer, plan_of

    ti = context["ti"]
    store = state_store()
    bound = store.bound_plan(ti.dag_id, ti.run_id)
    if bound is None:
        raise AirflowFailException(f"no plan is bound to {ti.dag_id} run {ti.run_id} in the state store (its "
                                   "assessment did not record one); nothing was changed")
    store.ask_gate(ti.dag_id, ti.run_id, gate, bound.digest)
    shown = plan_of(bound).render() if shows_plan else (body or "")
    return shown + "\n" + gate_footer(bound, self_approval_allowed(ti.dag_id))


def answer_gate(context: Any, gate: str, event: dict[str, Any], accepting: Collection[str]) -> None:
    """Record the answer (XCom and state store: user id, display name, choice, time); an accepting answer by
    the user who triggered the run fails the gate with one line, unless the deployment allows it."""
    from mirror_core.workflows.binding import self_approval

    record_decision(context, event)
    ti = context["ti"]
    user = event.get("responded_by_user") or {}
    chosen = (event.get("chosen_options") or [None])[0]
    at = event.get("responded_at")
    store = state_store()
    bound = store.bound_plan(ti.dag_id, ti.run_id)
    who_id = str(user.get("id") or "") or None
    refused = self_approval(ti.dag_id, bound.triggered_by if bound else None, who_id,
                            self_approval_allowed(ti.dag_id)) if chosen in accepting else None
    store.answer_gate(ti.dag_id, ti.run_id, gate, chosen, who_id, user.get("name"),
                      datetime.fromisoformat(at) if isinstance(at, str) else at, refused)
    if refused:
        raise AirflowFailException(refused)


def approved(context: Any, gates: Mapping[str, Collection[str]], handed_by: str) -> tuple[Any, dict[str, Any]]:
    """(the plan from the state store, each gate's answer) for a step after ``gates``; one line and a failed
    task when anything differs from what was approved, a skipped task when a gate declined."""
    from mirror_core.workflows.binding import NotApproved, approved_plan
    from mirror_core.workflows.errors import WorkflowError

    ti = context["ti"]
    decisions = {g: ti.xcom_pull(task_ids=g, key=DECISION_KEY) for g in gates}
    try:
        return approved_plan(state_store(), ti.dag_id, ti.run_id, gates, ti.xcom_pull(task_ids=handed_by),
                             decisions, self_approval_allowed(ti.dag_id))
    except NotApproved as exc:
        raise AirflowSkipException(str(exc)) from None
    except WorkflowError as exc:
        raise AirflowFailException(str(exc)) from None


# Tasks that only read, or re-apply the same desired state (topic-config sync, reconciliation), may retry
# a transient error; the failover/failback/cutover/drill steps change state step by step and never
# retry (a second attempt would act on a half-done change): they record and fail instead. A
# WorkflowError (failing_fast) is never retried either way: retrying cannot fix it.
RETRY_SAFE = {"retries": 2, "retry_delay": timedelta(minutes=1)}

DEFAULT_GATE_TIMEOUT_S = 4 * 3600


def _env(name: str, dag_id: str) -> str | None:
    """``name_<DAG_ID>`` (this DAG only) or else ``name`` (every DAG)."""
    return os.environ.get(f"{name}_{dag_id.upper()}") or os.environ.get(name) or None


def gate_settings(dag_id: str) -> dict[str, Any]:
    """What every gate of ``dag_id`` gets, read when the DAG is parsed: its approvers
    (``MIRROR_CORE_APPROVERS[_<DAG_ID>]``, comma-separated Airflow user ids; unset: any user allowed to
    act on the DAG), its response timeout (``MIRROR_CORE_GATE_TIMEOUT_S[_<DAG_ID>]``, default 4 h: the
    gate then takes its "do nothing" default, so ``max_active_runs=1`` is never held forever) and the
    notifier telling that an approval is waiting. From the deployment's environment, not an Airflow
    Variable: whoever may edit Variables in the UI must not be able to make themselves an approver."""
    approvers = [u.strip() for u in (_env("MIRROR_CORE_APPROVERS", dag_id) or "").split(",") if u.strip()]
    timeout = _env("MIRROR_CORE_GATE_TIMEOUT_S", dag_id) or str(DEFAULT_GATE_TIMEOUT_S)
    try:
        seconds = float(timeout)
    except ValueError:
        seconds = 0.0
    if not seconds > 0:  # 0 would mean no timeout at all to Airflow
        raise ValueError(f"MIRROR_CORE_GATE_TIMEOUT_S: not a positive number of seconds: {timeout!r}")
    return {"assigned_users": [HITLUser(id=u, name=u) for u in approvers] or None,
            "response_timeout": timedelta(seconds=seconds), "notifiers": [WebhookNotifier("approval")]}


class ApprovalGate(ApprovalOperator):
    """Approve/Reject bound to the run's plan: shows it from the state store with its digest (``shows_plan``;
    else ``body``), records who answered (XCom and state store), refuses a self-approval (four eyes);
    unanswered within its response timeout, it rejects."""

    def __init__(self, shows_plan: bool = False, **kwargs: Any) -> None:
        super().__init__(defaults=[self.REJECT], **kwargs)
        self.shows_plan = shows_plan

    def execute(self, context: Any) -> Any:
        self.body = ask_gate(context, self.task_id, self.body, self.shows_plan)
        return super().execute(context)

    def execute_complete(self, context: Any, event: dict[str, Any]) -> Any:
        answer_gate(context, self.task_id, event, (self.APPROVE,))
        return super().execute_complete(context, event)


class ChoiceGate(HITLOperator):
    """A choice among options, bound like :class:`ApprovalGate`: ``accepting`` are the options that let the
    workflow go on (four eyes apply to them); the others (reject, roll back) anyone allowed may choose."""

    def __init__(self, accepting: list[str], shows_plan: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.accepting, self.shows_plan = tuple(accepting), shows_plan

    def execute(self, context: Any) -> Any:
        self.body = ask_gate(context, self.task_id, self.body, self.shows_plan)
        return super().execute(context)

    def execute_complete(self, context: Any, event: dict[str, Any]) -> Any:
        answer_gate(context, self.task_id, event, self.accepting)
        return super().execute_complete(context, event)


def finalize_failover(context: Any, gate: str, reject: str) -> None:
    """The failover/failback DAGs' last task, from the state store: record a rejection or a refusal, fail a
    run that did not complete."""
    from mirror_core.workflows.binding import plan_of, refusal_of
    from mirror_core.workflows.steps import close_failover

    ti = context["ti"]
    store = state_store()
    bound = store.bound_plan(ti.dag_id, ti.run_id)
    plan: Any = plan_of(bound) if bound else None
    gate_answer = bound.gates.get(gate) if bound else None
    who = gate_answer.approver if gate_answer and gate_answer.approver_id else (
        "nobody (the gate timed out)" if gate_answer and gate_answer.answered_at else "unknown")
    record = store.failover_record(bound.record_id) if bound else None
    with failing_fast():
        close_failover(store, plan, bool(gate_answer and gate_answer.chosen == reject and not gate_answer.refused),
                       who, record is not None and record.status == "done",
                       refusal_of(store, bound) if bound else None)


def executed(store: Any, plan: Any, approval: Any) -> Any:
    """What the execute step did, as it recorded it in the state store (not as an XCom says)."""
    from mirror_core.workflows.plans import Execution

    record = store.failover_record(plan.record_id)
    return Execution(approval.approver_id or "unknown", dict((record.details if record else {}).get("steps") or {}))


def gate_answer(bound: Any, gate: str, yes: str, no: str) -> bool | None:
    """A two-way gate's answer as the state store recorded it: True for ``yes``, False for ``no``, None when
    nobody answered it or the answer was refused (a self-approval)."""
    recorded = bound.gates.get(gate) if bound is not None else None
    if recorded is None or recorded.answered_at is None or recorded.refused:
        return None
    return True if recorded.chosen == yes else False if recorded.chosen == no else None


def last_approver(bound: Any, gates: list[str]) -> str:
    """Who answered the last of ``gates`` (in order) that was answered, by user id; 'unknown' when none was."""
    for gate in reversed(gates):
        recorded = bound.gates.get(gate) if bound is not None else None
        if recorded is not None and recorded.answered_at is not None:
            return recorded.approver if recorded.approver_id else "nobody (the gate timed out)"
    return "unknown"
