"""Every configuration key mirror_core understands, with its type, default and meaning.

This table is the single source of truth: the loader validates against it and the configuration
reference in the docs is generated from it. Flow-scoped keys may be set globally (``key``) or per
flow (``A->B.key``); the per-flow value wins.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from mirror_core.config import mm2_keys as mm2
from mirror_core.filters import PatternList
from mirror_core.policy import policy_from_name

Scope = Literal["global", "flow"]


def parse_bool(raw: str) -> bool:
    value = raw.strip().lower()
    if value in ("true", "false"):
        return value == "true"
    raise ValueError(f"expected true or false, got '{raw}'")


def int_between(low: int, high: int | None = None) -> Callable[[str], int]:
    def parse(raw: str) -> int:
        try:
            value = int(raw.strip())
        except ValueError:
            raise ValueError(f"expected an integer, got '{raw}'") from None
        if value < low or (high is not None and value > high):
            bounds = f">= {low}" if high is None else f"between {low} and {high}"
            raise ValueError(f"expected an integer {bounds}, got {value}")
        return value

    return parse


def positive_seconds(raw: str) -> float:
    try:
        value = float(raw.strip())
    except ValueError:
        raise ValueError(f"expected a number of seconds, got '{raw}'") from None
    if not value > 0:
        raise ValueError(f"expected a positive number of seconds, got {raw.strip()}")
    return value


def parse_list(raw: str) -> tuple[str, ...]:
    return tuple(item.strip() for item in raw.split(",") if item.strip())


def parse_patterns(raw: str) -> PatternList:
    items = parse_list(raw)
    for item in items:
        try:
            re.compile(item)
        except re.error as exc:
            raise ValueError(f"invalid regular expression '{item}': {exc}") from None
    return PatternList(items)


def parse_separator(raw: str) -> str:
    # The separator is significant as written: no stripping beyond the properties format.
    if not raw:
        raise ValueError("the separator must not be empty")
    return raw


def parse_policy(raw: str) -> str:
    policy_from_name(raw.strip(), ".")  # validates the name
    return raw.strip()


@dataclass(frozen=True)
class KeyDef:
    name: str
    parse: Callable[[str], Any]
    default: str
    doc: str
    scope: Scope = "flow"
    #: Older names accepted for the same setting (MirrorMaker 1/2 history).
    aliases: tuple[str, ...] = ()


# MirrorMaker 2's defaults, so existing mm2.properties files behave the same.
DEFAULT_TOPICS_EXCLUDE = r".*[\-\.]internal, .*\.replica, __.*"
DEFAULT_GROUPS_EXCLUDE = r"console-consumer-.*, connect-.*, __.*"
DEFAULT_CONFIG_EXCLUDE = (
    r"follower\.replication\.throttled\.replicas, leader\.replication\.throttled\.replicas, "
    r"message\.timestamp\.difference\.max\.ms, message\.timestamp\.type, "
    r"unclean\.leader\.election\.enable, min\.insync\.replicas"
)


def auto_or_int(low: int, high: int) -> Callable[[str], int | None]:
    """A count between ``low`` and ``high``, or None for ``auto`` (decided where the key is used)."""
    count = int_between(low, high)

    def parse(raw: str) -> int | None:
        if raw.strip().lower() == "auto":
            return None
        try:
            return count(raw)
        except ValueError as exc:
            raise ValueError(f"{exc} (or auto)") from None

    return parse


#: replication.max.in.flight.records' auto on the records path (FlowConfig.in_flight_records_limit)
IN_FLIGHT_RECORDS = 500_000
#: replication.max.in.flight.bytes' default
IN_FLIGHT_BYTES = 64 << 20


#: replication.data.path (auto: decided per flow at load, FlowConfig.data_path holds the path chosen)
DATA_PATHS = ("records", "batches", "auto")
#: schema.ids: what the mirror does with records' schema ids (mirror_core/schemas)
SCHEMA_IDS = ("translate", "preserve", "off")


KEYS: tuple[KeyDef, ...] = (
    KeyDef("clusters", parse_list, "", "Comma-separated cluster aliases (required).", scope="global"),
    KeyDef("enabled", parse_bool, "false",
           "Whether a flow runs; set per flow as A->B.enabled (MirrorMaker 2 default: false; a global "
           "'enabled' has no effect and is warned about). A flow set "
           "explicitly to false is a standby flow (e.g. the reverse direction): configured, started only "
           "by a workflow through the control plane (mirror-core run --state-db)."),
    KeyDef("topics", parse_patterns, ".*", "Regexes of source topics to replicate.",
           aliases=("topics.whitelist", "whitelist")),
    KeyDef("topics.exclude", parse_patterns, DEFAULT_TOPICS_EXCLUDE,
           "Regexes of source topics never replicated.", aliases=("topics.blacklist", "blacklist")),
    KeyDef("groups", parse_patterns, ".*", "Regexes of consumer groups to checkpoint.",
           aliases=("groups.whitelist",)),
    KeyDef("groups.exclude", parse_patterns, DEFAULT_GROUPS_EXCLUDE,
           "Regexes of consumer groups never checkpointed.", aliases=("groups.blacklist",)),
    KeyDef("replication.policy.class", parse_policy, "DefaultReplicationPolicy",
           "DefaultReplicationPolicy (remote topic <source>.<topic>) or IdentityReplicationPolicy "
           "(same name; cycles prevented by a provenance header). MM2 class names accepted."),
    KeyDef("replication.policy.separator", parse_separator, ".",
           "Separator between source alias and topic name in remote topic names."),
    KeyDef("replication.factor", int_between(-1, 32767), "-1",
           "Replication factor of created remote topics; -1 uses the target broker's default."),
    KeyDef("heartbeats.topic.replication.factor", int_between(-1, 32767), "-1",
           "Replication factor of the heartbeats topic; -1 uses the broker default."),
    KeyDef("offset-syncs.topic.replication.factor", int_between(-1, 32767), "-1",
           "Replication factor of mirror_core's internal progress topic on the target."),
    KeyDef("sync.topic.configs.enabled", parse_bool, "true",
           "Copy topic configs from source to remote topics, at creation and periodically."),
    KeyDef("sync.topic.configs.interval.seconds", positive_seconds, "600",
           "How often topic configs and partition counts are compared and synced."),
    KeyDef("sync.topic.acls.enabled", parse_bool, "true",
           "Keep the target's ACLs converged on the source's (MirrorMaker 2's key, more than it did): LITERAL and "
           "PREFIXED topic ACLs with names mapped through the replication policy (orders -> dc1.orders, prefix ord "
           "-> dc1.ord), LITERAL and PREFIXED group ACLs of the groups the flow checkpoints (names as they are), "
           "read-only (ALLOW WRITE never copied, ALLOW ALL copied as ALLOW READ). An ACL revoked on the source is "
           "removed from the target. Never touched: WRITE ACLs on the target, ACLs of the mirror's own principals "
           "(mirror.principals) and the read-only guard (remote.topics.read.only); a target-only ACL is removed only "
           "on a remote topic of the flow (or a PREFIXED one in its remote namespace, <source>.), never on a "
           "target-local topic or group. Done by the running mirror's topic watcher, by mirror-core topics sync and "
           "the topic_config_sync DAG; every change in the drift history."),
    KeyDef("sync.topic.acls.interval.seconds", positive_seconds, "600",
           "How often the running mirror converges ACLs (sync.topic.acls.enabled); checked at each topic refresh "
           "(refresh.topics.interval.seconds), so it is at least that."),
    KeyDef("mirror.principals", parse_list, "",
           "The mirror's own principals (e.g. User:CN=mirror,OU=kafka for a TLS client certificate), besides what "
           "its client settings on both clusters say (User:ANONYMOUS without SASL or client certificate, "
           "User:<sasl.username> with PLAIN/SCRAM, User:<primary> of sasl.kerberos.principal). Their ACLs are never "
           "copied, changed or removed by the ACL sync."),
    KeyDef("remote.topics.read.only", parse_bool, "false",
           "Keep a DENY WRITE for User:* (LITERAL) on every remote topic the flow owns, so an application started "
           "against the standby by mistake cannot write into a mirrored topic. Super users are exempt from DENY "
           "ACLs: the mirror's principal must be one on the target (checked: a guard that would stop the mirror "
           "itself is taken away again and refused in one line). Failover, cutover and promotion lift it for exactly "
           "the promoted topics; set on by the running mirror's topic watcher, mirror-core topics sync and the "
           "topic_config_sync DAG; recorded in the drift history."),
    KeyDef("sync.topic.deletions.enabled", parse_bool, "false",
           "Propagate deletions: a source topic deleted (no longer listed on the source) has its remote topic "
           "deleted on the target after sync.topic.deletions.grace.seconds, only if the mirror wrote every record "
           "in it (the remote topic's end equals the mirror's recorded progress translated through its offset "
           "map, and nothing else wrote it); otherwise refused and reported. Done by mirror-core topics sync and the "
           "topic_config_sync DAG (the grace period is counted from the first run that saw the source topic gone; "
           "a state store is needed), recorded in the drift history."),
    KeyDef("sync.topic.deletions.grace.seconds", positive_seconds, "86400",
           "How long a remote topic outlives its deleted source topic (sync.topic.deletions.enabled)."),
    KeyDef("sync.topic.deletions.dry.run", parse_bool, "false",
           "Report the remote topics deletion propagation would delete (drift history: proposed), delete none."),
    KeyDef("config.properties.exclude", parse_patterns, DEFAULT_CONFIG_EXCLUDE,
           "Regexes of topic config names never copied to remote topics."),
    KeyDef("refresh.topics.enabled", parse_bool, "true",
           "Periodically look for new source topics matching the filters."),
    KeyDef("refresh.topics.interval.seconds", positive_seconds, "600",
           "How often new source topics and partitions are discovered."),
    KeyDef("emit.heartbeats.enabled", parse_bool, "true",
           "Emit heartbeat records into the source 'heartbeats' topic; they are replicated with the "
           "data and prove the whole path is alive."),
    KeyDef("emit.heartbeats.interval.seconds", positive_seconds, "1",
           "Interval between heartbeats."),
    KeyDef("emit.checkpoints.enabled", parse_bool, "true",
           "Publish translated consumer-group offsets to <source>.checkpoints.internal on the target "
           "(MirrorMaker 2's checkpoint layout)."),
    KeyDef("emit.checkpoints.interval.seconds", positive_seconds, "60",
           "How often source group offsets are translated and checkpointed."),
    KeyDef("offset.map.snapshot.interval.seconds", positive_seconds, "300",
           "How often the offset map is snapshotted to mirror-core.offset-map.<source>.internal, pruned "
           "below the source partitions' log starts, and the offset-sync log trimmed below the snapshot."),
    KeyDef("checkpoints.topic.replication.factor", int_between(-1, 32767), "-1",
           "Replication factor of the checkpoints topic; -1 uses the broker default."),
    KeyDef("sync.group.offsets.enabled", parse_bool, "false",
           "Commit translated offsets to the same group on the target while it has no active members "
           "there (never backwards)."),
    KeyDef("sync.group.offsets.interval.seconds", positive_seconds, "60",
           "How often target group offsets are synced (at most as often as checkpoints are emitted)."),
    KeyDef("exactly.once.enabled", parse_bool, "false",
           "Exactly-once replication: transactional producers on the target; records, offset map and "
           "progress commit in one transaction; the source is read with read_committed."),
    KeyDef("exactly.once.slots", int_between(1, 1024), "8",
           "Exactly-once fencing units: source partitions are hashed into this many slots, each with its "
           "own transactional id; the most mirror processes that can share a flow. Change it only with "
           "every instance of the flow stopped (a partition's slot, hence its fencing id, changes). A higher "
           "count grows the slot topic (`mirror-core.slots.<source>-<target>.internal`, a partition per slot); "
           "a lower one is refused in one line (the flow copies nothing and retries) until that topic is "
           "deleted, as it cannot shrink. Each slot commits a transaction of its own, side by side, each time "
           "the mirror has caught up: a flow only ever run by one process gives up with fewer slots only how "
           "little a failure aborts (a failed batch aborts its whole slot's transaction), and sees its records "
           "sooner on whole batches (at 20,000 records/s over 8 partitions, two runs each on one pair of "
           "clusters: p99 28-66 ms with 1 slot against 164-176 ms with 8; docs/benchmarks.md, Latency)."),
    KeyDef("offset.flush.interval.ms", int_between(10, 3_600_000), "1000",
           "How often replication progress is committed to the target (after the target acked). "
           "Exactly-once: the longest a transaction stays open under backlog; when the mirror has read "
           "everything there is, it commits at once."),
    KeyDef("replication.batch.max.records", int_between(1, 1_000_000), "10000",
           "Records fetched per consume call on the hot path."),
    KeyDef("replication.max.in.flight.records", auto_or_int(1000, 100_000_000), "auto",
           "Records produced but not yet acknowledged before fetching pauses (back-pressure). auto: 500000 on "
           "the records path, where librdkafka holds them (its queue.buffering.max.kbytes bounds their bytes); "
           "no count on the batches path, which replication.max.in.flight.bytes bounds. A number applies to "
           "both paths."),
    KeyDef("replication.max.in.flight.bytes", int_between(1 << 20, 1 << 40), str(IN_FLIGHT_BYTES),
           "The batches path: bytes of source batches handed to the target and not yet acknowledged before "
           "fetching pauses (each batch counted with 1 KiB for the mirror's bookkeeping of it). What bounds its "
           "memory whatever the record size; answers already on their way still arrive (up to fetch.max.bytes "
           "per source broker). 64 MiB copied 100 B records as 500,000 records did, at their memory (256 MiB, "
           "measured the same way, took twice the memory and more CPU per record for no rate), and 1 KiB records "
           "at a third of the memory (README 'Scale'). The records path ignores it."),
    KeyDef("replication.producers", auto_or_int(1, 32), "auto",
           "At-least-once: target producers per flow and process (1-32), each with its own connections; a "
           "partition always goes through the same one. librdkafka sends one partition per produce request, "
           "at most 5 in flight per connection (per target broker) and, idempotent, one per partition: over a "
           "long round trip (the mirror next to the source) more producers carry more per round trip. auto: when "
           "the flow starts the mirror times metadata requests to the target (again at the next pipeline start "
           "if none answered) and uses 4 producers when the fastest takes 70 ms or more, else 1; 1 where "
           "one.batch.per.partition cannot apply (logged, and in /status under 'producers'). "
           "replication.one.batch.per.partition (on by default with more than one) keeps their threads from "
           "spinning while their partitions wait (README 'Running across a WAN'). With replication.data.path = "
           "batches it is the wire sender's connections to each target broker instead (auto: 2; a broker handles "
           "one request of a connection at a time), a partition always on the same one, and one librdkafka "
           "producer writes progress and offset-map records. "
           "Exactly-once uses a producer per slot instead."),
    KeyDef("replication.one.batch.per.partition", lambda raw: _choice(raw, ("auto", "true", "false")), "auto",
           "Hand the target producer a partition's records only when it can send them: they wait in the mirror "
           "while librdkafka's idempotent producer would hold them (5 or more of the partition's records in "
           "flight: under a backlog, until its batch in flight is acknowledged), and go in pieces that fit one "
           "produce request (batch.size, message.max.bytes) and the remote topic's max.message.bytes on the "
           "target (read from it; until it answers, Kafka's default 1048588). At-least-once the producers' "
           "batch.size and message.max.bytes default to 8 MiB then, so a target that takes bigger batches gets "
           "them (over a long round trip a partition gets one batch per round trip); progress and offset-map "
           "records go through a producer whose batches fit their topics. A remote topic that takes less than "
           "librdkafka's batch gets this for its partitions whatever the setting, except with the identity policy "
           "(librdkafka does not split a batch the target refuses). What changes is where records wait: in "
           "librdkafka's queue, a producer whose partitions all wait polls without sleeping (up to a core each "
           "over a long round trip); in the mirror, it sleeps, so several producers widen the window without "
           "that CPU. auto: true when the flow has more than one producer (replication.producers), at-least-once "
           "only (README 'Running across a WAN'). Not with the identity policy, whose remote topics may have "
           "other writers (delivery is proved per record there)."),
    KeyDef("schema.ids", lambda raw: _choice(raw, SCHEMA_IDS), "off",
           "Records written with a schema registry (Confluent wire format: a zero byte and a 4-byte big-endian schema "
           "id before the key or value). translate: the mirror rewrites each source id to the id the same subject "
           "version has in the target's registry (<alias>.schema.registry.url of both clusters; `mirror-core schemas "
           "sync` copies the subjects first); the id map is read from both registries at the first framed record "
           "and again when a record names an id it lacks, so a schema synced later is taken without a restart; a "
           "record whose id the target still does not have pauses its partition there (one line), never copied with a "
           "wrong id, and goes on by itself within 30 s once the id maps (after `mirror-core schemas sync`; or "
           "`mirror-core partitions resume`). Translation reads every record, so "
           "the flow runs the records data path. preserve (the ids copied as they are, for a target registry filled "
           "in IMPORT mode) is refused at load for now. off: keys and values are copied untouched."),
    KeyDef("replication.data.path", lambda raw: _choice(raw, DATA_PATHS), "auto",
           "How records travel. records: consumed and produced one by one through librdkafka (every feature). "
           "batches: the source's record batches copied whole over the mirror's own Kafka client (mirror_core.wire), "
           "with no per-record work: 3.8-4.9x MirrorMaker 2 at 2,000 partitions, at a third of the records path's "
           "CPU per record (README 'mirror_core vs MirrorMaker 2'). Each batch lands as it is (headers, timestamps, "
           "compression kept; consecutive batches of 16 records at most, fetched together, as one batch of about "
           "64 KiB, their records' bytes kept: a partition takes one batch per produce request), its "
           "offset-map run and progress as on the records path, at-least-once or exactly-once. With the identity "
           "policy its cycles are prevented by producer id (each sender's and exactly-once slot's, recorded in "
           "mirror-core.producer-ids.internal on the "
           "cluster it writes before its first batch; the reverse flow skips the batches a mirror wrote copying from "
           "its target), not around a cycle of three clusters or more (refused; auto: records); SASL PLAIN, SCRAM, "
           "GSSAPI (Kerberos: the keytab and principal of "
           "sasl.kerberos.*, or the default ticket cache without a keytab) and OAUTHBEARER with tokens from an OIDC "
           "endpoint (sasl.oauthbearer.method = oidc: the client-credentials grant, sessions renewed before the "
           "token expires); unsecured JWTs and AWS MSK IAM: records. Of the ssl.* settings it honours the trust and "
           "client certificate settings, verification and host-name checking, ssl.cipher.suites, ssl.crl.location "
           "and ssl.curves.list of one curve; ssl.ca.certificate.stores (Windows) does not matter; a flow whose "
           "clients set ssl.sigalgs.list, ssl.providers, ssl.engine.* or a list of curves is refused on batches "
           "(config/wire_support.py describes every setting). "
           "auto: decided per flow when the configuration loads: batches wherever the flow allows (at-least-once or "
           "exactly-once, with either policy; no schema.ids = translate, no cycle"
           " of three clusters of identity-policy flows, nothing in its source consumer's or target "
           "producer's settings that the "
           "mirror's own client does not honour), records otherwise; the start log line, /status and mirror-core "
           "check say which and why. Exactly-once copies the source's batches whole in each slot's transactions "
           "(their progress and offset-map records in the same transaction). auto is the default. A batch the "
           "target refuses (larger than its max.message.bytes) pauses its partition at that batch, naming it. "
           "replication.batch.max.records does not apply; fetch.max.bytes, max.partition.fetch.bytes, "
           "fetch.min.bytes and fetch.wait.max.ms of the flow's consumer and message.timeout.ms of its producer do. "
           "Memory: each source broker's fetch connection keeps its answer buffer (up to fetch.max.bytes and a "
           "quarter, 80 MB by default) while a backlog is copied, and gives it back after about half a minute of "
           "small answers."),
    KeyDef("source.start.position", lambda raw: _choice(raw, ("earliest", "latest")), "earliest",
           "Where a new flow starts reading a partition that has no recorded progress."),
)

# MirrorMaker 2 keys that mirror_core accepts and deliberately ignores (they tune Connect internals
# or features done differently here). A warning names them; they never stop the service.
IGNORED_MM2_KEYS = frozenset({
    "tasks.max", "offset-syncs.topic.location", "refresh.groups.enabled", "refresh.groups.interval.seconds",
    "offset.lag.max",
    "dedicated.mode.enable.internal.rest", "key.converter", "value.converter", "header.converter",
    "offset.storage.replication.factor", "config.storage.replication.factor",
    "status.storage.replication.factor", "replication.policy.internal.topic.separator.enabled",
    "admin.timeout.ms", "topic.filter.class", "group.filter.class",
    "config.property.filter.class", "emit.offset-syncs.enabled",
})

KEYS_BY_NAME: dict[str, KeyDef] = {k.name: k for k in KEYS}
ALIASES: dict[str, str] = {alias: k.name for k in KEYS for alias in k.aliases}

# What to use instead, for MirrorMaker 2 / Connect keys whose purpose mirror_core serves differently.
_INSTEAD: dict[str, str] = {
    "exactly.once.source.support": "for exactly-once set exactly.once.enabled = true (globally or per flow)",
    "exactly.once.support": "for exactly-once set exactly.once.enabled = true (globally or per flow)",
    "transaction.boundary": "exactly-once transactions commit as soon as the mirror is caught up, under "
                            "backlog every offset.flush.interval.ms",
    "tasks.max": "to scale out, run more mirror-core processes (they share partitions through a consumer group)",
    "offset.lag.max": "the offset map is exact; there is nothing to tune",
    "group.id": "the worker group is A->B.consumer.group.id",
    "offset.storage.topic": "progress is kept on the target in mirror-core.progress.<source>.internal",
}
# Kafka client settings that Connect workers also define: at cluster level they configure the clients.
_CLIENT_SETTINGS_TOO = frozenset({
    "connections.max.idle.ms", "metadata.max.age.ms", "reconnect.backoff.max.ms", "reconnect.backoff.ms",
    "request.timeout.ms", "retry.backoff.max.ms", "socket.connection.setup.timeout.ms", "metadata.recovery.strategy",
    "metadata.recovery.rebootstrap.trigger.ms", "client.id", "group.id",
})
#: MirrorMaker 2 / Connect keys accepted and ignored (warned about) at any level: global, per cluster, per flow.
NO_EFFECT_KEYS: frozenset[str] = (
    (mm2.MM2_ALL_KNOWN_KEYS | frozenset(mm2.MM2_REMOVED_IN_4_0) | IGNORED_MM2_KEYS)
    - frozenset(KEYS_BY_NAME) - frozenset(ALIASES) - mm2.MM2_CLIENT_KEYS - _CLIENT_SETTINGS_TOO
    - {"clusters", "config.providers"}
) | {"group.id"}
# Prefixes of Connect-only key families (converters' and transforms' own settings, REST listeners...): MM2's own
# list without the client prefixes applied here (<kind>., source./target. connector client prefixes, config
# providers); plus errors.*, fixed ConnectorConfig names of one family.
_APPLIED_PREFIXES = {"config.providers.", "producer.", "consumer.", "admin.", "source.", "target."}
_NO_EFFECT_PREFIXES = (*sorted(mm2.MM2_KEY_PREFIXES - _APPLIED_PREFIXES), "errors.")


def no_effect_reason(key: str, cluster_level: bool = False) -> str | None:
    """Why a MirrorMaker 2 / Kafka Connect key is accepted and ignored (``None``: not such a key).

    At cluster level (``<alias>.<key>``) ``group.id`` is a client setting, not a Connect worker key."""
    if cluster_level and key in _CLIENT_SETTINGS_TOO:
        return None
    if key not in NO_EFFECT_KEYS and not key.startswith(_NO_EFFECT_PREFIXES):
        return None
    hint = _INSTEAD.get(key)
    return ("is a MirrorMaker 2 / Kafka Connect setting with no effect here; ignored"
            + (f" ({hint})" if hint else ""))


def known_key_names() -> frozenset[str]:
    """Every key name a file may use at top level, for "did you mean" suggestions."""
    return frozenset(KEYS_BY_NAME) | frozenset(ALIASES) | NO_EFFECT_KEYS | mm2.MM2_CLIENT_KEYS


def _choice(raw: str, options: tuple[str, ...]) -> str:
    value = raw.strip().lower()
    if value not in options:
        raise ValueError(f"expected one of {', '.join(options)}, got '{raw}'")
    return value
