"""Cost of the per-record latency stamp (``Batch.stamps.append``) on the produce hot path.

Times the real ``Producing._produce_batch`` against the same source with that one line removed, on
400,000 in-memory records of 100 bytes, into a real producer that never reaches a broker (its local
queue only), alternating fifteen times: ``python -m bench.stamps_cost``.
"""

from __future__ import annotations

import statistics
import time
import types
from pathlib import Path
from typing import Any

from confluent_kafka import Message, Producer

import mirror_core.replication.produce as produce
from mirror_core.replication.batch import PartitionState

N, RUN, REPEATS = 400_000, 2000, 15


def _without_stamps() -> Any:
    source = Path(produce.__file__).read_text()
    if "stamps.append(ts)" not in source:
        raise SystemExit("produce.py no longer appends a stamp per record: nothing to measure")
    module = types.ModuleType("produce_without_stamps")
    exec(compile(source.replace("stamps.append(ts)", "pass"), produce.__file__, "exec"), module.__dict__)
    return module


def _rate(module: Any, msgs: list[Message]) -> float:
    p = Producer({"bootstrap.servers": "127.0.0.1:1", "linger.ms": 60000, "log_level": 0,
                  "queue.buffering.max.messages": 2_000_000, "queue.buffering.max.kbytes": 2_000_000})
    st = PartitionState("t", 0, "r.t", 0, False, producer=p)
    flow = types.SimpleNamespace(policy=types.SimpleNamespace(uses_provenance=False))
    producing = module.Producing(flow, lambda st: None, None, types.SimpleNamespace(before_produce=lambda st: None))
    start = time.perf_counter()
    for i in range(0, N, RUN):
        producing._produce_batch(st, msgs[i:i + RUN], i + RUN)
        st.pending.clear()
    rate = N / (time.perf_counter() - start)
    p.purge()
    return rate


def main() -> None:
    msgs = [Message(topic="t", partition=0, offset=i, value=b"x" * 100, key=None,
                    timestamp=(1, 1_700_000_000_000 + i)) for i in range(N)]
    variants = {"with stamps": produce, "without": _without_stamps()}
    rates: dict[str, list[float]] = {k: [] for k in variants}
    for _ in range(REPEATS):
        for label, module in variants.items():
            rates[label].append(_rate(module, msgs))
    for label, values in rates.items():
        print(f"{label}: median {statistics.median(values):,.0f} records/s "
              f"(min {min(values):,.0f}, max {max(values):,.0f})")
    print(f"without / with: {statistics.median(rates['without']) / statistics.median(rates['with stamps']):.3f}")


if __name__ == "__main__":
    main()
