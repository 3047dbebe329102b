"""Remote topic management for one flow: discovery, creation, partition increases.

Invariant (owned here): a source partition is only handed to the replicator once its remote topic
exists on the target with at least as many partitions, so records always land in the same
partition number (a source topic whose remote topic the target refuses is listed in
``uncreatable`` and must not be replicated). Partitions are never decreased.

Whatever the target rejects (a config, a topic) is a problem of that topic alone: it is reported
through :meth:`TopicManager.take_problems` and the other topics go on. Topic configs (at creation the
same as by sync) are :mod:`.topic_configs`; changes and problems :mod:`.topic_changes`.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicCollection
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from mirror_core.clients import error_code
from mirror_core.config.model import ClusterConfig, FlowConfig
from mirror_core.errors import ClusterUnavailable
from mirror_core.replication.acls import AclSync, AclSyncError, acl_changes, no_authorizer, own_principals
from mirror_core.replication.topic_changes import (
    CONFIG_ERRORS,
    PER_TOPIC_ERRORS,
    TopicChange,
    TopicProblems,
    error_reason,
)
from mirror_core.replication.topic_configs import TopicConfigSync, remote_configs

log = logging.getLogger(__name__)


class TopicManager:
    def __init__(self, flow: FlowConfig, source_admin: AdminClient, target_admin: AdminClient,
                 timeout: float = 15.0, clusters: tuple[ClusterConfig, ClusterConfig] | None = None) -> None:
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
        #: problems met since the caller last took them (:meth:`take_problems`), by creation and config sync
        self.problems = TopicProblems()
        #: the remote topics' configs: the source's explicit ones (``configs.sync`` keeps them so)
        self.configs = TopicConfigSync(flow, source_admin, target_admin, self.problems, timeout, clusters)
        #: the running mirror's topic watcher (made with ``clusters``) converges ACLs and keeps the read-only guard
        #: every sync.topic.acls.interval.seconds, from :meth:`ensure_remote` (:meth:`watch_acls`)
        self.acls = (AclSync(flow, source_admin, target_admin, own_principals(flow, *clusters), timeout)
                     if clusters is not None else None)
        #: ACL changes the watcher made since the caller last took them (for the drift history: take_acl_changes)
        self.acl_changes: list[TopicChange] = []

    def source_topics(self, timeout: float | None = None) -> dict[str, int]:
        """Source topics this flow replicates, with their partition counts (``timeout``: this call's own)."""
        try:
            md = self.source.list_topics(timeout=self.timeout if timeout is None else timeout)
        except KafkaException as exc:
            raise ClusterUnavailable(f"source cluster {self.flow.source} is unreachable ({error_reason(exc)})") from exc
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
            except (KafkaException, TimeoutError) as exc:
                if isinstance(exc, KafkaException) and error_code(exc) != KafkaError._TIMED_OUT:
                    continue  # gone meanwhile: the next refresh reports it
                # e.g. the broker asked was killed (librdkafka's timer or ours, whichever fires first)
                raise ClusterUnavailable(f"source cluster {self.flow.source} did not describe topic {name} within "
                                         f"{self.timeout:g}s") from exc
        return out

    def remote_partitions(self, timeout: float | None = None) -> dict[str, int]:
        try:
            md = self.target.list_topics(timeout=self.timeout if timeout is None else timeout)
        except KafkaException as exc:
            raise ClusterUnavailable(f"target cluster {self.flow.target} is unreachable ({error_reason(exc)})") from exc
        return {name: len(t.partitions) for name, t in md.topics.items() if t.error is None}

    def take_problems(self) -> list[TopicChange]:
        """Problems met since the last call (configs the target rejected, topics it refuses), once each."""
        return self.problems.take()

    def ensure_remote(self, wanted: dict[str, int], dry_run: bool = False,
                      timeout: float | None = None) -> list[TopicChange]:
        """Create missing remote topics and grow partition counts to match the source.

        A creation the target rejects because of a copied config is done again without the
        config(s) it rejects, and what was dropped is reported. A remote topic the target refuses
        whatever its configs is reported and its source topic listed in :attr:`uncreatable`; the
        other topics go on.
        """
        existing = self.remote_partitions(timeout)
        missing = [t for t in wanted if self.flow.remote_topic(t) not in existing]
        configs = self.configs.source_configs(missing) if missing and self.flow.sync_topic_configs else {}
        specs: dict[str, tuple[str, int, int, dict[str, str]]] = {}  # remote -> source, partitions, RF, configs
        for topic in missing:
            if topic in self.configs.denied:
                # Its configs are unknown (an ACL is missing): a copy with default configs could get the
                # wrong cleanup policy or retention. Not created, not replicated, reported; the others go on.
                if self.uncreatable.get(topic) != self.configs.denied[topic]:
                    self.problems.add(TopicChange("create-failed", self.flow.remote_topic(topic),
                                                  f"{self.configs.denied[topic]}: source topic {topic} is not "
                                                  "replicated until then (retried at each refresh)"))
                self.uncreatable[topic] = self.configs.denied[topic]
                continue
            rf = (self.flow.heartbeats_replication_factor if self.flow.policy.is_heartbeats_topic(topic)
                  else self.flow.replication_factor)
            specs[self.flow.remote_topic(topic)] = (topic, wanted[topic], rf,
                                                    remote_configs(configs.get(topic, {})))
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
        self.watch_acls([t for t in wanted if t not in self.uncreatable])
        return created + grown

    def watch_acls(self, topics: list[str], now: float | None = None) -> list[TopicChange]:
        """The running mirror's ACL convergence and read-only guard, when due (sync.topic.acls.interval.seconds).

        A failure is said once per round, reported as a problem of the flow and retried at the next refresh;
        it never stops topic discovery. The changes are logged and kept for :meth:`take_acl_changes`.
        """
        acls, guard = self.flow.sync_topic_acls, self.flow.remote_topics_read_only
        now = time.monotonic() if now is None else now
        if self.acls is None or not (acls or guard) or now < self.acls.next_due:
            return []
        try:
            plan = self.acls.plan(topics, acls=acls, read_only=guard)
            if not plan.empty():
                self.acls.apply(plan)
        except (KafkaException, TimeoutError) as exc:
            if isinstance(exc, KafkaException) and no_authorizer(exc):
                self.acls.next_due = now + 3600.0  # no ACLs to sync on these clusters
                return []
            if isinstance(exc, KafkaException) and error_code(exc) == KafkaError.CLUSTER_AUTHORIZATION_FAILED:
                self.acls.next_due = now + max(3600.0, self.flow.sync_topic_acls_interval_s)
                log.warning("flow %s: ACL sync skipped: the mirror may not describe ACLs on %s or %s (grant its "
                            "principal DESCRIBE and, on %s, ALTER on the cluster, or set sync.topic.acls.enabled = "
                            "false and remote.topics.read.only = false for this flow); tried again in an hour",
                            self.flow.name, self.flow.source, self.flow.target, self.flow.target)
                return []
            log.warning("flow %s: ACL sync failed (%s); retrying at the next refresh", self.flow.name,
                        error_reason(exc) if isinstance(exc, KafkaException) else "timed out")
            return []
        except AclSyncError as exc:
            log.error("%s", exc)
            self.problems.add(TopicChange("acl-refused", f"flow:{self.flow.name}", str(exc)))
            self.acls.next_due = now + self.flow.sync_topic_acls_interval_s
            return []
        self.acls.next_due = now + self.flow.sync_topic_acls_interval_s
        changes = acl_changes(plan.add, plan.remove)
        for change in changes:
            log.info("flow %s: %s %s: %s", self.flow.name, change.kind, change.topic, change.detail)
        self.acl_changes = (self.acl_changes + changes)[-1000:]  # bounded until someone takes them
        return changes

    def take_acl_changes(self) -> list[TopicChange]:
        """ACL changes the watcher made since the last call (the service records them in the drift history)."""
        taken, self.acl_changes = self.acl_changes, []
        return taken

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
                if error_code(exc) not in CONFIG_ERRORS or not conf:
                    raise
                without = self._create_without_rejected(name, count, rf, conf, exc)
                if without is None:
                    return None
                dropped = without
        except KafkaException as exc:
            if error_code(exc) not in PER_TOPIC_ERRORS:
                raise
            why = error_reason(exc)
            if self.uncreatable.get(topic) != why:
                log.error("flow %s: the target %s refuses to create remote topic %s (%s): source topic %s is not "
                          "replicated until this is fixed (retried at each refresh)",
                          self.flow.name, self.flow.target, name, why, topic)
                self.problems.add(TopicChange("create-failed", name, f"{why}: source topic {topic} is not "
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
                self.problems.rejected[(name, key)] = conf[key]
            what = ", ".join(f"{k}={conf[k]} ({why})" for k, why in sorted(dropped.items()))
            log.error("flow %s: remote topic %s created without configs the target %s rejects: %s; it is "
                      "replicated without them", self.flow.name, name, self.flow.target, what)
            self.problems.add(TopicChange("config-rejected", name, f"created without {what}"))
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
                if error_code(exc) not in CONFIG_ERRORS:
                    raise
                rejected[key] = error_reason(exc)
        keep = {k: v for k, v in conf.items() if k not in rejected}
        if keep and rejected:
            try:
                self._create(name, count, rf, keep)
                return rejected
            except KafkaException as exc:
                if error_code(exc) == KafkaError.TOPIC_ALREADY_EXISTS:
                    return None
                if error_code(exc) not in CONFIG_ERRORS:
                    raise
        try:
            self._create(name, count, rf, {})
        except KafkaException as exc:
            if error_code(exc) == KafkaError.TOPIC_ALREADY_EXISTS:
                return None
            raise
        together = f"refused together: {error_reason(first)}"
        return {k: rejected.get(k, together) for k in conf}

    def _create(self, name: str, count: int, rf: int, conf: dict[str, str], validate_only: bool = False) -> None:
        futures = self.target.create_topics([NewTopic(name, count, rf, config=conf)], operation_timeout=self.timeout,
                                            validate_only=validate_only)
        futures[name].result(self.timeout)
