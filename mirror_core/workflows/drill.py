"""DR drill: fail a canary consumer group over to the standby for real, measure, then fail back.

Safe against production: the drill produces to its own topic (``mirror-core.drill.<run>``), through
its own mirror process whose every piece of state is separate (see ``drill_config``), and its canary
group never touches an application group. The timeline, with ``C`` = ``consume_before_failure``,
``F`` = the failure point (records produced when the primary is "lost", chosen at random in
``[C + max(M, 1), records]`` from ``seed``) and ``M`` = ``unreplicated_at_failure``:

1. the drill mirror (``python -m mirror_core run``) starts; records ``0..C-1`` are produced on the
   primary and the canary consumes exactly those and commits; the drill waits (bounded) until the
   mirror has published the canary's checkpoint;
2. records ``C..F-1`` are produced at ``rate`` records/s. With ``M >= 0`` the drill first lets the
   mirror replicate everything up to ``F-M``, freezes it (SIGSTOP) and produces the last ``M``
   records, so exactly ``M`` are not on the standby; with ``M = -1`` nothing is frozen: whatever the
   mirror has not copied at that moment is the natural replication lag;
3. **failure**: the producer has flushed (the primary acknowledged ``F`` records) and the drill
   mirror is SIGKILLed — for the drill flow the primary is gone;
4. **failover**: translate the canary group's offsets from the checkpoints on the standby only (the
   primary is not asked), commit them to the canary group on the standby, resume the canary there
   and read to the end;
5. **failback**: a new drill mirror resumes from its progress on the standby and copies what was
   missing; the canary group is moved back to the primary at the position equivalent to what it
   consumed on the standby and reads the rest there; then the drill's topics and groups are deleted.

Measured (every record carries its sequence number):

* ``rpo_records``: sequence numbers in ``0..F-1`` (acknowledged by the primary before the failure)
  that the standby does not hold right after the failure;
* ``rto_seconds``: from the SIGKILL to the canary's first record on the standby (translation and
  commit included); if nothing is left for it to read, until it is positioned at the end;
* ``duplicates``: records the canary processed more than once (primary and standby together);
* ``losses``: sequence numbers in ``0..F-1`` the canary never processed, on either cluster, by the
  end of the failover (before failback recovers them).

The plan (Params checked against the config, objectives) is :mod:`.drill_plan`; the generated drill
config :mod:`.drill_config`; the drill mirror process :mod:`.drill_mirror`; the canary's records and
positions :mod:`.drill_canary`. This module runs the drill and measures it.
"""

from __future__ import annotations

import logging
import random
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from mirror_core.clients import make_admin, make_consumer
from mirror_core.config.loader import load_config
from mirror_core.config.model import MirrorConfig
from mirror_core.kafka_io import QUIET
from mirror_core.offsets.checkpoints import CheckpointReader, checkpoints_topic
from mirror_core.offsets.groups import committed_offsets
from mirror_core.offsets.translate import apply_translation, translate_from_checkpoints
from mirror_core.stores.map_snapshots import snapshot_topic
from mirror_core.stores.offset_syncs import offset_syncs_topic
from mirror_core.workflows.drill_canary import Canary, commit_positions, end_offsets, next_offsets, read_canary
from mirror_core.workflows.drill_config import DrillNames, write_drill_properties
from mirror_core.workflows.drill_mirror import DrillMirror, wait_replicated, wait_until
from mirror_core.workflows.drill_plan import DrillPlan

log = logging.getLogger(__name__)


@dataclass
class DrillResult:
    plan: DrillPlan
    names: DrillNames
    started_at: datetime
    report: dict[str, Any] = field(default_factory=dict)
    rpo_records: int | None = None
    rto_seconds: float | None = None
    duplicates: int | None = None
    losses: int | None = None
    missed: list[str] = field(default_factory=list)
    error: str | None = None

    @property
    def status(self) -> str:
        return "error" if self.error else "failed" if self.missed else "passed"


def run_drill(config: MirrorConfig, properties_path: str | Path, plan: DrillPlan,
              work_dir: Path | None = None) -> DrillResult:
    """Run the whole drill; never raises for a drill that went wrong (``result.error`` says why)."""
    flow = config.flow(plan.flow)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S") + f"-{random.getrandbits(16):04x}"
    names = DrillNames(stamp, flow.source, flow.target)
    result = DrillResult(plan, names, datetime.now(UTC))
    work = work_dir or Path(tempfile.mkdtemp(prefix="dr-drill-"))
    mirrors: list[DrillMirror] = []
    report = result.report
    report.update({"mode": "canary", "plan": plan.to_xcom(), "topic": names.topic, "canary_group": names.canary_group,
                   "drill_flow": names.flow, "work_dir": str(work)})
    try:
        _drill(config, properties_path, plan, names, work, mirrors, result)
    except Exception as exc:  # the drill is recorded whatever happened
        log.exception("DR drill %s failed", stamp)
        result.error = f"{type(exc).__name__}: {exc}"
        report["error"] = result.error
        if mirrors:
            report["mirror_log_tail"] = mirrors[-1].log_tail()
    finally:
        for m in mirrors:
            m.stop()
        if plan.cleanup:
            report["cleanup"] = _cleanup(config, names, flow.policy.format_remote_topic(names.alias, names.topic),
                                         work)
    if result.error is None and result.rpo_records is not None:
        result.missed = plan.objectives.missed(result.rpo_records, result.rto_seconds, result.duplicates or 0,
                                               result.losses or 0)
        if not report.get("failback", {}).get("complete", False):
            result.missed.append("failback: the canary did not end with every record exactly once")
    report["missed_objectives"] = result.missed
    report["status"] = result.status
    return result


def _drill(config: MirrorConfig, properties_path: str | Path, plan: DrillPlan, names: DrillNames, work: Path,
           mirrors: list[DrillMirror], result: DrillResult) -> None:
    report = result.report
    flow = config.flow(plan.flow)
    src, tgt = config.cluster(flow.source), config.cluster(flow.target)
    drill_config = load_config(write_drill_properties(config, properties_path, names, "failover", work))
    drill_flow = drill_config.flow(names.flow)
    remote = drill_flow.remote_topic(names.topic)
    report["remote_topic"] = remote
    consume_n, unrep, fail_at = plan.consume_before_failure, plan.unreplicated_at_failure, plan.failure_at
    deadline = plan.timeout_s

    src_admin = make_admin(src)
    src_admin.create_topics([NewTopic(names.topic, plan.partitions, -1)])[names.topic].result(30)
    mirror = DrillMirror(work / "drill-failover.properties", work / "drill-mirror.log").start()
    mirrors.append(mirror)
    canary = Canary(src, names.topic, plan.partitions, names.stamp)
    src_reader = make_consumer(src, names.canary_group, QUIET)
    tgt_reader = make_consumer(tgt, f"{names.canary_group}.reader", QUIET)
    try:
        # 1. canary consumes C records on the primary and commits; wait for its checkpoint on the standby
        canary.produce(consume_n)
        canary.flush()
        consumed_primary = read_canary(src_reader, names.topic, {},
                                       end_offsets(src_reader, names.topic, plan.partitions), deadline,
                                       limit=consume_n)
        committed = next_offsets(consumed_primary)
        commit_positions(src_admin, names.canary_group, {(names.topic, p): o for p, o in committed.items()})
        want = {(names.canary_group, remote, p): o for p, o in committed.items()}
        reader = CheckpointReader(make_consumer(tgt, f"{names.canary_group}.checkpoints", QUIET),
                                  checkpoints_topic(drill_flow.source))
        try:
            def checkpointed() -> bool:
                mirror.ensure_running()
                try:
                    latest = reader.refresh(5)
                except Exception:  # the topic may not exist yet
                    return False
                return all(latest.get(k, (-1, -1))[0] >= o for k, o in want.items())

            report["checkpoint_published_after_s"] = round(
                wait_until(checkpointed, deadline, "the canary's checkpoint"), 3)
        finally:
            reader.close()

        # 2. produce up to the failure point
        if unrep >= 0:
            canary.produce(fail_at - unrep - consume_n, plan.rate)
            canary.flush()
            wait_replicated(drill_config, names, mirror, end_offsets(src_reader, names.topic, plan.partitions),
                            deadline)
            mirror.freeze()
            canary.produce(unrep, plan.rate)
        else:
            canary.produce(fail_at - consume_n, plan.rate)
        # 3. failure: the primary acknowledged F records; the drill flow loses its primary now
        canary.flush()
        primary_ends = end_offsets(src_reader, names.topic, plan.partitions)
        mirror.kill()
        failed_at = time.monotonic()
        report["failure"] = {"at": datetime.now(UTC).isoformat(), "records_produced": fail_at,
                             "primary_end_offsets": primary_ends,
                             "mode": "frozen mirror" if unrep >= 0 else "natural lag"}

        # 4. failover: translate from the standby's checkpoints only, commit, resume the canary there
        translations = translate_from_checkpoints(drill_config, drill_flow, names.canary_group, names.topic, 30)
        applied = apply_translation(drill_config, flow.target, translations)
        standby_ends = end_offsets(tgt_reader, remote, plan.partitions)
        canary_tgt = make_consumer(tgt, names.canary_group, QUIET)
        try:
            resume = committed_offsets(make_admin(tgt), names.canary_group)
            starts = {p: resume.get((remote, p), 0) for p in range(plan.partitions)}
            first_at: list[float] = []
            consumed_standby = read_canary(canary_tgt, remote, starts, standby_ends, deadline, first_at=first_at)
        finally:
            canary_tgt.close()
        rto = first_at[0] - failed_at
        standby_all = read_canary(tgt_reader, remote, {}, standby_ends, deadline)

        produced = set(range(fail_at))
        on_standby = {s for _, _, s in standby_all}
        seen = Counter([s for _, _, s in consumed_primary] + [s for _, _, s in consumed_standby])
        result.rpo_records = len(produced - on_standby)
        result.rto_seconds = round(rto, 3)
        result.duplicates = sum(n - 1 for n in seen.values() if n > 1)
        result.losses = len(produced - set(seen))
        report.update({
            "rpo_records": result.rpo_records, "rto_seconds": result.rto_seconds,
            "rto_basis": "first record on the standby" if consumed_standby else "at the end (nothing to read)",
            "duplicates": result.duplicates, "losses": result.losses,
            "rpo_by_offsets": sum(primary_ends.values()) - sum(standby_ends.values()),
            "consumed_on_primary": len(consumed_primary), "consumed_on_standby": len(consumed_standby),
            "standby_end_offsets": standby_ends,
            "translation": [t.as_dict() for t in translations], "committed_on_standby": applied,
        })
        commit_positions(make_admin(tgt), names.canary_group,
                         {(remote, p): o for p, o in next_offsets(consumed_standby).items()})

        # 5. failback: a new drill mirror copies what the standby missed; the canary returns to the primary
        report["failback"] = _failback(config, properties_path, plan, names, work, mirrors, canary,
                                       consumed_primary + consumed_standby, primary_ends)
    finally:
        src_reader.close()
        tgt_reader.close()


def _failback(config: MirrorConfig, properties_path: str | Path, plan: DrillPlan, names: DrillNames, work: Path,
              mirrors: list[DrillMirror], canary: Canary, consumed: list[tuple[int, int, int]],
              primary_ends: dict[int, int]) -> dict[str, Any]:
    """Make the standby whole again (a new drill mirror resumes from its progress) and move the canary
    back to the primary, just after the last record it processed in each partition; it reads the rest."""
    flow = config.flow(plan.flow)
    src = config.cluster(flow.source)
    produced = sum(primary_ends.values())
    drill_config = load_config(write_drill_properties(config, properties_path, names, "failback", work))
    mirror = DrillMirror(work / "drill-failback.properties", work / "drill-mirror-failback.log").start()
    mirrors.append(mirror)
    caught_up_s = wait_replicated(drill_config, names, mirror, primary_ends, plan.timeout_s)
    mirror.stop()
    canary_src = make_consumer(src, names.canary_group, QUIET)
    admin = make_admin(src)
    try:
        seqs = [s for _, _, s in consumed]
        back = canary.primary_offsets_after(seqs)
        commit_positions(admin, names.canary_group, {(names.topic, p): o for p, o in back.items()})
        rest = read_canary(canary_src, names.topic, back, primary_ends, plan.timeout_s)
        commit_positions(admin, names.canary_group, {(names.topic, p): o for p, o in next_offsets(rest).items()})
    finally:
        canary_src.close()
    seen = Counter(seqs + [s for _, _, s in rest])
    complete = set(seen) == set(range(produced)) and all(n == 1 for n in seen.values())
    return {"standby_caught_up_after_s": round(caught_up_s, 3), "canary_position_on_primary": back,
            "read_on_primary_after_failback": len(rest), "complete": complete,
            "duplicates_overall": sum(n - 1 for n in seen.values() if n > 1),
            "never_seen": len(set(range(produced)) - set(seen))}


def _cleanup(config: MirrorConfig, names: DrillNames, remote: str, work: Path) -> dict[str, Any]:
    """Delete what the drill created (and its config files, which hold secrets): its topic and groups on
    the primary; on the standby the remote topic, the canary group and the drill alias's progress,
    offset-sync, offset-map snapshot and checkpoint topics. A topic is reported "deleted" only once a
    listing no longer has it (deletion is asynchronous), never on the strength of the request alone."""
    flow = config.flow(f"{names.source}->{names.target}")
    internal = [f"mirror-core.progress.{names.alias}.internal", offset_syncs_topic(names.alias),
                snapshot_topic(names.alias), checkpoints_topic(names.alias)]
    done: dict[str, Any] = {}
    jobs: list[tuple[str, AdminClient, list[str], list[str]]] = [
        (flow.source, make_admin(config.cluster(flow.source)), [names.topic],
         [names.canary_group, names.worker_group("failover"), names.worker_group("failback")]),
        (flow.target, make_admin(config.cluster(flow.target)), [remote, *internal], [names.canary_group]),
    ]
    for alias, admin, topics, groups in jobs:
        try:
            present = [t for t in topics if t in admin.list_topics(timeout=15).topics]
            if present:
                futures = admin.delete_topics(present, operation_timeout=30)
                for topic in present:
                    try:
                        futures[topic].result(30)
                    except KafkaException as exc:
                        done[f"{alias}:{topic}"] = f"not deleted: {exc}"
            left = _wait_gone(admin, present, 30)
            for topic in topics:
                done.setdefault(f"{alias}:{topic}", "not deleted: still listed" if topic in left
                                else "deleted" if topic in present else "absent")
        except KafkaException as exc:
            for topic in topics:
                done.setdefault(f"{alias}:{topic}", f"not deleted: {exc}")
        for group in groups:
            done[f"{alias}:group {group}"] = _delete_group(admin, group)
    for f in work.glob("drill-*.properties"):
        f.unlink(missing_ok=True)
    return done


def _wait_gone(admin: AdminClient, topics: list[str], timeout: float) -> set[str]:
    """The topics of ``topics`` still listed after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        left = set(topics) & set(admin.list_topics(timeout=15).topics)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.5)


def _delete_group(admin: AdminClient, group: str, timeout: float = 15) -> str:
    """Delete a group; the killed mirror's member stays until its session expires (a few seconds)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            admin.delete_consumer_groups([group], request_timeout=15)[group].result(15)
            return "deleted"
        except KafkaException as exc:
            if "GROUP_ID_NOT_FOUND" in str(exc):
                return "absent"
            if "NON_EMPTY_GROUP" not in str(exc) or time.monotonic() > deadline:
                return f"not deleted: {exc}"
        time.sleep(1)
