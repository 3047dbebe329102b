"""What was approved is what runs: a plan bound to its run with its digest, the gates' answers, and the
checks every step after a gate makes (mirror_core.workflows.binding), on SQLite and PostgreSQL."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import update

from mirror_core.state.errors import StateStoreError
from mirror_core.state.models import BoundPlan, plan_digest
from mirror_core.state.store import StateStore
from mirror_core.workflows.binding import NotApproved, approved_plan, bind, gate_footer, self_approval
from mirror_core.workflows.errors import WorkflowError
from mirror_core.workflows.plans import FailoverPlan
from tests.state.test_store import postgres_url  # noqa: F401 - a fixture: one PostgreSQL server per session
from tests.unit.test_workflow_plans import failover_plan

APPROVE = {"approve": ("Approve",)}


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> StateStore:
    url = f"sqlite:///{tmp_path / 'state.db'}" if request.param == "sqlite" else request.getfixturevalue(
        "postgres_url")
    s = StateStore(url)
    s.migrate()
    return s
AT = datetime(2030, 1, 1, 12, 0, 5, tzinfo=UTC)


def test_digest_is_of_the_canonical_json() -> None:
    assert plan_digest({"b": 1, "a": [1, 2]}) == plan_digest({"a": (1, 2), "b": 1})  # order, tuples: same JSON
    assert plan_digest({"planned": True}) != plan_digest({"planned": False})
    assert len(plan_digest({})) == 64


def bound_run(store: StateStore, triggered_by: str | None = "dana") -> tuple[str, FailoverPlan, dict[str, Any]]:
    """A recorded failover plan bound to a new run: (run id, plan, the XCom its assessment hands over)."""
    run_id = f"manual__{uuid.uuid4().hex}"
    plan = failover_plan()
    plan = plan.with_record(store.start_failover("failover", plan.flow, plan.planned, run_id, plan.record()))
    bound = bind(store, "failover", run_id, plan, triggered_by)
    return run_id, plan, {**plan.to_xcom(), "digest": bound.digest}


def answer(store: StateStore, run_id: str, who: str | None, chosen: str = "Approve",
           refused: str | None = None) -> dict[str, Any]:
    """The gate asked with the bound digest, then answered; the decision XCom the gate pushes."""
    bound = store.bound_plan("failover", run_id)
    assert bound is not None
    store.ask_gate("failover", run_id, "approve", bound.digest)
    store.answer_gate("failover", run_id, "approve", chosen, who, who and who.title(), AT, refused)
    return {"chosen": chosen, "who": who, "who_id": who, "who_name": who and who.title()}


def test_plan_bound_once_and_read_back(store: StateStore) -> None:
    run_id, plan, handed = bound_run(store)
    bound = store.bound_plan("failover", run_id)
    assert bound is not None and bound.intact and bound.digest == handed["digest"] == plan_digest(plan.record())
    assert (bound.kind, bound.record_id, bound.triggered_by, bound.plan) == ("failover", plan.record_id, "dana",
                                                                             plan.record())
    with pytest.raises(StateStoreError, match=f"failover run {run_id} has a plan bound already"):
        bind(store, "failover", run_id, plan, "dana")
    assert store.bound_plan("failover", "manual__other") is None
    decision = answer(store, run_id, "erin")
    got, answers = approved_plan(store, "failover", run_id, APPROVE, handed, {"approve": decision}, False)
    assert got == plan  # from the store, not from the XCom
    gate = answers["approve"]
    assert (gate.approver_id, gate.approver_name, gate.approver, gate.answered_at, gate.digest) == (
        "erin", "Erin", "erin (Erin)", AT, bound.digest)
    with pytest.raises(StateStoreError, match="was answered already \\(by erin\\)"):
        store.answer_gate("failover", run_id, "approve", "Approve", "mallory", None, AT)


def test_an_edited_xcom_or_row_is_refused_and_recorded(store: StateStore) -> None:
    run_id, plan, handed = bound_run(store)
    decision = answer(store, run_id, "erin")
    for edit in ({"planned": False}, {"groups": {}}, {"record_id": handed["record_id"] + 1}, {"digest": "0" * 64}):
        with pytest.raises(WorkflowError) as err:
            approved_plan(store, "failover", run_id, APPROVE, {**handed, **edit}, {"approve": decision}, False)
        assert "is not the approved plan" in str(err.value) and "nothing was changed" in str(err.value)
        assert "\n" not in str(err.value)
    record = next(f for f in store.failovers(limit=1000) if f.id == plan.record_id)
    assert record.status == "refused" and "an XCom was edited after assessment" in record.details["error"]
    with pytest.raises(WorkflowError, match=r"^the decision of gate approve handed over by XCom \(mallory: "
                                            r"Approve\) is not the one recorded in the state store \(erin: Approve\)"):
        approved_plan(store, "failover", run_id, APPROVE, handed, {"approve": {**decision, "who_id": "mallory"}},
                      False)
    with pytest.raises(WorkflowError, match="no plan is bound to failover run manual__none"):
        approved_plan(store, "failover", "manual__none", APPROVE, handed, {}, False)
    # The state-store row itself edited: it no longer hashes to its digest.
    with store.session() as s:
        row = s.query(BoundPlan).filter_by(run_id=run_id).one()
        s.execute(update(BoundPlan).where(BoundPlan.id == row.id).values(plan={**row.plan, "planned": False}))
    with pytest.raises(WorkflowError, match="no longer hashes to its digest"):
        approved_plan(store, "failover", run_id, APPROVE, handed, {"approve": decision}, False)


def test_four_eyes(store: StateStore) -> None:
    run_id, _, handed = bound_run(store, triggered_by="dana")
    line = self_approval("failover", "dana", "dana", allowed=False)
    assert line is not None and line.startswith("self-approval refused: dana triggered this failover run")
    assert "MIRROR_CORE_ALLOW_SELF_APPROVAL_FAILOVER=true" in line and "\n" not in line
    assert self_approval("failover", "dana", "dana", allowed=True) is None
    assert self_approval("failover", "dana", "erin", allowed=False) is None
    decision = answer(store, run_id, "dana", refused=line)
    with pytest.raises(WorkflowError) as err:
        approved_plan(store, "failover", run_id, APPROVE, handed, {"approve": decision}, False)
    assert str(err.value) == line
    # Not refused at the gate (e.g. the setting was true then, false now): the step still refuses.
    run_id, _, handed = bound_run(store, triggered_by="dana")
    decision = answer(store, run_id, "dana")
    with pytest.raises(WorkflowError, match=r"^self-approval refused: dana"):
        approved_plan(store, "failover", run_id, APPROVE, handed, {"approve": decision}, False)
    assert approved_plan(store, "failover", run_id, APPROVE, handed, {"approve": decision}, True)[1]["approve"]
    bound = store.bound_plan("failover", run_id)
    assert bound is not None
    assert "four eyes: **dana** cannot approve this run" in gate_footer(bound, False)
    assert f"`sha256:{bound.digest}`" in gate_footer(bound, False)
    assert "self-approval allowed by the deployment" in gate_footer(bound, True)


def test_a_rejection_is_not_an_approval(store: StateStore) -> None:
    run_id, _, handed = bound_run(store)
    decision = answer(store, run_id, None, chosen="Reject")  # the gate timed out: its default
    with pytest.raises(NotApproved, match=r"^Reject at approve by nobody$"):
        approved_plan(store, "failover", run_id, APPROVE, handed, {"approve": decision}, False)
    run_id, _, handed = bound_run(store)
    with pytest.raises(WorkflowError, match=r"gate approve of failover run .* has no answer in the state store"):
        approved_plan(store, "failover", run_id, APPROVE, handed, {}, False)
