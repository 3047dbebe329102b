"""Typed, immutable configuration: what the loader produces and the service consumes."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from mirror_core.config.client_props import ClientKind
from mirror_core.config.keys import IN_FLIGHT_BYTES, IN_FLIGHT_RECORDS
from mirror_core.filters import NameFilter, PatternList
from mirror_core.policy import ReplicationPolicy
from mirror_core.redaction import redact

Origin = tuple[str, int]  # (key as written in the file, line)


def _frozen(d: Mapping[str, str] | None = None) -> Mapping[str, str]:
    return MappingProxyType(dict(d or {}))


@dataclass(frozen=True)
class ClusterConfig:
    """One Kafka cluster: its alias and the librdkafka settings of each kind of client.

    Settings may hold secrets (passwords, in-memory private keys): they are left out of ``repr`` and
    shown only through :meth:`redacted`.
    """

    alias: str
    bootstrap_servers: str
    #: Translated librdkafka settings per client kind (cluster-wide settings already merged in).
    clients: Mapping[ClientKind, Mapping[str, str]] = field(repr=False)
    #: Which file key and line each librdkafka setting came from, for error messages.
    origins: Mapping[str, Origin] = field(default_factory=lambda: MappingProxyType({}), repr=False)
    #: The same settings as written for Java clients (placeholders resolved), per client kind: what a
    #: Java client (Spark's Kafka source) takes unchanged, JKS stores and JAAS lines included.
    java: Mapping[ClientKind, Mapping[str, str]] = field(default_factory=lambda: MappingProxyType({}), repr=False)
    #: <alias>.schema.registry.*: the cluster's schema registry (``url``, ``basic.auth.user.info``: a secret), keys
    #: without the prefix; empty when it has none (mirror_core/schemas/registry.py)
    schema_registry: Mapping[str, str] = field(default_factory=_frozen, repr=False)

    @property
    def has_schema_registry(self) -> bool:
        return bool(self.schema_registry.get("url", "").strip())

    def client_settings(self, kind: ClientKind, overrides: Mapping[str, str] | None = None) -> dict[str, str]:
        settings = dict(self.clients.get(kind, {}))
        settings["bootstrap.servers"] = self.bootstrap_servers
        settings.update(overrides or {})
        return settings

    def redacted(self) -> dict[str, dict[str, str]]:
        return {kind: redact(dict(v)) for kind, v in self.clients.items()}


@dataclass(frozen=True)
class FlowConfig:
    """One replication direction ``source->target`` with its own filters and policy."""

    source: str
    target: str
    topics: NameFilter
    groups: NameFilter
    policy: ReplicationPolicy
    replication_factor: int
    heartbeats_replication_factor: int
    internal_replication_factor: int
    sync_topic_configs: bool
    sync_topic_configs_interval_s: float
    config_properties_exclude: PatternList
    refresh_topics: bool
    refresh_topics_interval_s: float
    emit_heartbeats: bool
    heartbeats_interval_s: float
    commit_interval_ms: int
    batch_max_records: int
    #: replication.max.in.flight.records as written; None: auto (see :attr:`in_flight_records_limit`)
    max_in_flight_records: int | None
    start_position: str
    emit_checkpoints: bool = True
    checkpoints_interval_s: float = 60.0
    checkpoints_replication_factor: int = -1
    map_snapshot_interval_s: float = 300.0
    sync_group_offsets: bool = False
    sync_group_offsets_interval_s: float = 60.0
    exactly_once: bool = False
    exactly_once_slots: int = 8
    #: target producers (at-least-once); None: auto, from the round trip when the flow starts (producer_pool.py)
    producers: int | None = None
    #: hand the target producer a partition's records only when it can send them (produce.py, Producing.release);
    #: None: auto, on with more than one producer (producer_pool.choose_producers)
    one_batch_per_partition: bool | None = None
    #: the data path the flow runs: "records" (librdkafka, record by record) or "batches" (mirror_core.wire, whole
    #: batches); replication.data.path = auto is resolved at load (config/loader.py, check_data_path)
    data_path: str = "records"
    #: why this data path, in words ("replication.data.path = batches", "auto: records, because ...")
    data_path_reason: str = "replication.data.path = records"
    #: replication.max.in.flight.bytes: what the batches path holds in flight (its batches' bytes and bookkeeping)
    max_in_flight_bytes: int = IN_FLIGHT_BYTES
    #: sync.topic.acls.*: converge topic and group ACLs on the source's (replication/acls.py, AclSync)
    sync_topic_acls: bool = True
    sync_topic_acls_interval_s: float = 600.0
    #: mirror.principals: the mirror's own principals, besides what its client settings say
    mirror_principals: tuple[str, ...] = ()
    #: remote.topics.read.only: a DENY WRITE for User:* on every remote topic the flow owns
    remote_topics_read_only: bool = False
    #: sync.topic.deletions.*: a remote topic deleted after its source topic (topic_sync.py)
    sync_topic_deletions: bool = False
    sync_topic_deletions_grace_s: float = 86400.0
    sync_topic_deletions_dry_run: bool = False
    #: schema.ids: records' schema ids (Confluent wire format) translate | preserve | off (mirror_core/schemas)
    schema_ids: str = "off"
    consumer_overrides: Mapping[str, str] = field(default_factory=_frozen, repr=False)
    producer_overrides: Mapping[str, str] = field(default_factory=_frozen, repr=False)

    @property
    def name(self) -> str:
        return f"{self.source}->{self.target}"

    @property
    def in_flight_records_limit(self) -> int | None:
        """Records in flight before fetching pauses; None: no count (the batches path, bounded by its bytes)."""
        if self.max_in_flight_records is not None:
            return self.max_in_flight_records
        return None if self.data_path == "batches" else IN_FLIGHT_RECORDS

    @property
    def worker_group_id(self) -> str:
        """Consumer group (on the source cluster) through which mirror processes share partitions."""
        return self.consumer_overrides.get("group.id", f"mirror-core.{self.source}-{self.target}")

    @property
    def progress_topic(self) -> str:
        """Compacted topic on the target holding, per source partition, the next offset to read."""
        return f"mirror-core.progress.{self.source}.internal"

    def remote_topic(self, topic: str) -> str:
        return self.policy.format_remote_topic(self.source, topic)

    def refilter(self, topics: NameFilter, groups: NameFilter) -> None:
        """The one change a running flow's configuration takes: its topic and group filters, read again from its
        file (config/reload.py). Whatever holds the flow reads them through it, so the topic discovery and the
        checkpoint emitter follow at their next round."""
        object.__setattr__(self, "topics", topics)
        object.__setattr__(self, "groups", groups)

    def should_replicate(self, topic: str) -> bool:
        """MM2's rule: (filter or heartbeats) and not internal and not a cycle back to the target."""
        p = self.policy
        if p.is_internal_topic(topic) or p.is_cycle(topic, self.target):
            return False
        return p.is_heartbeats_topic(topic) or self.topics.accepts(topic)

    def replicated_topics(self) -> Callable[[str], bool]:
        """:meth:`should_replicate`, each topic decided once: for loops over (topic, partition) keys, where
        100 groups x 2,000 partitions asked it 200,000 times for one topic (a fifth of a profiled ``translate``)."""
        decided: dict[str, bool] = {}

        def takes(topic: str) -> bool:
            if (ok := decided.get(topic)) is None:
                ok = decided[topic] = self.should_replicate(topic)
            return ok
        return takes


@dataclass(frozen=True)
class MirrorConfig:
    clusters: Mapping[str, ClusterConfig]
    flows: tuple[FlowConfig, ...]
    warnings: tuple[str, ...] = ()
    source_path: str | None = None
    #: flows configured with ``enabled = false``: started only by a workflow (e.g. the reverse flow)
    standby_flows: tuple[FlowConfig, ...] = ()

    @property
    def all_flows(self) -> tuple[FlowConfig, ...]:
        return self.flows + self.standby_flows

    def flow(self, name: str, standby: bool = True) -> FlowConfig:
        """The flow ``name`` (``source->target``), a standby flow too unless ``standby`` is False.

        The one "unknown flow" check: the KeyError's message is what every caller reports
        (``unknown flow '<name>' (enabled flows: ...)``, and the standby flows it looked at).
        """
        for f in self.all_flows if standby else self.flows:
            if f.name == name:
                return f
        known = ", ".join(f.name for f in self.flows) or "none"
        others = ", ".join(f.name for f in self.standby_flows) if standby else ""
        others = f"; standby: {others}" if others else ""
        raise KeyError(f"unknown flow '{name}' (enabled flows: {known}{others})")

    def cluster(self, alias: str) -> ClusterConfig:
        try:
            return self.clusters[alias]
        except KeyError:
            raise KeyError(f"unknown cluster '{alias}' (clusters: {', '.join(self.clusters)})") from None

    def without_registry(self, flow: FlowConfig) -> list[str]:
        """The clusters of ``flow`` (source, target) without a schema registry: empty when it can sync schemas."""
        return [a for a in (flow.source, flow.target) if not self.cluster(a).has_schema_registry]
