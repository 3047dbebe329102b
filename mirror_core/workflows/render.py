"""Markdown for the approval gates: what the approver sees is what the plan will do and what it costs."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mirror_core.workflows.plans import Apps, CutoverPlan, FailbackPlan, FailoverPlan, GroupOffset, Groups


def failover_plan(plan: FailoverPlan) -> str:
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


def failback_plan(plan: FailbackPlan) -> str:
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


def cutover_plan(plan: CutoverPlan) -> str:
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

