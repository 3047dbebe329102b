"""Tables of the state store. Schema changes go through Alembic migrations (migrations/versions)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    false,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


def utcnow() -> datetime:
    return datetime.now(UTC)


def aware(at: datetime) -> datetime:
    """SQLite hands back naive datetimes for ``DateTime(timezone=True)``; they were written in UTC."""
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


class Base(DeclarativeBase):
    type_annotation_map = {dict[str, Any]: JSON, list[Any]: JSON}


class Cluster(Base):
    """A cluster as configured (aliases are the config's; bootstrap servers for display only)."""

    __tablename__ = "clusters"
    alias: Mapped[str] = mapped_column(String(128), primary_key=True)
    bootstrap_servers: Mapped[str] = mapped_column(Text)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class Flow(Base):
    """A flow as configured: enabled, or standby (``A->B.enabled = false``, started only by a workflow)."""

    __tablename__ = "flows"
    name: Mapped[str] = mapped_column(String(300), primary_key=True)  # "dc1->dc2"
    source: Mapped[str] = mapped_column(String(128))
    target: Mapped[str] = mapped_column(String(128))
    policy: Mapped[str] = mapped_column(String(64))
    exactly_once: Mapped[bool] = mapped_column(Boolean, default=False)
    standby: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class FlowRun:
    """Columns every workflow record of one flow has: which flow, which Airflow run, how it went."""

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    flow: Mapped[str] = mapped_column(String(300), index=True)
    run_id: Mapped[str | None] = mapped_column(String(250))
    status: Mapped[str] = mapped_column(String(32))
    started_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class SyncRun(FlowRun, Base):
    """One topic-config sync run (scheduled, manual or CLI), dry or applied; status ok | drift | failed."""

    __tablename__ = "sync_runs"
    dry_run: Mapped[bool] = mapped_column(Boolean)
    summary: Mapped[dict[str, Any]] = mapped_column(default=dict)


class TopicSnapshot(Base):
    """A source topic and its remote copy as seen by a sync run."""

    __tablename__ = "topic_snapshots"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    sync_run_id: Mapped[int] = mapped_column(ForeignKey("sync_runs.id", ondelete="CASCADE"), index=True)
    topic: Mapped[str] = mapped_column(String(300))
    remote_topic: Mapped[str] = mapped_column(String(300))
    partitions: Mapped[int] = mapped_column(Integer)
    remote_partitions: Mapped[int | None] = mapped_column(Integer)
    configs: Mapped[dict[str, Any]] = mapped_column(default=dict)
    remote_configs: Mapped[dict[str, Any]] = mapped_column(default=dict)


class DriftEvent(Base):
    """One difference found between a source topic and its remote copy, and what was done about it."""

    __tablename__ = "drift_events"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    sync_run_id: Mapped[int] = mapped_column(ForeignKey("sync_runs.id", ondelete="CASCADE"), index=True)
    flow: Mapped[str] = mapped_column(String(300), index=True)
    topic: Mapped[str] = mapped_column(String(300))
    kind: Mapped[str] = mapped_column(String(64))  # missing | partitions | config | acl | target-has-more-partitions
    detail: Mapped[str] = mapped_column(Text)
    action: Mapped[str] = mapped_column(String(32))  # applied | proposed | refused | failed
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow, index=True)


class ReconciliationReport(FlowRun, Base):
    __tablename__ = "reconciliation_reports"
    summary: Mapped[dict[str, Any]] = mapped_column(default=dict)
    partitions: Mapped[list[Any]] = mapped_column(default=list)


class DrDrill(FlowRun, Base):
    __tablename__ = "dr_drills"
    rpo_records: Mapped[int | None] = mapped_column(Integer)
    rto_seconds: Mapped[float | None] = mapped_column(Float)
    duplicates: Mapped[int | None] = mapped_column(Integer)
    losses: Mapped[int | None] = mapped_column(Integer)
    report: Mapped[dict[str, Any]] = mapped_column(default=dict)


class Cutover(Base):
    __tablename__ = "cutovers"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    source: Mapped[str] = mapped_column(String(128))
    target: Mapped[str] = mapped_column(String(128))
    run_id: Mapped[str | None] = mapped_column(String(250))
    status: Mapped[str] = mapped_column(String(32))
    started_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    details: Mapped[dict[str, Any]] = mapped_column(default=dict)


class Failover(Base):
    """A failover or a failback: triggered -> assessed (``started_at``) -> approved -> finished.

    RTO is ``finished_at - triggered_at`` once done (:attr:`rto_seconds`).
    """

    __tablename__ = "failovers"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    kind: Mapped[str] = mapped_column(String(16))  # failover | failback
    flow: Mapped[str] = mapped_column(String(300))
    planned: Mapped[bool] = mapped_column(Boolean)
    run_id: Mapped[str | None] = mapped_column(String(250))
    status: Mapped[str] = mapped_column(String(32))
    approved_by: Mapped[str | None] = mapped_column(String(250))
    triggered_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))  # the workflow run began
    started_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)  # assessed, recorded
    approved_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))  # the gate was answered
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    details: Mapped[dict[str, Any]] = mapped_column(default=dict)

    @property
    def rto_seconds(self) -> float | None:
        """From the trigger to the end of a completed workflow (None until it is done)."""
        if self.status != "done" or self.finished_at is None or self.triggered_at is None:
            return None
        return round((aware(self.finished_at) - aware(self.triggered_at)).total_seconds(), 1)

    @property
    def rto_from_approval_seconds(self) -> float | None:
        """From the approval to the end of a completed workflow (the time a human took is not in it)."""
        if self.status != "done" or self.finished_at is None or self.approved_at is None:
            return None
        return round((aware(self.finished_at) - aware(self.approved_at)).total_seconds(), 1)

    @property
    def rpo_measured(self) -> int | None:
        """Records on the old primary not on the standby when the forward flow stopped (None: not measured,
        e.g. the primary was unreachable at the switch); the estimate at approval is ``details["rpo_records"]``."""
        value = (self.details or {}).get("rpo_measured")
        return value if isinstance(value, int) else None


class ActiveCluster(Base):
    """Which cluster an application alias uses now; changed only by failover/failback/cutover."""

    __tablename__ = "active_clusters"
    app_alias: Mapped[str] = mapped_column(String(250), primary_key=True)
    cluster: Mapped[str] = mapped_column(String(128))
    changed_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    changed_by: Mapped[str] = mapped_column(String(250))
    reason: Mapped[str] = mapped_column(Text)
    run_id: Mapped[str | None] = mapped_column(String(250))


class ActiveClusterChange(Base):
    """History of the registry: who moved which application to which cluster, when and why."""

    __tablename__ = "active_cluster_changes"
    __table_args__ = (UniqueConstraint("app_alias", "changed_at", name="uq_change_alias_time"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    app_alias: Mapped[str] = mapped_column(String(250), index=True)
    from_cluster: Mapped[str | None] = mapped_column(String(128))
    to_cluster: Mapped[str] = mapped_column(String(128))
    changed_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    changed_by: Mapped[str] = mapped_column(String(250))
    reason: Mapped[str] = mapped_column(Text)
    run_id: Mapped[str | None] = mapped_column(String(250))


class FlowControl(Base):
    """Desired state of a flow, set by the workflows; every mirror instance obeys it."""

    __tablename__ = "flow_controls"
    flow: Mapped[str] = mapped_column(String(300), primary_key=True)
    desired: Mapped[str] = mapped_column(String(16))  # running | stopped
    changed_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    changed_by: Mapped[str] = mapped_column(String(250))
    reason: Mapped[str] = mapped_column(Text)
    run_id: Mapped[str | None] = mapped_column(String(250))


class FlowInstance(Base):
    """What each running mirror instance last reported for a flow (its heartbeat to the control plane)."""

    __tablename__ = "flow_instances"
    instance: Mapped[str] = mapped_column(String(250), primary_key=True)
    flow: Mapped[str] = mapped_column(String(300), primary_key=True)
    state: Mapped[str] = mapped_column(String(16))  # running | stopped
    seen_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow, index=True)
    #: the instance's paused source partitions of the flow: [{"topic", "partition", "reason", "since"}]
    #: ("since": ISO 8601, when this pause was first reported); NULL in rows written before migration 0006
    paused: Mapped[list[Any] | None] = mapped_column(JSON, nullable=True)
    #: the topic and group filters the instance applies to the flow ({"topics", "topics.exclude", "groups",
    #: "groups.exclude", "filter_id": the state-store filter or None: the config file's}); NULL before 0009
    filters: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)


@dataclass(frozen=True)
class PausedPartition:
    """A source partition a live mirror instance reports paused (damaged batch, record refused by the
    target), with the one-line reason naming what to do; times timezone-aware, UTC."""

    flow: str
    topic: str
    partition: int
    reason: str
    instance: str
    seen_at: datetime  # the instance's last report
    since: datetime  # when the instance first reported this pause (same partition, same reason)

    @property
    def where(self) -> str:
        """``dc1->dc2 orders[0]``"""
        return f"{self.flow} {self.topic}[{self.partition}]"


class PartitionAction(Base):
    """An operator's action on one source partition of a flow, paused by the mirror (damaged batch,
    record refused by the target): ``resume`` re-reads from where it stopped, ``skip`` passes over the
    inclusive offset range ``first_offset``-``last_offset``. Pending until a mirror instance owning the
    partition applies it (``applied_at``, ``applied_by``, ``outcome``, ``ok``); at most one pending
    action per partition (a partial unique index)."""

    __tablename__ = "partition_actions"
    __table_args__ = (
        Index("ix_partition_actions_flow_applied_at", "flow", "applied_at"),
        Index("uq_partition_actions_pending", "flow", "topic", "partition", unique=True,
              sqlite_where=text("applied_at IS NULL"), postgresql_where=text("applied_at IS NULL")),
    )
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    flow: Mapped[str] = mapped_column(String(300))
    topic: Mapped[str] = mapped_column(String(300))
    partition: Mapped[int] = mapped_column(Integer)
    action: Mapped[str] = mapped_column(String(16))  # resume | skip
    first_offset: Mapped[int | None] = mapped_column(BigInteger)  # Kafka offsets are 64-bit
    last_offset: Mapped[int | None] = mapped_column(BigInteger)  # inclusive
    reason: Mapped[str] = mapped_column(Text)
    requested_by: Mapped[str] = mapped_column(String(250))
    requested_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    applied_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    applied_by: Mapped[str | None] = mapped_column(String(250))  # the mirror instance
    outcome: Mapped[str | None] = mapped_column(Text)  # one line
    ok: Mapped[bool | None] = mapped_column(Boolean)

    def record(self) -> PartitionActionRecord:
        return PartitionActionRecord(
            id=self.id, flow=self.flow, topic=self.topic, partition=self.partition, action=self.action,
            first_offset=self.first_offset, last_offset=self.last_offset, reason=self.reason,
            requested_by=self.requested_by, requested_at=aware(self.requested_at),
            applied_at=aware(self.applied_at) if self.applied_at is not None else None,
            applied_by=self.applied_by, outcome=self.outcome, ok=self.ok)


@dataclass(frozen=True)
class PartitionActionRecord:
    """A :class:`PartitionAction` as a plain value (times timezone-aware, UTC)."""

    id: int
    flow: str
    topic: str
    partition: int
    action: str  # resume | skip
    first_offset: int | None
    last_offset: int | None  # inclusive
    reason: str
    requested_by: str
    requested_at: datetime
    applied_at: datetime | None
    applied_by: str | None
    outcome: str | None
    ok: bool | None

    @property
    def pending(self) -> bool:
        return self.applied_at is None

    @property
    def where(self) -> str:
        """``dc1->dc2 orders[0]``"""
        return f"{self.flow} {self.topic}[{self.partition}]"

    @property
    def offsets(self) -> str:
        """``3061-3263`` (inclusive), ``3061`` for one offset, ``""`` for a resume."""
        if self.first_offset is None or self.last_offset is None:
            return ""
        if self.first_offset == self.last_offset:
            return str(self.first_offset)
        return f"{self.first_offset}-{self.last_offset}"


def plan_digest(plan: Any) -> str:
    """sha256 of the plan as canonical JSON (keys sorted, no spaces, UTF-8): what an approver approves."""
    canonical = json.dumps(plan, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


class BoundPlan(Base):
    """The plan a failover, failback or cutover run assessed, bound to its run: the later steps read it from
    here (never from an XCom) and run it only if its digest is the one the approvers approved.

    Invariant: ``digest == plan_digest(plan)``, written once at assessment (one row per DAG run)."""

    __tablename__ = "bound_plans"
    __table_args__ = (UniqueConstraint("dag_id", "run_id", name="uq_bound_plans_run"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    dag_id: Mapped[str] = mapped_column(String(250))
    run_id: Mapped[str] = mapped_column(String(250))
    kind: Mapped[str] = mapped_column(String(16))  # failover | failback | cutover
    record_id: Mapped[int] = mapped_column(Integer)  # failovers.id or cutovers.id
    plan: Mapped[dict[str, Any]] = mapped_column(JSON)
    digest: Mapped[str] = mapped_column(String(64))
    triggered_by: Mapped[str | None] = mapped_column(String(250))  # the Airflow user id who triggered the run
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class PlanApproval(Base):
    """One gate of a bound plan: the digest it showed (``asked_at``), then who answered what and when.
    ``refused``: the one-line reason the answer was not accepted (a self-approval, a changed plan)."""

    __tablename__ = "plan_approvals"
    __table_args__ = (UniqueConstraint("plan_id", "gate", name="uq_plan_approvals_gate"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    plan_id: Mapped[int] = mapped_column(ForeignKey("bound_plans.id", ondelete="CASCADE"), index=True)
    gate: Mapped[str] = mapped_column(String(250))  # the gate's task id
    digest: Mapped[str] = mapped_column(String(64))  # the plan digest the gate showed
    asked_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    chosen: Mapped[str | None] = mapped_column(Text)
    approver_id: Mapped[str | None] = mapped_column(String(250))  # the Airflow user id
    approver_name: Mapped[str | None] = mapped_column(String(250))  # its display name, beside it
    answered_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    refused: Mapped[str | None] = mapped_column(Text)


@dataclass(frozen=True)
class GateAnswer:
    """A :class:`PlanApproval` as a plain value (times timezone-aware, UTC)."""

    gate: str
    digest: str
    chosen: str | None
    approver_id: str | None
    approver_name: str | None
    answered_at: datetime | None
    refused: str | None

    @property
    def approver(self) -> str:
        """``dana (Dana Scully)``: the user id, the display name beside it when it differs."""
        who = self.approver_id or "nobody"
        return f"{who} ({self.approver_name})" if self.approver_name and self.approver_name != who else who


@dataclass(frozen=True)
class BoundPlanRecord:
    """A :class:`BoundPlan` and its gates' answers as plain values."""

    dag_id: str
    run_id: str
    kind: str
    record_id: int
    plan: dict[str, Any]
    digest: str
    triggered_by: str | None
    created_at: datetime
    gates: dict[str, GateAnswer]

    @property
    def intact(self) -> bool:
        """The stored plan still hashes to the digest recorded with it."""
        return plan_digest(self.plan) == self.digest


class TopicControl(Base):
    """An operator's desired control of part of a flow, applied by every mirror instance running it:
    ``pause`` a source topic (``partition`` NULL) or one partition of it; ``limit`` the bytes per second
    copied for the whole flow (``topic`` NULL) or one topic (``limit_bytes_per_s``). Who, when and why it
    was set and cleared. Active while ``cleared_at`` is NULL.

    Invariant: at most one active row per (flow, kind, scope) — a partial unique index over ``scope``
    (``""`` the whole flow, ``orders`` a topic, ``orders[3]`` a partition: never NULL, so the index holds
    where topic or partition are), also against two operators changing the same thing at once."""

    __tablename__ = "topic_controls"
    __table_args__ = (
        Index("ix_topic_controls_flow_cleared_at", "flow", "cleared_at"),
        Index("uq_topic_controls_active", "flow", "kind", "scope", unique=True,
              sqlite_where=text("cleared_at IS NULL"), postgresql_where=text("cleared_at IS NULL")),
    )
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    flow: Mapped[str] = mapped_column(String(300))
    kind: Mapped[str] = mapped_column(String(16))  # pause | limit
    topic: Mapped[str | None] = mapped_column(String(300))  # None: the whole flow ("limit" only)
    partition: Mapped[int | None] = mapped_column(Integer)  # None: the whole topic; set for "pause" only
    scope: Mapped[str] = mapped_column(String(320))  # "" | topic | topic[partition]: the unique key
    limit_bytes_per_s: Mapped[int | None] = mapped_column(BigInteger)  # "limit" only, > 0
    reason: Mapped[str] = mapped_column(Text)
    set_by: Mapped[str] = mapped_column(String(250))
    set_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    cleared_by: Mapped[str | None] = mapped_column(String(250))
    cleared_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    clear_reason: Mapped[str | None] = mapped_column(Text)

    def record(self) -> TopicControlRecord:
        return TopicControlRecord(
            id=self.id, flow=self.flow, kind=self.kind, topic=self.topic, partition=self.partition,
            limit_bytes_per_s=self.limit_bytes_per_s, reason=self.reason, set_by=self.set_by,
            set_at=aware(self.set_at), cleared_by=self.cleared_by,
            cleared_at=aware(self.cleared_at) if self.cleared_at is not None else None,
            clear_reason=self.clear_reason)


@dataclass(frozen=True)
class TopicControlRecord:
    """A :class:`TopicControl` as a plain value (times timezone-aware, UTC)."""

    id: int
    flow: str
    kind: str  # pause | limit
    topic: str | None  # None: the whole flow (a limit)
    partition: int | None  # None: the whole topic
    limit_bytes_per_s: int | None  # a limit's bytes per second; None for a pause
    reason: str
    set_by: str
    set_at: datetime
    cleared_by: str | None
    cleared_at: datetime | None
    clear_reason: str | None

    @property
    def active(self) -> bool:
        return self.cleared_at is None

    @property
    def scope(self) -> str:
        """``orders[3]``, ``orders``, or ``""`` for the whole flow."""
        return control_scope(self.topic, self.partition)

    @property
    def where(self) -> str:
        """``dc1->dc2 orders[3]``, ``dc1->dc2 orders``, ``dc1->dc2 (whole flow)``"""
        return f"{self.flow} {self.scope or '(whole flow)'}"


def control_scope(topic: str | None, partition: int | None) -> str:
    """The key a :class:`TopicControl` is unique on within its flow and kind."""
    if topic is None:
        return ""
    return topic if partition is None else f"{topic}[{partition}]"


FILTER_KEYS = ("topics", "topics.exclude", "groups", "groups.exclude")


class FlowFilter(Base):
    """The topic and group filters of a flow set in the state store: each key (``topics``, ``topics.exclude``,
    ``groups``, ``groups.exclude``; comma-separated regexes as in the config file) overrides the file's value, NULL
    keeps it. Who, when and why it was set and cleared; active while ``cleared_at`` is NULL.

    Invariant: at most one active row per flow (a partial unique index), also against two operators at once."""

    __tablename__ = "flow_filters"
    __table_args__ = (
        Index("uq_flow_filters_active", "flow", unique=True,
              sqlite_where=text("cleared_at IS NULL"), postgresql_where=text("cleared_at IS NULL")),
    )
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    flow: Mapped[str] = mapped_column(String(300))
    topics: Mapped[str | None] = mapped_column(Text)
    topics_exclude: Mapped[str | None] = mapped_column(Text)
    groups: Mapped[str | None] = mapped_column(Text)
    groups_exclude: Mapped[str | None] = mapped_column(Text)
    reason: Mapped[str] = mapped_column(Text)
    set_by: Mapped[str] = mapped_column(String(250))
    set_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    cleared_by: Mapped[str | None] = mapped_column(String(250))
    cleared_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    clear_reason: Mapped[str | None] = mapped_column(Text)

    def record(self) -> FlowFilterRecord:
        return FlowFilterRecord(
            id=self.id, flow=self.flow,
            values={"topics": self.topics, "topics.exclude": self.topics_exclude, "groups": self.groups,
                    "groups.exclude": self.groups_exclude},
            reason=self.reason, set_by=self.set_by, set_at=aware(self.set_at), cleared_by=self.cleared_by,
            cleared_at=aware(self.cleared_at) if self.cleared_at is not None else None, clear_reason=self.clear_reason)


@dataclass(frozen=True)
class FlowFilterRecord:
    """A :class:`FlowFilter` as a plain value: ``values`` by config key (None: the file's value kept)."""

    id: int
    flow: str
    values: dict[str, str | None]
    reason: str
    set_by: str
    set_at: datetime
    cleared_by: str | None
    cleared_at: datetime | None
    clear_reason: str | None

    @property
    def active(self) -> bool:
        return self.cleared_at is None

    @property
    def overrides(self) -> dict[str, str]:
        """The keys it sets (``""`` is a value: an empty include list copies nothing)."""
        return {k: v for k, v in self.values.items() if v is not None}
