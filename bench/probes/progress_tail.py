"""What a restart reads of the progress log while a mirror runs: the records written, the records a fresh reader
reads (what a restart, a translate and the checkpoint thread's first load go through), and the time
``FlowOffsets.load`` takes (progress and offset map), every 30 s under a steady load on P partitions.

Usage: python -m bench.probes.progress_tail [--partitions 2000] [--rate 20000] [--seconds 300]. One pair of brokers (in
$TMPDIR), one mirror_core (the batches path) run from this tree: to measure another tree, run this file with that
tree first on PYTHONPATH and as the working directory (``bench.harness.REPO`` is where the mirror is started from).
"""

from __future__ import annotations

import argparse
import time

from confluent_kafka import Consumer

from bench.harness import SteadyLoad, local_clusters, start_mirror_core, stop
from bench.scale import STATIC, Cluster, Shape


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=2000)
    parser.add_argument("--rate", type=int, default=20000, help="records a second, over every partition")
    parser.add_argument("--seconds", type=int, default=300)
    args = parser.parse_args()
    from mirror_core.config.loader import load_config
    from mirror_core.offsets.translate import FlowOffsets
    from mirror_core.stores.internal_topics import TopicTail

    with local_clusters("progress-") as (work, clusters):
        src, dst = Cluster(clusters[0].bootstrap), Cluster(clusters[1].bootstrap)
        shape, alias = Shape(1, args.partitions), "pt"
        src.create_all(shape.names("pt"), shape.per_topic)
        procs, _ = start_mirror_core(src.bootstrap, dst.bootstrap, "pt", 1, alias, work,
                                        ["replication.data.path = batches"], STATIC)
        load = SteadyLoad(src.bootstrap, "pt", keys=shape.keys("pt"), rate=args.rate)
        load.thread.start()
        config = load_config(work / f"{alias}.properties")
        flow = config.flows[0]
        try:
            for i in range(args.seconds // 30):
                time.sleep(30)
                (lo, hi), = dst.marks_of([(flow.progress_topic, 0)])
                tail = TopicTail(Consumer({"bootstrap.servers": dst.bootstrap, "group.id": "bench",
                                           "enable.auto.commit": False, "log_level": "0"}), flow.progress_topic)
                try:
                    read = sum(1 for _ in tail.read_new(60))
                finally:
                    tail.close()
                t0 = time.perf_counter()
                FlowOffsets.load(config, flow)
                print(f"{(i + 1) * 30} s: progress records written {hi - lo}, a fresh reader reads {read}, "
                      f"FlowOffsets.load {time.perf_counter() - t0:.2f} s", flush=True)
        finally:
            load.stopped.set()
            stop(procs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
