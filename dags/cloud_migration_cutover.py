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
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException
from mirror_airflow.dag_helpers import ApprovalGate, ChoiceGate, names, responder

from mirror_core.airflow_support import config_path, load_mirror_config

try:
    CLUSTERS = list(load_mirror_config().clusters)
    CONFIG_ERROR = None
except Exception as exc:  # the DAG must parse; runs then fail with the reason
    CLUSTERS, CONFIG_ERROR = [], f"{config_path()}: {exc}"
STOPPED = "Producers are stopped on the source"
ROLL_BACK = "Roll back"


@dag(
    dag_id="cloud_migration_cutover",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
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
        from mirror_core.state.store import StateStore
        from mirror_core.workflows.control import WorkflowError
        from mirror_core.workflows.cutover import preflight as check
        from mirror_core.workflows.cutover import render_cutover

        if CONFIG_ERROR:
            raise AirflowFailException(f"mirror config invalid: {CONFIG_ERROR}")
        context = get_current_context()
        params = context["params"]
        config = load_mirror_config()
        for key in ("source", "target"):
            if params.get(key) not in config.clusters:
                raise AirflowFailException(f"Param '{key}': unknown cluster {params.get(key)!r}")
        topics, groups, apps = names(params, "topics", required=True), names(params, "groups"), names(params, "apps")
        store = StateStore()
        store.migrate()
        try:
            plan = check(config, store, params["source"], params["target"], topics, groups, apps,
                         int(params["max_lag"]))
        except WorkflowError as exc:
            raise AirflowFailException(str(exc)) from None
        plan["deny_writes"] = bool(params["deny_writes"])
        plan["record_id"] = store.start_cutover(plan["source"], plan["target"], context["run_id"], plan)
        plan["body"] = render_cutover(plan)
        print(plan["body"])
        return plan

    plan = preflight()
    approve_start = ApprovalGate(
        task_id="approve_start",
        subject="Start the cutover {{ params.source }} -> {{ params.target }}?",
        body="{{ ti.xcom_pull(task_ids='preflight')['body'] }}",
    )

    @task
    def deny_writes(plan: dict[str, Any]) -> list[str]:
        from mirror_core.workflows.cutover import deny_writes as deny

        if not plan["deny_writes"]:
            return []
        return deny(load_mirror_config(), plan["source"], plan["topics"])

    quiesce = ChoiceGate(
        task_id="quiesce",
        subject="Stop the producers of {{ params.topics | join(', ') }} on {{ params.source }}, then confirm",
        body="Stop every producer of these topics on the source cluster (deploy them pointed at the target, "
             "stopped). Confirm once none writes any more; the flow then drains to lag 0. "
             "Roll back undoes the ACL change, if any.",
        options=[STOPPED, ROLL_BACK],
        defaults=[ROLL_BACK],
    )

    @task
    def drain(plan: dict[str, Any]) -> dict[str, Any]:
        from mirror_core.workflows.cutover import drain_and_stop

        context = get_current_context()
        chosen, who = responder(context["ti"], "quiesce")
        if chosen != STOPPED:
            raise AirflowSkipException(f"{who} chose to roll back")
        return drain_and_stop(load_mirror_config(), _store(), plan, who, context["run_id"],
                              float(context["params"]["drain_timeout_s"]))

    @task
    def completeness(plan: dict[str, Any], drained: dict[str, Any]) -> dict[str, Any]:
        from mirror_core.workflows.cutover import completeness as check

        report = check(load_mirror_config(), plan)
        print(f"complete: {report['records']} records accounted for on {plan['target']}")
        return report

    @task
    def switch(plan: dict[str, Any], complete: dict[str, Any]) -> dict[str, Any]:
        from mirror_core.workflows.cutover import switch as do_switch

        context = get_current_context()
        _, who = responder(context["ti"], "quiesce")
        return do_switch(load_mirror_config(), _store(), plan, who, context["run_id"])

    final_approval = ApprovalGate(
        task_id="final_approval",
        subject="Keep the cutover to {{ params.target }}? (Reject rolls everything back)",
        body="Applications now resolve to **{{ params.target }}** and the groups have their translated offsets "
             "there. Check the applications, then approve to finish, or reject to roll back.\n\n"
             "{{ ti.xcom_pull(task_ids='switch') }}",
    )

    @task
    def done(plan: dict[str, Any], complete: dict[str, Any], switched: dict[str, Any]) -> bool:
        context = get_current_context()
        _, who = responder(context["ti"], "final_approval")
        _store().finish_cutover(plan["record_id"], "done", approved_by=who, completeness=complete, switch=switched)
        return True

    @task(trigger_rule="all_done")
    def rollback() -> None:
        """Undo whatever ran unless the final approval was given; record the outcome."""
        from mirror_core.workflows.cutover import rollback as undo

        context = get_current_context()
        ti = context["ti"]
        plan = ti.xcom_pull(task_ids="preflight")
        if not plan:
            raise AirflowFailException("preflight failed (see its log); nothing was changed")
        final, who = responder(ti, "final_approval")
        if final == ApprovalGate.APPROVE:
            if not ti.xcom_pull(task_ids="done"):
                raise AirflowFailException("approved, but recording the cutover failed (see the 'done' log)")
            return
        steps = {"denied": ti.xcom_pull(task_ids="deny_writes"), "stopped": ti.xcom_pull(task_ids="drain"),
                 "switched": ti.xcom_pull(task_ids="switch")}
        started, _ = responder(ti, "approve_start")
        quiesced, _ = responder(ti, "quiesce")
        declined = started == ApprovalGate.REJECT or quiesced == ROLL_BACK or final == ApprovalGate.REJECT
        undone = undo(load_mirror_config(), _store(), plan, steps, who, context["run_id"])
        status = "rejected" if started == ApprovalGate.REJECT else "rolled-back" if declined else "failed"
        _store().finish_cutover(plan["record_id"], status, undone=undone)
        print(f"cutover {status}; undone: {undone or 'nothing to undo'}")
        if not declined:
            raise AirflowFailException(f"a cutover step failed; rolled back: {undone}")

    denied = deny_writes(plan)
    drained = drain(plan)
    complete = completeness(plan, drained)
    switched = switch(plan, complete)
    plan >> approve_start >> denied >> quiesce >> drained
    switched >> final_approval >> done(plan, complete, switched) >> rollback()


def _store() -> Any:
    from mirror_core.state.store import StateStore

    return StateStore()


cloud_migration_cutover()
