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

import json
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import Param, dag, get_current_context, task
from airflow.sdk.exceptions import AirflowFailException
from mirror_airflow.dag_helpers import flows_for_params

from mirror_core.airflow_support import load_mirror_config
from mirror_core.reconciliation import JOB, WINDOWS

FLOWS, CONFIG_ERROR = flows_for_params()  # the DAG parses even with a broken config

SPARK_CONF = {"spark.sql.shuffle.partitions": "8", "spark.ui.enabled": "false"}


def _work_dir(run_id: str, flow: str) -> Path:
    import os
    import re

    base = Path(os.environ.get("MIRROR_CORE_RECONCILE_DIR", Path(os.environ.get("AIRFLOW_HOME", ".")) /
                                "mirror-core-reconcile"))
    return base / re.sub(r"[^\w.-]+", "_", f"{run_id}-{flow}")


def _offsets_param(value: Any, name: str) -> dict[str, int]:
    if not isinstance(value, dict) or not all(
            isinstance(k, str) and ":" in k and k.rsplit(":", 1)[1].isdigit() and isinstance(v, int) and v >= 0
            for k, v in value.items()):
        raise AirflowFailException(f"Param {name!r} must map 'topic:partition' to a source offset, got {value!r}")
    return value


@dag(
    dag_id="checkpoint_reconciliation",
    schedule=timedelta(hours=1),
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
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
        if CONFIG_ERROR:
            raise AirflowFailException(f"mirror config invalid: {CONFIG_ERROR}")
        params = get_current_context()["params"]
        names = [f.name for f in load_mirror_config().flows]
        flow = params.get("flow") or ""
        if flow and flow not in names:
            raise AirflowFailException(f"Param 'flow': unknown flow {flow!r} (enabled flows: {', '.join(names)})")
        if params.get("window") not in WINDOWS:
            raise AirflowFailException(f"Param 'window' must be one of {WINDOWS}, got {params.get('window')!r}")
        _offsets_param(params.get("start_offsets", {}), "start_offsets")
        _offsets_param(params.get("end_offsets", {}), "end_offsets")
        return [flow] if flow else names

    @task
    def spark_jars() -> str:
        """Spark's Kafka source jars (cached by ``make install``; fetched here if missing)."""
        from mirror_core.devcluster.spark_packages import jars_argument

        return jars_argument()

    @task
    def snapshot(flow: str) -> list[str]:
        """Snapshot group offsets, checkpoints and the offset map just before the job; write its plan."""
        from mirror_core.reconciliation import build_plan, write_plan
        from mirror_core.state.store import StateStore

        context = get_current_context()
        params = context["params"]
        config = load_mirror_config()
        store = StateStore()
        store.migrate()
        store.record_config(config)
        work = _work_dir(context["run_id"], flow)
        p = build_plan(config, config.flow(flow), store, params["window"],
                       _offsets_param(params.get("start_offsets", {}), "start_offsets"),
                       _offsets_param(params.get("end_offsets", {}), "end_offsets"))
        for note in p["notes"]:
            print(f"note: {note}")
        print(f"{flow}: {len(p['partitions'])} partitions, "
              f"{sum(x['end'] - x['start'] for x in p['partitions'])} source offsets, {len(p['groups'])} group "
              "offsets to verify")
        write_plan(p, work / "plan.json")
        return ["--plan", str(work / "plan.json"), "--report", str(work / "report.json")]

    @task
    def load(args: list[str]) -> dict[str, Any]:
        """Record the report; fail the run on any discrepancy (after optional corrections)."""
        from mirror_core.reconciliation import commit_corrections, record_report, report_failures
        from mirror_core.state.store import StateStore

        context = get_current_context()
        report_path = Path(args[args.index("--report") + 1])
        report = json.loads(report_path.read_text())
        flow = report["summary"]["flow"]
        if context["params"].get("commit_corrections"):
            config = load_mirror_config()
            report["summary"]["corrections"] = commit_corrections(config, config.flow(flow), report)
            for c in report["summary"]["corrections"]:
                print(f"correction: {c}")
        store = StateStore()
        store.migrate()
        row = record_report(store, report, context["run_id"])
        s = report["summary"]
        print(f"{flow}: {s['status']}: {s['checked']} records checked in {s['seconds']} s, "
              f"{s['missing_count']} missing, {s['mismatched_count']} mismatched, {s['extra_count']} extra, "
              f"{s['groups_wrong']}/{s['groups_checked']} group offsets wrong (report {row.id})")
        for g in report.get("groups", []):
            for note in g["notes"]:
                print(f"group {g['group']} {g['topic']}[{g['partition']}]: {note}")
        failures = report_failures(report)
        for line in failures:
            print(f"DISCREPANCY {line}")
        if failures:
            raise AirflowFailException(f"{flow}: {len(failures)} discrepancies: " + "; ".join(failures[:10]))
        return s

    @task(trigger_rule="all_done")
    def cleanup(args: list[str]) -> None:
        """The plan holds client credentials: remove it whatever happened to the job (a leaf next to
        ``load``, so a failed load still fails the run)."""
        Path(args[args.index("--plan") + 1]).unlink(missing_ok=True)

    args = snapshot.expand(flow=plan())
    reconcile = SparkSubmitOperator.partial(
        task_id="reconcile", conn_id="spark_default", application=str(JOB), name="mirror-core-reconcile",
        jars=spark_jars(), conf=SPARK_CONF,
    ).expand(application_args=args)
    reconcile >> load.expand(args=args)
    reconcile >> cleanup.expand(args=args)


checkpoint_reconciliation()
