"""The offset map of topics kept forever (issue 62): memory, snapshot bytes, load and translation time.

In-process, no brokers: a flow of 2,000 partitions whose history is gappy — a compacted source with
every other record removed, or a transactional one (a marker after every 100 records) — of 1 M, 10 M
and 50 M source offsets, on the 8 partitions of one topic (a changelog) or spread over all 2,000. The
map is built as a reader builds it from the offset-sync log (``PartitionMap.add`` per entry, measured as
``built_map_bytes``), folded and encoded as a snapshot round writes it (``map_bytes``,
``snapshot_bytes``), then, in a fresh process, loaded as a reader loads it and asked for 100 groups x
2,000 partitions (200,000 positions), every answer checked against the closed-form truth. The same with
no history (one run a partition) is the baseline, and ``--runs-only`` builds the
map as before issue 62 (runs only, never folded).

    .venv/bin/python -m bench.probes.offset_map_size [--sizes 1000000,10000000,50000000] [--runs-only]

Writes ``bench/results/offset-map-size-<date>.json``.
"""

from __future__ import annotations

import argparse
import gc
import json
import pickle
import random
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from mirror_core.stores.map_snapshots import decode_chunk, encode_chunks, partition_from_chunks
from mirror_core.stores.offset_blocks import Folding
from mirror_core.stores.offset_map import OffsetMap, PartitionMap

PARTITIONS = 2_000
GROUPS = 100
TXN = 100  # records between two transaction markers
REPO = Path(__file__).resolve().parents[2]
RUNS_ONLY = Folding(at=1 << 62)


def rss_kib() -> int:
    gc.collect()
    return next(int(x.split()[1]) for x in Path("/proc/self/status").read_text().splitlines()
                if x.startswith("VmRSS:"))


def key(p: int) -> tuple[str, int]:
    return ("changelog" if p < 8 else "orders", p)


def build(shape: str, offsets: int, spread: bool, runs_only: bool) -> tuple[OffsetMap, dict[tuple[str, int], int]]:
    """Every partition's map and how many source offsets its history spans (its progress)."""
    folding = RUNS_ONLY if runs_only else None
    gappy = range(PARTITIONS) if spread else range(8)
    per = offsets // len(gappy) if shape != "none" else 0
    om, ends = OffsetMap(), {}
    for p in range(PARTITIONS):
        pm = om.partitions.setdefault(key(p), PartitionMap(folding))
        if p not in gappy or shape == "none":
            pm.add(0, 0)
            ends[key(p)] = 1_000
        elif shape == "compacted":
            for i in range(per // 2):
                pm.add(2 * i, i)
            ends[key(p)] = per
        else:
            s = t = 0
            while s < per:
                pm.add(s, t)
                s, t = s + TXN + 1, t + TXN
            ends[key(p)] = s
    return om, ends


def expected(shape: str, pm_end: int, x: int, gappy: bool) -> int:
    if not gappy or shape == "none":
        return x
    if shape == "compacted":
        return (x + 1) // 2
    r = x % (TXN + 1)
    return (x // (TXN + 1)) * TXN + min(r, TXN)


def write_case(args: argparse.Namespace) -> None:
    """Process 1: build the map, measure it, write its snapshot values to ``args.out``."""
    before = rss_kib()
    t0 = time.perf_counter()
    om, ends = build(args.shape, args.offsets, args.spread, args.runs_only)
    built = time.perf_counter() - t0
    held = rss_kib() - before
    built_bytes = om.nbytes()
    t0 = time.perf_counter()
    for pm in om.partitions.values():
        if not args.runs_only:
            pm.compact()  # as a snapshot round does before it writes (offsets/pruning.py)
    values = {k: encode_chunks(pm, 0) for k, pm in om.partitions.items()}
    encoded = time.perf_counter() - t0
    with open(args.out, "wb") as f:
        pickle.dump((values, ends), f, protocol=5)
    print(json.dumps({"build_s": round(built, 2), "built_rss_mib": round(held / 1024, 1),
                      "built_map_bytes": built_bytes, "map_bytes": om.nbytes(), "pieces": om.entries(),
                      "blocks": sum(len(pm.blocks) for pm in om.partitions.values()),
                      "snapshot_bytes": sum(len(v) for vs in values.values() for v in vs),
                      "snapshot_records": sum(len(vs) for vs in values.values()), "encode_s": round(encoded, 2)}))


def read_case(args: argparse.Namespace) -> None:
    """Process 2 (fresh): load the snapshot as a reader does, translate 100 groups x 2,000 partitions, check."""
    with open(args.out, "rb") as f:
        values, ends = pickle.load(f)
    before = rss_kib()
    t0 = time.perf_counter()
    om = OffsetMap()
    for k, vs in values.items():
        om.partitions[k] = partition_from_chunks([decode_chunk(v) for v in vs])
    loaded = time.perf_counter() - t0
    held = rss_kib() - before  # the snapshot's values still held: what the map itself took
    del values
    rng = random.Random(62)
    gappy = set(range(PARTITIONS) if args.spread else range(8))
    groups = [[(key(p), rng.randrange(ends[key(p)])) for p in range(PARTITIONS)] for _ in range(GROUPS)]
    took = float("inf")
    for _ in range(3):  # the fastest of three: two shared cores
        t0 = time.perf_counter()
        answers = [[om.translate(k[0], k[1], x, ends[k]).target_offset for k, x in g] for g in groups]
        took = min(took, time.perf_counter() - t0)
    wrong = sum(a != expected(args.shape, ends[k], x, k[1] in gappy)
                for g, row in zip(groups, answers, strict=True) for (k, x), a in zip(g, row, strict=True))
    print(json.dumps({"load_s": round(loaded, 3), "loaded_rss_mib": round(held / 1024, 1),
                      "process_rss_mib": round(rss_kib() / 1024, 1), "translate_s": round(took, 3),
                      "translations": GROUPS * PARTITIONS, "wrong": wrong}))


def run(cmd: str, shape: str, offsets: int, spread: bool, runs_only: bool, out: str) -> dict[str, Any]:
    argv = [sys.executable, "-m", "bench.probes.offset_map_size", cmd, "--shape", shape, "--offsets", str(offsets),
            "--out", out, *(["--spread"] if spread else []), *(["--runs-only"] if runs_only else [])]
    done = subprocess.run(argv, capture_output=True, text=True, check=True, cwd=REPO)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cmd", nargs="?", default="all", choices=["all", "write", "read"])
    ap.add_argument("--sizes", default="1000000,10000000,50000000")
    ap.add_argument("--shapes", default="compacted,transactional")
    ap.add_argument("--shape", default="compacted")
    ap.add_argument("--offsets", type=int, default=0)
    ap.add_argument("--spread", action="store_true", help="history on all 2,000 partitions, not 8")
    ap.add_argument("--runs-only", action="store_true", help="the map as before issue 62: runs, never folded")
    ap.add_argument("--layouts", default="8,2000", help="partitions holding the history: 8 and/or 2000")
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    if args.cmd == "write":
        write_case(args)
        return
    if args.cmd == "read":
        read_case(args)
        return
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        out = str(Path(tmp) / "snapshot.pickle")
        cases = [("none", 0, False, False)]
        for n in (int(x) for x in args.sizes.split(",") if x):
            for shape in args.shapes.split(","):
                for layout in args.layouts.split(","):
                    cases.append((shape, n, layout == "2000", args.runs_only))
        for shape, n, spread, runs_only in cases:
            row: dict[str, Any] = {"shape": shape, "offsets": n, "gappy_partitions": PARTITIONS if spread else 8,
                   "runs_only": runs_only}
            row |= run("write", shape, n, spread, runs_only, out)
            row |= run("read", shape, n, spread, runs_only, out)
            if n:  # what the history adds to the same flow with none
                base = rows[0]
                row["map_bytes_per_offset"] = round((row["map_bytes"] - base["map_bytes"]) / n, 4)
                row["snapshot_bytes_per_offset"] = round((row["snapshot_bytes"] - base["snapshot_bytes"]) / n, 4)
                row["loaded_rss_bytes_per_offset"] = round(
                    (row["loaded_rss_mib"] - base["loaded_rss_mib"]) * 2**20 / n, 4)
            rows.append(row)
            print(json.dumps(row), flush=True)
    base = rows[0]
    for row in rows[1:]:
        row["process_rss_vs_none"] = round(row["process_rss_mib"] / base["process_rss_mib"], 3)
        row["translate_vs_none"] = round(row["translate_s"] / base["translate_s"], 3)
    stamp = datetime.now(UTC)
    path = REPO / "bench" / "results" / f"offset-map-size-{stamp:%Y%m%dT%H%M%SZ}.json"
    path.write_text(json.dumps({"part": "offset_map_size", "at": stamp.isoformat(timespec="seconds"),
                                "partitions": PARTITIONS, "groups": GROUPS, "rows": rows}, indent=1) + "\n")
    print(path)


if __name__ == "__main__":
    main()
