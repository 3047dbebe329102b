"""The plans the workflows make and the DAG tasks hand to each other: small frozen value types.

A plan is made once (failover/failback ``assess``, cutover ``preflight``), recorded in the state store,
rendered as the body of the approval gate and passed to the later tasks through XCom. ``to_xcom()``
gives the JSON-safe dict (the state-store record, :meth:`record`, plus ``record_id`` and the rendered
``body``) and ``from_xcom()`` reads it back; a DAG task converts at its boundary only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, fields, replace
from typing import Any, ClassVar, Protocol


class Translation(Protocol):
    group: str
    topic: str
    partition: int
    remote_topic: str
    source_offset: int
    target_offset: int | None
    exact: bool
    note: str
    basis: str
    checkpoint_age_s: float | None
    max_rereads: int | None


# -- rows shared by the plans ----------------------------------------------------------------------------
@dataclass(frozen=True)
class PartitionLag:
    topic: str
    partition: int
    lag: int | None
    position: int | None  # the flow's progress: the next source offset to replicate
    end: int | None  # the source partition's end offset

    def to_xcom(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_xcom(cls, data: Mapping[str, Any]) -> PartitionLag:
        return cls(data["topic"], data["partition"], data["lag"], data.get("position"), data.get("end"))


@dataclass(frozen=True)
class DataLag:
    """A flow's data lag (heartbeats excluded): ``total`` is None when any partition's lag is unknown."""

    total: int | None
    unknown: tuple[str, ...] = ()  # "topic[partition]" without watermarks
    partitions: tuple[PartitionLag, ...] = ()

    def to_xcom(self) -> dict[str, Any]:
        return {"total": self.total, "unknown": list(self.unknown),
                "partitions": [p.to_xcom() for p in self.partitions]}

    @classmethod
    def from_xcom(cls, data: Mapping[str, Any]) -> DataLag:
        return cls(data["total"], tuple(data.get("unknown", ())),
                   tuple(PartitionLag.from_xcom(p) for p in data.get("partitions", ())))


@dataclass(frozen=True)
class GroupOffset:
    """One partition of a consumer group moved between clusters: its offset there and where it resumes."""

    group: str
    topic: str
    partition: int
    remote_topic: str
    source_offset: int
    target_offset: int | None
    exact: bool
    note: str = ""
    basis: str = "offset-map"  # offset-map: the group's own committed offset | checkpoint | time-index
    checkpoint_age_s: float | None = None  # basis checkpoint: its age when the plan was made
    max_rereads: int | None = None  # basis checkpoint: the most records the group may read a second time

    @classmethod
    def of(cls, t: Translation) -> GroupOffset:
        return cls(t.group, t.topic, t.partition, t.remote_topic, t.source_offset, t.target_offset, t.exact, t.note,
                   t.basis, t.checkpoint_age_s, t.max_rereads)

    def to_xcom(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_xcom(cls, data: Mapping[str, Any]) -> GroupOffset:
        return cls(**{f.name: data[f.name] for f in fields(cls) if f.name in data})


Groups = Mapping[str, tuple[GroupOffset, ...]]


def group_offsets(translations: Mapping[str, Iterable[Translation]]) -> dict[str, tuple[GroupOffset, ...]]:
    return {g: tuple(GroupOffset.of(t) for t in rows) for g, rows in translations.items()}


def _groups_to_xcom(groups: Groups) -> dict[str, list[dict[str, Any]]]:
    return {g: [r.to_xcom() for r in rows] for g, rows in groups.items()}


def _groups_from_xcom(data: Mapping[str, Any]) -> dict[str, tuple[GroupOffset, ...]]:
    return {g: tuple(GroupOffset.from_xcom(r) for r in rows) for g, rows in data.items()}


@dataclass(frozen=True)
class RegistryMove:
    """An application alias in the active-cluster registry: where it points now (None: not registered yet)
    and where the workflow points it."""

    current: str | None
    to: str

    def to_xcom(self) -> dict[str, Any]:
        return {"from": self.current, "to": self.to}

    @classmethod
    def from_xcom(cls, data: Mapping[str, Any]) -> RegistryMove:
        return cls(data["from"], data["to"])


Apps = Mapping[str, RegistryMove]


def _apps_to_xcom(apps: Apps) -> dict[str, dict[str, Any]]:
    return {a: m.to_xcom() for a, m in apps.items()}


def _apps_from_xcom(data: Mapping[str, Any]) -> dict[str, RegistryMove]:
    return {a: RegistryMove.from_xcom(m) for a, m in data.items()}


# -- failover ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class FailoverPlan:
    """What a failover of ``flow`` (primary -> standby) will do and cost, computed without changing anything."""

    kind: ClassVar[str] = "failover"
    flow: str
    primary: str
    standby: str
    planned: bool
    primary_reachable: bool
    primary_note: str
    lag: DataLag
    rpo_records: int | None  # records on the primary not on the standby; None: unknown
    rpo_note: str
    groups: Groups
    apps: Apps
    reverse_flow: str | None
    warnings: tuple[str, ...] = ()
    failed_over: tuple[str, ...] = ()  # why the standby is active already (empty: it is not)
    topics: tuple[str, ...] = ()  # the source topics that switch (empty: the whole flow)
    staying: tuple[str, ...] = ()  # with topics: the flow's other topics, still mirrored
    record_id: int | None = None  # the state-store record, once made

    @property
    def destination(self) -> str:
        """The cluster the groups and applications move to."""
        return self.standby

    @property
    def already_failed_over(self) -> bool:
        return bool(self.failed_over)

    def with_record(self, record_id: int) -> FailoverPlan:
        return replace(self, record_id=record_id)

    def record(self) -> dict[str, Any]:
        """The plan as the state store keeps it."""
        return {"kind": self.kind, "flow": self.flow, "primary": self.primary, "standby": self.standby,
                "planned": self.planned, "primary_reachable": self.primary_reachable,
                "primary_note": self.primary_note, "lag": self.lag.to_xcom(), "rpo_records": self.rpo_records,
                "rpo_note": self.rpo_note, "groups": _groups_to_xcom(self.groups), "apps": _apps_to_xcom(self.apps),
                "reverse_flow": self.reverse_flow, "warnings": list(self.warnings),
                "failed_over": list(self.failed_over), "topics": list(self.topics), "staying": list(self.staying)}

    def render(self) -> str:
        return _failover_plan_text(self)

    def to_xcom(self) -> dict[str, Any]:
        return {**self.record(), "record_id": self.record_id, "body": self.render()}

    @classmethod
    def from_xcom(cls, data: Mapping[str, Any]) -> FailoverPlan:
        return cls(data["flow"], data["primary"], data["standby"], data["planned"], data["primary_reachable"],
                   data["primary_note"], DataLag.from_xcom(data["lag"]), data["rpo_records"], data["rpo_note"],
                   _groups_from_xcom(data["groups"]), _apps_from_xcom(data["apps"]), data["reverse_flow"],
                   tuple(data.get("warnings", ())), tuple(data.get("failed_over", ())),
                   tuple(data.get("topics", ())), tuple(data.get("staying", ())), data.get("record_id"))


# -- failback ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SampleRecord:
    offset: int
    timestamp: int
    key: str | None

    @classmethod
    def from_xcom(cls, data: Mapping[str, Any]) -> SampleRecord:
        return cls(data["offset"], data["timestamp"], data["key"])


@dataclass(frozen=True)
class StrandedRange:
    """Records only the old primary holds in one partition: source offsets ``[first, end)``, with a sample."""

    topic: str
    partition: int
    first: int
    end: int
    records: tuple[SampleRecord, ...] = ()

    @property
    def count(self) -> int:
        return self.end - self.first

    def ending_at(self, end: int) -> StrandedRange:
        """The range cut at ``end`` (never before ``first``), its sample with it."""
        end = max(self.first, min(self.end, end))
        return replace(self, end=end, records=tuple(r for r in self.records if r.offset < end))

    def to_xcom(self) -> dict[str, Any]:
        return {"topic": self.topic, "partition": self.partition, "first": self.first, "end": self.end,
                "records": [asdict(r) for r in self.records], "count": self.count}

    @classmethod
    def from_xcom(cls, data: Mapping[str, Any]) -> StrandedRange:
        return cls(data["topic"], data["partition"], data["first"], data["end"],
                   tuple(SampleRecord.from_xcom(r) for r in data.get("records", ())))


@dataclass(frozen=True)
class FailbackPlan:
    """What a failback of ``flow`` (back to its old primary) will do, computed without changing anything."""

    kind: ClassVar[str] = "failback"
    flow: str
    reverse_flow: str
    primary: str
    standby: str
    reverse_lag: int | None
    unreplicated: tuple[StrandedRange, ...]
    groups: Groups
    apps: Apps
    warnings: tuple[str, ...] = ()
    topics: tuple[str, ...] = ()  # the source topics that come back (empty: the whole flow)
    record_id: int | None = None

    @property
    def unreplicated_total(self) -> int:
        return sum(r.count for r in self.unreplicated)

    @property
    def destination(self) -> str:
        return self.primary

    def with_record(self, record_id: int) -> FailbackPlan:
        return replace(self, record_id=record_id)

    def record(self) -> dict[str, Any]:
        return {"kind": self.kind, "flow": self.flow, "reverse_flow": self.reverse_flow, "primary": self.primary,
                "standby": self.standby, "reverse_lag": self.reverse_lag,
                "unreplicated": [r.to_xcom() for r in self.unreplicated],
                "unreplicated_total": self.unreplicated_total, "groups": _groups_to_xcom(self.groups),
                "apps": _apps_to_xcom(self.apps), "warnings": list(self.warnings), "topics": list(self.topics)}

    def render(self) -> str:
        return _failback_plan_text(self)

    def to_xcom(self) -> dict[str, Any]:
        return {**self.record(), "record_id": self.record_id, "body": self.render()}

    @classmethod
    def from_xcom(cls, data: Mapping[str, Any]) -> FailbackPlan:
        return cls(data["flow"], data["reverse_flow"], data["primary"], data["standby"], data["reverse_lag"],
                   tuple(StrandedRange.from_xcom(r) for r in data["unreplicated"]), _groups_from_xcom(data["groups"]),
                   _apps_from_xcom(data["apps"]), tuple(data.get("warnings", ())), tuple(data.get("topics", ())),
                   data.get("record_id"))


@dataclass(frozen=True)
class Execution:
    """Who approved a failover/failback and what its execution did (step name -> what the step returned)."""

    who: str
    steps: Mapping[str, Any]

    def to_xcom(self) -> dict[str, Any]:
        return {"who": self.who, "steps": dict(self.steps)}

    @classmethod
    def from_xcom(cls, data: Mapping[str, Any]) -> Execution:
        return cls(data["who"], data["steps"])


# -- cutover -------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CutoverPlan:
    """What a cloud-migration cutover of ``topics`` (source -> target) will move, checked by the preflight."""

    kind: ClassVar[str] = "cutover"
    flow: str
    source: str
    target: str
    topics: tuple[str, ...]
    remote_topics: Mapping[str, str]
    lag: DataLag
    groups: Groups
    apps: Apps
    warnings: tuple[str, ...] = ()
    deny_writes: bool = False  # DENY WRITE ACLs on the source topics once approved
    record_id: int | None = None

    def with_record(self, record_id: int) -> CutoverPlan:
        return replace(self, record_id=record_id)

    def record(self) -> dict[str, Any]:
        return {"kind": self.kind, "flow": self.flow, "source": self.source, "target": self.target,
                "topics": list(self.topics), "remote_topics": dict(self.remote_topics), "lag": self.lag.to_xcom(),
                "groups": _groups_to_xcom(self.groups), "apps": _apps_to_xcom(self.apps),
                "warnings": list(self.warnings), "deny_writes": self.deny_writes}

    def render(self) -> str:
        return _cutover_plan_text(self)

    def to_xcom(self) -> dict[str, Any]:
        return {**self.record(), "record_id": self.record_id, "body": self.render()}

    @classmethod
    def from_xcom(cls, data: Mapping[str, Any]) -> CutoverPlan:
        return cls(data["flow"], data["source"], data["target"], tuple(data["topics"]), dict(data["remote_topics"]),
                   DataLag.from_xcom(data["lag"]), _groups_from_xcom(data["groups"]), _apps_from_xcom(data["apps"]),
                   tuple(data.get("warnings", ())), bool(data.get("deny_writes", False)), data.get("record_id"))


# -- DR drill ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class DrillOutcome:
    """What a finished drill measured, and the objectives it missed (the full report is in the state store)."""

    status: str  # passed | failed
    missed: tuple[str, ...]
    rpo_records: int | None
    rto_seconds: float | None
    duplicates: int | None
    losses: int | None

    def to_xcom(self) -> dict[str, Any]:
        return {"status": self.status, "missed": list(self.missed), "rpo_records": self.rpo_records,
                "rto_seconds": self.rto_seconds, "duplicates": self.duplicates, "losses": self.losses}

    @classmethod
    def from_xcom(cls, data: Mapping[str, Any]) -> DrillOutcome:
        return cls(data["status"], tuple(data["missed"]), data["rpo_records"], data["rto_seconds"],
                   data["duplicates"], data["losses"])


# Markdown for the approval gates: what the approver sees is what the plan will do and what it costs.

def _failover_plan_text(plan: FailoverPlan) -> str:
    rpo = plan.rpo_records if plan.rpo_records is not None else "unknown"
    lines = [f"### Failover of flow `{plan.flow}` ({'planned' if plan.planned else 'unplanned'})", "",
             f"- primary **{plan.primary}**: {'reachable' if plan.primary_reachable else 'UNREACHABLE'}"
             f" ({plan.primary_note})"]
    if plan.already_failed_over:
        # The forward flow is stopped: its lag and RPO say nothing about data at risk any more.
        lines += [f"- **ALREADY FAILED OVER**: standby **{plan.standby}** is active now — "
                  + "; ".join(plan.failed_over),
                  "- approving again re-commits the groups' offsets and re-points the applications listed; "
                  "to return to the primary, run the failback DAG"]
    else:
        lines += [f"- standby **{plan.standby}** becomes active",
                  f"- replication lag now: {plan.lag.total if plan.lag.total is not None else 'unknown'}",
                  f"- estimated data at risk (RPO): **{rpo} records** — {plan.rpo_note}"]
    lines.append(f"- reverse flow started after the switch: {plan.reverse_flow or 'none configured'}")
    if plan.topics:
        lines += _split(plan)
    return "\n".join(lines + _moves(plan.apps, plan.groups, plan.warnings))


def _split(plan: FailoverPlan) -> list[str]:
    """A failover of some topics: what switches to the standby and what the forward flow keeps copying."""
    return ["", f"**Only some topics switch** — the forward flow `{plan.flow}` keeps running; the switched topics "
                "are paused in it (by this failover run) and their read-only guard is lifted on the standby",
            f"- switching to **{plan.standby}**: topics {', '.join(f'`{t}`' for t in plan.topics)}; groups "
            f"{', '.join(plan.groups) or 'none'}; applications {', '.join(plan.apps) or 'none'}",
            f"- staying on **{plan.primary}**, still mirrored: topics "
            f"{', '.join(f'`{t}`' for t in plan.staying) or 'none'}"]


def _failback_plan_text(plan: FailbackPlan) -> str:
    lines = [f"### Failback of flow `{plan.flow}`", "",
             f"- old primary **{plan.primary}** becomes active again; reverse flow `{plan.reverse_flow}` "
             f"lag now: {plan.reverse_lag}",
             f"- records only the old primary holds (never replicated before the failure): "
             f"**{plan.unreplicated_total}**"]
    if plan.topics:
        lines.insert(2, f"- only the topics {', '.join(f'`{t}`' for t in plan.topics)} come back: their failover's "
                        f"pauses in `{plan.flow}` are lifted; the reverse flow stops unless other topics are still "
                        "switched")
    for r in plan.unreplicated[:20]:
        lines.append(f"  - `{r.topic}[{r.partition}]` offsets {r.first}..{r.end - 1} ({r.count})")
    return "\n".join(lines + _moves(plan.apps, plan.groups, plan.warnings))


def _moves(apps: Apps, groups: Groups, warnings: tuple[str, ...]) -> list[str]:
    lines = ["", *_apps_table(apps)]
    lines += ["", "| group | topic | partition | from offset | to offset | basis |", "|---|---|---|---|---|---|"]
    for g, rows in groups.items():
        lines += [f"| {g} | {r.topic} → {r.remote_topic} | {r.partition} | {r.source_offset} | "
                  f"{r.target_offset} | {_basis(r)} |" for r in rows]
    rereads = [r.max_rereads for rows in groups.values() for r in rows if r.basis == "checkpoint"]
    if rereads:
        known = sum(x for x in rereads if x is not None)
        unknown = sum(1 for x in rereads if x is None)
        bound = (f"at most **{known} records** in all" if not unknown else
                 f"**{known} records** or more in all ({unknown} partition(s) with an unknown bound)")
        lines += ["", f"Checkpoint-based offsets: a group that committed on the primary after its last checkpoint "
                      f"reads again {bound} (the records the standby holds past the checkpoints); none is skipped."]
    return lines + _warnings(warnings) + ["", "Rejecting changes nothing."]


def _basis(r: GroupOffset) -> str:
    """Why the approver can trust a target offset, and by how much it may be behind."""
    if not r.exact or r.target_offset is None:
        return f"NOT exact ({r.basis}): {r.note}"
    if r.basis == "checkpoint":
        age = f"{r.checkpoint_age_s:g} s old" if r.checkpoint_age_s is not None else "age unknown"
        rereads = r.max_rereads if r.max_rereads is not None else "unknown"
        return f"checkpoint ({age}): at most {rereads} records re-read"
    return f"exact: the group's committed offset, through the {r.basis.replace('-', ' ')}"


def _cutover_plan_text(plan: CutoverPlan) -> str:
    lines = [f"### Cloud-migration cutover {plan.source} → {plan.target}", "",
             f"- topics: {', '.join(f'`{t}` → `{r}`' for t, r in plan.remote_topics.items())}",
             f"- replication lag now: {plan.lag.total} records",
             "- next: producers on the source must stop (you confirm it at the next gate); the flow then drains "
             "to lag 0 and stops; completeness is checked; consumer groups get exact offsets on the target",
             "", *_apps_table(plan.apps)]
    lines += ["", "| group | topic | partition | source offset | target offset (now) |", "|---|---|---|---|---|"]
    for g, rows in plan.groups.items():
        lines += [f"| {g} | {r.topic} | {r.partition} | {r.source_offset} | {r.target_offset} |" for r in rows]
    lines += _warnings(plan.warnings)
    lines += ["", "Reject changes nothing."]
    return "\n".join(lines)


def _apps_table(apps: Apps) -> list[str]:
    return ["| application | from | to |", "|---|---|---|",
            *[f"| {a} | {m.current or '(unregistered)'} | {m.to} |" for a, m in apps.items()]]


def _warnings(warnings: tuple[str, ...] | list[str]) -> list[str]:
    return ["", "**Warnings**", *[f"- {w}" for w in warnings]] if warnings else []
