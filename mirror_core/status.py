"""``mirror-core status``: per flow and partition, source end offset, replicated position and lag,
computed from the clusters themselves (works whether or not a mirror is running)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from confluent_kafka import TopicPartition

from mirror_core.clients import ClusterHealth, explain_failure, make_admin, make_consumer
from mirror_core.config.model import FlowConfig, MirrorConfig
from mirror_core.kafka_io import SILENT
from mirror_core.replication.topics import TopicManager
from mirror_core.state.models import FlowControl, FlowFilterRecord
from mirror_core.state.store import StateStore
from mirror_core.stores.progress import ProgressStore


@dataclass
class PartitionStatus:
    flow: str
    topic: str
    partition: int
    remote_topic: str
    source_start: int | None
    source_end: int | None
    position: int | None  # next source offset to replicate (committed progress)
    lag: int | None
    remote_end: int | None


@dataclass(frozen=True)
class FlowControlView:
    """A flow as the control plane sees it: what the workflows want, who set that, what runs, how to change it."""

    desired: str  # running | stopped | as configured
    set_by: str | None  # who, when, why and in which run; None: never set (as configured)
    applied: str  # "<instance>=<state>, ..." or "no live instance"
    change: str | None  # the command that changes the desired state (None: not known without the config)
    filters: str | None = None  # the filters set in the state store (desired) and those the instances apply

    def parts(self) -> list[str]:
        want = f"desired {self.desired}" + (f" (set by {self.set_by})" if self.set_by else "")
        return [want, f"applied: {self.applied}", *([self.change] if self.change else []),
                *([self.filters] if self.filters else [])]

    def __str__(self) -> str:
        return "; ".join(self.parts())


@dataclass
class FlowStatus:
    flow: str
    reachable: bool
    error: str | None
    partitions: list[PartitionStatus]
    #: alias of the cluster that could not be read (source or target), None when reachable
    unreachable_cluster: str | None = None
    #: "enabled" (runs wherever mirror-core run reads the config) or "standby" (started by a workflow)
    configured: str = "enabled"
    #: with a state store: what the workflows want and what the live instances apply, on one line
    control: str | None = None
    #: the same, in parts (None: only the line, e.g. "state store unavailable: ...")
    control_detail: FlowControlView | None = None

    @property
    def total_lag(self) -> int | None:
        if not self.reachable:  # unknown, not zero
            return None
        lags = [p.lag for p in self.partitions]
        return None if any(lag is None for lag in lags) else sum(lag for lag in lags if lag is not None)


def flow_status(config: MirrorConfig, flow: FlowConfig, timeout: float = 10.0) -> FlowStatus:
    src = config.cluster(flow.source)
    tgt = config.cluster(flow.target)
    src_health, tgt_health = ClusterHealth(src.alias), ClusterHealth(tgt.alias)
    src_admin, tgt_admin = make_admin(src, src_health, SILENT), make_admin(tgt, tgt_health, SILENT)
    manager = TopicManager(flow, src_admin, tgt_admin, timeout=timeout)
    try:
        topics = manager.source_topics()
    except Exception as exc:
        reason = explain_failure(exc, (src_admin, src_health), (tgt_admin, tgt_health))
        return FlowStatus(flow.name, False, reason, [], src.alias)
    # The target holds the replicated positions: without it they are unknown, never "nothing yet".
    try:
        has_progress = flow.progress_topic in manager.remote_partitions()
    except Exception as exc:
        return FlowStatus(flow.name, False, explain_failure(exc, (tgt_admin, tgt_health)), [], tgt.alias)
    src_consumer = make_consumer(src, "mirror-core.status", SILENT)
    tgt_consumer = make_consumer(tgt, "mirror-core.status", SILENT, tgt_health)
    try:
        progress: dict[tuple[str, int], int] = {}
        if has_progress:  # no progress topic yet: the flow has replicated nothing so far
            try:
                progress = ProgressStore(flow.progress_topic, tgt_consumer, "status").refresh(timeout)
            except Exception as exc:
                reason = explain_failure(exc, (tgt_consumer, tgt_health))
                if not reason.startswith("cluster "):
                    reason = f"cluster {tgt.alias}: cannot read the replicated positions: {reason}"
                return FlowStatus(flow.name, False, reason, [], tgt.alias)
        parts: list[PartitionStatus] = []
        for topic, count in sorted(topics.items()):
            remote = flow.remote_topic(topic)
            for p in range(count):
                low, high = _watermarks(src_consumer, topic, p, timeout)
                _, rhigh = _watermarks(tgt_consumer, remote, p, timeout)
                pos = progress.get((topic, p))
                lag = None
                if high is not None:
                    # Nothing replicated yet: everything still retained is lag.
                    lag = max(0, high - (pos if pos is not None else (low or 0)))
                parts.append(PartitionStatus(flow.name, topic, p, remote, low, high, pos, lag, rhigh))
        return FlowStatus(flow.name, True, None, parts)
    finally:
        src_consumer.close()
        tgt_consumer.close()


def _watermarks(consumer: Any, topic: str, partition: int, timeout: float) -> tuple[int | None, int | None]:
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=timeout)
        return int(low), int(high)
    except Exception:
        return None, None


def collect_status(config: MirrorConfig, flows: list[str] | None = None,
                   controls: Mapping[str, str | FlowControlView] | None = None) -> list[FlowStatus]:
    """Every configured flow (standby ones too: after a failover the reverse flow is the one that runs),
    or the ``flows`` named (an unknown name raises the config's one "unknown flow" KeyError)."""
    selected = [config.flow(n) for n in flows] if flows else config.all_flows
    out = []
    for f in selected:
        st = flow_status(config, f)
        st.configured = "enabled" if f in config.flows else "standby"
        control = (controls or {}).get(f.name)
        st.control = None if control is None else str(control)
        st.control_detail = control if isinstance(control, FlowControlView) else None
        out.append(st)
    return out


def flow_controls(store: StateStore, flows: list[str],
                  config: MirrorConfig | None = None) -> dict[str, FlowControlView]:
    """Per flow: the desired state the workflows set (who set it, when, why, in which run), what the live
    instances apply and, with the ``config``, the command that changes it."""
    desired = store.flow_controls()
    filters = store.active_flow_filters(flows)
    out = {}
    for name in flows:
        instances = store.flow_instances(name)
        applied = sorted(f"{i.instance}={i.state}" for i in instances)
        row = desired.get(name)
        set_by = None if row is None else (f"{row.changed_by} {_utc(row.changed_at)}: {row.reason}"
                                           f"{f', run {row.run_id}' if row.run_id else ''}")
        out[name] = FlowControlView(row.desired if row else "as configured", set_by,
                                    ", ".join(applied) if applied else "no live instance",
                                    change_command(config, name, row) if config is not None else None,
                                    filters_line(filters.get(name), instances))
    return out


def filters_line(stored: FlowFilterRecord | None, instances: list[Any]) -> str | None:
    """``filters desired: topics 'a|b' (state store id 4, by alice ...); applied: m-1=id 4 ...`` (None: no filter set
    in the store and every live instance applies its config file's)."""
    reported = [(i.instance, (i.filters or {}).get("filter_id"), i.filters or {}) for i in instances]
    if stored is None and all(fid is None for _, fid, _ in reported):
        return None
    keys = ", ".join(f"{k} '{v}'" for k, v in stored.overrides.items()) if stored is not None else ""
    want = (f"filters desired: {keys} (state store id "
            f"{stored.id}, by {stored.set_by} {_utc(stored.set_at)}: {stored.reason})" if stored is not None
            else "filters desired: the config file's")
    have = ", ".join(f"{inst}=" + (f"id {fid}" if fid is not None else "the file's")
                     + f" (topics '{vals.get('topics')}', exclude '{vals.get('topics.exclude')}')"
                     for inst, fid, vals in sorted(reported, key=lambda r: r[0])) or "no live instance"
    return f"{want}; applied: {have}"


def change_command(config: MirrorConfig, name: str, control: FlowControl | None) -> str | None:
    """The workflow that changes the desired state of flow ``name`` (``control``: as the state store holds it,
    None: as configured), as the command that triggers it. A failover stops a flow and starts its reverse; a
    failback stops the reverse and starts the flow again (both name the forward flow)."""
    try:
        flow = config.flow(name)
    except KeyError:
        return None
    standby = flow not in config.flows
    state = control.desired if control is not None else ("stopped" if standby else "running")
    if control is not None and state == "stopped" and control.reason.startswith("cutover"):
        return f"a cutover moved its applications to {flow.target}: no workflow starts it again"
    reverse = f"{flow.target}->{flow.source}"
    has_reverse = any(f.name == reverse for f in config.all_flows)
    if standby and has_reverse:  # a reverse flow: a failover of its forward flow starts it, a failback stops it
        dag, forward = ("failover", reverse) if state == "stopped" else ("failback", reverse)
    elif state == "stopped":
        if not has_reverse:
            return f"a failback needs the reverse flow {reverse} in the config to start it again"
        dag, forward = "failback", name
    else:
        dag, forward = "failover", name
    verb = "starts" if state == "stopped" else "stops"
    return f"{dag} {verb} it: airflow dags trigger {dag} --conf '{{\"flow\": \"{forward}\"}}'"


def _utc(when: Any) -> str:
    return f"{when:%Y-%m-%d %H:%M} UTC" if when is not None else "(time unknown)"


def status_json(statuses: list[FlowStatus]) -> dict[str, Any]:
    return {
        "generated_at": time.time(),
        "flows": [
            {"flow": s.flow, "configured": s.configured, "control": s.control,
             "control_detail": asdict(s.control_detail) if s.control_detail else None, "reachable": s.reachable,
             "unreachable_cluster": s.unreachable_cluster, "error": s.error, "total_lag": s.total_lag,
             "partitions": [asdict(p) for p in s.partitions]}
            for s in statuses
        ],
    }


def status_table(statuses: list[FlowStatus]) -> Any:
    from rich.markup import escape
    from rich.table import Table

    table = Table(title="mirror_core replication status", header_style="bold")
    for col in ("flow", "topic", "partition", "remote topic", "source end", "replicated", "lag", "remote end"):
        table.add_column(col, justify="right" if col in ("partition", "source end", "replicated", "lag",
                                                          "remote end") else "left")
    for s in statuses:
        flow = s.flow if s.configured == "enabled" else f"{s.flow} (standby)"
        if s.control:  # one row per part: desired (who set it), applied, the command that changes it
            style = "yellow" if s.control.startswith("desired stopped") else "dim"
            for part in s.control_detail.parts() if s.control_detail else [s.control]:
                table.add_row(flow, f"[{style}]{escape(part)}[/{style}]", "", "", "", "", "", "")
        if s.error:
            table.add_row(flow, f"[red]unreachable: {s.error}[/red]", "", "", "", "", "", "")
            continue
        if not s.partitions:
            table.add_row(flow, "[dim]no source topic matches the flow's filters yet[/dim]", "", "", "", "", "", "")
        for p in s.partitions:
            lag = "-" if p.lag is None else (f"[green]{p.lag}[/green]" if p.lag == 0 else f"[yellow]{p.lag}[/yellow]")
            table.add_row(flow, p.topic, str(p.partition), p.remote_topic, _fmt(p.source_end),
                          _fmt(p.position), lag, _fmt(p.remote_end))
    return table


def _fmt(v: int | None) -> str:
    return "-" if v is None else str(v)
