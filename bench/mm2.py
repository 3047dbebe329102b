"""Apache MirrorMaker 2 (org.apache.kafka:connect-mirror, dedicated mode) as the benchmark peer.

Tuned the way its operators tune it for volume: tasks.max = partitions, larger producer batches with
some linger, bigger fetches, the offset-sync emission at its default (offset.lag.max = 100).
The exact settings are written into the results.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from importlib import resources
from pathlib import Path

from mirror_core.devcluster.kafka_dist import classpath, java_executable

MM2_TUNING = {
    "tasks.max": "8",
    "target.producer.linger.ms": "10",
    "target.producer.batch.size": "1048576",
    "target.producer.buffer.memory": "268435456",
    "target.producer.compression.type": "none",
    "target.producer.acks": "all",
    "source.consumer.fetch.min.bytes": "65536",
    "source.consumer.fetch.max.wait.ms": "50",
    "source.consumer.max.partition.fetch.bytes": "4194304",
    "source.consumer.fetch.max.bytes": "67108864",
    "source.consumer.max.poll.records": "10000",
    "offset.flush.interval.ms": "1000",
}


def mm2_properties(src: str, dst: str, alias: str, topics: str, extra: dict[str, str] | None = None) -> str:
    """An mm2.properties for one flow ``alias -> target`` (MirrorMaker 2's own syntax)."""
    props = {
        "clusters": f"{alias}, target",
        f"{alias}.bootstrap.servers": src,
        "target.bootstrap.servers": dst,
        f"{alias}->target.enabled": "true",
        f"{alias}->target.topics": topics,
        "target->" + alias + ".enabled": "false",
        "replication.factor": "1",
        "checkpoints.topic.replication.factor": "1",
        "heartbeats.topic.replication.factor": "1",
        "offset-syncs.topic.replication.factor": "1",
        "config.storage.replication.factor": "1",
        "offset.storage.replication.factor": "1",
        "status.storage.replication.factor": "1",
        "sync.topic.acls.enabled": "false",
        "emit.heartbeats.enabled": "false",
        "refresh.topics.interval.seconds": "5",
        "refresh.groups.interval.seconds": "5",
        "emit.checkpoints.interval.seconds": "5",
        "dedicated.mode.enable.internal.rest": "false",
    }
    for k, v in MM2_TUNING.items():
        props[k.replace("source.", f"{alias}.")] = v
    props.update(extra or {})
    return "".join(f"{k} = {v}\n" for k, v in props.items())


def start_mm2(src: str, dst: str, alias: str, topics: str, workdir: Path,
              extra: dict[str, str] | None = None, heap: str = "2g") -> subprocess.Popen[bytes]:
    """``heap``: 2 GiB is what Kafka's own ``connect-mirror-maker.sh`` gives it (``-Xms256M -Xmx2G``).
    Until 2026-11-24 the benchmark gave it 1 GiB, which starved the tuning below (8 producers of 256 MiB
    buffers): with 4 GiB it copied 8 partitions of 100-byte records about 1.7x as fast (bench/scale.py,
    README). At 2,000 partitions 1 GiB died of OutOfMemoryError; bench/scale.py gives it 4 GiB."""
    conf = workdir / f"{alias}-mm2.properties"
    conf.write_text(mm2_properties(src, dst, alias, topics, extra))
    logs = workdir / f"{alias}-mm2-logs"
    logs.mkdir(exist_ok=True)
    log4j = workdir / "mm2-log4j2.properties"
    log4j.write_text(resources.files("mirror_core.devcluster").joinpath("log4j2.properties").read_text())
    out = open(logs / "stdout.log", "wb")  # noqa: SIM115 - owned by the child
    return subprocess.Popen(
        [java_executable(), f"-Xmx{heap}", "-XX:+UseG1GC", f"-Dkafka.logs.dir={logs}",
         f"-Dlog4j2.configurationFile={log4j}", "-cp", classpath(),
         "org.apache.kafka.connect.mirror.MirrorMaker", str(conf), "--clusters", "target"],
        stdout=out, stderr=subprocess.STDOUT)


def mm2_checkpointing_starter(src: str, dst: str, alias: str) -> Callable[[str, Path], list[subprocess.Popen[bytes]]]:
    """One MirrorMaker 2 process per call, emitting checkpoints every second (the latency and failover parts)."""
    return lambda topic, wd: [start_mm2(src, dst, alias, topic, wd, {"emit.checkpoints.interval.seconds": "1"})]
