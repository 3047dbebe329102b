"""Remote topic management for one flow: discovery, creation, partition increases, config sync.

Invariant (owned here): a source partition is only handed to the replicator once its remote topic
exists on the target with at least as many partitions, so records always land in the same
partition number. Partitions are never decreased.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from confluent_kafka import KafkaError, KafkaException, TopicCollection
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    ResourceType,
)

from mirror_core.clients import error_code
from mirror_core.config.model import FlowConfig
from mirror_core.errors import ClusterUnavailable

log = logging.getLogger(__name__)


@dataclass
class TopicChange:
    """One action taken (or, in a dry run, proposed) on a remote topic."""

    kind: str  # created | partitions | config | missing-source
    topic: str
    detail: str


@dataclass
class TopicState:
    partitions: dict[str, int] = field(default_factory=dict)  # source topic -> partition count


class TopicManager:
    def __init__(self, flow: FlowConfig, source_admin: AdminClient, target_admin: AdminClient,
                 timeout: float = 15.0) -> None:
        self.flow = flow
        self.source = source_admin
        self.target = target_admin
        self.timeout = timeout
        #: remote topics this manager has seen on the target: missing again later means deleted there
        self.seen_remote: set[str] = set()
        #: remote topics recreated after such a deletion (the replicator reports and counts them)
        self.recreated_remote: list[str] = []

    def source_topics(self) -> dict[str, int]:
        """Source topics this flow replicates, with their partition counts."""
        try:
            md = self.source.list_topics(timeout=self.timeout)
        except KafkaException as exc:
            raise ClusterUnavailable(f"source cluster {self.flow.source}: {exc}") from exc
        return {
            name: len(t.partitions)
            for name, t in md.topics.items()
            if t.error is None and self.flow.should_replicate(name)
        }

    def source_topic_ids(self, topics: list[str]) -> dict[str, str]:
        """Kafka's topic IDs: a topic deleted and recreated under the same name gets a new one."""
        if not topics:
            return {}
        futures = self.source.describe_topics(TopicCollection(topics), request_timeout=self.timeout)
        out = {}
        for name, fut in futures.items():
            try:
                out[name] = str(fut.result(self.timeout).topic_id)
            except KafkaException:
                continue  # gone meanwhile: the next refresh reports it
        return out

    def remote_partitions(self) -> dict[str, int]:
        try:
            md = self.target.list_topics(timeout=self.timeout)
        except KafkaException as exc:
            raise ClusterUnavailable(f"target cluster {self.flow.target}: {exc}") from exc
        return {name: len(t.partitions) for name, t in md.topics.items() if t.error is None}

    def source_configs(self, topics: list[str]) -> dict[str, dict[str, str]]:
        """Explicitly set (non-default) configs of source topics, minus excluded properties."""
        return self._describe(self.source, topics, explicit_only=True)

    def _describe(self, admin: AdminClient, topics: list[str], explicit_only: bool) -> dict[str, dict[str, str]]:
        if not topics:
            return {}
        resources = [ConfigResource(ResourceType.TOPIC, t) for t in topics]
        result: dict[str, dict[str, str]] = {}
        for res, fut in admin.describe_configs(resources, request_timeout=self.timeout).items():
            try:
                entries = fut.result(self.timeout)
            except KafkaException as exc:
                if error_code(exc) == KafkaError.UNKNOWN_TOPIC_OR_PART:
                    continue
                raise
            result[res.name] = {
                name: e.value
                for name, e in entries.items()
                if e.value is not None
                and not e.is_sensitive
                and (not explicit_only or e.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
                and not self.flow.config_properties_exclude.matches(name)
            }
        return result

    def ensure_remote(self, wanted: dict[str, int], dry_run: bool = False) -> list[TopicChange]:
        """Create missing remote topics and grow partition counts to match the source."""
        changes: list[TopicChange] = []
        existing = self.remote_partitions()
        missing = [t for t in wanted if self.flow.remote_topic(t) not in existing]
        configs = self.source_configs(missing) if missing and self.flow.sync_topic_configs else {}
        new_topics = []
        for topic in missing:
            remote = self.flow.remote_topic(topic)
            rf = (self.flow.heartbeats_replication_factor if self.flow.policy.is_heartbeats_topic(topic)
                  else self.flow.replication_factor)
            conf = configs.get(topic, {})
            new_topics.append(NewTopic(remote, wanted[topic], rf, config=conf))
            changes.append(TopicChange("created", remote, f"{wanted[topic]} partitions, configs {conf or '{}'}"))
        grow = {}
        for topic, count in wanted.items():
            remote = self.flow.remote_topic(topic)
            have = existing.get(remote)
            if have is not None and have < count:
                grow[remote] = count
                changes.append(TopicChange("partitions", remote, f"{have} -> {count}"))
        if dry_run:
            return changes
        self.seen_remote.update(self.flow.remote_topic(t) for t in wanted if self.flow.remote_topic(t) in existing)
        if new_topics:
            for name, fut in self.target.create_topics(new_topics, operation_timeout=self.timeout).items():
                try:
                    fut.result(self.timeout)
                    if name in self.seen_remote:
                        self.recreated_remote.append(name)
                        log.error("flow %s: remote topic %s had disappeared from %s (deleted?) and was recreated; "
                                  "the records it held are gone from the target, replication continues into it",
                                  self.flow.name, name, self.flow.target)
                    else:
                        log.info("flow %s: created remote topic %s", self.flow.name, name)
                except KafkaException as exc:
                    if error_code(exc) != KafkaError.TOPIC_ALREADY_EXISTS:
                        raise
        if grow:
            parts = [NewPartitions(name, count) for name, count in grow.items()]
            for name, fut in self.target.create_partitions(parts, operation_timeout=self.timeout).items():
                try:
                    fut.result(self.timeout)
                    log.info("flow %s: remote topic %s grown to %d partitions", self.flow.name, name, grow[name])
                except KafkaException as exc:
                    if error_code(exc) != KafkaError.INVALID_PARTITIONS:  # another instance got there
                        raise
        return changes

    def sync_configs(self, topics: list[str], dry_run: bool = False) -> list[TopicChange]:
        """Set on remote topics every explicitly set source config that differs (incremental)."""
        if not self.flow.sync_topic_configs or not topics:
            return []
        source = self.source_configs(topics)
        remote_names = {self.flow.remote_topic(t): t for t in source}
        remote = self._describe(self.target, list(remote_names), explicit_only=False)
        changes: list[TopicChange] = []
        resources = []
        for remote_topic, topic in remote_names.items():
            have = remote.get(remote_topic)
            if have is None:
                continue
            diff = {k: v for k, v in source[topic].items() if have.get(k) != v}
            if not diff:
                continue
            changes.append(TopicChange("config", remote_topic,
                                       ", ".join(f"{k}: {have.get(k)} -> {v}" for k, v in sorted(diff.items()))))
            resources.append(ConfigResource(ResourceType.TOPIC, remote_topic, incremental_configs=[
                ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in diff.items()]))
        if resources and not dry_run:
            for res, fut in self.target.incremental_alter_configs(resources).items():
                fut.result(self.timeout)
                log.info("flow %s: synced configs of %s", self.flow.name, res.name)
        return changes
