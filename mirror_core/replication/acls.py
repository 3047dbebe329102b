"""ACLs copied to the target the way MirrorMaker 2 does (read-only), and kept converged.

ALLOW WRITE is never copied (only the mirror writes remote topics); ALLOW ALL becomes ALLOW READ;
other ALLOW operations are copied as they are. DENY entries are always copied unchanged (DENY ALL
stays DENY ALL): denying is always safe, and narrowing a denial would grant what the source refuses.

:class:`AclSync` (``sync.topic.acls.enabled``) copies LITERAL and PREFIXED topic ACLs, with names mapped
through the replication policy (``orders`` -> ``dc1.orders``, prefix ``ord`` -> ``dc1.ord``), and
LITERAL and PREFIXED group ACLs of the groups the flow checkpoints (names as they are), and removes
from the target what the source no longer has. Invariant (owned there): the sync removes only ACLs it
is entitled to -- never a WRITE ACL (operators grant producers WRITE on the target before a cutover),
never an ACL of the mirror's own principals (:func:`own_principals`), never the read-only guard
(:func:`read_only_binding`); and among the rest only those on a resource the flow owns (a remote topic
of a replicated topic, a PREFIXED topic ACL in the source's remote namespace ``dc1.``) or that the
sync saw on the source before (``previous``: the last applied snapshot), so a target-only ACL of a
target-local group or topic is never taken away.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from confluent_kafka import KafkaException, TopicCollection
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from mirror_core.config.model import ClusterConfig, FlowConfig
from mirror_core.errors import MirrorError
from mirror_core.replication.topic_changes import TopicChange

log = logging.getLogger(__name__)


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


class AclSyncError(MirrorError):
    """The target refused an ACL change (e.g. the mirror may not alter ACLs there); one line, remedy included."""


#: who the read-only guard of a remote topic denies (remote.topics.read.only): every principal; super users
#: (the mirror must be one on the target) are exempt, as from the cutover's DENY WRITE on the source
EVERYONE = "User:*"


@dataclass(frozen=True, order=True)
class AclRule:
    """One ACL binding as plain strings (hashable, JSON-able for the sync run's snapshot)."""

    resource: str  # TOPIC | GROUP
    name: str
    pattern: str  # LITERAL | PREFIXED
    principal: str
    host: str
    operation: str  # an AclOperation name
    permission: str  # ALLOW | DENY

    @classmethod
    def of(cls, b: AclBinding) -> AclRule:
        return cls(b.restype.name, b.name, b.resource_pattern_type.name, b.principal, b.host, b.operation.name,
                   b.permission_type.name)

    @classmethod
    def parse(cls, row: list[str]) -> AclRule:
        return cls(*row)

    def binding(self) -> AclBinding:
        return AclBinding(ResourceType[self.resource], self.name, ResourcePatternType[self.pattern], self.principal,
                          self.host, AclOperation[self.operation], AclPermissionType[self.permission])

    def binding_filter(self) -> AclBindingFilter:
        return AclBindingFilter(ResourceType[self.resource], self.name, ResourcePatternType[self.pattern],
                                self.principal, self.host, AclOperation[self.operation],
                                AclPermissionType[self.permission])

    def row(self) -> list[str]:
        return [self.resource, self.name, self.pattern, self.principal, self.host, self.operation, self.permission]

    def describe(self) -> str:
        return (f"{self.permission} {self.principal}@{self.host} {self.operation} on {self.resource.lower()} "
                f"{self.pattern.lower()} '{self.name}'")

    def with_name(self, name: str) -> AclRule:
        return AclRule(self.resource, name, self.pattern, self.principal, self.host, self.operation, self.permission)


def read_only_binding(topic: str) -> AclRule:
    """The guard of a read-only remote topic: DENY WRITE for every principal (super users are exempt)."""
    return AclRule("TOPIC", topic, "LITERAL", EVERYONE, "*", "WRITE", "DENY")


def principals_of(settings: Mapping[str, str]) -> set[str]:
    """The principal a cluster gives a client with these librdkafka settings, when the settings say it.

    PLAINTEXT/SSL without a client certificate: ``User:ANONYMOUS``; SASL PLAIN/SCRAM: ``User:<username>``;
    Kerberos: ``User:<primary of sasl.kerberos.principal>`` (the broker's default mapping rules). TLS client
    certificates and OAUTHBEARER tokens name their principal elsewhere: set ``mirror.principals``.
    """
    protocol = settings.get("security.protocol", "plaintext").lower()
    mechanism = settings.get("sasl.mechanism", settings.get("sasl.mechanisms", "GSSAPI")).upper()
    certificate = {"ssl.certificate.location", "ssl.certificate.pem", "ssl.keystore.location"} & set(settings)
    if protocol == "plaintext" or (protocol == "ssl" and not certificate):
        return {"User:ANONYMOUS"}
    if protocol.startswith("sasl"):
        if mechanism in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512") and settings.get("sasl.username"):
            return {f"User:{settings['sasl.username']}"}
        if mechanism == "GSSAPI" and settings.get("sasl.kerberos.principal"):
            return {f"User:{settings['sasl.kerberos.principal'].split('/')[0].split('@')[0]}"}
    return set()


def own_principals(flow: FlowConfig, source: ClusterConfig, target: ClusterConfig) -> frozenset[str]:
    """The mirror's own principals: ``mirror.principals`` and what its clients' settings on both clusters
    say (:func:`principals_of`). Their ACLs are never copied, changed or removed by the sync."""
    found = set(flow.mirror_principals)
    for cluster in (source, target):
        for kind in ("admin", "consumer", "producer"):
            found |= principals_of(cluster.client_settings(kind))
    return frozenset(found)


def all_acls(admin: AdminClient, timeout: float = 15) -> set[AclRule]:
    """Every TOPIC and GROUP ACL of a cluster, LITERAL and PREFIXED (two requests)."""
    out: set[AclRule] = set()
    for restype in (ResourceType.TOPIC, ResourceType.GROUP):
        flt = AclBindingFilter(restype, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                               AclPermissionType.ANY)
        out |= {AclRule.of(b) for b in admin.describe_acls(flt, request_timeout=timeout).result(timeout)
                if b.resource_pattern_type in (ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED)}
    return out


def no_authorizer(exc: KafkaException) -> bool:
    return "SECURITY_DISABLED" in str(exc) or "No Authorizer" in str(exc)


@dataclass
class AclPlan:
    """What converging the target takes: ACLs to add, ACLs to remove, and the mapped source snapshot."""

    add: list[AclRule] = field(default_factory=list)
    remove: list[AclRule] = field(default_factory=list)
    snapshot: set[AclRule] = field(default_factory=set)

    def empty(self) -> bool:
        return not self.add and not self.remove


class AclSync:
    """Converges the target's topic and group ACLs on the source's for one flow (see the module docstring).

    ``previous``: the mapped source ACLs as last applied (the running mirror keeps it in memory; the
    topic_config_sync DAG and ``mirror-core topics sync`` load it from the last applied sync run); an ACL
    found there and no longer on the source is removed from the target even on a resource the flow does
    not own (a group's ACL).
    """

    def __init__(self, flow: FlowConfig, source_admin: AdminClient, target_admin: AdminClient,
                 own: frozenset[str], timeout: float = 15.0) -> None:
        self.flow = flow
        self.source = source_admin
        self.target = target_admin
        self.own = own
        self.timeout = timeout
        self.previous: set[AclRule] | None = None
        self.next_due = 0.0

    def remote(self, rule: AclRule, topics: Iterable[str]) -> AclRule | None:
        """The target counterpart of a source ACL, or None when it is not the flow's to copy."""
        if rule.principal in self.own or rule.name == "*" or not rule.name:
            return None
        if rule.operation == "WRITE":
            return None  # who writes a remote topic is not the source's business (module docstring)
        if rule.permission == "ALLOW" and rule.operation == "ALL":
            rule = AclRule(rule.resource, rule.name, rule.pattern, rule.principal, rule.host, "READ", "ALLOW")
        if rule.resource == "GROUP":
            return rule if self.flow.groups.accepts(rule.name) else None
        if rule.pattern == "LITERAL":
            return rule.with_name(self.flow.remote_topic(rule.name)) if rule.name in topics else None
        if any(t.startswith(rule.name) for t in topics):  # PREFIXED: it applies to a replicated topic
            return rule.with_name(self.flow.remote_topic(rule.name))
        return None

    def managed(self, rule: AclRule, remotes: set[str]) -> bool:
        """Whether the sync may remove this target ACL when the source does not have it."""
        if rule.operation == "WRITE" or rule.principal in self.own:
            return False
        if self.previous is not None and rule in self.previous:
            return True
        if rule.resource != "TOPIC":
            return False
        if rule.pattern == "LITERAL":
            return rule.name in remotes
        policy = self.flow.policy
        return not policy.uses_provenance and policy.topic_source(rule.name) == self.flow.source

    def plan(self, topics: Iterable[str], acls: bool = True, read_only: bool = False) -> AclPlan:
        """What converging takes: the source's ACLs (``acls``) and the read-only guard of every remote topic
        (``read_only``). Two describe requests per cluster; KafkaException when a cluster cannot answer."""
        wanted_topics = set(topics)
        remotes = {self.flow.remote_topic(t) for t in wanted_topics}
        target = all_acls(self.target, self.timeout)
        plan = AclPlan()
        if acls:
            source = all_acls(self.source, self.timeout)
            wanted = {r for r in (self.remote(rule, wanted_topics) for rule in source) if r is not None}
            plan.add = sorted(wanted - target)
            plan.remove = sorted(r for r in target - wanted if self.managed(r, remotes))
            plan.snapshot = wanted
        if read_only:
            plan.add += sorted({read_only_binding(r) for r in remotes} - target)
        return plan

    def apply(self, plan: AclPlan) -> None:
        """Add, then remove, all or nothing: a refusal undoes what this call changed and raises one line."""
        added: list[AclRule] = []
        removed: list[AclRule] = []
        try:
            added, refused = self._create(plan.add)
            if refused is None:
                removed, refused = self._delete(plan.remove)
        except KafkaException as failed:
            refused = (plan.add[0] if plan.add else plan.remove[0], failed)
        guards = [r for r in added if r == read_only_binding(r.name)]
        if refused is None and guards and not self.may_write(guards[0].name):
            self._undo(added, removed)
            raise AclSyncError(
                f"flow {self.flow.name}: remote.topics.read.only: the mirror is not exempt from the DENY WRITE on "
                f"{guards[0].name} on {self.flow.target} (it is not a super user there), so the guard would stop the "
                f"mirror too; nothing was changed: add the mirror's principal to super.users on {self.flow.target}, "
                "or set remote.topics.read.only = false for this flow")
        if refused is not None:
            self._undo(added, removed)
            rule, error = refused
            why = error.args[0].str() if error.args and hasattr(error.args[0], "str") else str(error)
            raise AclSyncError(
                f"flow {self.flow.name}: the target {self.flow.target} refused an ACL change ({rule.describe()}: "
                f"{why}); nothing was changed: grant the mirror ALTER on the cluster {self.flow.target} (or make it "
                "a super user there), or set sync.topic.acls.enabled = false for this flow")
        self.previous = plan.snapshot

    def may_write(self, topic: str) -> bool:
        """Whether the target lets the mirror's principal (its admin client's) write ``topic``."""
        futures = self.target.describe_topics(TopicCollection([topic]), request_timeout=self.timeout,
                                              include_authorized_operations=True)
        try:
            ops = futures[topic].result(self.timeout).authorized_operations or []
        except KafkaException:  # not even allowed to describe it: not exempt
            return False
        return AclOperation.WRITE in ops or AclOperation.ALL in ops

    def _create(self, rules: list[AclRule]) -> tuple[list[AclRule], tuple[AclRule, KafkaException] | None]:
        if not rules:
            return [], None
        by_binding = {r.binding(): r for r in rules}
        done, refused = [], None
        for binding, fut in self.target.create_acls(list(by_binding), request_timeout=self.timeout).items():
            try:
                fut.result(self.timeout)
                done.append(by_binding[binding])
            except KafkaException as exc:
                refused = refused or (by_binding[binding], exc)
        return done, refused

    def _delete(self, rules: list[AclRule]) -> tuple[list[AclRule], tuple[AclRule, KafkaException] | None]:
        if not rules:
            return [], None
        by_filter = {r.binding_filter(): r for r in rules}
        done, refused = [], None
        for flt, fut in self.target.delete_acls(list(by_filter), request_timeout=self.timeout).items():
            try:
                fut.result(self.timeout)
                done.append(by_filter[flt])
            except KafkaException as exc:
                refused = refused or (by_filter[flt], exc)
        return done, refused

    def _undo(self, added: list[AclRule], removed: list[AclRule]) -> None:
        try:
            self._delete(added)
            self._create(removed)
        except KafkaException as exc:  # said, the refusal itself is what the caller raises
            log.error("flow %s: undoing a refused ACL change failed too (%s): %s", self.flow.name, exc,
                      "; ".join([f"added {r.describe()}" for r in added]
                                + [f"removed {r.describe()}" for r in removed]))


def guarded_topics(admin: AdminClient, timeout: float = 15) -> set[str]:
    """The topics of a cluster that have the read-only guard."""
    flt = read_only_binding("x").binding_filter()
    flt = AclBindingFilter(ResourceType.TOPIC, None, ResourcePatternType.LITERAL, flt.principal, flt.host,
                           flt.operation, flt.permission_type)
    return {b.name for b in admin.describe_acls(flt, request_timeout=timeout).result(timeout)}


def lift_read_only(admin: AdminClient, topics: Iterable[str], timeout: float = 15) -> list[str]:
    """Take the read-only guard off exactly these (promoted) remote topics; the topics it was on."""
    rules = [read_only_binding(t) for t in topics]
    if not rules:
        return []
    lifted = []
    for flt, fut in admin.delete_acls([r.binding_filter() for r in rules], request_timeout=timeout).items():
        if fut.result(timeout):
            lifted.append(flt.name)
    return sorted(lifted)


def acl_changes(added: list[AclRule], removed: list[AclRule]) -> list[TopicChange]:
    """ACL changes as drift: kind ``acl`` (added), ``acl-removed`` or ``read-only`` (the guard), per resource."""
    grouped: dict[tuple[str, str], list[str]] = {}
    for kind, rules in (("acl", added), ("acl-removed", removed)):
        for r in rules:
            k = "read-only" if kind == "acl" and r.principal == "User:*" and r.operation == "WRITE" \
                and r.permission == "DENY" else kind
            name = r.name if r.resource == "TOPIC" and r.pattern == "LITERAL" else \
                f"{r.resource.lower()}{'-prefix' if r.pattern == 'PREFIXED' else ''}:{r.name}"
            grouped.setdefault((name, k), []).append(r.describe())
    return [TopicChange(kind, name, "; ".join(details)) for (name, kind), details in sorted(grouped.items())]
