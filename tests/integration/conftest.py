import re

import pytest

pytestmark = pytest.mark.integration

#: both data paths, for the tests of delivery, failover, authorization and topologies (issue 61 item 7): librdkafka
#: record by record, and the wire client's copying the source's batches whole (auto, the default, where it can)
DATA_PATHS = pytest.mark.parametrize("path", ["records", "batches"])


def data_path(path: str) -> str:
    """The config line that pins a flow's data path (a test then asserts :func:`ran_on` it)."""
    return f"replication.data.path = {path}"


def ran_on(log: str, path: str, flow: str = "dc1->dc2") -> bool:
    """The mirror's log says ``flow`` started copying on data path ``path`` (its start line)."""
    return re.search(rf"flow {re.escape(flow)}: replicating \(.*, data path: {path} \(", log) is not None


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
