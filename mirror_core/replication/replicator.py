"""The replicator of one flow: its loop and its lifecycle.

One pass of the loop: refresh topics when due (assignment.py) → consume a batch from the source (consuming.py) →
produce each partition's run to the target (produce.py), sent at once when the mirror is caught up
(pacing.py) → collect delivery results (acks.py) → every
``offset.flush.interval.ms`` make what the target acknowledged durable (the delivery guarantee,
delivery.py and commit.py) and publish the status (reporting.py).

Commit order (the at-least-once invariant): records are produced; a batch counts as acknowledged
only when its delivery reports prove every record landed (see batch.py); progress advances only
across acknowledged batches, in source order; progress is written to the target afterwards. A crash
at any point therefore replays records (possible duplicates) and never skips one.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import socket
import sys
import threading
import time
import uuid
from typing import Any, cast

from confluent_kafka import Consumer, KafkaException, Producer

from mirror_core.authorization import Access, NotAuthorized, check, guard
from mirror_core.clients import (
    ClusterHealth,
    explain_failure,
    make_admin,
    make_consumer,
    make_producer,
)
from mirror_core.config.model import ClusterConfig, FlowConfig, MirrorConfig
from mirror_core.errors import FencedInstance, MirrorError
from mirror_core.metrics import Metrics
from mirror_core.policy import HEARTBEATS_TOPIC
from mirror_core.replication.acks import Acks
from mirror_core.replication.assignment import Assignment
from mirror_core.replication.batch import PartitionState
from mirror_core.replication.batch_path import BatchCopier, BatchDelivery, CopierReading
from mirror_core.replication.batch_transactions import BatchExactlyOnce, SlotProducer, SlotSenders
from mirror_core.replication.commit import OffsetMapWriter, ProgressCommitter, advance_idle
from mirror_core.replication.consuming import IDLE_WAIT_S, Consuming, Reading
from mirror_core.replication.controls import LIMITED_READ, RuntimeControls
from mirror_core.replication.damage import OperatorActions
from mirror_core.replication.delivery import AtLeastOnce, Delivery, ExactlyOnce
from mirror_core.replication.exactly_once import SlotManager
from mirror_core.replication.fencing import StaticGroups
from mirror_core.replication.heartbeats import HeartbeatEmitter, ensure_heartbeats_topic
from mirror_core.replication.lag_watch import LagWatch
from mirror_core.replication.mirror_writes import cycle_guard
from mirror_core.replication.pacing import SendPacer
from mirror_core.replication.produce import Producing
from mirror_core.replication.producer_pool import ProducerChooser, batch_limits, make_target_producers
from mirror_core.replication.reporting import CHECKING_FENCE, REJOINING_AFTER_FENCE, Reporter
from mirror_core.replication.retry import MAX_PROBE_INTERVAL_S, Backoff
from mirror_core.replication.schema_ids import ProduceRun, SchemaIdTranslation
from mirror_core.replication.source_reader import SourceReader
from mirror_core.replication.topics import TopicManager
from mirror_core.replication.wire_reader import WireReader, wire_clients
from mirror_core.stores.offset_syncs import ensure_offset_syncs_topic, offset_syncs_topic
from mirror_core.stores.producer_ids import PRODUCER_IDS_TOPIC, ensure_producer_ids_topic
from mirror_core.stores.progress import ProgressStore, ensure_progress_topic
from mirror_core.throttling import ThrottledLine
from mirror_core.wire.fetcher import BatchFetcher
from mirror_core.wire.sender import BatchSender

log = logging.getLogger(__name__)

#: how long one pass of the loop waits for a record (IDLE_WAIT_S, consuming.py) while records are parked
#: and the last pass released some: an acknowledgement (served by the producers' poll) releases more;
#: doubled per pass that releases nothing, up to IDLE_WAIT_S
PARKED_WAIT_S = 0.002


#: how often the partitions' counters are brought up to date with what was acknowledged (reporting.count_landed)
COUNT_INTERVAL_S = 1.0


def next_parked_wait(wait_s: float, parked: int, released: int) -> float:
    """The loop's wait for its next pass while records are parked: short again once records move or none
    wait (the next records parked get the short wait too), doubled per pass that released nothing."""
    return PARKED_WAIT_S if released or not parked else min(2 * wait_s, IDLE_WAIT_S)


def instance_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


class FlowReplicator:
    """Runs one flow until ``stop`` is set. Not thread-safe: one thread drives it (``status`` may be
    read from any thread)."""

    def __init__(self, config: MirrorConfig, flow: FlowConfig, metrics: Metrics, stop: threading.Event,
                 instance: str | None = None, static_id: str | None = None) -> None:
        self.config = config
        # Static membership: with a stable group.instance.id a restarted process takes its partitions
        # (and exactly-once slots) back at once; without one it waits out the dead member's session.
        self._static = StaticGroups(config, flow, static_id, stop)  # their fences: fencing.py
        self.flow = flow
        self.metrics = metrics
        self.stop = stop
        self.instance = instance or instance_id()
        self.source_health = ClusterHealth(flow.source, self._on_reachability)
        self.target_health = ClusterHealth(flow.target, self._on_reachability)
        self.reporter = Reporter(flow.name, metrics, flow.commit_interval_ms / 1000)
        # These outlive one run of the pipeline (it is recreated after an unexpected error).
        self._last_heartbeat_ms = 0
        self._topic_ids: dict[str, str] = {}
        self._missing_topics: dict[str, float] = {}
        self._denied_topics: set[str | None] = set()  # source topics the source refuses to let us read
        #: schema.ids = translate: the id map outlives a run (records path only: config/loader.py)
        self._schema_ids = SchemaIdTranslation(flow.name, config.cluster(flow.source), config.cluster(flow.target)) \
            if flow.schema_ids == "translate" else None
        #: operators' resumes and skips of paused partitions, offered by the service's control loop
        self.operator = OperatorActions(flow.name)
        #: operators' pauses and bandwidth limits, set by the service's control loop
        self.controls = RuntimeControls(flow.name, metrics)
        self._refresh_soon = False  # the flow's filters changed (another thread): discover its topics again
        #: why another process with this process's --instance-id kept the flow (None: none did)
        self.fenced: str | None = None
        #: how long the last run of the pipeline copied before it ended (None: it never began copying)
        self._copied_s: float | None = None
        # The pipeline of one run (recreated after an unexpected error); None between runs.
        self._consumer: Consumer | None = None
        self._progress: ProgressStore | None = None
        self._target_meta: Consumer | None = None  # watermark look-ups on the target
        self._hb_producer: Producer | None = None
        self._heartbeats: HeartbeatEmitter | None = None
        self._acks: Acks | None = None
        self._assignment: Assignment | None = None
        self._producing: Producing | None = None
        self._delivery: Delivery | None = None
        self._copier: BatchCopier | None = None  # replication.data.path = batches
        self._wire: tuple[BatchFetcher, BatchSender] | None = None  # its clients (closed with the pipeline)
        #: replication.producers; keeps auto's measured round trip for this run of the flow (the service makes a
        #: new FlowReplicator when the flow is started again)
        self._producer_choice = ProducerChooser(flow, self.stop.is_set, self.reporter.set_producers)

    # -- lifecycle ------------------------------------------------------------------------------
    def run(self) -> None:
        """Supervise the flow: recreate clients after an unexpected error, with backoff."""
        src = self.config.cluster(self.flow.source)
        try:
            with LagWatch(self.reporter, lambda: make_admin(src, self.source_health)):
                self._supervise()
        finally:  # stopped (or fenced): no gauge of this flow may go on counting partitions it stranded
            self.reporter.drop_stranded()

    def _supervise(self) -> None:
        backoff = Backoff()
        while not self.stop.is_set():
            self._copied_s = None
            try:
                self._run_once()
                return
            except FencedInstance as exc:
                self._close(graceful=False)  # (closed already when the loop raised it, not when the setup did)
                self.reporter.set_state(f"{CHECKING_FENCE}: {exc}", owns_nothing=True)
                ruling = self._static.rejoin_after(exc)  # (asks the group's coordinator who holds the id)
                if ruling is None:  # stopped meanwhile: nothing judged
                    self.reporter.set_state("stopped", owns_nothing=True)
                    return
                if ruling.stop is None:
                    self._restart("fenced_by_itself", exc, backoff, f"flow {self.flow.name}: {exc}; rejoining in ",
                                  level=logging.WARNING, at_least_s=ruling.wait_s, state=REJOINING_AFTER_FENCE)
                    continue
                # Restarting would fence the other process in turn: both would flap. Stop this flow here,
                # its checkpoint emitter too (same stop event), and say so to whoever starts flows.
                self.fenced = str(exc)
                self.metrics.errors.labels(self.flow.name, "fenced").inc()
                log.error("flow %s: %s", self.flow.name, exc)
                self.stop.set()
                self.reporter.set_state(f"stopped: {exc}", owns_nothing=True)
                return
            except NotAuthorized as exc:  # an ACL is missing: one line, and retry (granting it is enough)
                self._restart("not_authorized", exc, backoff, f"{exc}; retrying in ")
            except MirrorError as exc:  # raised on purpose: its message is the line (traceback at DEBUG)
                log.debug("flow %s: traceback", self.flow.name, exc_info=True)
                self._restart("restart", exc, backoff, f"flow {self.flow.name}: {exc}; restarting in ")
            except Exception as exc:
                self._restart("restart", exc, backoff, f"flow {self.flow.name}: unexpected error; restarting in ",
                              exc_info=True)

    def _restart(self, kind: str, why: object, backoff: Backoff, says: str, level: int = logging.ERROR,
                 exc_info: bool = False, at_least_s: float = 0.0, state: str = "restarting after error") -> None:
        """Count ``kind``, show ``state`` and ``why`` in /status, log ``says`` followed by the delay (the
        backoff's, or ``at_least_s`` if longer), close the pipeline and wait the delay out (the caller's loop
        then starts a new pipeline)."""
        self.metrics.errors.labels(self.flow.name, kind).inc()
        delay = max(backoff.restart_delay(self._copied_s), at_least_s)
        when = time.strftime("%H:%M:%S UTC", time.gmtime(time.time() + delay))
        self.reporter.set_state(f"{state} (at {when}): {why}")
        log.log(level, "%s%.0fs", says, delay, exc_info=exc_info)
        self._close(graceful=False)
        self.stop.wait(delay)

    def refresh_topics_soon(self) -> None:
        """The flow's topic filter changed: its topics are discovered again at the loop's next pass (any thread)."""
        self._refresh_soon = True

    def status(self) -> dict[str, Any]:
        """A snapshot for the /status endpoint (safe to call from another thread). Reachability and how long
        the loop has been held are read live: the snapshot is rebuilt by the loop, which a partitioned link
        can hold up for a while (the lag watch refreshes its lag meanwhile)."""
        flow = self.flow
        return {**self.reporter.status, "data_path": flow.data_path, "data_path_reason": flow.data_path_reason,
                "source_reachable": self.source_health.reachable,
                "target_reachable": self.target_health.reachable, "loop_held_s": self.reporter.held_for()}

    def _on_reachability(self, alias: str, up: bool) -> None:
        self.metrics.reachable.labels(alias).set(1 if up else 0)

    def _wait_for_clusters(self, topics: TopicManager) -> None:
        """Create the internal topics, probing again while a cluster does not answer. A probe returns as
        soon as the link is back, so the waits between probes stay short (MAX_PROBE_INTERVAL_S): after a
        long outage a longer one would delay the resumption by up to its length."""
        flow = self.flow
        src, tgt = self.config.cluster(flow.source), self.config.cluster(flow.target)
        backoff, line = Backoff(cap=MAX_PROBE_INTERVAL_S), ThrottledLine()
        while not self.stop.is_set():
            try:
                with guard(flow.name, Access("Create", flow.progress_topic, tgt)):
                    ensure_progress_topic(topics.target, flow.progress_topic, flow.internal_replication_factor)
                with guard(flow.name, Access("Create", offset_syncs_topic(flow.source), tgt)):
                    ensure_offset_syncs_topic(topics.target, offset_syncs_topic(flow.source),
                                              flow.internal_replication_factor)
                if flow.data_path == "batches" and flow.policy.uses_provenance:  # (replication/mirror_writes.py)
                    for admin, cluster in ((topics.target, tgt), (topics.source, src)):
                        with guard(flow.name, Access("Create", PRODUCER_IDS_TOPIC, cluster)):
                            ensure_producer_ids_topic(admin, flow.internal_replication_factor)
                self.target_health.mark_ok()
                if flow.emit_heartbeats:
                    with guard(flow.name, Access("Create", HEARTBEATS_TOPIC, src)):
                        ensure_heartbeats_topic(topics.source, flow.heartbeats_replication_factor)
                self.source_health.mark_ok()
                return
            except NotAuthorized:
                raise
            except Exception as exc:
                why = explain_failure(exc, (topics.target, self.target_health), (topics.source, self.source_health))
                self.reporter.set_state(f"waiting for clusters: {why}")
                self.metrics.errors.labels(self.flow.name, "cluster_unavailable").inc()
                delay = backoff.next()
                if line.due(why):
                    log.warning("flow %s: clusters not ready (%s); probing again every %.0fs at most",
                                self.flow.name, why, MAX_PROBE_INTERVAL_S)
                self.stop.wait(delay)

    def _setup(self) -> None:
        flow = self.flow
        src, tgt = self.config.cluster(flow.source), self.config.cluster(flow.target)
        topics = TopicManager(flow, make_admin(src, self.source_health), make_admin(tgt, self.target_health),
                              clusters=(src, tgt))
        self._wait_for_clusters(topics)
        progress_reader = make_consumer(tgt, f"{flow.worker_group_id}.progress-reader", health=self.target_health)
        self._progress = progress = ProgressStore(flow.progress_topic, progress_reader, self.instance)
        self._target_meta = target_meta = make_consumer(tgt, f"{flow.worker_group_id}.meta",
                                                        health=self.target_health)
        refresh_ms = str(int(min(flow.refresh_topics_interval_s * 1000, 30000)))
        self._consumer = consumer = make_consumer(
            src, flow.worker_group_id, flow.consumer_overrides, self.source_health,
            enforced={"topic.metadata.refresh.interval.ms": refresh_ms, "auto.offset.reset": flow.start_position,
                      **self._static.settings(flow.worker_group_id)}, standing=True)
        reader: SourceReader = consumer
        wire, wire_reader = None, None
        if flow.data_path == "batches":
            # The group still assigns the partitions; the wire fetcher reads them (batch_path.py).
            self._wire = wire = wire_clients(src, tgt, flow, self.source_health, self.target_health)
            reader = wire_reader = WireReader(consumer, wire[0], topics.source, flow.start_position)
        self._acks = acks = Acks(flow.name, reader, self.metrics, request_refresh=lambda: None,
                                 last_heartbeat_ms=self._last_heartbeat_ms, target=tgt)
        self._assignment = assignment = Assignment(flow, reader, topics, progress, acks, self.reporter,
                                                   self.metrics, self.source_health, self.target_health, self.stop,
                                                   self._topic_ids, self._missing_topics)
        acks.request_refresh = assignment.request_refresh
        acks.operator = self.operator
        assignment.held = self.controls.holds
        committer = ProgressCommitter(progress, OffsetMapWriter(offset_syncs_topic(flow.source), self.metrics,
                                                                flow.name), self.metrics, flow.name,
                                      assignment.topic_ids.get, tgt)
        choice = self._producer_choice.choose(target_meta)
        limit, internal = batch_limits(tgt, flow, choice, topics.target, self.stop.wait)
        delivery: Delivery
        if choice.count is None and wire is not None and wire_reader is not None:
            delivery = self._batches_exactly_once(wire_reader, wire, assignment, acks, committer, src, tgt, internal)
        elif choice.count is None:
            # Each owned slot has its own transactional producer (see exactly_once.py).
            slots = SlotManager(flow, tgt, self.metrics, self.target_health, assignment, acks, committer,
                                self._static.settings(f"{flow.worker_group_id}.slots"), internal)
            delivery = ExactlyOnce(slots, assignment)
        elif wire is None or wire_reader is None:
            producers, own = make_target_producers(tgt, flow.producer_overrides, self.target_health, choice, internal)
            delivery = AtLeastOnce(producers, assignment, acks, committer, target_meta, flow.policy.uses_provenance,
                                   own)
        else:  # the records go by the wire sender: one producer, for progress and offset-map records
            producer = make_producer(tgt, flow.producer_overrides, self.target_health, fits=internal)
            guard_ = None
            if flow.policy.uses_provenance:
                guard_, wire[1].on_producer_id = cycle_guard(self.config, flow, self.instance, self.source_health,
                                                             self.target_health)
            self._copier = BatchCopier(flow.name, wire_reader, wire[1], assignment.states, acks,
                                       self.metrics, flow.in_flight_records_limit, flow.max_in_flight_bytes, src,
                                       guard_)
            # (the identity policy's remote topics may have other writers: their log end is not where a copy lands)
            delivery = BatchDelivery(self._copier, [producer], assignment, acks, committer, target_meta,
                                     flow.policy.uses_provenance, None)
        self._delivery = delivery
        if self._copier is not None:
            self._copier.recreated = assignment.recreated
        acks.on_failure = delivery.on_failure
        self._producing = Producing(flow, acks.active.add, target_meta, delivery, limit,
                                    choice.one_batch_per_partition, topics.configs.remote_limits)
        acks.cut_smaller = self._producing.topic_limits.after_refusal
        if flow.emit_heartbeats:
            self._hb_producer = make_producer(src, health=self.source_health,
                                              enforced={"linger.ms": "0", "message.timeout.ms": "30000"})
            self._heartbeats = HeartbeatEmitter(self._hb_producer, flow.source, flow.target,
                                                flow.heartbeats_interval_s)

    def _batches_exactly_once(self, reader: WireReader, wire: tuple[BatchFetcher, BatchSender],
                              assignment: Assignment, acks: Acks, committer: ProgressCommitter, src: ClusterConfig,
                              tgt: ClusterConfig, internal: int | None) -> Delivery:
        """Exactly-once on the batches path: each owned slot's transactional producer is the wire client's, and
        the copier sends each partition's batches through its slot's (batch_transactions.py)."""
        flow, senders = self.flow, SlotSenders()
        wire[1].close()  # (the idempotent sender is not used: each slot has its own, transactional)
        guard_, record = cycle_guard(self.config, flow, self.instance, self.source_health, self.target_health) \
            if flow.policy.uses_provenance else (None, None)

        def slot_producer(k: int, tid: str) -> Producer:
            senders.producers[k] = p = SlotProducer(wire[1].brokers, tid, senders.on_data, wire[1].delivery_timeout_s,
                                                    internal_limit=internal, on_producer_id=record)
            return cast(Producer, p)

        slots = SlotManager(flow, tgt, self.metrics, self.target_health, assignment, acks, committer,
                            self._static.settings(f"{flow.worker_group_id}.slots"), internal,
                            slot_producer=slot_producer, on_release=senders.released)
        self._copier = copier = BatchCopier(flow.name, reader, senders,
                                            assignment.states, acks, self.metrics, flow.in_flight_records_limit,
                                            flow.max_in_flight_bytes, src, guard_)
        senders.answer = copier.answer

        def before_send(st: PartitionState) -> None:
            senders.route(st)
            slots.ensure_txn(st)

        copier.before_send = before_send
        return BatchExactlyOnce(copier, senders, slots, assignment)

    def _run_once(self) -> None:
        self._setup()
        if self.stop.is_set():
            self._close(graceful=False)
            return
        consumer, acks, assignment = self._consumer, self._acks, self._assignment
        delivery, heartbeats, producing = self._delivery, self._heartbeats, self._producing
        reader = acks.consumer if acks is not None else None
        controls = self.controls
        src = self.config.cluster(self.flow.source)
        assert consumer is not None and acks is not None and assignment is not None and delivery is not None
        assert producing is not None and reader is not None
        produce_run: ProduceRun = producing.produce_run
        if self._schema_ids is not None:
            produce_run = self._schema_ids.wrap(produce_run, lambda st, why: acks.pause(st, why, keep_in_flight=True))
        consuming = Consuming(self.flow, src, self.metrics, consumer, assignment, acks, produce_run,
                              self._denied_topics)
        # the data path's read of the source: the loop below is written once against it
        reading: Reading = consuming if self._copier is None else CopierReading(consuming, self._copier)
        batch_max = self.flow.batch_max_records
        max_in_flight = self.flow.in_flight_records_limit or sys.maxsize  # (the batches path: the copier's bytes)
        next_commit = next_count = 0.0
        pacer = SendPacer(self.flow.commit_interval_ms / 1000.0)
        parked_gauge = self.metrics.parked.labels(self.flow.name)
        held_gauge = self.metrics.in_flight_bytes.labels(self.flow.name) \
            if reading.in_flight_bytes() is not None else None
        parked_wait = PARKED_WAIT_S

        def on_topics(ready: dict[str, int]) -> None:
            producing.topic_limits.learn(map(self.flow.remote_topic, ready), self.stop.wait,
                                         assignment.topics.configs.target_limits)  # before records
            delivery.on_topics(ready)

        self.reporter.set_state("running")
        copying_since = time.monotonic()
        log.info("flow %s: replicating (instance %s, group %s, data path: %s (%s))", self.flow.name, self.instance,
                 self.flow.worker_group_id, self.flow.data_path, self.flow.data_path_reason)
        try:
            while not self.stop.is_set():
                now = time.monotonic()
                if now >= assignment.next_refresh or self._refresh_soon:
                    self._refresh_soon = False
                    assignment.refresh(now, on_topics)
                if heartbeats is not None:
                    self._emit_heartbeat(heartbeats, now, src)
                acks.resume_due(now, assignment.owns)
                if self.operator.pending:
                    self.operator.apply(assignment.states, acks)
                if self._schema_ids is not None:
                    self._schema_ids.retry_paused(assignment.states, acks, controls.holds)
                gated = False
                if controls.active:
                    controls.tick(now, assignment.states, acks, assignment.partition_counts)
                    gated = now < controls.gated_until
                    reading.gate(controls.gated_until)
                    acks.count_read = controls.read if controls.counting else None
                delivery.poll()
                # Parked records (one batch per partition, produce.py) wait for an acknowledgement: the waits
                # below are short then, so that the next piece goes out soon after it arrives; they grow again
                # while nothing is released (a target that does not answer must not make the loop spin).
                parked = producing.parked_records()
                if delivery.in_flight() + parked >= max_in_flight or reading.full or gated:
                    reading.hold()
                    delivery.poll_producers(parked_wait if parked else 0.05)  # back-pressure
                else:
                    read = reading.read(min(batch_max, LIMITED_READ) if acks.count_read else batch_max,
                                        parked_wait if parked else IDLE_WAIT_S)
                    if pacer.after_read(now, read, batch_max):  # adaptive batching (pacing.py)
                        delivery.send_now()
                    delivery.poll_producers(0)
                acks.collect()
                parked_wait = next_parked_wait(parked_wait, parked, producing.release())
                if now >= next_count:  # (a publish counts too; offset.flush.interval.ms may be a minute)
                    for st in assignment.states.values():
                        self.reporter.count_landed(st)
                    next_count = now + COUNT_INTERVAL_S
                if now >= next_commit:
                    parked_gauge.set(parked)
                    if held_gauge is not None:
                        held_gauge.set(reading.in_flight_bytes() or 0)
                    states = list(assignment.states.values())
                    advance_idle(reader, states, delivery.log_end_fallback())
                    delivery.commit()
                    self.reporter.publish(reader, list(assignment.states.values()), delivery.visible,
                                          self.instance, assignment.missing_topics, acks.last_heartbeat_ms,
                                          self.source_health, self.target_health)
                    next_commit = now + self.flow.commit_interval_ms / 1000.0
        finally:
            self._copied_s = time.monotonic() - copying_since  # up to the error, not the close after it
            if held_gauge is not None:
                held_gauge.set(0)
            parked_gauge.set(0)  # what was parked is dropped with this pipeline (read again by the next)
            self._close(graceful=True)
            if self.stop.is_set() and self.fenced is None:  # stopped for good, not restarting: leave the groups
                self._static.leave()

    def _emit_heartbeat(self, heartbeats: HeartbeatEmitter, now: float, src: ClusterConfig) -> None:
        try:
            heartbeats.maybe_emit(now)
        except KafkaException as exc:
            # A refused idempotent producer fails fatally, and produce() then says only "fatal error";
            # flush() raises the cause (CLUSTER_AUTHORIZATION_FAILED: no Write on the topic).
            cause: KafkaException = exc
            if self._hb_producer is not None:
                try:
                    self._hb_producer.flush(0)
                except KafkaException as fatal:
                    cause = fatal
            check(self.flow.name, cause, Access("Write", HEARTBEATS_TOPIC, src))
            raise

    def _close(self, graceful: bool) -> None:
        """Graceful: flush the target, commit final progress, leave the group. Idempotent."""
        delivery, consumer = self._delivery, self._consumer
        self._delivery = self._consumer = None
        try:
            try:
                if delivery is not None:
                    if graceful or self.flow.exactly_once:
                        self.reporter.set_state("stopping")
                    delivery.close(graceful)
            finally:  # the group is left even when the last commit failed
                if consumer is not None:
                    consumer.close()  # runs the revoke callback, which commits again (a no-op by then)
        except NotAuthorized as exc:  # the final commit was refused: said once, without a traceback
            log.error("%s", exc)
        except MirrorError as exc:  # e.g. an exactly-once slot given up: its message is the line
            log.error("flow %s: while closing: %s", self.flow.name, exc)
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
                hb_producer, self._hb_producer = self._hb_producer, None
                with contextlib.suppress(KafkaException):  # a fatal error: reported by _emit_heartbeat
                    hb_producer.flush(2)
            self._heartbeats = None
            if self._wire is not None:  # (closed already with the delivery, unless the setup failed before it)
                for client in self._wire:
                    client.close()
                self._wire = None
            if self._assignment is not None:
                self._assignment.clear()
            if self._acks is not None:
                self._last_heartbeat_ms = self._acks.last_heartbeat_ms
                self._acks.clear()
            self._assignment = self._acks = self._producing = self._copier = None
            self.reporter.set_state("stopped" if graceful else self.reporter.status.get("state", "stopped"))
            if not graceful:
                # The old pipeline's clients sit in reference cycles (callbacks), and with the raised
                # collection thresholds (gc_tuning.py) a full collection may be far off: free their threads
                # and connections before the next pipeline opens its own.
                delivery = consumer = None
                gc.collect()
