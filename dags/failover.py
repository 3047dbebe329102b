"""failover: move applications from a flow's primary to its standby, with an approval gate.

Trigger by hand with ``flow`` (source->target), ``apps`` (application aliases in the active-cluster
registry), ``groups`` (consumer groups to move) and ``mode`` (planned | unplanned).

assess (reachability, lag, data at risk, translated offsets; recorded) -> **approve** (the plan is
the gate's body; Reject changes nothing) -> execute (planned: drain to lag 0; stop the forward flow;
commit translated offsets on the standby; switch the registry; start the reverse flow) -> verify
(canary consumers resume exactly at the committed offsets) -> finalize (records the outcome).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from airflow.sdk import Param, dag, get_current_context, task
from mirror_airflow.dag_helpers import (
    ApprovalGate,
    decided_at,
    failing,
    failing_fast,
    finalize_failover,
    flows_for_params,
    gate_settings,
    responder,
    run_params,
    run_started,
    state_store,
)
from mirror_airflow.notifiers import WebhookNotifier

from mirror_core.airflow_support import load_mirror_config
from mirror_core.workflows.params import FailoverParams
from mirror_core.workflows.plans import Execution, FailoverPlan

FLOWS, CONFIG_ERROR = flows_for_params()
GATE = gate_settings("failover")  # approvers, response timeout, notifier


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
    },
)
def failover() -> None:
    @task
    def assess() -> dict[str, Any]:
        from mirror_core.workflows.steps import open_failover

        config, params = run_params(FailoverParams, CONFIG_ERROR)
        with failing_fast():
            context = get_current_context()
            return open_failover(config, state_store(migrate=True), params, context["run_id"],
                        run_started(context)).to_xcom()

    plan = assess()
    approve = ApprovalGate(
        task_id="approve",
        subject="Fail over {{ params.flow }} ({{ params.mode }})?",
        body="{{ ti.xcom_pull(task_ids='assess')['body'] }}",
        **GATE,
    )

    @task
    def execute(plan: dict[str, Any]) -> dict[str, Any]:
        from mirror_core.workflows.steps import run_failover

        context = get_current_context()
        _, who = responder(context["ti"], "approve")
        with failing("failover failed"):
            return run_failover(load_mirror_config(), state_store(), FailoverPlan.from_xcom(plan), who,
                                context["run_id"], float(context["params"]["drain_timeout_s"]),
                                decided_at(context["ti"], "approve")).to_xcom()

    @task
    def verify(plan: dict[str, Any], result: dict[str, Any]) -> dict[str, Any]:
        from mirror_core.workflows.steps import verify_moved_groups

        with failing("verification failed"):
            return verify_moved_groups(load_mirror_config(), state_store(), FailoverPlan.from_xcom(plan),
                                       Execution.from_xcom(result))

    @task(trigger_rule="all_done")
    def finalize() -> None:
        finalize_failover(get_current_context()["ti"], "approve", ApprovalGate.REJECT, FailoverPlan)

    result = execute(plan)
    plan >> approve >> result
    verify(plan, result) >> finalize()


failover()
