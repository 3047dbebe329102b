"""What checking every source batch's CRC costs: the same backlog copied with ``check.crcs`` on (the default) and
off, the two taking turns so they meet the same machine load, on each data path at the partition count its goal
names (records path: 8, batches path: 2,000).

    python -m bench.probes.crc_cost [--runs 3] [--records-8 2000000] [--records-2000 6000000]

Prints each copy's records/s and, per path, the median ratio off/on with its spread; writes the raw results to
bench/results/crc-cost-<UTC time>.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

from bench.harness import RESULTS
from bench.probes.ab_partitions import copy

OFF = "ab->target.consumer.check.crcs = false"
#: (data path, partitions, the config lines of that path)
SHAPES = {"records": (8, "replication.data.path = records"), "batches": (2000, "replication.data.path = batches")}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--records-8", type=int, default=2_000_000)
    parser.add_argument("--records-2000", type=int, default=6_000_000)
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args()
    records = {8: args.records_8, 2000: args.records_2000}
    results: dict[str, list[dict[str, Any]]] = {path: [] for path in SHAPES}
    for run in range(args.runs):
        for path, (partitions, lines) in SHAPES.items():
            for check in ((True, False) if run % 2 == 0 else (False, True)):  # alternating which goes first
                extra = ";".join(x for x in (lines, "" if check else OFF) if x)
                rate = copy(partitions, records[partitions], extra)
                results[path].append({"run": run, "check_crcs": check, **rate})
                print(f"{path} {partitions} partitions, check.crcs {'on ' if check else 'off'}: "
                      f"{rate.get('records_per_s') or 0:,.0f} records/s", flush=True)
    summary: dict[str, Any] = {}
    for path, rows in results.items():
        for key in ("records_per_s", "cpu_s_per_m"):
            ratios = []
            for run in range(args.runs):
                on = [r[key] for r in rows if r["run"] == run and r["check_crcs"]]
                off = [r[key] for r in rows if r["run"] == run and not r["check_crcs"]]
                if on and off and on[0] and off[0]:
                    ratios.append(on[0] / off[0])
            if ratios:
                summary.setdefault(path, {})[key] = {"on_over_off_median": round(statistics.median(ratios), 3),
                                                     "min": round(min(ratios), 3), "max": round(max(ratios), 3)}
                print(f"{path}: {key} with check.crcs on / off = {statistics.median(ratios):.3f} (runs "
                      f"{min(ratios):.3f}-{max(ratios):.3f})", flush=True)
    out = Path(args.out) / f"crc-cost-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.json"
    out.write_text(json.dumps({"records": records, "runs": results, "summary": summary}, indent=1) + "\n")
    print(f"written: {out}")


if __name__ == "__main__":
    main()
