"""The topic subset of a per-topic failover (workflows/scope.py): which topics switch, which groups may move."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from mirror_core.workflows.errors import WorkflowError
from mirror_core.workflows.scope import resolve, split_groups

FLOW_TOPICS = ["orders", "orders-eu", "audit", "payments"]


def test_names_and_patterns_split_the_flows_topics() -> None:
    assert resolve(["orders"], FLOW_TOPICS, "dc1->dc2") == (("orders",), ("audit", "orders-eu", "payments"))
    assert resolve(["orders.*", "audit"], FLOW_TOPICS, "dc1->dc2") == (
        ("audit", "orders", "orders-eu"), ("payments",))  # whole-name matches, as the flow's filters


@pytest.mark.parametrize(("wanted", "says"), [
    (["order"], "topics: 'order' matches no source topic of flow dc1->dc2 (audit, orders, orders-eu, payments)"),
    (["(orders"], "topics: '(orders' is not a topic name or pattern (missing ), unterminated subpattern"),
])
def test_an_unknown_topic_or_a_bad_pattern_is_one_line(wanted: list[str], says: str) -> None:
    with pytest.raises(WorkflowError) as refused:
        resolve(wanted, FLOW_TOPICS, "dc1->dc2")
    assert str(refused.value).startswith(says) and str(refused.value).endswith("nothing was changed")
    assert "\n" not in str(refused.value)


@dataclass
class Row:
    topic: str


def test_a_group_moves_only_with_all_of_its_topics() -> None:
    split_groups({"billing": [Row("orders"), Row("orders")], "idle": []}, ["orders"])  # moves; nothing to move
    with pytest.raises(WorkflowError) as refused:
        split_groups({"both": [Row("orders"), Row("audit")], "other": [Row("audit")]}, ["orders"])
    line = str(refused.value)
    assert "group both reads switching orders and staying audit" in line
    assert "group other reads none of the switching topics (audit)" in line
    assert "\n" not in line and line.endswith("nothing was changed")
