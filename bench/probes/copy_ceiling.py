"""The ceiling any per-record copier in one Python thread meets: a bare confluent-kafka loop (``consume(n)``,
then one positional ``produce()`` per record, ``poll(0)`` per batch) with mirror_core's own client settings,
and nothing else: no offset map, no progress, no metrics, no delivery tracking. Measured exactly as the
scale bench measures the mirror (records/s from 10 % to 90 % of the backlog on the target, CPU per million
records of the copier's process), on fresh clusters, then mirror_core on the same backlog.

    TMPDIR=/dev/shm python -m bench.probes.copy_ceiling <partitions> <records> [rounds] [1: MirrorMaker 2 too]

If the bare loop cannot reach a rate, no design that hands every record through confluent-kafka in one
Python thread can; mirror_core's rate over the bare loop's is what its own bookkeeping costs.
"""

from __future__ import annotations

import subprocess
import sys
import time

from confluent_kafka import Consumer, Producer, TopicPartition

from bench.harness import REPO, local_clusters, stop
from bench.probes import ab_partitions
from bench.scale import Cluster, EndWatcher, copy_rate, mm2_partitions_run
from mirror_core.config.client_defaults import (
    CONSUMER_DEFAULTS,
    CONSUMER_ENFORCED,
    PRODUCER_DEFAULTS,
    PRODUCER_ENFORCED,
    STANDING_CONSUMER_DEFAULTS,
)

BATCH = 10_000  # replication.batch.max.records' default


def bare_copy(source: str, target: str, topic: str, remote: str, partitions: int, records: int) -> None:
    """The loop itself (run in a child process): copy ``records`` records, then flush and exit."""
    consumer = Consumer({**CONSUMER_DEFAULTS, **STANDING_CONSUMER_DEFAULTS, **CONSUMER_ENFORCED,
                         "bootstrap.servers": source, "group.id": f"bare-{remote}"})
    producer = Producer({**PRODUCER_DEFAULTS, **PRODUCER_ENFORCED, "bootstrap.servers": target})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    produce, consume, poll, copied = producer.produce, consumer.consume, producer.poll, 0
    while copied < records:
        for m in consume(BATCH, 0.1):
            while True:
                try:  # positional, as the mirror calls it (keyword parsing costs 40-55 % of the call)
                    produce(remote, m.value(), m.key(), m.partition(), None, None, m.timestamp()[1], m.headers())
                    break
                except BufferError:
                    poll(0.01)
            copied += 1
        poll(0)
    producer.flush(300)
    consumer.close()
    time.sleep(600)  # the parent's watcher must see the last records before this process ends; it stops us


def bare_run(partitions: int, records: int) -> dict[str, float | None]:
    """The bare loop on a fresh backlog."""
    topic, remote = f"bare{partitions}", f"bare.bare{partitions}"
    with ab_partitions.fresh_backlog("copy-ceiling-", topic, partitions, records) as backlog:
        source, target = backlog.src.bootstrap, backlog.dst.bootstrap
        Cluster(target).create(remote, partitions)
        t0 = time.monotonic()
        proc = subprocess.Popen([sys.executable, "-m", "bench.probes.copy_ceiling", "--loop", source, target, topic,
                                 remote, str(partitions), str(records)], cwd=REPO)
        try:
            return copy_rate([proc], EndWatcher(target, remote, partitions), records, t0)
        finally:
            stop([proc])


def mm2_run(partitions: int, records: int, rep: int) -> dict[str, float | None]:
    """MirrorMaker 2 (tuned as in the scale bench) on a fresh backlog of the same shape."""
    with local_clusters("copy-ceiling-") as (work, clusters):
        row = mm2_partitions_run(Cluster(clusters[0].bootstrap), Cluster(clusters[1].bootstrap), work / "mm2",
                                 partitions, records, rep)
        return {k: row[k] for k in ("records_per_s", "cpu_s_per_m", "time_to_first_record_s")}


def main(partitions: int, records: int, rounds: int = 1, with_mm2: int = 0) -> None:
    for r in range(rounds):  # taking turns, so all meet the same machine load
        bare, mirror = bare_run(partitions, records), ab_partitions.copy(partitions, records)
        row = {"round": r, "partitions": partitions, "records": records, "bare_loop": bare, "mirror_core": mirror,
               "mirror_over_bare": round((mirror["records_per_s"] or 0) / (bare["records_per_s"] or 1), 2)}
        if with_mm2:
            mm2 = mm2_run(partitions, records, r)
            row.update(mm2=mm2, bare_over_mm2=round((bare["records_per_s"] or 0) / (mm2["records_per_s"] or 1), 2))
        print(row, flush=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--loop"]:
        source, target, topic, remote, partitions, records = sys.argv[2:8]
        bare_copy(source, target, topic, remote, int(partitions), int(records))
    elif len(sys.argv) < 3:
        sys.exit(__doc__)
    else:
        main(*(int(a) for a in sys.argv[1:5]))
