"""A source broker killed while the flow asks for topic IDs: the unanswered request becomes one line naming
the cluster and the topic (ClusterUnavailable, so the flow restarts quietly), not a traceback of a bare
``TimeoutError`` from the future."""
from __future__ import annotations

from concurrent.futures import Future
from unittest.mock import MagicMock

import pytest

from mirror_core.errors import ClusterUnavailable
from mirror_core.replication.topics import TopicManager


def test_an_unanswered_topic_id_request_names_the_cluster_and_topic() -> None:
    source, flow = MagicMock(), MagicMock()
    flow.source = "dc1"
    source.describe_topics.return_value = {"orders": Future()}  # never resolved: the broker asked is gone
    topics = TopicManager(flow, source, MagicMock(), timeout=0.05)
    with pytest.raises(ClusterUnavailable, match=r"source cluster dc1 did not describe topic orders within 0.05s"):
        topics.source_topic_ids(["orders"])
