"""Deletion propagation (``sync.topic.deletions.enabled``, off by default): a remote topic deleted after its source.

A remote topic of the flow (by name: the source alias and a name the flow's filters take; with the identity policy,
only a topic the mirror has progress for) whose source topic is no longer listed on the source is *orphaned*. The
first sync run that sees it orphaned starts its grace period (``sync.topic.deletions.grace.seconds``), carried from
run to run in the sync runs' summaries (``deleted_seen``): a source topic that comes back ends it. Past the grace
period the remote topic is deleted only if the mirror wrote every record in it -- per partition, the mirror's
progress translated through its exact offset map is the remote end (an exactly-once run may end with commit
markers) -- else the deletion is refused and reported (the run fails loudly, naming the partitions). Dry run
(``sync.topic.deletions.dry.run``, or ``--dry-run``): proposed, never deleted. Every step in the drift history
(``delete-pending``, ``deleted``, ``delete-refused``).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from confluent_kafka import KafkaException, TopicPartition

from mirror_core.clients import make_consumer
from mirror_core.config.model import FlowConfig, MirrorConfig
from mirror_core.errors import ReadIncomplete
from mirror_core.kafka_io import QUIET, first_visible
from mirror_core.offsets.translate import FlowOffsets
from mirror_core.replication.topic_changes import TopicChange, error_reason
from mirror_core.state.store import StateStore

log = logging.getLogger(__name__)


def previous_seen(store: StateStore, flow: FlowConfig) -> dict[str, float]:
    """When each orphaned remote topic was first seen so (the last run that recorded it)."""
    for run in store.sync_runs(flow.name, limit=50):
        if "deleted_seen" in (run.summary or {}):
            return {str(k): float(v) for k, v in run.summary["deleted_seen"].items()}
    return {}


def orphans(flow: FlowConfig, source_names: set[str], remote_names: set[str],
            progress_topics: set[str]) -> dict[str, str]:
    """Remote topic -> its source topic, for the flow's remote topics whose source topic is gone."""
    out = {}
    policy = flow.policy
    for remote in remote_names:
        if policy.uses_provenance:
            source: str | None = remote if remote in progress_topics else None
        else:
            source = policy.upstream_topic(remote) if policy.topic_source(remote) == flow.source else None
        if source is None or source in source_names or not flow.should_replicate(source) \
                or policy.is_heartbeats_topic(source):
            continue
        out[remote] = source
    return out


def unaccounted(flow: FlowConfig, source: str, remote: str, partitions: int, offsets: FlowOffsets,
                reader: Any, timeout: float = 10.0) -> list[str]:
    """The partitions of ``remote`` holding records the mirror did not write (empty: it wrote every one)."""
    problems = []
    for partition in range(partitions):
        _, end = reader.get_watermark_offsets(TopicPartition(remote, partition), timeout=timeout)
        progress = offsets.progress.get((source, partition))
        if progress is None:
            if end:
                problems.append(f"{remote}[{partition}]: {end} records and no progress of the mirror for it")
            continue
        pm = offsets.offset_map.partitions.get((source, partition))
        expected = pm.translate(progress, progress).target_offset if pm is not None and len(pm) else None
        if expected is None:
            expected = 0 if progress == 0 or not end else None
        if expected is not None and expected < end:
            try:
                if first_visible(reader, remote, partition, expected, end, timeout) is None:
                    expected = end  # exactly-once: the log ends with the commit marker of the last transaction
            except ReadIncomplete as exc:
                problems.append(f"{remote}[{partition}]: unreadable ({exc})")
                continue
        if expected != end:
            problems.append(f"{remote}[{partition}]: remote end {end}, the mirror wrote up to {expected} "
                            f"(source {source} progress {progress})")
    return problems


def propagate_deletions(config: MirrorConfig, flow: FlowConfig, src_admin: Any, tgt_admin: Any,
                        store: StateStore | None, dry_run: bool, now: float | None = None
                        ) -> tuple[list[TopicChange], list[TopicChange], dict[str, float]]:
    """(changes, refusals, orphans with when first seen) of one sync run; nothing without a state store."""
    if store is None:
        log.log(logging.INFO if dry_run else logging.WARNING, "flow %s: sync.topic.deletions.enabled needs a state "
                "store (the grace period is counted across runs): no deletion propagated", flow.name)
        return [], [], {}
    now = time.time() if now is None else now
    source_names = set(src_admin.list_topics(timeout=15).topics)
    md = tgt_admin.list_topics(timeout=15)
    remote_parts = {n: len(t.partitions) for n, t in md.topics.items() if t.error is None}
    offsets = FlowOffsets.load(config, flow)
    found = orphans(flow, source_names, set(remote_parts), {t for t, _ in offsets.progress})
    before = previous_seen(store, flow)
    seen = {remote: before.get(remote, now) for remote in found}
    changes: list[TopicChange] = []
    refused: list[TopicChange] = []
    reader = make_consumer(config.cluster(flow.target), "mirror-core.deletions", QUIET)
    try:
        for remote, source in sorted(found.items()):
            due = seen[remote] + flow.sync_topic_deletions_grace_s
            if now < due:
                if remote not in before:
                    changes.append(TopicChange("delete-pending", remote, f"source topic {source} deleted on "
                                               f"{flow.source}: deleted after the grace period, at "
                                               f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(due))}, "
                                               "unless it reappears"))
                continue
            problems = unaccounted(flow, source, remote, remote_parts[remote], offsets, reader)
            if problems:
                refused.append(TopicChange("delete-refused", remote, f"source topic {source} was deleted, but the "
                                           "mirror did not write every record of its remote copy: "
                                           + "; ".join(problems) + ": delete it by hand if intended, or keep it"))
                continue
            if not dry_run:
                try:
                    tgt_admin.delete_topics([remote], operation_timeout=15)[remote].result(30)
                except KafkaException as exc:
                    refused.append(TopicChange("delete-refused", remote, f"the target refused to delete it "
                                               f"({error_reason(exc)})"))
                    continue
                log.info("flow %s: remote topic %s deleted (source topic %s deleted)", flow.name, remote, source)
                del seen[remote]
            changes.append(TopicChange("deleted", remote, f"source topic {source} deleted on {flow.source}, "
                                       "every record of the remote copy written by the mirror"))
    finally:
        reader.close()
    return changes, refused, seen
