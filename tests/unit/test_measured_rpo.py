"""The RPO a failover measures at the switch: the forward flow's data lag once it stopped (records on the
primary not on the standby), or None and why — never the estimate made at approval."""

from __future__ import annotations

from typing import Any

import pytest

from mirror_core.config.loader import parse_text
from mirror_core.status import FlowStatus, PartitionStatus
from mirror_core.workflows import failover


def status(*lags: int | None, reachable: bool = True) -> FlowStatus:
    parts = [PartitionStatus("dc1->dc2", "orders", p, "dc1.orders", 0, 100, None if lag is None else 100 - lag, lag,
                             None if lag is None else 100 - lag) for p, lag in enumerate(lags)]
    return FlowStatus("dc1->dc2", reachable, None if reachable else "down", parts)


def test_measured_loss(monkeypatch: pytest.MonkeyPatch) -> None:
    config = parse_text("clusters = dc1, dc2\ndc1.bootstrap.servers = a:1\ndc2.bootstrap.servers = b:2\n"
                        "dc1->dc2.enabled = true\nemit.heartbeats.enabled = false\n", validate_clients=False)
    flow = config.flow("dc1->dc2")
    seen: list[Any] = []

    def measured(s: FlowStatus) -> Any:
        monkeypatch.setattr(failover, "flow_status", lambda c, f: seen.append(f.name) or s)
        return failover.measured_loss(config, flow, True)

    assert measured(status(3, 4)) == {"records": 7, "note": "records on the primary not on the standby when the "
                                                            "forward flow stopped"}
    assert seen == ["dc1->dc2"]  # read after the stop, from the clusters, not from the plan
    assert measured(status(3, None))["records"] is None
    assert measured(status(reachable=False))["records"] is None

    def down(c: Any, f: Any) -> FlowStatus:
        raise RuntimeError("broker gone\nsecond line")

    monkeypatch.setattr(failover, "flow_status", down)
    assert failover.measured_loss(config, flow, True) == {"records": None,
                                                          "note": "not measured: broker gone second line"}
    gone = failover.measured_loss(config, flow, False)
    assert gone["records"] is None and gone["note"].startswith("primary unreachable at the switch")


def test_the_failback_counts_what_the_unplanned_failover_could_not(tmp_path: Any) -> None:
    from mirror_core.state.store import StateStore
    from mirror_core.workflows.steps import count_loss_of_last_failover
    from tests.unit.test_workflow_plans import failback_plan

    store = StateStore(f"sqlite:///{tmp_path / 'state.db'}")
    store.migrate()
    plan = failback_plan()  # 5 records only the old primary holds
    assert count_loss_of_last_failover(store, plan, "manual__fb") is None  # no failover before it
    unplanned = store.start_failover("failover", plan.flow, False, "manual__fo", {"rpo_records": None})
    store.finish_failover(unplanned, "done", "dana", rpo_measured=None,
                          rpo_measured_note="primary unreachable at the switch: ...")
    assert count_loss_of_last_failover(store, plan, "manual__fb") == unplanned
    record = next(f for f in store.failovers() if f.id == unplanned)
    assert record.rpo_measured == plan.unreplicated_total == 5
    assert record.details["rpo_measured_note"] == "records only the old primary held, counted by the failback run " \
                                                  "manual__fb"
    assert count_loss_of_last_failover(store, plan, "manual__fb2") is None  # measured: never overwritten
