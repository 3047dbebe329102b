"""Runtime controls for the status page and ``/api/summary``: the operators' active pauses and bandwidth
limits (``topic_controls``: desired state, who, when, why) and, for a pause, what the live mirror instances
apply: the partitions of its scope they report paused ``paused by <who> ...`` in their heartbeat (the same
reports the "Paused partitions" section lists). A limit is applied by each process as its share of the
partitions it owns; its effect shows as ``mirror_throttled_seconds_total`` in the metrics, not here. A flow's
topic and group filters set in the store (``flow_filters``) are applied when every live instance of the flow
reports that filter's id in its heartbeat.
"""

from __future__ import annotations

from typing import Any

from mirror_airflow.status_render import badge, esc, when
from mirror_core.state.flow_filters import filter_json
from mirror_core.state.models import FILTER_KEYS
from mirror_core.state.store import StateStore
from mirror_core.state.topic_controls import control_json

Row = dict[str, Any]
OPERATOR_PAUSE = "paused by "  # how the data path begins the reason of a partition it paused for an operator
CONTROLS_NOTE = ("Desired state, applied by the running mirrors within seconds; mirror-core control list|history|"
                 "filters, or the runtime_control DAG, to change it.")


def control_records(store: StateStore, fresh_s: float) -> dict[str, list[Row]]:
    """``runtime_controls``: every active control, JSON-ready, a pause with the partitions applying it."""
    controls = store.active_topic_controls(None)
    paused = [p for p in store.paused_partitions(fresh_s) if p.reason.startswith(OPERATOR_PAUSE)]
    rows = []
    for c in controls:
        row: Row = {**control_json(c), "scope": c.scope or "(whole flow)", "applied": None}
        if c.kind == "pause":
            mine = [p for p in paused if p.flow == c.flow and p.topic == c.topic
                    and (c.partition is None or p.partition == c.partition)]
            row["applied"] = {"partitions": len({p.partition for p in mine}),
                              "instances": sorted({p.instance for p in mine})}
        rows.append(row)
    for f in store.active_flow_filters().values():
        live = store.flow_instances(f.flow, fresh_s)
        applying = sorted(i.instance for i in live if (i.filters or {}).get("filter_id") == f.id)
        rows.append({**filter_json(f), "kind": "filter", "scope": "(whole flow)",
                     "applied": {"instances": applying, "of": len(live)}})
    return {"runtime_controls": rows}


def _applied(r: Row) -> str:
    a = r["applied"]
    if a is None:
        return "<span class='muted'>each process: its share of the partitions it owns</span>"
    if r["kind"] == "filter":
        if not a["of"]:
            return f"{badge('pending')} <span class='muted'>no live instance of the flow</span>"
        state = "applied" if len(a["instances"]) == a["of"] else "pending"
        return (f"{badge(state)} {len(a['instances'])} of {a['of']} instance{'s' if a['of'] > 1 else ''}"
                + (f" <span class='muted'>{esc(', '.join(a['instances']))}</span>" if a["instances"] else ""))
    if not a["partitions"]:
        return f"{badge('pending')} <span class='muted'>no live instance reports it paused yet</span>"
    n = a["partitions"]
    return (f"{badge('applied')} {n} partition{'s' if n > 1 else ''} "
            f"<span class='muted'>on {esc(', '.join(a['instances']))}</span>")


def controls_html(rows: list[Row]) -> str:
    body = []
    for r in rows:
        what = ("pause" if r["kind"] == "pause" else f"limit {r['limit_bytes_per_s']:,} bytes/s"
                if r["kind"] == "limit" else "filters " + ", ".join(f"{k} '{r[k]}'" for k in FILTER_KEYS
                                                                    if r.get(k) is not None))
        body.append(f"<tr data-flow='{esc(r['flow'])}'><td class='nw'>{esc(r['flow'])}</td>"
                    f"<td>{esc(what)}</td><td>{esc(r['scope'])}</td><td>{when(r['set_at'])}</td>"
                    f"<td>{esc(r['set_by'])}</td><td class='why'>{esc(r['reason'])}</td><td>{_applied(r)}</td></tr>")
    head = "".join(f"<th>{h}</th>" for h in ("flow", "control", "scope", "since", "by", "why", "applied"))
    return (f"<div class='table-wrap'><table class='controls'><thead><tr>{head}</tr></thead>"
            f"<tbody>{''.join(body)}</tbody></table></div>")
