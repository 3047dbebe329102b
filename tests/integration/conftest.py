import pytest

pytestmark = pytest.mark.integration


def flow_lines(name: str, *extra: str, flow: str = "dc1->dc2") -> list[str]:
    """Config lines for one test's flow: its own topics, its own worker group, fast refresh."""
    return [
        f"{flow}.enabled = true",
        f"{flow}.topics = {name}.*",
        f"{flow}.consumer.group.id = {name}-workers-{flow.replace('->', '-')}",
        "refresh.topics.interval.seconds = 2",
        "sync.topic.configs.interval.seconds = 2",
        "offset.flush.interval.ms = 200",
        "emit.heartbeats.enabled = false",
        *extra,
    ]
