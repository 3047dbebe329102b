"""The running mirror's garbage collector is set for the copy loop (mirror_core/gc_tuning.py): a backlog
is copied without a young-generation collection every few hundred records."""
from __future__ import annotations

from tests.integration.conftest import flow_lines
from tests.kafka_harness import create_topic, end_offsets, metric, produce_sequence, wait_until

RECORDS = 300_000


def test_backlog_copied_without_a_collection_every_few_hundred_records(dc1, dc2, name, start_mirror) -> None:
    t = f"{name}.gc"
    create_topic(dc1, t, 4)
    m = start_mirror(flow_lines(name))
    wait_until(lambda: len(m.partitions()) == 4, 60, what="the mirror owns the topic's partitions")
    before = metric(m, "python_gc_collections_total", generation="0")
    assert before is not None, "the mirror exposes Python's collector counts"
    produce_sequence(dc1, t, 4, RECORDS)
    wait_until(lambda: sum(end_offsets(dc2, f"dc1.{t}").values()) == RECORDS, 120, what="records copied")
    young = (metric(m, "python_gc_collections_total", generation="0") or 0) - before
    # Every consumed record is a tracked object: with Python's default threshold (700) copying these
    # records costs hundreds of young collections; tuned, a few.
    assert young < RECORDS / 5_000, f"{young:.0f} young-generation collections for {RECORDS:,} records"
