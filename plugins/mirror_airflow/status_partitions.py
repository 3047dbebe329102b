"""Paused source partitions and the operators' actions on them, for the status page and ``/api/summary``.

* **Paused partitions**: what the live mirror instances report with their heartbeat (``flow_instances.paused``,
  within :data:`~mirror_airflow.status_app.INSTANCE_FRESH_S`): a damaged record batch or a record the target
  refused pauses one source partition; the reason, one line, names the offsets and the
  ``mirror-core partitions resume|skip`` command to continue. A pending action on the partition is shown
  beside it.
* **Partition actions**: the newest :data:`ACTIONS_SHOWN` ``mirror-core partitions resume|skip`` requests
  (``partition_actions``), pending or applied, with the outcome the instance recorded.

Who sees them: paused partitions with the flows (readers of the ``failover`` DAG's runs), the actions with the
runtime controls (readers of ``runtime_control``'s): status_access.py.
"""

from __future__ import annotations

from typing import Any

from mirror_airflow.status_render import badge, esc, human, section, when
from mirror_core.state.models import PartitionActionRecord, PausedPartition
from mirror_core.state.store import StateStore

Row = dict[str, Any]
ACTIONS_SHOWN = 20


def _iso(t: Any) -> str | None:
    return t.isoformat(timespec="seconds") if t is not None else None


def action_row(a: PartitionActionRecord) -> Row:
    status = "pending" if a.pending else "applied" if a.ok else "failed"
    return {"id": a.id, "requested_at": _iso(a.requested_at), "flow": a.flow, "topic": a.topic,
            "partition": a.partition, "action": a.action, "first_offset": a.first_offset,
            "last_offset": a.last_offset, "offsets": a.offsets, "requested_by": a.requested_by, "reason": a.reason,
            "status": status, "applied_at": _iso(a.applied_at), "applied_by": a.applied_by, "outcome": a.outcome}


def paused_row(p: PausedPartition, pending: PartitionActionRecord | None) -> Row:
    return {"flow": p.flow, "topic": p.topic, "partition": p.partition, "reason": p.reason, "instance": p.instance,
            "since": _iso(p.since), "seen_at": _iso(p.seen_at),
            "pending_action": None if pending is None else {
                "id": pending.id, "action": pending.action, "offsets": pending.offsets,
                "requested_by": pending.requested_by, "requested_at": _iso(pending.requested_at)}}


def partition_records(store: StateStore, fresh_s: float) -> dict[str, list[Row]]:
    """``paused_partitions`` (live instances only) and ``partition_actions`` (newest first), JSON-ready."""
    paused = store.paused_partitions(fresh_s)
    pending = {(a.flow, a.topic, a.partition): a
               for a in store.pending_partition_actions(sorted({p.flow for p in paused}))}
    return {"paused_partitions": [paused_row(p, pending.get((p.flow, p.topic, p.partition))) for p in paused],
            "partition_actions": [action_row(a) for a in store.partition_actions(limit=ACTIONS_SHOWN)]}


def paused_attention(paused: list[Row]) -> list[tuple[str, str, str]]:
    """One (what, detail, flow) per flow with paused partitions, for "Needs attention first"."""
    by_flow: dict[str, list[Row]] = {}
    for p in paused:
        by_flow.setdefault(p["flow"], []).append(p)
    items = []
    for flow, rows in by_flow.items():
        where = sorted({f"{p['topic']}[{p['partition']}]" for p in rows})
        if len(where) == 1:
            detail = f"{where[0]}: {rows[0]['reason']}"
        else:
            shown = ", ".join(where[:10]) + (", …" if len(where) > 10 else "")
            detail = f"{shown}: why and what to do under Paused partitions"
        items.append((f"{len(where)} partition{'s' if len(where) > 1 else ''} paused", detail, flow))
    return items


def _where(r: Row) -> str:
    return f"{esc(r['topic'])}[{r['partition']}]"


def paused_html(rows: list[Row]) -> str:
    if not rows:
        return section("paused-partitions", "Paused partitions",
                       "<p class='none muted'>Nothing paused: no live mirror instance reports a paused "
                       "partition.</p>")
    body = []
    for r in rows:
        a = r["pending_action"]
        action = "—" if a is None else (f"{badge('pending')} {esc(a['action'])}"
                                        + (f" {esc(a['offsets'])}" if a["offsets"] else "")
                                        + f" <span class='muted'>by {esc(a['requested_by'])}, "
                                        f"{when(a['requested_at'])}</span>")
        body.append(f"<tr data-flow='{esc(r['flow'])}'><td class='nw'>{esc(r['flow'])}</td><td>{_where(r)}</td>"
                    f"<td class='why'>{esc(r['reason'])}</td><td class='nw'>{esc(r['instance'])}</td>"
                    f"<td>{when(r['since'])}<div class='muted'>seen {when(r['seen_at'])}</div></td>"
                    f"<td>{action}</td></tr>")
    head = "".join(f"<th>{h}</th>" for h in ("flow", "source partition", "why", "instance", "since", "action"))
    table = (f"<div class='table-wrap'><table class='paused'><thead><tr>{head}</tr></thead>"
             f"<tbody>{''.join(body)}</tbody></table></div>")
    return section("paused-partitions", f"Paused partitions ({len(rows)})", table,
                   "Replication of these partitions stopped; the reason names the offsets and what to run.")


def actions_html(rows: list[Row]) -> str:
    """The table of the actions, newest first (with none, the page names "partition actions" among the
    sections with nothing recorded yet)."""
    body = []
    for r in rows:
        applied = ("" if r["status"] == "pending" else
                   f"<div class='muted'>{when(r['applied_at'])} by {esc(human(r['applied_by']))}</div>")
        body.append(f"<tr data-flow='{esc(r['flow'])}'><td>{when(r['requested_at'])}</td>"
                    f"<td class='nw'>{esc(r['flow'])}</td>"
                    f"<td>{_where(r)}</td><td>{esc(r['action'])}</td><td class='num'>{esc(human(r['offsets']))}</td>"
                    f"<td>{esc(r['requested_by'])}</td><td class='why'>{esc(r['reason'])}</td>"
                    f"<td>{badge(r['status'])}{applied}</td><td class='why'>{esc(human(r['outcome']))}</td></tr>")
    head = "".join(f"<th>{h}</th>" for h in ("requested", "flow", "source partition", "action", "offsets", "by",
                                             "reason", "applied", "outcome"))
    return (f"<div class='table-wrap'><table class='actions'><thead><tr>{head}</tr></thead>"
            f"<tbody>{''.join(body)}</tbody></table></div>")


ACTIONS_NOTE = f"The newest {ACTIONS_SHOWN} resume and skip requests (mirror-core partitions actions lists them all)."
