"""The batches data path's source side: the wire clients a flow copies whole batches with, and
:class:`WireReader`, the flow's source reader (source_reader.SourceReader) over the wire fetcher.

The consumer group still shares the partitions out (cooperative rebalances, static members, the revoke that
commits first), but every assigned partition stays paused on the consumer: the reader stands in for it where
acks.py, assignment.py, commit.py and reporting.py seek, pause, resume and ask positions, and moves the wire
fetcher instead.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, OFFSET_INVALID, Consumer, Message, TopicPartition

from mirror_core.config.client_defaults import CONSUMER_DEFAULTS, STANDING_CONSUMER_DEFAULTS
from mirror_core.config.model import ClusterConfig, FlowConfig
from mirror_core.errors import MirrorError
from mirror_core.kafka_io import log_ends_batch, log_starts_batch
from mirror_core.replication.producer_pool import batch_sender_connections
from mirror_core.replication.source_reader import Rebalance
from mirror_core.wire.fetcher import BatchFetcher, FetchLimits
from mirror_core.wire.leaders import TP
from mirror_core.wire.metadata import Brokers, Reachability
from mirror_core.wire.sender import BatchSender


def fetch_limits(source: ClusterConfig, flow: FlowConfig) -> FetchLimits:
    """The flow's consumer settings that bound a fetch, as the records path's consumer would have them."""
    s = {**CONSUMER_DEFAULTS, **STANDING_CONSUMER_DEFAULTS,
         **source.client_settings("consumer", flow.consumer_overrides)}
    return FetchLimits(max_wait_ms=int(s["fetch.wait.max.ms"]), min_bytes=int(s["fetch.min.bytes"]),
                       max_bytes=int(s["fetch.max.bytes"]), partition_max_bytes=int(s["max.partition.fetch.bytes"]),
                       check_crcs=s.get("check.crcs", "true").strip().lower() != "false")


def wire_clients(source: ClusterConfig, target: ClusterConfig, flow: FlowConfig, source_health: Reachability,
                 target_health: Reachability) -> tuple[BatchFetcher, BatchSender]:
    """The fetcher (the source, with the flow's consumer settings: TLS, SASL) and the sender (the target, with its
    producer settings; message.timeout.ms is its delivery timeout; replication.producers connections per broker),
    each telling its cluster's health whether the cluster answers."""
    consume = source.client_settings("consumer", flow.consumer_overrides)
    produce = target.client_settings("producer", flow.producer_overrides)
    # Both clusters' addresses read before either client starts its threads (a bad one leaves nothing running).
    source_brokers = Brokers(source.bootstrap_servers, consume, f"source cluster {source.alias}",
                             reachability=source_health)
    target_brokers = Brokers(target.bootstrap_servers, produce, f"target cluster {target.alias}",
                             reachability=target_health)
    timeout_ms = int(produce.get("message.timeout.ms", "120000"))
    return (BatchFetcher(source_brokers, fetch_limits(source, flow)),
            BatchSender(target_brokers, delivery_timeout_s=timeout_ms / 1000 if timeout_ms else float("inf"),
                        connections=batch_sender_connections(flow)))


#: how long a partition handed over behind batches still waiting in the sender waits before it is fetched again
#: all the same: its watermark (the lag gauge) comes from its fetches, and a target out of reach would freeze it
QUEUED_MAX_S = 1.0


class WireReader:
    """The flow's source reader (source_reader.SourceReader) for partitions the wire fetcher reads. The consumer
    keeps the group (subscribe, polls that serve its callbacks, close), and each partition assigned to it is paused
    there at once; seeks, pauses and resumes move the fetcher, and positions and watermarks are the fetcher's."""

    def __init__(self, consumer: Consumer, fetcher: BatchFetcher, source_admin: Any, start_position: str) -> None:
        self.consumer = consumer
        self.fetcher = fetcher
        self.source_admin = source_admin
        self.start_position = start_position
        #: where each assigned partition is fetched from next (after the batches handed over)
        self.positions: dict[TP, int] = {}
        self.paused: set[TP] = set()
        #: handed over and not fetched again yet: the copier holds them while too much is in flight
        self.held: set[TP] = set()
        #: fetched again from their position at this monotonic time (the source answered an error)
        self.delayed: dict[TP, float] = {}
        #: handed over while batches of theirs still waited in the sender, with the target partition they wait
        #: behind and since when: fetched again once none waits, or after QUEUED_MAX_S (:meth:`release_sent`)
        self.queued: dict[TP, tuple[TP, float]] = {}

    # -- the group, kept by the consumer ---------------------------------------------------------------------
    def subscribe(self, topics: list[str], on_assign: Rebalance | None = None, on_revoke: Rebalance | None = None,
                  on_lost: Rebalance | None = None) -> None:
        self.consumer.subscribe(topics, on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost)

    def unsubscribe(self) -> None:
        self.consumer.unsubscribe()

    def poll(self, timeout: float = -1) -> Message | None:
        """Serves the group's callbacks: every partition is paused on the consumer, so no record comes."""
        return self.consumer.poll(timeout)

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Message]:
        msgs: list[Message] = self.consumer.consume(num_messages, timeout)
        return msgs

    def memberid(self) -> str:
        member: str = self.consumer.memberid()
        return member

    def close(self) -> None:
        self.consumer.close()

    # -- the partitions, read by the fetcher -----------------------------------------------------------------

    def incremental_assign(self, partitions: list[TopicPartition]) -> None:
        self.consumer.incremental_assign(partitions)
        if not partitions:
            return
        self.consumer.pause(partitions)  # never fetched by the consumer: the fetcher reads them
        logical = [tp for tp in partitions if tp.offset < 0]
        starts = self.resolve([(tp.topic, tp.partition) for tp in logical if tp.offset == OFFSET_BEGINNING], True)
        ends = self.resolve([(tp.topic, tp.partition) for tp in logical if tp.offset != OFFSET_BEGINNING], False)
        fresh: dict[TP, int] = {}
        for tp in partitions:
            key = (tp.topic, tp.partition)
            fresh[key] = tp.offset if tp.offset >= 0 else (starts if tp.offset == OFFSET_BEGINNING else ends)[key]
            self._settle(key)
            self.paused.discard(key)
        self.positions.update(fresh)
        self.fetcher.assign(fresh)

    def resolve(self, keys: list[TP], earliest: bool) -> dict[TP, int]:
        """Each partition's log start (``earliest``) or end, from the source (one request per broker). The end is the
        last stable offset, as a read_committed consumer resets to: records of a transaction still open there are
        copied once it commits."""
        if not keys:
            return {}
        found = log_starts_batch(self.source_admin, keys) if earliest else \
            log_ends_batch(self.source_admin, keys, committed=True)
        missing = [f"{t}[{p}]" for t, p in keys if (t, p) not in found]
        if missing:
            raise MirrorError(f"the source did not say where {', '.join(missing[:5])} "
                              f"{'start' if earliest else 'end'} (retried with the flow)")
        return found

    def incremental_unassign(self, partitions: list[TopicPartition]) -> None:
        keys = [(tp.topic, tp.partition) for tp in partitions]
        self.fetcher.revoke(keys)
        for key in keys:
            self.positions.pop(key, None)
            self.fetcher.watermarks.pop(key, None)
            self.paused.discard(key)
            self._settle(key)
        self.consumer.incremental_unassign(partitions)

    def pause(self, partitions: list[TopicPartition]) -> None:
        keys = [(tp.topic, tp.partition) for tp in partitions]
        self.paused.update(keys)
        for key in keys:
            self._settle(key)
        self.fetcher.revoke(keys)

    def resume(self, partitions: list[TopicPartition]) -> None:
        again = {key: self.positions[key] for key in ((tp.topic, tp.partition) for tp in partitions)
                 if key in self.paused and key in self.positions}
        self.paused.difference_update(again)
        self.fetcher.assign(again)

    def seek(self, tp: TopicPartition) -> None:
        key = (tp.topic, tp.partition)
        self.positions[key] = tp.offset
        self._settle(key)
        if key not in self.paused:
            self.fetcher.assign({key: tp.offset})

    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        return [TopicPartition(tp.topic, tp.partition, self.positions.get((tp.topic, tp.partition), OFFSET_INVALID))
                for tp in partitions]

    def get_watermark_offsets(self, partition: TopicPartition, timeout: float = -1,
                              cached: bool = False) -> tuple[int, int]:
        if cached:
            return self.fetcher.watermarks.get((partition.topic, partition.partition), (-1, -1))
        marks: tuple[int, int] = self.consumer.get_watermark_offsets(partition, timeout=timeout, cached=False)
        return marks

    def handed_over(self, key: TP, end: int, hold: bool, behind: TP | None = None) -> None:
        """``key``'s last fetch is handed over: fetch it again from ``end`` now, or once :meth:`release` says
        (``hold``), or once no batch of the target partition ``behind`` waits in the sender (:meth:`release_sent`)."""
        self.positions[key] = end
        if hold:
            self.held.add(key)
        elif behind is not None:
            self.queued[key] = (behind, time.monotonic())
        else:
            self.fetcher.resume(key, end)

    def release(self) -> None:
        for key in self.held:
            self.fetcher.resume(key, self.positions[key])
        self.held.clear()

    def release_sent(self, waiting: Callable[[TP], int]) -> None:
        """Fetch again the partitions whose target partition has no batch waiting in the sender any more, or that
        waited QUEUED_MAX_S."""
        due = time.monotonic() - QUEUED_MAX_S
        for key in [key for key, (tp, since) in self.queued.items() if since <= due or not waiting(tp)]:
            del self.queued[key]
            self.fetcher.resume(key, self.positions[key])

    def retry(self, key: TP, delay: float) -> None:
        """Fetch ``key`` again from its position after ``delay`` seconds (:meth:`due` resumes it)."""
        self.delayed[key] = time.monotonic() + delay

    def due(self, now: float) -> None:
        for key in [k for k, at in self.delayed.items() if now >= at]:
            del self.delayed[key]
            self.fetcher.resume(key, self.positions[key])

    def _settle(self, key: TP) -> None:
        """``key`` is fetched afresh (assigned, sought) or not at all (paused, unassigned): nothing waits for it."""
        self.held.discard(key)
        self.delayed.pop(key, None)
        self.queued.pop(key, None)

