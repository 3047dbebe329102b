"""Workflow checks on exactly-once (transactional) targets: positions next to transaction markers."""

from __future__ import annotations

from confluent_kafka import Producer

from mirror_core.clients import make_consumer
from mirror_core.config.loader import load_config
from mirror_core.kafka_io import first_visible
from mirror_core.workflows.failover import canary
from tests.integration.test_offsets import commit_source_group
from tests.kafka_harness import create_topic, end_offsets, unique, write_config


def test_canary_accepts_positions_on_commit_markers(dc1, dc2, name, tmp_path):
    t = f"{name}.eos"
    create_topic(dc2, t, 1)
    p = Producer({"bootstrap.servers": dc2, "transactional.id": unique("txn-")})
    p.init_transactions(30)
    for _ in range(2):  # records 0-2, marker 3, records 4-6, marker 7: as a mirror in exactly-once mode writes
        p.begin_transaction()
        for i in range(3):
            p.produce(t, value=f"r{i}".encode(), partition=0)
        p.commit_transaction(30)
    assert end_offsets(dc2, t) == {0: 8}
    config = load_config(write_config(tmp_path / "mm2.properties", {"dc1": dc1, "dc2": dc2},
                                      ["dc1->dc2.enabled = true"]))
    reader = make_consumer(config.cluster("dc2"), "t", {"log_level": "0"})
    try:
        assert first_visible(reader, t, 0, 3, 8, 10) == 4  # the marker is skipped
        assert first_visible(reader, t, 0, 7, 8, 10) is None  # only the trailing marker
        assert first_visible(reader, t, 0, 0, 8, 10) == 0
    finally:
        reader.close()
    at_marker, at_end, past = unique("g1-"), unique("g2-"), unique("g3-")
    commit_source_group(dc2, at_marker, t, {0: 3})
    commit_source_group(dc2, at_end, t, {0: 7})  # a caught-up group of an exactly-once target
    rows = canary(config, "dc2", [at_marker, at_end])
    assert rows[at_marker][0]["first_read"] == 4 and rows[at_marker][0]["invisible_skipped"] == 1
    assert rows[at_end][0]["first_read"] is None and rows[at_end][0]["invisible_skipped"] == 1
    commit_source_group(dc2, past, t, {0: 9})
    try:
        canary(config, "dc2", [past])
        raise AssertionError("a position past the log end must fail the canary")
    except Exception as exc:
        assert "outside [0, 8]" in str(exc)
