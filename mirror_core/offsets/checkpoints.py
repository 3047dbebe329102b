"""Checkpoints and group offset sync for one flow.

Every ``emit.checkpoints.interval.seconds`` the emitter reads the committed offsets of the source
consumer groups that pass ``groups``/``groups.exclude``, translates them exactly through the offset
map, and publishes MirrorMaker 2 checkpoint records to ``<source>.checkpoints.internal`` on the
target (key: group, *remote* topic, partition; value: upstream offset, downstream offset, metadata),
so MM2 client tooling reads them unchanged. Only exact translations are published.

With ``sync.group.offsets.enabled`` it also commits the translated offsets to the same group on the
target when that group has no active members there, and never moves a target group backwards.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from functools import partial
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient

from mirror_core.authorization import Access, denied_line
from mirror_core.config.client_defaults import KAFKA_DEFAULT_MESSAGE_MAX_BYTES
from mirror_core.config.model import ClusterConfig
from mirror_core.kafka_io import QUIET, log_ends_batch
from mirror_core.offsets.groups import Offsets, active_members, commit_offsets, committed_offsets, committed_offsets_of
from mirror_core.offsets.partition_facts import PartitionFacts
from mirror_core.stores.internal_topics import (
    BOUNDED_COMPACTION,
    TopicTail,
    ensure_internal_topic,
    internal_topics_limit,
)
from mirror_core.stores.records import (
    decode_checkpoint_key,
    decode_checkpoint_value,
    encode_checkpoint_key,
    encode_checkpoint_value,
)
from mirror_core.throttling import ThrottledLine

log = logging.getLogger(__name__)
#: max.message.bytes explicit (Kafka's default): what a writer assumes where the target does not say
#: (internal_topics.internal_topics_limit), so a smaller broker default does not apply to them
CHECKPOINTS_TOPIC_CONFIG = {"cleanup.policy": "compact", **BOUNDED_COMPACTION,
                            "max.message.bytes": str(KAFKA_DEFAULT_MESSAGE_MAX_BYTES)}
SOURCE_PROBE_TIMEOUT_S = 2.0


def checkpoints_topic(source_alias: str) -> str:
    """MM2's name: ``<source alias>.checkpoints.internal`` on the target cluster."""
    return f"{source_alias}.checkpoints.internal"


def ensure_checkpoints_topic(admin: AdminClient, topic: str, replication_factor: int) -> None:
    ensure_internal_topic(admin, topic, replication_factor, CHECKPOINTS_TOPIC_CONFIG)


class CheckpointReader:
    """Latest checkpoint per (group, remote topic, partition) -> (upstream, downstream), and when it was
    published (``published_ms``, the record's timestamp: the emitter publishes only changes, so this is
    when the mirror last saw the group's position move)."""

    def __init__(self, consumer: Any, topic: str) -> None:
        self._tail = TopicTail(consumer, topic)
        self.latest: dict[tuple[str, str, int], tuple[int, int]] = {}
        self.published_ms: dict[tuple[str, str, int], int] = {}

    def refresh(self, timeout: float = 30.0) -> dict[tuple[str, str, int], tuple[int, int]]:
        for msg in self._tail.read_new_messages(timeout):
            value = msg.value()
            if value is None:
                continue
            upstream, downstream, _ = decode_checkpoint_value(value)
            key = decode_checkpoint_key(msg.key())
            self.latest[key] = (upstream, downstream)
            self.published_ms[key] = msg.timestamp()[1]
        return self.latest

    def close(self) -> None:
        self._tail.close()


def publish_checkpoint(producer: Producer, topic: str, group: str, remote_topic: str, partition: int,
                       upstream: int, downstream: int,
                       on_delivery: Callable[[KafkaError | None, object], None] | None = None) -> None:
    producer.produce(topic, key=encode_checkpoint_key(group, remote_topic, partition),
                     value=encode_checkpoint_value(upstream, downstream, ""), on_delivery=on_delivery)


def sync_group_offsets(admin: AdminClient, group: str, wanted: dict[tuple[str, int], int],
                       timeout: float = 15, flow: str | None = None,
                       target: ClusterConfig | None = None) -> dict[tuple[str, int], int]:
    """Commit ``wanted`` to ``group`` on the target if it has no active members; never backwards.

    Returns what was committed (empty when the group is active or already at/after every offset).
    ``flow`` and ``target`` name them when the target refuses the group (a missing ACL).
    """
    try:
        if active_members(admin, group, timeout):
            return {}
        current = committed_offsets(admin, group, timeout)
    except KafkaException as exc:
        denied = denied_line(flow, exc, Access("Read", group, target)) if flow and target else None
        if denied is not None:  # the other groups are still synced: said, not raised
            log.warning("%s", denied)
        else:
            log.warning("group offset sync: cannot describe %s on the target: %s", group, exc)
        return {}
    forward = {k: v for k, v in wanted.items() if current.get(k, -1) < v}
    if forward:
        commit_offsets(admin, group, forward, timeout)
    return forward


class CheckpointEmitter(threading.Thread):
    """Runs next to a flow's replicator; all Kafka work here is off the replication hot path."""

    def __init__(self, config: Any, flow: Any, stop: threading.Event, metrics: Any) -> None:
        super().__init__(name=f"checkpoints {flow.name}", daemon=True)
        self.config, self.flow, self.stop, self.metrics = config, flow, stop, metrics
        self._published: dict[tuple[str, str, int], tuple[int, int]] = {}
        self._refused: list[KafkaError] = []  # delivery errors not said yet (_delivered)
        self._refused_line = ThrottledLine()
        self._unread_line = ThrottledLine()  # groups whose offsets could not be read
        self._next_group_sync = 0.0
        self._clients: dict[str, Any] | None = None

    def run(self) -> None:
        failed = 0  # rounds failed in a row
        try:
            while not self.stop.wait(self.flow.checkpoints_interval_s):
                try:
                    if failed % 4 > 0:
                        # After a failed round, a short probe first: a source that is down fails the
                        # round in seconds, so a flow stop (a lost primary's failover) is not held up
                        # by this thread waiting out the long timeouts of a full round. Every fourth
                        # round goes without it: a big or distant source may need longer than the probe.
                        self._open()["src_admin"].list_topics(timeout=SOURCE_PROBE_TIMEOUT_S)
                    self.emit_once()
                    failed = 0
                except Exception as exc:
                    failed += 1
                    self.metrics.errors.labels(self.flow.name, "checkpoints").inc()
                    log.warning("flow %s: checkpoint round failed: %s", self.flow.name, str(exc) or type(exc).__name__)
        finally:
            self.close()

    def _open(self) -> dict[str, Any]:
        from mirror_core.clients import make_admin, make_consumer, make_producer
        from mirror_core.stores.offset_syncs import flow_map_reader
        from mirror_core.stores.progress import ProgressStore

        if self._clients is None:
            src, tgt = self.config.cluster(self.flow.source), self.config.cluster(self.flow.target)
            tgt_admin, topic = make_admin(tgt), checkpoints_topic(self.flow.source)
            ensure_checkpoints_topic(tgt_admin, topic, self.flow.checkpoints_replication_factor)
            # a round writes a record per group and partition: batches as large as the topic takes, no larger
            fits = internal_topics_limit(tgt_admin, [topic], f"flow {self.flow.name}", self.stop.wait)
            self._clients = {
                "src_admin": make_admin(src), "tgt_admin": tgt_admin,
                "producer": make_producer(tgt, enforced={"linger.ms": "5"}, fits=fits),
                "syncs": flow_map_reader(tgt, "mirror-core.checkpoints", self.flow.source),
                "progress": ProgressStore(self.flow.progress_topic,
                                          make_consumer(tgt, "mirror-core.checkpoints", QUIET), "checkpoints"),
            }
        return self._clients

    def close(self) -> None:
        if self._clients is not None:
            self._clients["producer"].flush(10)
            self._clients["syncs"].close()
            self._clients["progress"].close()
            self._clients = None

    def emit_once(self) -> int:
        """One round: translate every selected group, publish changes, sync idle target groups."""
        import time

        flow = self.flow
        c = self._open()
        src_admin, tgt_admin, producer = c["src_admin"], c["tgt_admin"], c["producer"]
        groups = [g.group_id for g in src_admin.list_consumer_groups(request_timeout=15).result(15).valid
                  if flow.groups.accepts(g.group_id) and not g.group_id.startswith("mirror-core")]
        if not groups:
            return 0
        offset_map = c["syncs"].refresh()
        progress = c["progress"].refresh()
        topic = checkpoints_topic(flow.source)
        sync_now = flow.sync_group_offsets and time.monotonic() >= self._next_group_sync
        published = 0
        # Every group's offsets asked together, then every remote log end the round needs in one ListOffsets per
        # broker: one after another, 100 groups x 2,000 partitions cost thousands of round trips a round.
        by_group: dict[str, Offsets] = {}
        unread: dict[str, Exception] = {}
        for group, got in committed_offsets_of(src_admin, groups, stop=self.stop).items():
            if isinstance(got, Exception):
                unread[group] = got
            else:
                by_group[group] = got
        if self.stop.is_set():
            return 0  # the flow is stopping: the groups not asked are no failure
        if unread and not by_group:
            raise next(iter(unread.values()))  # nothing could be read (the source down?): the round failed
        self._say_unread(unread)
        takes = flow.replicated_topics()
        facts = PartitionFacts(flow, offset_map, progress,
                               {k for offsets in by_group.values() for k in offsets if takes(k[0])},
                               partial(log_ends_batch, tgt_admin))
        for group, offsets in by_group.items():
            translated: dict[tuple[str, int], int] = {}
            for (t, p), upstream in offsets.items():
                if not takes(t):
                    continue
                remote, tr = facts.translate(t, p, upstream)
                if tr.target_offset is None or not tr.exact:
                    continue
                translated[(remote, p)] = tr.target_offset
                if not flow.emit_checkpoints:
                    continue  # group offset sync only
                key, value = (group, remote, p), (upstream, tr.target_offset)
                if self._published.get(key) != value:
                    publish_checkpoint(producer, topic, group, remote, p, upstream, tr.target_offset,
                                       partial(self._delivered, key, value))
                    self._published[key] = value
                    published += 1
            if sync_now and translated:
                committed = sync_group_offsets(tgt_admin, group, translated, flow=flow.name,
                                               target=self.config.cluster(flow.target))
                if committed:
                    log.info("flow %s: synced %d offsets of group %s to %s", flow.name, len(committed), group,
                             flow.target)
        if sync_now:
            self._next_group_sync = time.monotonic() + flow.sync_group_offsets_interval_s
        unsent = producer.flush(30)
        refused, self._refused = self._refused, []  # this round's, and earlier ones' that arrived since
        self._say_refused(topic, refused, unsent)
        # (Refusals said here may be an earlier round's too: never below 0.)
        return max(0, published - len(refused))

    def _say_unread(self, unread: dict[str, Exception]) -> None:
        """Groups whose offsets could not be read this round (their coordinator unavailable, a timeout): the
        others are published all the same; each such group is said at most once a minute, and counted."""
        if unread and self.metrics is not None:
            self.metrics.errors.labels(self.flow.name, "checkpoints").inc()
        for group, exc in unread.items():
            if self._unread_line.due(group):
                log.warning("flow %s: offsets of group %s not read on %s (%s); its checkpoints wait for a later "
                            "round, the other groups' are published", self.flow.name, group, self.flow.source,
                            str(exc) or type(exc).__name__)

    def _delivered(self, key: tuple[str, str, int], value: tuple[int, int], err: KafkaError | None,
                   _msg: object) -> None:
        """A checkpoint the target refused is forgotten (unless a newer one for the same key was published
        since), so that the next round publishes it again. Served by flush, on this thread."""
        if err is not None:
            self._refused.append(err)
            if self._published.get(key) == value:
                del self._published[key]

    def _say_refused(self, topic: str, refused: list[KafkaError], unsent: int) -> None:
        """A warning per error code (throttled: librdkafka's text counts the records), counted."""
        if refused and self.metrics is not None:
            self.metrics.errors.labels(self.flow.name, "checkpoints").inc()
        by_code: dict[int, list[KafkaError]] = {}
        for err in refused:
            by_code.setdefault(err.code(), []).append(err)
        for code, errs in by_code.items():
            if self._refused_line.due(str(code)):
                log.warning("flow %s: %d checkpoints not written to %s (%s); published again next round",
                            self.flow.name, len(errs), topic, errs[-1].str())
        if unsent and self._refused_line.due("unsent"):
            log.warning("flow %s: %d checkpoints not acknowledged by %s after 30 s; whatever it refuses is published "
                        "again at a later round", self.flow.name, unsent, topic)

