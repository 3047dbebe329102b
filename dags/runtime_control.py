"""runtime_control: pause or resume a topic or partition of a flow, limit its bandwidth, skip a damaged range, set
the flow's topic and group filters.

Trigger by hand with ``flow``, ``action`` (pause | resume | limit | unlimit | skip | filter | unfilter), ``topic``
(empty: the whole flow, for limit and unlimit), ``partition`` (optional; skip needs it), ``bytes_per_second``
(limit), ``offsets`` (skip: FIRST-LAST inclusive, as the mirror's pause line prints them), ``topics``,
``topics_exclude``, ``groups``, ``groups_exclude`` (filter: comma-separated regexes over the config file's; empty
keeps the file's; unfilter goes back to the file's), ``reason`` (required) and ``require_approval``. The change
is recorded in the state store as the user who triggered the run; the running mirrors apply it within seconds,
without a restart (the status page shows desired and applied).

check (Params against the mirror config) -> **approve** (only with require_approval; Reject changes nothing)
-> apply -> outcome (fails a rejected run).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from airflow.providers.standard.operators.hitl import ApprovalOperator
from airflow.sdk import Param, dag, get_current_context, task
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException
from mirror_airflow.dag_helpers import (
    failing_fast,
    flows_for_params,
    gate_settings,
    record_decision,
    responder,
    run_params,
    state_store,
)
from mirror_airflow.notifiers import WebhookNotifier

from mirror_core.workflows.topic_control import ACTIONS, RuntimeControlParams

FLOWS, CONFIG_ERROR = flows_for_params()  # the DAG parses even with a broken config
GATE = gate_settings("runtime_control")  # approvers, response timeout, notifier


def triggering_user(context: Any) -> str:
    """The Airflow user who triggered the run (who the change is recorded as)."""
    return str(getattr(context.get("dag_run"), "triggering_user_name", None) or "unknown Airflow user")


class ControlGate(ApprovalOperator):
    """Approve/Reject, asked only when the run's ``require_approval`` Param is true (else skipped); records the
    decision and the approver for ``apply``; unanswered within its response timeout, it rejects."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(defaults=[self.REJECT], **kwargs)

    def execute(self, context: Any) -> Any:
        if not context["params"].get("require_approval"):
            raise AirflowSkipException("no approval required (require_approval is false)")
        return super().execute(context)

    def execute_complete(self, context: Any, event: dict[str, Any]) -> Any:
        record_decision(context, event)
        return super().execute_complete(context, event)


@dag(
    dag_id="runtime_control",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    on_failure_callback=WebhookNotifier("failure"),
    tags=["mirror_core", "control"],
    doc_md=__doc__,
    params={
        "flow": Param(FLOWS[0] if FLOWS else "", type="string", enum=FLOWS or [""], description="The flow"),
        "action": Param("pause", type="string", enum=list(ACTIONS),
                        description="pause | resume (an operator's pause, or a partition the mirror paused) | "
                                    "limit | unlimit | skip (an offset range of a partition the mirror paused) | "
                                    "filter | unfilter (the flow's topic and group filters)"),
        "topic": Param("", type="string", pattern=r"^[A-Za-z0-9._\-]{0,249}$",
                       description="The source topic (empty: the whole flow, for limit and unlimit)"),
        "partition": Param(None, type=["null", "integer"], minimum=0,
                           description="Only this partition (pause, resume); skip needs it"),
        "bytes_per_second": Param(None, type=["null", "integer"], minimum=1,
                                  description="limit: bytes per second for the flow (or topic), all processes"),
        "offsets": Param("", type="string", pattern=r"^(\d+(-\d+)?)?$",
                         description="skip: FIRST-LAST (inclusive), as the mirror's pause line prints them"),
        **{key: Param("", type="string", description=f"filter: the flow's {key.replace('_', '.')} (comma-separated "
                                                      "regexes, over the config file's; empty: the file's)")
           for key in ("topics", "topics_exclude", "groups", "groups_exclude")},
        "reason": Param("", type="string", minLength=1, description="Why (recorded with the change; required)"),
        "require_approval": Param(False, type="boolean", description="Ask an approver before applying"),
    },
)
def runtime_control() -> None:
    @task
    def check() -> dict[str, Any]:
        from mirror_core.workflows.topic_control import approval_body, check_against_config

        config, params = run_params(RuntimeControlParams, CONFIG_ERROR)
        with failing_fast():
            req = params.request()
            check_against_config(config, req)
            who = triggering_user(get_current_context())
            return {"summary": req.summary, "who": who, "body": approval_body(state_store(migrate=True), req, who)}

    checked = check()
    approve = ControlGate(
        task_id="approve",
        subject="Runtime control: {{ ti.xcom_pull(task_ids='check')['summary'] }}?",
        body="{{ ti.xcom_pull(task_ids='check')['body'] }}",
        **GATE,
    )

    @task(trigger_rule="none_failed")
    def apply(checked: dict[str, Any]) -> str:
        from mirror_core.workflows.topic_control import apply_control

        context = get_current_context()
        _, params = run_params(RuntimeControlParams, CONFIG_ERROR)
        req = params.request()
        if params.require_approval:
            chosen, approver = responder(context["ti"], "approve")
            if chosen != ControlGate.APPROVE:
                raise AirflowFailException(f"not approved ({approver}): nothing changed")
            req = req.approved_by(approver)
        with failing_fast():
            line = apply_control(state_store(migrate=True), req, checked["who"])
        print(line)
        return line

    @task(trigger_rule="all_done")
    def outcome() -> None:
        context = get_current_context()
        ti = context["ti"]
        if ti.xcom_pull(task_ids="apply") is not None:
            return
        chosen, who = responder(ti, "approve")
        if chosen == ControlGate.REJECT:
            raise AirflowFailException(f"rejected by {who}: nothing changed")
        raise AirflowFailException("the change was not applied: see the check and apply tasks")

    applied = apply(checked)
    checked >> approve >> applied >> outcome()


runtime_control()
