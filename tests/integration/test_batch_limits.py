"""Batches sized to what each remote topic accepts (its max.message.bytes on the target), against real brokers.

librdkafka does not split a batch the target refuses as too large: before, a remote topic whose limit was below
the producer's batch limit had every full batch refused and replayed record by record ("careful mode").

The data tests are the records path's (RECORDS): the batches path sends the source's batches as they are, and one
larger than its remote topic takes pauses its partition naming it (tests/integration/test_batch_path.py). The
internal records' test runs on the default path (auto: batches)."""

from __future__ import annotations

import json

import pytest
from confluent_kafka import Producer

from mirror_core.config.client_defaults import PARKED_PRODUCER_DEFAULTS, PRODUCER_DEFAULTS
from mirror_core.config.keys import DEFAULT_CONFIG_EXCLUDE
from mirror_core.config.loader import load_config
from mirror_core.offsets.checkpoints import CHECKPOINTS_TOPIC_CONFIG
from mirror_core.offsets.translate import FlowOffsets
from mirror_core.stores.map_snapshots import ROUND_KEY, SNAPSHOT_TOPIC_CONFIG, snapshot_topic
from mirror_core.stores.progress import PROGRESS_TOPIC_CONFIG, encode_key
from mirror_core.stores.records import decode_checkpoint_key, encode_checkpoint_key
from tests.integration.conftest import flow_lines
from tests.integration.test_offsets import commit_source_group
from tests.integration.test_replication import caught_up, topic_config
from tests.kafka_harness import (
    alter_topic,
    assert_same_records,
    batch_sizes,
    create_topic,
    end_offsets,
    read_all,
    topics,
    unique,
    wait_until,
    write_config,
)

REFUSED = "Message size too large"
RECORDS = "replication.data.path = records"  # producer batches built by librdkafka: the records path only


def fill(bootstrap: str, topic: str, partitions: int, count: int, batch_size: int, transactional: bool = False
         ) -> None:
    """``count`` records of ~1 KiB with keys and headers, in batches the source topic accepts (``transactional``: in
    one transaction, so that a read_committed reader gets them all at once)."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": batch_size,
                  "enable.idempotence": True, "queue.buffering.max.messages": 1_000_000,
                  **({"transactional.id": unique("fill-")} if transactional else {})})
    if transactional:
        p.init_transactions(30)
        p.begin_transaction()
    for i in range(count):
        value = (b"%08d " % i) * 114
        p.produce(topic, value=value, key=b"k%d" % i, partition=i % partitions, headers=[("seq", b"%d" % i)])
        if i % 10_000 == 0:
            p.poll(0)
    if transactional:
        p.commit_transaction(60)
    assert p.flush(60) == 0


def test_a_remote_topic_that_takes_less_than_a_producer_batch_is_copied_in_batches_it_accepts(
        dc1, dc2, clusters, name, start_mirror):
    small = f"{name}.small"
    create_topic(dc1, small, 2, {"max.message.bytes": "65536"})
    fill(dc1, small, 2, 20_000, 32_768)
    # The precondition: the mirror's producer builds batches up to 1 MiB, 16 times what the remote topic takes.
    assert int(PRODUCER_DEFAULTS["batch.size"]) >= 16 * 65536
    m = start_mirror(flow_lines(name, RECORDS))
    wait_until(lambda: caught_up(dc1, dc2, {small: f"dc1.{small}"}), 120, what="small-limit topic copied")
    assert topic_config(dc2, f"dc1.{small}")["max.message.bytes"] == "65536"
    assert_same_records(dc1, dc2, small, f"dc1.{small}")
    sizes = batch_sizes(clusters["dc2"], f"dc1.{small}")
    assert 50_000 < max(sizes) <= 65536 and len(sizes) < 20_000 / 10, "batches of what it takes, not record by record"
    assert REFUSED not in m.log() and "careful mode" not in m.log()


def test_with_one_batch_per_partition_batches_grow_to_what_each_remote_topic_takes(
        dc1, dc2, clusters, name, start_mirror):
    """Parked producers (2 here; auto's 4 over a WAN) get librdkafka's limit raised to 8 MiB: a remote topic that
    takes 4 MB gets batches over 1 MiB, one at the broker's default 1 MiB is not sent more than it takes."""
    big, usual = f"{name}.big", f"{name}.usual"
    create_topic(dc1, big, 2, {"max.message.bytes": "4000000"})
    create_topic(dc1, usual, 2)
    fill(dc1, big, 2, 12_000, 1 << 20)
    fill(dc1, usual, 2, 12_000, 1 << 20)
    m = start_mirror(flow_lines(name, "replication.producers = 2", RECORDS))
    wait_until(lambda: caught_up(dc1, dc2, {big: f"dc1.{big}", usual: f"dc1.{usual}"}), 120,
               what="both topics copied")
    assert "one batch per partition on" in m.log() and int(PARKED_PRODUCER_DEFAULTS["batch.size"]) > 4_000_000
    for topic in (big, usual):
        assert_same_records(dc1, dc2, topic, f"dc1.{topic}")
    big_sizes, usual_sizes = batch_sizes(clusters["dc2"], f"dc1.{big}"), batch_sizes(clusters["dc2"], f"dc1.{usual}")
    assert 1 << 20 < max(big_sizes) <= 4_000_000, "batches beyond librdkafka's usual 1 MiB where the topic takes them"
    assert 900_000 < max(usual_sizes) <= 1_048_588, "as much as the broker's default message.max.bytes takes"
    assert REFUSED not in m.log() and "careful mode" not in m.log()


@pytest.mark.parametrize("mode", ["at-least-once", "exactly-once"])
def test_a_limit_lowered_on_the_target_between_config_syncs_is_followed_from_the_first_refusal(
        dc1, dc2, clusters, name, start_mirror, mode):
    """An operator lowers a remote topic's max.message.bytes on the target, the topic-config sync leaving it alone
    (excluded here; otherwise until its next run, 600 s by default). Before, every batch of the producer's 1 MiB was
    refused and replayed record by record (exactly-once: a transaction per record) until that sync's next read."""
    topic, remote, before, after = f"{name}.lowered", f"dc1.{name}.lowered", 2_000, 6_000
    create_topic(dc1, topic, 2)
    fill(dc1, topic, 2, before, 1 << 20)
    lines = [line for line in flow_lines(name, RECORDS) if not line.startswith("sync.topic.configs.interval")]
    m = start_mirror([*lines, "sync.topic.configs.interval.seconds = 3600",
                      rf"config.properties.exclude = {DEFAULT_CONFIG_EXCLUDE}, max\.message\.bytes",
                      *(["exactly.once.enabled = true"] if mode == "exactly-once" else [])])
    wait_until(lambda: remote in topics(dc2) and len(read_all(dc2, remote, timeout=5)) == before, 120,
               what="the first part copied")
    assert "takes batches of up to" not in m.log()
    alter_topic(dc2, remote, {"max.message.bytes": "65536"})
    # The precondition: the second part reaches the mirror at once (one source transaction), so its batches are the
    # producer's 1 MiB, which the remote topic refuses now.
    fill(dc1, topic, 2, after, 1 << 20, transactional=True)
    # (At-least-once, the records of a refused batch before the one refused may be there twice.)
    wait_until(lambda: len(read_all(dc2, remote, timeout=5)) >= before + after, 180, what="the second part copied")
    assert_same_records(dc1, dc2, topic, remote, replayed=mode == "at-least-once")
    log = m.log()
    assert REFUSED in log and f"{remote} takes batches of up to 65536 bytes now" in log, "refused, then read again"
    assert "careful mode" not in log, [line for line in log.splitlines() if "careful" in line or "now" in line]
    if mode == "exactly-once":
        assert "replayed in batches of the topic's limit now" in log
    sizes = batch_sizes(clusters["dc2"], remote)
    assert len(sizes) < after / 10, f"{len(sizes)} batches: the second part went in batches, not record by record"


@pytest.mark.parametrize("mode", ["at-least-once", "exactly-once"])
def test_internal_records_go_in_batches_their_topics_take(dc1, dc2, clusters, name, start_mirror, tmp_path,
                                                                   mode):
    """An operator's internal topics may take less than the producers' batches (a small broker default, or
    batch.size raised for the data): progress, checkpoints and offset-map snapshots of many partitions written
    at once must still land. Before, progress went in the data producer's batches, which its topic refused at
    every commit (exactly-once: every transaction aborted), and checkpoints and snapshots in batches of the
    user's batch.size."""
    src, tgt = unique("src"), unique("tgt")  # own aliases: internal topics of this test's own
    topic, partitions, limit = f"{name}.wide", 300, 1024
    progress_topic, checkpoints = f"mirror-core.progress.{src}.internal", f"{src}.checkpoints.internal"
    snapshots = snapshot_topic(src)
    for internal, internal_config in ((progress_topic, PROGRESS_TOPIC_CONFIG), (checkpoints, CHECKPOINTS_TOPIC_CONFIG),
                                      (snapshots, SNAPSHOT_TOPIC_CONFIG)):
        create_topic(dc2, internal, 1, {**internal_config, "max.message.bytes": str(limit)})
    create_topic(dc1, topic, partitions)
    fill(dc1, topic, partitions, 3 * partitions, 1 << 20)
    group = unique("wide-")
    commit_source_group(dc1, group, topic, {p: 2 for p in range(partitions)})
    # The precondition: one commit's progress (a record per partition) is several times what its topic takes,
    # and so is one round's checkpoints (a record per partition of the group) or snapshots (one per partition).
    assert partitions * (len(encode_key(topic, partitions)) + 20) > 2 * limit
    assert partitions * len(encode_checkpoint_key(group, f"{src}.{topic}", partitions)) > 2 * limit
    config_path = write_config(tmp_path / f"{src}.properties", {src: dc1, tgt: dc2}, [
        f"{src}->{tgt}.enabled = true", f"{src}->{tgt}.topics = {topic}", "refresh.topics.interval.seconds = 2",
        "offset.flush.interval.ms = 200", "emit.heartbeats.enabled = false", "emit.checkpoints.interval.seconds = 1",
        f"{src}->{tgt}.groups = {group}", "offset.map.snapshot.interval.seconds = 1",
        *(["exactly.once.enabled = true"] if mode == "exactly-once" else []),
        # the producers' batches may reach 4 MiB (the target broker's limit is its default, 1 MiB)
        f"{tgt}.producer.batch.size = 4194304", f"{tgt}.producer.message.max.bytes = 4194304"])
    m = start_mirror([], config=config_path)
    config = load_config(config_path)
    ends = end_offsets(dc1, topic)
    wait_until(lambda: f"mirror-core.offset-syncs.{src}.internal" in topics(dc2), 60, what="internal topics created")
    wait_until(lambda: FlowOffsets.load(config, config.flows[0]).progress == {(topic, p): ends[p] for p in ends}, 120,
               what="progress of every partition at the source end")
    assert_same_records(dc1, dc2, topic, f"{src}.{topic}")
    wait_until(lambda: {decode_checkpoint_key(r.key)[2] for r in read_all(dc2, checkpoints)} == set(range(partitions)),
               60, what="a checkpoint for every partition of the group")
    wait_until(lambda: {json.loads(r.key)[1] for r in read_all(dc2, snapshots) if r.key != ROUND_KEY}
               == set(range(partitions)), 60, what="an offset-map snapshot of every partition")
    for internal in (progress_topic, checkpoints, snapshots):
        sizes = batch_sizes(clusters["dc2"], internal)
        assert max(sizes) <= limit and len(sizes) > 2, internal
    assert REFUSED not in m.log() and "too large" not in m.log().lower()
