"""The mirror status page: a FastAPI app served by the Airflow API server (see plugin.py).

What it shows, and where it comes from:

* **Flows**: every flow the mirrors report (``flow_instances``: each ``mirror-core run --state-db``
  instance reports the state it applies every ~2 s), the workflows control (``flow_controls``) or the
  recorded config knows, plus the flows of the config file (``MIRROR_CORE_CONFIG``), so the page is
  complete on a fresh setup as soon as a mirror runs. A flow's state is what its live instances apply
  (a standby flow a workflow started is *running*), else its configured/desired state.
* **Live lag** per flow and partition, measured from the clusters like ``mirror-core status``, bounded by
  one deadline per page load (status_lag.py, :class:`LagBoard`), so the page stays fast while a cluster is down.
  Every finished measurement is also a sample of the flow's lag history: a ring of the last
  ``HISTORY_SAMPLES`` per flow, in this process's memory (status_lag.py says why).
* **Paused partitions** (what the live instances report: a damaged batch or a record the target refused,
  the reason naming what to do) and the operators' **partition actions** (resume, skip): status_partitions.py.
* **Runtime controls**: the operators' active pauses and bandwidth limits, and the partitions applying a
  pause: status_controls.py.
* **Needs attention**: paused partitions, unreachable clusters, flows whose desired state is not applied, instances that
  stopped reporting, failed workflows, approvals waiting (failover records and Airflow's own
  human-in-the-loop tasks).
* The state store's records: failovers, cutovers, DR drills (RPO/RTO trend charts), registry,
  reconciliations, topic sync.

The HTML (status_render.py) and ``/api/summary`` are built from the same :func:`summary`, for the user who
asks: sections of DAGs whose runs they may not read are left out whole (status_access.py says which DAG each
section belongs to; Airflow's auth manager decides).

Airflow does not protect plugin apps by itself: every route here depends on Airflow's own
``requires_authenticated`` check, which accepts the UI session (the ``_token`` JWT cookie) or an API
``Authorization: Bearer`` token and answers 401/403 otherwise.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from fastapi import Depends, FastAPI
from fastapi.responses import HTMLResponse
from sqlalchemy import desc, select

from mirror_airflow.status_access import Access, access_for
from mirror_airflow.status_controls import control_records
from mirror_airflow.status_lag import LAG_DEADLINE_S, LAGS, LagBoard, LagReading, LagSample, PartitionLag, epoch_iso
from mirror_airflow.status_partitions import partition_records, paused_attention
from mirror_core.state.models import Cutover, DrDrill, Failover, FlowInstance
from mirror_core.state.store import StateStore, default_url

log = logging.getLogger(__name__)

INSTANCE_FRESH_S = 20.0  # an instance that reported within this long is live (it reports every ~2 s)
INSTANCE_LOST_S = 3600.0  # a running instance silent for less than this is an attention item
REFRESH_S = 10  # the page reloads its content this often


def iso(t: datetime | None) -> str | None:
    """ISO 8601 with its offset; SQLite returns naive datetimes, which the store wrote in UTC."""
    if t is None:
        return None
    return (t if t.tzinfo is not None else t.replace(tzinfo=UTC)).astimezone(UTC).isoformat(timespec="seconds")




# -- flows ------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class InstanceView:
    instance: str
    state: str  # running | stopping | stopped, as the instance reports it
    seen_at: str | None


@dataclass
class FlowView:
    name: str
    #: what the live instances apply: running | stopping | stopped | standby (stopped, started only by a
    #: workflow) | no live instance
    state: str
    configured: str  # enabled | standby | not in the config
    desired: str | None  # what the workflows set (flow_controls); None: as configured
    desired_by: str | None
    desired_reason: str | None
    desired_at: str | None
    applied: bool  # every live instance applies the desired state (True when none is set)
    instances: list[InstanceView]
    policy: str | None
    exactly_once: bool | None
    data_path: str | None  # records | batches, as the config file decides it (None: not in the config)
    data_path_reason: str | None  # why, in words ("auto (the default): batches", "auto: records, because ...")
    lag: int | None
    lag_error: str | None  # why the lag is unknown
    unreachable_cluster: str | None
    lag_measured_at: str | None
    records_per_s: float | None
    partitions: list[PartitionLag] = field(default_factory=list)
    lag_history: list[LagSample] = field(default_factory=list)


def flow_state(configured: str, desired: str | None, live: list[InstanceView]) -> str:
    """The state to show: what live instances apply; without any, the desired or configured state."""
    states = {i.state for i in live}
    for state in ("running", "stopping"):
        if state in states:
            return state
    if live:
        return "standby" if configured == "standby" and desired is None else "stopped"
    return "no live instance"


def _applied(desired: str | None, live: list[InstanceView]) -> bool:
    """Every live instance applies ``desired`` (a flow desired running needs at least one)."""
    if desired is None:
        return True
    if desired == "running":
        return bool(live) and all(i.state == "running" for i in live)
    return all(i.state == "stopped" for i in live)


@dataclass(frozen=True)
class ConfiguredFlow:
    """What the config file (or, for a flow no longer in it, the state store's record) says of a flow."""

    policy: str | None
    how: str  # enabled | standby | not in the config
    exactly_once: bool | None
    data_path: str | None = None
    data_path_reason: str | None = None


NOT_CONFIGURED = ConfiguredFlow(None, "not in the config", None)


def _config_flows() -> dict[str, ConfiguredFlow]:
    """The flows of the config file by name; empty if unreadable."""
    try:
        from mirror_core.airflow_support import load_mirror_config

        config = load_mirror_config()
    except Exception as exc:
        log.warning("status page: cannot read the mirror config: %s", exc)
        return {}
    standby = {f.name for f in config.standby_flows}
    return {f.name: ConfiguredFlow(f.policy.name, "standby" if f.name in standby else "enabled", f.exactly_once,
                                   f.data_path, f.data_path_reason)
            for f in config.all_flows}


def collect_flows(store: StateStore, lags: Callable[[list[str]], dict[str, LagReading]],
                  history: Callable[[str], list[LagSample]]) -> tuple[list[FlowView], list[FlowInstance]]:
    """Every known flow with state, control and lag; also the instance rows that are no longer live."""
    recorded = {f.name: ConfiguredFlow(f.policy, "standby" if f.standby else "enabled", f.exactly_once)
                for f in store.flows()}
    configured = {**recorded, **_config_flows()}  # the file is what the mirrors read now
    controls = store.flow_controls()
    with store.session() as s:
        rows = list(s.scalars(select(FlowInstance).order_by(FlowInstance.instance)))
    fresh_since = datetime.now(UTC) - timedelta(seconds=INSTANCE_FRESH_S)
    live_rows = [r for r in rows if datetime.fromisoformat(iso(r.seen_at) or "") >= fresh_since]
    names = sorted(set(configured) | set(controls) | {r.flow for r in rows})
    readings = lags(names)
    out = []
    for name in names:
        conf = configured.get(name, NOT_CONFIGURED)
        live = [InstanceView(r.instance, r.state, iso(r.seen_at)) for r in live_rows if r.flow == name]
        control = controls.get(name)
        desired = control.desired if control else None
        reading = readings.get(name) or LagReading(time.time(), None, error="not measured")
        samples = history(name)
        out.append(FlowView(
            name=name, state=flow_state(conf.how, desired, live), configured=conf.how, desired=desired,
            desired_by=control.changed_by if control else None, desired_reason=control.reason if control else None,
            desired_at=iso(control.changed_at) if control else None, applied=_applied(desired, live),
            instances=live, policy=conf.policy, exactly_once=conf.exactly_once, data_path=conf.data_path,
            data_path_reason=conf.data_path_reason, lag=reading.total, lag_error=reading.error,
            unreachable_cluster=reading.unreachable_cluster,
            lag_measured_at=epoch_iso(reading.at) if reading.error is None else None,
            records_per_s=samples[-1].records_per_s if samples else None,
            partitions=list(reading.partitions), lag_history=samples))
    return out, [r for r in rows if r not in live_rows]


# -- needs attention --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Attention:
    severity: str  # critical | warning
    what: str  # short title
    detail: str
    flow: str | None = None


@dataclass(frozen=True)
class Approval:
    """A gate waiting for a person: an Airflow human-in-the-loop task, or a failover record."""

    dag_id: str
    run_id: str | None
    task_id: str
    subject: str
    since: str | None


def pending_approvals() -> tuple[list[Approval], str | None]:
    """Airflow's human-in-the-loop tasks awaiting a response (this process is the API server, which has
    the metadata DB), or why they cannot be read."""
    try:
        from airflow.models.hitl import HITLDetail
        from airflow.models.taskinstance import TaskInstance
        from airflow.utils.session import create_session

        with create_session() as s:
            rows = (s.query(TaskInstance.dag_id, TaskInstance.run_id, TaskInstance.task_id, HITLDetail.subject,
                            HITLDetail.created_at)
                    .join(HITLDetail, HITLDetail.ti_id == TaskInstance.id)
                    .filter(HITLDetail.responded_at.is_(None), TaskInstance.state == "awaiting_input")
                    .order_by(HITLDetail.created_at).limit(20).all())
        return [Approval(r[0], r[1], r[2], r[3], iso(r[4])) for r in rows], None
    except Exception as exc:
        return [], f"cannot read Airflow's required actions: {exc}"


def attention(flows: list[FlowView], lost: list[FlowInstance], approvals: list[Approval],
              records: dict[str, list[dict[str, Any]]]) -> list[Attention]:
    """What an operator should look at first, the most serious first."""
    items: list[Attention] = []
    for what, detail, flow in paused_attention(records.get("paused_partitions", [])):
        items.append(Attention("critical", what, detail, flow))
    for f in flows:
        if f.unreachable_cluster:
            items.append(Attention("critical", f"cluster {f.unreachable_cluster} unreachable",
                                   f.lag_error or "", f.name))
        elif f.lag_error and f.configured != "not in the config":
            items.append(Attention("warning", "lag unknown", f.lag_error, f.name))
        if not f.applied:
            applied = ", ".join(f"{i.instance}: {i.state}" for i in f.instances) or "no live mirror instance"
            items.append(Attention("critical" if f.desired == "running" else "warning",
                                   f"desired {f.desired}, not applied", f"applied: {applied}", f.name))
    lost_after = datetime.now(UTC) - timedelta(seconds=INSTANCE_LOST_S)
    for r in lost:
        seen = iso(r.seen_at)
        if r.state != "stopped" and datetime.fromisoformat(seen or "") >= lost_after:
            items.append(Attention("warning", f"instance {r.instance} stopped reporting",
                                   f"last seen {seen} while {r.state}; it did not stop cleanly", r.flow))
    for a in approvals:
        items.append(Attention("warning", "approval waiting", f"{a.dag_id} / {a.task_id}: {a.subject}"
                               + (f" (since {a.since})" if a.since else "")))
    for rec in records.get("failovers", []):
        if rec["status"] == "awaiting-approval" and not approvals:
            items.append(Attention("warning", f"{rec['kind']} awaiting approval", f"run {rec['run_id']}", rec["flow"]))
    for title, key, bad in (("failover failed", "failovers", ("failed",)), ("cutover failed", "cutovers", ("failed",)),
                            ("DR drill missed its objectives", "drills", ("failed", "error")),
                            ("reconciliation found problems", "reconciliations", ("failed", "discrepancies")),
                            ("topic sync failed", "sync_runs", ("failed",))):
        for row in _latest_per_flow(records.get(key, [])):
            if row["status"] in bad:
                detail = row.get("error") or row.get("missed") or row.get("problems") or f"status {row['status']}"
                items.append(Attention("critical" if key != "sync_runs" else "warning", title,
                                       f"{detail} (run {row.get('run_id') or 'unknown'})", row.get("flow")))
    return sorted(items, key=lambda i: i.severity != "critical")


def _latest_per_flow(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The newest row of each flow (rows come newest first)."""
    seen: dict[Any, dict[str, Any]] = {}
    for r in rows:
        seen.setdefault(r.get("flow") or (r.get("source"), r.get("target")), r)
    return list(seen.values())


# -- records of the state store ---------------------------------------------------------------------------

def latest_reconciliations(store: StateStore) -> list[dict[str, Any]]:
    """The newest checkpoint reconciliation of every flow, with its discrepancies in short."""
    out = []
    for r in store.latest_reconciliations():
        s = r.summary or {}
        out.append({"flow": r.flow, "status": r.status, "run_id": r.run_id,
                    "at": iso(r.finished_at or r.started_at), "checked": s.get("checked"),
                    "missing": s.get("missing_count"), "mismatched": s.get("mismatched_count"),
                    "extra": s.get("extra_count"), "groups_wrong": s.get("groups_wrong"),
                    "problems": "; ".join(s.get("checkpoint_problems", [])[:5])})
    return out


_DRILL_METRICS = ("rpo_records", "rto_seconds", "duplicates", "losses")


def _change(now: float | None, before: float | None) -> str:
    if now is None or before is None:
        return ""
    delta = round(now - before, 3)
    return "=" if delta == 0 else f"{delta:+g}"


def drill_history(drills: list[DrDrill]) -> list[dict[str, Any]]:
    """Drills newest first, each with the change of every measurement since the previous drill of its flow."""
    rows = []
    for i, d in enumerate(drills):
        previous = next((p for p in drills[i + 1:] if p.flow == d.flow and p.rpo_records is not None), None)
        row: dict[str, Any] = {"flow": d.flow, "started": iso(d.started_at), "status": d.status, "run_id": d.run_id,
                               "mode": (d.report or {}).get("mode") or "canary"}  # canary | failover
        for m in _DRILL_METRICS:
            row[m] = getattr(d, m)
            row[f"{m} change"] = _change(getattr(d, m), getattr(previous, m) if previous else None)
        missed = (d.report or {}).get("missed_objectives") or (d.report or {}).get("error") or ""
        row["missed"] = "; ".join(missed) if isinstance(missed, list) else missed
        row["report"] = d.report or {}  # translation, checkpoint_published_after_s, failback, cleanup, work_dir
        rows.append(row)
    return rows


def drill_trends(drills: list[DrDrill]) -> list[dict[str, Any]]:
    """Per flow: how many drills passed, the latest, best, worst and average RPO/RTO, the direction, and
    the series (oldest first) the page charts."""
    out = []
    for flow in sorted({d.flow for d in drills}):
        mine = [d for d in drills if d.flow == flow]  # newest first
        measured = [d for d in mine if d.rpo_records is not None and d.rto_seconds is not None]
        row: dict[str, Any] = {"flow": flow, "drills": len(mine),
                               "passed": sum(d.status == "passed" for d in mine), "last": mine[0].status}
        for m, unit in (("rpo_records", ""), ("rto_seconds", "s")):
            values = [float(getattr(d, m)) for d in measured]
            row[f"{m}_series"] = [{"at": iso(d.started_at), "value": v} for d, v in reversed(list(zip(measured, values,
                                                                                                    strict=True)))]
            if not values:
                row[m] = "no measurement"
                continue
            older = values[1:]
            avg_older = sum(older) / len(older) if older else None
            trend = ("" if avg_older is None else "better" if values[0] < avg_older
                     else "worse" if values[0] > avg_older else "steady")
            row[m] = (f"last {values[0]:g}{unit}, best {min(values):g}{unit}, worst {max(values):g}{unit}, "
                      f"avg {sum(values) / len(values):.4g}{unit}" + (f" ({trend} than before)" if trend else ""))
        out.append(row)
    return out


def records(store: StateStore) -> dict[str, list[dict[str, Any]]]:
    """The workflow records of the state store, newest first, times ISO 8601 in UTC."""
    with store.session() as s:
        drills = list(s.scalars(select(DrDrill).order_by(desc(DrDrill.id)).limit(60)))
        cutovers = list(s.scalars(select(Cutover).order_by(desc(Cutover.id)).limit(20)))
        failovers = list(s.scalars(select(Failover).order_by(desc(Failover.id)).limit(20)))
    return {
        "failovers": [{"kind": f.kind, "flow": f.flow, "mode": "planned" if f.planned else "unplanned",
                       "status": f.status, "approved_by": f.approved_by, "run_id": f.run_id,
                       # records made before triggered_at existed: their start is the nearest there is
                       "triggered": iso(f.triggered_at or f.started_at), "started": iso(f.started_at),
                       "approved": iso(f.approved_at), "finished": iso(f.finished_at),
                       # RTO from the trigger (rto_s) and from the approval; RPO measured at the switch (records
                       # on the old primary not on the standby), the estimate at approval beside it
                       "rto_s": f.rto_seconds, "rto_from_approval_s": f.rto_from_approval_seconds,
                       "rpo_measured": f.rpo_measured,
                       "rpo_estimate": (f.details or {}).get("rpo_records") if f.kind == "failover" else None,
                       "approved_by_name": (f.details or {}).get("approved_by_name"),
                       "error": (f.details or {}).get("error")} for f in failovers],
        "cutovers": [{"source": c.source, "target": c.target, "status": c.status, "run_id": c.run_id,
                      "started": iso(c.started_at), "finished": iso(c.finished_at),
                      "topics": ", ".join((c.details or {}).get("topics", [])),
                      "approved_by": (c.details or {}).get("approved_by"),
                      "error": (c.details or {}).get("error")} for c in cutovers],
        "drills": drill_history(drills)[:20],
        "drill_trends": drill_trends(drills),
        "registry": [{"app": a.app_alias, "cluster": a.cluster, "changed_by": a.changed_by, "reason": a.reason,
                      "at": iso(a.changed_at)} for a in store.registry()],
        "reconciliations": latest_reconciliations(store),
        "sync_runs": [{"flow": r.flow, "status": r.status, "dry_run": r.dry_run, "run_id": r.run_id,
                       "started": iso(r.started_at), "finished": iso(r.finished_at),
                       "error": (r.summary or {}).get("error"), "summary": r.summary}
                      for r in store.sync_runs(limit=20)],
        "drift": [{"flow": d.flow, "topic": d.topic, "kind": d.kind, "detail": d.detail, "action": d.action,
                   "at": iso(d.created_at)} for d in store.recent_drift(limit=50)],
    }


def summary(store: StateStore, with_lag: bool = True, lag_deadline_s: float = LAG_DEADLINE_S,
            board: LagBoard | None = None, *, user: Any) -> dict[str, Any]:
    """Everything the page shows to ``user`` (an Airflow user; None, said explicitly: everything, for tools),
    JSON-ready (the ``/api/summary`` answer; fields in docs/runbooks.md). A section the user may not read is
    not computed."""
    board = board or LAGS
    approvals, approvals_error = pending_approvals()
    access = Access() if user is None else access_for(user, {a.dag_id for a in approvals})
    approvals = [a for a in approvals if access.approval(a.dag_id)]

    def lags(names: list[str]) -> dict[str, LagReading]:
        if not with_lag:
            return {n: LagReading(time.time(), None, error="lag not measured here") for n in names}
        return board.lags(names, lag_deadline_s)

    flows, lost = (collect_flows(store, lags, board.history if with_lag else lambda _: [])
                   if access.section("flows") else ([], []))
    recs = access.records({**records(store), **partition_records(store, INSTANCE_FRESH_S),
                           **control_records(store, INSTANCE_FRESH_S)})
    return {
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "refresh_seconds": REFRESH_S,
        "attention": [asdict(a) for a in attention(flows, lost, approvals, recs)],
        **({"flows": [asdict(f) for f in flows]} if access.section("flows") else {}),
        "approvals": [asdict(a) for a in approvals],
        "approvals_error": approvals_error,
        "hidden": access.hidden(),
        **recs,
    }


def create_app(store: StateStore | None = None, with_lag: bool = True,
               lag_deadline_s: float = LAG_DEADLINE_S) -> FastAPI:
    from airflow.api_fastapi.core_api.security import get_user, requires_authenticated

    from mirror_airflow.status_render import render_page

    app = FastAPI(title="mirror_core status", dependencies=[Depends(requires_authenticated())])
    # One store per URL, not one for the app's life: Airflow builds the app once per process, and a store taken
    # from the environment at the first request would be read ever after, whatever MIRROR_CORE_DB_URL says now.
    stores: dict[str, StateStore] = {}
    opening = threading.Lock()  # (the endpoints run in a thread pool: one engine per URL)

    def get_store() -> StateStore:
        url = store.url if store is not None else default_url()
        with opening:
            if url not in stores:
                opened = store if store is not None else StateStore(url)
                try:
                    opened.migrate()
                except Exception:
                    if store is None:
                        opened.engine.dispose()
                    raise
                stores[url] = opened
            return stores[url]

    # The logged-in user (the same resolution as the app's login check, cached by FastAPI per request).
    logged_in = Depends(get_user)

    @app.get("/api/summary")
    def api_summary(user: Any = logged_in) -> dict[str, Any]:
        return summary(get_store(), with_lag, lag_deadline_s, user=user)

    @app.get("/", response_class=HTMLResponse)
    def page(user: Any = logged_in) -> str:
        return render_page(summary(get_store(), with_lag, lag_deadline_s, user=user))

    return app
