"""Which source partitions this process replicates: topic discovery, subscription, rebalances, and
source topics that disappear or are recreated.

Invariant (owned here): a partition is replicated only once its remote topic (with at least as many
partitions) exists on the target, and it resumes from the progress stored on the target — unless
that progress belongs to a deleted topic of the same name (Kafka topic IDs differ), in which case the
new topic is copied from its beginning: never a silent skip, never a silent reset.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Sequence

from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, KafkaException, Producer, TopicPartition

from mirror_core.authorization import NotAuthorized
from mirror_core.clients import ClusterHealth, explain_failure
from mirror_core.config.model import FlowConfig
from mirror_core.errors import ClusterUnavailable, MirrorError
from mirror_core.kafka_io import log_starts_batch
from mirror_core.metrics import Metrics
from mirror_core.replication.acks import Acks
from mirror_core.replication.batch import PartitionMode, PartitionState
from mirror_core.replication.damage import paused_at_damage
from mirror_core.replication.producer_pool import producer_for
from mirror_core.replication.reporting import Reporter
from mirror_core.replication.source_reader import Rebalance, SourceReader
from mirror_core.replication.topics import TopicManager
from mirror_core.stores.progress import ProgressStore

log = logging.getLogger(__name__)
DOWN_PROBE_TIMEOUT_S = 2.0  # topic discovery against a cluster the error callbacks report down
Key = tuple[str, int]


class Assignment:
    def __init__(self, flow: FlowConfig, consumer: SourceReader, topics: TopicManager, progress: ProgressStore,
                 acks: Acks, reporter: Reporter, metrics: Metrics, source_health: ClusterHealth,
                 target_health: ClusterHealth, stop: threading.Event, topic_ids: dict[str, str] | None = None,
                 missing_topics: dict[str, float] | None = None) -> None:
        self.flow = flow
        #: an operator's pause covers the partition (the runtime controls', set by the replicator)
        self.held: Callable[[PartitionState], bool] = lambda st: False
        self.consumer = consumer
        self.topics = topics
        self.progress = progress
        self.acks = acks
        self.reporter = reporter
        self.metrics = metrics
        self.source_health = source_health
        self.target_health = target_health
        self.stop = stop
        self.states: dict[Key, PartitionState] = {}
        self.subscribed: frozenset[str] = frozenset()
        #: source topic -> partition count, of the topics whose remote topic exists
        self.partition_counts: dict[str, int] = {}
        # Both outlive one run of the replicator (it restarts its pipeline after an unexpected error).
        self.missing_topics: dict[str, float] = {} if missing_topics is None else missing_topics
        #: source topic -> Kafka topic ID (recreation detection)
        self.topic_ids: dict[str, str] = {} if topic_ids is None else topic_ids
        self.next_refresh = 0.0
        self._next_config_sync = 0.0
        self._callback_error: Exception | None = None
        self._failed_refreshes = 0  # topic refreshes failed in a row
        self._lbl = flow.name

    def owns(self, st: PartitionState) -> bool:
        return (st.topic, st.partition) in self.states

    def request_refresh(self, within_s: float = 0.0) -> None:
        self.next_refresh = min(self.next_refresh, time.monotonic() + within_s) if within_s else 0.0

    # -- topics -------------------------------------------------------------------------------------
    def refresh(self, now: float, on_topics: Callable[[dict[str, int]], None]) -> None:
        """Discover source topics, create/grow their remote topics, hand the ready ones to
        ``on_topics`` (subscribe, or exactly-once: the owned slots' partitions), then sync configs.

        A topic the target rejects (one of its configs, or the topic itself) is reported per topic
        (log, errors metric, /status event) and never stops the others: configs are synced after
        subscribing, and a remote topic the target refuses to create is left out.
        """
        topics = self.topics
        try:
            # A source known to be down gets a short probe: the loop is blocked meanwhile, and a stop
            # (e.g. the failover of a lost primary) should not wait out a long metadata timeout.
            # Every fourth try in a row goes without it: a big or distant source may need longer to list.
            # The same for a target known to be down: nothing can be copied meanwhile, and the loop also
            # keeps the status and the delivery callbacks going.
            retry_long = self._failed_refreshes % 4 == 3
            short_src = not self.source_health.reachable and not retry_long
            short_tgt = not self.target_health.reachable and not retry_long
            wanted = topics.source_topics(DOWN_PROBE_TIMEOUT_S if short_src else None)
            topics.ensure_remote(wanted, timeout=DOWN_PROBE_TIMEOUT_S if short_tgt else None)
            for remote in topics.recreated_remote:
                self.reporter.report("remote_topic_recreated", {
                    "at": time.time(), "topic": remote, "event": "remote topic recreated",
                    "detail": f"{remote} was missing on {self.flow.target}"})
            topics.recreated_remote.clear()
            self.source_health.mark_ok()
            self.target_health.mark_ok()
            self._failed_refreshes = 0
        except (ClusterUnavailable, KafkaException) as exc:
            self._failed_refreshes += 1
            self.metrics.errors.labels(self._lbl, "topic_refresh").inc()
            why = explain_failure(exc, (topics.source, self.source_health), (topics.target, self.target_health))
            log.warning("flow %s: topic refresh failed (%s); retrying in 5s", self.flow.name, why)
            self.next_refresh = now + 5.0
            return
        try:
            ids = topics.source_topic_ids(sorted(wanted))
        except (ClusterUnavailable, KafkaException) as exc:  # checked again at the next refresh
            log.warning("flow %s: topic IDs unavailable (%s)", self.flow.name, exc)
            ids = {}
        self._note_topic_ids(ids)
        for gone in sorted(self.subscribed - set(wanted)):
            if not self.flow.should_replicate(gone):  # the filters changed (config/reload.py): not a loss
                log.info("flow %s: topic %s no longer matches the flow's filters: it is no longer mirrored (its "
                         "progress is kept: matched again, it goes on from there)", self.flow.name, gone)
                continue
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
        self.partition_counts = ready
        on_topics(ready)
        if now >= self._next_config_sync:
            try:
                topics.configs.sync(sorted(ready))
                self._next_config_sync = now + self.flow.sync_topic_configs_interval_s
            except (ClusterUnavailable, KafkaException) as exc:  # retried at the next refresh
                self.metrics.errors.labels(self._lbl, "topic_config").inc()
                log.warning("flow %s: topic config sync failed (%s); retrying at the next refresh", self.flow.name,
                            exc)
        self.reporter.report_problems(topics)  # configs or topics the target rejected
        interval = self.flow.refresh_topics_interval_s if self.flow.refresh_topics else 3600.0
        if topics.uncreatable:  # the cause may pass (a target broker down): try again soon
            interval = min(interval, 30.0)
        self.next_refresh = now + interval

    def subscribe(self, ready: dict[str, int], producers: Sequence[Producer],
                  before_revoke: Callable[[list[PartitionState]], None]) -> None:
        """At-least-once: share the ready topics' partitions with the other processes through the
        worker group (cooperative: a rebalance moves only some partitions)."""
        if frozenset(ready) == self.subscribed:
            return
        self.subscribed = frozenset(ready)

        def on_assign(consumer: Consumer, partitions: list[TopicPartition]) -> None:
            self.take(partitions, producers)

        def on_revoke(consumer: Consumer, partitions: list[TopicPartition]) -> None:
            """Cooperative revocation: finish in-flight work and commit before the next owner starts."""
            started = time.monotonic()
            before_revoke([st for k in ((tp.topic, tp.partition) for tp in partitions)
                           if (st := self.states.get(k)) is not None])
            self.release(partitions, "revoked", f"(their progress committed in {time.monotonic() - started:.2f} s)")

        def on_lost(consumer: Consumer, partitions: list[TopicPartition]) -> None:
            """Lost (session timeout): another instance may own them already, so commit nothing."""
            self.release(partitions, "lost")

        if ready:
            self.consumer.subscribe(sorted(ready), on_assign=self.guarded(on_assign),
                                    on_revoke=self.guarded(on_revoke), on_lost=self.guarded(on_lost))
        else:
            self.consumer.unsubscribe()
        log.info("flow %s: subscribed to %d topics", self.flow.name, len(ready))

    # -- partitions ---------------------------------------------------------------------------------
    def take(self, partitions: list[TopicPartition], producers: Sequence[Producer], slot: int | None = None) -> None:
        """Start replicating ``partitions``: remote partitions first, then resume from stored progress;
        each partition produced through its producer of ``producers`` (producer_pool.producer_for)."""
        if not partitions:
            # A cooperative round that moves nothing here. Preparing for it read the progress topic (0.5-0.8 s
            # at 2,000 partitions) while the group waited: the old owner rejoins for the round that hands
            # the revoked partitions over only once this callback returns.
            self.consumer.incremental_assign(partitions)
            return
        needed: dict[str, int] = {}
        for tp in partitions:
            needed[tp.topic] = max(needed.get(tp.topic, 0), tp.partition + 1, self.partition_counts.get(tp.topic, 0))
        carrier = {(tp.topic, tp.partition): producer_for(producers, tp.topic, tp.partition) for tp in partitions}
        carried: dict[Producer, set[str]] = {}
        for (topic, _), producer in carrier.items():
            carried.setdefault(producer, set()).add(topic)
        # Remote partitions must exist before a record can land in the same partition number.
        started = time.monotonic()
        deadline = started + 120
        phases = Phases()
        while True:
            try:
                self.topics.ensure_remote(needed)
                refused = sorted(t for t in needed if t in self.topics.uncreatable)
                if refused:
                    raise MirrorError(f"the target refuses to create the remote topics of {', '.join(refused)}")
                # A producer must know the partitions too (they may have grown since it last looked): each
                # producer the topics it carries (over a WAN every look is a round trip).
                phases.end("remote topics")
                for producer, topics in carried.items():
                    for topic in sorted(topics):
                        producer.list_topics(self.flow.remote_topic(topic), timeout=10)
                phases.end("producers' metadata")
                entries = self.progress.refresh()
                phases.end("progress")
                ids = self.topics.source_topic_ids(sorted(needed))
                phases.end("topic ids")
                break
            except Exception as exc:
                if time.monotonic() > deadline or self.stop.is_set():
                    raise
                log.warning("flow %s: cannot prepare assigned partitions (%s); retrying", self.flow.name, exc)
                time.sleep(2)
                phases.end("failed attempt")
            finally:
                self.reporter.report_problems(self.topics)  # e.g. a remote topic created without a config
        # Partitions of a topic we already own were read from the old topic if it changed.
        self._note_topic_ids(ids)
        for tp in partitions:
            resume = entries.get((tp.topic, tp.partition))
            stored_id, current_id = self.progress.topic_id(tp.topic, tp.partition), self.topic_ids.get(tp.topic)
            if resume is not None and stored_id and current_id and stored_id != current_id:
                # The stored position belongs to a deleted topic of the same name: resuming there would
                # silently skip (or, past the end, silently reset). Copy the new topic from its start.
                self.reporter.report_recreated(tp.topic, stored_id, current_id, self.flow.remote_topic(tp.topic),
                                               [tp.partition])
                self.acks.operator.forget(tp.topic, tp.partition)  # (each partition's stored id is its own)
                resume = None
                tp.offset = OFFSET_BEGINNING
            else:
                tp.offset = resume if resume is not None else (
                    OFFSET_BEGINNING if self.flow.start_position == "earliest" else OFFSET_END)
            old = self.states.get((tp.topic, tp.partition))
            if old is not None:  # (cooperative assignments give only new partitions: its counts kept all the same)
                self.reporter.count_landed(old)
                self.acks.forget(old)
            self.states[(tp.topic, tp.partition)] = PartitionState(
                tp.topic, tp.partition, self.flow.remote_topic(tp.topic), resume,
                self.flow.policy.is_heartbeats_topic(tp.topic), carrier[(tp.topic, tp.partition)], slot)
        self.consumer.incremental_assign(partitions)
        self.metrics.assigned.labels(self._lbl).set(len(self.states))
        log.info("flow %s: assigned %s in %.2f s (%s)", self.flow.name, describe(partitions),
                 time.monotonic() - started, phases)

    def release(self, partitions: list[TopicPartition], how: str, detail: str = "", stranded: bool = False) -> None:
        """Stop replicating ``partitions`` (revoked, lost, or their exactly-once slot released); ``stranded``:
        because the target did not answer (their lag stays counted here: reporting.Stranded)."""
        self._drop(partitions, stranded)
        unassign(self.consumer, partitions)
        (log.warning if how == "lost" or stranded else log.info)(
            "flow %s: %s %s%s", self.flow.name, how, describe(partitions), f" {detail}" if detail else "")

    def release_states(self, states: list[PartitionState], stranded: bool = False) -> None:
        if states:
            self.release([TopicPartition(st.topic, st.partition) for st in states], "released",
                         "(the target does not answer: their lag stays counted here)" if stranded else "", stranded)

    def _drop(self, partitions: list[TopicPartition], stranded: bool = False) -> None:
        for tp in partitions:
            st = self.states.pop((tp.topic, tp.partition), None)
            if st is not None:
                self.acks.forget(st)
                self.reporter.forget_partition(st, stranded)
        self.metrics.assigned.labels(self._lbl).set(len(self.states))

    def clear(self) -> None:
        """The pipeline closed. Partitions still held (a revoke that failed before releasing them) leave the
        gauges as released ones do: stranded when exactly-once's target does not answer (their slots wait
        for it), else another process's to count."""
        strand = self.flow.exactly_once and not self.target_health.reachable
        for st in self.states.values():
            self.reporter.forget_partition(st, strand)
        self.states.clear()
        self.metrics.assigned.labels(self._lbl).set(0)
        self.subscribed = frozenset()
        self.next_refresh = 0.0

    def recreated(self, topic: str) -> bool:
        """Whether ``topic`` was deleted and recreated since its id was noted, asked now (a fetch found its position
        gone: a new topic under the old name, or retention); handled as a refresh finding it (_on_recreated)."""
        old = self.topic_ids.get(topic)
        try:
            ids = self.topics.source_topic_ids([topic])
            self._note_topic_ids(ids)
        except Exception as exc:  # the source not answering: the caller goes on as for retention
            log.warning("flow %s: the topic ID of %s could not be read, or its recreation not handled (%s)",
                        self.flow.name, topic, exc)
            return False
        return old is not None and ids.get(topic, old) != old

    def _note_topic_ids(self, ids: dict[str, str]) -> None:
        for topic, tid in ids.items():
            old_id = self.topic_ids.get(topic)
            if old_id is not None and old_id != tid:
                self._on_recreated(topic, old_id, tid)
        self.topic_ids.update(ids)

    def _on_recreated(self, topic: str, old_id: str, new_id: str) -> None:
        """A topic we own was recreated while we ran: restart its partitions at the new beginning."""
        owned = [st for st in self.states.values() if st.topic == topic]
        self.reporter.report_recreated(topic, old_id, new_id, self.flow.remote_topic(topic),
                                       [st.partition for st in owned])
        damaged = self.acks.operator.forget(topic)
        # One request per broker through the admin client: the replicating consumer's own connection may
        # be holding an idle fetch open for up to fetch.wait.max.ms, and each lookup would wait behind it.
        starts = log_starts_batch(self.topics.source, [(st.topic, st.partition) for st in owned])
        for st in owned:
            # Positions of the old topic mean nothing now: forget them before the explicit rewind.
            st.acked = st.committed = st.origin = None
            st.forget_map()
            start = max(starts.get((st.topic, st.partition), 0), 0)
            first = damaged.get((st.topic, st.partition))
            if (first is not None and st.mode is PartitionMode.PAUSED and paused_at_damage(st.paused_reason, first)
                    and not self.held(st)):
                # (its damaged batch was the deleted topic's: nothing of the new topic stops it; an operator's pause
                # of the topic, or another pause since, stays)
                log.warning("flow %s: %s[%d] was paused at a damaged batch of the deleted topic: copying the new "
                            "topic from offset %d", self.flow.name, st.topic, st.partition, start)
                self.acks.unpause(st, start)
            else:
                self.acks.rewind_to(st, start, careful=False, backoff=False)

    # -- rebalance callbacks ------------------------------------------------------------------------
    def guarded(self, callback: Rebalance) -> Rebalance:
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
        if isinstance(exc, NotAuthorized):
            raise exc  # already the one line to show (e.g. a transactional id refused)
        if exc is not None:
            raise MirrorError(f"rebalance callback failed: {exc}") from exc


class Phases:
    """How long each phase of a piece of work took, for its log line (a rebalance's time is the operator's
    question when a join stalls copying)."""

    def __init__(self) -> None:
        self._last = time.monotonic()
        self._took: list[tuple[str, float]] = []

    def end(self, phase: str) -> None:
        now = time.monotonic()
        self._took.append((phase, now - self._last))
        self._last = now

    def __str__(self) -> str:
        return ", ".join(f"{phase} {took:.2f} s" for phase, took in self._took)


def unassign(consumer: SourceReader, partitions: list[TopicPartition]) -> None:
    """Unassign ``partitions`` and clear any pause of theirs first.

    librdkafka keeps a partition's application pause across unassign and assign: a partition paused
    for a retry backoff (acks.py) when it was released — an exactly-once slot lost during a long
    outage of the target, a revocation — would be assigned again still paused and never fetched
    (a silent stall). Resuming a partition that is not paused is a no-op in librdkafka; the resume is
    queued before the unassign's fetch stop, so it cannot overtake a later fetch start.
    """
    with contextlib.suppress(KafkaException):  # a partition librdkafka does not know: nothing to clear
        consumer.resume(partitions)
    consumer.incremental_unassign(partitions)


def describe(partitions: list[TopicPartition]) -> str:
    """``orders[0-3, 7], payments[1]``: consecutive partitions as ranges (a 2,000-partition topic is one
    short log line, not 2,000 numbers)."""
    by_topic: dict[str, list[int]] = {}
    for tp in partitions:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return ", ".join(f"{t}[{_ranges(p)}]" for t, p in sorted(by_topic.items())) or "nothing"


def _ranges(numbers: list[int]) -> str:
    spans: list[list[int]] = []
    for n in sorted(set(numbers)):
        if spans and n == spans[-1][1] + 1:
            spans[-1][1] = n
        else:
            spans.append([n, n])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)
