"""Part ``offset-map`` of ``make bench``: how many offset-map entries a gappy source costs (transactions of 100
records, one commit marker each: an offset gap every 100 records). The gap-free figure comes from the backlog
part (bench/backlog.py), whose one-process at-least-once flows are counted the same way
(:func:`bench.harness.offset_map_entries`)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from bench.backlog import mirror_run
from bench.harness import PARTITIONS, offset_map_entries


def transactional_source(bootstrap: str, topic: str, n: int, per_txn: int) -> None:
    """A gappy source: every transaction's commit marker takes an offset."""
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"bench-{topic}", "linger.ms": 5})
    p.init_transactions(30)
    value = os.urandom(100)
    for start in range(0, n, per_txn):
        p.begin_transaction()
        for i in range(start, min(n, start + per_txn)):
            p.produce(topic, value=value, partition=i % PARTITIONS)
        p.commit_transaction(60)


def run_part(src: str, dst: str, work: Path, args: Any) -> dict[str, tuple[int, int]]:
    """A gappy source copied by one mirror_core process: {label: (offset-map entries, records)}."""
    gappy, gn = "benchtxn", max(100_000, args.records // 5)
    admin = AdminClient({"bootstrap.servers": src})
    admin.create_topics([NewTopic(gappy, PARTITIONS, 1)])[gappy].result(30)
    transactional_source(src, gappy, gn, 100)
    mirror_run(src, dst, gappy, gn + gn // 100, 100, 1, "gappy", work, [], expect_target=gn)
    return {"gappy source (transactions of 100 records)": (offset_map_entries(dst, "gappy"), gn)}


def markdown_lines(maps: dict[str, tuple[int, int]] | None) -> list[str]:
    """The offset-map table: entries per million records replicated."""
    if not maps:
        return []
    lines = ["", "| offset map | entries | records | entries per million records |", "|---|---:|---:|---:|"]
    for label, (entries, records) in maps.items():
        lines.append(f"| {label} | {entries:,} | {records:,} | {entries / records * 1e6:,.0f} |")
    return lines
