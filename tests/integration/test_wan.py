"""The WAN harness itself: a client that bootstraps through the proxy stays on it, and the mirror's
traffic to the target really crosses it (latency, partition, heal)."""

from __future__ import annotations

from confluent_kafka import KafkaError

from mirror_core.devcluster.toxiproxy import Toxic
from tests.integration.conftest import flow_lines
from tests.kafka_harness import (
    admin,
    create_topic,
    end_offsets,
    metric,
    produce_sequence,
    producer,
    read_all,
    unique,
    wait_until,
    write_config,
)
from tests.wan_harness import target_reachable


def test_client_on_the_wan_bootstrap_reaches_every_broker_through_the_proxy(dc2, name, wan):
    topic = f"{name}.wan"
    create_topic(dc2, topic, 1)
    brokers = admin(wan.bootstrap).list_topics(timeout=10).brokers
    assert {b.port for b in brokers.values()} == {wan.cluster.advertised_ports["WAN"]}, brokers
    p = producer(wan.bootstrap, **{"message.timeout.ms": 4000})
    p.produce(topic, b"through the proxy")
    assert p.flush(10) == 0  # connected to the broker (through the proxy) before the partition
    errors: list[KafkaError] = []
    with wan.partitioned():
        p.produce(topic, b"cut off", on_delivery=lambda err, _msg: errors.append(err))
        p.flush(15)
        assert errors and errors[0] is not None, "a client on the WAN bootstrap produced with the proxy disabled"
    assert end_offsets(dc2, topic) == {0: 1}


def test_mirror_traffic_crosses_the_wan(dc1, clusters, name, wan, start_mirror, tmp_path):
    topic = f"{name}.orders"
    create_topic(dc1, topic, 2)
    wan.toxic(Toxic.latency(200))  # every acknowledgement from the target comes 200 ms late
    config = write_config(tmp_path / f"{unique('mm2-')}.properties", {"dc1": dc1, "dc2": wan.bootstrap},
                          flow_lines(name))
    m = start_mirror([], config=config)
    produce_sequence(dc1, topic, 2, 200)
    remote = f"dc1.{topic}"
    wait_until(lambda: sum(end_offsets(clusters["dc2"].bootstrap, remote).values()) == 200, 60,
               what="first batch copied")
    latency = wait_until(lambda: metric(m, "mirror_partition_replication_latency_seconds", topic=topic), 10,
                         what="latency metric")
    assert latency >= 0.2, f"end-to-end latency {latency:.3f}s under a 200 ms toxic: traffic bypasses the proxy"

    wan.clear()
    with wan.partitioned():
        produce_sequence(dc1, topic, 2, 300, start=200)
        wait_until(lambda: target_reachable(m) is False, 30, what="/status: target unreachable")
        assert metric(m, "mirror_cluster_reachable", cluster="dc2") == 0
        assert sum(end_offsets(clusters["dc2"].bootstrap, remote).values()) == 200, "copied through a partition"
    wait_until(lambda: sum(end_offsets(clusters["dc2"].bootstrap, remote).values()) >= 500, 60,
               what="copying resumes after the heal")
    wait_until(lambda: target_reachable(m), 30, what="/status: target reachable again")
    src, dst = read_all(dc1, topic), read_all(clusters["dc2"].bootstrap, remote)
    for part in (0, 1):
        assert [r.value for r in dst if r.partition == part] == [r.value for r in src if r.partition == part]
