"""Topic configs of one flow's remote topics: the configs set on each source topic (minus
``config.properties.exclude``) are the ones set on its remote topic, at creation and by sync.

Changes the target rejects are problems of that config alone (:class:`TopicProblems`, reported once
per value); the other configs are applied.
"""

from __future__ import annotations

import logging
import time

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    ResourceType,
)

from mirror_core import authorization
from mirror_core.authorization import Access
from mirror_core.clients import error_code
from mirror_core.config.model import ClusterConfig, FlowConfig
from mirror_core.replication.topic_changes import PER_TOPIC_ERRORS, TopicChange, TopicProblems, error_reason
from mirror_core.replication.topic_limits import LimitRead
from mirror_core.stores.internal_topics import max_message_bytes

log = logging.getLogger(__name__)


def explicit_configs(entries: dict[str, ConfigEntry]) -> dict[str, str]:
    """The configs set on the topic itself (not defaults of the topic's cluster)."""
    return {k: e.value for k, e in entries.items()
            if e.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value and e.value is not None}


def remote_configs(source_explicit: dict[str, str]) -> dict[str, str]:
    """The configs a remote topic should have set on itself, given its source's explicit ones.

    The one definition used at creation (:meth:`TopicManager.ensure_remote`) and by
    :meth:`TopicConfigSync.sync`, which deletes any other config set on the remote topic. The mirror
    adds none of its own (excluded properties are left out here and never touched by sync); anything
    it ever sets deliberately on remote topics belongs here, so that sync keeps it.
    """
    return dict(source_explicit)


class TopicConfigSync:
    """Keeps the configs set on a flow's remote topics those set on their sources."""

    def __init__(self, flow: FlowConfig, source_admin: AdminClient, target_admin: AdminClient,
                 problems: TopicProblems, timeout: float = 15.0,
                 clusters: tuple[ClusterConfig, ClusterConfig] | None = None) -> None:
        self.flow = flow
        self.clusters = clusters  # (source, target): to name them when an ACL is missing
        self.source = source_admin
        self.target = target_admin
        self.problems = problems
        #: source topics whose configs the mirror may not read (a missing DescribeConfigs ACL): the line
        #: naming the ACL, per topic. Such a topic is not created on the target (its copy could get the
        #: wrong cleanup policy); the others go on.
        self.denied: dict[str, str] = {}
        self.timeout = timeout
        #: remote topic -> its max.message.bytes as the target applied it at the last sync, and when that was read
        #: (time.monotonic): the replicator's batch limits follow it where it is newer than their own read
        #: (topic_limits.py)
        self.target_limits: dict[str, LimitRead] = {}

    def source_configs(self, topics: list[str]) -> dict[str, dict[str, str]]:
        """Explicitly set (non-default) configs of source topics, minus excluded properties."""
        return {t: explicit_configs(entries) for t, entries in self._describe(self.source, topics).items()}

    def _describe(self, admin: AdminClient, topics: list[str]) -> dict[str, dict[str, ConfigEntry]]:
        """Per topic: its non-sensitive config entries, minus excluded properties."""
        if not topics:
            return {}
        resources = [ConfigResource(ResourceType.TOPIC, t) for t in topics]
        result: dict[str, dict[str, ConfigEntry]] = {}
        for res, fut in admin.describe_configs(resources, request_timeout=self.timeout).items():
            try:
                entries = fut.result(self.timeout)
            except KafkaException as exc:
                if self.clusters is not None:
                    # One topic refused is that topic's problem, not the flow's: name the ACL, skip it.
                    line = authorization.denied_line(self.flow.name, exc, Access(
                        "DescribeConfigs", res.name, self.clusters[0 if admin is self.source else 1]))
                    if line is not None:
                        if self.denied.get(res.name) != line:
                            log.error("%s", line)
                        self.denied[res.name] = line
                        continue
                if error_code(exc) == KafkaError.UNKNOWN_TOPIC_OR_PART:
                    continue
                raise
            self.denied.pop(res.name, None)
            limit = entries.get("max.message.bytes") if admin is self.target else None
            if limit is not None and limit.value is not None:
                self.target_limits[res.name] = LimitRead(int(limit.value), time.monotonic())
            result[res.name] = {name: e for name, e in entries.items()
                                if not e.is_sensitive and not self.flow.config_properties_exclude.matches(name)}
        return result

    def remote_limits(self, remotes: list[str]) -> dict[str, int | None]:
        """The largest record batch each remote topic accepts (stores.internal_topics.max_message_bytes): None for
        a topic the target does not know yet, left out when it does not answer for it."""
        return max_message_bytes(self.target, remotes, self.timeout, f"flow {self.flow.name}")

    def sync(self, topics: list[str], dry_run: bool = False) -> list[TopicChange]:
        """Make the configs set on each remote topic those set on its source (incremental changes).

        A value the source sets and the remote topic lacks or differs on is SET. A config set on the
        remote topic itself (DYNAMIC_TOPIC_CONFIG) that is default on the source is DELETEd, so the
        target's default applies: MirrorMaker 2's behaviour with incremental alter configs
        (KIP-894). Excluded properties are never compared nor touched, nor are configs the source
        does not know. Changes the target rejects are reported per key (through the shared
        :class:`TopicProblems`, once per value) and the others applied; ``dry_run`` only reports.
        """
        if not self.flow.sync_topic_configs or not topics:
            return []
        source = self._describe(self.source, topics)
        remote_names = {self.flow.remote_topic(t): t for t in source}
        remote = self._describe(self.target, list(remote_names))
        plans: dict[str, dict[str, str | None]] = {}  # remote topic -> config -> new value (None: delete)
        before: dict[str, dict[str, str | None]] = {}
        for remote_topic, topic in sorted(remote_names.items()):
            have = remote.get(remote_topic)
            if have is None:
                continue
            want = remote_configs(explicit_configs(source[topic]))
            ops: dict[str, str | None] = {k: v for k, v in want.items() if k not in have or have[k].value != v}
            ops.update({k: None for k in explicit_configs(have) if k not in want and k in source[topic]})
            if ops:
                plans[remote_topic] = ops
                before[remote_topic] = {k: have[k].value if k in have else None for k in ops}
        if dry_run:
            return [_config_change(t, ops, before[t]) for t, ops in plans.items()]
        changes = []
        for remote_topic, bad in self._alter(plans).items():
            if bad is None:
                continue  # the remote topic is gone: the next refresh recreates it
            ops = plans[remote_topic]
            applied = {k: v for k, v in ops.items() if k not in bad}
            for key in applied:
                self.problems.rejected.pop((remote_topic, key), None)
            if applied:
                changes.append(_config_change(remote_topic, applied, before[remote_topic]))
                log.info("flow %s: synced configs of %s", self.flow.name, remote_topic)
            reported = self.problems.rejected
            new = {k: why for k, why in bad.items()
                   if (remote_topic, k) not in reported or reported[(remote_topic, k)] != ops[k]}
            for key in bad:
                reported[(remote_topic, key)] = ops[key]
            if new:
                what = ", ".join(f"{_op(k, ops[k])} ({why})" for k, why in sorted(new.items()))
                log.error("flow %s: the target %s rejects config changes of remote topic %s: %s; the other configs "
                          "are synced and replication goes on", self.flow.name, self.flow.target, remote_topic, what)
                self.problems.add(TopicChange("config-rejected", remote_topic, f"rejected {what}"))
        return changes

    def _alter(self, plans: dict[str, dict[str, str | None]]) -> dict[str, dict[str, str] | None]:
        """Apply config changes to remote topics. Returns, per topic, the configs the target rejected
        with its reasons (None: the topic is gone).

        All topics go in one request; a topic whose changes are rejected is retried one config at a
        time, repeated while that makes progress (the valid values of one config may depend on
        another's), so one bad value never holds back the others.
        """
        if not plans:
            return {}
        resources = [ConfigResource(ResourceType.TOPIC, t, incremental_configs=_entries(ops))
                     for t, ops in plans.items()]
        outcome: dict[str, dict[str, str] | None] = {}
        for res, fut in self.target.incremental_alter_configs(resources).items():
            ops = plans[res.name]
            try:
                fut.result(self.timeout)
                outcome[res.name] = {}
            except KafkaException as exc:
                if error_code(exc) == KafkaError.UNKNOWN_TOPIC_OR_PART:
                    outcome[res.name] = None
                elif error_code(exc) not in PER_TOPIC_ERRORS:
                    raise
                elif len(ops) == 1:
                    outcome[res.name] = dict.fromkeys(ops, error_reason(exc))
                else:
                    outcome[res.name] = self._alter_one_by_one(res.name, ops)
        return outcome

    def _alter_one_by_one(self, topic: str, ops: dict[str, str | None]) -> dict[str, str] | None:
        pending, why = dict(ops), {}
        progress = True
        while pending and progress:
            progress = False
            for key, value in list(pending.items()):
                res = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=_entries({key: value}))
                try:
                    self.target.incremental_alter_configs([res])[res].result(self.timeout)
                except KafkaException as exc:
                    if error_code(exc) == KafkaError.UNKNOWN_TOPIC_OR_PART:
                        return None
                    if error_code(exc) not in PER_TOPIC_ERRORS:
                        raise
                    why[key] = error_reason(exc)
                    continue
                del pending[key]
                progress = True
        return {k: why[k] for k in pending}


def _op(key: str, value: str | None) -> str:
    return f"{key}={value}" if value is not None else f"{key} (delete)"


def _entries(ops: dict[str, str | None]) -> list[ConfigEntry]:
    return [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) if v is not None
            else ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE) for k, v in ops.items()]


def _config_change(topic: str, ops: dict[str, str | None], before: dict[str, str | None]) -> TopicChange:
    return TopicChange("config", topic, ", ".join(
        f"{k}: {before.get(k)} -> {'(default)' if v is None else v}" for k, v in sorted(ops.items())))
