"""Authorization failures, said once and the same way wherever they surface.

A broker that refuses an operation (an ACL is missing) answers with one of four codes; librdkafka
cannot say *which* operation on *which* resource was refused, but the code that called it can. Every
place that talks to a cluster passes what it was doing here, and the operator gets one line naming the
flow, the operation, the resource, the cluster and the ACL to grant (README "ACLs the mirror needs")::

    flow dc1->dc2: not authorized to Write topic 'dc1.orders' on cluster dc2 (TOPIC_AUTHORIZATION_FAILED):
    grant User:mirror WRITE on Topic:dc1.orders (see README 'ACLs the mirror needs')

The mirror keeps retrying (with backoff) after such a failure: granting the ACL is enough, no restart.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from confluent_kafka import KafkaError, KafkaException

from mirror_core.config.model import ClusterConfig
from mirror_core.errors import MirrorError

#: librdkafka code -> (its name, the ACL resource type it is about)
AUTHORIZATION_CODES: dict[int, tuple[str, str]] = {
    KafkaError.TOPIC_AUTHORIZATION_FAILED: ("TOPIC_AUTHORIZATION_FAILED", "Topic"),
    KafkaError.GROUP_AUTHORIZATION_FAILED: ("GROUP_AUTHORIZATION_FAILED", "Group"),
    KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: ("TRANSACTIONAL_ID_AUTHORIZATION_FAILED", "TransactionalId"),
    KafkaError.CLUSTER_AUTHORIZATION_FAILED: ("CLUSTER_AUTHORIZATION_FAILED", "Cluster"),
}
# How a resource type is written in the sentence ("Write topic 'x'", "Read group 'g'").
_NOUN = {"Topic": "topic", "Group": "group", "TransactionalId": "transactional id", "Cluster": "cluster"}


class NotAuthorized(MirrorError):
    """The cluster refused an operation for want of an ACL; the message is the one line to show."""


@dataclass(frozen=True)
class Access:
    """What a call was doing: ``operation`` (an ACL operation: Read, Write, Create, Describe,
    DescribeConfigs, AlterConfigs, Alter) on resource ``name`` (a topic, group or transactional id;
    for the Cluster resource the name is not used) of cluster ``cluster``."""

    operation: str
    name: str
    cluster: ClusterConfig


def code_of(error: BaseException | KafkaError | None) -> int | None:
    """The librdkafka code of a KafkaError, a KafkaException (or an error chained to it), else None."""
    seen = 0
    while isinstance(error, BaseException) and not isinstance(error, KafkaException) and seen < 5:
        error = error.__cause__
        seen += 1
    if isinstance(error, KafkaException):
        error = error.args[0] if error.args else None
    return error.code() if isinstance(error, KafkaError) else None


def principal(cluster: ClusterConfig) -> str:
    """The principal the mirror most likely has on ``cluster``: ``User:<name>`` for a SASL user name;
    otherwise (certificates, Kerberos, OAuth) the broker maps it, and only it knows the name."""
    user = cluster.clients.get("consumer", {}).get("sasl.username")
    return f"User:{user}" if user else "the mirror's principal"


def denied_line(flow: str, error: BaseException | KafkaError | None, access: Access) -> str | None:
    """The one line for an authorization failure, or None if ``error`` is something else."""
    found = AUTHORIZATION_CODES.get(code_of(error) or 0)
    if found is None:
        return None
    code_name, resource = found
    who, cluster = principal(access.cluster), access.cluster.alias
    if resource == "Cluster" and access.operation == "Write":
        # An idempotent producer needs IdempotentWrite on the cluster, which Kafka grants to anyone
        # allowed to Write some topic (KIP-679): the Write ACL on the topic is the one missing.
        return (f"flow {flow}: not authorized to write topic '{access.name}' on cluster {cluster} "
                f"({code_name}: no IdempotentWrite): grant {who} WRITE on Topic:{access.name} "
                "(see README 'ACLs the mirror needs')")
    what = "the cluster" if resource == "Cluster" else f"{_NOUN[resource]} '{access.name}'"
    name = "kafka-cluster" if resource == "Cluster" else access.name
    return (f"flow {flow}: not authorized to {access.operation} {what} on cluster {cluster} ({code_name}): "
            f"grant {who} {_acl_operation(access.operation)} on {resource}:{name} "
            "(see README 'ACLs the mirror needs')")


def check(flow: str, error: BaseException | KafkaError | None, access: Access) -> None:
    """Raise :class:`NotAuthorized` (chained to ``error``) if ``error`` is an authorization failure."""
    line = denied_line(flow, error, access)
    if line is not None:
        raise NotAuthorized(line) from (error if isinstance(error, BaseException) else None)


def _acl_operation(operation: str) -> str:
    """``DescribeConfigs`` -> ``DESCRIBE_CONFIGS`` (the name kafka-acls.sh and AdminClient use)."""
    return "".join(f"_{c}" if c.isupper() and i else c for i, c in enumerate(operation)).upper()


@contextmanager
def guard(flow: str, access: Access) -> Iterator[None]:
    """Turn an authorization failure of the block into :class:`NotAuthorized`; other errors pass."""
    try:
        yield
    except NotAuthorized:
        raise
    except Exception as exc:
        check(flow, exc, access)
        raise
