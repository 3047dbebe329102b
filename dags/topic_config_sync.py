"""topic_config_sync: keep remote topics in shape (partitions, configs, read-only ACLs).

Scheduled every 10 minutes; trigger it by hand with ``flow`` (one flow, or empty for all) and
``dry_run`` (report the differences, change nothing). Every run is recorded in the state store;
a remote topic with more partitions than its source fails the run loudly.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from airflow.sdk import Param, dag, get_current_context, task
from airflow.sdk.exceptions import AirflowFailException
from mirror_airflow.dag_helpers import flows_for_params

from mirror_core.airflow_support import load_mirror_config

FLOWS, CONFIG_ERROR = flows_for_params()  # the DAG parses even with a broken config


@dag(
    dag_id="topic_config_sync",
    schedule=timedelta(minutes=10),
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    tags=["mirror_core"],
    doc_md=__doc__,
    params={
        "flow": Param("", type="string", enum=["", *FLOWS],
                      description="One flow (source->target) or empty for every enabled flow"),
        "dry_run": Param(False, type="boolean", description="Report the differences; change nothing"),
    },
)
def topic_config_sync() -> None:
    @task
    def plan() -> list[str]:
        """Validate the Params against the mirror config before any cluster is touched."""
        if CONFIG_ERROR:
            raise AirflowFailException(f"mirror config invalid: {CONFIG_ERROR}")
        params = get_current_context()["params"]
        flow = params.get("flow") or ""
        config = load_mirror_config()
        names = [f.name for f in config.flows]
        if flow and flow not in names:
            raise AirflowFailException(f"Param 'flow': unknown flow {flow!r} (enabled flows: {', '.join(names)})")
        if not isinstance(params.get("dry_run"), bool):
            raise AirflowFailException(f"Param 'dry_run' must be true or false, got {params.get('dry_run')!r}")
        return [flow] if flow else names

    @task
    def sync(flow: str) -> dict[str, Any]:
        from mirror_core.state.store import StateStore
        from mirror_core.topic_sync import sync_flow

        context = get_current_context()
        config = load_mirror_config()
        store = StateStore()
        store.migrate()
        store.record_config(config)
        result = sync_flow(config, config.flow(flow), bool(context["params"]["dry_run"]), store,
                           run_id=context["run_id"])
        for change in result.changes:
            print(f"{'proposed' if result.dry_run else 'applied'}: {change.kind} {change.topic}: {change.detail}")
        if result.refused:
            raise AirflowFailException("drift refused: " + "; ".join(f"{c.topic}: {c.detail}" for c in result.refused))
        return result.as_dict()

    sync.expand(flow=plan())


topic_config_sync()
