"""checkpoint_reconciliation: verify with Spark that a flow's target is complete and its checkpoints right.

Hourly, per flow: snapshot the offset map and every group's offsets → ``spark_jobs/reconcile_checkpoints.py``
via SparkSubmitOperator (connection ``spark_default``; ``local[*]`` unless configured otherwise) → load
the report into the state store (shown on the status page). The run fails, with every discrepancy in
the log, when source records are missing or mismatched on the target, unexpected records are there,
or a checkpoint / target group offset is wrong.

Trigger by hand with ``flow`` (empty: every flow), ``window`` (``since_last_success`` or
``all_retained``), optional explicit ``start_offsets`` / ``end_offsets`` (``{"topic:partition": offset}``,
source offsets) and ``commit_corrections`` (commit the translated offsets to target groups found wrong
that have no active members).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import Param, dag, get_current_context, task
from mirror_airflow.dag_helpers import RETRY_SAFE, failing_fast, flows_for_params, run_params, state_store
from mirror_airflow.notifiers import WebhookNotifier

from mirror_core.airflow_support import load_mirror_config
from mirror_core.reconciliation import JOB, WINDOWS
from mirror_core.workflows.params import ReconciliationParams

FLOWS, CONFIG_ERROR = flows_for_params()  # the DAG parses even with a broken config

SPARK_CONF = {"spark.sql.shuffle.partitions": "8", "spark.ui.enabled": "false"}


@dag(
    dag_id="checkpoint_reconciliation",
    schedule=timedelta(hours=1),
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    on_failure_callback=WebhookNotifier("failure"),
    default_args=RETRY_SAFE,  # transient errors only: see RETRY_SAFE
    tags=["mirror_core", "spark"],
    doc_md=__doc__,
    params={
        "flow": Param("", type="string", enum=["", *FLOWS],
                      description="One flow (source->target) or empty for every enabled flow"),
        "window": Param("since_last_success", type="string", enum=list(WINDOWS),
                        description="Source offsets to verify per partition: since the last successful "
                                    "reconciliation, or everything still retained"),
        "start_offsets": Param({}, type="object",
                               description='Explicit window starts, {"topic:partition": source offset}'),
        "end_offsets": Param({}, type="object",
                             description='Explicit window ends (exclusive), {"topic:partition": source offset}'),
        "commit_corrections": Param(False, type="boolean",
                                    description="Commit translated offsets to wrong target groups without "
                                                "active members"),
    },
)
def checkpoint_reconciliation() -> None:
    @task
    def plan() -> list[str]:
        """Validate the Params against the mirror config before any cluster is touched."""
        config, params = run_params(ReconciliationParams, CONFIG_ERROR)
        return params.flows(config)

    @task
    def spark_jars() -> str:
        """Spark's Kafka source jars (cached by ``make install``; fetched here if missing)."""
        from mirror_core.devcluster.spark_packages import jars_argument

        return jars_argument()

    @task
    def snapshot(flow: str) -> list[str]:
        """Snapshot group offsets, checkpoints and the offset map just before the job; write its plan."""
        from mirror_core.reconciliation import snapshot, work_dir

        config, params = run_params(ReconciliationParams, CONFIG_ERROR)
        return snapshot(config, state_store(migrate=True), config.flow(flow), params.window, params.start_offsets,
                        params.end_offsets, work_dir(get_current_context()["run_id"], flow))

    @task
    def load(args: list[str]) -> dict[str, Any]:
        """Record the report; fail the run on any discrepancy (after optional corrections)."""
        from mirror_core.reconciliation import Discrepancies, load_report

        context = get_current_context()
        with failing_fast(Discrepancies):
            return load_report(load_mirror_config(), state_store(migrate=True), args, context["run_id"],
                               bool(context["params"].get("commit_corrections")))

    @task(trigger_rule="all_done")
    def cleanup(args: list[str]) -> None:
        """The plan holds client credentials: remove it whatever happened to the job (a leaf next to
        ``load``, so a failed load still fails the run)."""
        from mirror_core.reconciliation import remove_plan

        remove_plan(args)

    args = snapshot.expand(flow=plan())
    reconcile = SparkSubmitOperator.partial(
        task_id="reconcile", conn_id="spark_default", application=str(JOB), name="mirror-core-reconcile",
        jars=spark_jars(), conf=SPARK_CONF,
    ).expand(application_args=args)
    reconcile >> load.expand(args=args)
    reconcile >> cleanup.expand(args=args)


checkpoint_reconciliation()
