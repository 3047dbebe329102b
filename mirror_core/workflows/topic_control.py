"""Operators' runtime controls of a flow: pause or resume a source topic or one partition, limit the bytes per
second copied for the flow or a topic, skip an offset range of a partition the mirror paused itself, set the flow's
topic and group filters over its config file's (``filter``; ``unfilter``: back to the file's).

:func:`apply_control` is the one place that turns a request into desired state in the state store (who, when,
why) and says in one line what it recorded; ``mirror-core control``, the ``runtime_control`` DAG and automation
call it. The running mirrors apply the desired state within seconds (``replication/controls.py``: an operator's
pause shows in the instance's paused partitions as ``paused by <who> ...``; a limit is shared across processes
by the share of the topic's or flow's partitions each owns). Every refusal is one line; nothing is recorded then.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from mirror_core.config.model import MirrorConfig
from mirror_core.state.errors import StateStoreError
from mirror_core.state.flow_filters import check as check_filters
from mirror_core.state.flow_filters import describe as describe_filter
from mirror_core.workflows.errors import ParamError, WorkflowError
from mirror_core.workflows.params import param
from mirror_core.workflows.scope import PAUSE_MARK

if TYPE_CHECKING:
    from mirror_core.state.models import TopicControlRecord
    from mirror_core.state.store import StateStore

ACTIONS = ("pause", "resume", "limit", "unlimit", "skip", "filter", "unfilter")
_FLOW_WIDE = ("filter", "unfilter")  # of the whole flow: no topic, partition, rate or offsets
_OFFSETS = re.compile(r"(\d+)(?:-(\d+))?")


def parse_offsets(text: str) -> tuple[int, int] | None:
    """``3061-3263`` (inclusive) or ``3061`` -> (first, last); None if it is neither."""
    m = _OFFSETS.fullmatch(text.strip())
    if m is None:
        return None
    first = int(m.group(1))
    return first, int(m.group(2)) if m.group(2) is not None else first


@dataclass(frozen=True)
class ControlRequest:
    """One operator request, its shape checked (:func:`control_request`)."""

    action: str  # one of ACTIONS
    flow: str
    topic: str | None  # None: the whole flow (limit, unlimit)
    partition: int | None  # None: the whole topic (pause, resume)
    bytes_per_second: int | None  # limit only
    offsets: tuple[int, int] | None  # skip only: first, last (inclusive)
    reason: str
    filters: tuple[tuple[str, str], ...] = ()  # filter only: (config key, patterns), e.g. ("topics", "orders.*")

    @property
    def where(self) -> str:
        """``dc1->dc2 orders[3]``, ``dc1->dc2 orders``, ``dc1->dc2 (whole flow)``"""
        scope = self.topic if self.partition is None else f"{self.topic}[{self.partition}]"
        return f"{self.flow} {scope or '(whole flow)'}"

    def approved_by(self, approver: str) -> ControlRequest:
        """The request with its approval in the recorded reason."""
        return replace(self, reason=f"{self.reason} (approved by {approver})")

    @property
    def summary(self) -> str:
        """What is asked, in a few words (an approval gate's subject)."""
        if self.action == "limit":
            return f"limit {self.where} to {self.bytes_per_second} bytes/s"
        if self.action == "skip" and self.offsets is not None:
            return f"skip offsets {self.offsets[0]}-{self.offsets[1]} of {self.where}"
        if self.action == "filter":
            return f"filter {self.flow}: " + ", ".join(f"{k} '{v}'" for k, v in self.filters)
        if self.action == "unfilter":
            return f"unfilter {self.flow} (its config file's filters again)"
        return f"{self.action} {self.where}"


def _refuse(action: str, where: str, problem: str) -> WorkflowError:
    return WorkflowError(f"{action} refused on {where}: {problem}; nothing was recorded")


def control_request(action: str, flow: str, topic: str | None = None, partition: int | None = None,
                    bytes_per_second: int | None = None, offsets: str | None = None,
                    reason: str = "", filters: Mapping[str, str | None] | None = None) -> ControlRequest:
    """The request, or one WorkflowError naming what does not fit the action (empty strings are absent).
    ``filters``: filter's patterns by config key (topics, topics.exclude, groups, groups.exclude)."""
    topic, offsets = topic or None, (offsets or "").strip() or None
    given = {k: v.strip() for k, v in (filters or {}).items() if v is not None and v.strip(" ,")}  # (" ," too: empty)
    req = ControlRequest(action, flow, topic, partition, bytes_per_second, None, " ".join(reason.split()))
    problem = None
    if action not in ACTIONS:
        problem = f"unknown action {action!r}: use one of {', '.join(ACTIONS)}"
    elif action in _FLOW_WIDE and (topic, partition, bytes_per_second, offsets) != (None, None, None, None):
        problem = f"{action} is of the whole flow: it takes no topic, partition, bytes per second or offsets"
    elif given and action != "filter":
        problem = f"{action} takes no filters (only filter does)"
    elif topic is None and action in ("pause", "resume", "skip"):
        problem = f"{action} needs a topic"
    elif partition is not None and action in ("limit", "unlimit"):
        problem = "a bandwidth limit is of the whole flow or of a topic, not of a partition"
    elif partition is None and action == "skip":
        problem = "skip needs the partition the mirror paused"
    elif bytes_per_second is None and action == "limit":
        problem = "limit needs the bytes per second"
    elif bytes_per_second is not None and action != "limit":
        problem = f"{action} takes no bytes per second (only limit does)"
    elif offsets is None and action == "skip":
        problem = "skip needs the offsets to pass over: FIRST-LAST (inclusive), as the mirror's pause line names them"
    elif offsets is not None and action != "skip":
        problem = f"{action} takes no offsets (only skip does)"
    elif offsets is not None and parse_offsets(offsets) is None:
        problem = (f"offsets {offsets!r} are not an offset range: use FIRST-LAST (inclusive, e.g. 3061-3263, as "
                   "the mirror's pause line prints it) or one offset")
    elif not req.reason:
        problem = "a reason is needed (why: it is recorded with the change)"
    if problem is not None:
        raise _refuse(action, req.where, problem)
    checked: dict[str, str | None] = {}
    if action == "filter":
        try:  # (the patterns as the store checks them, before anything is asked of an approver)
            checked = check_filters("filter", flow, "operator", req.reason, given)
        except StateStoreError as exc:
            raise WorkflowError(str(exc)) from None
    return ControlRequest(action, flow, topic, partition, bytes_per_second,
                          parse_offsets(offsets) if offsets is not None else None, req.reason,
                          tuple((k, v) for k, v in checked.items() if v is not None))


def check_against_config(config: MirrorConfig, req: ControlRequest) -> None:
    """The flow exists in ``config`` (a standby flow too) and replicates the topic, or one WorkflowError."""
    try:
        flow = config.flow(req.flow)
    except KeyError as exc:
        raise _refuse(req.action, req.where, str(exc.args[0])) from None
    if req.topic is not None and not flow.should_replicate(req.topic):
        raise _refuse(req.action, req.where, f"topic {req.topic!r} is not replicated by flow {req.flow} (its topic "
                                             "filter): name a source topic the flow copies")


def apply_control(store: StateStore, req: ControlRequest, who: str) -> str:
    """Record ``req`` as ``who`` and say what was recorded, in one line; a refusal is one WorkflowError."""
    try:
        if req.action == "pause":
            assert req.topic is not None
            rec = store.pause_topic(req.flow, req.topic, who, req.reason, partition=req.partition)
            return f"paused {rec.where} (id {rec.id}, by {rec.set_by}): {_applies(store, req.flow)}"
        if req.action == "resume":
            return _resume(store, req, who)
        if req.action == "limit":
            assert req.bytes_per_second is not None
            before = _active(store, req, "limit")
            rec = store.limit_bandwidth(req.flow, who, req.reason, req.bytes_per_second, topic=req.topic)
            was = f", was {before.limit_bytes_per_s} bytes/s" if before is not None else ""
            return (f"limited {rec.where} to {rec.limit_bytes_per_s} bytes/s across its processes (id {rec.id}, by "
                    f"{rec.set_by}{was}): {_applies(store, req.flow)}")
        if req.action == "unlimit":
            rec = store.unlimit_bandwidth(req.flow, who, req.reason, topic=req.topic)
            return (f"unlimited {rec.where} (was {rec.limit_bytes_per_s} bytes/s, id {rec.id}, by {rec.cleared_by}): "
                    f"{_applies(store, req.flow)}")
        if req.action == "filter":
            f = store.set_flow_filter(req.flow, who, req.reason, dict(req.filters))
            return f"filters of {f.flow}: {describe_filter(f)} (id {f.id}): {_applies(store, req.flow)}"
        if req.action == "unfilter":
            f = store.clear_flow_filter(req.flow, who, req.reason)
            return (f"cleared the filters of {f.flow} set by {f.set_by} (id {f.id}): the config file's apply again; "
                    f"{_applies(store, req.flow)}")
        assert req.topic is not None and req.partition is not None and req.offsets is not None
        first, last = req.offsets
        action = store.request_partition_action(req.flow, req.topic, req.partition, "skip", who, req.reason,
                                                first, last)
        return (f"requested: skip {action.where} offsets {action.offsets} (partition action id {action.id}, by "
                f"{action.requested_by}): {_applies(store, req.flow)}; `mirror-core partitions actions` shows the "
                "outcome")
    except StateStoreError as exc:
        raise WorkflowError(str(exc)) from None


def _active(store: StateStore, req: ControlRequest, kind: str, partition: int | None = -1) -> TopicControlRecord | None:
    """The active control of ``kind`` on the request's scope (``partition`` -1: the request's own)."""
    part = req.partition if partition == -1 else partition
    return next((c for c in store.active_topic_controls([req.flow])
                 if c.kind == kind and c.topic == req.topic and c.partition == part), None)


def _resume(store: StateStore, req: ControlRequest, who: str) -> str:
    """An operator's pause of exactly this scope is cleared; else a partition the mirror paused itself
    (damaged batch, record refused) gets a recorded partition action "resume"; else: not paused."""
    assert req.topic is not None
    own = _active(store, req, "pause")
    if own is not None and own.reason.startswith(PAUSE_MARK):  # copying it again would overwrite the standby's writes
        raise _refuse("resume", req.where, f"{req.where} is {own.reason.split(' (')[0]} (applications use the standby "
                                           f"copy now): the failback DAG with topics [{req.topic}] resumes it")
    if own is not None:
        rec = store.resume_topic(req.flow, req.topic, who, req.reason, partition=req.partition)
        return (f"resumed {rec.where} (operator's pause id {rec.id} by {rec.set_by} cleared by {rec.cleared_by}): "
                f"{_applies(store, req.flow)}")
    if req.partition is None:
        parts = sorted(c.partition for c in store.active_topic_controls([req.flow])
                       if c.kind == "pause" and c.topic == req.topic and c.partition is not None)
        hint = f" (its partitions {', '.join(map(str, parts))} are: resume each with its partition)" if parts else ""
        raise _refuse("resume", req.where, f"{req.where} is not paused by an operator{hint}")
    whole = _active(store, req, "pause", partition=None)
    if whole is not None:
        raise _refuse("resume", req.where, f"it is paused with its whole topic (by {whole.set_by}: {whole.reason}): "
                                           "resume the topic, without a partition")
    live = [i for i in store.flow_instances(req.flow) if i.state == "running"]
    reported = [p for p in store.paused_partitions(flow=req.flow)
                if p.topic == req.topic and p.partition == req.partition]
    if live and not reported:
        raise _refuse("resume", req.where, f"{req.where} is not paused: not by an operator, and no live instance of "
                                           "the flow reports it paused")
    action = store.request_partition_action(req.flow, req.topic, req.partition, "resume", who, req.reason)
    why = f" ({reported[0].reason})" if reported else ""
    return (f"requested: resume {action.where}, paused by the mirror{why} (partition action id {action.id}, by "
            f"{action.requested_by}): the instance owning it re-reads from where it stopped; `mirror-core partitions "
            "actions` shows the outcome")


def _applies(store: StateStore, flow: str) -> str:
    if any(i.state == "running" for i in store.flow_instances(flow)):
        return "the running mirror instances apply it within seconds"
    return (f"no mirror instance has reported flow {flow} running in the last 20 s on this store: it applies once one "
            "runs with --state-db")


@dataclass(frozen=True, kw_only=True)
class RuntimeControlParams:
    """The ``runtime_control`` DAG's Params (empty strings stand for absent values)."""

    flow: str = param(of="flow")
    action: str = param(choices=ACTIONS)
    topic: str | None = param(default=None)
    partition: int | None = param(default=None, minimum=0)
    bytes_per_second: int | None = param(default=None, minimum=1)
    offsets: str | None = param(default=None)
    topics: str | None = param(default=None)
    topics_exclude: str | None = param(default=None)
    groups: str | None = param(default=None)
    groups_exclude: str | None = param(default=None)
    reason: str = param(default="")
    require_approval: bool = param(default=False)

    def check(self) -> None:
        try:
            self.request()
        except WorkflowError as exc:
            raise ParamError(str(exc)) from None

    def request(self) -> ControlRequest:
        return control_request(self.action, self.flow, self.topic, self.partition, self.bytes_per_second,
                               self.offsets, self.reason,
                               {"topics": self.topics, "topics.exclude": self.topics_exclude, "groups": self.groups,
                                "groups.exclude": self.groups_exclude})


def approval_body(store: StateStore, req: ControlRequest, who: str) -> str:
    """What an approver sees: the change, who asks and why, and the flow's controls and pauses now."""
    lines = [f"**{req.summary}**", "", f"Asked by {who}: {req.reason}", "", f"Active controls of {req.flow} now:"]
    active = store.active_topic_controls([req.flow])
    lines += [f"- {c.kind} {c.scope or '(whole flow)'}"
              + (f" {c.limit_bytes_per_s} bytes/s" if c.limit_bytes_per_s else "")
              + f" since {c.set_at:%Y-%m-%d %H:%M:%S} UTC by {c.set_by}: {c.reason}" for c in active] or ["- none"]
    active_filter = store.active_flow_filters([req.flow]).get(req.flow)
    lines += ["", f"Filters set in the state store now: {describe_filter(active_filter) if active_filter else 'none'}"
                  f"{' (a filter replaces them whole)' if active_filter and req.action == 'filter' else ''}"]
    paused = store.paused_partitions(flow=req.flow)
    lines += ["", "Partitions the live instances report paused:"]
    lines += [f"- {p.topic}[{p.partition}] on {p.instance}: {p.reason}" for p in paused] or ["- none"]
    return "\n".join(lines)
