"""failback: return applications to the old primary after a failover — no rebuild of the primary.

Trigger by hand with ``flow`` (the original forward flow primary->standby), ``apps``, ``groups`` and, after a
failover of some topics, ``topics`` (their failover's pauses are cleared; the reverse flow keeps running while
other topics are still switched).

check (the Params, before any cluster is touched) -> catch_up (``ReplicationLagSensor``: the reverse
flow's data lag down to ``max_reverse_lag``, within ``drain_timeout_s``) -> assess (records only the
old primary holds, translated offsets back; recorded and bound to the run with its digest) -> **decide**
(replay those records to consumers, skip them, or Reject = change nothing; not by whoever triggered the run)
-> execute (drain and stop the reverse flow; commit translated offsets on the old primary; switch the
registry back; restore the forward flow) -> verify -> finalize.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from airflow.sdk import Param, dag, get_current_context, task
from mirror_airflow.dag_helpers import (
    ChoiceGate,
    approved,
    bind_plan,
    executed,
    failing,
    failing_fast,
    finalize_failover,
    flows_for_params,
    gate_settings,
    run_params,
    run_started,
    state_store,
)
from mirror_airflow.notifiers import WebhookNotifier
from mirror_airflow.sensors import ReplicationLagSensor

from mirror_core.airflow_support import load_mirror_config
from mirror_core.workflows.params import FailbackParams

FLOWS, CONFIG_ERROR = flows_for_params()
GATE = gate_settings("failback")  # approvers, response timeout, notifier
REPLAY = "Fail back; consumers replay the unreplicated records"
SKIP = "Fail back; consumers skip the unreplicated records (kept and listed)"
REJECT = "Reject"
ACTIONS = {REPLAY: "replay", SKIP: "skip"}  # execute_failback's unreplicated_action for each choice
DECIDED = {"decide": (REPLAY, SKIP)}  # the gate the steps after it need, and the answers that go on


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
        "topics": Param([], type="array", items={"type": "string"},
                        description="Only these source topics (names or patterns) "
                                    "come back (as a failover of some topics switched them); empty: the whole flow"),
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
            plan = open_failback(config, state_store(migrate=True), params, context["run_id"], run_started(context))
            return bind_plan(context, plan)

    plan = assess()
    check() >> catch_up >> plan
    decide = ChoiceGate(
        task_id="decide",
        subject="Fail back {{ params.flow }}? Choose what happens to records only the old primary holds",
        shows_plan=True,  # from the state store, with its digest
        options=[REPLAY, SKIP, REJECT],
        accepting=[REPLAY, SKIP],
        defaults=[REJECT],
        **GATE,
    )

    @task
    def execute() -> None:
        from mirror_core.workflows.steps import run_failback

        context = get_current_context()
        plan, answers = approved(context, DECIDED, "assess")
        decision = answers["decide"]
        with failing("failback failed"):
            run_failback(load_mirror_config(), state_store(), plan, ACTIONS[decision.chosen], decision.approver_id,
                         context["run_id"], float(context["params"]["drain_timeout_s"]), decision.answered_at,
                         decision.approver_name)

    @task
    def verify() -> dict[str, Any]:
        from mirror_core.workflows.steps import verify_moved_groups

        plan, answers = approved(get_current_context(), DECIDED, "assess")
        store = state_store()
        with failing("verification failed"):
            return verify_moved_groups(load_mirror_config(), store, plan, executed(store, plan, answers["decide"]))

    @task(trigger_rule="all_done")
    def finalize() -> None:
        finalize_failover(get_current_context(), "decide", REJECT)

    plan >> decide >> execute() >> verify() >> finalize()


failback()
