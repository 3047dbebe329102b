"""A/B between source trees of the per-group work at scale: ``translate_groups`` for G groups and one checkpoint
round (``CheckpointEmitter.emit_once``: every group's offsets, the remote log ends, a checkpoint per group and
partition) over one topic of P partitions that a mirror has copied.

Usage: python -m bench.probes.group_rounds base=/path/to/worktree-at-old-commit new=. [--partitions 2000] [--groups 100]
[--rounds 3] [--profile]. One pair of brokers (in $TMPDIR), one mirror_core (the batches path) copying a backlog of
10 records a partition, G groups committed at random positions; then, round after round, each tree in turn (its code
runs because the timing process starts with that tree as its working directory) times both in a fresh process.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from bench.harness import local_clusters, start_mirror_core, stop
from bench.scale import GROUPS, STATIC, Cluster, EndWatcher, Shape, _source, _wait, commit_groups

# Run in each tree: a fresh process, so the first round's client start-up counts alike for both.
TIMING = """
import json, sys, threading, time
from mirror_core.config.loader import load_config
from mirror_core.offsets.checkpoints import CheckpointEmitter
from mirror_core.offsets.translate import translate_groups
config, groups = load_config(sys.argv[1]), json.loads(sys.argv[2])
profile = None
if sys.argv[3:] == ["profile"]:
    import cProfile
    profile = cProfile.Profile()
    profile.enable()
t0 = time.perf_counter()
rows = translate_groups(config, groups, config.flows[0].source, "target")
translate_s = time.perf_counter() - t0
if profile is not None:
    import pstats
    profile.disable()
    pstats.Stats(profile).sort_stats("cumulative").print_stats(30)
    pstats.Stats(profile).sort_stats("tottime").print_stats(20)
emitter = CheckpointEmitter(config, config.flows[0], threading.Event(), None)
emitter._open()
t0 = time.perf_counter()
published = emitter.emit_once()
round_s = time.perf_counter() - t0
emitter.close()
exact = sum(r.exact for v in rows.values() for r in v)
print(json.dumps({"translate_s": round(translate_s, 2), "checkpoint_round_s": round(round_s, 2),
                  "exact": exact, "published": published}))
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trees", nargs="+", help="name=path of each source tree")
    parser.add_argument("--partitions", type=int, default=2000)
    parser.add_argument("--groups", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--profile", action="store_true", help="print a cProfile of each translate (slower)")
    args = parser.parse_args()
    if not 1 <= args.groups <= GROUPS:
        parser.error(f"--groups: 1 to {GROUPS} (bench.scale commits {GROUPS})")
    trees = dict(t.split("=", 1) for t in args.trees)
    shape, topic, alias = Shape(1, args.partitions), "gr", "grs"
    times: dict[tuple[str, str], list[float]] = {}
    with local_clusters("groups-") as (work, clusters):
        src, dst = Cluster(clusters[0].bootstrap), Cluster(clusters[1].bootstrap)
        records = 10 * shape.partitions
        _source(src, shape, topic, records)
        extra = ["replication.data.path = batches", "emit.checkpoints.enabled = false",
                 f"{alias}->target.groups = g{alias}-.*"]
        procs, _ = start_mirror_core(src.bootstrap, dst.bootstrap, topic, 1, alias, work, extra, STATIC)
        try:
            ends = EndWatcher(dst.bootstrap, "", keys=shape.keys(topic, f"{alias}."))
            _wait(lambda: ends() >= records, 600, "the backlog copied")
            keys = shape.keys(topic)
            groups = commit_groups(src.bootstrap, f"g{alias}", keys, src.marks_of(keys), 7)[:args.groups]
            conf = work / "timing.properties"  # the mirror's own file, checkpoints on for the timed round
            conf.write_text((work / f"{alias}.properties").read_text().replace(
                "emit.checkpoints.enabled = false", "emit.checkpoints.enabled = true"))
            for r in range(args.rounds):
                order = list(trees.items()) if r % 2 == 0 else list(reversed(trees.items()))
                for name, tree in order:
                    out = subprocess.run([sys.executable, "-c", TIMING, str(conf), json.dumps(groups)]
                                         + (["profile"] if args.profile else []),
                                         cwd=Path(tree).resolve(), capture_output=True, text=True, timeout=900)
                    if out.returncode:
                        raise SystemExit(f"{name}: {out.stderr[-2000:]}")
                    if args.profile:
                        print(out.stdout, flush=True)
                    row = json.loads(out.stdout.strip().splitlines()[-1])
                    for k in ("translate_s", "checkpoint_round_s"):
                        times.setdefault((name, k), []).append(row[k])
                    print(f"round {r} {name}: {row} load {os.getloadavg()}", flush=True)
        finally:
            stop(procs)
    for (name, k), v in sorted(times.items()):
        v.sort()
        print(f"{name} {k}: median {v[len(v) // 2]}, min-max {v[0]}-{v[-1]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
