"""The Kafka topology under faults: two 3-node clusters, three mirror processes for dc1->dc2 and one for
dc2->dc1 (stable instance ids, PostgreSQL state store), Prometheus scraping them with the shipped rules.
During a continuous produce one source broker and one mirror process are SIGKILLed and restarted:
nothing is lost, every partition keeps its order, the state store and Prometheus see every instance."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from mirror_core.devcluster.multi_node import MultiNodeCluster, replicated_props
from mirror_core.state.store import StateStore
from tests.integration.test_resilience import BackgroundProducer, assert_complete_in_order
from tests.kafka_harness import end_offsets, owns_and_copies, read_all, unique, wait_until
from tests.prom_harness import RULES, PrometheusServer, promtool
from tests.system.kafka_topology import (
    MirrorFleet,
    create_replicated_topic,
    leaders,
    replication_factors,
)
from tests.system.topology import BROKERS_PER_CLUSTER, MIRRORS, REPLICATION_FACTOR, broker_properties

pytestmark = [pytest.mark.system, pytest.mark.timeout(900)]

FORWARD, REVERSE = "dc1->dc2", "dc2->dc1"


@pytest.fixture(scope="module")
def prometheus(mirror_fleet: MirrorFleet, tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusServer]:
    prom = PrometheusServer(tmp_path_factory.mktemp("prometheus"), mirror_fleet.targets()).start()
    try:
        yield prom
    finally:
        prom.stop()


def test_clusters_are_three_nodes_with_rf3_and_min_isr_2(clusters: dict[str, MultiNodeCluster]) -> None:
    for alias, c in clusters.items():
        assert c.running() == list(range(1, BROKERS_PER_CLUSTER + 1)), alias
        props = c.nodes[0].properties()
        assert {k: props[k] for k in broker_properties()} == broker_properties()
        assert props["offsets.topic.replication.factor"] == str(REPLICATION_FACTOR)
        assert props["transaction.state.log.min.isr"] == "2"
        assert replicated_props(BROKERS_PER_CLUSTER)["min.insync.replicas"] == "2"
        assert len({n.port for n in c.nodes} | {n.controller_port for n in c.nodes}) == 2 * BROKERS_PER_CLUSTER


def test_shipped_alert_rules_pass_promtool() -> None:
    checked = promtool("check", "rules", *map(str, RULES))
    assert checked.returncode == 0, checked.stdout + checked.stderr


def _sum_metric(prom: PrometheusServer, expr: str) -> float:
    rows = prom.query(expr)
    return sum(float(r["value"][1]) for r in rows)


def _reports(store: StateStore, flow: str, fleet: MirrorFleet) -> str:
    """Each instance's last report on ``flow`` (state, age) and its process's /status for that flow."""
    now = time.time()
    seen = {r.instance: f"{r.state} {now - r.seen_at.timestamp():.0f}s ago"
            for r in store.flow_instances(flow, fresh_s=86400)}
    states = {}
    for instance_id, proc in fleet.procs.items():
        status = proc.status()
        flows = status.get("flows", []) if status else []
        states[instance_id] = next((f.get("state") for f in flows if f.get("flow") == flow), status and "no flow")
    return f"store: {seen}; /status: {states}"


def test_broker_and_mirror_killed_under_load_lose_nothing(
        clusters: dict[str, MultiNodeCluster], mirror_fleet: MirrorFleet, state_db: str,
        prometheus: PrometheusServer, tmp_path: Path) -> None:
    dc1, dc2 = clusters["dc1"], clusters["dc2"]
    store = StateStore(state_db)
    # Another module of the session (the workflows) may have left a flow stopped: both must run here.
    for flow in (FORWARD, REVERSE):
        store.set_flow_desired(flow, "running", "system-test", "topology test")
    fwd, rev = unique("fwd."), unique("rev.")
    create_replicated_topic(dc1.bootstrap, fwd, 6)
    create_replicated_topic(dc2.bootstrap, rev, 2)
    forward = mirror_fleet.of_flow(FORWARD)

    with BackgroundProducer(dc1.bootstrap, fwd, 6, rate_per_s=1000) as load, \
            BackgroundProducer(dc2.bootstrap, rev, 2, rate_per_s=200) as back:
        # Precondition: the three processes share the forward flow, each copying partitions of it.
        def shared() -> bool:
            owned = Counter(p["partition"] for m in forward for p in m.partitions() if p["topic"] == fwd)
            return (sorted(owned) == list(range(6)) and set(owned.values()) == {1}
                    and all(owns_and_copies(m, fwd) for m in forward))
        wait_until(shared, 120, what="the three forward mirrors each own and copy a share of the 6 partitions")

        # Fault 1: SIGKILL the node leading partition 0 of the source topic (a crashed broker+controller).
        victim_node = leaders(dc1.bootstrap, fwd)[0]
        dc1.kill_node(victim_node)
        assert victim_node not in dc1.running()
        wait_until(lambda: victim_node not in leaders(dc1.bootstrap, fwd).values(), 60,
                   what="leadership moved off the killed broker")
        produced_during = load.count
        time.sleep(3)
        assert load.count > produced_during, "the producer stalled with one broker of three down"

        # Fault 2: SIGKILL a forward mirror that owns partitions and has copied them.
        victim = next(m for m in forward if owns_and_copies(m, fwd))
        victim_id = next(i for i, m in mirror_fleet.procs.items() if m is victim)
        victim.kill()
        time.sleep(2)
        restarted = mirror_fleet.restart(victim_id)
        dc1.start_node(victim_node)
        assert dc1.running() == [1, 2, 3]
        wait_until(lambda: owns_and_copies(restarted, fwd), 120,
                   what=f"restarted {victim_id} owns and copies partitions again")
        time.sleep(3)

    # The producers flushed: everything they were acknowledged is on the source.
    src_fwd = read_all(dc1.bootstrap, fwd)
    assert len(src_fwd) == load.count, (len(src_fwd), load.count)
    remote_fwd, remote_rev = f"dc1.{fwd}", f"dc2.{rev}"
    for bootstrap, remote, src_topic, src_bootstrap in (
            (dc2.bootstrap, remote_fwd, fwd, dc1.bootstrap), (dc1.bootstrap, remote_rev, rev, dc2.bootstrap)):
        wait_until(lambda b=bootstrap, r=remote, s=src_topic, sb=src_bootstrap:  # type: ignore[misc]
                   sum(end_offsets(b, r).values()) >= sum(end_offsets(sb, s).values()), 120,
                   what=f"{remote} caught up")
    dups = assert_complete_in_order(src_fwd, read_all(dc2.bootstrap, remote_fwd))
    assert_complete_in_order(read_all(dc2.bootstrap, rev), read_all(dc1.bootstrap, remote_rev))
    assert len(read_all(dc2.bootstrap, rev)) == back.count
    assert replication_factors(dc2.bootstrap, remote_fwd) == {REPLICATION_FACTOR}
    print(f"forward: {load.count} records, {dups} duplicates after the kills")

    # The state store lists every instance, under its stable id, applying its flow.
    for flow in (FORWARD, REVERSE):
        wanted = {m.instance_id for m in MIRRORS if m.flow == flow}
        try:
            wait_until(lambda f=flow, w=wanted: {  # type: ignore[misc]
                r.instance for r in store.flow_instances(f, fresh_s=30) if r.state == "running"} >= w,
                       60, what=f"state store: {wanted} running {flow}")
        except AssertionError as exc:  # say what each instance last reported and what its /status says
            raise AssertionError(f"{exc}; {_reports(store, flow, mirror_fleet)}") from None

    # Prometheus: every mirror a healthy target again (the restarted one on its old port), the rules evaluate.
    def all_up() -> bool:
        rows = prometheus.query('up{job="mirror-core"}')
        return len(rows) == len(MIRRORS) and all(r["value"][1] == "1" for r in rows)
    wait_until(all_up, 60, interval=1, what="Prometheus: every mirror target up")
    assert [r for r in prometheus.rule_health() if r[1] != "ok"] == []
    assert len(prometheus.rule_health()) > 0
    wait_until(lambda: _sum_metric(prometheus, f'mirror_records_replicated_total{{topic="{fwd}"}}') > 0, 60,
               interval=1, what="Prometheus: replicated records of the forward topic")
