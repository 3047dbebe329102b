"""Topic-config sync: compare source topics and their remote copies, apply the differences.

Per flow: existence, partition count (never decreased: a remote topic with *more* partitions than
its source is drift that fails the run loudly), explicitly-set topic configs (minus
``config.properties.exclude``; a config set on the remote topic but default on the source is reset
to the target's default), and topic ACLs (read-only, as MirrorMaker 2 copies them). Applied
idempotently with incremental config changes; ``dry_run`` only reports. A config or a topic the
target rejects is refused drift for that topic only: the other topics are synced, and the run fails
loudly at the end. Every run, with what it found and did, is recorded in the state store when one is
given. Used by the ``topic_config_sync`` DAG and by ``mirror-core topics sync``.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field
from typing import Any

from confluent_kafka import KafkaException

from mirror_core.clients import make_admin
from mirror_core.config.model import FlowConfig, MirrorConfig
from mirror_core.errors import ClusterUnavailable, MirrorError
from mirror_core.replication.acls import create_acls, missing_remote_acls, topic_acls
from mirror_core.replication.topic_changes import TopicChange
from mirror_core.replication.topics import TopicManager
from mirror_core.state.models import DriftEvent, TopicSnapshot
from mirror_core.state.store import StateStore

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
        if sync_acls:
            result.changes += _sync_acls(flow, {t: n for t, n in wanted.items() if t not in manager.uncreatable},
                                         src_admin, tgt_admin, dry_run)
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


def _sync_acls(flow: FlowConfig, wanted: dict[str, int], src_admin: Any, tgt_admin: Any,
               dry_run: bool) -> list[TopicChange]:
    changes = []
    for topic in sorted(wanted):
        remote = flow.remote_topic(topic)
        try:
            missing = missing_remote_acls(topic_acls(src_admin, topic), topic_acls(tgt_admin, remote))
        except KafkaException as exc:
            if "SECURITY_DISABLED" in str(exc) or "No Authorizer" in str(exc):
                return []  # clusters without an authorizer have no ACLs to copy
            raise
        if missing:
            changes.append(TopicChange("acl", remote, "; ".join(e.describe() for e in missing)))
            if not dry_run:
                create_acls(tgt_admin, remote, missing)
    return changes


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
    store.finish_sync_run(sync_id, result.status, {"topics": result.topics, "changes": len(result.changes),
                                                   "refused": len(result.refused)})


def sync_topics(config: MirrorConfig, flows: list[str] | None = None, dry_run: bool = False,
                store: StateStore | None = None, run_id: str | None = None) -> list[FlowSyncResult]:
    """Sync every selected flow (everything is recorded); see :func:`raise_on_refused`."""
    selected = [config.flow(name) for name in flows] if flows else list(config.flows)
    return [sync_flow(config, f, dry_run, store, run_id) for f in selected]


def raise_on_refused(results: list[FlowSyncResult]) -> None:
    """Fail loudly on drift that must not be fixed automatically."""
    refused = [c for r in results for c in r.refused]
    if refused:
        raise TopicSyncError("; ".join(f"{c.topic}: {c.detail}" for c in refused))
