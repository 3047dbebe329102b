"""Remote topic management for one flow: discovery, creation, partition increases, config sync.

Invariant (owned here): a source partition is only handed to the replicator once its remote topic
exists on the target with at least as many partitions, so records always land in the same
partition number (a source topic whose remote topic the target refuses is listed in
``uncreatable`` and must not be replicated). Partitions are never decreased.

Whatever the target rejects (a config, a topic) is a problem of that topic alone: it is reported
through :meth:`TopicManager.take_problems` and the other topics go on.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

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


#: Errors about one topic's request (its configs, its name, a policy, its ACLs): the other topics of
#: the same request are unaffected, so these are reported per topic instead of failing the refresh.
_PER_TOPIC_ERRORS = frozenset({
    KafkaError.INVALID_CONFIG, KafkaError.POLICY_VIOLATION, KafkaError.INVALID_REQUEST,
    KafkaError.TOPIC_EXCEPTION, KafkaError.TOPIC_AUTHORIZATION_FAILED,
    KafkaError.INVALID_REPLICATION_FACTOR, KafkaError.INVALID_PARTITIONS, KafkaError.INVALID_REPLICA_ASSIGNMENT,
})
#: Creation errors that other configs may cure (the topic is then created without the rejected ones).
_CONFIG_ERRORS = frozenset({KafkaError.INVALID_CONFIG, KafkaError.POLICY_VIOLATION})

#: Problems (not changes) a TopicManager reports: kind -> (metric error kind, /status event name).
_PROBLEMS = {
    "config-rejected": ("topic_config", "topic config rejected by the target"),
    "create-failed": ("remote_topic_create", "remote topic cannot be created"),
}


@dataclass
class TopicChange:
    """One action taken (or, in a dry run, proposed) on a remote topic, or a problem met doing it."""

    kind: str  # created | partitions | config | missing-source; problems: config-rejected | create-failed
    topic: str
    detail: str

    @property
    def error_kind(self) -> str:
        """The ``kind`` label of the errors metric for a problem."""
        return _PROBLEMS[self.kind][0]

    def event(self) -> dict[str, object]:
        """A problem as an entry of a flow's recent events (/status)."""
        return {"at": time.time(), "topic": self.topic, "event": _PROBLEMS[self.kind][1], "detail": self.detail}


def _reason(exc: KafkaException) -> str:
    err = exc.args[0] if exc.args else None
    return err.str() if isinstance(err, KafkaError) else str(exc)


def _explicit(entries: dict[str, ConfigEntry]) -> dict[str, str]:
    """The configs set on the topic itself (not defaults of the topic's cluster)."""
    return {k: e.value for k, e in entries.items()
            if e.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value and e.value is not None}


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
        #: source topics whose remote topic the target refuses to create, with why (retried each call):
        #: the caller must not replicate them
        self.uncreatable: dict[str, str] = {}
        #: problems met since the caller last took them (:meth:`take_problems`)
        self._problems: list[TopicChange] = []
        #: (remote topic, config) -> the value (None: the deletion) the target rejected, reported once
        self._rejected: dict[tuple[str, str], str | None] = {}

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
        return {t: _explicit(entries) for t, entries in self._describe(self.source, topics).items()}

    def remote_configs(self, source_explicit: dict[str, str]) -> dict[str, str]:
        """The configs a remote topic should have set on itself, given its source's explicit ones.

        The one definition used at creation and by :meth:`sync_configs`, which deletes any other
        config set on the remote topic. The mirror adds none of its own (excluded properties are left
        out here and never touched by sync); anything it ever sets deliberately on remote topics
        belongs here, so that sync keeps it.
        """
        return dict(source_explicit)

    def take_problems(self) -> list[TopicChange]:
        """Problems met since the last call (configs the target rejected, topics it refuses), once each."""
        problems, self._problems = self._problems, []
        return problems

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
                if error_code(exc) == KafkaError.UNKNOWN_TOPIC_OR_PART:
                    continue
                raise
            result[res.name] = {name: e for name, e in entries.items()
                                if not e.is_sensitive and not self.flow.config_properties_exclude.matches(name)}
        return result

    def ensure_remote(self, wanted: dict[str, int], dry_run: bool = False) -> list[TopicChange]:
        """Create missing remote topics and grow partition counts to match the source.

        A creation the target rejects because of a copied config is done again without the
        config(s) it rejects, and what was dropped is reported. A remote topic the target refuses
        whatever its configs is reported and its source topic listed in :attr:`uncreatable`; the
        other topics go on.
        """
        existing = self.remote_partitions()
        missing = [t for t in wanted if self.flow.remote_topic(t) not in existing]
        configs = self.source_configs(missing) if missing and self.flow.sync_topic_configs else {}
        specs: dict[str, tuple[str, int, int, dict[str, str]]] = {}  # remote -> source, partitions, RF, configs
        for topic in missing:
            rf = (self.flow.heartbeats_replication_factor if self.flow.policy.is_heartbeats_topic(topic)
                  else self.flow.replication_factor)
            specs[self.flow.remote_topic(topic)] = (topic, wanted[topic], rf,
                                                    self.remote_configs(configs.get(topic, {})))
        grow = {}
        grown = []
        for topic, count in wanted.items():
            remote = self.flow.remote_topic(topic)
            have = existing.get(remote)
            if have is not None and have < count:
                grow[remote] = count
                grown.append(TopicChange("partitions", remote, f"{have} -> {count}"))
        if dry_run:
            return [TopicChange("created", remote, f"{n} partitions, configs {conf or '{}'}")
                    for remote, (_, n, _, conf) in specs.items()] + grown
        self.seen_remote.update(self.flow.remote_topic(t) for t in wanted if self.flow.remote_topic(t) in existing)
        for topic in [t for t in self.uncreatable if self.flow.remote_topic(t) in existing]:
            del self.uncreatable[topic]  # created by someone else meanwhile
        created = [c for c in (self._create_remote(name, spec, fut) for name, spec, fut in self._create_all(specs))
                   if c is not None]
        if grow:
            parts = [NewPartitions(name, count) for name, count in grow.items()]
            for name, fut in self.target.create_partitions(parts, operation_timeout=self.timeout).items():
                try:
                    fut.result(self.timeout)
                    log.info("flow %s: remote topic %s grown to %d partitions", self.flow.name, name, grow[name])
                except KafkaException as exc:
                    if error_code(exc) != KafkaError.INVALID_PARTITIONS:  # another instance got there
                        raise
        return created + grown

    def _create_all(self, specs: dict[str, tuple[str, int, int, dict[str, str]]]
                    ) -> list[tuple[str, tuple[str, int, int, dict[str, str]], Any]]:
        if not specs:
            return []
        new_topics = [NewTopic(remote, n, rf, config=conf) for remote, (_, n, rf, conf) in specs.items()]
        futures = self.target.create_topics(new_topics, operation_timeout=self.timeout)
        return [(name, specs[name], fut) for name, fut in futures.items()]

    def _create_remote(self, name: str, spec: tuple[str, int, int, dict[str, str]], fut: Any) -> TopicChange | None:
        """The outcome of one remote topic's creation: a change, or None (exists already, or refused)."""
        topic, count, rf, conf = spec
        dropped: dict[str, str] = {}
        try:
            try:
                fut.result(self.timeout)
            except KafkaException as exc:
                if error_code(exc) == KafkaError.TOPIC_ALREADY_EXISTS:
                    return None  # another instance got there
                if error_code(exc) not in _CONFIG_ERRORS or not conf:
                    raise
                without = self._create_without_rejected(name, count, rf, conf, exc)
                if without is None:
                    return None
                dropped = without
        except KafkaException as exc:
            if error_code(exc) not in _PER_TOPIC_ERRORS:
                raise
            why = _reason(exc)
            if self.uncreatable.get(topic) != why:
                log.error("flow %s: the target %s refuses to create remote topic %s (%s): source topic %s is not "
                          "replicated until this is fixed (retried at each refresh)",
                          self.flow.name, self.flow.target, name, why, topic)
                self._problems.append(TopicChange("create-failed", name, f"{why}: source topic {topic} is not "
                                                                        "replicated (retried at each refresh)"))
            self.uncreatable[topic] = why
            return None
        self.uncreatable.pop(topic, None)
        if name in self.seen_remote:
            self.recreated_remote.append(name)
            log.error("flow %s: remote topic %s had disappeared from %s (deleted?) and was recreated; "
                      "the records it held are gone from the target, replication continues into it",
                      self.flow.name, name, self.flow.target)
        else:
            log.info("flow %s: created remote topic %s", self.flow.name, name)
        kept = {k: v for k, v in conf.items() if k not in dropped}
        detail = f"{count} partitions, configs {kept or '{}'}"
        if dropped:
            for key in dropped:
                self._rejected[(name, key)] = conf[key]
            what = ", ".join(f"{k}={conf[k]} ({why})" for k, why in sorted(dropped.items()))
            log.error("flow %s: remote topic %s created without configs the target %s rejects: %s; it is "
                      "replicated without them", self.flow.name, name, self.flow.target, what)
            self._problems.append(TopicChange("config-rejected", name, f"created without {what}"))
            detail += f", without {', '.join(sorted(dropped))} (rejected by the target)"
        return TopicChange("created", name, detail)

    def _create_without_rejected(self, name: str, count: int, rf: int, conf: dict[str, str],
                                 first: KafkaException) -> dict[str, str] | None:
        """Create a remote topic the target refused with ``conf``, without the configs it rejects.

        Each config is validated alone (``validate_only``) to find the rejected ones; if the target
        still refuses the rest (a combination, or a policy that names no config), the topic is
        created without copied configs. Returns the dropped configs with the target's reasons (None:
        the topic exists already); raises the target's error when it refuses even the bare topic.
        """
        rejected: dict[str, str] = {}
        for key, value in sorted(conf.items()):
            try:
                self._create(name, count, rf, {key: value}, validate_only=True)
            except KafkaException as exc:
                if error_code(exc) == KafkaError.TOPIC_ALREADY_EXISTS:
                    return None
                if error_code(exc) not in _CONFIG_ERRORS:
                    raise
                rejected[key] = _reason(exc)
        keep = {k: v for k, v in conf.items() if k not in rejected}
        if keep and rejected:
            try:
                self._create(name, count, rf, keep)
                return rejected
            except KafkaException as exc:
                if error_code(exc) == KafkaError.TOPIC_ALREADY_EXISTS:
                    return None
                if error_code(exc) not in _CONFIG_ERRORS:
                    raise
        try:
            self._create(name, count, rf, {})
        except KafkaException as exc:
            if error_code(exc) == KafkaError.TOPIC_ALREADY_EXISTS:
                return None
            raise
        together = f"refused together: {_reason(first)}"
        return {k: rejected.get(k, together) for k in conf}

    def _create(self, name: str, count: int, rf: int, conf: dict[str, str], validate_only: bool = False) -> None:
        futures = self.target.create_topics([NewTopic(name, count, rf, config=conf)], operation_timeout=self.timeout,
                                            validate_only=validate_only)
        futures[name].result(self.timeout)

    def sync_configs(self, topics: list[str], dry_run: bool = False) -> list[TopicChange]:
        """Make the configs set on each remote topic those set on its source (incremental changes).

        A value the source sets and the remote topic lacks or differs on is SET. A config set on the
        remote topic itself (DYNAMIC_TOPIC_CONFIG) that is default on the source is DELETEd, so the
        target's default applies: MirrorMaker 2's behaviour with incremental alter configs
        (KIP-894). Excluded properties are never compared nor touched, nor are configs the source
        does not know. Changes the target rejects are reported per key (:meth:`take_problems`,
        once per value) and the others applied; ``dry_run`` only reports.
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
            want = self.remote_configs(_explicit(source[topic]))
            ops: dict[str, str | None] = {k: v for k, v in want.items() if k not in have or have[k].value != v}
            ops.update({k: None for k in _explicit(have) if k not in want and k in source[topic]})
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
                self._rejected.pop((remote_topic, key), None)
            if applied:
                changes.append(_config_change(remote_topic, applied, before[remote_topic]))
                log.info("flow %s: synced configs of %s", self.flow.name, remote_topic)
            new = {k: why for k, why in bad.items()
                   if (remote_topic, k) not in self._rejected or self._rejected[(remote_topic, k)] != ops[k]}
            for key in bad:
                self._rejected[(remote_topic, key)] = ops[key]
            if new:
                what = ", ".join(f"{_op(k, ops[k])} ({why})" for k, why in sorted(new.items()))
                log.error("flow %s: the target %s rejects config changes of remote topic %s: %s; the other configs "
                          "are synced and replication goes on", self.flow.name, self.flow.target, remote_topic, what)
                self._problems.append(TopicChange("config-rejected", remote_topic, f"rejected {what}"))
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
                elif error_code(exc) not in _PER_TOPIC_ERRORS:
                    raise
                elif len(ops) == 1:
                    outcome[res.name] = dict.fromkeys(ops, _reason(exc))
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
                    if error_code(exc) not in _PER_TOPIC_ERRORS:
                        raise
                    why[key] = _reason(exc)
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
