"""Keeps a flow's offset map bounded: snapshot rounds, pruning below the source log starts, trimming.

Every ``offset.map.snapshot.interval.seconds`` a round (one at a time per flow, whatever the number of
processes: each round takes the transactional id ``mirror-core.<source>-<target>.offset-map``, which
fences any other process's round still in flight):
1. loads the map (newest snapshot round + the offset-sync log after it);
2. drops, per partition, the runs wholly below the source partition's log start (retention,
   DeleteRecords, compaction removed those records: no consumer can be there any more), and the records
   of a block below it;
3. commits the changed partitions' snapshots and the round marker in one transaction;
4. only then deletes the offset-sync log below the round's position.
Invariant (owned here): the log is never trimmed below a position that the newest committed round
does not cover, so a SIGKILL at any step leaves a map exact for every offset the source still holds.
A process whose round was fenced does not trim (its commit fails).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

from confluent_kafka import TopicPartition

from mirror_core.clients import make_admin, make_producer
from mirror_core.config.model import FlowConfig, MirrorConfig
from mirror_core.kafka_io import QUIET, log_starts_batch
from mirror_core.stores.internal_topics import internal_topics_limit
from mirror_core.stores.map_snapshots import ensure_snapshot_topic, snapshot_topic, write_round
from mirror_core.stores.offset_syncs import flow_map_reader, offset_syncs_topic

log = logging.getLogger(__name__)


@dataclass
class RoundResult:
    position: int  # offset-sync log offset the round covers (the log is trimmed below it)
    partitions: int
    changed: int
    pruned_runs: int
    runs_kept: int
    seconds: float


def prune_round(config: MirrorConfig, flow: FlowConfig, instance: str, timeout: float = 30) -> RoundResult | None:
    """One round (see the module doc). Returns None when nothing changed since the newest round."""
    began = time.monotonic()
    src, tgt = config.cluster(flow.source), config.cluster(flow.target)
    tgt_admin = make_admin(tgt)
    ensure_snapshot_topic(tgt_admin, snapshot_topic(flow.source), flow.internal_replication_factor)
    fits = internal_topics_limit(tgt_admin, [snapshot_topic(flow.source)], f"flow {flow.name}")
    producer = make_producer(tgt, dict(QUIET), enforced={
        "transactional.id": f"mirror-core.{flow.source}-{flow.target}.offset-map",
        "transaction.timeout.ms": "120000", "linger.ms": "50"}, fits=fits)  # chunks of up to 512 KiB
    producer.init_transactions(timeout)  # fences any other round in flight: it will not commit, nor trim
    reader = flow_map_reader(tgt, "mirror-core.offset-map", flow.source)
    log.info("flow %s: offset map round started", flow.name)
    try:
        offset_map = reader.refresh(timeout)
        position = reader.position
        starts = log_starts_batch(make_admin(src), offset_map.partitions, timeout)
        # Partitions read in an older snapshot version are written again in the current one.
        changed = {k: offset_map.partitions[k] for k in reader.touched | reader.loaded.legacy
                   if k in offset_map.partitions}
        pruned = 0
        for key, pm in offset_map.partitions.items():
            if key in starts:
                dropped = pm.prune(starts[key])
                if dropped:
                    pruned += dropped
                    changed[key] = pm
        if not changed and position == reader.loaded.round_position:
            log.info("flow %s: offset map round ended: nothing changed since the round at %d", flow.name, position)
            return None
        for pm in changed.values():
            pm.compact()  # what the snapshot holds folded too, down to the last few runs
        producer.begin_transaction()
        write_round(producer, snapshot_topic(flow.source), changed, reader.loaded.chunks, position, instance,
                    int(time.time() * 1000))
        producer.commit_transaction(timeout)
        log.info("flow %s: offset map round committed at %d: %d partitions changed, %d runs pruned, %d kept",
                 flow.name, position, len(changed), pruned, offset_map.entries())
        # Only now: the committed round covers everything below ``position``.
        syncs = offset_syncs_topic(flow.source)
        for fut in tgt_admin.delete_records([TopicPartition(syncs, 0, position)],
                                            request_timeout=timeout).values():
            fut.result(timeout)
        log.info("flow %s: offset-sync log trimmed below %d", flow.name, position)
        return RoundResult(position, len(offset_map.partitions), len(changed), pruned, offset_map.entries(),
                           round(time.monotonic() - began, 3))
    finally:
        reader.close()
        producer.flush(5)


class MapPruner(threading.Thread):
    """Runs :func:`prune_round` every ``offset.map.snapshot.interval.seconds``, off the replication path."""

    def __init__(self, config: MirrorConfig, flow: FlowConfig, stop: threading.Event, metrics: Any,
                 instance: str) -> None:
        super().__init__(name=f"offset map {flow.name}", daemon=True)
        self.config, self.flow, self.stop, self.metrics, self.instance = config, flow, stop, metrics, instance

    def run(self) -> None:
        while not self.stop.wait(self.flow.map_snapshot_interval_s):
            try:
                result = prune_round(self.config, self.flow, self.instance)
            except Exception as exc:  # the next round tries again; the map stays exact
                self.metrics.errors.labels(self.flow.name, "offset_map_round").inc()
                log.warning("flow %s: offset map round failed (the map stays exact, unpruned): %s",
                            self.flow.name, str(exc) or type(exc).__name__)
                continue
            if result is not None:
                self.metrics.map_runs.labels(self.flow.name).set(result.runs_kept)
                self.metrics.map_pruned.labels(self.flow.name).inc(result.pruned_runs)
