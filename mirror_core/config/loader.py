"""Validate an mm2.properties file once, at the edge, into a typed :class:`MirrorConfig`.

Every problem is reported as a :class:`ConfigError` naming the key and line; unknown keys become
warnings (MirrorMaker 2 files carry many Connect-specific keys that are harmless here).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

from mirror_core.config.client_props import KNOWN_JAVA_KEYS, ClientKind, Translation, applies_to, translate
from mirror_core.config.errors import ConfigError, SettingError
from mirror_core.config.keys import (
    ALIASES,
    KEYS_BY_NAME,
    known_key_names,
    no_effect_reason,
)
from mirror_core.config.model import ClusterConfig, FlowConfig, MirrorConfig, Origin
from mirror_core.config.properties import Property, load_properties, parse_properties
from mirror_core.config.providers import resolve_placeholders
from mirror_core.config.sasl import client_conf
from mirror_core.config.wire_support import wire_problems
from mirror_core.filters import NameFilter
from mirror_core.policy import policy_from_name
from mirror_core.redaction import register_secret


def _longer_cycle(edges: set[tuple[str, str]], source: str, target: str) -> list[str] | None:
    """A cycle through the edge ``source->target`` of three clusters or more (``[source, target, ..., source]``),
    or None: a path back from ``target`` to ``source`` that does not take the direct edge back."""
    paths = [[source, target]]
    while paths:
        path = paths.pop()
        for a, b in sorted(edges):
            if a != path[-1] or (a == target and b == source and len(path) == 2):
                continue
            if b == source:
                return [*path, b]
            if b not in path:
                paths.append([*path, b])
    return None

_ALIAS_RE = re.compile(r"^[A-Za-z0-9_\-]+$")
_FLOW_RE = re.compile(r"^([^.\s]+?)->([^.\s]+?)\.(.+)$")
_KINDS: tuple[ClientKind, ...] = ("consumer", "producer", "admin")
# Client settings that may be given once for every cluster (MM2 accepts these at top level).
_GLOBAL_CLIENT_PREFIXES = ("security.protocol", "sasl.", "ssl.", "client.")
# '<name>.' followed by one of these can only be a setting of a cluster named <name>: if <name> is not
# listed in 'clusters', the key refers to an undefined cluster. ('client.' alone is too broad: Connect's
# 'connector.client.config.override.policy' is a global key.)
_CLUSTER_SETTINGS = ("bootstrap.servers", "security.protocol", "client.id")
_CLUSTER_PREFIXES = ("consumer.", "producer.", "admin.", "sasl.", "ssl.")
#: <alias>.schema.registry.url / .basic.auth.user.info: the cluster's schema registry (ClusterConfig.schema_registry)
REGISTRY_PREFIX = "schema.registry."
# MirrorMaker 2's connector-level client prefixes (source.consumer.*, target.admin.*, ...): global keys.
_CONNECTOR_PREFIXES = ("source", "target")


def load_config(path: str | Path, validate_clients: bool = True) -> MirrorConfig:
    props = load_properties(path)
    return parse_config(props, source=str(path), validate_clients=validate_clients)


def parse_text(text: str, validate_clients: bool = True, environ: Mapping[str, str] | None = None) -> MirrorConfig:
    return parse_config(parse_properties(text), validate_clients=validate_clients, environ=environ)


def did_you_mean(key: str, candidates: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` when a candidate is close to ``key``, else an empty string."""
    close = difflib.get_close_matches(key, list(candidates), n=1, cutoff=0.8)
    return f" (did you mean '{close[0]}'?)" if close else ""



def _auto(p: Property | None) -> str:
    """How a data-path reason names auto: set by the key's line ``p``, or the default."""
    return "auto" if p is not None else "auto (the default)"

class _Builder:
    def __init__(self, props: Iterable[Property], source: str | None, validate_clients: bool = True,
                 environ: Mapping[str, str] | None = None) -> None:
        self.source = source
        self.validate = validate_clients
        self._translations: dict[tuple[tuple[str, str], ...], Translation] = {}
        self.warnings: list[str] = []
        props = resolve_placeholders(props, source, lambda w: self.warnings.append(w), environ)
        self.props: dict[str, Property] = {}
        for p in props:
            if p.key in self.props:
                self.warn(f"key '{p.key}' set twice (lines {self.props[p.key].line} and {p.line}); "
                          "the last value wins")
            self.props[p.key] = p

    def where(self, p: Property) -> str:
        return f"{self.source}, line {p.line}" if self.source else f"line {p.line}"

    def warn(self, message: str) -> None:
        self.warnings.append(message)

    def error(self, message: str, p: Property | None = None, key: str | None = None) -> ConfigError:
        return ConfigError(message, key=key or (p.key if p else None), line=p.line if p else None,
                           source=self.source)

    def put_setting(self, into: dict[str, Property], name: str, p: Property, prefix: str = "") -> None:
        """Record ``p`` as the setting ``name``, written under its name or an older one (``prefix`` is
        ``A->B.`` for flow keys). When both are set, the current name wins, as in MirrorMaker 2."""
        other = into.get(name)
        if other is None:
            into[name] = p
            return
        names = (name, *KEYS_BY_NAME[name].aliases)
        kept, dropped = sorted((other, p), key=lambda q: names.index(q.key[len(prefix):]))
        into[name] = kept
        self.warn(f"{self.where(kept)}: '{kept.key}' and '{dropped.key}' (line {dropped.line}) set the same "
                  f"setting; '{kept.key}' wins (as in MirrorMaker 2) and '{dropped.key}' is ignored")

    def parse_value(self, name: str, p: Property | None) -> Any:
        definition = KEYS_BY_NAME[name]
        raw = p.value if p is not None else definition.default
        try:
            return definition.parse(raw)
        except ValueError as exc:
            raise self.error(str(exc), p, key=p.key if p else name) from None

    # -- build -------------------------------------------------------------------------------
    def build(self) -> MirrorConfig:
        clusters_prop = self.props.get("clusters")
        if clusters_prop is None:
            raise self.error("required key 'clusters' is missing (e.g. clusters = dc1, dc2)",
                             key="clusters")
        aliases = self.parse_value("clusters", clusters_prop)
        if not aliases:
            raise self.error("'clusters' lists no cluster alias", clusters_prop)
        for alias in aliases:
            if not _ALIAS_RE.match(alias):
                raise self.error(f"cluster alias '{alias}' may only contain letters, digits, '_' and '-'",
                                 clusters_prop)
        if len(set(aliases)) != len(aliases):
            raise self.error("'clusters' lists an alias twice", clusters_prop)

        globals_: dict[str, Property] = {}
        global_client: dict[str, Property] = {}
        cluster_keys: dict[str, dict[str, Property]] = {a: {} for a in aliases}
        flow_keys: dict[tuple[str, str], dict[str, Property]] = {}

        for key, p in self.props.items():
            if key == "clusters":
                continue
            flow = _FLOW_RE.match(key)
            if flow:
                src, dst, rest = flow.groups()
                for alias in (src, dst):
                    if alias not in aliases:
                        raise self.error(f"flow refers to undefined cluster '{alias}' "
                                         f"(clusters: {', '.join(aliases)})", p)
                if src == dst:
                    raise self.error("a flow needs two different clusters", p)
                flow_keys.setdefault((src, dst), {})[rest] = p
                continue
            head, _, rest = key.partition(".")
            if head in aliases and rest:
                cluster_keys[head][rest] = p
                continue
            name = ALIASES.get(key, key)
            if name in KEYS_BY_NAME:
                self.put_setting(globals_, name, p)
            elif (reason := no_effect_reason(key)) is not None:
                self.warn(f"{self.where(p)}: '{key}' {reason}")
            elif key.startswith(tuple(f"{k}." for k in _KINDS)) or key.startswith(_GLOBAL_CLIENT_PREFIXES):
                global_client[key] = p
            elif head in _CONNECTOR_PREFIXES:
                self.warn(f"{self.where(p)}: '{key}': MirrorMaker 2 sets connector-level client settings "
                          f"({head}.*) itself; here write them per cluster (<alias>.consumer.*, <alias>.producer.*,"
                          " <alias>.admin.*); ignored")
            elif (head not in _CONNECTOR_PREFIXES and _ALIAS_RE.match(head)
                  and (rest in _CLUSTER_SETTINGS or rest.startswith(_CLUSTER_PREFIXES))):
                raise self.error(f"'{key}' is a setting of cluster '{head}', which is not listed in "
                                 f"'clusters' ({', '.join(aliases)})", p)
            elif key.endswith(".bootstrap.servers"):
                raise self.error(f"cluster '{key.rsplit('.bootstrap.servers', 1)[0]}' is not listed in "
                                 f"'clusters' ({', '.join(aliases)})", p)
            else:
                self.warn(f"{self.where(p)}: unknown key '{key}'{did_you_mean(key, known_key_names())}; ignored")

        global_enabled = globals_.pop("enabled", None)
        if global_enabled is not None:
            self.warn(f"{self.where(global_enabled)}: a global 'enabled' has no effect (MirrorMaker 2 enables "
                      "flows one by one: A->B.enabled = true); ignored")
        clusters = {a: self.build_cluster(a, cluster_keys[a], global_client) for a in aliases}
        self.check_one_kerberos_identity(clusters)
        flows: list[FlowConfig] = []
        standby: list[FlowConfig] = []
        for (src, dst), keys in flow_keys.items():
            enabled_prop = keys.get("enabled")
            if enabled_prop is None:
                continue
            # An explicitly disabled flow is a standby: configured (e.g. the reverse direction for
            # failover), not run until a workflow starts it through the control plane.
            enabled = self.parse_value("enabled", enabled_prop)
            (flows if enabled else standby).append(self.build_flow(src, dst, keys, globals_, clusters))
        configured = [*flows, *standby]
        flows = self.check_identity_rings(flows, configured, flow_keys, globals_)
        standby = self.check_identity_rings(standby, configured, flow_keys, globals_)
        if not flows:
            hint = "; a global 'enabled' has no effect" if global_enabled is not None else ""
            raise self.error("no replication flow is enabled (set e.g. "
                             f"{aliases[0]}->{aliases[-1]}.enabled = true{hint})", global_enabled, key="enabled")
        return MirrorConfig(MappingProxyType(clusters), tuple(flows), tuple(dict.fromkeys(self.warnings)),
                            self.source, tuple(standby))

    def check_identity_rings(self, group: list[FlowConfig], every: list[FlowConfig],
                             flow_keys: Mapping[tuple[str, str], Mapping[str, Property]],
                             globals_: Mapping[str, Property]) -> list[FlowConfig]:
        """``group``'s identity-policy flows on batches that lie on a cycle of three clusters or more of the
        configured identity flows: refused when batches was asked for, else (auto) on records. A batch copied whole
        tells only which flow wrote it (replication/mirror_writes.py), one hop; around such a cycle a record would
        come back through the third cluster (the records path's provenance chain holds every hop)."""
        edges = {(f.source, f.target) for f in every if f.policy.uses_provenance}
        out = []
        for f in group:
            ring = _longer_cycle(edges, f.source, f.target) if f.policy.uses_provenance and \
                f.data_path == "batches" else None
            if ring is not None:
                why = (f"the identity policy's flows form the cycle {'->'.join(ring)}, around which batches copied "
                       "whole would come back (they say only which cluster they were copied from)")
                keys = flow_keys[(f.source, f.target)]
                p = keys.get("replication.data.path") or globals_.get("replication.data.path")
                if f.data_path_reason == "replication.data.path = batches":
                    raise self.error(f"replication.data.path = batches: {why}: use replication.data.path = records "
                                     "(or auto) for this flow", p)
                f = replace(f, data_path="records", data_path_reason=f"{_auto(p)}: records, because {why}")
            out.append(f)
        return out

    def check_one_kerberos_identity(self, clusters: dict[str, ClusterConfig]) -> None:
        """A process has one Kerberos ticket cache: clients of two principals would overwrite each other's
        tickets and authenticate as whichever ran kinit last."""
        principals: dict[str, str] = {}
        for alias, cluster in clusters.items():
            for settings in cluster.clients.values():
                if settings.get("sasl.mechanisms") == "GSSAPI" and "sasl.kerberos.principal" in settings:
                    principals.setdefault(settings["sasl.kerberos.principal"], alias)
        if len(principals) > 1:
            (first, a), (second, b) = list(principals.items())[:2]
            origin = clusters[b].origins.get("sasl.kerberos.principal")
            raise ConfigError(f"clusters '{a}' and '{b}' log in as different Kerberos principals ({first}, {second}): "
                              "one process has one ticket cache, so one would authenticate as the other; use one "
                              "principal, or run one mirror process per principal",
                              key=origin[0] if origin else f"{b}.sasl.jaas.config",
                              line=origin[1] if origin else None, source=self.source)

    def translate_client(self, kind: ClientKind, props: dict[str, Property], origins: dict[str, Origin],
                         owner: str, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """librdkafka settings of one client from its Java settings (precedence already applied);
        with ``base`` (the cluster's settings, for a flow's overrides), validated on top of it."""
        java = {k: p.value for k, p in props.items()}
        cache_key = tuple(sorted(java.items()))
        try:
            # The consumer, producer and admin clients of a cluster mostly share their settings: read its
            # stores (and parse its JAAS line) once, not once per kind of client.
            translation = self._translations.get(cache_key)
            if translation is None:
                translation = self._translations[cache_key] = translate(java)
        except SettingError as exc:
            at = props.get(exc.key)
            key = at.key if at else exc.key
            if at is None:  # a missing setting: name it as this cluster or flow would write it
                key = next((p.key[:-len(k)] + exc.key for k, p in props.items() if p.key.endswith(k)), exc.key)
            raise self.error(str(exc), at, key=key) from None
        for java_key, w in translation.warnings:
            p = props.get(java_key)
            self.warn(f"{self.where(p)}: {w}" if p else w)
        settings: dict[str, str] = {}
        for k, v in translation.settings.items():
            if applies_to(k, kind):
                settings[k] = v
                p = props.get(translation.sources.get(k, k))
                if p is not None:
                    origins[k] = (p.key, p.line)
        if self.validate:
            self.check_client(kind, settings, origins, owner, base)
        return settings

    def split_by_kind(self, keys: dict[str, Property]) -> tuple[dict[str, Property],
                                                                 dict[ClientKind, dict[str, Property]]]:
        common: dict[str, Property] = {}
        per_kind: dict[ClientKind, dict[str, Property]] = {k: {} for k in _KINDS}
        for rest, p in keys.items():
            head, _, tail = rest.partition(".")
            if head in _KINDS and tail:
                per_kind[head][tail] = p
            else:
                common[rest] = p
        return common, per_kind

    def build_cluster(self, alias: str, keys: dict[str, Property],
                      global_client: dict[str, Property]) -> ClusterConfig:
        bootstrap = keys.pop("bootstrap.servers", None)
        if bootstrap is None or not bootstrap.value.strip():
            raise self.error(f"cluster '{alias}' has no bootstrap servers", bootstrap,
                             key=f"{alias}.bootstrap.servers")
        for rest, p in list(keys.items()):
            if rest in KEYS_BY_NAME or rest in ALIASES:
                self.warn(f"{self.where(p)}: '{p.key}' sets a flow setting on a cluster; "
                          f"set it globally or per flow (A->B.{rest}); ignored")
                del keys[rest]
            elif (reason := no_effect_reason(rest, cluster_level=True)) is not None:
                self.warn(f"{self.where(p)}: '{p.key}' {reason}")
                del keys[rest]
        # <alias>.schema.registry.*: the registry's address and credentials, not client settings.
        registry = {rest[len(REGISTRY_PREFIX):]: keys.pop(rest).value.strip() for rest in list(keys)
                    if rest.startswith(REGISTRY_PREFIX)}
        if registry.get("basic.auth.user.info"):
            register_secret(registry["basic.auth.user.info"])
        origins: dict[str, Origin] = {"bootstrap.servers": (bootstrap.key, bootstrap.line)}
        g_common, g_kinds = self.split_by_kind(global_client)
        c_common, c_kinds = self.split_by_kind(keys)
        clients: dict[ClientKind, Mapping[str, str]] = {}
        for kind in _KINDS:
            # Precedence, lowest first: global, global per kind, cluster, cluster per kind. Translated
            # together, because several Java keys make one setting (a store's location and password).
            merged = {**g_common, **g_kinds[kind], **c_common, **c_kinds[kind]}
            merged.setdefault("bootstrap.servers", bootstrap)
            settings = self.translate_client(kind, merged, origins, f"cluster '{alias}'")
            settings.pop("bootstrap.servers", None)
            clients[kind] = MappingProxyType(settings)
        return ClusterConfig(
            alias=alias,
            bootstrap_servers=bootstrap.value.strip(),
            clients=MappingProxyType(clients),
            origins=MappingProxyType(origins),
            java=MappingProxyType({kind: MappingProxyType(
                {k: p.value for k, p in {**g_common, **g_kinds[kind], **c_common, **c_kinds[kind]}.items()})
                for kind in _KINDS}),
            schema_registry=MappingProxyType(registry),
        )

    def build_flow(self, src: str, dst: str, keys: dict[str, Property], globals_: dict[str, Property],
                   clusters: dict[str, ClusterConfig]) -> FlowConfig:
        prefix = f"{src}->{dst}."
        chosen: dict[str, Property] = {}
        client_keys: dict[str, Property] = {}
        for rest, p in keys.items():
            name = ALIASES.get(rest, rest)
            if name in KEYS_BY_NAME:
                self.put_setting(chosen, name, p, prefix)
            elif rest.startswith(("consumer.", "producer.")):
                client_keys[rest] = p
            elif (reason := no_effect_reason(rest)) is not None:
                self.warn(f"{self.where(p)}: '{p.key}' {reason}")
            elif rest.startswith("admin."):
                self.warn(f"{self.where(p)}: '{p.key}': flows have no admin client overrides (set "
                          f"{src}.admin.* or {dst}.admin.* on the cluster); ignored")
            else:
                self.warn(f"{self.where(p)}: unknown key '{p.key}'{did_you_mean(rest, known_key_names())}; ignored")
        values: dict[str, Any] = {}
        for name, p in chosen.items():
            if KEYS_BY_NAME[name].scope == "global":
                self.warn(f"{self.where(p)}: '{p.key}' cannot be set per flow; ignored")
                continue
            written, overridden = p.key[len(prefix):], globals_.get(name)
            if written != name and overridden is not None and overridden.key == name:
                self.warn(f"{self.where(p)}: '{p.key}' (an older name) overrides the global '{name}' "
                          f"(line {overridden.line}) for flow {src}->{dst}; MirrorMaker 2 would let the "
                          f"current name win here: write '{prefix}{name}' to be unambiguous")
            values[name] = self.parse_value(name, p)
        for name in KEYS_BY_NAME:
            if name not in values and name != "clusters":
                values[name] = self.parse_value(name, globals_.get(name))

        self.check_schema_ids(values["schema.ids"], clusters[src], clusters[dst],
                              chosen.get("schema.ids") or globals_.get("schema.ids"))
        pool = chosen.get("replication.producers") or globals_.get("replication.producers")
        if values["exactly.once.enabled"] and (values["replication.producers"] or 1) > 1 and pool is not None:
            # Said, not silently dropped: exactly-once has one transactional producer per slot.
            self.warn(f"{self.where(pool)}: '{pool.key}' = {values['replication.producers']} has no effect on flow "
                      f"{src}->{dst}, which is exactly-once (one transactional producer per slot: raise "
                      "exactly.once.slots for more producers); ignored")
        sep_prop = keys.get("replication.policy.separator") or globals_.get("replication.policy.separator")
        policy = policy_from_name(values["replication.policy.class"], values["replication.policy.separator"])
        if sep_prop is not None and policy.separator in (" ",):
            raise self.error("the separator must not be a space", sep_prop)

        _, per_kind = self.split_by_kind(client_keys)
        settings: dict[ClientKind, dict[str, str]] = {k: {} for k in _KINDS}
        flow_kinds: tuple[tuple[ClientKind, str], ...] = (("consumer", src), ("producer", dst))
        for kind, alias in flow_kinds:
            if per_kind[kind]:
                settings[kind] = self.translate_client(kind, per_kind[kind], {}, f"flow {src}->{dst}",
                                                       base=clusters[alias].client_settings(kind))
        data_path, data_path_reason = self.check_data_path(
            values["replication.data.path"],
            chosen.get("replication.data.path") or globals_.get("replication.data.path"), values["schema.ids"],
            (clusters[src].client_settings("consumer", settings["consumer"]), src),
            (clusters[dst].client_settings("producer", settings["producer"]), dst))
        return FlowConfig(
            source=src,
            target=dst,
            topics=NameFilter(values["topics"], values["topics.exclude"]),
            groups=NameFilter(values["groups"], values["groups.exclude"]),
            policy=policy,
            replication_factor=values["replication.factor"],
            heartbeats_replication_factor=values["heartbeats.topic.replication.factor"],
            internal_replication_factor=values["offset-syncs.topic.replication.factor"],
            sync_topic_configs=values["sync.topic.configs.enabled"],
            sync_topic_configs_interval_s=values["sync.topic.configs.interval.seconds"],
            config_properties_exclude=values["config.properties.exclude"],
            refresh_topics=values["refresh.topics.enabled"],
            refresh_topics_interval_s=values["refresh.topics.interval.seconds"],
            emit_heartbeats=values["emit.heartbeats.enabled"],
            heartbeats_interval_s=values["emit.heartbeats.interval.seconds"],
            commit_interval_ms=values["offset.flush.interval.ms"],
            batch_max_records=values["replication.batch.max.records"],
            max_in_flight_records=values["replication.max.in.flight.records"],
            max_in_flight_bytes=values["replication.max.in.flight.bytes"],
            producers=values["replication.producers"],
            one_batch_per_partition={"true": True, "false": False}.get(values["replication.one.batch.per.partition"]),
            start_position=values["source.start.position"],
            emit_checkpoints=values["emit.checkpoints.enabled"],
            checkpoints_interval_s=values["emit.checkpoints.interval.seconds"],
            checkpoints_replication_factor=values["checkpoints.topic.replication.factor"],
            map_snapshot_interval_s=values["offset.map.snapshot.interval.seconds"],
            sync_group_offsets=values["sync.group.offsets.enabled"],
            sync_group_offsets_interval_s=values["sync.group.offsets.interval.seconds"],
            exactly_once=values["exactly.once.enabled"],
            exactly_once_slots=values["exactly.once.slots"],
            data_path=data_path,
            data_path_reason=data_path_reason,
            sync_topic_acls=values["sync.topic.acls.enabled"],
            sync_topic_acls_interval_s=values["sync.topic.acls.interval.seconds"],
            mirror_principals=values["mirror.principals"],
            remote_topics_read_only=values["remote.topics.read.only"],
            sync_topic_deletions=values["sync.topic.deletions.enabled"],
            sync_topic_deletions_grace_s=values["sync.topic.deletions.grace.seconds"],
            sync_topic_deletions_dry_run=values["sync.topic.deletions.dry.run"],
            schema_ids=values["schema.ids"],
            consumer_overrides=MappingProxyType(settings["consumer"]),
            producer_overrides=MappingProxyType(settings["producer"]),
        )

    def check_schema_ids(self, mode: str, src: ClusterConfig, dst: ClusterConfig, p: Property | None) -> None:
        """translate needs both clusters' registries; preserve (ids kept, a target registry in IMPORT mode) is not
        run yet: copying such records would keep ids the target may give other schemas."""
        if mode == "preserve":
            raise self.error("schema.ids = preserve: this mirror does not check that the target registry holds the "
                             "source's ids yet: use schema.ids = translate (or off)", p)
        if mode == "translate":
            missing = [c.alias for c in (src, dst) if not c.has_schema_registry]
            if missing:
                raise self.error(f"schema.ids = translate needs the schema registry of both clusters: set "
                                 f"{' and '.join(f'{a}.schema.registry.url' for a in missing)}", p)

    def check_data_path(self, path: str, p: Property | None, schema_ids: str,
                        *clients: tuple[Mapping[str, str], str]) -> tuple[str, str]:
        """The data path a flow runs ("records" or "batches") and why, in words. ``batches`` where the batches path
        cannot go is an error naming the key's line; ``auto`` takes batches where the flow allows them (what the
        mirror's own client honours: config/wire_support.py), records otherwise, saying which setting required it."""
        if path == "records":
            return "records", "replication.data.path = records"
        # Exactly-once copies batches in each slot's transactions (replication/batch_transactions.py); the identity
        # policy's cycles are prevented by producer id (replication/mirror_writes.py), each slot's recorded too.
        found = [f"cluster {alias} {problem}" for settings, alias in clients for problem in wire_problems(settings)]
        if schema_ids == "translate":  # every record's key and value are read and rewritten
            found.insert(0, "schema.ids = translate")
        if found and path == "batches":
            raise self.error(f"replication.data.path = batches: {'; '.join(dict.fromkeys(found))}: use "
                             "replication.data.path = records (or auto) for this flow", p)
        obstacle = "; ".join(dict.fromkeys(found)) or None
        if path == "batches":
            return "batches", "replication.data.path = batches"
        return ("records", f"{_auto(p)}: records, because {obstacle}") if obstacle else \
            ("batches", f"{_auto(p)}: batches")

    def check_client(self, kind: ClientKind, settings: dict[str, str], origins: Mapping[str, Origin],
                     owner: str, base: Mapping[str, str] | None = None) -> None:
        """Let librdkafka itself judge the settings (on top of ``base``). A setting it does not know is
        dropped with a warning (as Java clients do: "supplied but isn't a known config"); an invalid value
        is an error naming the file key and line."""
        while (problem := _client_problem(kind, {**(base or {}), **settings})) is not None:
            # Find the setting at fault (librdkafka may name it by an alias), one at a time.
            culprit = next((k for k, v in settings.items() if k != "bootstrap.servers"
                            and _client_problem(kind, {**(base or {}), k: v}) is not None), None)
            origin = origins.get(culprit) if culprit else None
            if culprit is not None and "No such configuration property" in problem:
                written = origin[0] if origin else culprit
                where = f"{self.source}, line {origin[1]}" if self.source and origin else (
                    f"line {origin[1]}" if origin else owner)
                self.warn(f"{where}: unknown client setting '{written}' for {owner}"
                          f"{did_you_mean(culprit, KNOWN_JAVA_KEYS)}; ignored")
                del settings[culprit]
                continue
            if "No provider for SASL mechanism GSSAPI" in problem:
                problem = ("sasl.mechanism=GSSAPI needs a librdkafka built with Kerberos (SASL) support, and this one "
                           "has none: `make install` builds one (scripts/ensure-gssapi-client.sh), or install "
                           "confluent-kafka built against a librdkafka linked with libsasl2")
                origin = origins.get("sasl.mechanisms", origin)
            raise ConfigError(f"invalid {kind} setting for {owner}: {problem}",
                              key=origin[0] if origin else None, line=origin[1] if origin else None,
                              source=self.source)


def _client_problem(kind: ClientKind, settings: dict[str, str]) -> str | None:
    """librdkafka's complaint about these settings, or None. Never connects anywhere."""
    from confluent_kafka import Consumer, KafkaException, Producer

    # log_level 0 and no bootstrap connection: the check must not touch (or spam about) clusters.
    # The real bootstrap servers and token callbacks are never used: validating must not resolve, connect or
    # ask an identity provider anything.
    conf = client_conf({**settings, "log_level": "0", "bootstrap.servers": "127.0.0.1:9"}, validate_only=True)
    try:
        if kind == "consumer":
            conf.setdefault("group.id", "mirror-core-config-check")
            Consumer(conf).close()
        else:
            Producer(conf).flush(0)
    except KafkaException as exc:
        err = exc.args[0] if exc.args else exc
        return str(err.str() if hasattr(err, "str") else err)
    except (ValueError, TypeError) as exc:
        return str(exc)
    return None


def parse_config(props: Iterable[Property], source: str | None = None, validate_clients: bool = True,
                 environ: Mapping[str, str] | None = None) -> MirrorConfig:
    return _Builder(props, source, validate_clients, environ).build()
