from confluent_kafka import KafkaError

from mirror_core.replication.batch import Batch
from mirror_core.replication.heartbeats import decode_key, decode_value, encode_key, encode_value


class FakeMsg:
    """Stands in for a delivery report's message: pure logic, no Kafka involved."""

    def __init__(self, offset: int) -> None:
        self._offset = offset

    def offset(self) -> int:
        return self._offset


def test_batch_lands_only_when_ends_acked_and_contiguous() -> None:
    b = Batch(0, 100)
    b.count, b.pending = 5, 2
    b.on_first(None, FakeMsg(40))
    assert not b.done
    b.on_last(None, FakeMsg(44))
    assert b.done and b.landed

    gap = Batch(0, 0)
    gap.count, gap.pending = 5, 2
    gap.on_first(None, FakeMsg(40))
    gap.on_last(None, FakeMsg(45))  # another writer interleaved, or a middle record failed
    assert gap.done and not gap.landed

    failed = Batch(0, 0)
    failed.count, failed.pending = 1, 1
    failed.on_single(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE), FakeMsg(-1))
    assert failed.done and not failed.landed and failed.err.code() == KafkaError.MSG_SIZE_TOO_LARGE


def test_a_record_error_wins_over_a_purge_whichever_report_comes_first() -> None:
    """A transaction failed by a refused request purges what is queued behind it: a batch whose first records were
    refused (MSG_SIZE_TOO_LARGE) and whose last were purged is a refused batch, not a transient failure (exactly-once
    replayed it as transient, then took the epoch bump's failure at the same position for a record at fault)."""
    purge, refused = KafkaError(KafkaError._PURGE_QUEUE), KafkaError(KafkaError.MSG_SIZE_TOO_LARGE)
    for reports in ([("last", purge), ("first", refused)], [("first", refused), ("last", purge)]):
        b = Batch(0, 0)
        b.count, b.pending = 3000, 2
        for end, err in reports:
            (b.on_first if end == "first" else b.on_last)(err, FakeMsg(-1))
        assert b.done and b.err is not None and b.err.code() == KafkaError.MSG_SIZE_TOO_LARGE, reports
    timed_out = Batch(0, 0)
    timed_out.count, timed_out.pending = 2, 2
    timed_out.on_first(KafkaError(KafkaError._MSG_TIMED_OUT), FakeMsg(-1))
    timed_out.on_last(purge, FakeMsg(-1))
    assert timed_out.err is not None and timed_out.err.code() == KafkaError._MSG_TIMED_OUT  # else the first one


def test_heartbeat_layout_is_mm2s() -> None:
    key = encode_key("dc1", "dc2")
    assert key == b"\x00\x03dc1\x00\x03dc2"
    assert decode_key(key) == ("dc1", "dc2")
    value = encode_value(1_700_000_000_123)
    assert value[:2] == b"\x00\x00" and len(value) == 10
    assert decode_value(value) == 1_700_000_000_123
