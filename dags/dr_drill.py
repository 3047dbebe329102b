"""dr_drill: a disaster-recovery drill that really fails a canary over, measures it, and fails back.

Quarterly (06:00 UTC on the first day of January, April, July and October) and on demand. Safe
against production: it uses its own topic (``mirror-core.drill.<run>``), its own canary group and its
own mirror process and internal topics (source alias ``drill-<source>``); production flows, groups
and progress are never touched.

The drill produces sequence-numbered canary records on the primary, lets the canary group consume
``consume_before_failure`` of them, kills the drill mirror (SIGKILL) at a random moment (``seed``)
while records are still being produced, fails the canary group over with offsets translated from
the standby's checkpoints only, and measures RPO (records acknowledged by the primary but not on the
standby at the failure), RTO (kill to the canary's first record on the standby), duplicates and
losses seen by the canary. Then it fails back (the standby catches up; the canary returns to the
primary and reads what it missed) and deletes the drill's topics and groups.

The report goes to the state store and the status page (history and trends). The run fails when an
objective (``max_rpo_records``, ``max_rto_seconds``, ``max_duplicates``, ``max_losses``) is missed,
after the report is recorded. ``unreplicated_at_failure`` >= 0 freezes the drill mirror for the last
N records before the failure, making the RPO exactly N (a known scenario, e.g. to test alerting).

``mode = failover`` drills the real path instead (mirror_core.workflows.drill_failover): the production flow's
failover workflow for a drill application (``app``, its ``topics`` mirrored by the flow and its ``groups``)
— assess (a scope overlapping a production application refused in one line, nothing changed; the known
sequence produced, ``consume_before_failure`` read per topic by each group) -> **approve** (the failover
DAG's bound plan, four eyes: the user who triggered the run cannot approve it) -> execute -> verify (as the
failover DAG) -> measure (the rest read on the standby: RPO, RTO from the trigger and from the approval,
duplicates, losses) -> failback (approved by the same gate) -> finish (records the drill, whatever happened).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from airflow.sdk import Param, dag, get_current_context, task
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException
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
    mirror_config,
    run_started,
    state_store,
)
from mirror_airflow.notifiers import WebhookNotifier

from mirror_core.airflow_support import config_path, load_mirror_config
from mirror_core.workflows.plans import DrillOutcome

FLOWS, CONFIG_ERROR = flows_for_params()  # the DAG parses even with a broken config
GATE = gate_settings("dr_drill")  # approvers, response timeout, notifier of the failover mode's gate
APPROVED = {"approve": (ApprovalGate.APPROVE,)}
DATA = "drill_data"  # the assessment's XCom key of the known sequence (the plan itself is bound in the store)


def _mode(wanted: str) -> None:
    """Skip a task of the other mode (its branch is skipped with it)."""
    mode = get_current_context()["params"].get("mode", "canary")
    if mode != wanted:
        raise AirflowSkipException(f"mode {mode}: this task belongs to mode {wanted}")


@dag(
    dag_id="dr_drill",
    schedule="0 6 1 */3 *",
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    on_failure_callback=WebhookNotifier("failure"),
    tags=["mirror_core", "dr"],
    doc_md=__doc__,
    params={
        "flow": Param(FLOWS[0] if FLOWS else "", type="string", enum=FLOWS or [""],
                      description="The flow (source->target) to drill: the source plays the lost primary"),
        "records": Param(1000, type="integer", minimum=2, maximum=1_000_000,
                         description="Canary records produced at most (the failure comes at a random point)"),
        "consume_before_failure": Param(300, type="integer", minimum=1,
                                        description="Records the canary group consumes on the primary first"),
        "unreplicated_at_failure": Param(-1, type="integer", minimum=-1,
                                         description="-1: natural replication lag at the failure; N >= 0: "
                                                     "freeze the drill mirror for the last N records (RPO = N)"),
        "seed": Param(None, type=["null", "integer"], minimum=0,
                      description="Seed of the random failure moment (empty: random)"),
        "partitions": Param(3, type="integer", minimum=1, maximum=64, description="Partitions of the drill topic"),
        "rate": Param(200, type="number", exclusiveMinimum=0,
                      description="Canary records per second after the canary's first consumption"),
        "max_rpo_records": Param(100, type="integer", minimum=0, description="Objective: RPO in records"),
        "max_rto_seconds": Param(60, type="number", exclusiveMinimum=0, description="Objective: RTO in seconds"),
        "max_duplicates": Param(0, type="integer", minimum=0, description="Objective: duplicates seen by the canary"),
        "max_losses": Param(100, type="integer", minimum=0, description="Objective: records the canary never saw"),
        "cleanup": Param(True, type="boolean", description="Delete the drill's topics and groups afterwards"),
        "mode": Param("canary", type="string", enum=["canary", "failover"],
                      description="canary: the drill's own topic and mirror process (light); failover: the "
                                  "production flow's failover and failback workflow for a drill application"),
        "app": Param("", type="string",
                     description="failover mode: the drill application's alias in the active-cluster registry"),
        "topics": Param([], type="array", items={"type": "string"},
                        description="failover mode: the drill application's source topics (mirrored by the flow)"),
        "groups": Param([], type="array", items={"type": "string"},
                        description="failover mode: the drill application's consumer groups"),
        "drain_timeout_s": Param(300, type="integer", minimum=10, maximum=86400,
                                 description="failover mode: how long the failover and failback may drain"),
    },
)
def dr_drill() -> None:
    @task
    def plan() -> dict[str, Any]:
        """Validate the Params against the mirror config before any cluster is touched; skip a catch-up run."""
        from mirror_core.workflows.drill_plan import catch_up_reason, plan_drill

        run = get_current_context()["dag_run"]
        late = catch_up_reason(str(getattr(run.run_type, "value", run.run_type)), run.run_after, datetime.now(UTC))
        if late:
            raise AirflowSkipException(late)
        with failing_fast():
            return plan_drill(mirror_config(CONFIG_ERROR), get_current_context()["params"]).to_xcom()

    @task
    def drill(planned: dict[str, Any]) -> dict[str, Any]:
        """Run the drill (failover and failback) and record it, whatever its outcome."""
        from mirror_core.workflows.drill_plan import DrillPlan

        _mode("canary")
        from mirror_core.workflows.steps import drill_and_record

        with failing_fast():
            return drill_and_record(load_mirror_config(), config_path(), DrillPlan.from_xcom(planned),
                                    state_store(migrate=True), get_current_context()["run_id"]).to_xcom()

    @task
    def objectives(outcome: dict[str, Any]) -> dict[str, Any]:
        """Fail the run when an objective was missed (the drill is already recorded)."""
        from mirror_core.workflows.steps import check_objectives

        with failing_fast():
            return check_objectives(DrillOutcome.from_xcom(outcome)).to_xcom()

    # -- mode failover: the production flow's failover workflow, scoped to the drill application ------------
    @task
    def assess(planned: dict[str, Any]) -> dict[str, Any]:
        """Refuse an overlap with production; produce the known sequence; assess, record and bind the failover."""
        from mirror_core.workflows.drill_plan import DrillPlan
        from mirror_core.workflows.steps import open_drill_failover

        _mode("failover")
        context = get_current_context()
        with failing_fast():
            plan, data = open_drill_failover(load_mirror_config(), state_store(migrate=True),
                                             DrillPlan.from_xcom(planned), context["run_id"], run_started(context))
            context["ti"].xcom_push(key=DATA, value=data.to_xcom())
            return bind_plan(context, plan)

    approve = ApprovalGate(
        task_id="approve",
        subject="DR drill: fail {{ params.app }} over on {{ params.flow }} and back?",
        shows_plan=True,
        **GATE,
    )

    @task
    def execute() -> None:
        from mirror_core.workflows.steps import run_failover

        context = get_current_context()
        plan, answers = approved(context, APPROVED, "assess")
        approval = answers["approve"]
        with failing("drill failover failed"):
            run_failover(load_mirror_config(), state_store(), plan, approval.approver_id, context["run_id"],
                         float(context["params"]["drain_timeout_s"]), approval.answered_at, approval.approver_name)

    @task
    def verify() -> dict[str, Any]:
        from mirror_core.workflows.steps import verify_moved_groups

        plan, answers = approved(get_current_context(), APPROVED, "assess")
        store = state_store()
        with failing("drill verification failed"):
            return verify_moved_groups(load_mirror_config(), store, plan, executed(store, plan, answers["approve"]))

    @task
    def measure(planned: dict[str, Any]) -> dict[str, Any]:
        """The drill groups read the rest on the standby: RPO, RTO (from the trigger, from the approval), etc."""
        from mirror_core.workflows.drill_failover import DrillData
        from mirror_core.workflows.drill_failover import measure as measure_drill
        from mirror_core.workflows.drill_plan import DrillPlan

        context = get_current_context()
        _, answers = approved(context, APPROVED, "assess")
        data = DrillData.from_xcom(context["ti"].xcom_pull(task_ids="assess", key=DATA))
        with failing("drill measurement failed"):
            return measure_drill(load_mirror_config(), DrillPlan.from_xcom(planned), data, run_started(context),
                           answers["approve"].answered_at)

    @task
    def failback(planned: dict[str, Any]) -> dict[str, Any]:
        from mirror_core.workflows.drill_failover import DrillData
        from mirror_core.workflows.drill_plan import DrillPlan
        from mirror_core.workflows.steps import drill_failback

        context = get_current_context()
        _, answers = approved(context, APPROVED, "assess")
        approval = answers["approve"]
        data = DrillData.from_xcom(context["ti"].xcom_pull(task_ids="assess", key=DATA))
        with failing("drill failback failed"):
            return drill_failback(load_mirror_config(), state_store(), DrillPlan.from_xcom(planned), data,
                                  approval.approver_id, context["run_id"], approval.answered_at,
                                  approval.approver_name)

    @task(trigger_rule="all_done")
    def finish() -> dict[str, Any]:
        """Record the drill whatever happened (a rejection or a refusal too), then fail a run that did not pass."""
        from mirror_core.workflows.drill_plan import DrillPlan
        from mirror_core.workflows.steps import check_objectives, record_failover_drill

        _mode("failover")
        context = get_current_context()
        ti, store = context["ti"], state_store()
        planned = ti.xcom_pull(task_ids="plan")
        bound = store.bound_plan(ti.dag_id, ti.run_id)
        if planned is None or bound is None:  # the plan or the assessment failed (its log says why): no change
            raise AirflowFailException("the drill's assessment did not complete (see the log of the task that "
                                       "failed); nothing was changed")
        measured, back = ti.xcom_pull(task_ids="measure"), ti.xcom_pull(task_ids="failback")
        error = None if back is not None else "the drill stopped before its failback (see the failed or skipped task)"
        try:
            finalize_failover(context, "approve", ApprovalGate.REJECT)  # records a rejection or a refusal
        except Exception as exc:
            error = str(exc)
        with failing_fast():
            outcome = record_failover_drill(store, DrillPlan.from_xcom(planned), ti.run_id,
                                            run_started(context) or datetime.now(UTC), measured, back,
                                            bound.record_id, error)
            return check_objectives(outcome).to_xcom()

    planned = plan()
    objectives(drill(planned))
    assess(planned) >> approve >> execute() >> verify() >> measure(planned) >> failback(planned) >> finish()


dr_drill()
