"""schema_sync: the source registry's subjects, versions and compatibility levels onto the target's.

Scheduled hourly for the flows whose clusters both have a schema registry (``<alias>.schema.registry.url``);
trigger it by hand with ``flow`` (one flow, or empty for all of those) and ``dry_run`` (report the differences,
change nothing). Every run is recorded in the state store (a sync run and its drift events, beside the
topic-config sync's); a subject whose versions differ on the target refuses the whole flow's sync in one line,
nothing changed. Flows with ``schema.ids = translate`` take a newly synced schema without a restart.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from airflow.sdk import Param, dag, get_current_context, task
from mirror_airflow.dag_helpers import RETRY_SAFE, failing_fast, flows_for_params, run_params, state_store
from mirror_airflow.notifiers import WebhookNotifier

from mirror_core.airflow_support import load_mirror_config
from mirror_core.workflows.params import SchemaSyncParams

FLOWS, CONFIG_ERROR = flows_for_params()  # the DAG parses even with a broken config


@dag(
    dag_id="schema_sync",
    schedule=timedelta(hours=1),
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    on_failure_callback=WebhookNotifier("failure"),
    default_args=RETRY_SAFE,
    tags=["mirror_core", "migration"],
    doc_md=__doc__,
    params={
        "flow": Param("", type="string", enum=["", *FLOWS],
                      description="One flow (source->target) or empty for every flow with two registries"),
        "dry_run": Param(False, type="boolean", description="Report the differences; change nothing"),
    },
)
def schema_sync() -> None:
    @task
    def plan() -> list[str]:
        """Validate the Params against the mirror config before any registry is asked."""
        config, params = run_params(SchemaSyncParams, CONFIG_ERROR)
        return params.flows(config)

    @task
    def sync(flow: str) -> dict[str, Any]:
        from mirror_core.workflows.steps import sync_schemas

        context = get_current_context()
        with failing_fast():
            return sync_schemas(load_mirror_config(), state_store(migrate=True), flow,
                                bool(context["params"]["dry_run"]), context["run_id"])

    sync.expand(flow=plan())


schema_sync()
