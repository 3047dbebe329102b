"""Compacted internal topics stay bounded (issue 18): progress and checkpoints are written all the time and read
whole by a restart, a translate and a failover from checkpoints. Created with small segments rolled after 10 min at
the latest (internal_topics.BOUNDED_COMPACTION); one an older version created is brought down to them, a lower value an
operator set is kept; and a fresh reader of a busy progress log reads a bounded part of it, not every record."""

from __future__ import annotations

import json
import logging
import time

import pytest
from confluent_kafka import Consumer, Producer

from mirror_core.offsets.checkpoints import ensure_checkpoints_topic
from mirror_core.stores.internal_topics import BOUNDED_COMPACTION, TopicTail
from mirror_core.stores.progress import decode_key, encode_key, ensure_progress_topic
from tests.integration.test_replication import topic_config
from tests.kafka_harness import admin, create_topic, end_offsets, unique, wait_until


def test_progress_and_checkpoints_are_created_bounded(dc2: str) -> None:
    progress, checkpoints = unique("progress"), unique("checkpoints")
    ensure_progress_topic(admin(dc2), progress, 1)
    ensure_checkpoints_topic(admin(dc2), checkpoints, 1)
    for topic in (progress, checkpoints):
        config = topic_config(dc2, topic)
        assert {k: config[k] for k in BOUNDED_COMPACTION} == BOUNDED_COMPACTION, topic
        assert config["cleanup.policy"] == "compact"


def test_an_older_versions_topic_is_brought_down_and_a_lower_value_kept(dc2: str,
                                                                        caplog: pytest.LogCaptureFixture) -> None:
    topic = unique("progress")
    # As versions before issue 18's bound created it, with segment.bytes lowered by an operator since.
    create_topic(dc2, topic, 1, {"cleanup.policy": "compact", "min.compaction.lag.ms": "60000",
                                 "segment.ms": "3600000", "segment.bytes": "2097152"})
    with caplog.at_level(logging.INFO, logger="mirror_core.stores.internal_topics"):
        ensure_progress_topic(admin(dc2), topic, 1)
    wait_until(lambda: topic_config(dc2, topic)["segment.ms"] == "600000", 10, what="the altered segment.ms")
    config = topic_config(dc2, topic)
    assert (config["min.compaction.lag.ms"], config["segment.bytes"]) == ("60000", "2097152")
    assert f"internal topic {topic}: segment.ms=600000 (was segment.ms=3600000)" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="mirror_core.stores.internal_topics"):
        ensure_progress_topic(admin(dc2), topic, 1)  # nothing left to change: nothing said
    assert topic not in caplog.text


def test_an_older_checkpoints_topic_gets_small_segments_and_the_minute_of_lag(dc2: str) -> None:
    topic = unique("checkpoints")
    create_topic(dc2, topic, 1, {"cleanup.policy": "compact"})  # as versions before the bound (and MM2) made it
    ensure_checkpoints_topic(admin(dc2), topic, 1)
    wait_until(lambda: {k: topic_config(dc2, topic)[k] for k in BOUNDED_COMPACTION} == BOUNDED_COMPACTION, 10,
               what="segment.bytes and segment.ms lowered, min.compaction.lag.ms raised from 0")


def test_a_fresh_reader_of_a_busy_progress_log_reads_a_bounded_part_of_it(dc2: str) -> None:
    topic, keys, rounds = unique("progress"), 2_000, 60
    ensure_progress_topic(admin(dc2), topic, 1)
    p = Producer({"bootstrap.servers": dc2, "linger.ms": 20, "compression.type": "none",
                  "queue.buffering.max.messages": 200_000})
    pad = "x" * 60  # about a real record's size (its "ts", "by" and "tid")
    # Written two minutes ago (CreateTime), past the minute of compaction lag: the cleaner may take every rolled
    # segment at once instead of the test waiting out the lag.
    then = int(time.time() * 1000) - 120_000
    for r in range(rounds):  # 2,000 partitions' progress, 60 commits: 120,000 records, ~14 MB
        for k in range(keys):
            p.produce(topic, key=encode_key("busy", k), value=f'{{"next":{r},"by":"{pad}"}}'.encode(), partition=0,
                      timestamp=then)
        p.poll(0)
    assert p.flush(60) == 0
    written = end_offsets(dc2, topic)[0]
    assert written == keys * rounds

    def read() -> tuple[int, dict[tuple[str, int], int]]:
        """What a restart's ProgressStore reads of the log: how many records, and the newest per partition."""
        tail = TopicTail(Consumer({"bootstrap.servers": dc2, "group.id": "t", "enable.auto.commit": False}), topic)
        try:
            records = list(tail.read_new(30))
        finally:
            tail.close()
        return len(records), {decode_key(k): json.loads(v or b"{}")["next"] for k, v in records}

    # The rolled segments are compacted to a record per partition; what is left is the active segment's.
    counted, latest = wait_until(lambda: (r := read())[0] < written // 2 and r, 90, interval=2,
                                 what="the cleaner to compact the rolled progress segments")
    assert counted < written // 2 and latest == {("busy", k): rounds - 1 for k in range(keys)}  # nothing newer lost
