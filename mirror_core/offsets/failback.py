"""Failback support: what the old primary holds that the standby never got, and where a reverse
flow starts so that only data produced after the failover flows back."""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from typing import Any

from confluent_kafka import TopicPartition

from mirror_core.clients import make_admin, make_consumer, make_producer
from mirror_core.config.model import FlowConfig, MirrorConfig
from mirror_core.kafka_io import QUIET, read_range
from mirror_core.replication.topics import TopicManager
from mirror_core.stores.internal_topics import internal_topics_limit
from mirror_core.stores.offset_syncs import flow_map_reader
from mirror_core.stores.progress import ProgressStore, ensure_progress_topic

log = logging.getLogger(__name__)


@dataclass
class UnreplicatedRange:
    topic: str
    partition: int
    first: int  # first source offset the target never received
    end: int  # source end offset (exclusive)
    records: list[dict[str, Any]]

    @property
    def count(self) -> int:
        return self.end - self.first

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "count": self.count}


def unreplicated(config: MirrorConfig, flow: FlowConfig, sample: int = 20,
                 timeout: float = 30) -> list[UnreplicatedRange]:
    """Per partition, the source records the target never received.

    They start at the flow's committed progress, moved past the records copied after the last
    progress commit (at-least-once: they are on the target already, an exact comparison says so).

    Run it when the old primary is back, before restoring the forward flow: an operator decides what
    to do with these records (re-produce them on the new primary, or discard) instead of scraping.
    ``sample`` records per partition are listed with offset, key and timestamp.
    """
    src, tgt = config.cluster(flow.source), config.cluster(flow.target)
    topics = TopicManager(flow, make_admin(src), make_admin(tgt), timeout=timeout).source_topics()
    store = ProgressStore(flow.progress_topic, make_consumer(tgt, "mirror-core.failback", QUIET), "tool")
    syncs = flow_map_reader(tgt, "mirror-core.failback", flow.source)
    consumer = make_consumer(src, "mirror-core.failback", QUIET)
    target = make_consumer(tgt, "mirror-core.failback", QUIET)
    try:
        progress = store.refresh(timeout)
        offset_map = syncs.refresh(timeout)
        out = []
        for topic, count in sorted(topics.items()):
            if flow.policy.is_heartbeats_topic(topic):
                continue
            for p in range(count):
                low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout)
                done = progress.get((topic, p))
                first = max(done if done is not None else low, low)
                if first >= high:
                    continue
                # At-least-once: records copied after the last progress commit are on the target too.
                there = offset_map.translate(topic, p, first, done).target_offset if done is not None else None
                if there is not None:
                    first = _copied_beyond(consumer, target, topic, flow.remote_topic(topic), p, first, high, there,
                                           timeout)
                if first >= high:
                    continue
                out.append(UnreplicatedRange(topic, p, first, high, _sample(consumer, topic, p, first, high,
                                                                             sample, timeout)))
        return out
    finally:
        store.close()
        syncs.close()
        consumer.close()
        target.close()


def _copied_beyond(source: Any, target: Any, topic: str, remote: str, partition: int, first: int, high: int,
                   there: int, timeout: float, limit: int = 10_000) -> int:
    """The first source offset from ``first`` on whose copy is not on the target.

    The target records from ``there`` (where the copy of ``first`` would be) are compared in order
    with the source records from ``first`` — timestamp, key and value — and the matching prefix is
    on the target already. Records produced on the target itself (identity policy) end the prefix.
    At most ``limit`` records are compared (what a mirror copies between two progress commits).
    """
    _, t_end = target.get_watermark_offsets(TopicPartition(remote, partition), timeout=timeout)
    if t_end <= there:
        return first
    copies, _ = read_range(target, remote, partition, there, t_end, min(limit, t_end - there, high - first), timeout)
    originals, source_done = read_range(source, topic, partition, first, high, len(copies) + 1, timeout)
    for original, copy in zip(originals, copies, strict=False):
        if (original.timestamp()[1], original.key(), original.value()) != \
                (copy.timestamp()[1], copy.key(), copy.value()):
            return first
        first = original.offset() + 1
    # Every source record up to the end has its copy: only markers or aborted records remain.
    return high if source_done and len(originals) <= len(copies) else first


def _sample(consumer: Any, topic: str, partition: int, first: int, end: int, limit: int,
            timeout: float) -> list[dict[str, Any]]:
    if limit <= 0:
        return []
    records, _ = read_range(consumer, topic, partition, first, end, limit, timeout)
    return [{"offset": m.offset(), "timestamp": m.timestamp()[1],
             "key": m.key().decode(errors="replace") if m.key() is not None else None} for m in records]


def seed_progress(config: MirrorConfig, flow: FlowConfig, at: str = "end",
                  timeout: float = 30) -> dict[tuple[str, int], int]:
    """Write progress for every partition of ``flow`` at the source's current end (``at='end'``).

    Used when a reverse flow is created at failover: it then starts exactly at the failover point,
    so records the standby holds from before (the old primary's own data) never flow back.
    """
    if at != "end":
        raise ValueError("only 'end' is supported")
    src, tgt = config.cluster(flow.source), config.cluster(flow.target)
    tgt_admin = make_admin(tgt)
    ensure_progress_topic(tgt_admin, flow.progress_topic, flow.internal_replication_factor)
    topics = TopicManager(flow, make_admin(src), tgt_admin, timeout=timeout).source_topics()
    consumer = make_consumer(src, "mirror-core.seed", QUIET)
    # a record per source partition at once: in batches the progress topic takes
    producer = make_producer(tgt, fits=internal_topics_limit(tgt_admin, [flow.progress_topic], f"flow {flow.name}"))
    store = ProgressStore(flow.progress_topic, make_consumer(tgt, "mirror-core.seed", QUIET), "seed")
    seeded: dict[tuple[str, int], int] = {}
    try:
        for topic, count in sorted(topics.items()):
            for p in range(count):
                _, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout)
                store.write(producer, topic, p, high)
                seeded[(topic, p)] = high
        if producer.flush(timeout) != 0:
            raise RuntimeError("progress records not acknowledged by the target")
        log.info("flow %s: seeded %d partitions at the source end", flow.name, len(seeded))
        return seeded
    finally:
        consumer.close()
        store.close()
