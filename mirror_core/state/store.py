"""StateStore: one object owning the database (URL from MIRROR_CORE_DB_URL, SQLite by default)."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from importlib import resources
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, Select, create_engine, desc, func, select, update
from sqlalchemy.exc import IntegrityError, SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from mirror_core.config.model import MirrorConfig
from mirror_core.state import flow_filters as ff
from mirror_core.state import topic_controls as tc
from mirror_core.state.errors import StateStoreError
from mirror_core.state.migration_lock import advisory_lock, file_lock
from mirror_core.state.models import (
    ActiveCluster,
    ActiveClusterChange,
    BoundPlan,
    BoundPlanRecord,
    Cluster,
    Cutover,
    DrDrill,
    DriftEvent,
    Failover,
    Flow,
    FlowControl,
    FlowFilter,
    FlowFilterRecord,
    FlowInstance,
    GateAnswer,
    PartitionAction,
    PartitionActionRecord,
    PausedPartition,
    PlanApproval,
    ReconciliationReport,
    SyncRun,
    TopicControl,
    TopicControlRecord,
    control_scope,
    plan_digest,
    utcnow,
)

DEFAULT_DB_URL = "sqlite:///" + str(Path.cwd() / ".state" / "mirror-core.db")
PARTITION_ACTIONS = ("resume", "skip")
_INT32_MAX, _INT64_MAX = 2**31 - 1, 2**63 - 1


def _aware(t: datetime) -> datetime:
    """SQLite returns naive datetimes (stored as UTC); PostgreSQL returns aware ones."""
    return t if t.tzinfo is not None else t.replace(tzinfo=UTC)


def default_url() -> str:
    return os.environ.get("MIRROR_CORE_DB_URL", DEFAULT_DB_URL)


def alembic_config(url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(resources.files("mirror_core.state").joinpath("migrations")))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


class StateStore:
    def __init__(self, url: str | None = None) -> None:
        self.url = url or default_url()
        if self.url.startswith("sqlite:///"):
            Path(self.url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
        self.engine: Engine = create_engine(self.url, pool_pre_ping=True)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)

    def migrate(self) -> None:
        """Bring the schema to the newest migration (idempotent), one process at a time (migration_lock.py:
        an advisory lock on PostgreSQL, a file lock on SQLite)."""
        try:
            with file_lock(self.engine.url), self.engine.begin() as connection:
                advisory_lock(connection)
                cfg = alembic_config(self.url)
                cfg.attributes["connection"] = connection
                command.upgrade(cfg, "head")
        except SQLAlchemyError as exc:
            raise StateStoreError(f"cannot migrate the state store at {self.safe_url}: {exc}") from exc

    @property
    def safe_url(self) -> str:
        """The URL without its password, for messages."""
        return self.engine.url.render_as_string(hide_password=True)

    @contextmanager
    def session(self) -> Iterator[Session]:
        with self._sessions() as s, s.begin():
            yield s

    # -- configuration ------------------------------------------------------------------------------
    def record_config(self, config: MirrorConfig) -> None:
        """Upsert the clusters and every flow, enabled or standby (a flow can change between the two)."""
        standby = {f.name for f in config.standby_flows}
        with self.session() as s:
            for c in config.clusters.values():
                s.merge(Cluster(alias=c.alias, bootstrap_servers=c.bootstrap_servers, updated_at=utcnow()))
            for f in config.all_flows:
                s.merge(Flow(name=f.name, source=f.source, target=f.target, policy=f.policy.name,
                             exactly_once=f.exactly_once, standby=f.name in standby, updated_at=utcnow()))

    def flows(self) -> list[Flow]:
        """The configured flows by name (standby ones marked)."""
        with self.session() as s:
            return list(s.scalars(select(Flow).order_by(Flow.name)))

    # -- topic-config sync --------------------------------------------------------------------------
    def start_sync_run(self, flow: str, dry_run: bool, run_id: str | None) -> int:
        with self.session() as s:
            run = SyncRun(flow=flow, dry_run=dry_run, run_id=run_id, status="running", summary={})
            s.add(run)
            s.flush()
            return run.id

    def finish_sync_run(self, run_id: int, status: str, summary: dict[str, Any]) -> None:
        with self.session() as s:
            run = s.get(SyncRun, run_id)
            if run is None:
                raise StateStoreError(f"sync run {run_id} not found")
            run.status, run.summary, run.finished_at = status, summary, utcnow()

    def add(self, *rows: Any) -> None:
        with self.session() as s:
            s.add_all(rows)

    def recent_drift(self, flow: str | None = None, limit: int = 50) -> list[DriftEvent]:
        with self.session() as s:
            q = select(DriftEvent).order_by(desc(DriftEvent.created_at), desc(DriftEvent.id)).limit(limit)
            if flow:
                q = q.where(DriftEvent.flow == flow)
            return list(s.scalars(q))

    def sync_runs(self, flow: str | None = None, limit: int = 20) -> list[SyncRun]:
        with self.session() as s:
            q = select(SyncRun).order_by(desc(SyncRun.id)).limit(limit)
            if flow:
                q = q.where(SyncRun.flow == flow)
            return list(s.scalars(q))

    # -- active-cluster registry --------------------------------------------------------------------
    def active_cluster(self, app_alias: str) -> ActiveCluster | None:
        with self.session() as s:
            return s.get(ActiveCluster, app_alias)

    def set_active_cluster(self, app_alias: str, cluster: str, changed_by: str, reason: str,
                           run_id: str | None = None) -> ActiveClusterChange:
        """Point ``app_alias`` at ``cluster``, keeping the history (who, when, why, which run)."""
        if not changed_by.strip() or not reason.strip():
            raise StateStoreError("a registry change needs who made it and why")
        with self.session() as s:
            current = s.get(ActiveCluster, app_alias, with_for_update=True)
            now = utcnow()
            change = ActiveClusterChange(app_alias=app_alias, from_cluster=current.cluster if current else None,
                                         to_cluster=cluster, changed_at=now, changed_by=changed_by, reason=reason,
                                         run_id=run_id)
            s.add(change)
            if current is None:
                s.add(ActiveCluster(app_alias=app_alias, cluster=cluster, changed_at=now, changed_by=changed_by,
                                    reason=reason, run_id=run_id))
            else:
                current.cluster, current.changed_at, current.changed_by = cluster, now, changed_by
                current.reason, current.run_id = reason, run_id
            return change

    def registry(self) -> list[ActiveCluster]:
        with self.session() as s:
            return list(s.scalars(select(ActiveCluster).order_by(ActiveCluster.app_alias)))

    def registry_history(self, app_alias: str | None = None, limit: int = 100) -> list[ActiveClusterChange]:
        with self.session() as s:
            q = select(ActiveClusterChange).order_by(desc(ActiveClusterChange.changed_at),
                                                     desc(ActiveClusterChange.id)).limit(limit)
            if app_alias:
                q = q.where(ActiveClusterChange.app_alias == app_alias)
            return list(s.scalars(q))

    # -- flow control ---------------------------------------------------------------------------------
    def set_flow_desired(self, flow: str, desired: str, changed_by: str, reason: str,
                         run_id: str | None = None) -> None:
        """Ask every mirror instance to run or stop ``flow`` (recorded: who, when, why, which run)."""
        if desired not in ("running", "stopped"):
            raise StateStoreError(f"desired flow state must be 'running' or 'stopped', got {desired!r}")
        with self.session() as s:
            row = s.get(FlowControl, flow, with_for_update=True)
            if row is None:
                row = FlowControl(flow=flow)
                s.add(row)
            row.desired, row.changed_at, row.changed_by, row.reason, row.run_id = (
                desired, utcnow(), changed_by, reason, run_id)

    def flow_controls(self) -> dict[str, FlowControl]:
        with self.session() as s:
            return {r.flow: r for r in s.scalars(select(FlowControl))}

    def report_flow_states(self, instance: str, states: dict[str, str],
                           paused: dict[str, list[dict[str, Any]]] | None = None,
                           filters: dict[str, dict[str, Any]] | None = None) -> None:
        """A mirror instance's heartbeat: the state it applies to each of its flows and, in ``paused[flow]``,
        its paused source partitions of the flow, each ``{"topic": str, "partition": int, "reason": str}``
        (``reason`` one line; a flow absent from ``paused``, or ``paused`` None: none paused). A pause
        reported again (same partition, same reason) keeps the time it was first reported (``since``).
        ``filters[flow]``: the topic and group filters it applies (FlowInstance.filters)."""
        now = utcnow()
        with self.session() as s:
            for flow, state in states.items():
                row = s.get(FlowInstance, (instance, flow))
                entries = _paused_entries((paused or {}).get(flow) or [], row.paused if row else None, now)
                applied = (filters or {}).get(flow)
                if row is None:
                    s.add(FlowInstance(instance=instance, flow=flow, state=state, seen_at=now, paused=entries,
                                       filters=applied))
                else:
                    row.state, row.seen_at, row.paused, row.filters = state, now, entries, applied

    def paused_partitions(self, fresh_s: float = 20.0, flow: str | None = None) -> list[PausedPartition]:
        """The source partitions paused on instances that reported within the last ``fresh_s`` seconds
        (of ``flow``, if given), by flow, topic, partition and instance."""
        since = utcnow() - timedelta(seconds=fresh_s)
        with self.session() as s:
            q = select(FlowInstance)
            if flow:
                q = q.where(FlowInstance.flow == flow)
            rows = [r for r in s.scalars(q) if r.paused and _aware(r.seen_at) >= since]
        out = [PausedPartition(flow=r.flow, topic=p["topic"], partition=p["partition"], reason=p["reason"],
                               instance=r.instance, seen_at=_aware(r.seen_at),
                               since=_aware(datetime.fromisoformat(p["since"])) if p.get("since")
                               else _aware(r.seen_at))
               for r in rows for p in r.paused or []]
        return sorted(out, key=lambda p: (p.flow, p.topic, p.partition, p.instance))

    def flow_instances(self, flow: str, fresh_s: float = 20.0) -> list[FlowInstance]:
        """Instances that reported on ``flow`` within the last ``fresh_s`` seconds."""
        since = utcnow() - timedelta(seconds=fresh_s)
        with self.session() as s:
            q = select(FlowInstance).where(FlowInstance.flow == flow)
            return [r for r in s.scalars(q) if _aware(r.seen_at) >= since]

    # -- failovers, failbacks and cutovers ----------------------------------------------------------------
    def start_failover(self, kind: str, flow: str, planned: bool, run_id: str | None,
                       details: dict[str, Any], triggered_at: datetime | None = None) -> int:
        """Record an assessed failover/failback awaiting approval; ``triggered_at``: when its run began."""
        with self.session() as s:
            row = Failover(kind=kind, flow=flow, planned=planned, run_id=run_id, status="awaiting-approval",
                           details=details, triggered_at=triggered_at)
            s.add(row)
            s.flush()
            return int(row.id)

    def approve_failover(self, failover_id: int, approved_by: str, approved_at: datetime | None = None) -> None:
        """The gate was answered with approval (``approved_at``: when; now if not known): it executes."""
        with self.session() as s:
            row = s.get(Failover, failover_id, with_for_update=True)
            if row is None:
                raise StateStoreError(f"no failover record {failover_id}")
            row.status, row.approved_by, row.approved_at = "executing", approved_by, approved_at or utcnow()

    def finish_failover(self, failover_id: int, status: str, approved_by: str | None = None,
                        **details: Any) -> None:
        """Close a failover/failback record; ``details`` are merged into what it holds."""
        with self.session() as s:
            row = s.get(Failover, failover_id, with_for_update=True)
            if row is None:
                raise StateStoreError(f"no failover record {failover_id}")
            row.status, row.finished_at = status, utcnow()
            if approved_by:
                row.approved_by = approved_by
            row.details = {**row.details, **details}

    def failovers(self, limit: int = 20) -> list[Failover]:
        with self.session() as s:
            return list(s.scalars(select(Failover).order_by(desc(Failover.id)).limit(limit)))

    def start_cutover(self, source: str, target: str, run_id: str | None, details: dict[str, Any]) -> int:
        with self.session() as s:
            row = Cutover(source=source, target=target, run_id=run_id, status="running", details=details)
            s.add(row)
            s.flush()
            return int(row.id)

    def finish_cutover(self, cutover_id: int, status: str, **details: Any) -> None:
        with self.session() as s:
            row = s.get(Cutover, cutover_id, with_for_update=True)
            if row is None:
                raise StateStoreError(f"no cutover record {cutover_id}")
            row.status, row.finished_at = status, utcnow()
            row.details = {**row.details, **details}

    def cutovers(self, limit: int = 20) -> list[Cutover]:
        with self.session() as s:
            return list(s.scalars(select(Cutover).order_by(desc(Cutover.id)).limit(limit)))

    def failover_record(self, failover_id: int) -> Failover | None:
        with self.session() as s:
            return s.get(Failover, failover_id)

    def cutover_record(self, cutover_id: int) -> Cutover | None:
        with self.session() as s:
            return s.get(Cutover, cutover_id)

    def note_failover(self, failover_id: int, **details: Any) -> None:
        """Merge ``details`` into a failover/failback record as a step finishes (its status unchanged)."""
        with self.session() as s:
            row = s.get(Failover, failover_id, with_for_update=True)
            if row is None:
                raise StateStoreError(f"no failover record {failover_id}")
            row.details = {**row.details, **details}

    def note_cutover(self, cutover_id: int, **details: Any) -> None:
        """Merge ``details`` into a cutover record as a step finishes (its status unchanged)."""
        with self.session() as s:
            row = s.get(Cutover, cutover_id, with_for_update=True)
            if row is None:
                raise StateStoreError(f"no cutover record {cutover_id}")
            row.details = {**row.details, **details}

    # -- bound plans: what was approved is what runs ----------------------------------------------------
    def bind_plan(self, dag_id: str, run_id: str, kind: str, record_id: int, plan: dict[str, Any],
                  triggered_by: str | None) -> BoundPlanRecord:
        """Write the plan a run assessed with its digest (once per run: a second one is refused)."""
        digest = plan_digest(plan)
        try:
            with self.session() as s:
                s.add(BoundPlan(dag_id=dag_id, run_id=run_id, kind=kind, record_id=record_id, plan=plan,
                                digest=digest, triggered_by=triggered_by, created_at=utcnow()))
        except IntegrityError:
            raise StateStoreError(f"{dag_id} run {run_id} has a plan bound already: a run assesses once; "
                                  "trigger a new run") from None
        bound = self.bound_plan(dag_id, run_id)
        assert bound is not None
        return bound

    def bound_plan(self, dag_id: str, run_id: str) -> BoundPlanRecord | None:
        """The plan bound to a run and its gates' answers (None: the run bound none)."""
        with self.session() as s:
            row = s.scalars(select(BoundPlan).where(BoundPlan.dag_id == dag_id, BoundPlan.run_id == run_id)).first()
            if row is None:
                return None
            gates = {a.gate: GateAnswer(a.gate, a.digest, a.chosen, a.approver_id, a.approver_name,
                                        _aware(a.answered_at) if a.answered_at else None, a.refused)
                     for a in s.scalars(select(PlanApproval).where(PlanApproval.plan_id == row.id))}
            return BoundPlanRecord(row.dag_id, row.run_id, row.kind, row.record_id, dict(row.plan), row.digest,
                                   row.triggered_by, _aware(row.created_at), gates)

    def ask_gate(self, dag_id: str, run_id: str, gate: str, digest: str) -> None:
        """A gate of the run shows the plan with ``digest`` (asked again: the newer digest is kept)."""
        with self.session() as s:
            plan = s.scalars(select(BoundPlan).where(BoundPlan.dag_id == dag_id, BoundPlan.run_id == run_id)).first()
            if plan is None:
                raise StateStoreError(f"{dag_id} run {run_id} has no bound plan: its assessment did not record one")
            row = s.scalars(select(PlanApproval).where(PlanApproval.plan_id == plan.id,
                                                       PlanApproval.gate == gate)).first()
            if row is None:
                s.add(PlanApproval(plan_id=plan.id, gate=gate, digest=digest, asked_at=utcnow()))
            elif row.answered_at is None:
                row.digest, row.asked_at = digest, utcnow()
            else:
                raise StateStoreError(f"gate {gate} of {dag_id} run {run_id} was answered already")

    def answer_gate(self, dag_id: str, run_id: str, gate: str, chosen: str | None, approver_id: str | None,
                    approver_name: str | None, answered_at: datetime | None, refused: str | None = None) -> GateAnswer:
        """Record who answered a gate (user id and display name), what and when; ``refused``: why the answer
        was not accepted. A gate is answered once."""
        with self.session() as s:
            plan = s.scalars(select(BoundPlan).where(BoundPlan.dag_id == dag_id, BoundPlan.run_id == run_id)).first()
            row = None if plan is None else s.scalars(
                select(PlanApproval).where(PlanApproval.plan_id == plan.id, PlanApproval.gate == gate)
                .with_for_update()).first()
            if row is None:
                raise StateStoreError(f"gate {gate} of {dag_id} run {run_id} was never asked with a bound plan")
            if row.answered_at is not None:
                raise StateStoreError(f"gate {gate} of {dag_id} run {run_id} was answered already (by "
                                      f"{row.approver_id}); an answer is recorded once")
            row.chosen, row.approver_id, row.approver_name = chosen, approver_id, approver_name
            row.answered_at, row.refused = answered_at or utcnow(), refused
            return GateAnswer(row.gate, row.digest, chosen, approver_id, approver_name, _aware(row.answered_at),
                              refused)

    # -- checkpoint reconciliation ------------------------------------------------------------------
    def last_reconciliation(self, flow: str, status: str | None = "ok") -> ReconciliationReport | None:
        """The newest reconciliation of ``flow`` (with ``status``, if given): where the next window starts."""
        with self.session() as s:
            q = select(ReconciliationReport).where(ReconciliationReport.flow == flow)
            if status is not None:
                q = q.where(ReconciliationReport.status == status)
            return s.scalars(q.order_by(desc(ReconciliationReport.id)).limit(1)).first()

    def latest_reconciliations(self) -> list[ReconciliationReport]:
        """The newest reconciliation of every flow, by flow name."""
        with self.session() as s:
            newest = select(func.max(ReconciliationReport.id)).group_by(ReconciliationReport.flow)
            q = select(ReconciliationReport).where(ReconciliationReport.id.in_(newest))
            return list(s.scalars(q.order_by(ReconciliationReport.flow)))

    # -- DR drills ------------------------------------------------------------------------------------
    def record_drill(self, flow: str, run_id: str | None, status: str, started_at: datetime,
                     rpo_records: int | None, rto_seconds: float | None, duplicates: int | None,
                     losses: int | None, report: dict[str, Any]) -> int:
        """One finished DR drill (status passed | failed | error) with its measurements and report."""
        with self.session() as s:
            row = DrDrill(flow=flow, run_id=run_id, status=status, started_at=started_at, finished_at=utcnow(),
                          rpo_records=rpo_records, rto_seconds=rto_seconds, duplicates=duplicates, losses=losses,
                          report=report)
            s.add(row)
            s.flush()
            return int(row.id)

    def drills(self, flow: str | None = None, limit: int = 20) -> list[DrDrill]:
        """The newest drills first."""
        with self.session() as s:
            q = select(DrDrill).order_by(desc(DrDrill.id)).limit(limit)
            if flow:
                q = q.where(DrDrill.flow == flow)
            return list(s.scalars(q))

    # -- operator actions on paused partitions ------------------------------------------------------
    def request_partition_action(self, flow: str, topic: str, partition: int, action: str, requested_by: str,
                                 reason: str, first_offset: int | None = None,
                                 last_offset: int | None = None) -> PartitionActionRecord:
        """Ask the mirror instance owning ``flow``'s source partition ``topic[partition]`` to ``resume`` it
        or to ``skip`` the inclusive offset range ``first_offset``-``last_offset``; recorded with who and why.
        A refusal (StateStoreError, one line) changes nothing; so does a second pending action on the
        partition, also when requested concurrently (the pending index is unique)."""
        where = f"{flow} {topic}[{partition}]"
        _check_partition_action(where, flow, topic, partition, action, requested_by, reason, first_offset,
                                last_offset)
        row = PartitionAction(flow=flow, topic=topic, partition=partition, action=action,
                              first_offset=first_offset, last_offset=last_offset, reason=reason.strip(),
                              requested_by=requested_by.strip(), requested_at=utcnow())
        try:
            with self.session() as s:
                pending = s.scalars(_pending_on(flow, topic, partition)).first()
                if pending is not None:
                    raise _already_pending(pending.record())
                s.add(row)
                s.flush()
                return row.record()
        except IntegrityError as exc:  # a concurrent request came first
            with self.session() as s:
                pending = s.scalars(_pending_on(flow, topic, partition)).first()
            if pending is None:
                raise StateStoreError(f"cannot record the action on {where}: {exc.orig}") from exc
            raise _already_pending(pending.record()) from None

    def pending_partition_actions(self, flows: Iterable[str]) -> list[PartitionActionRecord]:
        """The actions on ``flows`` no instance applied yet, oldest first."""
        names = list(flows)
        if not names:
            return []
        with self.session() as s:
            q = (select(PartitionAction)
                 .where(PartitionAction.flow.in_(names), PartitionAction.applied_at.is_(None))
                 .order_by(PartitionAction.requested_at, PartitionAction.id))
            return [r.record() for r in s.scalars(q)]

    def complete_partition_action(self, action_id: int, applied_by: str, outcome: str, ok: bool) -> bool:
        """Record that ``applied_by`` (a mirror instance) applied the action: True if this call completed
        it, False if it was completed already (by another instance or an earlier call) or does not exist."""
        q = (update(PartitionAction)
             .where(PartitionAction.id == action_id, PartitionAction.applied_at.is_(None))
             .values(applied_at=utcnow(), applied_by=applied_by, outcome=" ".join(outcome.split()), ok=ok)
             .execution_options(synchronize_session=False))
        with self.session() as s:
            return bool(s.execute(q).rowcount == 1)  # type: ignore[attr-defined]

    def partition_actions(self, flow: str | None = None, limit: int = 100) -> list[PartitionActionRecord]:
        """The history of the actions (on ``flow``, if given), newest first."""
        with self.session() as s:
            q = select(PartitionAction).order_by(desc(PartitionAction.id)).limit(limit)
            if flow:
                q = q.where(PartitionAction.flow == flow)
            return [r.record() for r in s.scalars(q)]

    # -- operators' topic controls: pauses and bandwidth limits ----------------------------------------
    def pause_topic(self, flow: str, topic: str, set_by: str, reason: str,
                    partition: int | None = None) -> TopicControlRecord:
        """Ask every mirror instance running ``flow`` to stop copying source ``topic`` (or only its
        ``partition``) until resumed. Refused (one line, nothing written) if that exact scope is paused
        already, also when two operators pause it at once (the active index is unique)."""
        tc.check("pause", flow, topic, partition, set_by, reason)
        row = TopicControl(flow=flow, kind="pause", topic=topic, partition=partition,
                           scope=control_scope(topic, partition), reason=tc.one_line(reason),
                           set_by=set_by.strip(), set_at=utcnow())
        try:
            with self.session() as s:
                current = s.scalars(tc.active_on(flow, "pause", topic, partition)).first()
                if current is not None:
                    raise tc.already_paused(current.record())
                s.add(row)
                s.flush()
                return row.record()
        except IntegrityError as exc:  # a concurrent pause came first
            with self.session() as s:
                current = s.scalars(tc.active_on(flow, "pause", topic, partition)).first()
            if current is None:
                raise tc.refusal("pause", tc.where(flow, topic, partition), str(exc.orig)) from exc
            raise tc.already_paused(current.record()) from None

    def resume_topic(self, flow: str, topic: str, cleared_by: str, reason: str,
                     partition: int | None = None) -> TopicControlRecord:
        """Clear the operator's pause of exactly this scope (the cleared record is returned); refused if
        there is none (an automatic pause is resumed through :meth:`request_partition_action`)."""
        tc.check("resume", flow, topic, partition, cleared_by, reason)
        return self._clear_control("resume", flow, "pause", topic, partition, cleared_by, reason)

    def limit_bandwidth(self, flow: str, set_by: str, reason: str, bytes_per_s: int,
                        topic: str | None = None) -> TopicControlRecord:
        """Limit the bytes per second copied for ``flow`` (``topic`` None) or one source topic of it, across
        all its processes; an active limit of the same scope is replaced in the same transaction."""
        tc.check("limit", flow, topic, None, set_by, reason, bytes_per_s, needs_rate=True)
        at = tc.where(flow, topic, None)
        now = utcnow()
        row = TopicControl(flow=flow, kind="limit", topic=topic, partition=None, scope=control_scope(topic, None),
                           limit_bytes_per_s=bytes_per_s, reason=tc.one_line(reason), set_by=set_by.strip(),
                           set_at=now)
        try:
            with self.session() as s:
                current = s.scalars(tc.active_on(flow, "limit", topic, None)).first()
                if current is not None and not self._cleared(
                        s, current.id, set_by, f"replaced by {bytes_per_s} bytes/s: {reason}", now):
                    raise tc.changed_meanwhile("limit", at, self._active_record(s, flow, "limit", topic, None))
                s.add(row)
                s.flush()
                return row.record()
        except IntegrityError as exc:  # a concurrent limit came first
            with self.session() as s:
                winner = self._active_record(s, flow, "limit", topic, None)
            if winner is None:
                raise tc.refusal("limit", at, str(exc.orig)) from exc
            raise tc.changed_meanwhile("limit", at, winner) from None

    def unlimit_bandwidth(self, flow: str, cleared_by: str, reason: str,
                          topic: str | None = None) -> TopicControlRecord:
        """Lift the bandwidth limit of ``flow`` (``topic`` None) or of one topic (the cleared record is
        returned); refused if there is none."""
        tc.check("unlimit", flow, topic, None, cleared_by, reason)
        return self._clear_control("unlimit", flow, "limit", topic, None, cleared_by, reason)

    def active_topic_controls(self, flows: Iterable[str] | None) -> list[TopicControlRecord]:
        """The active pauses and limits of ``flows`` (None: of every flow) — what the mirrors must apply — by
        flow, kind and scope."""
        names = list(flows) if flows is not None else None
        if names == []:
            return []
        q = (select(TopicControl).where(TopicControl.cleared_at.is_(None))
             .order_by(TopicControl.flow, TopicControl.kind, TopicControl.scope))
        if names is not None:
            q = q.where(TopicControl.flow.in_(names))
        with self.session() as s:
            return [r.record() for r in s.scalars(q)]

    def topic_control_history(self, flow: str | None = None, limit: int = 100) -> list[TopicControlRecord]:
        """Every control set (of ``flow``, if given), active or cleared, newest first."""
        with self.session() as s:
            q = select(TopicControl).order_by(desc(TopicControl.id)).limit(limit)
            if flow:
                q = q.where(TopicControl.flow == flow)
            return [r.record() for r in s.scalars(q)]

    # -- flow filters set in the store (override the config file's) ----------------------------------------
    def set_flow_filter(self, flow: str, set_by: str, reason: str, values: dict[str, str | None],
                        expected: int | None = -1) -> FlowFilterRecord:
        """Set ``flow``'s filters (``values`` by config key; None keeps the file's value), replacing the active ones in
        the same transaction. ``expected``: the id of the active filter the operator saw (None: none; -1: not
        checked); another one there means another operator changed it meanwhile: refused in one line, as is a
        concurrent change (the active index is unique) and a pattern that does not compile; nothing recorded."""
        checked = ff.check("filter", flow, set_by, reason, values)
        now = utcnow()
        row = FlowFilter(flow=flow, topics=checked["topics"], topics_exclude=checked["topics.exclude"],
                         groups=checked["groups"], groups_exclude=checked["groups.exclude"],
                         reason=tc.one_line(reason), set_by=set_by.strip(), set_at=now)
        try:
            with self.session() as s:
                current = s.scalars(_active_filter(flow)).first()
                if expected != -1 and (current.id if current is not None else None) != expected:
                    raise ff.changed_meanwhile("filter", flow, current.record() if current is not None else None)
                if current is not None and not _filter_cleared(s, current.id, set_by, f"replaced: {reason}", now):
                    raise ff.changed_meanwhile("filter", flow, _active_filter_record(s, flow))
                s.add(row)
                s.flush()
                return row.record()
        except IntegrityError as exc:  # a concurrent change came first
            with self.session() as s:
                winner = _active_filter_record(s, flow)
            if winner is None:
                raise ff.refusal("filter", flow, str(exc.orig)) from exc
            raise ff.changed_meanwhile("filter", flow, winner) from None

    def clear_flow_filter(self, flow: str, cleared_by: str, reason: str) -> FlowFilterRecord:
        """Back to the config file's filters for ``flow`` (the cleared record is returned); refused if none is set."""
        ff.check("unfilter", flow, cleared_by, reason, {})
        with self.session() as s:
            current = s.scalars(_active_filter(flow)).first()
            if current is None or not _filter_cleared(s, current.id, cleared_by, reason, utcnow()):
                raise ff.refusal("unfilter", flow, f"{flow} has no filters set in the state store (it applies the "
                                                   "config file's)")
            s.refresh(current)
            return current.record()

    def active_flow_filters(self, flows: Iterable[str] | None = None) -> dict[str, FlowFilterRecord]:
        """The filters set in the store, by flow (None: of every flow)."""
        q = select(FlowFilter).where(FlowFilter.cleared_at.is_(None))
        if flows is not None:
            q = q.where(FlowFilter.flow.in_(list(flows)))
        with self.session() as s:
            return {r.flow: r.record() for r in s.scalars(q)}

    def flow_filter_history(self, flow: str | None = None, limit: int = 100) -> list[FlowFilterRecord]:
        with self.session() as s:
            q = select(FlowFilter).order_by(desc(FlowFilter.id)).limit(limit)
            if flow:
                q = q.where(FlowFilter.flow == flow)
            return [r.record() for r in s.scalars(q)]

    def _clear_control(self, verb: str, flow: str, kind: str, topic: str | None, partition: int | None,
                       cleared_by: str, reason: str) -> TopicControlRecord:
        at = tc.where(flow, topic, partition)
        nothing = tc.not_paused if kind == "pause" else tc.not_limited
        with self.session() as s:
            current = s.scalars(tc.active_on(flow, kind, topic, partition)).first()
            if current is None:
                raise nothing(at)
            if not self._cleared(s, current.id, cleared_by, reason, utcnow()):  # another operator came first
                s.expire_all()
                raise nothing(at, s.get_one(TopicControl, current.id).record())
            s.refresh(current)
            return current.record()

    @staticmethod
    def _cleared(s: Session, control_id: int, who: str, reason: str, at: datetime) -> bool:
        """Clear an active control: False if it was no longer active (cleared concurrently)."""
        q = (update(TopicControl).where(TopicControl.id == control_id, TopicControl.cleared_at.is_(None))
             .values(cleared_at=at, cleared_by=who.strip(), clear_reason=tc.one_line(reason))
             .execution_options(synchronize_session=False))
        return bool(s.execute(q).rowcount == 1)  # type: ignore[attr-defined]

    @staticmethod
    def _active_record(s: Session, flow: str, kind: str, topic: str | None,
                       partition: int | None) -> TopicControlRecord | None:
        row = s.scalars(tc.active_on(flow, kind, topic, partition)).first()
        return row.record() if row is not None else None


def _active_filter(flow: str) -> Select[FlowFilter]:
    return select(FlowFilter).where(FlowFilter.flow == flow, FlowFilter.cleared_at.is_(None))


def _active_filter_record(s: Session, flow: str) -> FlowFilterRecord | None:
    row = s.scalars(_active_filter(flow)).first()
    return row.record() if row is not None else None


def _filter_cleared(s: Session, filter_id: int, who: str, reason: str, at: datetime) -> bool:
    """Clear an active filter row: False if it was no longer active (changed concurrently)."""
    q = (update(FlowFilter).where(FlowFilter.id == filter_id, FlowFilter.cleared_at.is_(None))
         .values(cleared_at=at, cleared_by=who.strip(), clear_reason=tc.one_line(reason))
         .execution_options(synchronize_session=False))
    return bool(s.execute(q).rowcount == 1)  # type: ignore[attr-defined]


def _paused_entries(reported: list[dict[str, Any]], before: list[Any] | None,
                    now: datetime) -> list[dict[str, Any]]:
    """The JSON kept for one flow's paused partitions: topic, partition, reason (one line) and since (kept
    from the previous heartbeat for the same partition and reason, else now)."""
    earlier = {(p.get("topic"), p.get("partition"), p.get("reason")): p.get("since") for p in before or []
               if isinstance(p, dict)}
    out = []
    for p in reported:
        topic, partition, reason = str(p["topic"]), int(p["partition"]), " ".join(str(p["reason"]).split())
        out.append({"topic": topic, "partition": partition, "reason": reason,
                    "since": earlier.get((topic, partition, reason)) or now.isoformat()})
    return out


def _pending_on(flow: str, topic: str, partition: int) -> Any:
    return select(PartitionAction).where(PartitionAction.flow == flow, PartitionAction.topic == topic,
                                         PartitionAction.partition == partition,
                                         PartitionAction.applied_at.is_(None))


def _already_pending(p: PartitionActionRecord) -> StateStoreError:
    what = f"{p.action} of offsets {p.offsets}" if p.offsets else p.action
    return StateStoreError(
        f"an action on {p.where} is pending since {p.requested_at:%Y-%m-%d %H:%M:%S} UTC (id {p.id}, {what}, "
        f"requested by {p.requested_by}): wait for it to apply (a mirror instance owning the partition applies "
        "it within seconds; `mirror-core partitions actions` shows the outcome), then request again")


def _check_partition_action(where: str, flow: str, topic: str, partition: int, action: str, requested_by: str,
                            reason: str, first_offset: int | None, last_offset: int | None) -> None:
    """Raise the one-line StateStoreError naming what is wrong with the request, if anything."""
    problem = None
    if action not in PARTITION_ACTIONS:
        problem = f"unknown action {action!r}: use 'resume' or 'skip'"
    elif not flow.strip() or not topic.strip():
        problem = "a flow (source->target) and a source topic are needed"
    elif len(flow) > 300 or len(topic) > 300:
        problem = "the flow or topic name is longer than 300 characters"
    elif partition < 0:
        problem = f"partition {partition} is negative: partitions are numbered from 0"
    elif partition > _INT32_MAX:
        problem = f"partition {partition} is beyond Kafka's partition numbers (at most {_INT32_MAX})"
    elif not reason.strip():
        problem = "a reason is needed (what happened, e.g. 'CRC mismatch at 3061; leader moved to broker 2')"
    elif not requested_by.strip() or len(requested_by) > 250:
        problem = "who requests it is needed (1-250 characters)"
    elif action == "resume" and (first_offset is not None or last_offset is not None):
        problem = ("'resume' takes no offsets: it re-reads from where the partition stopped (to pass over "
                   "records, request 'skip' with the offsets)")
    elif action == "skip" and (first_offset is None or last_offset is None):
        problem = "'skip' needs the offsets to pass over: first and last (inclusive), as the pause line names them"
    elif action == "skip" and (first_offset < 0 or last_offset < 0):  # type: ignore[operator]
        problem = f"offsets {first_offset}-{last_offset} include a negative offset: offsets start at 0"
    elif action == "skip" and last_offset > _INT64_MAX:  # type: ignore[operator]
        problem = f"offset {last_offset} is beyond Kafka's offsets (at most {_INT64_MAX})"
    elif action == "skip" and first_offset > last_offset:  # type: ignore[operator]
        problem = f"offsets {first_offset}-{last_offset}: the first is after the last (the range is inclusive)"
    if problem is not None:
        raise StateStoreError(f"{action} refused on {where}: {problem}; nothing was recorded")
