"""Fetch v11 as the batch copier asks it: each partition's record batches as the leader stores them, with the
aborted transactions of the range fetched (read_committed), and what bounds the partition's log."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from mirror_core.wire.codec import ProtocolError, Reader, array, int32, int64, string
from mirror_core.wire.connection import WireError
from mirror_core.wire.errors import name
from mirror_core.wire.integrity import Damage, intact
from mirror_core.wire.records import split_batches

API_FETCH = 1
FETCH_VERSION = 11  # the last non-flexible version (Kafka 2.3 up to 4.x)
READ_COMMITTED = 1


@dataclass
class FetchedPartition:
    topic: str
    partition: int
    error: int
    high_watermark: int
    last_stable: int
    log_start: int
    #: (producer id, first offset) of each aborted transaction overlapping the range fetched
    aborted: list[tuple[int, int]] = field(default_factory=list)
    #: the whole batches fetched (a trailing partial batch is fetched again from the next offset), views into a
    #: copy of the partition's records, not into the answer
    batches: list[memoryview] = field(default_factory=list)
    #: batches the client cannot take (e.g. an older record format), in one line; None when all is well
    problem: str | None = None
    #: the first batch that failed its checks (wire/integrity.py): ``batches`` end before it; None when all passed
    damaged: Damage | None = None
    #: the records' bytes in the answer, a trailing partial batch too (what counted against the answer's limit)
    size: int = 0

    @property
    def nothing_new(self) -> bool:
        """No batch, no error, no problem: nothing new within the wait, or its next batch did not fit."""
        return not self.error and not self.batches and self.problem is None and self.damaged is None


def fetch_request(positions: Mapping[tuple[str, int], int], max_wait_ms: int, min_bytes: int, max_bytes: int,
                  partition_max_bytes: int, isolation: int = READ_COMMITTED,
                  sizes: Mapping[tuple[str, int], int] | None = None) -> bytes:
    """A sessionless fetch from each (topic, partition) at its position, each up to ``partition_max_bytes`` or its
    own entry in ``sizes``. The broker fills the answer in the request's order: topics in the order of their first
    partition in ``positions``, each topic's partitions in their order there."""
    sizes = sizes or {}
    by_topic: dict[str, list[tuple[int, int, int]]] = {}
    for (topic, partition), offset in positions.items():
        by_topic.setdefault(topic, []).append((partition, offset, sizes.get((topic, partition), partition_max_bytes)))
    topics = array(string(topic) + array(int32(p) + int32(-1) + int64(offset) + int64(-1) + int32(size)
                                         for p, offset, size in parts) for topic, parts in by_topic.items())
    head = int32(-1) + int32(max_wait_ms) + int32(min_bytes) + int32(max_bytes) + bytes([isolation])
    return head + int32(0) + int32(-1) + topics + array([]) + string("")


def parse_fetch(data: memoryview, where: str, check: bool = True) -> list[FetchedPartition]:
    """Each partition's answer; ``check``: its batches checked (wire/integrity.py), cut before the first damaged."""
    r = Reader(data)
    _throttle, error, _session = r.take(">ihi")
    if error:
        raise WireError(f"{where}: fetch refused: {name(error)}")
    out: list[FetchedPartition] = []
    for _ in range(r.count()):
        topic = r.string() or ""
        for _ in range(r.count()):
            index, p_error, high, stable, start = r.take(">ihqqq")
            aborted = [(pid, first) for pid, first in (r.take(">qq") for _ in range(r.count()))]
            r.int32()  # preferred read replica
            records = r.blob()
            part = FetchedPartition(topic, index, p_error, high, stable, start, aborted, size=len(records or b""))
            if not p_error and records is not None:
                try:  # copied out: the batches outlive the answer's buffer, which the next answer is read into
                    part.batches = split_batches(memoryview(bytes(records)))
                    if check:
                        part.batches, part.damaged = intact(part.batches, high)
                except ProtocolError as exc:  # this partition's, not the whole answer's
                    part.problem = f"{where}: {topic}[{index}]: {exc}"
            out.append(part)
    return out
