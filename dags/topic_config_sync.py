"""topic_config_sync: keep remote topics in shape (partitions, configs, read-only ACLs).

Scheduled every 10 minutes; trigger it by hand with ``flow`` (one flow, or empty for all) and
``dry_run`` (report the differences, change nothing). Every run is recorded in the state store;
a remote topic with more partitions than its source fails the run loudly.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from airflow.sdk import Param, dag, get_current_context, task
from mirror_airflow.dag_helpers import RETRY_SAFE, failing_fast, flows_for_params, run_params, state_store
from mirror_airflow.notifiers import WebhookNotifier

from mirror_core.airflow_support import load_mirror_config
from mirror_core.workflows.params import TopicSyncParams

FLOWS, CONFIG_ERROR = flows_for_params()  # the DAG parses even with a broken config


@dag(
    dag_id="topic_config_sync",
    schedule=timedelta(minutes=10),
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    on_failure_callback=WebhookNotifier("failure"),
    default_args=RETRY_SAFE,  # transient errors only: see RETRY_SAFE
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
        config, params = run_params(TopicSyncParams, CONFIG_ERROR)
        return params.flows(config)

    @task
    def sync(flow: str) -> dict[str, Any]:
        from mirror_core.workflows.steps import sync_topics

        context = get_current_context()
        with failing_fast():
            return sync_topics(load_mirror_config(), state_store(migrate=True), flow,
                               bool(context["params"]["dry_run"]), context["run_id"])

    sync.expand(flow=plan())


topic_config_sync()
