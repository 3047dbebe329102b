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
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from airflow.sdk import Param, dag, get_current_context, task
from airflow.sdk.exceptions import AirflowSkipException
from mirror_airflow.dag_helpers import failing_fast, flows_for_params, mirror_config, state_store
from mirror_airflow.notifiers import WebhookNotifier

from mirror_core.airflow_support import config_path, load_mirror_config
from mirror_core.workflows.plans import DrillOutcome

FLOWS, CONFIG_ERROR = flows_for_params()  # the DAG parses even with a broken config


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

    objectives(drill(plan()))


dr_drill()
