"""FlowConfig.replicated_topics: MM2's replication rule, each topic decided once (translate and checkpoint rounds
ask it for every (topic, partition) key of every group)."""

from __future__ import annotations

from mirror_core.config.loader import parse_text
from mirror_core.config.model import FlowConfig


def _flow() -> FlowConfig:
    config = parse_text("clusters = dc1, dc2\ndc1.bootstrap.servers = a:9092\ndc2.bootstrap.servers = b:9092\n"
                        "dc1->dc2.enabled = true\ndc1->dc2.topics = orders.*, payments\n"
                        "dc1->dc2.topics.exclude = orders\\.secret\n", validate_clients=False)
    return config.flows[0]


def test_the_same_answers_as_should_replicate() -> None:
    flow = _flow()
    takes = flow.replicated_topics()
    names = ["orders", "orders.eu", "orders.secret", "payments", "payments2", "heartbeats", "dc2.orders",
             "__consumer_offsets", "mirror-core.progress.dc1.internal", "dc1.checkpoints.internal"]
    assert [takes(n) for n in names * 2] == [flow.should_replicate(n) for n in names * 2]
    assert takes("orders.eu") and not takes("orders.secret") and not takes("dc2.orders")


def test_each_topic_is_decided_once(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    flow = _flow()
    asked: list[str] = []
    real = FlowConfig.should_replicate
    monkeypatch.setattr(FlowConfig, "should_replicate", lambda self, t: asked.append(t) or real(self, t))
    takes = flow.replicated_topics()
    for _ in range(1000):
        takes("orders.eu")
        takes("orders.secret")
    assert asked == ["orders.eu", "orders.secret"]
