"""Finding a group's or a transactional id's coordinator (FindCoordinator v1), and a static member's leave, as the
admin API's RemoveMembersFromConsumerGroup sends it (KIP-345): FindCoordinator for the group, then LeaveGroup v3
naming the member by its group.instance.id. librdkafka's static members do not leave when they close (so that a
restart takes their partitions back without a rebalance), and confluent-kafka has no admin call for it: a process
stopping for good leaves this way, so that the others take its partitions at once instead of after
session.timeout.ms."""

from __future__ import annotations

from mirror_core.wire.connection import Connection, WireError
from mirror_core.wire.errors import name
from mirror_core.wire.messages import (
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
)
from mirror_core.wire.metadata import Brokers

UNKNOWN_MEMBER_ID = 25
#: FindCoordinator's key types
GROUP_KEY, TRANSACTION_KEY = 0, 1
FIND_COORDINATOR_VERSIONS = (1,)


def find_coordinator(conn: Connection, key: str, key_type: int = GROUP_KEY) -> tuple[int, int]:
    """FindCoordinator v1 for a consumer group or a transactional id: (error, coordinator node id)."""
    answer = conn.ask(FindCoordinatorRequest(key=key, key_type=key_type), FindCoordinatorResponse,
                      FIND_COORDINATOR_VERSIONS)
    return answer.error_code, answer.node_id


def leave(conn: Connection, group: str, instance_id: str) -> tuple[int, list[int]]:
    """LeaveGroup v3 of one member, named by its group.instance.id (the member id left empty, as the admin API
    does): (the answer's error, each member's error)."""
    member = LeaveGroupRequest.MemberIdentity(member_id="", group_instance_id=instance_id)
    answer = conn.ask(LeaveGroupRequest(group_id=group, members=[member]), LeaveGroupResponse, (3,))
    return answer.error_code, [m.error_code for m in answer.members or ()]


def leave_static(brokers: Brokers, group: str, instance_id: str) -> str:
    """Remove the static member ``instance_id`` from ``group``: what happened, in a few words (a member already gone
    is fine). Raises WireError when the coordinator cannot be asked or refuses."""
    brokers.metadata([])  # (the brokers' addresses: the coordinator is one of them)
    with brokers.connect(next(iter(brokers.known))) as conn:
        error, node = find_coordinator(conn, group)
    if error:
        raise WireError(f"{brokers.where}: no coordinator for group {group}: {name(error)}")
    if node not in brokers.known:
        brokers.metadata([])
    with brokers.connect(node) as conn:
        error, members = leave(conn, group, instance_id)
    if error:
        raise WireError(f"{brokers.where}: group {group} refused the leave of {instance_id}: {name(error)}")
    if members and members[0] == UNKNOWN_MEMBER_ID:
        return "it was no longer a member"
    if members and members[0]:
        raise WireError(f"{brokers.where}: group {group} refused the leave of {instance_id}: {name(members[0])}")
    return "left"
