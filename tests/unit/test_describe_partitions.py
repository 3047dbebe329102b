from confluent_kafka import TopicPartition

from mirror_core.replication.assignment import describe


def test_consecutive_partitions_are_ranges() -> None:
    tps = [TopicPartition("orders", p) for p in (7, 0, 1, 2, 3)] + [TopicPartition("pay", 1)]
    assert describe(tps) == "orders[0-3, 7], pay[1]"


def test_two_thousand_partitions_are_one_short_line() -> None:
    assert describe([TopicPartition("big", p) for p in range(2000)]) == "big[0-1999]"
    assert describe([]) == "nothing"
