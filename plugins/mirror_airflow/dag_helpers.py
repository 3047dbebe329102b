"""Helpers the operator-workflow DAGs share: Param validation and reading HITL gate results."""

from __future__ import annotations

from typing import Any

from airflow.providers.standard.operators.hitl import ApprovalOperator, HITLOperator
from airflow.sdk.exceptions import AirflowFailException

from mirror_core.airflow_support import config_path, load_mirror_config


def flows_for_params() -> tuple[list[str], str | None]:
    """Flow names for Param enums; the DAG must still parse with a broken config (runs then fail)."""
    try:
        return [f.name for f in load_mirror_config().flows], None
    except Exception as exc:
        return [], f"{config_path()}: {exc}"


def names(params: dict[str, Any], key: str, required: bool = False) -> list[str]:
    """A list-of-names Param, validated: strings, non-empty, no duplicates."""
    value = params.get(key) or []
    if isinstance(value, str):
        value = [v.strip() for v in value.split(",") if v.strip()]
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise AirflowFailException(f"Param '{key}' must be a list of names, got {value!r}")
    if len(set(value)) != len(value):
        raise AirflowFailException(f"Param '{key}' lists a name twice: {value}")
    if required and not value:
        raise AirflowFailException(f"Param '{key}' needs at least one name")
    return [v.strip() for v in value]


def workflow_inputs(params: dict[str, Any], config_error: str | None) -> tuple[Any, list[str], list[str], Any]:
    """(config, apps, groups, state store) of the failover/failback DAGs, with their Params checked
    before any cluster is touched."""
    from mirror_core.state.store import StateStore

    if config_error:
        raise AirflowFailException(f"mirror config invalid: {config_error}")
    config = load_mirror_config()
    if params.get("flow") not in [f.name for f in config.flows]:
        raise AirflowFailException(f"Param 'flow': unknown flow {params.get('flow')!r}")
    apps, groups = names(params, "apps"), names(params, "groups")
    store = StateStore()
    store.migrate()
    return config, apps, groups, store


DECISION_KEY = "decision"


def record_decision(context: Any, result: Any) -> None:
    """Push who chose what at a gate under a key of its own (read back by :func:`responder`)."""
    user = result.get("responded_by_user") or {}
    context["ti"].xcom_push(DECISION_KEY, {"chosen": (result.get("chosen_options") or [None])[0],
                                          "who": str(user.get("name") or user.get("id") or "unknown")})


def responder(ti: Any, gate: str) -> tuple[str | None, str]:
    """(chosen option, who) from a gate; (None, 'unknown') when nobody answered it."""
    decision = ti.xcom_pull(task_ids=gate, key=DECISION_KEY) or {}
    return decision.get("chosen"), decision.get("who", "unknown")


class ApprovalGate(ApprovalOperator):
    """Approve/Reject that records the decision and the approver for the tasks after it."""

    def execute_complete(self, context: Any, event: dict[str, Any]) -> Any:
        record_decision(context, event)
        return super().execute_complete(context, event)


class ChoiceGate(HITLOperator):
    """A choice among options that records the decision and who made it."""

    def execute_complete(self, context: Any, event: dict[str, Any]) -> Any:
        record_decision(context, event)
        return super().execute_complete(context, event)


def verify_and_record(plan: dict[str, Any], result: dict[str, Any], cluster: str) -> dict[str, Any]:
    """Canary consumers on ``cluster`` resume where the groups were moved; record done or failed."""
    from mirror_core.state.store import StateStore
    from mirror_core.workflows.failover import canary

    store = StateStore()
    try:
        checked = canary(load_mirror_config(), plan[cluster], list(plan["groups"]))
    except Exception as exc:
        store.finish_failover(plan["record_id"], "failed", result["who"], steps=result["steps"], error=str(exc))
        raise AirflowFailException(f"verification failed: {exc}") from exc
    store.finish_failover(plan["record_id"], "done", result["who"], steps=result["steps"], canary=checked)
    return checked


def finalize_failover(ti: Any, gate: str, reject: str, kind: str) -> None:
    """Record a rejection; make the run fail when the workflow did not complete (a trigger-rule
    ``all_done`` leaf would otherwise let a failed run look successful)."""
    from mirror_core.state.store import StateStore

    plan = ti.xcom_pull(task_ids="assess")
    if not plan:
        raise AirflowFailException("the assessment did not complete (see the log of the task that failed before "
                                   "it); nothing was changed")
    chosen, who = responder(ti, gate)
    if chosen == reject:
        StateStore().finish_failover(plan["record_id"], "rejected", who)
        print(f"rejected by {who}: nothing was changed")
        return
    if ti.xcom_pull(task_ids="verify") is None:
        raise AirflowFailException(f"the {kind} did not complete (see the execute/verify logs; the state store "
                                   "records where it stopped)")
