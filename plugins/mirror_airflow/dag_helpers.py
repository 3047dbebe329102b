"""Airflow glue the workflow DAGs share: Params to typed specs, errors to failed tasks, gate answers."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any, TypeVar

from airflow.providers.standard.operators.hitl import ApprovalOperator, HITLOperator
from airflow.sdk import get_current_context
from airflow.sdk.exceptions import AirflowFailException
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
    """Push who chose what at a gate under a key of its own (read back by :func:`responder`)."""
    user = result.get("responded_by_user") or {}
    at = result.get("responded_at")
    # No responder: Airflow applied the gate's defaults (do nothing) when its response timeout passed.
    who = str(user.get("name") or user.get("id") or "") or "nobody (the gate timed out)"
    context["ti"].xcom_push(DECISION_KEY, {"chosen": (result.get("chosen_options") or [None])[0], "who": who,
                                           "at": at.isoformat() if isinstance(at, datetime) else at})


def responder(ti: Any, gate: str) -> tuple[str | None, str]:
    """(chosen option, who) from a gate; (None, 'unknown') when nobody answered it."""
    decision = ti.xcom_pull(task_ids=gate, key=DECISION_KEY) or {}
    return decision.get("chosen"), decision.get("who", "unknown")


def decided_at(ti: Any, gate: str) -> datetime | None:
    """When a gate was answered (None when nobody answered it)."""
    at = (ti.xcom_pull(task_ids=gate, key=DECISION_KEY) or {}).get("at")
    return datetime.fromisoformat(at) if at else None


def run_started(context: Any) -> datetime | None:
    """When this DAG run began: the trigger time a failover's RTO counts from."""
    dag_run = context.get("dag_run")
    return getattr(dag_run, "start_date", None) or getattr(dag_run, "queued_at", None)


def answer(ti: Any, gate: str, yes: str, no: str) -> bool | None:
    """A two-way gate's answer: True for ``yes``, False for ``no``, None when nobody answered it."""
    chosen, _ = responder(ti, gate)
    return True if chosen == yes else False if chosen == no else None


def last_responder(ti: Any, gates: list[str]) -> str:
    """Who answered the last of ``gates`` (in order) that was answered; 'unknown' when none was."""
    for gate in reversed(gates):
        if ti.xcom_pull(task_ids=gate, key=DECISION_KEY):
            return responder(ti, gate)[1]
    return "unknown"


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
    """Approve/Reject that records the decision and the approver for the tasks after it; unanswered
    within its response timeout, it rejects."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(defaults=[self.REJECT], **kwargs)

    def execute_complete(self, context: Any, event: dict[str, Any]) -> Any:
        record_decision(context, event)
        return super().execute_complete(context, event)


class ChoiceGate(HITLOperator):
    """A choice among options that records the decision and who made it."""

    def execute_complete(self, context: Any, event: dict[str, Any]) -> Any:
        record_decision(context, event)
        return super().execute_complete(context, event)


def finalize_failover(ti: Any, gate: str, reject: str, plan_type: Any) -> None:
    """The failover/failback DAGs' last task: record a rejection, fail a run that did not complete."""
    from mirror_core.workflows.steps import close_failover

    plan = ti.xcom_pull(task_ids="assess")
    chosen, who = responder(ti, gate)
    with failing_fast():
        close_failover(state_store(), plan_type.from_xcom(plan) if plan else None, chosen == reject, who,
                       ti.xcom_pull(task_ids="verify") is not None)
