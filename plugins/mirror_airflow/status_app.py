"""The mirror status page: a FastAPI app served by the Airflow API server (see plugin.py).

Reads the state store, plus live replication lag bounded by one deadline per page load (see
:class:`LagBoard`), so it stays fast and works while a cluster is down.

Airflow does not protect plugin apps by itself: every route here depends on Airflow's own
``requires_authenticated`` check, which accepts the UI session (the ``_token`` JWT cookie) or an API
``Authorization: Bearer`` token and answers 401/403 otherwise.
"""

from __future__ import annotations

import html
import threading
import time
from typing import Any

from fastapi import Depends, FastAPI
from fastapi.responses import HTMLResponse
from sqlalchemy import desc, select

from mirror_core.state.models import Cutover, DrDrill, Failover, aware
from mirror_core.state.store import StateStore

LAG_DEADLINE_S = 5.0  # a page load waits at most this long for the live lag of all flows together
LAG_TTL_S = 15.0  # a measured lag is shown again, without asking the clusters, for this long
LAG_CALL_TIMEOUT_S = 3.0  # each cluster request of one measurement


def _measure_lag(flow: str) -> Any:
    """Total lag of ``flow`` from the clusters, or why it is not known."""
    try:
        from mirror_core.airflow_support import load_mirror_config
        from mirror_core.status import flow_status

        config = load_mirror_config()
        st = flow_status(config, config.flow(flow), timeout=LAG_CALL_TIMEOUT_S)
        return st.total_lag if st.reachable else f"unavailable: {st.error}"
    except Exception as exc:
        return f"unavailable: {exc}"


class LagBoard:
    """Live lag of the flows, measured in background threads.

    Invariant: a page load never waits longer than its deadline, whatever the clusters do. Every flow
    is measured in parallel; what is not known when the deadline passes is shown as unavailable with
    the reason, and the measurement goes on in the background (at most one per flow at a time) so a
    later page load shows its result. A measurement of a down cluster takes up to one request timeout
    per partition, which is why it never runs on the request's own time.
    """

    def __init__(self, measure: Any = _measure_lag) -> None:
        self._measure = measure
        self._lock = threading.Lock()
        self._known: dict[tuple[str, str], tuple[float, Any]] = {}  # (config, flow) -> (when, lag)
        self._running: dict[tuple[str, str], threading.Event] = {}

    def lags(self, flows: list[str], deadline_s: float = LAG_DEADLINE_S, ttl_s: float = LAG_TTL_S) -> dict[str, Any]:
        from mirror_core.airflow_support import config_path

        config = str(config_path())
        end = time.monotonic() + deadline_s
        out: dict[str, Any] = {}
        waiting: dict[str, threading.Event] = {}
        with self._lock:
            for flow in flows:
                known = self._known.get((config, flow))
                if known and time.monotonic() - known[0] < ttl_s:
                    out[flow] = known[1]
                    continue
                done = self._running.get((config, flow))
                if done is None:
                    done = self._running[(config, flow)] = threading.Event()
                    threading.Thread(target=self._run, args=(config, flow, done), daemon=True,
                                     name=f"mirror-status-lag {flow}").start()
                waiting[flow] = done
        for flow, done in waiting.items():
            done.wait(max(0.0, end - time.monotonic()))
            with self._lock:
                known = self._known.get((config, flow))
            if done.is_set() and known is not None:
                out[flow] = known[1]
                continue
            before = f"; last known {known[1]} ({time.monotonic() - known[0]:.0f}s ago)" if known else ""
            out[flow] = (f"unavailable: the clusters of {flow} did not answer within {deadline_s:g}s (one is down "
                         f"or slow); still measuring{before}")
        return out

    def _run(self, config: str, flow: str, done: threading.Event) -> None:
        value: Any = "unavailable: measurement failed"
        try:
            value = self._measure(flow)
        finally:
            with self._lock:
                self._known[(config, flow)] = (time.monotonic(), value)
                self._running.pop((config, flow), None)
            done.set()


LAGS = LagBoard()


def latest_reconciliations(store: StateStore) -> list[dict[str, Any]]:
    """The newest checkpoint reconciliation of every flow, with its discrepancies in short."""
    out = []
    for r in store.latest_reconciliations():
        s = r.summary or {}
        out.append({"flow": r.flow, "status": r.status, "run_id": r.run_id,
                    "at": (r.finished_at or r.started_at).isoformat(), "checked": s.get("checked"),
                    "missing": s.get("missing_count"), "mismatched": s.get("mismatched_count"),
                    "extra": s.get("extra_count"), "groups_wrong": s.get("groups_wrong"),
                    "problems": "; ".join(s.get("checkpoint_problems", [])[:5])})
    return out


def summary(store: StateStore, with_lag: bool = True, lag_deadline_s: float = LAG_DEADLINE_S) -> dict[str, Any]:
    flows = store.flows()
    lags = LAGS.lags([f.name for f in flows], lag_deadline_s) if with_lag else {}
    with store.session() as s:
        drills = list(s.scalars(select(DrDrill).order_by(desc(DrDrill.id)).limit(60)))
        cutovers = list(s.scalars(select(Cutover).order_by(desc(Cutover.id)).limit(20)))
        failovers = list(s.scalars(select(Failover).order_by(desc(Failover.id)).limit(20)))
    return {
        "flows": [{"name": f.name, "standby": f.standby, "policy": f.policy, "exactly_once": f.exactly_once,
                   "lag": lags.get(f.name)} for f in flows],
        "drift": [{"flow": d.flow, "topic": d.topic, "kind": d.kind, "detail": d.detail, "action": d.action,
                   "at": d.created_at.isoformat()} for d in store.recent_drift(limit=50)],
        "sync_runs": [{"flow": r.flow, "status": r.status, "dry_run": r.dry_run, "run_id": r.run_id,
                       "summary": r.summary} for r in store.sync_runs(limit=20)],
        "reconciliations": latest_reconciliations(store),
        "drills": drill_history(drills)[:20],
        "drill_trends": drill_trends(drills),
        "cutovers": [{"source": c.source, "target": c.target, "status": c.status, "run_id": c.run_id,
                      "started": c.started_at.isoformat(timespec="seconds"),
                      "topics": ", ".join((c.details or {}).get("topics", [])),
                      "approved_by": (c.details or {}).get("approved_by")} for c in cutovers],
        "failovers": [{"kind": f.kind, "flow": f.flow, "status": f.status, "planned": f.planned,
                       "approved_by": f.approved_by, "run_id": f.run_id,
                       **{k: aware(at).isoformat(timespec="seconds") if at else None for k, at in (
                           ("triggered", f.triggered_at), ("started", f.started_at), ("approved", f.approved_at),
                           ("finished", f.finished_at))},
                       "rto_s": f.rto_seconds,
                       "rpo_records": (f.details or {}).get("rpo_records"),
                       "error": (f.details or {}).get("error")} for f in failovers],
        "flow_control": [{"flow": c.flow, "desired": c.desired, "by": c.changed_by, "why": c.reason,
                          "run_id": c.run_id, "at": c.changed_at.isoformat(timespec="seconds"),
                          "instances": ", ".join(f"{i.instance}: {i.state}" for i in store.flow_instances(c.flow))}
                         for c in store.flow_controls().values()],
        "registry": [{"app": a.app_alias, "cluster": a.cluster, "changed_by": a.changed_by, "reason": a.reason,
                      "at": a.changed_at.isoformat()} for a in store.registry()],
    }


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
        row: dict[str, Any] = {"flow": d.flow, "started": d.started_at.isoformat(timespec="seconds"),
                               "status": d.status, "run_id": d.run_id}
        for m in _DRILL_METRICS:
            row[m] = getattr(d, m)
            row[f"{m} change"] = _change(getattr(d, m), getattr(previous, m) if previous else None)
        missed = (d.report or {}).get("missed_objectives") or (d.report or {}).get("error") or ""
        row["missed"] = "; ".join(missed) if isinstance(missed, list) else missed
        rows.append(row)
    return rows


def drill_trends(drills: list[DrDrill]) -> list[dict[str, Any]]:
    """Per flow: how many drills passed, the latest, best, worst and average RPO/RTO, and the direction."""
    out = []
    for flow in sorted({d.flow for d in drills}):
        mine = [d for d in drills if d.flow == flow]  # newest first
        measured = [d for d in mine if d.rpo_records is not None and d.rto_seconds is not None]
        row: dict[str, Any] = {"flow": flow, "drills": len(mine),
                               "passed": sum(d.status == "passed" for d in mine), "last": mine[0].status}
        for m, unit in (("rpo_records", ""), ("rto_seconds", "s")):
            values = [float(getattr(d, m)) for d in measured]
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


def _table(title: str, rows: list[dict[str, Any]]) -> str:
    if not rows:
        return f"<h2>{html.escape(title)}</h2><p class='empty'>none recorded</p>"
    cols = list(rows[0])
    head = "".join(f"<th>{html.escape(c)}</th>" for c in cols)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(r[c]))}</td>" for c in cols) + "</tr>" for r in rows)
    return f"<h2>{html.escape(title)}</h2><table><tr>{head}</tr>{body}</table>"


def create_app(store: StateStore | None = None, with_lag: bool = True,
               lag_deadline_s: float = LAG_DEADLINE_S) -> FastAPI:
    from airflow.api_fastapi.core_api.security import requires_authenticated

    app = FastAPI(title="mirror_core status", dependencies=[Depends(requires_authenticated())])
    holder: dict[str, StateStore] = {}

    def get_store() -> StateStore:
        if "store" not in holder:
            holder["store"] = store or StateStore()
            holder["store"].migrate()
        return holder["store"]

    @app.get("/api/summary")
    def api_summary() -> dict[str, Any]:
        return summary(get_store(), with_lag, lag_deadline_s)

    @app.get("/", response_class=HTMLResponse)
    def page() -> str:
        data = summary(get_store(), with_lag, lag_deadline_s)
        sections = [_table(title, data[key]) for title, key in (
            ("Flows", "flows"), ("Active-cluster registry", "registry"), ("Recent topic drift", "drift"),
            ("Topic sync runs", "sync_runs"), ("Latest reconciliation per flow", "reconciliations"),
            ("DR drill trends", "drill_trends"), ("DR drills", "drills"),
            ("Cutovers", "cutovers"), ("Failovers and failbacks", "failovers"),
            ("Flow control (desired state; live mirror instances)", "flow_control"))]
        style = ("body{font-family:sans-serif;margin:1.5em}table{border-collapse:collapse;margin-bottom:1em}"
                 "td,th{border:1px solid #ccc;padding:.25em .5em;font-size:90%}.empty{color:#888}")
        return (f"<!doctype html><html><head><title>mirror_core status</title><style>{style}</style></head>"
                f"<body><h1>mirror_core status</h1>{''.join(sections)}</body></html>")

    return app
