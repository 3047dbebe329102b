"""Which target producer carries a partition, when a flow has several (``replication.producers``).

librdkafka sends one partition's batch per produce request, at most five requests in flight per connection
(per target broker) and, with idempotence, one per partition once a batch holds five or more records: it
counts a partition's in-flight *records* against the limit of five requests (librdkafka 2.15;
confluentinc/librdkafka#4989 is open). Over a long round trip one producer therefore carries at most five
batches per target broker per round trip, however much bandwidth the link has. Each producer has its own
connections, so N producers have up to N times that window; but while all of a producer's partitions wait
for their responses with records queued behind, its broker thread polls without sleeping (the linger
wake-up is set before the in-flight check turns the partition away): 0.12-0.27 of a core per producer over
80 ms on a saturated 2-core machine, more when cores are free (``python -m bench.probes.wan_threads``). So with
several producers the records behind wait in the mirror instead (``replication.one.batch.per.partition``,
produce.py), and the threads sleep. A partition always goes through
the same producer (its order and the idempotent producer's sequence numbers are per producer); progress and
offset-map records go through the first, or, when the producers' batches may outgrow what the single-partition
internal topics take (their max.message.bytes on the target: one batch per partition raises the limit to 8 MiB,
and users raise batch.size), through a producer of their own whose batches fit them (make_target_producers).
Exactly-once writes them in each slot's transaction, so there the slot producers' batches are capped instead
(say_slot_cap).
"""

from __future__ import annotations

import logging
import time
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient

from mirror_core.clients import ClusterHealth, batch_limit_bytes, make_producer, producer_settings
from mirror_core.config.client_defaults import PARKED_PRODUCER_DEFAULTS
from mirror_core.config.model import ClusterConfig, FlowConfig
from mirror_core.stores.internal_topics import internal_topics_limit
from mirror_core.stores.offset_syncs import offset_syncs_topic

P = TypeVar("P")
log = logging.getLogger(__name__)


def producer_for(producers: Sequence[P], topic: str, partition: int) -> P:
    """The same producer for a partition for the life of the process; consecutive partitions of a topic
    go to consecutive producers (a topic's partitions spread evenly)."""
    if len(producers) == 1:
        return producers[0]
    return producers[(zlib.crc32(topic.encode()) + partition) % len(producers)]


#: ``replication.producers = auto``: a round trip to the target of at least this long is a long-haul WAN (the
#: mirror next to the source), where 4 producers with one batch per partition won: at 80 and 150 ms they carried
#: 1.19x / 1.42x one producer's rate of 1 KiB records at about half its p99. Below it they did not win: at 20, 40
#: and 60 ms one producer copied 100 B 1.04-1.22x faster; with 1 KiB 4 were 6 % / 5 % faster at 20 / 60 ms and one
#: 1.57x faster at 40 ms (2 runs each, 2026-11-27, bench --only wan); on loopback one was 1.10x faster (2,000
#: partitions). Between 60 and 80 ms: not measured.
WAN_ROUND_TRIP_S = 0.070
#: producers ``auto`` chooses over a WAN: 4 brought the p99 next to the source below MirrorMaker 2's and 1.4x
#: its throughput at 80 ms; 8 were no faster (bench --only wan, 2026-11-27)
WAN_PRODUCERS = 4
#: metadata requests timed to measure the round trip (after one that opens the connection); the fastest counts,
#: since a busy host only ever adds to a sample
ROUND_TRIP_SAMPLES = 3


@dataclass(frozen=True)
class ProducerChoice:
    """The target producers of one pipeline, chosen at its start."""
    #: None: exactly-once, a transactional producer per slot (exactly_once.py)
    count: int | None
    one_batch_per_partition: bool
    reason: str
    #: the measured round trip to the target (``replication.producers = auto``); None: not measured
    round_trip_s: float | None = None

    def producer_defaults(self) -> dict[str, str]:
        """Settings under the user's for the pipeline's at-least-once producers."""
        if self.count is None or not self.one_batch_per_partition:
            return {}
        return dict(PARKED_PRODUCER_DEFAULTS)

    def entry(self) -> dict[str, object]:
        """For /status."""
        return {"count": self.count, "one_batch_per_partition": self.one_batch_per_partition,
                "round_trip_ms": None if self.round_trip_s is None else round(self.round_trip_s * 1000, 1),
                "reason": self.reason}


def make_target_producers(cluster: ClusterConfig, overrides: Mapping[str, str], health: ClusterHealth,
                          choice: ProducerChoice, internal: int) -> tuple[list[Producer], Producer | None]:
    """At-least-once: ``choice.count`` data producers and, when their batches may outgrow ``internal`` (what the
    single-partition internal topics take), one whose batches do not, for progress and offset-map records."""
    bigger = choice.producer_defaults()
    data = [make_producer(cluster, overrides, health, defaults=bigger) for _ in range(choice.count or 0)]
    own = batch_limit(cluster, overrides, choice) > internal
    return data, make_producer(cluster, overrides, health, fits=internal) if own else None


def say_slot_cap(flow: str, limit: int, internal: int, topics: Sequence[str]) -> None:
    """Exactly-once: the slots' transactional producers, whose batches would reach ``limit`` bytes, keep them
    within ``internal`` (``fits``), so that the progress and offset-map records of each transaction fit
    ``topics``; said, since the data batches are capped too."""
    if limit > internal:
        log.warning("flow %s: exactly-once: target producer batches capped at %d bytes (batch.size; %d otherwise): "
                    "progress and offset-map records go in each transaction's producer, and %s take that much "
                    "(max.message.bytes, or Kafka's default where the target does not say); raise it there to let "
                    "data batches grow", flow, internal, limit, " and ".join(topics))


def batch_limits(cluster: ClusterConfig, flow: FlowConfig, choice: ProducerChoice, admin: AdminClient,
                 wait: Callable[[float], bool]) -> tuple[int, int]:
    """(the most bytes the pipeline's data producers put in one batch, what its internal topics take: progress
    and offset syncs, read from the target, ``wait`` stopping the wait for a topic just created). Progress and
    offset-map records must go in batches their topics take, like the data (produce.py); exactly-once they go
    in each slot's transactional producer, whose batches are then capped to the second (said)."""
    topics = [flow.progress_topic, offset_syncs_topic(flow.source)]
    internal = internal_topics_limit(admin, topics, f"flow {flow.name}", wait)
    limit = batch_limit(cluster, flow.producer_overrides, choice)
    if choice.count is None:
        say_slot_cap(flow.name, limit, internal, topics)
        limit = min(limit, internal)
    return limit, internal


def batch_limit(cluster: ClusterConfig, overrides: Mapping[str, str], choice: ProducerChoice) -> int:
    """The most bytes the pipeline's producers put in one batch (batch.size, message.max.bytes), before any cap
    for the internal topics."""
    return batch_limit_bytes(producer_settings(cluster, overrides, defaults=choice.producer_defaults()))


def _parking_applies(flow: FlowConfig) -> bool:
    """Whether one batch per partition can apply: not with the identity policy, whose records are proved
    delivered one by one (produce.py), and not when it is switched off."""
    return not flow.policy.uses_provenance and flow.one_batch_per_partition is not False


def needs_round_trip(flow: FlowConfig) -> bool:
    """Whether choose_producers would use a measured round trip."""
    return flow.producers is None and not flow.exactly_once and _parking_applies(flow) and flow.data_path == "records"


#: the batches data path's connections per target broker with replication.producers = auto: a broker handles one
#: request of a connection at a time; two took the same batches faster than one, four no faster than two
#: (bench.probes.target_ceiling)
BATCH_SENDER_CONNECTIONS = 2


def batch_sender_connections(flow: FlowConfig) -> int:
    """The wire sender's connections per target broker (replication.producers on the batches data path)."""
    return flow.producers if flow.producers is not None else BATCH_SENDER_CONNECTIONS


def choose_producers(flow: FlowConfig, round_trip_s: float | None) -> ProducerChoice:
    """Exactly-once: a transactional producer per slot (count None), one batch per partition only when set.
    At-least-once: ``flow.producers`` when set. With ``auto`` (None): WAN_PRODUCERS when the measured
    ``round_trip_s`` is WAN_ROUND_TRIP_S or more, else 1; 1 also when it could not be measured (None), and when
    one batch per partition cannot apply, without which each producer's thread spins while its partitions wait
    (18-26 CPU-s per M records at 80 ms). One batch per partition when set, else (``auto``) with more than one
    producer. Never with the identity policy, whose records produce.py proves delivered one by one. One producer on
    the batches data path: the records go by the wire sender (batch_path.py), so more would only idle; there
    replication.producers is the sender's connections per target broker (:func:`batch_sender_connections`)."""
    no_provenance = not flow.policy.uses_provenance
    if flow.exactly_once:
        return ProducerChoice(None, bool(flow.one_batch_per_partition) and no_provenance,
                              "exactly-once: a transactional producer per slot")
    measured = None
    if flow.data_path == "batches":  # the wire sender carries the records: one producer for progress and the map
        lanes = batch_sender_connections(flow)
        how = "replication.producers" if flow.producers is not None else "auto"
        said = "; replication.one.batch.per.partition does not apply to it" if flow.one_batch_per_partition \
            is not None else ""
        return ProducerChoice(1, False, "replication.data.path = batches: one, for progress and offset-map "
                                        f"records; the records go over {lanes} connection{'s' if lanes > 1 else ''} "
                                        f"per target broker ({how}){said}")
    if flow.producers is not None:
        count, reason = flow.producers, "replication.producers set"
    elif not _parking_applies(flow):
        count, reason = 1, ("auto: 1, since one batch per partition does not apply (identity policy, or "
                            "replication.one.batch.per.partition = false)")
    elif round_trip_s is None:
        count, reason = 1, "auto: the target did not answer the round-trip probe; 1 until the next start"
    else:
        count, measured = (WAN_PRODUCERS if round_trip_s >= WAN_ROUND_TRIP_S else 1), round_trip_s
        side = ">=" if round_trip_s >= WAN_ROUND_TRIP_S else "<"
        reason = f"auto: round trip to the target {round_trip_s * 1000:.1f} ms {side} {WAN_ROUND_TRIP_S * 1000:.0f} ms"
    one_batch = flow.one_batch_per_partition if flow.one_batch_per_partition is not None else count > 1
    return ProducerChoice(count, one_batch and no_provenance, reason, measured)


RoundTripProbe = Callable[[Consumer, str, Callable[[], bool]], float | None]


class ProducerChooser:
    """Chooses the target producers at each pipeline start of one run of a flow. With ``auto`` the round trip to
    the target is measured at the first start that gets an answer and kept for the run: a round trip near
    WAN_ROUND_TRIP_S must not flip the count at every restart. A stopping flow does not measure, and neither logs
    nor shows its choice."""

    def __init__(self, flow: FlowConfig, stopped: Callable[[], bool], show: Callable[[dict[str, object]], None],
                 probe: RoundTripProbe | None = None) -> None:
        self._flow = flow
        self._stopped = stopped
        self._show = show  # /status (Reporter.set_producers)
        self._probe: RoundTripProbe = probe or measure_round_trip
        #: the measured round trip (None: not measured yet)
        self.round_trip_s: float | None = None

    def choose(self, target_meta: Consumer) -> ProducerChoice:
        """This pipeline's producers, logged (a warning when auto got no answer) and shown unless the flow is
        stopping."""
        flow = self._flow
        if self.round_trip_s is None and needs_round_trip(flow) and not self._stopped():
            self.round_trip_s = self._probe(target_meta, flow.progress_topic, self._stopped)
        choice = choose_producers(flow, self.round_trip_s)
        if self._stopped():  # the pipeline is closed at once: nothing to say about it
            return choice
        unanswered = needs_round_trip(flow) and self.round_trip_s is None
        parking = "on" if choice.one_batch_per_partition else "off"
        if choice.count is None:
            log.info("flow %s: %s, one batch per partition %s", flow.name, choice.reason, parking)
        else:
            log.log(logging.WARNING if unanswered else logging.INFO, "flow %s: %d target producer%s, one batch per "
                    "partition %s (%s)", flow.name, choice.count, "" if choice.count == 1 else "s", parking,
                    choice.reason)
        self._show(choice.entry())
        return choice


def measure_round_trip(meta: Consumer, topic: str, stopped: Callable[[], bool], budget_s: float = 10.0,
                       samples: int = ROUND_TRIP_SAMPLES,
                       clock: Callable[[], float] = time.monotonic) -> float | None:
    """Seconds for the fastest of ``samples`` metadata requests for ``topic`` (after one that opens the
    connection), all within ``budget_s``. A request that fails or times out does not count; None when none
    answered (or the first, connecting one did not, or ``stopped``)."""
    if stopped():
        return None
    deadline = clock() + budget_s
    try:
        meta.list_topics(topic, timeout=budget_s)
    except KafkaException:
        return None
    best: float | None = None
    for _ in range(samples):
        left = deadline - clock()
        if left <= 0 or stopped():
            break
        began = clock()
        try:
            meta.list_topics(topic, timeout=left)
        except KafkaException:
            continue
        took = clock() - began
        best = took if best is None else min(best, took)
    return best
