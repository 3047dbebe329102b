"""Checkpoint reconciliation and completeness verification of one replication flow (PySpark 4).

Usage: spark-submit --jars <spark-sql-kafka jars> reconcile_checkpoints.py --plan plan.json --report report.json

Self-contained (pyspark + stdlib) so the same file runs on ``local[*]`` or on any Spark cluster. The
plan (written by the ``checkpoint_reconciliation`` DAG) carries the Kafka client options of both
clusters, per partition the source window ``[start, end)`` and the offset-map runs, and the snapshot
of every consumer group (committed source offset, latest checkpoint, committed target offset).

The small internal topics (offset syncs, checkpoints, progress) are decoded by the DAG with
mirror_core's own readers and passed in the plan: they are a few thousand records, their layouts stay
in one place, and the job needs no Kafka client besides Spark's. The records themselves (millions)
only go through Spark's Kafka source, hashed and joined on ``(partition, mapped target offset)``.

Definitions against the offset map (runs ``(s_i, t_i)``, linear in between, positions = next to read):
- source offset ``o`` *maps* to ``m(o) = t_i + (o - s_i)`` for the last run with ``s_i <= o``, unless
  ``m(o)`` reaches the next run's ``t_{i+1}`` (``o`` then lies in a gap the mirror skipped);
- **missing**: a source record in the window that has no mapping (``skipped``) or whose mapped
  target offset holds no record (``absent``: deleted, truncated, never written);
- **mismatched**: both exist but the hash of (key, value, headers) differs;
- **extra**: a target record in the mapped window whose offset is the image of no source offset;
- **source gone**: a target record that is the image of a source offset with no record any more
  (compaction, retention): not verifiable, reported but not an error.
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import sys
import time
from typing import Any

LISTED_PER_KIND = 1000  # offsets listed per partition and kind; counts are always exact


# -- the offset map, minimally and independently of mirror_core (this file must stand alone) --------
def translate(runs: list[list[int]], offset: int, replicated_next: int | None) -> int | None:
    """Target position for the source position ``offset`` (exact), or None when it has no mapping."""
    sources = [r[0] for r in runs]
    i = bisect.bisect_right(sources, offset) - 1
    if i < 0:
        return None
    target = runs[i][1] + (offset - runs[i][0])
    if i + 1 < len(runs):
        return min(target, runs[i + 1][1])  # inside a gap: the next record to read starts the next run
    if replicated_next is not None and offset > replicated_next:
        return None  # not copied yet: no exact position
    return target


def is_image(runs: list[list[int]], target: int) -> bool:
    """Whether a target position is ``m(o)`` of a source position inside some run (not a gap)."""
    targets = [r[1] for r in runs]
    i = bisect.bisect_right(targets, target) - 1
    if i < 0:
        return False
    source = runs[i][0] + (target - runs[i][1])
    return i + 1 == len(runs) or source < runs[i + 1][0]


def check_groups(plan: dict[str, Any]) -> list[dict[str, Any]]:
    """Checkpoint accuracy: every group's translation vs the published checkpoint and the target commit."""
    parts = {(p["topic"], p["partition"]): p for p in plan["partitions"]}
    out = []
    for g in plan.get("groups", []):
        part = parts.get((g["topic"], g["partition"]))
        runs = part["runs"] if part else []
        progress = part.get("replicated_next") if part else None
        committed = g["source_committed"]
        expected = translate(runs, committed, progress)
        row = {k: g.get(k) for k in ("group", "topic", "partition", "remote_topic", "source_committed",
                                     "checkpoint", "target_committed", "target_active_members")}
        row["expected_target"] = expected
        problems: list[str] = []
        notes: list[str] = []
        if expected is None:
            notes.append("untranslatable: source offset outside the offset map or not replicated yet")
        cp = g.get("checkpoint")
        if cp is None:
            notes.append("no checkpoint published")
        else:
            upstream, downstream = cp
            correct = translate(runs, upstream, progress)
            if correct is not None and downstream != correct:
                problems.append(f"checkpoint_wrong: checkpoint says {upstream}->{downstream}, "
                                f"the offset map says {upstream}->{correct}")
            elif upstream != committed:
                notes.append(f"checkpoint_stale: published for source offset {upstream}, group is at {committed}")
        target = g.get("target_committed")
        if target is not None and expected is not None and target != expected:
            if g.get("target_active_members"):
                notes.append(f"target group active ({g['target_active_members']} members): "
                             f"at {target}, translation {expected}; not compared")
            elif target > expected:
                problems.append(f"target_ahead: target group at {target}, translation is {expected} "
                                f"({target - expected} records would be skipped on failover)")
            elif not is_image(runs, target):
                problems.append(f"target_unmapped: target group at {target}, not a position of the offset map "
                                f"(translation is {expected})")
            else:
                notes.append(f"target_behind: target group at {target}, translation is {expected} "
                             "(not synced yet: records would be re-read on failover)")
        row["problems"], row["notes"] = problems, notes
        row["status"] = "wrong" if problems else "ok"
        out.append(row)
    return out


# -- completeness (Spark) ---------------------------------------------------------------------------------
def kafka_read(spark: Any, options: dict[str, str], windows: dict[str, dict[int, tuple[int, int]]]) -> Any:
    """Batch read of exact per-partition windows ``[start, end)`` (read_committed: no aborted records)."""
    windows = {t: {p: w for p, w in ps.items() if w[1] > w[0]} for t, ps in windows.items()}
    windows = {t: ps for t, ps in windows.items() if ps}
    if not windows:
        return None
    reader = spark.read.format("kafka")
    for k, v in options.items():
        reader = reader.option(k, v)
    return (reader.option("kafka.isolation.level", "read_committed")
            .option("assign", json.dumps({t: sorted(ps) for t, ps in windows.items()}))
            .option("startingOffsets", json.dumps({t: {str(p): w[0] for p, w in ps.items()}
                                                   for t, ps in windows.items()}))
            .option("endingOffsets", json.dumps({t: {str(p): w[1] for p, w in ps.items()}
                                                 for t, ps in windows.items()}))
            .option("includeHeaders", "true")
            .option("failOnDataLoss", "false")  # gaps (deleted records, markers) are what we report
            .load())


def record_hash(f: Any) -> Any:
    """64-bit hash of key, value and headers (order-sensitive; null distinct from empty)."""
    return f.xxhash64(f.col("key").isNull(), f.col("key"), f.col("value").isNull(), f.col("value"),
                      f.coalesce(f.col("headers"), f.array()))


def verify_records(spark: Any, plan: dict[str, Any]) -> dict[int, dict[str, Any]]:
    """Per plan partition index: counts of each kind and the offsets of every discrepancy (capped)."""
    from pyspark.sql import functions as f
    from pyspark.sql import types as T

    parts = plan["partitions"]
    # Runs as rows (tp, src_start, src_end, tgt_start, tgt_end): a run covers [src_start, src_end) and
    # its images stop at the next run's target start (what lies beyond is a gap).
    big = 2**62
    run_rows = []
    for idx, p in enumerate(parts):
        runs = p["runs"]
        for i, (s, t) in enumerate(runs):
            s_next, t_next = (runs[i + 1][0], runs[i + 1][1]) if i + 1 < len(runs) else (big, big)
            run_rows.append((idx, s, s_next, t, t_next))
    schema = T.StructType([T.StructField(n, T.LongType() if n != "tp" else T.IntegerType())
                           for n in ("tp", "src_start", "src_end", "tgt_start", "tgt_end")])
    runs_df = f.broadcast(spark.createDataFrame(run_rows, schema))
    tp_rows = [(idx, p["topic"], p["remote_topic"], p["partition"]) for idx, p in enumerate(parts)]
    tp_df = f.broadcast(spark.createDataFrame(tp_rows, "tp int, topic string, remote_topic string, partition int"))

    src_windows: dict[str, dict[int, tuple[int, int]]] = {}
    tgt_windows: dict[str, dict[int, tuple[int, int]]] = {}
    for p in parts:
        src_windows.setdefault(p["topic"], {})[p["partition"]] = (p["start"], p["end"])
        tgt_windows.setdefault(p["remote_topic"], {})[p["partition"]] = (p["target_start"], p["target_end"])

    src = kafka_read(spark, plan["source"]["options"], src_windows)
    tgt = kafka_read(spark, plan["target"]["options"], tgt_windows)
    rows: dict[int, dict[str, Any]] = {i: {"checked": 0, "ok": 0, "missing": [], "missing_count": 0,
                                           "mismatched": [], "mismatched_count": 0, "extra": [], "extra_count": 0,
                                           "source_gone": 0} for i in range(len(parts))}
    if src is None and tgt is None:
        return rows

    empty = spark.createDataFrame([], "tp int, offset long, h long")
    if src is not None:
        src = (src.join(tp_df, ["topic", "partition"])
               .select("tp", "offset", record_hash(f).alias("h")))
    else:
        src = empty
    if tgt is not None:
        tgt = (tgt.withColumnRenamed("topic", "remote_topic").join(tp_df, ["remote_topic", "partition"])
               .select("tp", "offset", record_hash(f).alias("h")))
    else:
        tgt = empty

    r = runs_df.alias("r")
    s = src.alias("s").join(r, (f.col("s.tp") == f.col("r.tp")) & (f.col("s.offset") >= f.col("r.src_start"))
                            & (f.col("s.offset") < f.col("r.src_end")), "left")
    mapped = f.col("r.tgt_start") + (f.col("s.offset") - f.col("r.src_start"))
    s = s.select(f.col("s.tp").alias("tp"), f.col("s.offset").alias("src_offset"), f.col("s.h").alias("src_h"),
                 f.when(mapped < f.col("r.tgt_end"), mapped).alias("mapped"))
    t = tgt.select(f.col("tp").alias("t_tp"), f.col("offset").alias("tgt_offset"), f.col("h").alias("tgt_h"))
    joined = s.join(t, (s.tp == t.t_tp) & (s.mapped == t.tgt_offset), "full_outer")
    kind = (f.when(f.col("src_offset").isNull(), f.lit("target_only"))
            .when(f.col("mapped").isNull(), f.lit("skipped"))
            .when(f.col("tgt_offset").isNull(), f.lit("absent"))
            .when(f.col("src_h") != f.col("tgt_h"), f.lit("mismatched"))
            .otherwise(f.lit("ok")))
    joined = joined.select(f.coalesce("tp", "t_tp").alias("tp"), "src_offset", "tgt_offset", kind.alias("kind"))
    # A target-only record is "source gone" when its offset is the image of a run, else an extra.
    image = (f.col("j.tgt_offset") >= f.col("r.tgt_start")) & (f.col("j.tgt_offset") < f.col("r.tgt_end")) & (
        f.col("r.src_start") + (f.col("j.tgt_offset") - f.col("r.tgt_start")) < f.col("r.src_end"))
    only = (joined.where(f.col("kind") == "target_only").alias("j")
            .join(r, (f.col("j.tp") == f.col("r.tp")) & image, "left")
            .select(f.col("j.tp").alias("tp"), f.col("j.src_offset"), f.col("j.tgt_offset"),
                    f.when(f.col("r.tp").isNull(), f.lit("extra")).otherwise(f.lit("source_gone")).alias("kind")))
    classified = joined.where(f.col("kind") != "target_only").unionByName(only)
    agg = (classified.groupBy("tp", "kind")
           .agg(f.count(f.lit(1)).alias("n"),
                f.slice(f.sort_array(f.collect_list(f.when(f.col("kind") != "ok", f.struct("src_offset",
                                                                                          "tgt_offset")))),
                        1, LISTED_PER_KIND).alias("listed"))
           .collect())
    for a in agg:
        row, n = rows[a["tp"]], int(a["n"])
        listed = [(x["src_offset"], x["tgt_offset"]) for x in a["listed"]]
        if a["kind"] in ("ok", "mismatched", "skipped", "absent"):
            row["checked"] += n
        if a["kind"] == "ok":
            row["ok"] += n
        elif a["kind"] in ("skipped", "absent"):
            row["missing_count"] += n
            row["missing"] += [{"source_offset": so, "target_offset": to, "reason": a["kind"]} for so, to in listed]
        elif a["kind"] == "mismatched":
            row["mismatched_count"] += n
            row["mismatched"] += [{"source_offset": so, "target_offset": to} for so, to in listed]
        elif a["kind"] == "extra":
            row["extra_count"] += n
            row["extra"] += [to for _, to in listed]
        else:
            row["source_gone"] += n
    for row in rows.values():
        row["missing"].sort(key=lambda m: m["source_offset"])
    return rows


def reconcile(spark: Any, plan: dict[str, Any]) -> dict[str, Any]:
    started = time.time()
    verified = verify_records(spark, plan)
    partitions = []
    for idx, p in enumerate(plan["partitions"]):
        partitions.append({"topic": p["topic"], "remote_topic": p["remote_topic"], "partition": p["partition"],
                           "source_start": p["start"], "source_end": p["end"],
                           "target_start": p["target_start"], "target_end": p["target_end"], **verified[idx]})
    groups = check_groups(plan)
    totals = {k: sum(p[k] for p in partitions)
              for k in ("checked", "ok", "missing_count", "mismatched_count", "extra_count", "source_gone")}
    wrong = [g for g in groups if g["status"] == "wrong"]
    seconds = time.time() - started
    summary = {
        "flow": plan["flow"], "partitions": len(partitions), **totals,
        "groups_checked": len(groups), "groups_wrong": len(wrong),
        "checkpoint_problems": [f"{g['group']} {g['topic']}[{g['partition']}]: {p}" for g in wrong
                                for p in g["problems"]],
        "seconds": round(seconds, 3),
        "records_per_second": round(totals["checked"] / seconds) if seconds > 0 else None,
        "status": "ok" if not (totals["missing_count"] or totals["mismatched_count"] or totals["extra_count"]
                                or wrong) else "discrepancies",
    }
    return {"summary": summary, "partitions": partitions, "groups": groups}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plan", required=True, help="plan JSON written by the DAG")
    parser.add_argument("--report", required=True, help="where to write the report JSON")
    args = parser.parse_args(argv)
    with open(args.plan) as fh:
        plan = json.load(fh)

    from pyspark.sql import SparkSession

    # Under spark-submit the master comes from --master; run as a plain script it is local[*].
    builder = SparkSession.builder.appName(f"mirror-core reconcile {plan['flow']}")
    if "PYSPARK_GATEWAY_PORT" not in os.environ:
        builder = builder.master("local[*]")
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")  # the Kafka clients log their whole config at INFO
    try:
        report = reconcile(spark, plan)
    finally:
        spark.stop()
    with open(args.report, "w") as fh:
        json.dump(report, fh, indent=1)
    s = report["summary"]
    print(f"reconciliation {plan['flow']}: {s['status']}: checked {s['checked']}, missing {s['missing_count']}, "
          f"mismatched {s['mismatched_count']}, extra {s['extra_count']}, wrong checkpoints {s['groups_wrong']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
