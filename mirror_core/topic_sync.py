"""Topic-config sync: compare source topics and their remote copies, apply the differences.

Per flow: existence, partition count (never decreased: a remote topic with *more* partitions than
its source is drift that fails the run loudly), explicitly-set topic configs (minus
``config.properties.exclude``; a config set on the remote topic but default on the source is reset
to the target's default), topic and group ACLs (read-only, as MirrorMaker 2 copies them, and converged:
what the source revoked goes from the target; ``sync.topic.acls.enabled``, :class:`~.acls.AclSync`), the
read-only guard of the remote topics (``remote.topics.read.only``) and deletion propagation
(``sync.topic.deletions.enabled``, :mod:`.topic_deletions`). Applied
idempotently with incremental config changes; ``dry_run`` only reports. A config or a topic the
target rejects is refused drift for that topic only: the other topics are synced, and the run fails
loudly at the end. Every run, with what it found and did, is recorded in the state store when one is
given. Used by the ``topic_config_sync`` DAG and by ``mirror-core topics sync``.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field
from typing import Any

from confluent_kafka import KafkaError, KafkaException

from mirror_core.clients import error_code, make_admin
from mirror_core.config.model import FlowConfig, MirrorConfig
from mirror_core.errors import ClusterUnavailable, MirrorError
from mirror_core.replication.acls import (
    AclRule,
    AclSync,
    AclSyncError,
    acl_changes,
    guarded_topics,
    lift_read_only,
    no_authorizer,
    own_principals,
)
from mirror_core.replication.topic_changes import TopicChange
from mirror_core.replication.topics import TopicManager
from mirror_core.state.models import DriftEvent, TopicSnapshot
from mirror_core.state.store import StateStore
from mirror_core.topic_deletions import propagate_deletions

log = logging.getLogger(__name__)


class TopicSyncError(MirrorError):
    """Drift that must not be fixed automatically (e.g. a target with more partitions than its source)."""


@dataclass
class FlowSyncResult:
    flow: str
    dry_run: bool
    changes: list[TopicChange] = field(default_factory=list)
    refused: list[TopicChange] = field(default_factory=list)
    topics: int = 0
    sync_run_id: int | None = None
    #: the source ACLs (mapped) an applied ACL sync converged on: kept in the run's summary (``previous``)
    acl_snapshot: list[AclRule] | None = None
    #: orphaned remote topics (source topic deleted) and when first seen: the grace period (topic_deletions.py)
    deleted_seen: dict[str, float] | None = None

    @property
    def status(self) -> str:
        return "failed" if self.refused else ("drift" if self.changes else "ok")

    def as_dict(self) -> dict[str, Any]:
        return {"flow": self.flow, "dry_run": self.dry_run, "status": self.status, "topics": self.topics,
                "changes": [asdict(c) for c in self.changes], "refused": [asdict(c) for c in self.refused],
                "sync_run_id": self.sync_run_id}


def sync_flow(config: MirrorConfig, flow: FlowConfig, dry_run: bool = False, store: StateStore | None = None,
              run_id: str | None = None, sync_acls: bool = True) -> FlowSyncResult:
    src_admin, tgt_admin = make_admin(config.cluster(flow.source)), make_admin(config.cluster(flow.target))
    manager = TopicManager(flow, src_admin, tgt_admin)
    result = FlowSyncResult(flow.name, dry_run)
    sync_id = store.start_sync_run(flow.name, dry_run, run_id) if store else None
    result.sync_run_id = sync_id
    try:
        wanted = {t: n for t, n in manager.source_topics().items() if not flow.policy.is_heartbeats_topic(t)}
        result.topics = len(wanted)
        remote_counts = manager.remote_partitions()
        for topic, count in sorted(wanted.items()):
            remote = flow.remote_topic(topic)
            have = remote_counts.get(remote)
            if have is not None and have > count:
                result.refused.append(TopicChange(
                    "target-has-more-partitions", remote,
                    f"remote has {have} partitions, source {topic} has {count}: partitions are never decreased; "
                    "fix by hand (recreate the remote topic, or add partitions on the source)"))
        result.changes += manager.ensure_remote(wanted, dry_run=dry_run)
        result.changes += manager.configs.sync(sorted(t for t in wanted if t not in manager.uncreatable),
                                               dry_run=dry_run)
        result.refused += manager.take_problems()  # configs or topics the target rejected
        guard = flow.remote_topics_read_only and _flow_running(store, flow)
        if (sync_acls and flow.sync_topic_acls) or guard:
            acl_sync = AclSync(flow, src_admin, tgt_admin,
                               own_principals(flow, config.cluster(flow.source), config.cluster(flow.target)))
            acl_sync.previous = _previous_acls(store, flow)
            result.changes += _sync_acls(acl_sync, [t for t in wanted if t not in manager.uncreatable],
                                         sync_acls and flow.sync_topic_acls, guard, dry_run, result)
        if flow.sync_topic_deletions:
            gone, kept, result.deleted_seen = propagate_deletions(config, flow, src_admin, tgt_admin, store,
                                                                  dry_run or flow.sync_topic_deletions_dry_run)
            result.changes += gone
            result.refused += kept
    except (KafkaException, MirrorError) as exc:
        if store and sync_id is not None:
            store.finish_sync_run(sync_id, "failed", {"error": str(exc)})
        if isinstance(exc, ClusterUnavailable):
            raise ClusterUnavailable(f"flow {flow.name}: {exc}; check that the cluster is up and reachable from "
                                     "here, then sync again (nothing was changed)") from None
        raise
    if store and sync_id is not None:
        _record(store, sync_id, flow, result, manager, wanted)
    return result


def _flow_running(store: StateStore | None, flow: FlowConfig) -> bool:
    """A flow a workflow stopped (failover, cutover) keeps no read-only guard: its topics were promoted."""
    control = store.flow_controls().get(flow.name) if store else None
    return control is None or control.desired != "stopped"


def _previous_acls(store: StateStore | None, flow: FlowConfig) -> set[AclRule] | None:
    """The source ACLs (mapped) the last applied sync of this flow saw, from its run record."""
    for run in store.sync_runs(flow.name, limit=50) if store else []:
        if not run.dry_run and "acls" in (run.summary or {}):
            return {AclRule.parse(row) for row in run.summary["acls"]}
    return None


def _sync_acls(acl_sync: AclSync, topics: list[str], acls: bool, guard: bool, dry_run: bool,
               result: FlowSyncResult) -> list[TopicChange]:
    """Converge the target's ACLs (and the read-only guard); the changes, one per resource and kind."""
    try:
        plan = acl_sync.plan(topics, acls=acls, read_only=guard)
    except KafkaException as exc:
        if no_authorizer(exc):
            return []  # clusters without an authorizer have no ACLs to copy
        if error_code(exc) == KafkaError.CLUSTER_AUTHORIZATION_FAILED:
            flow = acl_sync.flow
            raise AclSyncError(f"flow {flow.name}: the mirror may not describe ACLs on {flow.source} or {flow.target}: "
                               f"grant its principal DESCRIBE on both clusters and ALTER on {flow.target}, or set "
                               "sync.topic.acls.enabled = false and remote.topics.read.only = false for this flow "
                               "(nothing was changed)") from None
        raise
    if not dry_run and not plan.empty():
        acl_sync.apply(plan)
    if acls and not dry_run:
        result.acl_snapshot = sorted(plan.snapshot)
    return acl_changes(plan.add, plan.remove)


def _record(store: StateStore, sync_id: int, flow: FlowConfig, result: FlowSyncResult, manager: TopicManager,
            wanted: dict[str, int]) -> None:
    action = "proposed" if result.dry_run else "applied"
    rows: list[Any] = [DriftEvent(sync_run_id=sync_id, flow=flow.name, topic=c.topic, kind=c.kind, detail=c.detail,
                                  action=action) for c in result.changes]
    rows += [DriftEvent(sync_run_id=sync_id, flow=flow.name, topic=c.topic, kind=c.kind, detail=c.detail,
                        action="refused") for c in result.refused]
    remote_counts = manager.remote_partitions()
    source_configs = manager.configs.source_configs(sorted(wanted))
    for topic, count in sorted(wanted.items()):
        remote = flow.remote_topic(topic)
        rows.append(TopicSnapshot(sync_run_id=sync_id, topic=topic, remote_topic=remote, partitions=count,
                                  remote_partitions=remote_counts.get(remote), configs=source_configs.get(topic, {}),
                                  remote_configs={}))
    store.add(*rows)
    summary: dict[str, Any] = {"topics": result.topics, "changes": len(result.changes), "refused": len(result.refused)}
    if result.acl_snapshot is not None:
        summary["acls"] = [r.row() for r in result.acl_snapshot]
    if result.deleted_seen is not None:
        summary["deleted_seen"] = result.deleted_seen
    store.finish_sync_run(sync_id, result.status, summary)


def sync_topics(config: MirrorConfig, flows: list[str] | None = None, dry_run: bool = False,
                store: StateStore | None = None, run_id: str | None = None) -> list[FlowSyncResult]:
    """Sync every selected flow (everything is recorded); see :func:`raise_on_refused`."""
    selected = [config.flow(name) for name in flows] if flows else list(config.flows)
    return [sync_flow(config, f, dry_run, store, run_id) for f in selected]


def record_watcher_changes(store: StateStore, flow: str, changes: list[TopicChange]) -> int | None:
    """The running mirror's ACL changes (``TopicManager.take_acl_changes``) as an applied sync run of ``flow`` in
    the drift history; None when there were none. The service's control loop calls it (one line, see the report)."""
    if not changes:
        return None
    sync_id = store.start_sync_run(flow, False, "mirror")
    store.add(*[DriftEvent(sync_run_id=sync_id, flow=flow, topic=c.topic, kind=c.kind, detail=c.detail,
                           action="applied") for c in changes])
    store.finish_sync_run(sync_id, "drift", {"changes": len(changes), "by": "running mirror"})
    return sync_id


def lift_remote_read_only(config: MirrorConfig, flow: FlowConfig, topics: list[str] | tuple[str, ...] | None = None,
                          store: StateStore | None = None, run_id: str | None = None,
                          why: str = "promoted") -> list[str]:
    """Failover, cutover, promotion: take the read-only guard (remote.topics.read.only) off exactly the remote
    topics of the source ``topics`` (None: every guarded remote topic of the flow: what a whole-flow failover
    promotes, found on the target, so a source that is down is not asked). The remote topics it was taken off,
    recorded in the drift history (kind ``read-only-lifted``) when a store is given."""
    admin = make_admin(config.cluster(flow.target))
    try:
        if topics is None:
            names = sorted(t for t in guarded_topics(admin) if _remote_of(flow, t))
        else:
            names = sorted(flow.remote_topic(t) for t in topics)
        lifted = lift_read_only(admin, names)
    except KafkaException as exc:
        raise AclSyncError(f"flow {flow.name}: the read-only guard of the promoted topics on {flow.target} could not "
                           f"be lifted ({exc}); applications could not write there: lift it by hand (DENY WRITE "
                           "User:* on each topic) or run this step again") from None
    if store is not None and lifted:
        sync_id = store.start_sync_run(flow.name, False, run_id)
        store.add(*[DriftEvent(sync_run_id=sync_id, flow=flow.name, topic=t, kind="read-only-lifted",
                               detail=f"DENY User:*@* WRITE removed ({why})", action="applied") for t in lifted])
        store.finish_sync_run(sync_id, "drift", {"read_only_lifted": lifted})
    return lifted


def _remote_of(flow: FlowConfig, remote: str) -> bool:
    """Whether a topic of the target is a remote topic of this flow (by name)."""
    policy = flow.policy
    if policy.uses_provenance:
        return flow.should_replicate(remote)
    upstream = policy.upstream_topic(remote)
    return policy.topic_source(remote) == flow.source and upstream is not None and flow.should_replicate(upstream)


def raise_on_refused(results: list[FlowSyncResult]) -> None:
    """Fail loudly on drift that must not be fixed automatically."""
    refused = [c for r in results for c in r.refused]
    if refused:
        raise TopicSyncError("; ".join(f"{c.topic}: {c.detail}" for c in refused))
