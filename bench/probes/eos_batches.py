"""Exactly-once against at-least-once on whole batches (replication.data.path = batches), taking turns.

    [ROUNDS=2] python -m bench.probes.eos_batches <partitions> <records>

Each run copies a fresh backlog (bench.probes.ab_partitions.copy: fresh clusters, one mirror process) with
``exactly.once.enabled`` false, then true, ROUNDS times in turn, so that both meet the same machine load; prints
each run's records/s (10 %-90 % of the backlog on the target) and CPU per million records, then the ratio of the
medians (the goal: exactly-once at 0.9x or more) and each side's spread. The target's log ends count the
exactly-once flow's commit markers too (one per partition and transaction: a few per second, next to a backlog
of hundreds of thousands of records).
"""

from __future__ import annotations

import os
import statistics
import sys

from bench.probes.ab_partitions import copy

MODES = {"at-least-once": "replication.data.path = batches",
         "exactly-once": "replication.data.path = batches;exactly.once.enabled = true;exactly.once.slots = 8"}


def main(partitions: int, records: int) -> None:
    rates: dict[str, list[float]] = {mode: [] for mode in MODES}
    for round_ in range(int(os.environ.get("ROUNDS", "2"))):
        for mode, extra in MODES.items():
            result = copy(partitions, records, extra)
            rate = result.get("records_per_s") or 0.0
            rates[mode].append(rate)
            print(f"round {round_ + 1} {mode}: {rate:,.0f} records/s, "
                  f"{result.get('cpu_s_per_m') or 0:.1f} CPU s per M records", flush=True)
    for mode, of_mode in rates.items():
        print(f"{mode}: median {statistics.median(of_mode):,.0f} records/s, "
              f"spread {min(of_mode):,.0f}-{max(of_mode):,.0f}")
    base = statistics.median(rates["at-least-once"])
    print(f"exactly-once / at-least-once: {statistics.median(rates['exactly-once']) / base:.2f}x (goal 0.9x)"
          if base else "no at-least-once rate")


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    main(int(sys.argv[1]), int(sys.argv[2]))
