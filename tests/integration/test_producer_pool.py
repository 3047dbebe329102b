"""``replication.producers``: an at-least-once flow produces through several target producers (more
requests in flight over a long round trip), each partition always through the same one. The records path's
librdkafka producers (RECORDS); the batches path's connections per broker are tests/integration/test_batch_path.py's."""
from __future__ import annotations

import threading
from collections import Counter
from typing import Any

from tests.integration.conftest import flow_lines
from tests.kafka_harness import (
    MirrorProcess,
    create_topic,
    end_offsets,
    produce_sequence,
    producer_ids,
    read_all,
    wait_until,
)

PARTITIONS = 6
RECORDS = "replication.data.path = records"


def test_partitions_spread_over_producers_in_order_and_a_restart_adds_no_duplicate(
        clusters, dc1, dc2, name, start_mirror) -> None:
    t, remote = f"{name}.pool", f"dc1.{name}.pool"
    create_topic(dc1, t, PARTITIONS)
    produce_sequence(dc1, t, PARTITIONS, 6000)
    lines = flow_lines(name, "replication.producers = 3", RECORDS)
    m = start_mirror(lines)
    wait_until(lambda: sum(end_offsets(dc2, remote).values()) == 6000, 90, what="first backlog copied")
    assert producers_shown(m) == {"count": 3, "one_batch_per_partition": True, "round_trip_ms": None,
                                  "reason": "replication.producers set"}
    # A graceful stop while records stream in: nothing copied twice by the restart, whichever producer
    # carried it. (On loopback the acknowledgements come within a millisecond, so this does not single out
    # a flush that skipped producers 2 and 3 — removing them from AtLeastOnce.flush still passed here.)
    # The source keeps receiving until after the stop (a fixed count could finish first on a fast run),
    # paced (at most ~30,000 records/s) so the volume stays bounded whatever the wait.
    stop_source, written, failures = threading.Event(), [6000], []

    def stream() -> None:
        try:
            while not stop_source.is_set():
                produce_sequence(dc1, t, PARTITIONS, 6000, start=written[0])
                written[0] += 6000
                stop_source.wait(0.2)
        except Exception as exc:  # reported below: a half-written chunk would make the total wrong
            failures.append(exc)

    streaming = threading.Thread(target=stream, daemon=True)
    streaming.start()
    try:
        wait_until(lambda: sum(end_offsets(dc2, remote).values()) >= 12_000, 90, what="streamed records arriving")
        assert m.stop() == 0
        # The stream must span the stop: one more chunk written after it (a fast stop could otherwise fall
        # into the pause between two chunks, and the writer end with nothing in flight — CI saw that).
        at_stop = written[0]
        wait_until(lambda: written[0] > at_stop or bool(failures) or not streaming.is_alive(), 60,
                   what="the source still receiving after the stop")
    finally:
        stop_source.set()
        streaming.join(120)
    assert not streaming.is_alive() and not failures, f"the source writer did not finish cleanly: {failures}"
    total = written[0]
    assert total >= 18_000, f"only {total} records written: the stop did not happen while records streamed in"
    # The second process with the default (auto): loopback is no WAN, so one producer.
    second = start_mirror(flow_lines(name, RECORDS), name="mirror-2")
    wait_until(lambda: sum(end_offsets(dc2, remote).values()) >= total, 90, what="the rest copied")
    auto = producers_shown(second)
    assert auto["count"] == 1 and not auto["one_batch_per_partition"] and 0 < auto["round_trip_ms"] < 70, auto
    assert auto["reason"].startswith("auto: round trip to the target") and "< 70 ms" in auto["reason"], auto

    records = read_all(dc2, remote)
    seqs = [int(dict(r.headers)["seq"] or b"-1") for r in records]
    assert len(records) == total and sorted(seqs) == list(range(total)), \
        f"{len(records)} records, duplicates {sum(c - 1 for c in Counter(seqs).values() if c > 1)}"
    for p in range(PARTITIONS):
        in_partition = [s for r, s in zip(records, seqs, strict=True) if r.partition == p]
        assert in_partition == sorted(in_partition) and all(s % PARTITIONS == p for s in in_partition)
    # Each partition through one producer per process (two processes: at most two ids), three in all.
    ids = producer_ids(clusters["dc2"], remote)
    assert set(ids) == set(range(PARTITIONS)) and all(1 <= len(v) <= 2 for v in ids.values()), ids
    first_process = {min(v) for v in ids.values()}
    assert len(first_process) == 3, f"partitions spread over {len(first_process)} producers, not 3: {ids}"
    second_process = {max(v) for v in ids.values()} - first_process
    assert len(second_process) == 1, f"the second process (auto, loopback) wrote through {second_process}: {ids}"


def producers_shown(m: MirrorProcess) -> dict[str, Any]:
    """The target producers the mirror's flow chose, as /status shows them."""
    flows = (m.status() or {}).get("flows", [])
    assert flows and flows[0].get("producers"), f"/status shows no producers: {m.status()}"
    shown: dict[str, Any] = flows[0]["producers"]
    return shown
