"""Client quotas copied from one cluster to another (a cutover's step): what a migrated application is throttled at.

confluent-kafka's AdminClient (2.16) has no DescribeClientQuotas / AlterClientQuotas (KIP-546), so both are spoken
here over :mod:`mirror_core.wire` (request v0, one connection to a bootstrap broker, which forwards an alteration to
the controller). Copied: ``producer_byte_rate``, ``consumer_byte_rate`` and ``request_percentage`` of user and
client-id entities (and their combination, and the defaults ``<default>``), set on the target to the source's value.
A quota only the target has is left alone (another application's there). All or nothing: the whole alteration is
validated by the target first (``validate_only``), then applied in one request. Logins the wire client makes itself
(PLAINTEXT, SSL, SASL PLAIN / SCRAM); the cluster's admin settings are used.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass

from mirror_core.config.model import ClusterConfig
from mirror_core.errors import MirrorError
from mirror_core.state.models import DriftEvent
from mirror_core.state.store import StateStore
from mirror_core.wire.codec import ProtocolError, Reader, array, string
from mirror_core.wire.connection import Connection, WireError
from mirror_core.wire.metadata import address

DESCRIBE_CLIENT_QUOTAS, ALTER_CLIENT_QUOTAS = 48, 49
#: the quotas a cutover copies
QUOTA_KEYS = ("producer_byte_rate", "consumer_byte_rate", "request_percentage")
ENTITY_TYPES = ("user", "client-id")
#: an entity: its (type, name) components sorted; name None is the type's default entity
Entity = tuple[tuple[str, str | None], ...]


class QuotaError(MirrorError):
    """Quotas could not be read or set; one line naming the cluster and the remedy."""


def entity_name(entity: Entity) -> str:
    return ",".join(f"{t}={'<default>' if n is None else n}" for t, n in entity)


@dataclass(frozen=True)
class QuotaChange:
    entity: str
    key: str
    before: float | None
    after: float

    def describe(self) -> str:
        before = "(none)" if self.before is None else f"{self.before:g}"
        return f"{self.key}: {before} -> {self.after:g}"


def _connect(cluster: ClusterConfig) -> Connection:
    settings = cluster.client_settings("admin")
    failures = []
    for server in settings["bootstrap.servers"].split(","):
        if not server.strip():
            continue
        try:
            return Connection(*address(server), settings, f"cluster {cluster.alias}", 15.0)
        except (WireError, OSError) as exc:
            failures.append(str(exc))
    raise QuotaError(f"client quotas: cluster {cluster.alias} is unreachable ({'; '.join(failures)}); check that it is "
                     "up and reachable from here (nothing was changed)")


def _entity(r: Reader) -> Entity:
    parts = []
    for _ in range(r.count(4)):
        kind = r.string() or ""
        parts.append((kind, r.string()))
    return tuple(sorted(parts))


def _error(cluster: ClusterConfig, what: str, code: int, message: str | None) -> QuotaError:
    remedy = ("grant the mirror's principal DESCRIBE_CONFIGS and ALTER_CONFIGS on the cluster "
              f"{cluster.alias} (or make it a super user there)" if code == 31 else "see the broker's log")
    return QuotaError(f"client quotas: cluster {cluster.alias} refused to {what} (error {code}"
                      f"{': ' + message if message else ''}); {remedy} (nothing was changed)")


def describe_quotas(cluster: ClusterConfig) -> dict[Entity, dict[str, float]]:
    """Every user / client-id quota entity of the cluster with its :data:`QUOTA_KEYS` values."""
    try:
        with _connect(cluster) as conn:
            body = array([]) + b"\x00"  # no component filter, not strict: every entity
            r = Reader(conn.call(DESCRIBE_CLIENT_QUOTAS, conn.version(DESCRIBE_CLIENT_QUOTAS, (0,)), body))
            r.int32()  # throttle time
            code, message = r.int16(), r.string()
            if code:
                raise _error(cluster, "describe client quotas", code, message)
            out: dict[Entity, dict[str, float]] = {}
            for _ in range(r.count(8)):
                entity = _entity(r)
                values = {}
                for _ in range(r.count(10)):
                    key = r.string() or ""
                    values[key] = float(r.take(">d")[0])
                if all(kind in ENTITY_TYPES for kind, _ in entity):
                    kept = {k: v for k, v in values.items() if k in QUOTA_KEYS}
                    if kept:
                        out[entity] = kept
            return out
    except (WireError, ProtocolError, OSError) as exc:
        raise QuotaError(f"client quotas: cluster {cluster.alias}: {exc} (nothing was changed)") from None


def alter_quotas(cluster: ClusterConfig, values: Mapping[Entity, Mapping[str, float | None]],
                 validate_only: bool) -> None:
    """Set these quotas (a value None removes it), in one request; a refusal of any entity raises one line naming
    it (with ``validate_only`` nothing is changed either way)."""
    entries = []
    for entity, keys in values.items():
        ops = [string(k) + struct.pack(">d", v or 0.0) + (b"\x01" if v is None else b"\x00")
               for k, v in sorted(keys.items())]
        entries.append(array(string(kind) + string(name) for kind, name in entity) + array(ops))
    body = array(entries) + (b"\x01" if validate_only else b"\x00")
    try:
        with _connect(cluster) as conn:
            r = Reader(conn.call(ALTER_CLIENT_QUOTAS, conn.version(ALTER_CLIENT_QUOTAS, (0,)), body))
            r.int32()
            for _ in range(r.count(8)):
                code, message, entity = r.int16(), r.string(), _entity(r)
                if code:
                    raise _error(cluster, f"set the quotas of {entity_name(entity)}", code, message)
    except (WireError, ProtocolError, OSError) as exc:
        raise QuotaError(f"client quotas: cluster {cluster.alias}: {exc} (nothing was changed)") from None


def quota_changes(source: Mapping[Entity, Mapping[str, float]],
                  target: Mapping[Entity, Mapping[str, float]]) -> list[QuotaChange]:
    """What makes the target's quotas the source's (a quota only the target has stays)."""
    out = []
    for entity in sorted(source, key=entity_name):
        have = target.get(entity, {})
        for key, value in sorted(source[entity].items()):
            if have.get(key) != value:
                out.append(QuotaChange(entity_name(entity), key, have.get(key), value))
    return out


def copy_quotas(source: ClusterConfig, target: ClusterConfig, dry_run: bool = False) -> list[QuotaChange]:
    """Copy the source's client quotas to the target (validated by the target first: all or nothing)."""
    wanted = describe_quotas(source)
    changes = quota_changes(wanted, describe_quotas(target))
    if changes and not dry_run:
        names = {c.entity for c in changes}
        values: dict[Entity, dict[str, float | None]] = {
            e: dict(keys.items()) for e, keys in wanted.items() if entity_name(e) in names}
        alter_quotas(target, values, validate_only=True)
        alter_quotas(target, values, validate_only=False)
    return changes


def record_quota_changes(store: StateStore, flow: str, changes: list[QuotaChange], dry_run: bool,
                         run_id: str | None = None) -> int:
    """The changes as a sync run of ``flow`` in the drift history (kind ``quota``, the entity as the topic)."""
    sync_id = store.start_sync_run(flow, dry_run, run_id)
    action = "proposed" if dry_run else "applied"
    store.add(*[DriftEvent(sync_run_id=sync_id, flow=flow, topic=c.entity, kind="quota", detail=c.describe(),
                           action=action) for c in changes])
    store.finish_sync_run(sync_id, "drift" if changes else "ok", {"quotas": len(changes)})
    return sync_id
