"""The one line an authorization failure becomes (mirror_core.authorization), per code and principal."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from mirror_core.authorization import Access, NotAuthorized, denied_line, guard
from mirror_core.config.model import ClusterConfig
from mirror_core.errors import ProgressError

SCRAM = ClusterConfig("dc2", "b:9093", {"consumer": {"sasl.username": "mirror", "sasl.password": "s3cret"}})
MTLS = ClusterConfig("dc1", "b:9094", {"consumer": {"security.protocol": "SSL"}})


def test_a_refused_write_names_topic_cluster_code_and_the_acl_to_grant() -> None:
    line = denied_line("dc1->dc2", KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED),
                       Access("Write", "dc1.orders", SCRAM))
    assert line == ("flow dc1->dc2: not authorized to Write topic 'dc1.orders' on cluster dc2 "
                    "(TOPIC_AUTHORIZATION_FAILED): grant User:mirror WRITE on Topic:dc1.orders "
                    "(see README 'ACLs the mirror needs')")
    assert "s3cret" not in line


@pytest.mark.parametrize(("code", "access", "expected"), [
    (KafkaError.GROUP_AUTHORIZATION_FAILED, Access("Read", "mirror-core.dc1-dc2", MTLS),
     "not authorized to Read group 'mirror-core.dc1-dc2' on cluster dc1 (GROUP_AUTHORIZATION_FAILED): grant "
     "the mirror's principal READ on Group:mirror-core.dc1-dc2"),
    (KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, Access("Write", "mirror-core.dc1-dc2.slot-3", SCRAM),
     "not authorized to Write transactional id 'mirror-core.dc1-dc2.slot-3' on cluster dc2 "
     "(TRANSACTIONAL_ID_AUTHORIZATION_FAILED): grant User:mirror WRITE on TransactionalId:mirror-core.dc1-dc2.slot-3"),
    (KafkaError.TOPIC_AUTHORIZATION_FAILED, Access("DescribeConfigs", "orders", SCRAM),
     "grant User:mirror DESCRIBE_CONFIGS on Topic:orders"),
    # An idempotent producer refused its producer id: Write on the topic is what grants IdempotentWrite.
    (KafkaError.CLUSTER_AUTHORIZATION_FAILED, Access("Write", "heartbeats", SCRAM),
     "not authorized to write topic 'heartbeats' on cluster dc2 (CLUSTER_AUTHORIZATION_FAILED: no "
     "IdempotentWrite): grant User:mirror WRITE on Topic:heartbeats"),
    (KafkaError.CLUSTER_AUTHORIZATION_FAILED, Access("Alter", "x", SCRAM),
     "not authorized to Alter the cluster on cluster dc2 (CLUSTER_AUTHORIZATION_FAILED): grant User:mirror "
     "ALTER on Cluster:kafka-cluster"),
])
def test_each_code_names_its_resource(code: int, access: Access, expected: str) -> None:
    line = denied_line("dc1->dc2", KafkaException(KafkaError(code)), access)
    assert line is not None and expected in line, line


def test_other_errors_are_not_authorization_failures() -> None:
    assert denied_line("f", KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART), Access("Write", "t", SCRAM)) is None
    assert denied_line("f", RuntimeError("boom"), Access("Write", "t", SCRAM)) is None
    with pytest.raises(RuntimeError), guard("f", Access("Write", "t", SCRAM)):
        raise RuntimeError("boom")


def test_guard_finds_the_code_behind_a_wrapping_error() -> None:
    """ensure_internal_topic wraps the KafkaException in a ProgressError: the cause still counts."""
    with pytest.raises(NotAuthorized, match=r"^flow f: not authorized to Create topic 'mirror-core\.progress'"), \
            guard("f", Access("Create", "mirror-core.progress", SCRAM)):
        try:
            raise KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))
        except KafkaException as exc:
            raise ProgressError(f"cannot create internal topic: {exc}") from exc
