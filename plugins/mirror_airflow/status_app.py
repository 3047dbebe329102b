"""The mirror status page: a FastAPI app served by the Airflow API server (see plugin.py).

Reads only the state store (plus a cached, bounded look at replication lag), so it stays fast and
works while a cluster is down.
"""

from __future__ import annotations

import html
import time
from typing import Any

from fastapi import FastAPI
from fastapi.responses import HTMLResponse
from sqlalchemy import desc, select

from mirror_core.state.models import Cutover, DrDrill, Failover, Flow, ReconciliationReport
from mirror_core.state.store import StateStore

_LAG_CACHE: dict[str, tuple[float, Any]] = {}


def _lag(flow: str, ttl: float = 15.0) -> Any:
    cached = _LAG_CACHE.get(flow)
    if cached and time.monotonic() - cached[0] < ttl:
        return cached[1]
    try:
        from mirror_core.airflow_support import load_mirror_config
        from mirror_core.status import flow_status

        config = load_mirror_config()
        st = flow_status(config, config.flow(flow), timeout=3)
        value: Any = st.total_lag if st.reachable else f"unreachable: {st.error}"
    except Exception as exc:
        value = f"unknown ({exc})"
    _LAG_CACHE[flow] = (time.monotonic(), value)
    return value


def summary(store: StateStore, with_lag: bool = True) -> dict[str, Any]:
    with store.session() as s:
        flows = list(s.scalars(select(Flow).order_by(Flow.name)))
        drills = list(s.scalars(select(DrDrill).order_by(desc(DrDrill.id)).limit(20)))
        cutovers = list(s.scalars(select(Cutover).order_by(desc(Cutover.id)).limit(20)))
        failovers = list(s.scalars(select(Failover).order_by(desc(Failover.id)).limit(20)))
        recon = list(s.scalars(select(ReconciliationReport).order_by(desc(ReconciliationReport.id)).limit(20)))
    return {
        "flows": [{"name": f.name, "policy": f.policy, "exactly_once": f.exactly_once,
                   "lag": _lag(f.name) if with_lag else None} for f in flows],
        "drift": [{"flow": d.flow, "topic": d.topic, "kind": d.kind, "detail": d.detail, "action": d.action,
                   "at": d.created_at.isoformat()} for d in store.recent_drift(limit=50)],
        "sync_runs": [{"flow": r.flow, "status": r.status, "dry_run": r.dry_run, "run_id": r.run_id,
                       "summary": r.summary} for r in store.sync_runs(limit=20)],
        "reconciliations": [{"flow": r.flow, "status": r.status, "summary": r.summary} for r in recon],
        "drills": [{"flow": d.flow, "status": d.status, "rpo_records": d.rpo_records, "rto_seconds": d.rto_seconds,
                    "duplicates": d.duplicates, "losses": d.losses} for d in drills],
        "cutovers": [{"source": c.source, "target": c.target, "status": c.status} for c in cutovers],
        "failovers": [{"kind": f.kind, "flow": f.flow, "status": f.status, "planned": f.planned,
                       "approved_by": f.approved_by} for f in failovers],
        "registry": [{"app": a.app_alias, "cluster": a.cluster, "changed_by": a.changed_by, "reason": a.reason,
                      "at": a.changed_at.isoformat()} for a in store.registry()],
    }


def _table(title: str, rows: list[dict[str, Any]]) -> str:
    if not rows:
        return f"<h2>{html.escape(title)}</h2><p class='empty'>none recorded</p>"
    cols = list(rows[0])
    head = "".join(f"<th>{html.escape(c)}</th>" for c in cols)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(r[c]))}</td>" for c in cols) + "</tr>" for r in rows)
    return f"<h2>{html.escape(title)}</h2><table><tr>{head}</tr>{body}</table>"


def create_app(store: StateStore | None = None, with_lag: bool = True) -> FastAPI:
    app = FastAPI(title="mirror_core status")
    holder: dict[str, StateStore] = {}

    def get_store() -> StateStore:
        if "store" not in holder:
            holder["store"] = store or StateStore()
            holder["store"].migrate()
        return holder["store"]

    @app.get("/api/summary")
    def api_summary() -> dict[str, Any]:
        return summary(get_store(), with_lag)

    @app.get("/", response_class=HTMLResponse)
    def page() -> str:
        data = summary(get_store(), with_lag)
        sections = [_table(title, data[key]) for title, key in (
            ("Flows", "flows"), ("Active-cluster registry", "registry"), ("Recent topic drift", "drift"),
            ("Topic sync runs", "sync_runs"), ("Reconciliations", "reconciliations"), ("DR drills", "drills"),
            ("Cutovers", "cutovers"), ("Failovers and failbacks", "failovers"))]
        style = ("body{font-family:sans-serif;margin:1.5em}table{border-collapse:collapse;margin-bottom:1em}"
                 "td,th{border:1px solid #ccc;padding:.25em .5em;font-size:90%}.empty{color:#888}")
        return (f"<!doctype html><html><head><title>mirror_core status</title><style>{style}</style></head>"
                f"<body><h1>mirror_core status</h1>{''.join(sections)}</body></html>")

    return app
