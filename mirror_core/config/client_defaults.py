"""The Kafka client settings mirror_core chooses: defaults users may override, and the few the
delivery guarantees depend on (enforced by mirror_core.clients; listed in docs/configuration.md)."""

# Throughput-oriented defaults; users can override them with <alias>.consumer.* / producer.*.
CONSUMER_DEFAULTS = {
    # 1 byte: the broker answers as soon as there is a record (no fetch.wait.max.ms at light load);
    # under backlog every fetch is full anyway (max.partition.fetch.bytes), so batches stay large.
    "fetch.min.bytes": "1",
    # Short reads (tools, the stores' readers) move from partition to partition: a reader assigned the
    # next one waits for the fetch still held open at the end of the last, so they keep this short.
    "fetch.wait.max.ms": "20",
    "max.partition.fetch.bytes": "4194304",
    "fetch.max.bytes": "67108864",
    "queued.max.messages.kbytes": "131072",
    # librdkafka postpones a partition's next fetch by this much whenever its local queue is over
    # queued.min.messages (100,000) — 1 s by default, which capped one consumer at ~250,000 records/s
    # of 100 B on loopback (2,000,000 with 20 ms; bench/results/archive/backlog-2026-11-25.md). Under
    # backlog the queue is always over, so the default made every mirror wait on its own prefetch.
    "fetch.queue.backoff.ms": "20",
    "session.timeout.ms": "20000",
    "heartbeat.interval.ms": "2000",
    "max.poll.interval.ms": "300000",
    "partition.assignment.strategy": "cooperative-sticky",
    "topic.metadata.refresh.interval.ms": "30000",
    # librdkafka's backoff grows to 10 s by default (Java's stops at 1 s): after a WAN partition heals,
    # copying would resume up to 10 s late (measured in tests/wan/test_partitions.py).
    "reconnect.backoff.max.ms": "1000",
    # Brokers do not check a stored batch's CRC when they serve it: without this a record damaged on a source disk
    # is produced again with a fresh, valid CRC (the Java consumer checks by default; librdkafka does not).
    "check.crcs": "true",
}
# Over the defaults above for the consumers that hold their partitions for the life of the process
# (the replicating consumer, exactly-once's slot membership). fetch.wait.max.ms is how often an idle
# one asks again, and librdkafka has no incremental fetch sessions (KIP-227): every fetch names every
# partition. At 2,000 idle partitions 20 ms cost the source broker 0.4-1.5 cores, 500 ms (librdkafka's
# and Java's default) 0.05-0.06; with fetch.min.bytes 1 a record ends the wait, so latency did not move
# (bench/results/archive/idle-fetch-2026-11-25.md).
STANDING_CONSUMER_DEFAULTS = {
    "fetch.wait.max.ms": "500",
}
CONSUMER_ENFORCED = {
    # Aborted transactions on the source must never become data on the target, and the offset map
    # and progress are read as committed (exactly-once writes them in transactions).
    "isolation.level": "read_committed",
    "enable.auto.commit": "false",
    "enable.auto.offset.store": "false",
    "enable.partition.eof": "false",
}
PRODUCER_DEFAULTS = {
    "linger.ms": "10",
    "batch.size": "1048576",
    "batch.num.messages": "100000",
    "queue.buffering.max.messages": "2000000",
    "queue.buffering.max.kbytes": "1048576",
    "message.timeout.ms": "120000",
    "compression.type": "none",
    "reconnect.backoff.max.ms": "1000",
}
#: Kafka's default message.max.bytes (brokers; topics' max.message.bytes): the largest record batch a topic takes
#: unless set otherwise
KAFKA_DEFAULT_MESSAGE_MAX_BYTES = 1048588
#: Over PRODUCER_DEFAULTS when one batch per partition applies at-least-once (replication.one.batch.per.partition):
#: the mirror then cuts each partition's pieces to what its remote topic accepts (max.message.bytes on the
#: target, replication/produce.py), so a target that takes bigger batches gets them. Over a long round trip that
#: is the rate: a partition gets one batch per round trip (README "Running across a WAN").
PARKED_PRODUCER_DEFAULTS = {
    "batch.size": str(8 << 20),
    "message.max.bytes": str(8 << 20),
}
PRODUCER_ENFORCED = {
    # Nothing is acknowledged to the progress store before every in-sync replica has it, and the
    # producer never reorders or duplicates on retry.
    "acks": "all",
    "enable.idempotence": "true",
}
