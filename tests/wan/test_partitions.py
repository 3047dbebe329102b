"""Full partitions between the mirror and the target while the source keeps receiving data."""

from __future__ import annotations

import threading
import time

import pytest

from tests.integration.test_exactly_once import EOS
from tests.integration.test_resilience import BackgroundProducer
from tests.kafka_harness import copied_by, create_topic, end_offsets, metric, read_all, slot_topic_of, wait_until
from tests.wan.conftest import seconds
from tests.wan_harness import catch_up, delivered_in_order, report, target_reachable

#: the mirror's log lines when an exactly-once slot gives up a transaction the link left unsettled (a commit that
#: does not finish, an abort that cannot be made): the slot is then settled by taking it again
GIVE_UP_LINES = ("the commit did not finish within", "could not be aborted")


# Found by this test (2026-11-23, 300 s partition): after the heal one partition of four stayed at its
# position with lag > 0, not paused, no error. The slot group lost its slots during the outage while
# that partition was paused for a delivery backoff, and librdkafka keeps a pause across unassign and
# assign (fixed in assignment.unassign; tests/integration/test_reassign_paused.py).
def test_long_partition_with_exactly_once_loses_and_duplicates_nothing(dc1, dc2, name, wan, wan_mirror):
    t = f"{name}.eos"
    create_topic(dc1, t, 4)
    slot_topic_of(dc2, 4)
    m = wan_mirror(*EOS, "dc2.producer.transaction.timeout.ms = 30000")
    outage = seconds("WAN_PARTITION_SECONDS", 300)
    with BackgroundProducer(dc1, t, 4, rate_per_s=1000) as load:
        # On the target itself, committed (acknowledged records may still sit in an open transaction)
        wait_until(lambda: len(read_all(dc2, f"dc1.{t}")) > 500, 90, 1, what="copying before the partition")
        with wan.partitioned():
            wait_until(lambda: target_reachable(m) is False, 30, what="/status: target unreachable")
            assert metric(m, "mirror_cluster_reachable", cluster="dc2") == 0
            # Records, not offsets: the broker aborting a timed-out transaction writes a marker (an offset).
            # Counted once the cut has settled (requests already past the proxy when it closed may land),
            # up to the high watermark: a transaction open at the cut is aborted by the broker during the
            # outage, and a count up to the last stable offset would then grow by its records (it did, twice
            # in CI, before end_offsets took the reader's isolation level).
            time.sleep(5)
            frozen = len(read_all(dc2, f"dc1.{t}", isolation="read_uncommitted"))
            produced_at_cut, cut_at = load.count, time.monotonic()
            # The gauge throughout the cut, not only at its end: the loop waits in commits and aborts for the
            # first minute or more, then in probes; the lag watch must keep the gauge current meanwhile.
            samples: list[tuple[float, float, int]] = []  # (seconds into the cut, gauge, produced since)
            while (into := time.monotonic() - cut_at) < outage:
                time.sleep(min(10.0, outage - into))
                gauge = metric(m, "mirror_partition_lag_records", topic=t)
                if gauge is not None:  # None: /metrics did not answer this once
                    samples.append((time.monotonic() - cut_at, gauge, load.count - produced_at_cut))
            # The slots are lost during so long an outage (their group lives on the target); the partitions
            # they released stay on the lag gauge and in /status "stranded", growing with the source.
            lag = metric(m, "mirror_partition_lag_records", topic=t) or 0.0
            stranded = [p for p in (m.status() or {}).get("flows", [{}])[0].get("stranded", []) if p["topic"] == t]
            assert len(read_all(dc2, f"dc1.{t}", isolation="read_uncommitted")) == frozen, "records crossed a partition"
            produced_at_heal, copied_at_heal = load.count, sum(copied_by(m, t).values())
        healed = time.monotonic()
        wait_until(lambda: sum(copied_by(m, t).values()) > 0 and target_reachable(m), 60,
                   what="/status: target reachable again")
    catch_up(m, t, load.count, 240)
    took = time.monotonic() - healed
    aborted = metric(m, "mirror_errors_total", kind="transaction_aborted") or 0.0
    log_text = m.log()
    slots_lost = log_text.count("released exactly-once slot")
    # After 30 s (the gauge is refreshed every 5 s, and a record or two written before the cut may still count)
    worst = min((gauge / max(1, produced) for into, gauge, produced in samples if into >= 30), default=1.0)
    report(test="partition", outage_s=outage, lag_at_heal=lag, produced_during=produced_at_heal - produced_at_cut,
           stranded=len(stranded), produced=produced_at_heal, aborted=aborted,
           given_up=sum(log_text.count(line) for line in GIVE_UP_LINES), slots_lost=slots_lost,
           catch_up_s=took, catch_up_records_per_s=(load.count - copied_at_heal) / took, worst_gauge_share=worst)
    assert worst >= 0.5, f"the lag gauge fell behind the backlog during the cut: {samples}"
    if outage > 30:  # longer than the slot session: the slots were lost, their partitions stranded
        assert "(the target does not answer: their lag stays counted here)" in log_text  # the precondition
        assert lag >= 0.5 * (produced_at_heal - produced_at_cut), (lag, produced_at_heal - produced_at_cut)
        assert sum(p["lag"] or 0 for p in stranded) >= 0.5 * (produced_at_heal - produced_at_cut), stranded
    if outage > 30:  # transactions open at the cut outlived transaction.timeout.ms: aborted, then resumed
        # By the mirror when the cut fell in a flush (counted), or, when it fell in a commit, given up and settled
        # by taking the slot again (README "a transaction left unsettled by a partition"): the test does not
        # choose which (CI saw the second once, 2026-11-27).
        given_up = any(line in log_text for line in GIVE_UP_LINES)
        assert aborted > 0 or given_up, "no transaction was aborted or given up across a partition longer than " \
                                        "the transaction timeout"
    wait_until(lambda: all(p["lag"] == 0 for p in m.partitions() if p["topic"] == t), 60, what="lag 0")
    # Healed: the stranded partitions left /status, and the gauge counts only what the owners report (0).
    wait_until(lambda: not any(f.get("stranded") for f in (m.status() or {}).get("flows", [])), 30,
               what="/status: nothing stranded after the heal")
    wait_until(lambda: metric(m, "mirror_partition_lag_records", topic=t) == 0, 30, what="lag gauge 0")
    src, dst = read_all(dc1, t), read_all(dc2, f"dc1.{t}")
    assert delivered_in_order(src, dst) == 0 and len(dst) == len(src), "exactly-once copied a record twice"
    assert m.alive(), m.log()[-3000:]


@pytest.mark.parametrize("backoff_max_ms", [None, 10000], ids=["product-default", "librdkafka-default"])
def test_copying_resumes_soon_after_an_outage(dc1, dc2, name, wan, wan_mirror, backoff_max_ms):
    """The resumption delay after a long outage: librdkafka's reconnect backoff grows to
    reconnect.backoff.max.ms (10 s by default); mirror_core's default is 1 s (reported, not timed)."""
    t = f"{name}.resume"
    create_topic(dc1, t, 2)
    extra = [] if backoff_max_ms is None else [f"dc2.{c}.reconnect.backoff.max.ms = {backoff_max_ms}"
                                               for c in ("producer", "consumer")]
    m = wan_mirror(*extra)
    with BackgroundProducer(dc1, t, 2, rate_per_s=400) as load:
        wait_until(lambda: sum(copied_by(m, t).values()) > 100, 60, what="copying before the outage")
        with wan.partitioned():
            wait_until(lambda: target_reachable(m) is False, 30, what="/status: target unreachable")
            lag_before, sent_before = metric(m, "mirror_partition_lag_records", topic=t) or 0.0, load.count
            time.sleep(seconds("WAN_OUTAGE_SECONDS", 45))
            # On the target itself (the mirror's counters are brought up to date once per publish)
            before = sum(end_offsets(dc2, f"dc1.{t}").values())
            lag = metric(m, "mirror_partition_lag_records", topic=t) or 0.0
            assert metric(m, "mirror_cluster_reachable", cluster="dc2") == 0
        healed = time.monotonic()
        wait_until(lambda: sum(end_offsets(dc2, f"dc1.{t}").values()) > before, 60, 0.05, what="copying resumes")
        resumed = time.monotonic() - healed
    catch_up(m, t, load.count, 120)
    report(test="resume", backoff_max_ms=backoff_max_ms or "product-default", resume_delay_s=resumed,
           lag_gauge_before=lag_before, lag_gauge_at_heal=lag, produced_during=load.count - sent_before)
    assert delivered_in_order(read_all(dc1, t), read_all(dc2, f"dc1.{t}")) >= 0


def test_the_batches_path_says_an_outage_once_and_its_end_and_loses_nothing(dc1, dc2, name, wan, wan_mirror):
    """replication.data.path = batches over the WAN: its own Kafka client retries the unreachable target every
    0.2-0.5 s per worker; each failure is said once a minute, the end of the outage is said with its length, and
    every record is copied in order after it."""
    t = f"{name}.wirecut"
    create_topic(dc1, t, 4)
    m = wan_mirror("replication.data.path = batches")
    with BackgroundProducer(dc1, t, 4, rate_per_s=400) as load:
        wait_until(lambda: sum(copied_by(m, t).values()) > 100, 60, what="copying before the outage")
        with wan.partitioned():
            time.sleep(seconds("WAN_WIRE_OUTAGE_SECONDS", 20))
            before = sum(copied_by(m, t).values())
        wait_until(lambda: sum(copied_by(m, t).values()) > before, 60, 0.1, what="copying resumes")
        wait_until(lambda: "answering again after" in m.log(), 30, what="the end of the outage said")
    catch_up(m, t, load.count, 120)
    lines = m.log().splitlines()
    # The wire client's lines about the target (its workers' and its leader lookup's), not librdkafka's
    down = [x for x in lines if "target cluster dc2" in x and "said at most once a minute" in x]
    up = [x for x in lines if "target cluster dc2" in x and "answering again after" in x]
    report(test="wire-outage", failure_lines=len(down), end_lines=len(up), produced=load.count)
    assert down, "the precondition: the wire client failed to reach the target during the outage"
    # Retried every 0.2-0.5 s for 20 s, by the produce worker and the leader lookup: ~100 failures, a handful of
    # texts (refused, reset, no broker answered...), each said once
    assert len(down) <= 8, down
    assert up and lines.index(up[0]) > lines.index(down[0]), up
    src, dst = read_all(dc1, t), read_all(dc2, f"dc1.{t}")
    assert delivered_in_order(src, dst) >= 0 and len({r.value for r in dst}) == len(src) == load.count
    assert m.alive(), m.log()[-3000:]


# Was a known gap (strict xfail until 2026-11-25): every topic refresh waited out a 15 s metadata timeout
# on the unreachable target, so the loop published the gauge only between them and it stayed near its
# value at the cut (40 -> 120 while 7,960 records piled up). A target known to be down now gets a short
# probe, as a source does. Exactly-once, whose slot group lives on the target, releases its partitions
# during a long partition: they stay on the gauge as "stranded" (asserted by the 300 s test above).
# Exactly-once (2026-11-27): the loop waits in the cut-off transaction's commit, then its abort, for the first
# minute or more, and the gauge kept its value at the cut meanwhile. The lag watch (lag_watch.py) now refreshes
# it from the source while the loop is held.
@pytest.mark.parametrize("mode", ["at-least-once", "exactly-once"])
def test_lag_gauge_shows_the_backlog_during_a_partition(dc1, dc2, name, wan, wan_mirror, mode):
    t = f"{name}.laggauge"
    create_topic(dc1, t, 2)
    if mode == "exactly-once":
        slot_topic_of(dc2, 4)
    m = wan_mirror(*(EOS if mode == "exactly-once" else ()))
    with BackgroundProducer(dc1, t, 2, rate_per_s=400) as load:
        wait_until(lambda: sum(copied_by(m, t).values()) > 100, 60, what="copying before the outage")
        # Exactly-once: a position is known once a transaction committed (the lag counts from there)
        wait_until(lambda: sum(1 for p in m.partitions() if p["topic"] == t and p["position"]) == 2, 60,
                   what="/status: both partitions' positions")
        with wan.partitioned():
            wait_until(lambda: target_reachable(m) is False, 30, what="/status: target unreachable")
            lag_before, sent_before = metric(m, "mirror_partition_lag_records", topic=t) or 0.0, load.count
            time.sleep(20)
            lag = metric(m, "mirror_partition_lag_records", topic=t) or 0.0
            flow = (m.status() or {}).get("flows", [{}])[0]
            # each partition once: as owned here, or as stranded (released while the target does not answer)
            lags = {(p["topic"], p["partition"]): p["lag"] or 0
                    for p in flow.get("partitions", []) + flow.get("stranded", [])}
            status_lag = sum(v for (topic, _), v in lags.items() if topic == t)
            piled_up = load.count - sent_before
            held_gauge = metric(m, "mirror_loop_held_seconds")
    report(test="lag-gauge", mode=mode, lag_before=lag_before, lag_after_20s=lag, status_lag=status_lag,
           piled_up=piled_up, loop_held_s=flow.get("loop_held_s"), loop_held_gauge=held_gauge)
    if mode == "exactly-once":  # the precondition: the loop was held, so the lag watch kept the gauge
        assert flow.get("loop_held_s") or flow.get("stranded"), flow
        if flow.get("loop_held_s"):  # the gauge says the same, up to one tick behind (5 s + a 2 s ask)
            assert held_gauge is not None and held_gauge >= flow["loop_held_s"] - 8, (held_gauge, flow["loop_held_s"])
    assert lag - lag_before >= 0.5 * piled_up, f"lag gauge {lag_before} -> {lag} while {piled_up} records piled up"
    assert status_lag >= 0.5 * piled_up, f"/status lag {status_lag} while {piled_up} records piled up"


def test_a_commit_cut_off_by_a_partition_still_reports_the_target_down(dc2, name, wan):
    """Found in CI (2026-11-26): a partition that began while exactly-once commits were waiting on the
    coordinator left /status "target reachable" for 30 s and more, because a waiting commit_transaction
    serves no callbacks and the error callbacks are what mark a cluster down. The commit now runs in 2 s
    steps with the producer polled between them (exactly_once.in_steps). Here the link is
    cut 1 s into a commit whose answer a 3 s latency holds back."""
    from confluent_kafka import KafkaException, Producer

    from mirror_core.clients import ClusterHealth
    from mirror_core.devcluster.toxiproxy import Toxic
    from mirror_core.replication.exactly_once import in_steps

    t = f"{name}.txn"
    create_topic(dc2, t, 1)
    down_at: list[float] = []
    health = ClusterHealth("dc2", lambda _alias, up: None if up else down_at.append(time.monotonic()))
    p = Producer({"bootstrap.servers": wan.bootstrap, "transactional.id": f"{name}-txn", "error_cb": health.error_cb,
                  "reconnect.backoff.max.ms": 1000, "log_level": 0})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(t, b"x")
    assert p.flush(30) == 0
    wan.toxic(Toxic.latency(3000))
    ended: list[float] = []

    def commit() -> None:
        try:
            in_steps(p, p.commit_transaction, 12)
        except KafkaException:  # the coordinator is out of reach: the commit times out
            pass
        finally:
            ended.append(time.monotonic())

    worker = threading.Thread(target=commit, daemon=True)
    start = time.monotonic()
    worker.start()
    time.sleep(1)
    try:
        with wan.partitioned():
            cut = time.monotonic()
            worker.join(20)
    finally:
        wan.clear()
        worker.join(20)
        p.purge()  # nothing of this producer's lingers on the healed link
    assert ended, "the commit did not return within 20 s of the cut"
    assert ended[0] - start > 10, "the commit did not wait on the cut link: nothing was tested"
    assert down_at, "the target was never reported down during a 12 s commit across a partition"
    assert cut <= down_at[0] < cut + 5, f"reported down {down_at[0] - cut:.1f} s after the cut"


def test_a_transaction_left_unsettled_by_a_partition_is_settled_by_taking_its_slot_again(
        dc1, dc2, name, wan, wan_mirror):
    """Found in review (2026-11-26): a commit that ran out of its 60 s on a cut link may still land, and
    librdkafka then refuses to abort (_CONFLICT) and to begin a transaction. The mirror swallowed the abort
    error, rewound the slot's partitions onto a guess, and the next begin_transaction ended the pipeline
    as an "unexpected error". Now the slot is given up without another transactional call and the pipeline
    rejoins the slot group: taking the slot settles the transaction and reads its progress afresh.

    With 3 s of latency the flow thread spends most of its time in a flush or a commit, so the cut falls
    in one of them: either the commit does not finish in 60 s, or the flush does not and then the abort."""
    from mirror_core.devcluster.toxiproxy import Toxic

    t = f"{name}.unsettled"
    create_topic(dc1, t, 2)
    slot_topic_of(dc2, 4)
    m = wan_mirror(*EOS)
    with BackgroundProducer(dc1, t, 2, rate_per_s=200) as load:
        wait_until(lambda: len(read_all(dc2, f"dc1.{t}")) > 200, 90, 1, what="copying before the cut")
        wan.toxic(Toxic.latency(3000))
        time.sleep(4)  # the requests in flight now wait on the latency
        try:
            with wan.partitioned():
                cut = time.monotonic()
                wait_until(lambda: any(g in m.log() for g in GIVE_UP_LINES), 180, what="a slot given up")
                gave_up_after = time.monotonic() - cut
        finally:
            wan.clear()
        healed = time.monotonic()
        wait_until(lambda: target_reachable(m), 60, what="/status: target reachable again")
    catch_up(m, t, load.count, 180)
    log_text = m.log()
    report(test="unsettled-transaction", gave_up_after_s=gave_up_after, catch_up_s=time.monotonic() - healed,
           commit_unsettled=GIVE_UP_LINES[0] in log_text, abort_unsettled=GIVE_UP_LINES[1] in log_text,
           aborted=metric(m, "mirror_errors_total", kind="transaction_aborted") or 0.0)
    assert "unexpected error" not in log_text, log_text[-3000:]
    src, dst = read_all(dc1, t), read_all(dc2, f"dc1.{t}")
    assert delivered_in_order(src, dst) == 0 and len(dst) == len(src), "a record was lost or copied twice"
    assert m.alive(), log_text[-3000:]
