"""The ceiling any per-record copier in one Python thread meets: a bare confluent-kafka loop (``consume(n)``,
then one positional ``produce()`` per record, ``poll(0)`` per batch) with mirror_core's own client settings,
and nothing else: no offset map, no progress, no metrics, no delivery tracking. Measured exactly as the
scale bench measures the mirror (records/s from 10 % to 90 % of the backlog on the target, CPU per million
records of the copier's process), on fresh clusters, then mirror_core on the same backlog.

    TMPDIR=/dev/shm python -m bench.copy_ceiling <partitions> <records> [rounds] [1: MirrorMaker 2 too]
                                                 [1: the batch-forwarding prototype too, bench.batch_forward]
    TMPDIR=/dev/shm python -m bench.copy_ceiling --forward-modes <partitions> <records> [rounds]
        (MirrorMaker 2 and the prototype in each of its modes only: what idempotence and transactions
         cost a batch copier)

If the bare loop cannot reach a rate, no design that hands every record through confluent-kafka in one
Python thread can; mirror_core's rate over the bare loop's is what its own bookkeeping costs.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

from confluent_kafka import Consumer, Producer, TopicPartition

import bench.run as bench_run
from bench import ab_partitions, batch_forward
from bench.scale import Cluster, EndWatcher, copy_rate, mm2_partitions_run
from bench.scenarios import stop
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


def bare_run(partitions: int, records: int, copier: str = "--loop") -> dict[str, float | None]:
    """The bare loop (``--loop``) or the batch-forwarding prototype (``--forward``, ``--forward-<mode>``)
    on a fresh backlog."""
    topic, remote = f"bare{partitions}", f"bare.bare{partitions}"
    with ab_partitions.fresh_backlog("copy-ceiling-", topic, partitions, records) as backlog:
        return timed_copier(copier, backlog.src.bootstrap, backlog.dst.bootstrap, backlog.dst.bootstrap, topic,
                            remote, partitions, records)


def timed_copier(copier: str, source: str, target: str, watch: str, topic: str, remote: str, partitions: int,
                 records: int) -> dict[str, float | None]:
    """One of this module's copiers (``--loop``, ``--forward``, ``--forward-<mode>``) run from ``source`` to
    ``target``, ``remote`` created first and watched through ``watch`` (the target's own address when
    ``target`` is a proxy)."""
    Cluster(watch).create(remote, partitions)
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "bench.copy_ceiling", copier, source, target, topic, remote,
                             str(partitions), str(records)], cwd=bench_run.REPO)
    try:
        # A transactional copier's records count once committed (its commit markers take offsets too: one per
        # partition per commit, a fraction of a percent here).
        ends = EndWatcher(watch, remote, partitions, committed=copier == "--forward-transactional")
        return copy_rate([proc], ends, records, t0)
    finally:
        stop([proc])


def mm2_run(partitions: int, records: int, rep: int) -> dict[str, float | None]:
    """MirrorMaker 2 (tuned as in the scale bench) on a fresh backlog of the same shape."""
    with bench_run.local_clusters("copy-ceiling-") as (work, clusters):
        row = mm2_partitions_run(Cluster(clusters[0].bootstrap), Cluster(clusters[1].bootstrap), work / "mm2",
                                 partitions, records, rep)
        return {k: row[k] for k in ("records_per_s", "cpu_s_per_m", "time_to_first_record_s")}


def main(partitions: int, records: int, rounds: int = 1, with_mm2: int = 0, with_forward: int = 0) -> None:
    for r in range(rounds):  # taking turns, so all meet the same machine load
        bare, mirror = bare_run(partitions, records), ab_partitions.copy(partitions, records)
        row = {"round": r, "partitions": partitions, "records": records, "bare_loop": bare, "mirror_core": mirror,
               "mirror_over_bare": round((mirror["records_per_s"] or 0) / (bare["records_per_s"] or 1), 2)}
        mm2_rate = 0.0
        if with_mm2:
            mm2 = mm2_run(partitions, records, r)
            mm2_rate = float(mm2["records_per_s"] or 0)
            row.update(mm2=mm2, bare_over_mm2=round((bare["records_per_s"] or 0) / (mm2["records_per_s"] or 1), 2))
        if with_forward:
            fwd = bare_run(partitions, records, "--forward")
            row.update(batch_forward=fwd, forward_over_bare=round((fwd["records_per_s"] or 0)
                                                                  / (bare["records_per_s"] or 1), 2))
            if mm2_rate:
                row["forward_over_mm2"] = round((fwd["records_per_s"] or 0) / mm2_rate, 2)
        print(row, flush=True)


def forward_modes(partitions: int, records: int, rounds: int = 1) -> None:
    for r in range(rounds):  # taking turns, so all meet the same machine load
        mm2 = mm2_run(partitions, records, r)
        rate = float(mm2["records_per_s"] or 1)
        row: dict[str, object] = {"round": r, "partitions": partitions, "records": records, "mm2": mm2}
        for mode in os.environ.get("MODES", ",".join(batch_forward.MODES)).split(","):  # MODES=idempotent: one
            run = bare_run(partitions, records, f"--forward-{mode}")
            row[f"forward_{mode}"] = run
            row[f"{mode}_over_mm2"] = round(float(run["records_per_s"] or 0) / rate, 2)
        print(row, flush=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--loop"]:
        source, target, topic, remote, partitions, records = sys.argv[2:8]
        bare_copy(source, target, topic, remote, int(partitions), int(records))
    elif sys.argv[1:2] in (["--forward"], *([f"--forward-{m}"] for m in batch_forward.MODES)):
        source, target, topic, remote, partitions = sys.argv[2:7]
        # Optionally: an mm2.properties and the two aliases, whose TLS and SASL settings the connections use.
        settings = batch_forward.cluster_settings(*sys.argv[7:10]) if len(sys.argv) >= 10 else ({}, {})
        batch_forward.forward(source, target, topic, remote, int(partitions),
                              mode=sys.argv[1].removeprefix("--forward").removeprefix("-") or "plain",
                              source_settings=settings[0], target_settings=settings[1])
    elif sys.argv[1:2] == ["--forward-modes"]:
        forward_modes(*(int(a) for a in sys.argv[2:5]))
    elif len(sys.argv) < 3:
        sys.exit(__doc__)
    else:
        main(*(int(a) for a in sys.argv[1:6]))
