"""A static member's leave, as the admin API's RemoveMembersFromConsumerGroup sends it (KIP-345): FindCoordinator
v1 for the group, then LeaveGroup v3 naming the member by its group.instance.id. librdkafka's static members do
not leave when they close (so that a restart takes their partitions back without a rebalance), and confluent-kafka
has no admin call for it: a process stopping for good leaves this way, so that the others take its partitions
at once instead of after session.timeout.ms."""

from __future__ import annotations

from mirror_core.wire.codec import Reader, array, string
from mirror_core.wire.connection import WireError
from mirror_core.wire.errors import name
from mirror_core.wire.metadata import Brokers

API_FIND_COORDINATOR, API_LEAVE_GROUP = 10, 13
UNKNOWN_MEMBER_ID = 25


def find_coordinator_request(group: str) -> bytes:
    """FindCoordinator v1: the coordinator of a consumer group (key type 0)."""
    return string(group) + b"\x00"


def parse_find_coordinator(data: memoryview) -> tuple[int, int]:
    """(error, coordinator node id)."""
    r = Reader(data)
    r.int32()  # throttle time
    error = r.int16()
    r.string()  # error message
    node = r.int32()
    r.string()  # host
    r.int32()  # port
    return error, node


def leave_request(group: str, instance_id: str) -> bytes:
    """LeaveGroup v3: one member, named by its group.instance.id (the member id left empty, as the admin API does)."""
    return string(group) + array([string("") + string(instance_id)])


def parse_leave(data: memoryview) -> tuple[int, list[int]]:
    """(the answer's error, each member's error)."""
    r = Reader(data)
    r.int32()  # throttle time
    error = r.int16()
    members = []
    for _ in range(r.count(6)):
        r.string()  # member id
        r.string()  # group instance id
        members.append(r.int16())
    return error, members


def leave_static(brokers: Brokers, group: str, instance_id: str) -> str:
    """Remove the static member ``instance_id`` from ``group``: what happened, in a few words (a member already gone
    is fine). Raises WireError when the coordinator cannot be asked or refuses."""
    brokers.metadata([])  # (the brokers' addresses: the coordinator is one of them)
    with brokers.connect(next(iter(brokers.known))) as conn:
        error, node = parse_find_coordinator(conn.call(API_FIND_COORDINATOR, conn.version(API_FIND_COORDINATOR, (1,)),
                                                       find_coordinator_request(group)))
    if error:
        raise WireError(f"{brokers.where}: no coordinator for group {group}: {name(error)}")
    if node not in brokers.known:
        brokers.metadata([])
    with brokers.connect(node) as conn:
        error, members = parse_leave(conn.call(API_LEAVE_GROUP, conn.version(API_LEAVE_GROUP, (3,)),
                                               leave_request(group, instance_id)))
    if error:
        raise WireError(f"{brokers.where}: group {group} refused the leave of {instance_id}: {name(error)}")
    if members and members[0] == UNKNOWN_MEMBER_ID:
        return "it was no longer a member"
    if members and members[0]:
        raise WireError(f"{brokers.where}: group {group} refused the leave of {instance_id}: {name(members[0])}")
    return "left"
