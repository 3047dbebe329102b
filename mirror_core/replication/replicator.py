"""The replicator of one flow: consume a batch from the source, produce it to the target, and
commit progress for what the target acknowledged.

Commit order (the at-least-once invariant): records are produced; a batch counts as acknowledged
only when its delivery reports prove every record landed (see batch.py); progress advances only
across acknowledged batches, in source order; progress is written to the target afterwards. A crash
at any point therefore replays records (possible duplicates) and never skips one.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    TIMESTAMP_NOT_AVAILABLE,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)

from mirror_core.clients import ClusterHealth, explain_failure, make_admin, make_consumer, make_producer
from mirror_core.config.model import FlowConfig, MirrorConfig
from mirror_core.errors import ClusterUnavailable, MirrorError
from mirror_core.metrics import Metrics
from mirror_core.replication.batch import Batch, PartitionState
from mirror_core.replication.exactly_once import SlotManager
from mirror_core.replication.heartbeats import HeartbeatEmitter, ensure_heartbeats_topic
from mirror_core.replication.topics import TopicManager
from mirror_core.stores.offset_syncs import ensure_offset_syncs_topic, offset_syncs_topic, write_sync
from mirror_core.stores.progress import ProgressStore, ensure_progress_topic

log = logging.getLogger(__name__)

PROVENANCE_HEADER = "mirror-core.provenance"
# Errors tied to one record: the partition is paused at that record and reported, never skipped.
RECORD_ERRORS = frozenset({KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.INVALID_RECORD,
                           KafkaError.RECORD_LIST_TOO_LARGE, KafkaError.INVALID_MSG,
                           KafkaError.INVALID_MSG_SIZE})
TARGET_TOPIC_ERRORS = frozenset({KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_PARTITION,
                                 KafkaError._UNKNOWN_TOPIC})
MAX_BACKOFF_S = 30.0
_BLOCKED = float("inf")


def instance_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


class FlowReplicator:
    """Runs one flow until ``stop`` is set. Not thread-safe: one thread drives it."""

    def __init__(self, config: MirrorConfig, flow: FlowConfig, metrics: Metrics, stop: threading.Event,
                 instance: str | None = None) -> None:
        self.config = config
        self.flow = flow
        self.metrics = metrics
        self.stop = stop
        self.instance = instance or instance_id()
        self.source_health = ClusterHealth(flow.source, self._on_reachability)
        self.target_health = ClusterHealth(flow.target, self._on_reachability)
        self.states: dict[tuple[str, int], PartitionState] = {}
        self._active: set[PartitionState] = set()
        self._waiting: set[PartitionState] = set()  # partitions in retry backoff
        self._subscribed: frozenset[str] = frozenset()
        self._partition_counts: dict[str, int] = {}
        self.missing_topics: dict[str, float] = {}
        self._topic_ids: dict[str, str] = {}  # source topic -> Kafka topic ID (recreation detection)
        self.events: list[dict[str, Any]] = []  # recent notable events, newest last, for /status
        self._last_heartbeat_ms = 0
        self._status: dict[str, Any] = {"flow": flow.name, "state": "starting", "partitions": []}
        self._consumer: Consumer | None = None
        self._producer: Producer | None = None
        self._progress: ProgressStore | None = None
        self._hb_producer: Producer | None = None
        self._target_meta: Consumer | None = None  # watermark look-ups on the target
        self._slots: SlotManager | None = None  # exactly-once mode only
        self._callback_error: Exception | None = None
        self._heartbeats: HeartbeatEmitter | None = None
        self._topics: TopicManager | None = None
        self._next_refresh = 0.0
        self._next_config_sync = 0.0
        self._next_commit = 0.0
        self._lbl = flow.name
        self._syncs_topic = offset_syncs_topic(flow.source)
        # Remote topics named like the source (identity policy) may have other writers: prove
        # delivery per record instead of per batch.
        self._exact_reports = flow.policy.uses_provenance

    # -- lifecycle ------------------------------------------------------------------------------
    def run(self) -> None:
        """Supervise the flow: recreate clients after an unexpected error, with backoff."""
        backoff = 1.0
        while not self.stop.is_set():
            try:
                self._run_once()
                return
            except Exception as exc:
                self.metrics.errors.labels(self._lbl, "restart").inc()
                self._set_state(f"restarting after error: {exc}")
                log.exception("flow %s: unexpected error; restarting in %.0fs", self.flow.name, backoff)
                self._close_clients(graceful=False)
                self.stop.wait(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF_S)

    def status(self) -> dict[str, Any]:
        """A snapshot for the /status endpoint (safe to call from another thread)."""
        return self._status

    def _set_state(self, state: str) -> None:
        self._status = {**self._status, "state": state}

    def _on_reachability(self, alias: str, up: bool) -> None:
        self.metrics.reachable.labels(alias).set(1 if up else 0)

    def _setup(self) -> None:
        src = self.config.cluster(self.flow.source)
        tgt = self.config.cluster(self.flow.target)
        src_admin = make_admin(src, self.source_health)
        tgt_admin = make_admin(tgt, self.target_health)
        self._topics = TopicManager(self.flow, src_admin, tgt_admin)
        backoff = 1.0
        while not self.stop.is_set():
            try:
                ensure_progress_topic(tgt_admin, self.flow.progress_topic, self.flow.internal_replication_factor)
                ensure_offset_syncs_topic(tgt_admin, self._syncs_topic, self.flow.internal_replication_factor)
                self.target_health.mark_ok()
                if self.flow.emit_heartbeats:
                    ensure_heartbeats_topic(src_admin, self.flow.heartbeats_replication_factor)
                self.source_health.mark_ok()
                break
            except Exception as exc:
                why = explain_failure(exc, (tgt_admin, self.target_health), (src_admin, self.source_health))
                self._set_state(f"waiting for clusters: {why}")
                self.metrics.errors.labels(self._lbl, "cluster_unavailable").inc()
                log.warning("flow %s: clusters not ready (%s); retrying in %.0fs", self.flow.name, why, backoff)
                self.stop.wait(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF_S)
        # Exactly-once: each owned slot has its own transactional producer (see exactly_once.py).
        self._producer = (None if self.flow.exactly_once
                          else make_producer(tgt, self.flow.producer_overrides, self.target_health))
        reader = make_consumer(tgt, f"{self.flow.worker_group_id}.progress-reader", health=self.target_health)
        self._progress = ProgressStore(self.flow.progress_topic, reader, self.instance)
        self._target_meta = make_consumer(tgt, f"{self.flow.worker_group_id}.meta", health=self.target_health)
        refresh_ms = str(int(min(self.flow.refresh_topics_interval_s * 1000, 30000)))
        self._consumer = make_consumer(
            src, self.flow.worker_group_id, self.flow.consumer_overrides, self.source_health,
            enforced={"topic.metadata.refresh.interval.ms": refresh_ms,
                      "auto.offset.reset": self.flow.start_position})
        if self.flow.exactly_once:
            self._slots = SlotManager(self)
        if self.flow.emit_heartbeats:
            self._hb_producer = make_producer(src, health=self.source_health,
                                              enforced={"linger.ms": "0", "message.timeout.ms": "30000"})
            self._heartbeats = HeartbeatEmitter(self._hb_producer, self.flow.source, self.flow.target,
                                                self.flow.heartbeats_interval_s)

    def _run_once(self) -> None:
        self._setup()
        if self.stop.is_set():
            self._close_clients(graceful=False)
            return
        assert self._consumer is not None
        consumer, producer, slots = self._consumer, self._producer, self._slots
        batch_max = self.flow.batch_max_records
        max_in_flight = self.flow.max_in_flight_records
        self._set_state("running")
        log.info("flow %s: replicating (instance %s, group %s)", self.flow.name, self.instance,
                 self.flow.worker_group_id)
        try:
            while not self.stop.is_set():
                now = time.monotonic()
                if now >= self._next_refresh:
                    self._refresh_topics(now)
                if self._heartbeats is not None:
                    self._heartbeats.maybe_emit(now)
                self._resume_due(now)
                if slots is not None:
                    slots.poll()
                in_flight = slots.in_flight() if slots is not None else len(producer)  # type: ignore[arg-type]
                if in_flight >= max_in_flight:
                    self._poll_producers(0.05)  # back-pressure: let the target catch up
                else:
                    # A short wait keeps latency low at light load; under backlog the batch fills at once.
                    msgs = consumer.consume(batch_max, 0.02)
                    self.raise_callback_error()
                    if msgs:
                        self._replicate(msgs)
                    self._poll_producers(0)
                self.collect()
                if now >= self._next_commit:
                    self._advance_idle()
                    self._commit()
                    self._publish_status()
                    self._next_commit = now + self.flow.commit_interval_ms / 1000.0
        finally:
            self._close_clients(graceful=True)

    def _close_clients(self, graceful: bool) -> None:
        """Graceful: flush the target, commit final progress, leave the group. Idempotent."""
        consumer, producer = self._consumer, self._producer
        try:
            if self._slots is not None:
                self._set_state("stopping")
                slots, self._slots = self._slots, None
                slots.close(graceful)
            if graceful and producer is not None:
                self._set_state("stopping")
                self._commit_durably()
            if consumer is not None:
                consumer.close()  # runs on_revoke, which commits again (a no-op by then)
                self._consumer = None
        except Exception:
            log.exception("flow %s: error while closing", self.flow.name)
        finally:
            if self._progress is not None:
                self._progress.close()
                self._progress = None
            if self._target_meta is not None:
                self._target_meta.close()
                self._target_meta = None
            if self._hb_producer is not None:
                self._hb_producer.flush(2)
                self._hb_producer = None
            self._producer = None
            self._consumer = None
            self._heartbeats = None
            self.states.clear()
            self._active.clear()
            self._waiting.clear()
            self._subscribed = frozenset()
            self._next_refresh = 0.0
            self._set_state("stopped" if graceful else self._status.get("state", "stopped"))

    # -- topics and assignment -------------------------------------------------------------------
    def _refresh_topics(self, now: float) -> None:
        """Discover source topics, create/grow their remote topics, subscribe, then sync configs.

        A topic the target rejects (one of its configs, or the topic itself) is reported per topic
        (log, errors metric, /status event) and never stops the others: configs are synced after
        subscribing, and a remote topic the target refuses to create is left out of the subscription.
        """
        assert self._topics is not None and self._consumer is not None
        topics = self._topics
        try:
            wanted = topics.source_topics()
            topics.ensure_remote(wanted)
            for remote in topics.recreated_remote:
                self._report("remote_topic_recreated", {"at": time.time(), "topic": remote,
                                                        "event": "remote topic recreated",
                                                        "detail": f"{remote} was missing on {self.flow.target}"})
            topics.recreated_remote.clear()
            self.source_health.mark_ok()
            self.target_health.mark_ok()
        except (ClusterUnavailable, KafkaException) as exc:
            self.metrics.errors.labels(self._lbl, "topic_refresh").inc()
            why = explain_failure(exc, (self._topics.source, self.source_health),
                                  (self._topics.target, self.target_health))
            log.warning("flow %s: topic refresh failed (%s); retrying in 5s", self.flow.name, why)
            self._next_refresh = now + 5.0
            return
        try:
            ids = self._topics.source_topic_ids(sorted(wanted))
        except KafkaException as exc:
            log.warning("flow %s: topic IDs unavailable (%s)", self.flow.name, exc)
            ids = {}
        for topic, tid in ids.items():
            old_id = self._topic_ids.get(topic)
            if old_id is not None and old_id != tid:
                self._on_recreated(topic, old_id, tid)
        self._topic_ids.update(ids)
        for gone in sorted(self._subscribed - set(wanted)):
            if gone not in self.missing_topics:
                self.missing_topics[gone] = time.time()
                self.metrics.errors.labels(self._lbl, "source_topic_missing").inc()
                log.error("flow %s: source topic %s disappeared (or no longer matches the filters); "
                          "it is no longer mirrored", self.flow.name, gone)
        for back in set(wanted) & set(self.missing_topics):
            del self.missing_topics[back]
        self.metrics.topics.labels(self._lbl).set(len(wanted))
        # No remote topic, no replication (records must land in the same partition of an existing topic).
        ready = {t: n for t, n in wanted.items() if t not in topics.uncreatable}
        self._partition_counts = ready  # exactly-once slots take partitions of these topics only
        if self._slots is not None:
            self._subscribed = frozenset(ready)
            self._slots.reconcile(ready)
        elif frozenset(ready) != self._subscribed:
            self._subscribed = frozenset(ready)
            if ready:
                self._consumer.subscribe(sorted(ready), on_assign=self.guarded(self._on_assign),
                                         on_revoke=self.guarded(self._on_revoke), on_lost=self.guarded(self._on_lost))
            else:
                self._consumer.unsubscribe()
            log.info("flow %s: subscribed to %d topics", self.flow.name, len(ready))
        if now >= self._next_config_sync:
            try:
                topics.sync_configs(sorted(ready))
                self._next_config_sync = now + self.flow.sync_topic_configs_interval_s
            except (ClusterUnavailable, KafkaException) as exc:  # retried at the next refresh
                self.metrics.errors.labels(self._lbl, "topic_config").inc()
                log.warning("flow %s: topic config sync failed (%s); retrying at the next refresh", self.flow.name,
                            exc)
        self._report_problems()  # configs or topics the target rejected
        interval = self.flow.refresh_topics_interval_s if self.flow.refresh_topics else 3600.0
        if topics.uncreatable:  # the cause may pass (a target broker down): try again soon
            interval = min(interval, 30.0)
        self._next_refresh = now + interval

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.take(partitions, self._producer)

    def take(self, partitions: list[TopicPartition], producer: Producer | None, slot: int | None = None) -> None:
        """Start replicating ``partitions``: remote partitions first, then resume from stored progress."""
        assert self._topics is not None and self._progress is not None and self._consumer is not None
        needed: dict[str, int] = {}
        for tp in partitions:
            needed[tp.topic] = max(needed.get(tp.topic, 0), tp.partition + 1,
                                   self._partition_counts.get(tp.topic, 0))
        # Remote partitions must exist before a record can land in the same partition number.
        deadline = time.monotonic() + 120
        while True:
            try:
                self._topics.ensure_remote(needed)
                refused = sorted(t for t in needed if t in self._topics.uncreatable)
                if refused:
                    raise MirrorError(f"the target refuses to create the remote topics of {', '.join(refused)}")
                if producer is not None:
                    # The producer must know the partitions too (they may have grown since it last looked).
                    for topic in needed:
                        producer.list_topics(self.flow.remote_topic(topic), timeout=10)
                entries = self._progress.refresh()
                ids = self._topics.source_topic_ids(sorted(needed))
                break
            except Exception as exc:
                if time.monotonic() > deadline or self.stop.is_set():
                    raise
                log.warning("flow %s: cannot prepare assigned partitions (%s); retrying", self.flow.name, exc)
                time.sleep(2)
            finally:
                self._report_problems()  # e.g. a remote topic created without a config
        for topic, tid in ids.items():
            # Partitions of this topic we already own were read from the old topic if it changed.
            old_id = self._topic_ids.get(topic)
            if old_id is not None and old_id != tid:
                self._on_recreated(topic, old_id, tid)
        self._topic_ids.update(ids)
        for tp in partitions:
            resume = entries.get((tp.topic, tp.partition))
            stored_id, current_id = self._progress.topic_id(tp.topic, tp.partition), self._topic_ids.get(tp.topic)
            if resume is not None and stored_id and current_id and stored_id != current_id:
                # The stored position belongs to a deleted topic of the same name: resuming there would
                # silently skip (or, past the end, silently reset). Copy the new topic from its start.
                self._report_recreated(tp.topic, stored_id, current_id, [tp.partition])
                resume = None
                tp.offset = OFFSET_BEGINNING
            else:
                tp.offset = resume if resume is not None else (
                    OFFSET_BEGINNING if self.flow.start_position == "earliest" else OFFSET_END)
            st = PartitionState(tp.topic, tp.partition, self.flow.remote_topic(tp.topic), resume,
                                self.flow.policy.is_heartbeats_topic(tp.topic), producer, slot)
            self.states[(tp.topic, tp.partition)] = st
        self._consumer.incremental_assign(partitions)
        self.metrics.assigned.labels(self._lbl).set(len(self.states))
        log.info("flow %s: assigned %s", self.flow.name, _describe(partitions))

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Cooperative revocation: finish in-flight work and commit before the next owner starts."""
        if self._producer is not None:
            revoked = [self.states[k] for k in ((tp.topic, tp.partition) for tp in partitions) if k in self.states]
            self._commit_durably(revoked)
        self._drop(partitions)
        consumer.incremental_unassign(partitions)
        log.info("flow %s: revoked %s", self.flow.name, _describe(partitions))

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Lost (session timeout): another instance may own them already, so commit nothing."""
        self._drop(partitions)
        consumer.incremental_unassign(partitions)
        log.warning("flow %s: lost %s", self.flow.name, _describe(partitions))

    def guarded(self, callback: Callable[[Consumer, list[TopicPartition]], None]
                ) -> Callable[[Consumer, list[TopicPartition]], None]:
        """Wrap a rebalance callback: librdkafka would mangle an exception raised inside it, so it is
        kept and re-raised by :meth:`raise_callback_error` once ``consume`` returns."""

        def wrapper(consumer: Consumer, partitions: list[TopicPartition]) -> None:
            try:
                callback(consumer, partitions)
            except Exception as exc:
                self._callback_error = exc

        return wrapper

    def raise_callback_error(self) -> None:
        exc, self._callback_error = self._callback_error, None
        if exc is not None:
            raise MirrorError(f"rebalance callback failed: {exc}") from exc

    @property
    def partition_counts(self) -> dict[str, int]:
        return self._partition_counts

    def _poll_producers(self, timeout: float) -> None:
        if self._slots is not None:
            for p in self._slots.producers.values():
                p.poll(0)
            if timeout:
                time.sleep(timeout)
        elif self._producer is not None:
            self._producer.poll(timeout)

    def drop_states(self, states: list[PartitionState]) -> None:
        """Stop replicating these partitions (exactly-once: their slot was released)."""
        if not states:
            return
        tps = [TopicPartition(st.topic, st.partition) for st in states]
        self._drop(tps)
        if self._consumer is not None:
            self._consumer.incremental_unassign(tps)
        log.info("flow %s: released %s", self.flow.name, _describe(tps))

    def rewind_to(self, st: PartitionState, pos: int, careful: bool, backoff: bool) -> None:
        self._rewind(st, None, careful=careful, backoff=backoff, to=pos)

    def _drop(self, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            st = self.states.pop((tp.topic, tp.partition), None)
            if st is not None:
                self._active.discard(st)
                self._waiting.discard(st)
                for metric in (self.metrics.lag, self.metrics.position, self.metrics.paused):
                    metric.labels(self._lbl, st.topic, str(st.partition)).set(0)
        self.metrics.assigned.labels(self._lbl).set(len(self.states))

    # -- the hot path ----------------------------------------------------------------------------
    def _replicate(self, msgs: list[Message]) -> None:
        n = len(msgs)
        i = 0
        while i < n:
            m = msgs[i]
            err = m.error()
            if err is not None:
                self._consume_error(err)
                i += 1
                continue
            topic = m.topic()
            partition = m.partition()
            j = i + 1
            while j < n:
                mj = msgs[j]
                if mj.partition() != partition or mj.error() is not None or mj.topic() != topic:
                    break
                j += 1
            st = self.states.get((topic, partition))
            if st is not None and st.paused_reason is None and st.retry_at == 0.0:
                self._produce_run(st, msgs[i:j])
            i = j

    def _produce_run(self, st: PartitionState, run: list[Message]) -> None:
        """Produce one run of consecutive records of one partition."""
        if st.next is not None and run[0].offset() < st.next:
            # Records from before a rewind/seek: already handled.
            run = [m for m in run if m.offset() >= st.next]
            if not run:
                return
        end = run[-1].offset() + 1
        if self.flow.policy.uses_provenance:
            run = self._with_provenance(run)
        if st.origin is None and run:
            st.origin = run[0].offset()
        if self._slots is not None:
            self._slots.ensure_txn(st)
        if st.careful:
            self._produce_careful(st, run, end)
            return
        if self._exact_reports:
            self._produce_exact(st, run, end)
            return
        batch = Batch(st.gen, run[0].offset() if run else end)
        batch.next = end
        st.next = end
        st.pending.append(batch)
        self._active.add(st)
        if not run:
            return
        produce = st.producer.produce
        remote = st.remote
        partition = st.partition
        last = len(run) - 1
        if end - batch.first != len(run):
            batch.gaps = _source_gaps(run)
        size = 0
        for k, m in enumerate(run):
            value = m.value()
            key = m.key()
            ts_type, ts = m.timestamp()
            if k == 0:
                cb = batch.on_single if last == 0 else batch.on_first
                batch.pending += 1
            elif k == last:
                cb = batch.on_last
                batch.pending += 1
                batch.ts_last = ts
            else:
                cb = None
            while True:
                try:
                    produce(remote, value, key, partition=partition, on_delivery=cb,
                            timestamp=0 if ts_type == TIMESTAMP_NOT_AVAILABLE else ts, headers=m.headers())
                    break
                except BufferError:
                    st.producer.poll(0.05)
                except KafkaException as exc:
                    if cb is not None:
                        batch.pending -= 1
                    self._sync_failure(st, batch, k, m, exc.args[0], size)
                    return
            if value is not None:
                size += len(value)
            if key is not None:
                size += len(key)
        if last == 0:
            batch.ts_last = run[0].timestamp()[1]
        batch.count = len(run)
        batch.size = size

    def _produce_exact(self, st: PartitionState, run: list[Message], end: int) -> None:
        """A delivery report per record: for remote topics other writers share (identity policy),
        where the first/last contiguity proof of a batch cannot hold."""
        produce = st.producer.produce
        self._active.add(st)
        for m in run:
            off = m.offset()
            b = Batch.record(st.gen, off, reported=True)
            value, key = m.value(), m.key()
            ts_type, b.ts_last = m.timestamp()
            b.size = (len(value) if value is not None else 0) + (len(key) if key is not None else 0)
            st.pending.append(b)
            while True:
                try:
                    produce(st.remote, value, key, partition=st.partition, on_delivery=b.on_single,
                            timestamp=0 if ts_type == TIMESTAMP_NOT_AVAILABLE else b.ts_last, headers=m.headers())
                    break
                except BufferError:
                    st.producer.poll(0.05)
                except KafkaException as exc:
                    b.pending = 0
                    self._sync_failure(st, b, 0, m, exc.args[0], 0)
                    return
        # Records filtered out at the end of the run (provenance) still advance the position.
        tail = Batch(st.gen, end)
        st.pending.append(tail)
        st.next = end

    def _sync_failure(self, st: PartitionState, batch: Batch, k: int, m: Message, err: KafkaError,
                      size: int) -> None:
        """produce() refused record ``k`` of a run: records before it are queued, it is not.

        The queued prefix is verified (flush, then the remote partition must end exactly ``k``
        records after the first one); the refused record is queued as a failed single-record batch
        so that a record-level error pauses the partition exactly there, with no replay.
        """
        assert self._target_meta is not None
        st.retry_at = _BLOCKED  # no more records until _collect handles the failure
        offset = m.offset()
        batch.count, batch.next, batch.size = k, offset, size
        st.next = offset
        if k > 0:
            st.producer.flush(30)
            verified = False
            if batch.err is None and batch.done and batch.t_first >= 0:
                try:
                    _, high = self._target_meta.get_watermark_offsets(
                        TopicPartition(st.remote, st.partition), timeout=10)
                    verified = high == batch.t_first + k
                except KafkaException:
                    verified = False
            if verified:
                batch.t_last = batch.t_first + k - 1
                batch.acked_at = time.time()
            else:
                batch.fail(err)
                return
        refused = Batch.record(st.gen, offset, reported=False)
        refused.fail(err)
        st.pending.append(refused)
        st.careful = err.code() in RECORD_ERRORS  # a record-level error pauses right at this record

    def _produce_careful(self, st: PartitionState, run: list[Message], end: int) -> None:
        """One record at a time, each flushed and acknowledged on its own, to pinpoint a bad record."""
        producer = st.producer
        self._active.add(st)
        for m in run:
            off = m.offset()
            batch = Batch.record(st.gen, off, reported=True)
            ts_type, ts = m.timestamp()
            batch.ts_last = ts
            st.pending.append(batch)
            try:
                producer.produce(st.remote, m.value(), m.key(), partition=st.partition,
                                 on_delivery=batch.on_single,
                                 timestamp=0 if ts_type == TIMESTAMP_NOT_AVAILABLE else ts, headers=m.headers())
            except KafkaException as exc:
                batch.pending = 0
                batch.fail(exc.args[0])
            except BufferError:
                batch.pending = 0
                batch.fail(KafkaError(KafkaError._QUEUE_FULL))
            if batch.pending:
                producer.flush(30)
            if batch.err is not None or batch.pending:
                st.next = off + 1
                st.retry_at = _BLOCKED  # no more records until _collect handles the failure
                return
            st.next = off + 1
            if self._slots is not None:
                # Exactly-once: one transaction per record, so a bad record aborts only itself.
                self._slots.commit(st.slot)
                if st.careful is False or st.paused_reason is not None:
                    return
                self._slots.ensure_txn(st)
        # Trailing records filtered out (provenance) still advance the position.
        tail = Batch(st.gen, end)
        st.pending.append(tail)
        st.next = end
        st.careful = False

    def _with_provenance(self, run: list[Message]) -> list[Message]:
        """Identity policy: drop records that already passed through the target; tag the rest."""
        out = []
        source, target = self.flow.source, self.flow.target
        for m in run:
            headers = m.headers() or []
            chain = ""
            for k, v in headers:
                if k == PROVENANCE_HEADER and v is not None:
                    chain = v.decode() if isinstance(v, bytes) else str(v)
            hops = chain.split(",") if chain else []
            if target in hops:
                continue
            new_headers = [(k, v) for k, v in headers if k != PROVENANCE_HEADER]
            new_headers.append((PROVENANCE_HEADER, ",".join([*hops, source]).encode()))
            m.set_headers(new_headers)
            out.append(m)
        return out

    def _consume_error(self, err: KafkaError) -> None:
        code = err.code()
        if code == KafkaError._PARTITION_EOF:
            return
        self.metrics.errors.labels(self._lbl, "consume").inc()
        if code in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC):
            self._next_refresh = min(self._next_refresh, time.monotonic() + 1.0)
        log.warning("flow %s: consumer error: %s", self.flow.name, err.str())

    # -- acknowledgements and progress -----------------------------------------------------------
    def collect(self) -> None:
        """Advance ``acked`` over finished batches, in source order; handle failed ones."""
        if not self._active:
            return
        lbl = self._lbl
        finished = []
        for st in self._active:
            q = st.pending
            while q:
                b = q[0]
                if not b.done:
                    break
                q.popleft()
                if b.landed:
                    st.acked = b.next
                    st.map_landed(b)
                    if b.count:
                        st.backoff = 0.5  # records landed: the target is healthy again
                        part = str(st.partition)
                        self.metrics.records.labels(lbl, st.topic, part).inc(b.count)
                        self.metrics.bytes.labels(lbl, st.topic, part).inc(b.size)
                        if b.ts_last > 0 and b.acked_at:
                            self.metrics.latency.labels(lbl).observe(max(0.0, b.acked_at - b.ts_last / 1000.0))
                            if st.is_heartbeat:
                                self._last_heartbeat_ms = max(self._last_heartbeat_ms, b.ts_last)
                    continue
                self._on_batch_failure(st, b)
                break
            if not q:
                finished.append(st)
        for st in finished:
            self._active.discard(st)

    def _on_batch_failure(self, st: PartitionState, b: Batch) -> None:
        if self._slots is not None:
            self._slots.fail(st, b)
            return
        err = b.err
        code = err.code() if err is not None else None
        where = f"{st.topic}[{st.partition}]"
        if code in RECORD_ERRORS:
            if st.careful and b.count <= 1:
                # Every record before this one is acknowledged (careful mode is one record at a time).
                st.acked = b.first
                self.pause(st, f"record at offset {b.first} rejected by target topic {st.remote}: "
                                f"{err.str() if err else ''} (partition paused; fix the target limit, "
                                "e.g. max.message.bytes, and restart)")
                return
            log.warning("flow %s: %s: %s; replaying in careful mode", self.flow.name, where,
                        err.str() if err else "")
            self._rewind(st, b, careful=True, backoff=False)
            return
        if err is None:
            # Both ends acknowledged but the target offsets are not contiguous: another writer
            # interleaved or a record in the middle failed. Replay record by record to be sure.
            self.metrics.errors.labels(self._lbl, "non_contiguous").inc()
            log.warning("flow %s: %s: target offsets %d..%d for %d records; replaying in careful mode",
                        self.flow.name, where, b.t_first, b.t_last, b.count)
            self._rewind(st, b, careful=True, backoff=False)
            return
        self.metrics.errors.labels(self._lbl, "produce").inc()
        if code in TARGET_TOPIC_ERRORS:
            self._next_refresh = 0.0  # recreate the remote topic on the next loop
            with contextlib.suppress(KafkaException):
                st.producer.list_topics(st.remote, timeout=5)  # and refresh the producer's view of it
        log.warning("flow %s: %s: delivery failed (%s); retrying from offset %s in %.1fs",
                    self.flow.name, where, err.str(), st.acked, st.backoff)
        self._rewind(st, b, careful=False, backoff=True)

    def _rewind(self, st: PartitionState, failed: Batch | None, careful: bool, backoff: bool,
                to: int | None = None) -> None:
        """Forget in-flight batches and re-read from ``to`` (default: the last acknowledged offset).

        ``failed`` is the oldest unacknowledged batch: where to restart when nothing was acked yet.
        """
        st.gen += 1
        if to is not None:
            pos = to
        elif st.acked is not None:
            pos = st.acked
        else:
            assert failed is not None
            pos = failed.first
        st.pending.clear()
        st.careful = careful
        st.next = pos
        st.retry_at = 0.0
        assert self._consumer is not None
        tp = TopicPartition(st.topic, st.partition, pos)
        if backoff:
            st.retry_at = time.monotonic() + st.backoff
            st.backoff = min(st.backoff * 2, MAX_BACKOFF_S)
            self._waiting.add(st)
            self._consumer.pause([tp])
        self._seek(tp)

    def _seek(self, tp: TopicPartition) -> None:
        assert self._consumer is not None
        deadline = time.monotonic() + 10
        while True:
            try:
                self._consumer.seek(tp)
                return
            except KafkaException:
                # The fetcher may not have started yet for a fresh assignment.
                if time.monotonic() > deadline:
                    raise
                self._consumer.consume(0, 0.1)

    def _resume_due(self, now: float) -> None:
        for st in [s for s in self._waiting if now >= s.retry_at]:
            self._waiting.discard(st)
            if st.paused_reason is None and (st.topic, st.partition) in self.states:
                st.retry_at = 0.0
                assert self._consumer is not None
                self._consumer.resume([st.tp])

    def _report(self, kind: str, event: dict[str, Any]) -> None:
        """Count an error of ``kind`` and keep ``event`` among the last 20 shown in /status."""
        self.metrics.errors.labels(self._lbl, kind).inc()
        self.events = [*self.events[-19:], event]

    def _report_problems(self) -> None:
        assert self._topics is not None
        for problem in self._topics.take_problems():
            self._report(problem.error_kind, problem.event())

    def _report_recreated(self, topic: str, old_id: str, new_id: str, partitions: list[int]) -> None:
        message = (f"source topic {topic} was deleted and recreated (topic ID {old_id} -> {new_id}): replicating "
                   f"the new topic from its beginning into {self.flow.remote_topic(topic)}, after the records "
                   "already there (partitions " + ", ".join(map(str, sorted(partitions))) + ")")
        log.error("flow %s: %s", self.flow.name, message)
        self._report("source_topic_recreated", {"at": time.time(), "topic": topic, "event": "source topic recreated",
                                                "detail": message})

    def _on_recreated(self, topic: str, old_id: str, new_id: str) -> None:
        """A topic we own was recreated while we ran: restart its partitions at the new beginning."""
        assert self._consumer is not None
        owned = [st for st in self.states.values() if st.topic == topic]
        self._report_recreated(topic, old_id, new_id, [st.partition for st in owned])
        for st in owned:
            try:
                low, _ = self._consumer.get_watermark_offsets(st.tp, timeout=10)
            except KafkaException:
                low = 0
            # Positions of the old topic mean nothing now: forget them before the explicit rewind.
            st.acked = st.committed = st.origin = None
            st.forget_map()
            self.rewind_to(st, max(low, 0), careful=False, backoff=False)

    def pause(self, st: PartitionState, reason: str) -> None:
        assert self._consumer is not None
        st.paused_reason = reason
        st.gen += 1
        st.pending.clear()
        self._consumer.pause([st.tp])
        self.metrics.paused.labels(self._lbl, st.topic, str(st.partition)).set(1)
        self.metrics.errors.labels(self._lbl, "partition_paused").inc()
        log.error("flow %s: %s[%d] paused: %s", self.flow.name, st.topic, st.partition, reason)

    def _advance_idle(self) -> None:
        """Move idle partitions past records the consumer skipped (transaction markers, aborted data).

        Only when everything consumed is acknowledged: the consumer's position is then the next
        offset to read, and nothing between ``acked`` and it was a record to replicate.
        """
        assert self._consumer is not None
        idle = [st for st in self.states.values()
                if not st.pending and st.acked is not None and st.next == st.acked
                and not st.careful and st.paused_reason is None and st.retry_at == 0.0]
        if not idle:
            return
        try:
            positions = self._consumer.position([st.tp for st in idle])
        except KafkaException:
            return
        for st, tp in zip(idle, positions, strict=True):
            if tp.offset is not None and st.acked is not None and tp.offset > st.acked:
                self._map_skipped(st, tp.offset)
                st.acked = st.next = tp.offset

    def _map_skipped(self, st: PartitionState, position: int) -> None:
        """Record where the target stands at ``position`` after skipped source offsets.

        Without this entry the map's last run would extend over the skipped offsets, and a group
        committed past them (a caught-up consumer of a transactional source) would translate
        beyond the target's log end.
        """
        if st.t_next is not None:
            target_next = st.t_next
        elif self._slots is None and self._target_meta is not None and not self._exact_reports:
            # (Not with provenance/identity: applications may write the remote topic too.)
            # Nothing landed since assignment: with every record acknowledged and this instance the
            # partition's only writer, the remote log end is where the next copy lands.
            try:
                target_next = self._target_meta.get_watermark_offsets(
                    TopicPartition(st.remote, st.partition), timeout=5)[1]
            except KafkaException:
                return
        else:
            return
        st.delta = target_next - position
        st.t_next = target_next
        st.syncs.append((position, target_next))

    def _commit(self, states: list[PartitionState] | None = None) -> None:
        """Write progress for acknowledged offsets (never beyond what the target acknowledged)."""
        if self._slots is not None:
            self._slots.commit_all()
            return
        if self._producer is None or self._progress is None:
            return
        for st in states if states is not None else list(self.states.values()):
            if st.acked is None:
                continue
            try:
                progress = self._durable_map_position(st, self._producer)
                if progress is None or progress == st.committed:
                    continue

                def on_delivery(err: KafkaError | None, _msg: object, st: PartitionState = st) -> None:
                    if err is not None:
                        st.committed = None  # retried at the next commit
                        self.metrics.errors.labels(self._lbl, "progress_commit").inc()

                self._progress.write(self._producer, st.topic, st.partition, progress, on_delivery,
                                     self._topic_ids.get(st.topic))
                st.committed = progress
            except BufferError:
                break
        self._producer.poll(0)

    def _durable_map_position(self, st: PartitionState, producer: Producer) -> int | None:
        """At-least-once: how far progress may go now — never past a record whose offset-map entry
        the target has not acknowledged (the map and progress are different partitions, so one
        could land without the other). New entries are sent here; progress covers them from the
        next commit on, once acknowledged.
        """
        if st.syncs_in_flight == 0:
            if st.syncs:
                entries, cover, gen = list(st.syncs), st.acked, st.map_gen
                st.syncs.clear()
                outcome = {"left": len(entries), "failed": False}

                def on_sync(err: KafkaError | None, _msg: object) -> None:
                    if gen != st.map_gen:
                        return  # the map was reset since: these entries no longer matter
                    outcome["left"] -= 1
                    st.syncs_in_flight -= 1
                    if err is not None and not outcome["failed"]:
                        outcome["failed"] = True
                        st.syncs[:0] = entries  # sent again at the next commit
                        self.metrics.errors.labels(self._lbl, "offset_sync").inc()
                    if outcome["left"] == 0 and not outcome["failed"]:
                        st.map_durable = cover

                st.syncs_in_flight = len(entries)
                for i, (source, target) in enumerate(entries):
                    try:
                        write_sync(producer, self._syncs_topic, st.topic, st.partition, source, target, on_sync)
                    except BufferError:
                        # Queue full: what was not produced gets no callback; send it next time.
                        unsent = len(entries) - i
                        st.syncs_in_flight -= unsent
                        outcome["left"] -= unsent
                        outcome["failed"] = True
                        st.syncs[:0] = entries
                        raise
            else:
                st.map_durable = st.acked  # every entry below acked is acknowledged
        return st.map_durable

    def _commit_durably(self, states: list[PartitionState] | None = None, timeout: float = 40.0) -> None:
        """Flush and commit until the progress covers every acknowledged record (map entries must
        land before progress covers them, so it takes at least two rounds), within ``timeout``."""
        assert self._producer is not None
        deadline = time.monotonic() + timeout
        todo = states if states is not None else list(self.states.values())
        while True:
            self._producer.flush(max(0.1, min(30.0, deadline - time.monotonic())))
            self.collect()
            self._commit(states)
            settled = all(st.acked is None or (not st.syncs and st.syncs_in_flight == 0
                                               and st.committed == st.acked) for st in todo)
            if settled or time.monotonic() >= deadline:
                break
        self._producer.flush(max(0.1, min(10.0, deadline - time.monotonic())))

    def write_progress(self, st: PartitionState, producer: Producer, on_delivery: Any = None) -> int:
        """Offset-map entries first, then progress: progress never covers a record the map does not.

        Returns the offset written; the caller marks it committed once it is durable (acknowledged,
        or exactly-once: its transaction committed).
        """
        assert self._progress is not None and st.acked is not None
        acked = st.acked
        for source, target in st.syncs:
            write_sync(producer, self._syncs_topic, st.topic, st.partition, source, target)
        st.syncs.clear()
        self._progress.write(producer, st.topic, st.partition, acked, on_delivery, self._topic_ids.get(st.topic))
        return acked

    def _publish_status(self) -> None:
        assert self._consumer is not None
        parts = []
        lbl = self._lbl
        for st in list(self.states.values()):
            try:
                low, high = self._consumer.get_watermark_offsets(st.tp, cached=True)
            except KafkaException:
                low, high = -1, -1
            # Exactly-once: only committed records are visible to read_committed consumers, so
            # lag counts from the committed position, not from what the open transaction holds.
            done = st.committed if self._slots is not None else st.acked
            pos = done if done is not None else (low if low >= 0 else None)
            lag = max(0, high - pos) if high >= 0 and pos is not None else None
            part = str(st.partition)
            if pos is not None:
                self.metrics.position.labels(lbl, st.topic, part).set(pos)
            if lag is not None:
                self.metrics.lag.labels(lbl, st.topic, part).set(lag)
            parts.append({"topic": st.topic, "partition": st.partition, "remote": st.remote,
                          "position": pos, "end": high if high >= 0 else None, "lag": lag,
                          "paused": st.paused_reason, "careful": st.careful})
        if self._last_heartbeat_ms:
            self.metrics.heartbeat_age.labels(lbl).set(max(0.0, time.time() - self._last_heartbeat_ms / 1000))
        self._status = {
            "flow": self.flow.name, "state": self._status.get("state"), "instance": self.instance,
            "partitions": sorted(parts, key=lambda p: (p["topic"], p["partition"])),
            "missing_topics": sorted(self.missing_topics),
            "events": list(self.events),
            "source_reachable": self.source_health.reachable,
            "target_reachable": self.target_health.reachable,
            "last_heartbeat_ms": self._last_heartbeat_ms or None,
        }


def _source_gaps(run: list[Message]) -> list[tuple[int, int]]:
    """(index, offset) of records whose source offset does not follow the previous one."""
    gaps = []
    prev = run[0].offset()
    for i in range(1, len(run)):
        off = run[i].offset()
        if off != prev + 1:
            gaps.append((i, off))
        prev = off
    return gaps


def _describe(partitions: list[TopicPartition]) -> str:
    by_topic: dict[str, list[int]] = {}
    for tp in partitions:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return ", ".join(f"{t}{sorted(p)}" for t, p in sorted(by_topic.items())) or "nothing"
