"""Failback: after a failover and new production on the standby, the reverse flow carries only the
new records back; nothing replicated from dc1 returns to dc1; unreplicated records are listed."""

from __future__ import annotations

import json
import subprocess
import sys

from mirror_core.clients import make_consumer, make_producer
from mirror_core.config.loader import load_config
from mirror_core.offsets.failback import unreplicated
from mirror_core.stores.progress import ProgressStore
from tests.integration.conftest import DATA_PATHS, data_path, flow_lines, ran_on
from tests.kafka_harness import (
    REPO,
    create_topic,
    end_offsets,
    produce_sequence,
    producer,
    read_all,
    topics,
    wait_until,
)


def produce_new(bootstrap: str, topic: str, count: int) -> None:
    p = producer(bootstrap)
    for i in range(count):
        p.produce(topic, value=f"new-{i}".encode(), partition=i % 2)
    assert p.flush(30) == 0


@DATA_PATHS
def test_failback_default_policy(dc1, dc2, name, start_mirror, path):
    t = f"{name}.orders"
    create_topic(dc1, t, 2)
    produce_sequence(dc1, t, 2, 100)
    forward = start_mirror(flow_lines(name, data_path(path)))
    wait_until(lambda: end_offsets(dc2, f"dc1.{t}") == {0: 50, 1: 50}, 60, what="forward replication")
    wait_until(lambda: all(p["lag"] == 0 for p in forward.partitions() if p["topic"] == t), 30, what="progress")
    assert forward.stop() == 0  # dc1 "fails": the forward flow stops
    produce_sequence(dc1, t, 2, 10, start=100)  # written on dc1, never replicated
    # As after a crash between copying and committing progress: progress of partition 0 is behind
    # the 10 copies the target already holds; they must not be listed as missing.
    fwd_config = load_config(forward.config)
    store = ProgressStore(fwd_config.flows[0].progress_topic, make_consumer(fwd_config.cluster("dc2"), "t"), "t")
    prod = make_producer(fwd_config.cluster("dc2"))
    store.write(prod, t, 0, 40)
    assert prod.flush(10) == 0
    store.close()

    # Failover: applications now produce on dc2 (local topic of the same name).
    create_topic(dc2, t, 2)
    produce_new(dc2, t, 30)
    reverse = start_mirror(flow_lines(name, data_path(path), flow="dc2->dc1"))
    wait_until(lambda: f"dc2.{t}" in topics(dc1) and sum(end_offsets(dc1, f"dc2.{t}").values()) == 30, 60,
               what="new records flow back")
    wait_until(lambda: all(p["lag"] == 0 for p in reverse.partitions() if p["topic"] == t), 30, what="settled")
    back = read_all(dc1, f"dc2.{t}")
    assert sorted(r.value for r in back) == sorted(f"new-{i}".encode() for i in range(30))
    assert f"dc2.dc1.{t}" not in topics(dc1)  # the replica of dc1's data never returns
    assert sum(end_offsets(dc1, t).values()) == 110
    assert ran_on(forward.log(), path) and ran_on(reverse.log(), path, "dc2->dc1")

    # What dc1 has that dc2 never received, per partition, for the operator to decide.
    ranges = unreplicated(load_config(forward.config), load_config(forward.config).flows[0])
    assert {(r.topic, r.partition, r.first, r.end) for r in ranges} == {(t, 0, 50, 55), (t, 1, 50, 55)}
    out = subprocess.run([sys.executable, "-m", "mirror_core", "offsets", "unreplicated", "--config",
                          str(forward.config), "--from", "dc1", "--to", "dc2", "--json"],
                         capture_output=True, text=True, cwd=REPO, timeout=60)
    data = json.loads(out.stdout)
    listed = sorted(r["key"] for part in data["partitions"] if part["topic"] == t for r in part["records"])
    assert listed == sorted(f"k{i}" for i in range(100, 110))


@DATA_PATHS
def test_failback_identity_policy_starts_at_failover_point(dc1, dc2, name, start_mirror, path):
    t = f"{name}.orders"
    create_topic(dc1, t, 2)
    create_topic(dc2, t, 2)
    identity = "replication.policy.class = IdentityReplicationPolicy"
    produce_sequence(dc1, t, 2, 100)
    forward = start_mirror(flow_lines(name, identity, data_path(path)))
    wait_until(lambda: end_offsets(dc2, t) == {0: 50, 1: 50}, 60, what="forward replication")
    wait_until(lambda: all(p["lag"] == 0 for p in forward.partitions() if p["topic"] == t), 30, what="progress")
    assert forward.stop() == 0

    reverse_lines = flow_lines(name, identity, data_path(path), flow="dc2->dc1")
    reverse_config = forward.config.with_name("reverse.properties")
    from tests.kafka_harness import write_config

    write_config(reverse_config, {"dc1": dc1, "dc2": dc2}, reverse_lines)
    seeded = subprocess.run([sys.executable, "-m", "mirror_core", "offsets", "seed-at-end", "--config",
                             str(reverse_config), "--from", "dc2", "--to", "dc1"],
                            capture_output=True, text=True, cwd=REPO, timeout=60)
    assert seeded.returncode == 0, seeded.stderr
    assert {(s["topic"], s["partition"], s["next"]) for s in json.loads(seeded.stdout)["seeded"]
            if s["topic"] == t} == {(t, 0, 50), (t, 1, 50)}

    produce_new(dc2, t, 30)  # failed-over applications write into the same topic on dc2
    reverse = start_mirror(reverse_lines, config=reverse_config)
    wait_until(lambda: sum(end_offsets(dc1, t).values()) == 130, 60, what="only new records flow back")
    wait_until(lambda: all(p["lag"] == 0 for p in reverse.partitions() if p["topic"] == t), 30, what="settled")
    values = [r.value for r in read_all(dc1, t)]
    assert len(values) == len(set(values)) == 130  # dc1's own 100 never came back as copies
    assert sorted(v for v in values if v.startswith(b"new-")) == sorted(f"new-{i}".encode() for i in range(30))
    assert ran_on(forward.log(), path) and ran_on(reverse.log(), path, "dc2->dc1")
