"""Topic ACLs copied to remote topics the way MirrorMaker 2 does: read-only.

ALLOW WRITE is never copied (only the mirror writes remote topics); ALLOW ALL becomes ALLOW READ;
other ALLOW operations are copied as they are. DENY entries are always copied unchanged (DENY ALL
stays DENY ALL): denying is always safe, and narrowing a denial would grant what the source refuses.
Only literal ACLs naming the topic are copied.
"""

from __future__ import annotations

from dataclasses import dataclass

from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)


@dataclass(frozen=True)
class AclEntry:
    principal: str
    host: str
    operation: AclOperation
    permission: AclPermissionType

    def describe(self) -> str:
        return f"{self.permission.name} {self.principal}@{self.host} {self.operation.name}"


def topic_acls(admin: AdminClient, topic: str, timeout: float = 15) -> set[AclEntry]:
    flt = AclBindingFilter(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, None, None,
                           AclOperation.ANY, AclPermissionType.ANY)
    bindings = admin.describe_acls(flt, request_timeout=timeout).result(timeout)
    return {AclEntry(b.principal, b.host, b.operation, b.permission_type) for b in bindings}


def remote_acl(entry: AclEntry) -> AclEntry | None:
    """The read-only counterpart of a source ACL on the remote topic, or None when not copied."""
    if entry.operation == AclOperation.WRITE:
        # Who writes a remote topic is not the source's business: ALLOW WRITE would let applications
        # write a mirror's topic, and a DENY WRITE (e.g. a cutover's, on the old source) would block
        # them on the new primary.
        return None
    if entry.permission != AclPermissionType.ALLOW:
        return entry  # other DENY entries (ALL included) are copied unchanged
    if entry.operation == AclOperation.ALL:
        return AclEntry(entry.principal, entry.host, AclOperation.READ, entry.permission)
    return entry


def missing_remote_acls(source: set[AclEntry], remote: set[AclEntry]) -> list[AclEntry]:
    wanted = {r for r in (remote_acl(e) for e in source) if r is not None}
    return sorted(wanted - remote, key=lambda e: (e.principal, e.operation.name, e.permission.name))


def create_acls(admin: AdminClient, topic: str, entries: list[AclEntry], timeout: float = 15) -> None:
    bindings = [AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, e.principal, e.host,
                           e.operation, e.permission) for e in entries]
    for fut in admin.create_acls(bindings, request_timeout=timeout).values():
        fut.result(timeout)
