"""mirror_core's internal topics on the target: creation, what they take, and incremental reading of one partition.

Progress and offset-sync topics have one partition each: a single log gives a total order of writes,
which both rely on (the newest progress wins; a newer offset-sync run supersedes older ones).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Message, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType

from mirror_core.clients import error_code
from mirror_core.config.client_defaults import KAFKA_DEFAULT_MESSAGE_MAX_BYTES
from mirror_core.errors import ProgressError

log = logging.getLogger(__name__)
#: how long a topic the cluster does not know yet (created a moment ago) is asked for again
NEW_TOPIC_WAIT_S = 3.0
#: A compacted internal topic written all the time (progress: each busy partition every offset.flush.interval.ms;
#: checkpoints: each group and partition whose position moved, every round) is read whole by a restart, a
#: translate and a failover from checkpoints. The broker compacts only closed segments, so with its defaults (a
#: segment of 1 GiB or 7 days) what they read grew with uptime: 2,000 busy partitions wrote 1,500 progress records
#: a second, and loading progress and map took 7.2 s after 150 s. Small segments, rolled after 10 min at the
#: latest, bound it by the write rate instead: about a segment plus the last minute's records. The minute of
#: compaction lag is kept on purpose: a reader fixes the end it reads to and has 30 s to get there, and without
#: the lag the cleaner could remove a key's record below that end for a newer one above it while it reads, so the
#: read would miss the key. An existing topic is brought to these (:func:`ensure_internal_topic`): segments no
#: larger and no longer-lived (an operator's lower values are kept), the lag no shorter (an older checkpoints topic
#: had none: with large segments the cleaner hardly ever reached it, with small ones it would).
BOUNDED_COMPACTION = {"segment.bytes": str(8 * 1024 * 1024), "segment.ms": "600000", "min.compaction.lag.ms": "60000"}
#: The :data:`BOUNDED_COMPACTION` keys whose value is a floor rather than a ceiling.
_AT_LEAST = frozenset({"min.compaction.lag.ms"})


def ensure_internal_topic(admin: AdminClient, topic: str, replication_factor: int, config: dict[str, str],
                          timeout: float = 30, partitions: int = 1) -> None:
    """Create the topic if missing (idempotent across instances racing to create it); one that exists gets the
    values ``config`` gives for the :data:`BOUNDED_COMPACTION` keys where its own bound less (an older version's
    topic: progress, checkpoints, the offset-map snapshots)."""
    md = admin.list_topics(topic=topic, timeout=timeout)
    t = md.topics.get(topic)
    if t is not None and t.error is None:
        _bound_compaction(admin, topic, {k: v for k, v in config.items() if k in BOUNDED_COMPACTION}, timeout)
        return
    futures = admin.create_topics([NewTopic(topic, partitions, replication_factor, config=config)],
                                  operation_timeout=timeout)
    try:
        futures[topic].result(timeout)
    except KafkaException as exc:
        if error_code(exc) != KafkaError.TOPIC_ALREADY_EXISTS:
            raise ProgressError(f"cannot create internal topic {topic}: {exc}") from exc


def _bound_compaction(admin: AdminClient, topic: str, wanted: Mapping[str, str], timeout: float) -> None:
    """Lower the topic's segment size and roll time to ``wanted`` where they are higher, raise its compaction lag
    where it is lower. A topic the mirror may not alter (no AlterConfigs on it) is said, with the command that does
    it; the mirror runs on."""
    if not wanted:
        return
    res = ConfigResource(ResourceType.TOPIC, topic)
    try:
        current = admin.describe_configs([res], request_timeout=timeout)[res].result(timeout + 5)
        change = {k: v for k, v in wanted.items() if (e := current.get(k)) is None or e.value is None
                  or (int(e.value) < int(v) if k in _AT_LEAST else int(e.value) > int(v))}
    except Exception as exc:  # asked again at the next start
        log.debug("internal topic %s: configs not read (%s)", topic, exc)
        return
    if not change:
        return
    was = ", ".join(f"{k}={current[k].value if k in current else '(default)'}" for k in change)
    entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in sorted(change.items())]
    try:
        for fut in admin.incremental_alter_configs([ConfigResource(ResourceType.TOPIC, topic,
                                                                   incremental_configs=entries)]).values():
            fut.result(timeout + 5)
    except Exception as exc:
        settings = ",".join(f"{k}={v}" for k, v in sorted(change.items()))
        log.warning("internal topic %s keeps %s (%s): restarts, translations and failovers read more of it the "
                    "longer the mirror runs; set it with: kafka-configs.sh --bootstrap-server <target> --alter "
                    "--entity-type topics --entity-name %s --add-config %s", topic, was,
                    str(exc) or type(exc).__name__, topic, settings)
        return
    log.info("internal topic %s: %s (was %s), so that what a restart reads of it stays bounded", topic,
             ", ".join(f"{k}={v}" for k, v in sorted(change.items())), was)


def max_message_bytes(admin: AdminClient, topics: Sequence[str], timeout: float, who: str) -> dict[str, int | None]:
    """The largest record batch each topic takes: its max.message.bytes as the cluster applies it (set on the
    topic or the broker's default); None for a topic the cluster does not know (yet: one created a moment ago
    has its metadata on the way). A topic it does not answer for otherwise is left out (logged at debug, for
    ``who``)."""
    limits: dict[str, int | None] = {}
    if not topics:
        return limits
    resources = [ConfigResource(ResourceType.TOPIC, t) for t in topics]
    for res, fut in admin.describe_configs(resources, request_timeout=timeout).items():
        try:
            entry = fut.result(timeout + 5).get("max.message.bytes")
        except KafkaException as exc:
            if error_code(exc) == KafkaError.UNKNOWN_TOPIC_OR_PART:
                limits[res.name] = None
            else:
                log.debug("%s: max.message.bytes of %s unknown (%s)", who, res.name, exc)
            continue
        except Exception as exc:  # e.g. no answer in time: asked again next time
            log.debug("%s: max.message.bytes of %s unknown (%s)", who, res.name, exc)
            continue
        if entry is not None and entry.value is not None:
            limits[res.name] = int(entry.value)
    return limits


def _sleep(seconds: float) -> bool:
    time.sleep(seconds)
    return False


@dataclass(frozen=True)
class Asked:
    """How :func:`ask_until_known` ended: ``stopped`` by its ``wait``; ``not_known``: the topics the cluster did not
    know when it ended (the others it gave no limit for did not get an answer)."""

    stopped: bool
    not_known: frozenset[str]

    def why_unknown(self, topic: str) -> str:
        """Why ``topic``'s limit is not known, for the line that says so."""
        if topic in self.not_known and self.stopped:
            return "the target did not know the topic yet when the mirror stopped asking"
        if topic in self.not_known:
            return f"the target does not know the topic {NEW_TOPIC_WAIT_S:.0f} s after it was asked first"
        return "no answer from the target: a missing DescribeConfigs ACL?"


def ask_until_known(describe: Callable[[list[str]], Mapping[str, int | None]], topics: Sequence[str],
                    learned: Callable[[dict[str, int]], None], wait: Callable[[float], bool]) -> Asked:
    """Ask ``describe`` (e.g. max_message_bytes) for the limits of ``topics`` and hand what it knows to
    ``learned``. A topic the cluster does not know yet (None: created a moment ago, its metadata on the way) is
    asked again for up to NEW_TOPIC_WAIT_S, ``wait`` returning True to stop. An exception of ``describe``
    propagates (what was learned before it stays learned)."""
    asked, deadline = list(topics), time.monotonic() + NEW_TOPIC_WAIT_S
    while asked:
        got = describe(asked)
        learned({t: v for t, v in got.items() if v is not None})
        asked = [t for t, v in got.items() if v is None]
        if asked and time.monotonic() >= deadline:
            return Asked(False, frozenset(asked))
        if asked and wait(0.2):
            return Asked(True, frozenset(asked))
    return Asked(False, frozenset())


def internal_topics_limit(admin: AdminClient, topics: Sequence[str], who: str,
                          wait: Callable[[float], bool] = _sleep, timeout: float = 15) -> int:
    """The largest batch every one of ``topics`` takes: what a producer writing to them keeps its batches within
    (clients.producer_settings, ``fits``). A topic the cluster does not know yet is asked again (ask_until_known);
    for one it does not answer for (a missing DescribeConfigs ACL, no answer in time), Kafka's default, said in a
    line. Never raises: a lookup that fails must not stop what writes the topics."""
    limits: dict[str, int] = {}
    asked = Asked(False, frozenset())
    try:
        asked = ask_until_known(lambda names: max_message_bytes(admin, names, timeout, who), topics, limits.update,
                                wait)
    except Exception as exc:  # e.g. the request could not be made at all
        log.debug("%s: max.message.bytes of %s unknown (%s)", who, ", ".join(topics), exc)
    if not asked.stopped:
        for topic in (t for t in topics if t not in limits):
            log.info("%s: max.message.bytes of %s unknown (%s): batches written there kept within Kafka's default %d",
                     who, topic, asked.why_unknown(topic), KAFKA_DEFAULT_MESSAGE_MAX_BYTES)
    default = KAFKA_DEFAULT_MESSAGE_MAX_BYTES
    return min((limits.get(t, default) for t in topics), default=default)


#: How long a read of a one-partition topic gets nothing short of its end before it asks whether the log was
#: trimmed under it (:meth:`TopicTail._skip_trimmed`).
TRIM_CHECK_AFTER_S = 0.5


class TopicTail:
    """Reads a one-partition topic from where the previous call stopped up to its current end."""

    def __init__(self, consumer: Consumer, topic: str) -> None:
        self.topic = topic
        self._consumer = consumer
        self._position = 0

    @property
    def position(self) -> int:
        """The next log offset to read."""
        return self._position

    def seek(self, position: int) -> None:
        """Read from ``position`` on (a snapshot covers what is below it)."""
        self._position = position

    def log_start(self, timeout: float = 30.0) -> int:
        try:
            return int(self._consumer.get_watermark_offsets(TopicPartition(self.topic, 0), timeout=timeout)[0])
        except KafkaException as exc:
            raise ProgressError(f"cannot read internal topic {self.topic}: {exc}") from exc

    def read_new(self, timeout: float = 30.0) -> Iterator[tuple[bytes, bytes | None]]:
        """Yield (key, value) of every record written since the last call (read_committed)."""
        for msg in self.read_new_messages(timeout):
            yield msg.key(), msg.value()

    def read_new_messages(self, timeout: float = 30.0) -> Iterator[Message]:
        """Every keyed record written since the last call (read_committed), as the consumer returned it."""
        tp = TopicPartition(self.topic, 0)
        try:
            low, high = self._consumer.get_watermark_offsets(tp, timeout=timeout)
        except KafkaException as exc:
            raise ProgressError(f"cannot read internal topic {self.topic}: {exc}") from exc
        self._position = max(self._position, low)
        if self._position >= high:
            return
        self._consumer.assign([TopicPartition(self.topic, 0, self._position or OFFSET_BEGINNING)])
        deadline = time.monotonic() + timeout
        idle_since: float | None = None  # since when polls have brought nothing
        try:
            while self._position < high:
                now = time.monotonic()
                if now > deadline:
                    raise ProgressError(f"timed out reading {self.topic} at {self._position}/{high}")
                # As many as are left, in short polls: consume() waits out its timeout for a batch it cannot fill,
                # which cost every small tail (a restart's, a translate's) half a second per topic.
                got = self._consumer.consume(min(10000, high - self._position), 0.1)
                for msg in got:
                    err = msg.error()
                    if err is not None:
                        if err.code() == KafkaError._PARTITION_EOF:
                            continue
                        raise ProgressError(f"internal topic {self.topic}: {err.str()}")
                    self._position = msg.offset() + 1
                    if msg.key() is not None:
                        yield msg
                if self._position < high:
                    # Transaction markers and compaction leave gaps: trust the consumer's position.
                    pos = self._consumer.position([tp])[0].offset
                    if pos is not None and pos >= 0:
                        self._position = max(self._position, pos)
                    if got:
                        idle_since = None
                    elif idle_since is None:
                        idle_since = now
                    elif now - idle_since >= TRIM_CHECK_AFTER_S and self._position < high:
                        idle_since = None
                        self._skip_trimmed(high, max(0.5, min(5.0, deadline - now)))
        finally:
            self._consumer.unassign()

    def _skip_trimmed(self, high: int, timeout: float) -> None:
        """Nothing has come for a while short of the end: was the log trimmed past our position while we read (the
        offset-map pruner's DeleteRecords)? The consumer then jumped to the log's end (librdkafka's reset), past
        what is left to read, whether or not it had handed anything over: go on from the new start instead. A
        caller that keeps a snapshot of what was trimmed sees the start move (:meth:`log_start`) and loads it.
        Before, the read stalled until its timeout. A start that cannot be asked now is asked at the next pause."""
        try:
            low = self.log_start(timeout)
        except ProgressError:
            return
        if low > self._position:
            log.info("%s: trimmed below %d while being read at %d: reading on from there", self.topic, low,
                     self._position)
            self._position = low
            if low < high:
                self._consumer.assign([TopicPartition(self.topic, 0, low)])

    def close(self) -> None:
        self._consumer.close()
