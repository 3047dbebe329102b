"""cloud_migration_cutover: move the producers and consumers of some topics to another cluster for good.

Trigger by hand with ``source``, ``target`` (cluster aliases of a configured flow), ``topics``,
``groups``, ``apps`` (registry aliases), ``max_lag`` and ``deny_writes``.

preflight (configs/ACLs synced, replication healthy, lag <= max_lag; recorded) -> **approve_start**
-> deny_writes (optional DENY WRITE ACLs on the source topics) -> **quiesce** (the approver confirms
producers are stopped, or rolls back) -> drain (to lag 0, then the flow stops) -> completeness (the
offset map accounts for every record) -> switch (translated offsets committed on the target, registry
switched) -> **final_approval** (Reject rolls back) -> done. ``rollback`` always runs last and undoes
whatever ran when the cutover was not approved to the end or a step failed.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from airflow.sdk import Param, dag, get_current_context, task
from airflow.sdk.exceptions import AirflowSkipException
from mirror_airflow.dag_helpers import (
    ApprovalGate,
    ChoiceGate,
    answer,
    clusters_for_params,
    failing_fast,
    gate_settings,
    last_responder,
    responder,
    run_params,
    state_store,
)
from mirror_airflow.notifiers import WebhookNotifier

from mirror_core.airflow_support import load_mirror_config
from mirror_core.workflows.params import CutoverParams
from mirror_core.workflows.plans import CutoverPlan

CLUSTERS, CONFIG_ERROR = clusters_for_params()  # the DAG parses even with a broken config
GATE = gate_settings("cloud_migration_cutover")  # approvers, response timeout, notifier
STOPPED = "Producers are stopped on the source"
ROLL_BACK = "Roll back"
GATES = ["approve_start", "quiesce", "final_approval"]  # in the order they are asked


@dag(
    dag_id="cloud_migration_cutover",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    on_failure_callback=WebhookNotifier("failure"),
    tags=["mirror_core", "migration"],
    doc_md=__doc__,
    params={
        "source": Param(CLUSTERS[0] if CLUSTERS else "", type="string", enum=CLUSTERS or [""]),
        "target": Param(CLUSTERS[-1] if CLUSTERS else "", type="string", enum=CLUSTERS or [""]),
        "topics": Param([], type="array", items={"type": "string"}, description="Source topics to cut over"),
        "groups": Param([], type="array", items={"type": "string"}, description="Consumer groups that move"),
        "apps": Param([], type="array", items={"type": "string"}, description="Registry aliases that move"),
        "max_lag": Param(1000, type="integer", minimum=0, description="Preflight: lag threshold (records)"),
        "deny_writes": Param(False, type="boolean",
                             description="DENY WRITE ACLs on the source topics once approved (needs an authorizer)"),
        "drain_timeout_s": Param(300, type="integer", minimum=10, maximum=86400),
    },
)
def cloud_migration_cutover() -> None:
    @task
    def preflight() -> dict[str, Any]:
        from mirror_core.workflows.steps import open_cutover

        config, params = run_params(CutoverParams, CONFIG_ERROR)
        with failing_fast():
            return open_cutover(config, state_store(migrate=True), params, get_current_context()["run_id"]).to_xcom()

    plan = preflight()
    approve_start = ApprovalGate(
        task_id="approve_start",
        subject="Start the cutover {{ params.source }} -> {{ params.target }}?",
        body="{{ ti.xcom_pull(task_ids='preflight')['body'] }}",
        **GATE,
    )

    @task
    def deny_writes(plan: dict[str, Any]) -> list[str]:
        from mirror_core.workflows.steps import deny_source_writes

        return deny_source_writes(load_mirror_config(), CutoverPlan.from_xcom(plan))

    quiesce = ChoiceGate(
        task_id="quiesce",
        subject="Stop the producers of {{ params.topics | join(', ') }} on {{ params.source }}, then confirm",
        body="Stop every producer of these topics on the source cluster (deploy them pointed at the target, "
             "stopped). Confirm once none writes any more; the flow then drains to lag 0. "
             "Roll back undoes the ACL change, if any.",
        options=[STOPPED, ROLL_BACK],
        defaults=[ROLL_BACK],
        **GATE,
    )

    @task
    def drain(plan: dict[str, Any]) -> dict[str, Any]:
        from mirror_core.workflows.cutover import drain_and_stop

        context = get_current_context()
        chosen, who = responder(context["ti"], "quiesce")
        if chosen != STOPPED:
            raise AirflowSkipException(f"{who} chose to roll back")
        return drain_and_stop(load_mirror_config(), state_store(), CutoverPlan.from_xcom(plan), who,
                              context["run_id"], float(context["params"]["drain_timeout_s"]))

    @task
    def completeness(plan: dict[str, Any], drained: dict[str, Any]) -> dict[str, Any]:
        from mirror_core.workflows.steps import check_completeness

        return check_completeness(load_mirror_config(), CutoverPlan.from_xcom(plan))

    @task
    def switch(plan: dict[str, Any], complete: dict[str, Any]) -> dict[str, Any]:
        from mirror_core.workflows.cutover import switch as do_switch

        context = get_current_context()
        _, who = responder(context["ti"], "quiesce")
        return do_switch(load_mirror_config(), state_store(), CutoverPlan.from_xcom(plan), who, context["run_id"])

    final_approval = ApprovalGate(
        task_id="final_approval",
        subject="Keep the cutover to {{ params.target }}? (Reject rolls everything back)",
        body="Applications now resolve to **{{ params.target }}** and the groups have their translated offsets "
             "there. Check the applications, then approve to finish, or reject to roll back.\n\n"
             "{{ ti.xcom_pull(task_ids='switch') }}",
        **GATE,
    )

    @task
    def done(plan: dict[str, Any], complete: dict[str, Any], switched: dict[str, Any]) -> bool:
        from mirror_core.workflows.steps import record_cutover_done

        _, who = responder(get_current_context()["ti"], "final_approval")
        return record_cutover_done(state_store(), CutoverPlan.from_xcom(plan), who, complete, switched)

    @task(trigger_rule="all_done")
    def rollback() -> None:
        """Undo whatever ran unless the final approval was given; record the outcome."""
        from mirror_core.workflows.steps import CutoverAnswers, close_cutover

        context = get_current_context()
        ti = context["ti"]
        plan = ti.xcom_pull(task_ids="preflight")
        answers = CutoverAnswers(answer(ti, "approve_start", ApprovalGate.APPROVE, ApprovalGate.REJECT),
                                 answer(ti, "quiesce", STOPPED, ROLL_BACK),
                                 answer(ti, "final_approval", ApprovalGate.APPROVE, ApprovalGate.REJECT))
        steps = {"denied": ti.xcom_pull(task_ids="deny_writes"), "stopped": ti.xcom_pull(task_ids="drain"),
                 "switched": ti.xcom_pull(task_ids="switch")}
        with failing_fast():
            close_cutover(load_mirror_config(), state_store(), CutoverPlan.from_xcom(plan) if plan else None, answers,
                          steps, bool(ti.xcom_pull(task_ids="done")), last_responder(ti, GATES),
                          context["run_id"])

    denied = deny_writes(plan)
    drained = drain(plan)
    complete = completeness(plan, drained)
    switched = switch(plan, complete)
    plan >> approve_start >> denied >> quiesce >> drained
    switched >> final_approval >> done(plan, complete, switched) >> rollback()


cloud_migration_cutover()
