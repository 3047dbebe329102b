"""HTML of the status page, from :func:`mirror_airflow.status_app.summary` (the same data as the JSON API).

Self-contained (no CDN, no external script or style: the machines may have no internet): the styles
follow Airflow 3's UI (sans-serif, cards, its blue and state colours, light and dark through
``prefers-color-scheme``), the charts are inline SVG drawn here, and a few lines of script replace the
page's content every ``refresh_seconds`` without a reload, so the scroll position and the open
partition tables stay as they are. Values are for people: no ``None``/``True``, times in UTC with the
zone, numbers grouped; sections with nothing recorded are left out and named in one line at the end.
Sections the user may not read are not in the data at all (status_access.py): left out, not named among
the empty ones, and one line says which DAGs' runs hide them.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

Row = dict[str, Any]

_GOOD = {"running", "done", "passed", "ok", "applied", "approved", "success"}
_BAD = {"failed", "error", "refused", "discrepancies", "drift", "critical"}
_BUSY = {"pending", "stopping", "no live instance", "awaiting-approval", "proposed", "warning", "rolled-back",
         "rejected"}


def esc(v: object) -> str:
    return html.escape(str(v))


def human(v: Any) -> str:
    """A value as a person reads it: no ``None``/``True``/``False``, grouped digits."""
    if v is None or v == "":
        return "—"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        return f"{v:,.0f}" if v.is_integer() or abs(v) >= 100 else f"{v:.3g}"
    if isinstance(v, list | tuple):
        return ", ".join(human(x) for x in v) or "—"
    if isinstance(v, dict):
        return ", ".join(f"{k}: {human(x)}" for k, x in v.items()) or "—"
    return str(v)


def when(iso: str | None) -> str:
    """An ISO 8601 time as ``2026-11-23 19:31:08 UTC`` in a ``<time>`` element (machine value kept)."""
    if not iso:
        return "—"
    t = datetime.fromisoformat(iso)
    shown = t.strftime("%Y-%m-%d %H:%M:%S ") + ("UTC" if t.utcoffset() is not None and not t.utcoffset() else
                                                t.strftime("%z"))
    return f"<time datetime='{esc(iso)}'>{esc(shown)}</time>"


def badge(status: str | None) -> str:
    s = status or "unknown"
    kind = "good" if s in _GOOD else "bad" if s in _BAD else "busy" if s in _BUSY else "neutral"
    return f"<span class='badge {kind}'>{esc(s)}</span>"


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-")


# -- charts -------------------------------------------------------------------------------------------------

def sparkline(points: Sequence[tuple[str, float]], label: str, unit: str = "", width: int = 260,
              height: int = 56) -> str:
    """An inline SVG line of ``(time ISO, value)`` points, oldest first, each point a circle whose
    tooltip is its time and value; the newest value, min and max are printed beside it."""
    if not points:
        return ""
    values = [v for _, v in points]
    lo, hi = min(values), max(values)
    span = (hi - lo) or 1.0
    pad = 4.0
    step = (width - 2 * pad) / max(1, len(points) - 1)

    def xy(i: int, v: float) -> tuple[float, float]:
        return pad + i * step if len(points) > 1 else width / 2, height - pad - (v - lo) / span * (height - 2 * pad)

    coords = [xy(i, v) for i, v in enumerate(values)]
    line = " ".join(f"{x:.1f},{y:.1f}" for x, y in coords)
    area = f"{coords[0][0]:.1f},{height - pad} {line} {coords[-1][0]:.1f},{height - pad}"
    dots = "".join(f"<circle class='pt' cx='{x:.1f}' cy='{y:.1f}' r='{2.6 if len(points) <= 60 else 1.4}'>"
                   f"<title>{esc(t)}: {esc(human(v))}{esc(unit)}</title></circle>"
                   for (x, y), (t, v) in zip(coords, points, strict=True))
    svg = (f"<svg class='chart' viewBox='0 0 {width} {height}' width='{width}' height='{height}' role='img' "
           f"aria-label='{esc(label)}' data-points='{len(points)}'>"
           f"<polygon class='area' points='{area}'/><polyline class='line' points='{line}'/>{dots}</svg>")
    return (f"<figure class='spark'><figcaption>{esc(label)}</figcaption>{svg}"
            f"<div class='spark-legend'>now <b>{esc(human(values[-1]))}{esc(unit)}</b> · min {esc(human(lo))}"
            f" · max {esc(human(hi))} · {len(points)} samples since "
            f"{esc(points[0][0][:19].replace('T', ' '))} UTC</div></figure>")


# -- tables -------------------------------------------------------------------------------------------------

_TIME_KEYS = {"at", "started", "finished", "since", "seen_at", "desired_at", "triggered", "approved"}


def cell(key: str, v: Any) -> str:
    if key in _TIME_KEYS:
        return when(v)
    if key == "status":
        return badge(v)
    return esc(human(v))


def table(rows: list[Row], columns: Sequence[tuple[str, str]], numeric: Sequence[str] = ()) -> str:
    head = "".join(f"<th{' class=num' if k in numeric else ''}>{esc(label)}</th>" for k, label in columns)
    body = "".join("<tr>" + "".join(f"<td{' class=num' if k in numeric else ''}>{cell(k, r.get(k))}</td>"
                                    for k, _ in columns) + "</tr>" for r in rows)
    return f"<div class='table-wrap'><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>"


def section(key: str, title: str, body: str, note: str = "") -> str:
    note_html = f"<p class='note'>{esc(note)}</p>" if note else ""
    return f"<section id='{key}' class='card'><h2>{esc(title)}</h2>{note_html}{body}</section>"


# -- the parts of the page ----------------------------------------------------------------------------------

def attention_html(items: list[Row], partial: bool = False) -> str:
    if not items:
        return ("<section id='attention' class='card calm'><h2>Needs attention first</h2>"
                + ("<p>Nothing among what you may read.</p></section>" if partial else
                   "<p>Nothing: every flow is measured, desired states are applied, no failed workflow, no "
                   "approval waiting.</p></section>"))
    lis = "".join(f"<li class='att {esc(i['severity'])}'><span class='sev'>{esc(i['severity'])}</span>"
                  f"<b>{esc(i['what'])}</b>{' · ' + esc(i['flow']) if i.get('flow') else ''}"
                  f"<div class='detail'>{esc(i['detail'])}</div></li>" for i in items)
    return (f"<section id='attention' class='card alert'><h2>Needs attention first "
            f"<span class='count'>{len(items)}</span></h2><ul class='attention'>{lis}</ul></section>")


def flow_card(f: Row) -> str:
    name = f["name"]
    if f["lag"] is not None:
        lag = (f"<div class='lag'><span class='num big' data-lag='{f['lag']}'>{esc(human(f['lag']))}</span>"
               f"<span class='unit'>records behind</span></div>")
    else:
        lag = "<div class='lag unknown'><span class='big'>lag unknown</span></div>"
    error = f"<p class='error'>{esc(f['lag_error'])}</p>" if f["lag_error"] else ""
    history = [(s["at"], float(s["lag"])) for s in f["lag_history"]]
    chart = sparkline(history, f"lag of {name} over time", " records") if history else ""
    rate = f["records_per_s"]
    peak = max((s["records_per_s"] or 0.0 for s in f["lag_history"]), default=0.0)
    desired = f["desired"] or f"as configured ({f['configured']})"
    applied = ", ".join(f"{i['instance']}: {i['state']}" for i in f["instances"]) or "no live mirror instance"
    facts = [("desired", esc(desired) + (f" <span class='muted'>by {esc(f['desired_by'])}, {when(f['desired_at'])}"
                                         f"</span>" if f["desired_by"] else "")),
             ("applied", esc(applied) + ("" if f["applied"] else " <span class='badge bad'>differs</span>")),
             ("throughput", esc(f"{human(rate)} records/s" + (f" now, peak {human(peak)} in the chart" if peak else ""))
              if rate is not None else "—"),
             ("configured", esc(f["configured"]) + (f" · {esc(f['policy'])} policy" if f["policy"] else "")
              + (" · exactly-once" if f["exactly_once"] else "")),
             ("data path", f"<span data-path='{esc(f['data_path'])}'>{esc(f['data_path'])}</span> "
                           f"<span class='muted'>{esc(f['data_path_reason'])}</span>" if f["data_path"] else "—"),
             ("lag measured", when(f["lag_measured_at"]))]
    dl = "".join(f"<dt>{esc(k)}</dt><dd>{v}</dd>" for k, v in facts)
    parts = ""
    if f["partitions"]:
        lagging = sum(1 for p in f["partitions"] if p["lag"])
        parts = (f"<details id='parts-{slug(name)}'{' open' if len(f['partitions']) <= 12 else ''}><summary>"
                 f"{len(f['partitions'])} partitions, {lagging} lagging</summary>"
                 + table(f["partitions"], (("topic", "topic"), ("partition", "partition"), ("lag", "lag"),
                                           ("position", "replicated"), ("source_end", "source end")),
                         numeric=("partition", "source_end", "position", "lag")) + "</details>")
    return (f"<article class='card flow' data-flow='{esc(name)}' data-state='{esc(f['state'])}'>"
            f"<header class='flow-head'><h3>{esc(name)}</h3>{badge(f['state'])}</header>"
            f"<div class='flow-main'>{lag}{chart}</div>{error}<dl class='facts'>{dl}</dl>{parts}</article>")


def drills_html(trends: list[Row], drills: list[Row]) -> str:
    charts = []
    for t in trends:
        rpo = [(p["at"], p["value"]) for p in t["rpo_records_series"]]
        rto = [(p["at"], p["value"]) for p in t["rto_seconds_series"]]
        charts.append(f"<div class='trend'><h3>{esc(t['flow'])} <span class='muted'>{t['passed']} of {t['drills']} "
                      f"passed · last {badge(t['last'])}</span></h3><div class='charts'>"
                      + sparkline(rpo, f"RPO of {t['flow']} per drill", " records")
                      + sparkline(rto, f"RTO of {t['flow']} per drill", " s")
                      + f"</div><p class='muted'>RPO: {esc(t['rpo_records'])}<br>"
                      + f"RTO: {esc(t['rto_seconds'])}</p></div>")
    cols = (("started", "started"), ("flow", "flow"), ("mode", "mode"), ("status", "status"),
            ("rpo_records", "RPO (records)"),
            ("rpo_records change", "Δ"), ("rto_seconds", "RTO (s)"), ("rto_seconds change", "Δ"),
            ("duplicates", "duplicates"), ("losses", "losses"), ("missed", "missed objectives"), ("run_id", "run"))
    return "".join(charts) + table(drills, cols, numeric=("rpo_records", "rto_seconds", "duplicates", "losses"))



def hidden_html(hidden: Row) -> str:
    """The one line saying that sections are left out, and by which DAGs (fixed names, nothing recorded)."""
    if not hidden["dags"]:
        return ""
    return (f"<p class='note' id='hidden-by-permissions'>Some sections are hidden by your Airflow permissions: "
            f"you may not read the runs of {esc(', '.join(hidden['dags']))} (docs/security.md says which "
            f"section needs which DAG). Approvals are shown for the DAGs you may read.</p>")


def render_page(data: Row) -> str:
    hidden = data.get("hidden") or {"sections": [], "dags": []}
    parts = [f"<h1>Replication status</h1><p class='meta'>Generated {when(data['generated_at'])} · "
             f"refreshes every {data['refresh_seconds']} s · <a href='api/summary'>JSON</a></p>",
             hidden_html(hidden), attention_html(data["attention"], partial=bool(hidden["dags"]))]
    if "flows" in data:
        flows = data["flows"]
        parts.append("<section id='flows'><h2 class='bare'>Flows</h2>" + (
            "<div class='grid'>" + "".join(flow_card(f) for f in flows) + "</div>" if flows else
            "<p class='card note'>No flow known yet: no mirror instance has reported to the state store "
            "(run it with --state-db), no workflow controls one and no config is recorded.</p>") + "</section>")
    from mirror_airflow.status_controls import CONTROLS_NOTE, controls_html  # uses this module
    from mirror_airflow.status_partitions import ACTIONS_NOTE, actions_html, paused_html  # uses this module

    if "paused_partitions" in data:
        parts.append(paused_html(data["paused_partitions"]))
    empty: list[str] = []

    def add(key: str, title: str, rows: list[Row] | None, body: Callable[[], str], note: str = "") -> None:
        if rows is None:  # not the user's to read: not named either
            return
        if rows:
            parts.append(section(key, title, body(), note))
        else:
            empty.append(title.lower())

    add("runtime-controls", "Runtime controls", data.get("runtime_controls"),
        lambda: controls_html(data["runtime_controls"]), CONTROLS_NOTE)
    add("partition-actions", "Partition actions", data.get("partition_actions"),
        lambda: actions_html(data["partition_actions"]), ACTIONS_NOTE)
    add("approvals", "Approvals waiting", data["approvals"],
        lambda: table(data["approvals"], (("since", "since"), ("dag_id", "DAG"), ("task_id", "gate"),
                                          ("subject", "subject"), ("run_id", "run"))),
        "Answer them in Airflow: Browse → Required actions.")
    add("failovers", "Failovers and failbacks", data.get("failovers"), lambda: table(data["failovers"], (
        ("triggered", "triggered"), ("approved", "approved"), ("finished", "finished"), ("kind", "kind"),
        ("flow", "flow"), ("mode", "mode"), ("status", "outcome"), ("approved_by", "approved by"),
        ("rto_s", "RTO from trigger (s)"), ("rto_from_approval_s", "RTO from approval (s)"),
        ("rpo_measured", "RPO measured (records)"), ("rpo_estimate", "RPO estimated at approval"), ("error", "error"),
        ("run_id", "run")), numeric=("rto_s", "rto_from_approval_s", "rpo_measured", "rpo_estimate")))
    add("cutovers", "Cutovers", data.get("cutovers"), lambda: table(data["cutovers"], (
        ("started", "started"), ("finished", "finished"), ("source", "from"), ("target", "to"),
        ("status", "outcome"), ("approved_by", "approved by"), ("topics", "topics"), ("error", "error"),
        ("run_id", "run"))))
    add("drills", "DR drills: RPO and RTO", data.get("drills"),
        lambda: drills_html(data["drill_trends"], data["drills"]))
    add("registry", "Active-cluster registry", data.get("registry"), lambda: table(data["registry"], (
        ("app", "application"), ("cluster", "cluster"), ("at", "since"), ("changed_by", "by"), ("reason", "why"))))
    add("reconciliations", "Latest reconciliation per flow", data.get("reconciliations"), lambda: table(
        data["reconciliations"], (("at", "at"), ("flow", "flow"), ("status", "status"), ("checked", "checked"),
                                  ("missing", "missing"), ("mismatched", "mismatched"), ("extra", "extra"),
                                  ("groups_wrong", "groups wrong"), ("problems", "problems"), ("run_id", "run")),
        numeric=("checked", "missing", "mismatched", "extra", "groups_wrong")))
    add("sync", "Topic sync runs", data.get("sync_runs"), lambda: table(data["sync_runs"], (
        ("started", "started"), ("flow", "flow"), ("status", "status"), ("dry_run", "dry run"),
        ("summary", "summary"), ("run_id", "run"))))
    add("drift", "Recent topic drift", data.get("drift"), lambda: table(data["drift"], (
        ("at", "at"), ("flow", "flow"), ("topic", "topic"), ("kind", "kind"), ("detail", "detail"),
        ("action", "status"))))
    if data.get("approvals_error"):
        parts.append(f"<p class='note'>{esc(data['approvals_error'])}</p>")
    if empty:
        parts.append(f"<p class='note' id='nothing-yet'>Nothing recorded yet: {esc(', '.join(empty))}.</p>")
    return PAGE.format(style=STYLE, script=SCRIPT.replace("REFRESH_MS", str(int(data["refresh_seconds"]) * 1000)),
                       refresh=int(data["refresh_seconds"]), main="".join(parts))


PAGE = """<!doctype html><html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1"><meta name="color-scheme" content="light dark">
<title>Replication status · mirror_core</title><style>{style}</style>
<noscript><meta http-equiv="refresh" content="{refresh}"></noscript></head>
<body><div class="toolbar"><span id="refresh-state" class="muted">live</span>
<label><input type="checkbox" id="pause"> pause refresh</label></div>
<main id="content">{main}</main><script>{script}</script></body></html>"""

# Airflow 3's palette (Chakra based): blue brand, zinc greys, its state colours.
STYLE = """
:root{--bg:#fafafa;--card:#fff;--fg:#18181b;--muted:#71717a;--border:#e4e4e7;--brand:#0178d4;--brand-soft:#e0f0fd;
--good:#15803d;--good-bg:#dcfce7;--bad:#b91c1c;--bad-bg:#fee2e2;--busy:#a16207;--busy-bg:#fef9c3;--neutral-bg:#f4f4f5;
--row:#f4f4f5;color-scheme:light dark}
@media (prefers-color-scheme:dark){:root{--bg:#09090b;--card:#18181b;--fg:#fafafa;--muted:#a1a1aa;--border:#27272a;
--brand:#4aa8f0;--brand-soft:#0c2a44;--good:#4ade80;--good-bg:#14532d;--bad:#f87171;--bad-bg:#450a0a;--busy:#facc15;
--busy-bg:#422006;--neutral-bg:#27272a;--row:#1f1f23}}
*{box-sizing:border-box}
body{margin:0;background:var(--bg);color:var(--fg);font:14px/1.45 Inter,ui-sans-serif,system-ui,-apple-system,
"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif}
main{max-width:1400px;margin:0 auto;padding:16px 24px 40px}
h1{font-size:22px;font-weight:600;margin:4px 0 2px}h2{font-size:16px;font-weight:600;margin:0 0 10px}
h2.bare{margin:22px 0 10px}h3{font-size:15px;font-weight:600;margin:0}
a{color:var(--brand)}.meta,.muted,.note{color:var(--muted)}.meta{margin:0 0 14px}
.toolbar{position:fixed;top:8px;right:16px;display:flex;gap:12px;align-items:center;font-size:12px;
background:var(--card);border:1px solid var(--border);border-radius:8px;padding:4px 10px;z-index:2}
.card{background:var(--card);border:1px solid var(--border);border-radius:10px;padding:14px 16px;margin:0 0 14px;
box-shadow:0 1px 2px rgba(0,0,0,.05)}
.grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(400px,1fr));gap:14px}
.grid .card{margin:0}
.alert{border-left:4px solid var(--bad)}.calm{border-left:4px solid var(--good)}
.count{background:var(--bad);color:#fff;border-radius:10px;padding:0 8px;font-size:12px;margin-left:6px}
ul.attention{list-style:none;margin:0;padding:0}
li.att{padding:8px 10px;border-radius:8px;margin:0 0 6px;background:var(--busy-bg)}
li.att.critical{background:var(--bad-bg)}
li.att .sev{text-transform:uppercase;font-size:11px;font-weight:700;letter-spacing:.04em;margin-right:8px;
color:var(--busy)}li.att.critical .sev{color:var(--bad)}li.att .detail{color:var(--fg);opacity:.85;font-size:13px;
margin-top:2px;overflow-wrap:anywhere}
.badge{display:inline-block;border-radius:999px;padding:1px 9px;font-size:12px;font-weight:600;white-space:nowrap;
background:var(--neutral-bg);color:var(--fg)}
.badge.good{background:var(--good-bg);color:var(--good)}.badge.bad{background:var(--bad-bg);color:var(--bad)}
.badge.busy{background:var(--busy-bg);color:var(--busy)}
.flow-head{display:flex;justify-content:space-between;align-items:center;gap:8px;margin-bottom:8px}
.flow-main{display:flex;gap:18px;align-items:flex-end;flex-wrap:wrap}
.lag .big{font-size:30px;font-weight:600;line-height:1}.lag .unit{color:var(--muted);margin-left:6px}
.lag.unknown .big{font-size:20px;color:var(--bad)}
.error{color:var(--bad);overflow-wrap:anywhere;margin:8px 0}
.facts{display:grid;grid-template-columns:max-content 1fr;gap:2px 12px;margin:10px 0}
.facts dt{color:var(--muted)}.facts dd{margin:0;overflow-wrap:anywhere}
figure.spark{margin:0}figure.spark figcaption{font-size:12px;color:var(--muted)}
.spark-legend{font-size:12px;color:var(--muted)}
svg.chart{display:block}svg.chart .line{fill:none;stroke:var(--brand);stroke-width:1.6}
svg.chart .area{fill:var(--brand-soft);stroke:none}svg.chart .pt{fill:var(--brand)}
.charts{display:flex;gap:24px;flex-wrap:wrap;margin:6px 0}.trend{margin-bottom:12px}
.table-wrap{overflow-x:auto}
table{border-collapse:collapse;width:100%;font-size:13px}
th{text-align:left;font-weight:600;color:var(--muted);border-bottom:1px solid var(--border);padding:6px 8px;
white-space:nowrap}
td{border-bottom:1px solid var(--border);padding:5px 8px;vertical-align:top}
tbody tr:hover{background:var(--row)}.num{text-align:right;font-variant-numeric:tabular-nums}
details summary{cursor:pointer;color:var(--brand);margin:4px 0}
td.why{min-width:22em;overflow-wrap:anywhere;white-space:normal}td.nw{white-space:nowrap}
.flow table{font-size:12px}.flow th,.flow td{padding:3px 6px}.flow th{white-space:normal}
"""

# Replace <main> with a fresh copy every REFRESH_MS: no reload, so the scroll position stays; the
# open/closed partition tables are carried over.
SCRIPT = """
(function(){
  var state=document.getElementById('refresh-state'), pause=document.getElementById('pause');
  function refresh(){
    if(pause.checked){state.textContent='paused';return;}
    fetch(location.href,{credentials:'same-origin',cache:'no-store'}).then(function(r){
      if(!r.ok){throw new Error('HTTP '+r.status);} return r.text();
    }).then(function(text){
      var fresh=new DOMParser().parseFromString(text,'text/html').getElementById('content');
      if(!fresh){throw new Error('unexpected answer');}
      var open={};
      document.querySelectorAll('details[id]').forEach(function(d){open[d.id]=d.open;});
      fresh.querySelectorAll('details[id]').forEach(function(d){if(d.id in open){d.open=open[d.id];}});
      document.getElementById('content').replaceWith(fresh);
      state.textContent='live, updated '+new Date().toISOString().slice(11,19)+' UTC';
    }).catch(function(e){state.textContent='refresh failed ('+e.message+'); retrying';});
  }
  setInterval(refresh, REFRESH_MS);
})();
"""
