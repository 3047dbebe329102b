"""cloud_migration_cutover: move the producers and consumers of some topics to another cluster for good.

Trigger by hand with ``source``, ``target`` (cluster aliases of a configured flow), ``topics``,
``groups``, ``apps`` (registry aliases), ``max_lag`` and ``deny_writes``.

preflight (configs/ACLs synced, replication healthy, lag <= max_lag; recorded and bound to the run in the
state store with its digest) -> **approve_start** -> schemas (where both clusters have a schema registry: its
subjects, versions and compatibility synced to the target's, recorded; a refusal fails the run, which rolls back)
-> deny_writes (optional DENY WRITE ACLs on the source topics) -> **quiesce** (the approver confirms
producers are stopped, or rolls back) -> drain (to lag 0, then the flow stops) -> completeness (the
offset map accounts for every record) -> switch (translated offsets committed on the target, registry
switched) -> **final_approval** (Reject rolls back) -> done. ``rollback`` always runs last and undoes
whatever ran when the cutover was not approved to the end or a step failed. Every step reads the plan from
the state store and runs only what was approved (digest, approvers, four eyes: mirror_core.workflows.binding).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from airflow.sdk import Param, dag, get_current_context, task
from mirror_airflow.dag_helpers import (
    ApprovalGate,
    ChoiceGate,
    approved,
    bind_plan,
    clusters_for_params,
    failing_fast,
    gate_answer,
    gate_settings,
    last_approver,
    run_params,
    state_store,
)
from mirror_airflow.notifiers import WebhookNotifier

from mirror_core.airflow_support import load_mirror_config
from mirror_core.workflows.params import CutoverParams

CLUSTERS, CONFIG_ERROR = clusters_for_params()  # the DAG parses even with a broken config
GATE = gate_settings("cloud_migration_cutover")  # approvers, response timeout, notifier
STOPPED = "Producers are stopped on the source"
ROLL_BACK = "Roll back"
GATES = ["approve_start", "quiesce", "final_approval"]  # in the order they are asked
# The gates each step needs answered, and the answers that let it run (from the state store, checked):
STARTED = {"approve_start": (ApprovalGate.APPROVE,)}
QUIESCED = {**STARTED, "quiesce": (STOPPED,)}
KEPT = {**QUIESCED, "final_approval": (ApprovalGate.APPROVE,)}


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
            context = get_current_context()
            return bind_plan(context, open_cutover(config, state_store(migrate=True), params, context["run_id"]))

    approve_start = ApprovalGate(
        task_id="approve_start",
        subject="Start the cutover {{ params.source }} -> {{ params.target }}?",
        shows_plan=True,  # from the state store, with its digest
        **GATE,
    )

    @task
    def schemas() -> dict[str, Any]:
        from mirror_core.workflows.steps import sync_schemas

        context = get_current_context()
        plan, _ = approved(context, STARTED, "preflight")
        config = load_mirror_config()
        flow = config.flow(plan.flow)
        if config.without_registry(flow):
            return {"skipped": f"{flow.source} and {flow.target} do not both have a schema registry"}
        with failing_fast():
            return sync_schemas(config, state_store(), plan.flow, False, context["run_id"])

    @task
    def deny_writes() -> list[str]:
        from mirror_core.workflows.steps import deny_source_writes

        plan, _ = approved(get_current_context(), STARTED, "preflight")
        return deny_source_writes(load_mirror_config(), plan)

    quiesce = ChoiceGate(
        task_id="quiesce",
        subject="Stop the producers of {{ params.topics | join(', ') }} on {{ params.source }}, then confirm",
        body="Stop every producer of these topics on the source cluster (deploy them pointed at the target, "
             "stopped). Confirm once none writes any more; the flow then drains to lag 0. "
             "Roll back undoes the ACL change, if any.",
        options=[STOPPED, ROLL_BACK],
        accepting=[STOPPED],
        defaults=[ROLL_BACK],
        **GATE,
    )

    @task
    def drain() -> dict[str, Any]:
        from mirror_core.workflows.cutover import drain_and_stop

        context = get_current_context()
        plan, answers = approved(context, QUIESCED, "preflight")
        return drain_and_stop(load_mirror_config(), state_store(), plan, answers["quiesce"].approver_id,
                              context["run_id"], float(context["params"]["drain_timeout_s"]))

    @task
    def completeness() -> dict[str, Any]:
        from mirror_core.workflows.steps import check_completeness

        plan, _ = approved(get_current_context(), QUIESCED, "preflight")
        report = check_completeness(load_mirror_config(), plan)
        state_store().note_cutover(plan.record_id, completeness=report)
        return report

    @task
    def switch() -> dict[str, Any]:
        from mirror_core.workflows.cutover import switch as do_switch

        context = get_current_context()
        plan, answers = approved(context, QUIESCED, "preflight")
        store = state_store()
        switched = do_switch(load_mirror_config(), store, plan, answers["quiesce"].approver_id, context["run_id"])
        store.note_cutover(plan.record_id, switch=switched)  # what the rollback undoes, kept off the XComs
        return switched

    final_approval = ApprovalGate(
        task_id="final_approval",
        subject="Keep the cutover to {{ params.target }}? (Reject rolls everything back)",
        body="Applications now resolve to **{{ params.target }}** and the groups have their translated offsets "
             "there. Check the applications, then approve to finish, or reject to roll back.\n\n"
             "{{ ti.xcom_pull(task_ids='switch') }}",
        **GATE,
    )

    @task
    def done() -> bool:
        from mirror_core.workflows.steps import record_cutover_done

        plan, answers = approved(get_current_context(), KEPT, "preflight")
        store = state_store()
        record = store.cutover_record(plan.record_id)
        details = record.details if record is not None else {}
        final = answers["final_approval"]
        store.note_cutover(plan.record_id, approved_by_name=final.approver_name)
        return record_cutover_done(store, plan, final.approver_id or "unknown", details.get("completeness") or {},
                                   details.get("switch") or {})

    @task(trigger_rule="all_done")
    def rollback() -> None:
        """Undo whatever ran unless the final approval was given; record the outcome (from the state store)."""
        from mirror_core.workflows.binding import plan_of, refusal_of
        from mirror_core.workflows.steps import CutoverAnswers, close_cutover

        context = get_current_context()
        ti = context["ti"]
        store = state_store()
        bound = store.bound_plan(ti.dag_id, ti.run_id)
        record = store.cutover_record(bound.record_id) if bound else None
        details = (record.details if record is not None else None) or {}
        answers = CutoverAnswers(*(gate_answer(bound, g, yes, no) for g, yes, no in (
            ("approve_start", ApprovalGate.APPROVE, ApprovalGate.REJECT), ("quiesce", STOPPED, ROLL_BACK),
            ("final_approval", ApprovalGate.APPROVE, ApprovalGate.REJECT))))
        with failing_fast():
            close_cutover(load_mirror_config(), store, plan_of(bound) if bound else None,  # type: ignore[arg-type]
                          answers, {"switched": details.get("switch")}, record is not None and record.status == "done",
                          last_approver(bound, GATES), context["run_id"], refusal_of(store, bound) if bound else None)

    started = preflight() >> approve_start >> schemas() >> deny_writes()
    started >> quiesce >> drain() >> completeness() >> switch() >> final_approval >> done() >> rollback()


cloud_migration_cutover()
