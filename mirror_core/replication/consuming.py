"""The consume side of one run of a flow's pipeline: read what the source consumer holds, split it into runs
of one partition for the producing side (produce.py), and sort the consumer's errors into what stops the
flow (raised), what stops one topic (named once) and what is only logged.

On the batches data path (batch_path.py) the consumer reads no records: it only serves the group here.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

from confluent_kafka import KafkaError, Message

from mirror_core.authorization import Access, check, denied_line
from mirror_core.clients import fatal_consumer_error
from mirror_core.config.model import ClusterConfig, FlowConfig
from mirror_core.metrics import Metrics
from mirror_core.replication.acks import Acks
from mirror_core.replication.assignment import Assignment
from mirror_core.replication.batch import PartitionState
from mirror_core.replication.source_reader import SourceReader

log = logging.getLogger(__name__)

#: how long one pass of the loop waits for a record when there is none (it serves the rest meanwhile)
IDLE_WAIT_S = 0.02


def consume_ready(consumer: SourceReader, batch_max: int, wait_s: float = IDLE_WAIT_S) -> list[Message]:
    """What the consumer holds now, up to ``batch_max`` records; when it holds nothing, wait up to ``wait_s``
    for the first record and return as soon as it arrives (``consume(n, t)`` would wait the full ``t`` for
    ``n`` records at light load), with whatever came with it."""
    msgs: list[Message] = consumer.consume(batch_max, 0)
    if msgs:
        return msgs
    first = consumer.poll(wait_s)
    if first is None:
        return []
    return [first, *consumer.consume(batch_max - 1, 0)] if batch_max > 1 else [first]


class Reading(Protocol):
    """One pipeline run's read of the source, as the loop (replicator.py) drives it on either data path: records
    consumed and produced (:class:`Consuming`), or source batches fetched and sent whole
    (batch_path.CopierReading)."""

    @property
    def full(self) -> bool:
        """As much in flight as the data path takes on its own count (beyond the loop's record count)."""
        ...

    def read(self, limit: int, wait_s: float) -> int:
        """Read up to ``limit`` records (waiting up to ``wait_s`` for the first) and hand them on; how many."""
        ...

    def hold(self) -> None:
        """Reading is held (back-pressure, a bandwidth limit): serve what must go on meanwhile (the group)."""
        ...

    def gate(self, until: float) -> None:
        """The flow's bandwidth limit holds reading until this monotonic time (controls.py)."""
        ...

    def in_flight_bytes(self) -> int | None:
        """The bytes handed on and not answered, where the data path counts them (None: it does not)."""
        ...


class Consuming:
    """Reads the source consumer for one run of the pipeline (the hot path of the records data path)."""

    def __init__(self, flow: FlowConfig, source: ClusterConfig, metrics: Metrics, consumer: SourceReader,
                 assignment: Assignment, acks: Acks, produce_run: Callable[[PartitionState, list[Message]], None],
                 denied_topics: set[str | None]) -> None:
        self.flow = flow
        self.source = source
        self.metrics = metrics
        self.consumer = consumer
        self.assignment = assignment
        self.acks = acks
        self.produce_run = produce_run
        #: source topics the source refuses to let us read (named once; outlives the run)
        self.denied_topics = denied_topics

    @property
    def full(self) -> bool:
        return False  # (in flight is counted by the loop, in records)

    def hold(self) -> None:
        """(the consumer's own polls serve the group: nothing to do while reading is held)"""

    def gate(self, until: float) -> None:
        """(a held read is the loop's: it reads nothing while gated)"""

    def in_flight_bytes(self) -> int | None:
        return None

    def read(self, limit: int, wait_s: float) -> int:
        """Consume up to ``limit`` records and produce them; the number read."""
        msgs = consume_ready(self.consumer, limit, wait_s)
        self.assignment.raise_callback_error()
        if msgs:
            self._dispatch(msgs)
        return len(msgs)

    def serve_group(self) -> None:
        """The batches data path: serve the group (rebalance callbacks) and its errors. Every assigned partition
        is paused on the consumer: a record fetched before its pause is dropped here (the wire fetcher reads it)."""
        for m in self.consumer.consume(64, 0):
            err = m.error()
            if err is not None:
                self._error(err, m.topic())
        self.assignment.raise_callback_error()

    def _dispatch(self, msgs: list[Message]) -> None:
        """Split a consumed batch into runs of one partition and produce each."""
        states, produce_run = self.assignment.states, self.produce_run
        # A partition rewound while this batch is dispatched (exactly-once: a careful record's transaction
        # failed and the slot's partitions went back to their committed progress) is re-read from its
        # new position: the rest of this batch's records of it must not be produced.
        rewound = self.acks.rewound
        rewound.clear()
        n = len(msgs)
        i = 0
        while i < n:
            m = msgs[i]
            err = m.error()
            if err is not None:
                if err.code() == KafkaError._BAD_MSG and self._damaged(m, err):
                    i += 1
                    continue
                self._error(err, m.topic())
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
            st = states.get((topic, partition))
            if st is not None and st.copying and st not in rewound:
                produce_run(st, msgs[i:j])
                if self.acks.count_read is not None:  # (a bandwidth limit: its bytes counted as they are read)
                    self.acks.count_read(topic, sum(map(len, msgs[i:j])))
            i = j

    def _damaged(self, m: Message, err: KafkaError) -> bool:
        """librdkafka found a source batch damaged (check.crcs): it would go on past it, so the partition pauses at
        it (replication/damage.py). False when the error names no partition of ours (logged as any other)."""
        st = self.assignment.states.get((m.topic() or "", m.partition() or 0))
        offset = m.offset()
        if st is None or offset is None or offset < 0 or m.partition() is None:
            return False
        if st.copying and st not in self.acks.rewound:  # (else read from before a seek of it in this batch)
            self.acks.damaged(st, self.source.alias, f"record batch at offset {offset} is damaged: {err.str()}",
                              offset, None)
        return True

    def _error(self, err: KafkaError, topic: str | None) -> None:
        code = err.code()
        if code == KafkaError._PARTITION_EOF:
            return
        flow = self.flow
        self.metrics.errors.labels(flow.name, "consume").inc()
        if code == KafkaError.GROUP_AUTHORIZATION_FAILED:
            # The source refuses to let the worker group read (or join): nothing can be copied; say which ACL.
            check(flow.name, err, Access("Read", flow.worker_group_id, self.source))
        line = denied_line(flow.name, err, Access("Read", topic or "?", self.source))
        if line is not None:
            # One topic refused: that topic is not copied (named once), the others go on.
            if topic not in self.denied_topics:
                self.denied_topics.add(topic)
                self.metrics.errors.labels(flow.name, "not_authorized").inc()
                log.error("%s", line)
            return
        fatal = fatal_consumer_error(err, flow.worker_group_id, self.source.alias, self.consumer.memberid)
        if fatal is not None:
            raise fatal
        if code in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC):
            self.assignment.request_refresh(within_s=1.0)
        log.warning("flow %s: consumer error: %s", flow.name, err.str())
