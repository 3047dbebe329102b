"""failover: move applications from a flow's primary to its standby, with an approval gate.

Trigger by hand with ``flow`` (source->target), ``apps`` (application aliases in the active-cluster
registry), ``groups`` (consumer groups to move), ``mode`` (planned | unplanned) and optionally ``topics``
(source topic names or patterns: only those switch — paused in the forward flow by this run, which goes on
copying the others; a group reading a switched and a staying topic is refused at assess).

assess (reachability, lag, data at risk, translated offsets; recorded and bound to the run in the state
store with its digest) -> **approve** (the bound plan and its digest are the gate's body; Reject changes
nothing; the user who triggered the run cannot approve it) -> execute (planned: drain to lag 0; stop the forward flow;
commit translated offsets on the standby; switch the registry; start the reverse flow) -> verify
(canary consumers resume exactly at the committed offsets) -> finalize (records the outcome).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from airflow.sdk import Param, dag, get_current_context, task
from mirror_airflow.dag_helpers import (
    ApprovalGate,
    approved,
    bind_plan,
    executed,
    failing,
    failing_fast,
    finalize_failover,
    flows_for_params,
    gate_settings,
    run_params,
    run_started,
    state_store,
)
from mirror_airflow.notifiers import WebhookNotifier

from mirror_core.airflow_support import load_mirror_config
from mirror_core.workflows.params import FailoverParams

FLOWS, CONFIG_ERROR = flows_for_params()
GATE = gate_settings("failover")  # approvers, response timeout, notifier
APPROVED = {"approve": (ApprovalGate.APPROVE,)}  # the gate the steps after it need, and its accepting answer


@dag(
    dag_id="failover",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    on_failure_callback=WebhookNotifier("failure"),
    tags=["mirror_core", "dr"],
    doc_md=__doc__,
    params={
        "flow": Param(FLOWS[0] if FLOWS else "", type="string", enum=FLOWS or [""],
                      description="The forward flow primary->standby to fail over"),
        "apps": Param([], type="array", items={"type": "string"},
                      description="Application aliases to point at the standby"),
        "groups": Param([], type="array", items={"type": "string"},
                        description="Consumer groups to move (stopped on the primary, not yet started on the standby)"),
        "mode": Param("planned", type="string", enum=["planned", "unplanned"],
                      description="planned: drain to lag 0 first (primary reachable); unplanned: primary lost"),
        "drain_timeout_s": Param(300, type="integer", minimum=10, maximum=86400),
        "topics": Param([], type="array", items={"type": "string"},
                        description="Only these source topics (names or patterns) "
                                    "switch, the others stay mirrored (a group reading both: refused); empty: all"),
    },
)
def failover() -> None:
    @task
    def assess() -> dict[str, Any]:
        from mirror_core.workflows.steps import open_failover

        config, params = run_params(FailoverParams, CONFIG_ERROR)
        with failing_fast():
            context = get_current_context()
            plan = open_failover(config, state_store(migrate=True), params, context["run_id"], run_started(context))
            return bind_plan(context, plan)

    approve = ApprovalGate(
        task_id="approve",
        subject="Fail over {{ params.flow }} ({{ params.mode }})?",
        shows_plan=True,  # from the state store, with its digest
        **GATE,
    )

    @task
    def execute() -> None:
        from mirror_core.workflows.steps import run_failover

        context = get_current_context()
        plan, answers = approved(context, APPROVED, "assess")
        approval = answers["approve"]
        with failing("failover failed"):
            run_failover(load_mirror_config(), state_store(), plan, approval.approver_id, context["run_id"],
                         float(context["params"]["drain_timeout_s"]), approval.answered_at, approval.approver_name)

    @task
    def verify() -> dict[str, Any]:
        from mirror_core.workflows.steps import verify_moved_groups

        plan, answers = approved(get_current_context(), APPROVED, "assess")
        store = state_store()
        with failing("verification failed"):
            return verify_moved_groups(load_mirror_config(), store, plan, executed(store, plan, answers["approve"]))

    @task(trigger_rule="all_done")
    def finalize() -> None:
        finalize_failover(get_current_context(), "approve", ApprovalGate.REJECT)

    assess() >> approve >> execute() >> verify() >> finalize()


failover()
