"""failback: return applications to the old primary after a failover — no rebuild of the primary.

Trigger by hand with ``flow`` (the original forward flow primary->standby), ``apps``, ``groups``.

check (the Params, before any cluster is touched) -> catch_up (``ReplicationLagSensor``: the reverse
flow's data lag down to ``max_reverse_lag``, within ``drain_timeout_s``) -> assess (records only the
old primary holds, translated offsets back; recorded) -> **decide** (replay those records to
consumers, skip them, or Reject = change nothing) -> execute (drain and stop the reverse flow; commit
translated offsets on the old primary; switch the registry back; restore the forward flow) -> verify
-> finalize.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from airflow.sdk import Param, dag, get_current_context, task
from airflow.sdk.exceptions import AirflowSkipException
from mirror_airflow.dag_helpers import (
    ChoiceGate,
    decided_at,
    failing,
    failing_fast,
    finalize_failover,
    flows_for_params,
    gate_settings,
    responder,
    run_params,
    run_started,
    state_store,
)
from mirror_airflow.notifiers import WebhookNotifier
from mirror_airflow.sensors import ReplicationLagSensor

from mirror_core.airflow_support import load_mirror_config
from mirror_core.workflows.params import FailbackParams
from mirror_core.workflows.plans import Execution, FailbackPlan

FLOWS, CONFIG_ERROR = flows_for_params()
GATE = gate_settings("failback")  # approvers, response timeout, notifier
REPLAY = "Fail back; consumers replay the unreplicated records"
SKIP = "Fail back; consumers skip the unreplicated records (kept and listed)"
REJECT = "Reject"
ACTIONS = {REPLAY: "replay", SKIP: "skip"}  # execute_failback's unreplicated_action for each choice


@dag(
    dag_id="failback",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    on_failure_callback=WebhookNotifier("failure"),
    tags=["mirror_core", "dr"],
    doc_md=__doc__,
    params={
        "flow": Param(FLOWS[0] if FLOWS else "", type="string", enum=FLOWS or [""],
                      description="The original forward flow (old primary -> standby)"),
        "apps": Param([], type="array", items={"type": "string"},
                      description="Application aliases to point back at the old primary"),
        "groups": Param([], type="array", items={"type": "string"},
                        description="Consumer groups to move back (stopped on the standby)"),
        "max_reverse_lag": Param(0, type="integer", minimum=0,
                                 description="Wait until the reverse flow's lag is at most this before asking"),
        "drain_timeout_s": Param(300, type="integer", minimum=10, maximum=86400),
    },
)
def failback() -> None:
    @task
    def check() -> str:
        """The Params, checked before any cluster is touched; the reverse flow to wait for."""
        from mirror_core.workflows.steps import failback_reverse_flow

        config, params = run_params(FailbackParams, CONFIG_ERROR)
        with failing_fast():
            return failback_reverse_flow(config, params)

    catch_up = ReplicationLagSensor(
        task_id="catch_up",
        flow="{{ ti.xcom_pull(task_ids='check') }}",
        max_lag="{{ params.max_reverse_lag }}",
        max_wait_s="{{ params.drain_timeout_s }}",
        poke_interval=2,
    )

    @task
    def assess() -> dict[str, Any]:
        from mirror_core.workflows.steps import open_failback

        config, params = run_params(FailbackParams, CONFIG_ERROR)
        with failing_fast():
            context = get_current_context()
            return open_failback(config, state_store(migrate=True), params, context["run_id"],
                        run_started(context)).to_xcom()

    plan = assess()
    check() >> catch_up >> plan
    decide = ChoiceGate(
        task_id="decide",
        subject="Fail back {{ params.flow }}? Choose what happens to records only the old primary holds",
        body="{{ ti.xcom_pull(task_ids='assess')['body'] }}",
        options=[REPLAY, SKIP, REJECT],
        defaults=[REJECT],
        **GATE,
    )

    @task
    def execute(plan: dict[str, Any]) -> dict[str, Any]:
        from mirror_core.workflows.steps import run_failback

        context = get_current_context()
        chosen, who = responder(context["ti"], "decide")
        action = ACTIONS.get(chosen or "")
        if action is None:
            raise AirflowSkipException(f"rejected by {who}")
        with failing("failback failed"):
            return run_failback(load_mirror_config(), state_store(), FailbackPlan.from_xcom(plan), action, who,
                                context["run_id"], float(context["params"]["drain_timeout_s"]),
                                decided_at(context["ti"], "decide")).to_xcom()

    @task
    def verify(plan: dict[str, Any], result: dict[str, Any]) -> dict[str, Any]:
        from mirror_core.workflows.steps import verify_moved_groups

        with failing("verification failed"):
            return verify_moved_groups(load_mirror_config(), state_store(), FailbackPlan.from_xcom(plan),
                                       Execution.from_xcom(result))

    @task(trigger_rule="all_done")
    def finalize() -> None:
        finalize_failover(get_current_context()["ti"], "decide", REJECT, FailbackPlan)

    result = execute(plan)
    plan >> decide >> result
    verify(plan, result) >> finalize()


failback()
