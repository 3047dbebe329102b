"""What the wire client's hand-packed Produce request and answer and Fetch request cost against Kafka's declared
messages (kafka-python 3's classes generated from the JSON specs, mirror_core/wire/messages.py), per batch or
partition, and what the declared control-plane messages the client uses cost per call. Pure Python, no broker:

    python -m bench.probes.declared_cost [partitions] [records] [rounds]

Defaults 60 / 100 / 5: requests and answers of one batch of 100 records of 100 B for each of 60 partitions, a
Metadata answer of 34 times as many partitions. Microseconds, median (min-max) over the rounds. Where the declared
message costs more, the hand-packed one stays: the declared Produce request copies every batch into one buffer (the
hand one hands the batches to the socket where they are).

The Fetch answer is measured in place, by ``bench.probes.batch_path_cost`` run on a tree that reads it declared
(its fetch step, where each answer is read while it is fresh: one answer read again and again here would stay in
the cache).
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from kafka.protocol.consumer.fetch import FetchRequest
from kafka.protocol.producer.produce import ProduceRequest, ProduceResponse

from bench.probes.batch_path_cost import TOPIC, batch, produce_answer
from mirror_core.wire.codec import array, int16, int32, string
from mirror_core.wire.fetch import fetch_request
from mirror_core.wire.messages import (
    AddPartitionsToTxnRequest,
    EndTxnRequest,
    MetadataResponse,
    decode,
    encode,
)
from mirror_core.wire.produce import parse_produce, produce_request


def metadata_answer(partitions: int) -> bytes:
    """Metadata v4: three brokers, ``partitions`` partitions of one topic, three replicas each."""
    brokers = array(int32(n) + string(f"broker-{n}") + int32(9092) + string(None) for n in range(3))
    parts = array(int16(0) + int32(p) + int32(p % 3) + array(int32(n) for n in range(3))
                  + array(int32(n) for n in range(3)) for p in range(partitions))
    return int32(0) + brokers + string("cluster") + int32(0) + array([int16(0) + string(TOPIC) + b"\x00" + parts])


def timed(work: Callable[[], Any], rounds: int, per: int) -> list[float]:
    """Microseconds per item (``per`` items a call) of each of ``rounds`` calls."""
    out = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        work()
        out.append((time.perf_counter() - t0) / per * 1e6)
    return out


def line(what: str, values: list[float]) -> str:
    return f"  {what:44} {statistics.median(values):10.2f} ({min(values):.2f}-{max(values):.2f})"


def main(partitions: int = 60, records: int = 100, rounds: int = 5) -> None:
    one = batch(0, records)
    hand_batches = {(TOPIC, p): [one] for p in range(partitions)}
    positions = {(TOPIC, p): 1000 * p for p in range(partitions)}

    def declared_produce() -> bytes:
        topic = ProduceRequest.TopicProduceData(name=TOPIC, partition_data=[
            ProduceRequest.TopicProduceData.PartitionProduceData(index=p, records=one) for p in range(partitions)])
        return bytes(ProduceRequest(transactional_id=None, acks=-1, timeout_ms=30_000, topic_data=[topic])
                     .encode(version=8))

    def declared_fetch_request() -> bytes:
        topic = FetchRequest.FetchTopic(topic=TOPIC, partitions=[FetchRequest.FetchTopic.FetchPartition(
            partition=p, current_leader_epoch=-1, fetch_offset=o, log_start_offset=-1, partition_max_bytes=4 << 20)
            for (_, p), o in positions.items()])
        return bytes(FetchRequest(replica_id=-1, max_wait_ms=500, min_bytes=1, max_bytes=64 << 20, isolation_level=1,
                                  session_id=0, session_epoch=-1, topics=[topic], forgotten_topics_data=[],
                                  rack_id="").encode(version=11))

    produced = memoryview(produce_answer(dict.fromkeys(hand_batches), dict.fromkeys(range(partitions), 0), records))
    assert len(declared_produce()) == sum(map(len, produce_request(hand_batches, 30_000))), "produce requests differ"
    assert declared_fetch_request() == fetch_request(positions, 500, 1, 64 << 20, 4 << 20), "fetch requests differ"
    print(f"{partitions} partitions, a batch of {records} records each, {rounds} rounds; microseconds, median "
          "(min-max):", flush=True)
    many = rounds * 20

    print(line("fetch request, hand (per partition)",
               timed(lambda: fetch_request(positions, 500, 1, 64 << 20, 4 << 20), many, partitions)))
    print(line("fetch request, declared (per partition)", timed(declared_fetch_request, many, partitions)))
    print(line("produce request, hand (per batch)", timed(lambda: produce_request(hand_batches, 30_000), many,
                                                          partitions)))
    print(line("produce request, declared (per batch)", timed(declared_produce, many, partitions)))
    print(line("produce answer, hand (per partition)", timed(lambda: parse_produce(produced), many, partitions)))
    print(line("produce answer, declared (per partition)",
               timed(lambda: ProduceResponse.decode(produced, version=8), many, partitions)))
    meta = metadata_answer(partitions * 34)
    print(line(f"metadata of {partitions * 34} partitions (per call)",
               timed(lambda: decode(MetadataResponse, 4, meta), rounds, 1)))
    add = AddPartitionsToTxnRequest(
        v3_and_below_transactional_id="mirror-core.a-b.slot-0", v3_and_below_producer_id=4000,
        v3_and_below_producer_epoch=3, v3_and_below_topics=[AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(
            name=TOPIC, partitions=list(range(8)))])
    print(line("AddPartitionsToTxn request (per call)", timed(lambda: encode(add, 2), many, 1)))
    end = EndTxnRequest(transactional_id="mirror-core.a-b.slot-0", producer_id=4000, producer_epoch=3, committed=True)
    print(line("EndTxn request (per call)", timed(lambda: encode(end, 2), many, 1)))


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:4]))
