"""DR drill planning: the drill's Params checked against the mirror config, and its objectives.

What a drill is and how it runs: :mod:`mirror_core.workflows.drill`.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from typing import Any

from mirror_core.config.model import MirrorConfig
from mirror_core.workflows.drill_config import DrillNames
from mirror_core.workflows.errors import ParamError
from mirror_core.workflows.params import DrillParams, validate_params


@dataclass(frozen=True)
class Objectives:
    max_rpo_records: int
    max_rto_seconds: float
    max_duplicates: int
    max_losses: int

    def missed(self, rpo: int, rto: float | None, duplicates: int, losses: int) -> list[str]:
        out = []
        if rpo > self.max_rpo_records:
            out.append(f"max_rpo_records: RPO {rpo} records > {self.max_rpo_records}")
        if rto is None or rto > self.max_rto_seconds:
            out.append(f"max_rto_seconds: RTO {'unmeasured' if rto is None else f'{rto:.2f}s'} "
                       f"> {self.max_rto_seconds}s")
        if duplicates > self.max_duplicates:
            out.append(f"max_duplicates: {duplicates} duplicates > {self.max_duplicates}")
        if losses > self.max_losses:
            out.append(f"max_losses: {losses} losses > {self.max_losses}")
        return out


@dataclass(frozen=True)
class DrillPlan:
    flow: str
    records: int
    consume_before_failure: int
    unreplicated_at_failure: int  # -1: natural lag
    failure_at: int  # F: records produced when the primary is lost
    seed: int
    partitions: int
    rate: float
    objectives: Objectives
    cleanup: bool = True
    timeout_s: float = 120.0
    mode: str = "canary"  # canary: the drill's own topic and mirror | failover: the production flow's workflow
    app: str = ""  # failover mode: the drill application's alias, topics (source names) and consumer groups
    topics: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()
    drain_timeout_s: int = 300

    def to_xcom(self) -> dict[str, Any]:
        """The plan as XCom and the drill report carry it (``timeout_s`` is not part of it)."""
        return {"flow": self.flow, "records": self.records, "consume_before_failure": self.consume_before_failure,
                "unreplicated_at_failure": self.unreplicated_at_failure, "failure_at": self.failure_at,
                "seed": self.seed, "partitions": self.partitions, "rate": self.rate, "cleanup": self.cleanup,
                "objectives": asdict(self.objectives), "mode": self.mode, "app": self.app,
                "topics": list(self.topics), "groups": list(self.groups), "drain_timeout_s": self.drain_timeout_s}

    @classmethod
    def from_xcom(cls, data: Mapping[str, Any]) -> DrillPlan:
        return cls(data["flow"], data["records"], data["consume_before_failure"], data["unreplicated_at_failure"],
                   data["failure_at"], data["seed"], data["partitions"], data["rate"],
                   Objectives(**data["objectives"]), data["cleanup"], mode=data.get("mode", "canary"),
                   app=data.get("app", ""), topics=tuple(data.get("topics", ())), groups=tuple(data.get("groups", ())),
                   drain_timeout_s=data.get("drain_timeout_s", 300))


def plan_drill(config: MirrorConfig, params: Mapping[str, Any]) -> DrillPlan:
    """Validate the Params against the config (no cluster is contacted); errors name the Param."""
    p = validate_params(DrillParams, params, config)
    seed = random.SystemRandom().randrange(2**31) if p.seed is None else p.seed
    failure_at = random.Random(seed).randint(p.consume_before_failure + max(p.unreplicated_at_failure, 1), p.records)
    f = config.flow(p.flow)
    objectives = Objectives(p.max_rpo_records, p.max_rto_seconds, p.max_duplicates, p.max_losses)
    if p.mode == "failover":
        # the drill application's topics must be ones the production flow mirrors: its failover moves them
        unmirrored = [t for t in p.topics if not f.should_replicate(t)]
        if unmirrored:
            raise ParamError(f"Param 'topics': flow {f.name} does not mirror {', '.join(unmirrored)} (its topic "
                             "filters); a failover drill needs topics the production flow replicates")
        return DrillPlan(p.flow, p.records, p.consume_before_failure, -1, p.records, seed, 1, p.rate, objectives,
                         False, mode="failover", app=p.app, topics=p.topics, groups=p.groups,
                         drain_timeout_s=p.drain_timeout_s)
    names = DrillNames("x", f.source, f.target)
    # The drill topic on the primary, and its remote copy on the standby (which a reverse flow, running
    # or started by a failover, would copy back): no production flow, standby ones included, may take them.
    drill_topics = {f.source: names.topic, f.target: f.policy.format_remote_topic(names.alias, names.topic)}
    for other in config.all_flows:
        topic = drill_topics.get(other.source)
        if topic is not None and other.should_replicate(topic):
            raise ParamError(f"Param 'flow': production flow {other.name} would also mirror the drill's topic "
                             f"{topic}; add '.*mirror-core\\\\.drill\\\\..*' to {other.name}.topics.exclude")
    if names.alias in config.clusters:
        raise ParamError(f"Param 'flow': the drill needs the cluster alias 'drill-{f.source}', which the "
                         "mirror config already uses")
    return DrillPlan(p.flow, p.records, p.consume_before_failure, p.unreplicated_at_failure, failure_at, seed,
                     p.partitions, p.rate, objectives, p.cleanup)


#: A scheduled drill that starts this long after its scheduled time is a catch-up, not a drill anyone planned.
CATCH_UP_GRACE = timedelta(hours=1)


def catch_up_reason(run_type: str, scheduled_for: datetime | None, now: datetime) -> str | None:
    """Why a run must not drill, or None. Airflow's cron timetables with ``catchup=False`` still start the
    most recent past slot when a DAG is unpaused (``run_immediately`` is ignored once a start date is
    set): for a quarterly drill that is a real failover weeks after its date. Manual runs always drill."""
    if run_type != "scheduled" or scheduled_for is None or now - scheduled_for <= CATCH_UP_GRACE:
        return None
    return (f"catch-up run skipped: scheduled for {scheduled_for.isoformat()}, started {now.isoformat()} "
            f"(more than {CATCH_UP_GRACE} late, e.g. the DAG was unpaused); trigger the DAG to drill now")
