"""The shipped Prometheus files, loaded by a real Prometheus scraping a real mirror: the alert and
MirrorMaker 2 compatibility rules evaluate without error, and the MirrorMaker 2 panels of Strimzi's
published dashboard (strimzi-kafka-mirror-maker-2.json) return our data under MM2's names."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.integration.conftest import flow_lines
from tests.integration.test_resilience import BackgroundProducer
from tests.kafka_harness import create_topic, end_offsets, wait_until
from tests.prom_harness import REPO, RULES, PrometheusServer, promtool

# The MirrorMaker 2 queries of Strimzi's dashboard, with its Kubernetes label matchers
# (strimzi_io_kind, strimzi_io_cluster) removed: they select the MM2 deployment, not the metric. The
# "_min" columns are left out: a histogram has no minimum (mm2-compat.yml says so).
STRIMZI_MM2_QUERIES = [
    "sum(kafka_connect_mirror_mirrorsourceconnector_record_rate)",
    "sum(kafka_connect_mirror_mirrorsourceconnector_byte_rate)",
    "sum(rate(kafka_consumer_incoming_byte_total[1m]))",
    "sum(rate(kafka_producer_outgoing_byte_total[1m]))",
    *(f"sum(kafka_connect_mirror_mirrorsourceconnector_{m}{s}) by (partition, topic)"
      for m in ("record_age_ms", "replication_latency_ms") for s in ("", "_avg", "_max")),
    'sum(kafka_consumer_fetch_manager_records_lag{clientid!~"consumer-mirrormaker2-.*"}) by (topic, partition)',
]


def test_shipped_rule_files_and_config_pass_promtool(tmp_path: Path) -> None:
    checked = promtool("check", "rules", *map(str, RULES))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    # The compose config, with its container paths pointed at the repository's files.
    config = (REPO / "deploy" / "prometheus" / "prometheus.yml").read_text()
    config = re.sub(r"/etc/prometheus/([\w.-]+\.yml)", lambda m: str(REPO / "deploy" / "prometheus" / m[1]), config)
    (tmp_path / "prometheus.yml").write_text(config)
    checked = promtool("check", "config", str(tmp_path / "prometheus.yml"))
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_mirrormaker2_dashboard_queries_return_our_metrics(dc1, dc2, name, start_mirror, tmp_path: Path) -> None:
    t = f"{name}.mm2"
    create_topic(dc1, t, 2)
    m = start_mirror(flow_lines(name))
    prom = PrometheusServer(tmp_path, [f"127.0.0.1:{m.port}"]).start()
    try:
        with BackgroundProducer(dc1, t, 2, rate_per_s=200) as load:
            wait_until(lambda: all(prom.query(q) for q in STRIMZI_MM2_QUERIES), 60, interval=1,
                       what="every MM2 dashboard query answered")
            answers = {q: prom.query(q) for q in STRIMZI_MM2_QUERIES}
        produced = load.count
        assert [r for r in prom.rule_health() if r[1] != "ok"] == []
        # Per partition, under MM2's labels: the remote topic as MM2 names it.
        rows = answers["sum(kafka_connect_mirror_mirrorsourceconnector_replication_latency_ms) by (partition, topic)"]
        labels = {(r["metric"]["topic"], r["metric"]["partition"]) for r in rows}
        assert labels == {(f"dc1.{t}", "0"), (f"dc1.{t}", "1")}
        assert all(0 <= float(r["value"][1]) < 60_000 for r in rows), rows
        assert float(answers["sum(kafka_connect_mirror_mirrorsourceconnector_record_rate)"][0]["value"][1]) > 0
        # Counts are the same counters: every record produced, once on the target.
        wait_until(lambda: sum(end_offsets(dc2, f"dc1.{t}").values()) == produced, 60, what="replicated")
        query = ("sum(kafka_connect_mirror_mirrorsourceconnector_record_count"
                 f'{{topic="dc1.{t}",target="dc2",source="dc1"}})')

        def counted() -> float:
            result = prom.query(query)
            return float(result[0]["value"][1]) if result else -1.0

        wait_until(lambda: counted() == produced, 30, interval=1, what=f"record_count == {produced}")
        print(json.dumps({q: len(a) for q, a in answers.items()}, indent=1))
    finally:
        prom.stop()
