"""Per-partition pipeline state of the replicator: produced runs awaiting acknowledgement.

A *batch* (:class:`Batch`) is one run of consecutive records of one source partition produced in one go; on the
batches data path it is a :class:`WholeBatch`, one source record batch copied whole. Only its
first and last records carry a delivery callback (no per-record Python callbacks on the hot path).
With an idempotent producer and an exclusive writer, a batch of ``count`` records whose first and
last records were acknowledged at target offsets ``t_first`` and ``t_last`` with
``t_last - t_first == count - 1`` landed completely; anything else is treated as a failure and the
partition is rewound (at-least-once), in *careful* mode where each record is produced and
acknowledged on its own so that a bad record is identified exactly.
"""

from __future__ import annotations

import time
from collections import deque
from enum import Enum
from typing import Any

from confluent_kafka import KafkaError, TopicPartition

# Errors tied to one record: the partition is paused at that record and reported, never skipped.
RECORD_ERRORS = frozenset({KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.INVALID_RECORD,
                           KafkaError.RECORD_LIST_TOO_LARGE, KafkaError.INVALID_MSG,
                           KafkaError.INVALID_MSG_SIZE})

#: librdkafka's RD_KAFKA_IDEMP_MAX_INFLIGHT: requests in flight per partition, which it counts in records
IDEMP_MAX_INFLIGHT = 5


class Batch:
    __slots__ = ("acked_at", "count", "err", "first", "gaps", "gen", "next", "pending", "purged", "size", "skipped",
                 "stamps", "t_first", "t_last", "ts_last", "wire")

    def __init__(self, gen: int, first: int) -> None:
        self.gen = gen
        self.first = first  # source offset of the first record in the run
        self.next = first  # source offset after the run (next to read)
        self.count = 0
        self.size = 0  # key and value bytes
        #: bytes as librdkafka counts them (headers and record overhead too), where a batch limit applies; else 0
        self.wire = 0
        self.pending = 0  # delivery callbacks still expected
        self.t_first = -1
        self.t_last = -1
        self.ts_last = 0
        #: source timestamps (ms) of the batch's records, for the latency histogram of every record
        self.stamps: list[int] = []
        self.err: KafkaError | None = None
        self.purged = False  # exactly-once: failed, and what its producer still held purged (acks.py)
        self.acked_at = 0.0
        #: (index in the run, source offset) of each record that follows a source gap
        #: (compaction, transaction markers): where the offset map needs a new run.
        self.gaps: list[tuple[int, int]] = []
        #: source offsets deliberately not copied (a mirror's own copies, replication/mirror_writes.py; a damaged batch
        #: an operator skipped, replication/damage.py): no records (PartitionState.pass_over)
        self.skipped = False

    @classmethod
    def record(cls, gen: int, offset: int, reported: bool) -> Batch:
        """A batch of the one record at ``offset``; ``reported``: a delivery report is expected."""
        b = cls(gen, offset)
        b.next, b.count, b.pending = offset + 1, 1, 1 if reported else 0
        return b

    def _record(self, err: KafkaError | None, msg: Any, first: bool, last: bool) -> None:
        if err is not None:
            # A record error says more than the other report's: a transaction failed by a refused request purges
            # what is queued behind it, and that report may come first (exactly-once would take a refused batch
            # for a transient failure).
            if self.err is None or (err.code() in RECORD_ERRORS and self.err.code() not in RECORD_ERRORS):
                self.err = err
        else:
            off = msg.offset()
            if first:
                self.t_first = off
            if last:
                self.t_last = off
                self.acked_at = time.time()
        self.pending -= 1

    def on_first(self, err: KafkaError | None, msg: Any) -> None:
        self._record(err, msg, True, False)

    def on_last(self, err: KafkaError | None, msg: Any) -> None:
        self._record(err, msg, False, True)

    def on_single(self, err: KafkaError | None, msg: Any) -> None:
        self._record(err, msg, True, True)

    def fail(self, err: KafkaError) -> None:
        """A synchronous produce failure: the batch fails once outstanding callbacks arrive."""
        self.err = self.err or err

    @property
    def done(self) -> bool:
        return self.pending <= 0

    @property
    def landed(self) -> bool:
        """True when every record of the run is known to be on the target."""
        if self.err is not None:
            return False
        return self.count == 0 or self.t_last - self.t_first == self.count - 1


class WholeBatch(Batch):
    """One source record batch copied whole (the batches data path, batch_path.py), acknowledged as a Batch is:
    ``size`` is the bytes sent (the record batch, header included), not its records' key and value bytes;
    ``sources``: how many source batches it holds (consecutive small ones are sent as one: batch_path.py)."""

    __slots__ = ("sources",)
    sources: int


class Parked:
    """Records of one partition read and waiting until the producer can send them (produce.py, one batch per
    partition).
    Taken from the front: a list read from ``start``, so a batch taken costs what it holds, not what waits
    behind it."""

    __slots__ = ("records", "start")

    def __init__(self) -> None:
        self.records: list[Any] = []
        self.start = 0

    def __len__(self) -> int:
        return len(self.records) - self.start

    def extend(self, run: list[Any]) -> None:
        self.records.extend(run)

    def take(self, n: int) -> list[Any]:
        """The first ``n`` records, removed."""
        run = self.records[self.start:self.start + n]
        self.start += len(run)
        if self.start >= len(self.records):
            self.clear()
        elif self.start > 4096 and 2 * self.start > len(self.records):
            del self.records[:self.start]  # what is taken stops holding memory (amortised: half at least)
            self.start = 0
        return run

    def clear(self) -> None:
        self.records = []
        self.start = 0


class PartitionMode(Enum):
    """Whether a partition's records may be produced now."""

    #: records flow (one at a time when ``careful``)
    COPYING = "copying"
    #: a produce failed: nothing more until the acknowledgement side has handled the failure
    BLOCKED = "blocked"
    #: a delivery failed: the partition is paused on the consumer until ``retry_at``, then re-read
    BACKOFF = "backoff"
    #: the target refuses a record: stopped right there (``paused_reason``) until a restart
    PAUSED = "paused"


class PartitionState:
    """Replication state of one assigned source partition.

    ``acked`` is the next source offset such that every record before it is acknowledged by the
    target; it is the only value ever written as progress. ``mode`` says whether records may be
    produced now; ``careful`` (orthogonal to it) that they go one record at a time, each acknowledged
    on its own, to pinpoint a record the target refuses; ``gen`` tells late delivery reports of
    batches forgotten by a rewind from current ones.
    """

    __slots__ = ("acked", "backoff", "careful", "committed", "delta", "gen", "is_heartbeat", "landed_bytes",
                 "landed_latency", "landed_records", "map_durable", "map_gen", "mode", "next", "origin", "parked",
                 "partition", "paused_reason", "pending", "producer", "remote", "retry_at", "slot", "syncs",
                 "syncs_in_flight", "t_next", "topic", "tp")

    def __init__(self, topic: str, partition: int, remote: str, resume: int | None, is_heartbeat: bool,
                 producer: Any = None, slot: int | None = None) -> None:
        self.topic = topic
        self.partition = partition
        self.remote = remote
        self.tp = TopicPartition(topic, partition)
        self.next: int | None = resume  # next offset expected from the consumer
        self.acked: int | None = resume
        self.committed: int | None = resume
        self.pending: deque[Batch] = deque()
        #: records consumed and not yet handed to the producer (one batch per partition, produce.py)
        self.parked = Parked()
        self.gen = 0
        self.careful = False
        self.mode = PartitionMode.COPYING
        self.paused_reason: str | None = None  # PAUSED: why
        self.retry_at = 0.0  # BACKOFF: monotonic time of the retry
        self.backoff = 0.5
        self.is_heartbeat = is_heartbeat
        #: target - source of the current offset-map run (None: the next landed record starts one)
        self.delta: int | None = None
        #: target offset after the last landed record (None: nothing landed since the map was reset)
        self.t_next: int | None = None
        #: at-least-once: progress may cover records below this offset (their map entries are durable)
        self.map_durable: int | None = resume
        #: at-least-once: map entries sent and not yet acknowledged by the target
        self.syncs_in_flight = 0
        #: bumped when the map is reset, so late acknowledgements of older entries are ignored
        self.map_gen = 0
        #: offset-map entries (source, target) of landed records, written before the next progress
        self.syncs: list[tuple[int, int]] = []
        #: the target producer of this partition (exactly-once: its slot's transactional producer)
        self.producer = producer
        #: exactly-once slot (fencing unit) owning this partition; None at-least-once
        self.slot = slot
        #: first source offset consumed since assignment: where to rewind when nothing is committed
        self.origin: int | None = resume
        #: acknowledged since the partition's counters were last brought up to date (once per publish,
        #: reporting.py: Prometheus updates cost more than the rest of a small batch's acknowledgement): records,
        #: their key and value bytes, and the latency of the newest of them (None: none since)
        self.landed_records = 0
        self.landed_bytes = 0
        self.landed_latency: float | None = None

    @property
    def in_flight_full(self) -> bool:
        """librdkafka's idempotent producer would hold this partition's next batch until an acknowledgement:
        it lets a partition have at most IDEMP_MAX_INFLIGHT requests in flight less one per record in flight,
        so 5 records or more in flight hold it (one batch under a backlog; a few small ones at a light load)."""
        n = 0
        for b in self.pending:
            if b.pending > 0:
                n += b.count
                if n >= IDEMP_MAX_INFLIGHT:
                    return True
        return False

    def pass_over(self, first: int, end: int) -> Batch:
        """Source offsets ``first``..``end - 1`` deliberately not copied: acknowledged at once, in order with the
        batches around them, with an offset-map entry where the next copy lands (map_landed); read on from ``end``."""
        b = Batch(self.gen, first)
        b.next, b.skipped = end, True
        self.pending.append(b)
        self.next = end
        if self.origin is None:
            self.origin = first
        return b

    def drop_unsent(self) -> None:
        """Forget batches in flight and parked records: the partition is re-read, or no longer ours."""
        self.pending.clear()
        self.parked.clear()

    @property
    def copying(self) -> bool:
        return self.mode is PartitionMode.COPYING

    def block(self) -> None:
        """No more records until the failure just seen is handled (see acks.py)."""
        if self.mode is not PartitionMode.PAUSED:
            self.mode = PartitionMode.BLOCKED
            self.retry_at = float("inf")  # never due for a resume: only handling the failure reopens it

    def reopen(self, retry_at: float | None = None) -> None:
        """After a rewind: copy again now, or (``retry_at``) after a backoff. A paused partition stays paused."""
        if self.mode is PartitionMode.PAUSED:
            return
        self.mode, self.retry_at = (PartitionMode.COPYING, 0.0) if retry_at is None else \
            (PartitionMode.BACKOFF, retry_at)

    def map_landed(self, b: Batch) -> None:
        """Record offset-map runs for a landed batch (its target offsets are contiguous)."""
        if b.count == 0:
            if b.skipped and self.t_next is not None:
                # Offsets not copied: a position among them translates to where the next copy lands.
                self.map_skipped(b.next, self.t_next)
            return
        self.t_next = b.t_last + 1
        if self.delta != b.t_first - b.first:
            self.delta = b.t_first - b.first
            self.syncs.append((b.first, b.t_first))
        for index, source in b.gaps:
            if index < b.count:
                self.delta = b.t_first + index - source
                self.syncs.append((source, b.t_first + index))

    def map_skipped(self, position: int, target_next: int) -> None:
        """The source skipped offsets up to ``position`` (transaction markers, aborted records): the
        next record lands at ``target_next``. Without this entry the map's last run would extend over
        the skipped offsets, and a group committed past them would translate beyond the target's end."""
        self.delta = target_next - position
        self.t_next = target_next
        self.syncs.append((position, target_next))

    def forget_map(self) -> None:
        """The next landed record starts a new offset-map run (positions were reset or rolled back)."""
        self.delta = None
        self.t_next = None
        self.syncs.clear()
        self.syncs_in_flight = 0
        self.map_gen += 1
        self.map_durable = None
