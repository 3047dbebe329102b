"""Reconciliation plans and reports: what the ``checkpoint_reconciliation`` DAG needs, without Airflow.

``build_plan`` snapshots one flow just before the Spark job runs (``spark_jobs/reconcile_checkpoints.py``):
the offset map and replication progress (decoded here with mirror_core's readers, so the MM2 layouts
live in one place), per partition the source window ``[start, end)`` and its image on the target,
and every selected consumer group's committed source offset, latest checkpoint and committed target
offset. ``record_report`` loads the job's report into the state store.

Default window per partition: from where the last successful reconciliation stopped (first run: the
oldest source offset that is both retained and in the offset map) to the replication progress, so a
window never includes records the mirror has not copied yet.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException, TopicPartition

from mirror_core.clients import make_admin, make_consumer
from mirror_core.config.model import ClusterConfig, FlowConfig, MirrorConfig
from mirror_core.errors import MirrorError
from mirror_core.kafka_io import QUIET
from mirror_core.offsets.checkpoints import CheckpointReader, checkpoints_topic
from mirror_core.offsets.groups import active_members, commit_offsets, committed_offsets
from mirror_core.offsets.translate import FlowOffsets
from mirror_core.state.models import ReconciliationReport, utcnow
from mirror_core.state.store import StateStore

REPO = Path(__file__).resolve().parents[1]
JOB = REPO / "spark_jobs" / "reconcile_checkpoints.py"
WINDOWS = ("since_last_success", "all_retained")



class Discrepancies(MirrorError):
    """The reconciliation found missing, mismatched or extra records, or wrong group offsets."""


# Settings Spark's Kafka source manages itself and refuses as options.
_SPARK_MANAGED = frozenset({"group.id", "auto.offset.reset", "key.deserializer", "value.deserializer",
                            "enable.auto.commit", "interceptor.classes"})


def spark_kafka_options(cluster: ClusterConfig) -> dict[str, str]:
    """Options of Spark's Kafka source (``kafka.``-prefixed Java client names) for one cluster.

    Spark reads Kafka with the Java client, which takes the settings exactly as mm2.properties writes
    them (placeholders resolved): JKS stores, JAAS lines and Kerberos work unchanged.
    """
    java = {k: v for k, v in cluster.java.get("consumer", {}).items() if k not in _SPARK_MANAGED}
    java["bootstrap.servers"] = cluster.bootstrap_servers
    return {f"kafka.{k}": v for k, v in java.items()}


def _partition_key(topic: str, partition: int) -> str:
    return f"{topic}:{partition}"


def _last_windows(store: StateStore | None, flow: str) -> dict[str, tuple[int, int]]:
    """Per partition, where the last successful reconciliation stopped: (source end, target end)."""
    last = store.last_reconciliation(flow, status="ok") if store is not None else None
    if last is None:
        return {}
    return {_partition_key(p["topic"], p["partition"]): (int(p["source_end"]), int(p["target_end"]))
            for p in last.partitions}


def _watermarks(consumer: Any, keys: list[tuple[str, int]], timeout: float) -> dict[tuple[str, int], tuple[int, int]]:
    out = {}
    for topic, partition in keys:
        try:
            out[(topic, partition)] = consumer.get_watermark_offsets(TopicPartition(topic, partition),
                                                                     timeout=timeout)
        except KafkaException:
            continue  # topic deleted on one side: nothing to verify there
    return out


def build_plan(config: MirrorConfig, flow: FlowConfig, store: StateStore | None = None,
               window: str = "since_last_success", start_offsets: Mapping[str, int] | None = None,
               end_offsets: Mapping[str, int] | None = None, timeout: float = 30) -> dict[str, Any]:
    """Snapshot ``flow`` for the Spark job. Explicit offsets are keyed ``"topic:partition"``."""
    if window not in WINDOWS:
        raise ValueError(f"window must be one of {', '.join(WINDOWS)}, got {window!r}")
    start_offsets, end_offsets = dict(start_offsets or {}), dict(end_offsets or {})
    src, tgt = config.cluster(flow.source), config.cluster(flow.target)
    offsets = FlowOffsets.load(config, flow, timeout)
    keys = sorted(k for k in offsets.offset_map.partitions if flow.should_replicate(k[0]))
    since = _last_windows(store, flow.name) if window == "since_last_success" else {}
    src_consumer = make_consumer(src, "mirror-core.reconcile", QUIET)
    tgt_consumer = make_consumer(tgt, "mirror-core.reconcile", QUIET)
    try:
        src_marks = _watermarks(src_consumer, keys, timeout)
        tgt_marks = _watermarks(tgt_consumer, [(flow.remote_topic(t), p) for t, p in keys], timeout)
    finally:
        src_consumer.close()
        tgt_consumer.close()
    partitions, notes = [], []
    for topic, partition in keys:
        remote = flow.remote_topic(topic)
        if (topic, partition) not in src_marks or (remote, partition) not in tgt_marks:
            notes.append(f"{topic}[{partition}]: source or remote partition not found; skipped")
            continue
        pm = offsets.offset_map.partitions[(topic, partition)]
        low, high = src_marks[(topic, partition)]
        progress = offsets.progress.get((topic, partition), pm.sources[-1])
        key = _partition_key(topic, partition)
        floor = max(low, pm.sources[0])  # older records were never mirrored or are gone
        end = min(int(end_offsets.get(key, high)), high, progress)
        start = min(max(floor, int(start_offsets.get(key, since.get(key, (floor, 0))[0]))), end)
        target_start = pm.translate(start, progress).target_offset
        if key in since and key not in start_offsets and start == since[key][0] and target_start is not None:
            # Continue the target side where the last window ended too: a record written to the target
            # between the two runs (before the next mapped one) is then seen as an extra.
            target_start = min(target_start, since[key][1])
        target_end = pm.translate(end, progress).target_offset
        partitions.append({
            "topic": topic, "remote_topic": remote, "partition": partition, "start": start, "end": end,
            "replicated_next": progress, "runs": [[s, t] for s, t in pm.runs()],
            "target_start": target_start if target_start is not None else 0,
            "target_end": target_end if target_end is not None else 0,
        })
    return {"flow": flow.name, "source": {"alias": src.alias, "options": spark_kafka_options(src)},
            "target": {"alias": tgt.alias, "options": spark_kafka_options(tgt)},
            "window": window, "partitions": partitions, "notes": notes,
            "groups": snapshot_groups(config, flow, timeout)}


def snapshot_groups(config: MirrorConfig, flow: FlowConfig, timeout: float = 30) -> list[dict[str, Any]]:
    """Every selected group's committed source offsets with its checkpoint and committed target offsets."""
    src_admin, tgt_admin = make_admin(config.cluster(flow.source)), make_admin(config.cluster(flow.target))
    groups = sorted(g.group_id for g in src_admin.list_consumer_groups(request_timeout=timeout).result(timeout).valid
                    if flow.groups.accepts(g.group_id) and not g.group_id.startswith("mirror-core"))
    reader = CheckpointReader(make_consumer(config.cluster(flow.target), "mirror-core.reconcile", QUIET),
                              checkpoints_topic(flow.source))
    try:
        checkpoints = reader.refresh(timeout)
    except Exception:  # no checkpoints topic yet (emission disabled or never ran): every group says so
        checkpoints = {}
    finally:
        reader.close()
    out = []
    for group in groups:
        source = {k: v for k, v in committed_offsets(src_admin, group, timeout).items() if flow.should_replicate(k[0])}
        if not source:
            continue
        try:
            target, members = committed_offsets(tgt_admin, group, timeout), active_members(tgt_admin, group, timeout)
        except KafkaException:
            target, members = {}, 0
        for (topic, partition), offset in sorted(source.items()):
            remote = flow.remote_topic(topic)
            cp = checkpoints.get((group, remote, partition))
            out.append({"group": group, "topic": topic, "partition": partition, "remote_topic": remote,
                        "source_committed": offset, "checkpoint": list(cp) if cp else None,
                        "target_committed": target.get((remote, partition)), "target_active_members": members})
    return out


def write_plan(plan: dict[str, Any], path: Path) -> Path:
    """Write the plan readable by its owner only: it carries the clusters' client credentials."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump(plan, fh)
    return path


def report_failures(report: dict[str, Any], limit: int = 50) -> list[str]:
    """Human-readable discrepancies (missing / mismatched / extra records, wrong checkpoints)."""
    lines = []
    for p in report["partitions"]:
        where = f"{p['topic']}[{p['partition']}] -> {p['remote_topic']}"
        if p["missing_count"]:
            lines.append(f"{where}: {p['missing_count']} missing, source offsets "
                         f"{[m['source_offset'] for m in p['missing'][:limit]]}")
        if p["mismatched_count"]:
            lines.append(f"{where}: {p['mismatched_count']} mismatched, source->target offsets "
                         f"{[(m['source_offset'], m['target_offset']) for m in p['mismatched'][:limit]]}")
        if p["extra_count"]:
            lines.append(f"{where}: {p['extra_count']} unexpected extra records, target offsets {p['extra'][:limit]}")
    lines += [f"checkpoint: {c}" for c in report["summary"].get("checkpoint_problems", [])]
    return lines


def record_report(store: StateStore, report: dict[str, Any], run_id: str | None,
                  started_at: Any = None) -> ReconciliationReport:
    """Store the job's report: status ``ok`` or ``discrepancies``, groups kept in the summary."""
    summary = dict(report["summary"])
    summary["groups"] = report.get("groups", [])
    row = ReconciliationReport(flow=summary["flow"], run_id=run_id, status=summary["status"],
                               started_at=started_at or utcnow(), finished_at=utcnow(), summary=summary,
                               partitions=report["partitions"])
    store.add(row)
    return row


def commit_corrections(config: MirrorConfig, flow: FlowConfig, report: dict[str, Any],
                       timeout: float = 30) -> list[dict[str, Any]]:
    """Commit the translated offset to every target group found wrong or behind, if it has no members."""
    admin = make_admin(config.cluster(flow.target))
    wanted: dict[str, dict[tuple[str, int], int]] = {}
    for g in report.get("groups", []):
        expected, target = g.get("expected_target"), g.get("target_committed")
        if expected is None or target is None or target == expected:
            continue
        wanted.setdefault(g["group"], {})[(g["remote_topic"], g["partition"])] = expected
    done = []
    for group, offsets in sorted(wanted.items()):
        if active_members(admin, group, timeout):
            done.append({"group": group, "committed": False, "reason": "group has active members on the target"})
            continue
        commit_offsets(admin, group, offsets, timeout)
        done.append({"group": group, "committed": True,
                     "offsets": {f"{t}:{p}": o for (t, p), o in sorted(offsets.items())}})
    return done


# -- the DAG's steps -----------------------------------------------------------------------------------
def work_dir(run_id: str, flow: str) -> Path:
    """Where one run writes the plan and the job its report (``MIRROR_CORE_RECONCILE_DIR``, default
    ``$AIRFLOW_HOME/mirror-core-reconcile``)."""
    base = Path(os.environ.get("MIRROR_CORE_RECONCILE_DIR", Path(os.environ.get("AIRFLOW_HOME", ".")) /
                                "mirror-core-reconcile"))
    return base / re.sub(r"[^\w.-]+", "_", f"{run_id}-{flow}")


def snapshot(config: MirrorConfig, store: StateStore, flow: FlowConfig, window: str,
             start_offsets: Mapping[str, int], end_offsets: Mapping[str, int], work: Path) -> list[str]:
    """Snapshot ``flow`` just before the Spark job and write its plan; the job's arguments."""
    store.record_config(config)
    plan = build_plan(config, flow, store, window, start_offsets, end_offsets)
    for note in plan["notes"]:
        print(f"note: {note}")
    print(f"{flow.name}: {len(plan['partitions'])} partitions, "
          f"{sum(x['end'] - x['start'] for x in plan['partitions'])} source offsets, {len(plan['groups'])} group "
          "offsets to verify")
    write_plan(plan, work / "plan.json")
    return ["--plan", str(work / "plan.json"), "--report", str(work / "report.json")]


def _job_arg(args: list[str], name: str) -> Path:
    return Path(args[args.index(name) + 1])


def load_report(config: MirrorConfig, store: StateStore, args: list[str], run_id: str | None,
                correct: bool) -> dict[str, Any]:
    """Record the job's report (after committing corrections if ``correct``); raise Discrepancies
    naming the first ten when anything is wrong. Returns the report's summary."""
    report = json.loads(_job_arg(args, "--report").read_text())
    summary = report["summary"]
    flow = summary["flow"]
    if correct:
        summary["corrections"] = commit_corrections(config, config.flow(flow), report)
        for c in summary["corrections"]:
            print(f"correction: {c}")
    row = record_report(store, report, run_id)
    print(f"{flow}: {summary['status']}: {summary['checked']} records checked in {summary['seconds']} s, "
          f"{summary['missing_count']} missing, {summary['mismatched_count']} mismatched, "
          f"{summary['extra_count']} extra, {summary['groups_wrong']}/{summary['groups_checked']} group offsets "
          f"wrong (report {row.id})")
    for g in report.get("groups", []):
        for note in g["notes"]:
            print(f"group {g['group']} {g['topic']}[{g['partition']}]: {note}")
    failures = report_failures(report)
    for line in failures:
        print(f"DISCREPANCY {line}")
    if failures:
        raise Discrepancies(f"{flow}: {len(failures)} discrepancies: " + "; ".join(failures[:10]))
    return dict(summary)


def remove_plan(args: list[str]) -> None:
    """The plan holds client credentials: remove it whatever happened to the job."""
    _job_arg(args, "--plan").unlink(missing_ok=True)
