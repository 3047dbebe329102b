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
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException
from mirror_airflow.dag_helpers import (
    ChoiceGate,
    finalize_failover,
    flows_for_params,
    responder,
    verify_and_record,
    workflow_inputs,
)
from mirror_airflow.sensors import ReplicationLagSensor

from mirror_core.airflow_support import load_mirror_config

FLOWS, CONFIG_ERROR = flows_for_params()
REPLAY = "Fail back; consumers replay the unreplicated records"
SKIP = "Fail back; consumers skip the unreplicated records (kept and listed)"
REJECT = "Reject"


@dag(
    dag_id="failback",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
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
        from mirror_core.workflows.control import WorkflowError
        from mirror_core.workflows.failover import flow_of, required_reverse

        params = get_current_context()["params"]
        config, _, _, _ = workflow_inputs(params, CONFIG_ERROR)
        try:
            return required_reverse(config, flow_of(config, params["flow"])).name
        except WorkflowError as exc:
            raise AirflowFailException(str(exc)) from None

    catch_up = ReplicationLagSensor(
        task_id="catch_up",
        flow="{{ ti.xcom_pull(task_ids='check') }}",
        max_lag="{{ params.max_reverse_lag }}",
        max_wait_s="{{ params.drain_timeout_s }}",
        poke_interval=2,
    )

    @task
    def assess() -> dict[str, Any]:
        from mirror_core.workflows.control import WorkflowError
        from mirror_core.workflows.failover import assess_failback, render_plan

        context = get_current_context()
        params = context["params"]
        config, apps, groups, store = workflow_inputs(params, CONFIG_ERROR)
        try:
            plan = assess_failback(config, params["flow"], apps, groups, store)
        except WorkflowError as exc:
            raise AirflowFailException(str(exc)) from None
        if plan["reverse_lag"] is None or plan["reverse_lag"] > int(params["max_reverse_lag"]):
            raise AirflowFailException(f"reverse flow {plan['reverse_flow']} lag {plan['reverse_lag']} is above "
                                       f"max_reverse_lag={params['max_reverse_lag']}; retry when it caught up")
        plan["record_id"] = store.start_failover("failback", plan["flow"], True, context["run_id"], plan)
        plan["body"] = render_plan(plan)
        print(plan["body"])
        return plan

    plan = assess()
    check() >> catch_up >> plan
    decide = ChoiceGate(
        task_id="decide",
        subject="Fail back {{ params.flow }}? Choose what happens to records only the old primary holds",
        body="{{ ti.xcom_pull(task_ids='assess')['body'] }}",
        options=[REPLAY, SKIP, REJECT],
        defaults=[REJECT],
    )

    @task
    def execute(plan: dict[str, Any]) -> dict[str, Any]:
        from mirror_core.state.store import StateStore
        from mirror_core.workflows.failover import execute_failback

        context = get_current_context()
        chosen, who = responder(context["ti"], "decide")
        if chosen not in (REPLAY, SKIP):
            raise AirflowSkipException(f"rejected by {who}")
        store = StateStore()
        try:
            steps = execute_failback(load_mirror_config(), store, plan, "replay" if chosen == REPLAY else "skip",
                                     who, context["run_id"], float(context["params"]["drain_timeout_s"]))
        except Exception as exc:
            store.finish_failover(plan["record_id"], "failed", who, error=str(exc))
            raise AirflowFailException(f"failback failed: {exc}") from exc
        print(steps)
        return {"who": who, "steps": steps}

    @task
    def verify(plan: dict[str, Any], result: dict[str, Any]) -> dict[str, Any]:
        return verify_and_record(plan, result, "primary")

    @task(trigger_rule="all_done")
    def finalize() -> None:
        finalize_failover(get_current_context()["ti"], "decide", REJECT, "failback")

    result = execute(plan)
    plan >> decide >> result
    verify(plan, result) >> finalize()


failback()
