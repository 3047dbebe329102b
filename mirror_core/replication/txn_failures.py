"""What a failed exactly-once transaction means for its partitions (exactly_once.SlotManager acts on it): which
batch caused it, and whether the failed partition replays in batches or record by record (careful mode, a
transaction per record)."""

from __future__ import annotations

from collections.abc import Iterable

from confluent_kafka import KafkaError

from mirror_core.replication.batch import RECORD_ERRORS, Batch, PartitionState

#: what librdkafka reports for records it dropped because the transaction failed: a consequence, never a cause
_PURGED = frozenset({KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT})


def record_error(b: Batch) -> bool:
    """The target refused a record of ``b`` (too large, invalid): the record may be at fault."""
    return b.err is not None and b.err.code() in RECORD_ERRORS


def cause(states: Iterable[PartitionState], st: PartitionState, b: Batch) -> tuple[PartitionState, Batch]:
    """The batch to act on for ``st``'s failed batch ``b`` (``states``: the slot's partitions). A failure dooms the
    whole transaction: librdkafka purges what the slot's producer holds (and so does acks.py), so other batches of
    the slot may come back purged before the one that failed. The cause is a batch the target refused, else one that
    failed otherwise than purged (``b`` first: its offsets not contiguous, say), else ``b``: that one gets its limit
    read again, its backoff, careful mode."""
    def rank(pair: tuple[PartitionState, Batch]) -> int:
        err = pair[1].err
        return 0 if record_error(pair[1]) else 2 if err is not None and err.code() in _PURGED else 1

    return min([(st, b), *((o, ob) for o in states for ob in o.pending if ob.err is not None)], key=rank)


class TransientFailures:
    """Where each partition last failed transiently (purged, timed out, a sequence gap after an abort).

    Such a failure is replayed in batches the first time (careful mode for a whole read was the price before),
    careful if it fails again before moving past that position: a record the target refuses in the middle of a
    batch has no report of its own (only a batch's first and last records have one), so its transaction fails and
    the batch may come back only as purged or out of sequence, and careful mode must still find that record."""

    def __init__(self) -> None:
        self._at: dict[tuple[str, int], int] = {}

    def again(self, st: PartitionState, pos: int) -> bool:
        """Note a transient failure of ``st`` replayed from committed position ``pos``; True when the previous one
        was replayed from there too."""
        key = (st.topic, st.partition)
        again = self._at.get(key) == pos
        self._at[key] = pos
        return again
