"""Workflow plans, the Params validator and the DAGs' outcome decisions, without Airflow or clusters."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from mirror_core.config.loader import parse_text
from mirror_core.config.model import MirrorConfig
from mirror_core.workflows.errors import ParamError, WorkflowError
from mirror_core.workflows.params import (
    CutoverParams,
    FailoverParams,
    ReconciliationParams,
    TopicSyncParams,
    validate_params,
)
from mirror_core.workflows.plans import (
    CutoverPlan,
    DataLag,
    DrillOutcome,
    Execution,
    FailbackPlan,
    FailoverPlan,
    GroupOffset,
    PartitionLag,
    RegistryMove,
    SampleRecord,
    StrandedRange,
)
from mirror_core.workflows.steps import CutoverAnswers, check_objectives, close_cutover, close_failover


@pytest.fixture(scope="module")
def config() -> MirrorConfig:
    return parse_text("clusters = dc1, dc2\ndc1.bootstrap.servers = a:1\ndc2.bootstrap.servers = b:2\n"
                      "dc1->dc2.enabled = true\ndc2->dc1.enabled = false\n", validate_clients=False)


def rows(group: str, exact: bool = True) -> tuple[GroupOffset, ...]:
    return (GroupOffset(group, "orders", 0, "dc1.orders", 30, 30 if exact else None, exact,
                        "" if exact else "before the offset map"),
            GroupOffset(group, "orders", 1, "dc1.orders", 20, 20, True))


def failover_plan() -> FailoverPlan:
    return FailoverPlan("dc1->dc2", "dc1", "dc2", True, True, "1 broker(s)",
                        DataLag(3, (), (PartitionLag("orders", 0, 3, 27, 30),)), 3, "not yet replicated",
                        {"app-g": rows("app-g", exact=False)}, {"orders-app": RegistryMove(None, "dc2")}, "dc2->dc1",
                        ("group x: nothing to translate",)).with_record(7)


def failback_plan() -> FailbackPlan:
    stranded = StrandedRange("orders", 0, 50, 55, (SampleRecord(50, 1700000000000, "k50"), SampleRecord(54, 1, None)))
    return FailbackPlan("dc1->dc2", "dc2->dc1", "dc1", "dc2", 0, (stranded,), {"app-g": rows("app-g")},
                        {"orders-app": RegistryMove("dc2", "dc1")}, record_id=8)


def cutover_plan() -> CutoverPlan:
    return CutoverPlan("dc1->dc2", "dc1", "dc2", ("ledger",), {"ledger": "dc1.ledger"},
                       DataLag(0, (), (PartitionLag("ledger", 0, 0, 20, 20),)), {"ledger-g": rows("ledger-g")},
                       {"ledger": RegistryMove(None, "dc2")}, (), deny_writes=True, record_id=9)


@pytest.mark.parametrize("plan", [failover_plan(), failback_plan(), cutover_plan()], ids=lambda p: p.kind)
def test_plans_survive_xcom(plan: FailoverPlan | FailbackPlan | CutoverPlan) -> None:
    xcom = json.loads(json.dumps(plan.to_xcom()))  # what XCom stores: JSON
    assert type(plan).from_xcom(xcom) == plan
    assert xcom["kind"] == plan.kind and xcom["record_id"] == plan.record_id and xcom["body"] == plan.render()
    assert {k: v for k, v in xcom.items() if k not in ("record_id", "body")} == plan.record()


def test_xcom_keeps_the_dict_shape_approvers_and_the_state_store_know() -> None:
    xcom = failback_plan().to_xcom()
    assert xcom["unreplicated_total"] == 5
    assert xcom["unreplicated"] == [{"topic": "orders", "partition": 0, "first": 50, "end": 55, "count": 5,
                                     "records": [{"offset": 50, "timestamp": 1700000000000, "key": "k50"},
                                                 {"offset": 54, "timestamp": 1, "key": None}]}]
    assert xcom["apps"] == {"orders-app": {"from": "dc2", "to": "dc1"}}
    assert xcom["groups"]["app-g"][0] == {"group": "app-g", "topic": "orders", "partition": 0,
                                          "remote_topic": "dc1.orders", "source_offset": 30, "target_offset": 30,
                                          "exact": True, "note": "", "basis": "offset-map",
                                          "checkpoint_age_s": None, "max_rereads": None}
    assert cutover_plan().to_xcom()["deny_writes"] is True
    assert failover_plan().to_xcom()["lag"]["partitions"] == [
        {"topic": "orders", "partition": 0, "lag": 3, "position": 27, "end": 30}]


def test_stranded_range_cut_keeps_its_sample_consistent() -> None:
    cut = failback_plan().unreplicated[0].ending_at(52)
    assert (cut.first, cut.end, cut.count, [r.offset for r in cut.records]) == (50, 52, 2, [50])
    assert failback_plan().unreplicated[0].ending_at(10).count == 0


def test_approval_bodies() -> None:
    body = failover_plan().render()
    assert body.startswith("### Failover of flow `dc1->dc2` (planned)\n")
    assert "- estimated data at risk (RPO): **3 records** — not yet replicated" in body
    assert "| orders-app | (unregistered) | dc2 |" in body
    assert "| app-g | orders → dc1.orders | 0 | 30 | None | NOT exact (offset-map): before the offset map |" in body
    assert "| app-g | orders → dc1.orders | 1 | 20 | 20 | exact: the group's committed offset, through the offset " \
           "map |" in body and "re-read" not in body
    assert "**Warnings**\n- group x: nothing to translate" in body and body.endswith("Rejecting changes nothing.")
    # From checkpoints (primary lost): each offset says how old its checkpoint is and how much may be read again.
    unplanned = replace(failover_plan(), planned=False, groups={"app-g": (
        GroupOffset("app-g", "orders", 0, "dc1.orders", 30, 31, True, "", "checkpoint", 2.4, 12),
        GroupOffset("app-g", "orders", 1, "dc1.orders", 20, 20, True, "", "checkpoint", 0.5, 0))})
    body = unplanned.render()
    assert "| app-g | orders → dc1.orders | 0 | 30 | 31 | checkpoint (2.4 s old): at most 12 records re-read |" in body
    assert "| 1 | 20 | 20 | checkpoint (0.5 s old): at most 0 records re-read |" in body
    assert "reads again at most **12 records** in all" in body and "exact:" not in body
    assert FailoverPlan.from_xcom(json.loads(json.dumps(unplanned.to_xcom()))) == unplanned
    # Already failed over: the body says so instead of "becomes active" with a stopped flow's lag of 0.
    again = replace(failover_plan(), failed_over=("the forward flow dc1->dc2 is stopped (by dana)",))
    body = again.render()
    assert "**ALREADY FAILED OVER**: standby **dc2** is active now — the forward flow dc1->dc2 is stopped" in body
    assert "becomes active" not in body and "replication lag now" not in body and "RPO" not in body
    assert FailoverPlan.from_xcom(json.loads(json.dumps(again.to_xcom()))) == again and again.already_failed_over
    body = failback_plan().render()
    assert "**5**" in body and "  - `orders[0]` offsets 50..54 (5)" in body and "**Warnings**" not in body
    body = cutover_plan().render()
    assert "- topics: `ledger` → `dc1.ledger`" in body and "| ledger-g | orders | 1 | 20 | 20 |" in body
    assert body.endswith("Reject changes nothing.")


def test_params_are_typed_and_errors_name_the_param(config: MirrorConfig) -> None:
    p = validate_params(FailoverParams, {"flow": "dc1->dc2", "apps": "a, b", "groups": ["g"], "mode": "unplanned",
                                         "drain_timeout_s": 60}, config)
    assert (p.apps, p.groups, p.planned, p.drain_timeout_s) == (("a", "b"), ("g",), False, 60)
    assert validate_params(TopicSyncParams, {"flow": "", "dry_run": True}, config).flows(config) == ["dc1->dc2"]
    r = validate_params(ReconciliationParams, {"flow": "dc1->dc2", "start_offsets": {"t:0": 5}}, config)
    assert (r.flows(config), r.window, dict(r.start_offsets), dict(r.end_offsets)) == (
        ["dc1->dc2"], "since_last_success", {"t:0": 5}, {})
    cutover = {"source": "dc1", "target": "dc2", "topics": ["t"]}
    assert validate_params(CutoverParams, cutover, config).max_lag == 1000
    for spec, bad, message in (
            (FailoverParams, {"flow": "dc2->dc1"}, "Param 'flow': unknown flow 'dc2->dc1' (enabled flows: dc1->dc2)"),
            (FailoverParams, {"flow": "dc1->dc2", "groups": ["g", "g"]}, "Param 'groups' lists a name twice"),
            (FailoverParams, {"flow": "dc1->dc2", "apps": [""]}, "Param 'apps' must be a list of names"),
            (FailoverParams, {"flow": "dc1->dc2", "mode": "maybe"}, "Param 'mode' must be one of planned, unplanned"),
            (FailoverParams, {"flow": "dc1->dc2", "drain_timeout_s": True}, "Param 'drain_timeout_s' must be an int"),
            (CutoverParams, {**cutover, "source": "dc9"}, "Param 'source': unknown cluster 'dc9'"),
            (CutoverParams, {**cutover, "topics": []}, "Param 'topics' needs at least one name"),
            (CutoverParams, {**cutover, "deny_writes": "yes"}, "Param 'deny_writes' must be true or false"),
            (TopicSyncParams, {"flow": "dc1->dc2", "dry_run": None}, "Param 'dry_run' must be true or false"),
            (ReconciliationParams, {"window": "all"}, "Param 'window' must be one of since_last_success, all_retained"),
            (ReconciliationParams, {"end_offsets": {"t": 1}}, "Param 'end_offsets' must map 'topic:partition'"),
    ):
        with pytest.raises(ParamError) as err:
            validate_params(spec, bad, config)  # type: ignore[type-var]
        assert str(err.value).startswith(message), (str(err.value), message)


class Store:
    """The state-store calls the outcome decisions make."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def finish_failover(self, record_id: int, status: str, who: str | None = None, **details: Any) -> None:
        self.calls.append(("failover", record_id, status, who))

    def finish_cutover(self, record_id: int, status: str, **details: Any) -> None:
        self.calls.append(("cutover", record_id, status, details))

    def flow_controls(self) -> dict[str, Any]:
        return {}

    def active_cluster(self, alias: str) -> None:
        return None


def test_failover_outcome() -> None:
    store: Any = Store()
    with pytest.raises(WorkflowError, match="the assessment did not complete"):
        close_failover(store, None, False, "ann", False)
    with pytest.raises(WorkflowError, match=r"^rejected by ann: nothing changed$"):  # recorded, then the run fails
        close_failover(store, failover_plan(), True, "ann", False)
    assert store.calls == [("failover", 7, "rejected", "ann")]
    with pytest.raises(WorkflowError, match="the failback did not complete"):
        close_failover(store, failback_plan(), False, "ann", False)
    close_failover(store, failback_plan(), False, "ann", True)
    assert len(store.calls) == 1


def test_cutover_outcome(config: MirrorConfig, monkeypatch: pytest.MonkeyPatch) -> None:
    from mirror_core.workflows import cutover

    undone: list[str] = []
    monkeypatch.setattr(cutover, "allow_writes_again", lambda *a: undone.append("acls"))
    store: Any = Store()
    plan = cutover_plan()
    with pytest.raises(WorkflowError, match="preflight failed"):
        close_cutover(config, store, None, CutoverAnswers(None, None, None), {}, False, "bo", "r1")
    assert close_cutover(config, store, plan, CutoverAnswers(True, True, True), {}, True, "bo", "r1") == []
    with pytest.raises(WorkflowError, match="approved, but recording the cutover failed"):
        close_cutover(config, store, plan, CutoverAnswers(True, True, True), {}, False, "bo", "r1")
    assert store.calls == [] and undone == []
    for answers, status, line in ((CutoverAnswers(False, None, None), "rejected", "rejected by bo: nothing changed"),
                                  (CutoverAnswers(True, False, None), "rolled-back", "rolled back by bo: undone "),
                                  (CutoverAnswers(True, True, False), "rolled-back", "rolled back by bo: undone ")):
        with pytest.raises(WorkflowError) as declined:  # a decline fails the run, once undone and recorded
            close_cutover(config, store, plan, answers, {}, False, "bo", "r1")
        assert str(declined.value).startswith(line) and store.calls[-1][2] == status
    with pytest.raises(WorkflowError, match="a cutover step failed; rolled back"):
        close_cutover(config, store, plan, CutoverAnswers(True, True, None), {}, False, "bo", "r1")
    assert store.calls[-1][2] == "failed" and len(undone) == 4  # DENY WRITE removed every time


def test_drill_objectives() -> None:
    passed = DrillOutcome("passed", (), 3, 1.5, 0, 3)
    assert DrillOutcome.from_xcom(json.loads(json.dumps(passed.to_xcom()))) == passed
    assert check_objectives(passed) == passed
    with pytest.raises(WorkflowError, match="DR drill objectives missed: max_rpo_records: RPO 9"):
        check_objectives(DrillOutcome("failed", ("max_rpo_records: RPO 9 records > 2",), 9, 1.0, 0, 9))
    assert Execution.from_xcom(Execution("ann", {"drained": True}).to_xcom()) == Execution("ann", {"drained": True})


def test_a_drill_is_refused_when_the_reverse_flow_would_copy_its_remote_topic_back(tmp_path: Path) -> None:
    from mirror_core.config.loader import load_config
    from mirror_core.workflows.drill_plan import plan_drill
    from mirror_core.workflows.errors import ParamError

    lines = ["clusters = dc1, dc2", "dc1.bootstrap.servers = a:1", "dc2.bootstrap.servers = b:1",
             "dc1->dc2.enabled = true", "dc1->dc2.topics = .*",
             "dc1->dc2.topics.exclude = .*mirror-core\\\\.drill\\\\..*",
             "dc2->dc1.enabled = false", "dc2->dc1.topics = .*"]
    path = tmp_path / "mm2.properties"
    path.write_text("\n".join(lines) + "\n")
    params = {"flow": "dc1->dc2", "records": 40, "consume_before_failure": 12, "unreplicated_at_failure": 9,
              "seed": 7, "partitions": 3, "rate": 400, "max_rpo_records": 100, "max_rto_seconds": 60,
              "max_duplicates": 0, "max_losses": 100}
    with pytest.raises(ParamError) as err:
        plan_drill(load_config(path), params)
    assert "dc2->dc1" in str(err.value) and "drill-dc1.mirror-core.drill." in str(err.value)
    path.write_text("\n".join([*lines, "dc2->dc1.topics.exclude = .*mirror-core\\\\.drill\\\\..*"]) + "\n")
    assert plan_drill(load_config(path), params).flow == "dc1->dc2"


def test_a_late_scheduled_drill_is_a_catch_up_and_skipped() -> None:
    from datetime import UTC, datetime, timedelta

    from mirror_core.workflows.drill_plan import catch_up_reason

    slot = datetime(2026, 10, 1, 6, 0, tzinfo=UTC)
    assert catch_up_reason("scheduled", slot, slot + timedelta(minutes=5)) is None  # on time
    why = catch_up_reason("scheduled", slot, slot + timedelta(days=53))  # unpaused weeks later
    assert why is not None and "catch-up run skipped" in why and "trigger the DAG" in why
    assert catch_up_reason("manual", slot, slot + timedelta(days=53)) is None  # asked for: drills
