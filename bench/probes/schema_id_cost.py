"""What does rewriting records' schema ids (mirror_core/schemas/ids.py) cost per record, in the flow thread,
without brokers? Keys unframed and values framed as the Avro serializer writes them; the translation of N values
against the time of the same loop that only reads each value (what the records path does anyway), fastest of 5.

    python -m bench.probes.schema_id_cost [--records 1000000] [--size 200]

Translation needs the records data path (the batches path copies batches untouched), so its full cost for a flow
that could run batches is that path change too: compare with bench.probes.ab_partitions (records vs batches)."""

from __future__ import annotations

import argparse
import time

from mirror_core.schemas.ids import translate


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--size", type=int, default=200, help="value bytes after the 5-byte header")
    a = ap.parse_args()
    ids = {i: i + 1000 for i in range(1, 51)}
    values = [b"\x00" + (1 + i % 50).to_bytes(4, "big") + bytes(a.size) for i in range(a.records)]
    keys = [b"key-%d" % i for i in range(a.records)]

    def read_only() -> float:
        t = time.perf_counter()
        n = 0
        for k, v in zip(keys, values, strict=True):
            n += len(k) + len(v)
        return time.perf_counter() - t

    def translated() -> float:
        t = time.perf_counter()
        n = 0
        for k, v in zip(keys, values, strict=True):
            k2, v2 = translate(k, ids), translate(v, ids)
            n += len(k2 or b"") + len(v2 or b"")
        return time.perf_counter() - t

    base = min(read_only() for _ in range(5))
    cost = min(translated() for _ in range(5))
    per = (cost - base) / a.records * 1e9
    print(f"{a.records} records, values {a.size + 5} B: read only {base:.3f} s, with translation {cost:.3f} s; "
          f"translation {per:.0f} ns a record ({a.records / cost:,.0f} records/s for the loop alone)")


if __name__ == "__main__":
    main()
