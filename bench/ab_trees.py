"""A/B of backlog throughput between source trees (e.g. a commit before a change and after it).

Usage: python -m bench.ab_trees base=/path/to/worktree-at-old-commit new=. [--records N] [--rounds R]
[--modes alo,eos]. One pair of brokers, one 100-byte backlog on 8 partitions; each tree's mirror_core
copies it in turn, round after round (a tree's code runs because the mirror starts with that tree as
its working directory). Rates from 10% to 90% of the backlog on the target, as in bench.run.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

import bench.run as br


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trees", nargs="+", help="name=path of each source tree")
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--modes", default="alo,eos")
    args = parser.parse_args()
    trees = dict(t.split("=", 1) for t in args.trees)
    rates: dict[tuple[str, str], list[float]] = {}
    with br.local_clusters("ab-") as (work, clusters):
        src, dst = clusters[0].bootstrap, clusters[1].bootstrap
        admin = AdminClient({"bootstrap.servers": src})  # kept referenced until its future resolves
        admin.create_topics([NewTopic("ab", br.PARTITIONS, 1)])["ab"].result(30)
        print(br.raw_produce(src, "ab", args.records, 100), flush=True)
        for r in range(args.rounds):
            for mode in args.modes.split(","):
                for name, tree in trees.items():
                    br.REPO = Path(tree).resolve()
                    extra = ["exactly.once.enabled = true"] if mode == "eos" else []
                    x = br.mirror_run(src, dst, "ab", args.records, 100, 1, f"{mode}{name}{r}", work, extra)
                    rates.setdefault((mode, name), []).append(x.records_per_s)
                    print(f"{mode} {name} {r} {x.records_per_s:,.0f} rec/s load {os.getloadavg()}", flush=True)
    for (mode, name), v in sorted(rates.items()):
        v.sort()
        print(f"{mode} {name}: median {v[len(v) // 2]:,.0f}, min-max {v[0]:,.0f}-{v[-1]:,.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
