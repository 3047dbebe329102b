"""A source broker killed while the flow asks for topic IDs: the unanswered request becomes one line naming
the cluster and the topic (ClusterUnavailable, so the flow restarts quietly), not a traceback of a bare
``TimeoutError`` from the future."""
from __future__ import annotations

from concurrent.futures import Future
from unittest.mock import MagicMock

import pytest
from confluent_kafka import KafkaError, KafkaException

from mirror_core.errors import ClusterUnavailable
from mirror_core.replication.topics import TopicManager


def test_an_unanswered_topic_id_request_names_the_cluster_and_topic() -> None:
    source, flow = MagicMock(), MagicMock()
    flow.source = "dc1"
    source.describe_topics.return_value = {"orders": Future()}  # never resolved: the broker asked is gone
    topics = TopicManager(flow, source, MagicMock(), timeout=0.05)
    with pytest.raises(ClusterUnavailable, match=r"source cluster dc1 did not describe topic orders within 0.05s"):
        topics.source_topic_ids(["orders"])


def test_librdkafka_timing_the_request_out_first_is_the_same_line() -> None:
    source, flow = MagicMock(), MagicMock()
    flow.source = "dc1"
    timed_out: Future[object] = Future()
    timed_out.set_exception(KafkaException(KafkaError(KafkaError._TIMED_OUT)))
    gone: Future[object] = Future()
    gone.set_exception(KafkaException(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART)))
    source.describe_topics.return_value = {"gone": gone, "orders": timed_out}
    with pytest.raises(ClusterUnavailable, match="did not describe topic orders"):
        TopicManager(flow, source, MagicMock(), timeout=5).source_topic_ids(["gone", "orders"])
