"""The mirror status page: a FastAPI app served by the Airflow API server (see plugin.py).

Reads only the state store (plus a cached, bounded look at replication lag), so it stays fast and
works while a cluster is down.

Airflow does not protect plugin apps by itself: every route here depends on Airflow's own
``requires_authenticated`` check, which accepts the UI session (the ``_token`` JWT cookie) or an API
``Authorization: Bearer`` token and answers 401/403 otherwise.
"""

from __future__ import annotations

import html
import time
from typing import Any

from fastapi import Depends, FastAPI
from fastapi.responses import HTMLResponse
from sqlalchemy import desc, select

from mirror_core.state.models import Cutover, DrDrill, Failover, Flow
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


def summary(store: StateStore, with_lag: bool = True) -> dict[str, Any]:
    with store.session() as s:
        flows = list(s.scalars(select(Flow).order_by(Flow.name)))
        drills = list(s.scalars(select(DrDrill).order_by(desc(DrDrill.id)).limit(60)))
        cutovers = list(s.scalars(select(Cutover).order_by(desc(Cutover.id)).limit(20)))
        failovers = list(s.scalars(select(Failover).order_by(desc(Failover.id)).limit(20)))
    return {
        "flows": [{"name": f.name, "policy": f.policy, "exactly_once": f.exactly_once,
                   "lag": _lag(f.name) if with_lag else None} for f in flows],
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
                       "started": f.started_at.isoformat(timespec="seconds"),
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


def create_app(store: StateStore | None = None, with_lag: bool = True) -> FastAPI:
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
        return summary(get_store(), with_lag)

    @app.get("/", response_class=HTMLResponse)
    def page() -> str:
        data = summary(get_store(), with_lag)
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
