"""The docker compose stack refers to things that exist and agree with the code (no Docker engine here).

Pure file checks: docker-compose.yml, the Dockerfiles, the Prometheus config and alert rules, and the
Grafana dashboard and provisioning. ``make compose-check`` (``docker compose config -q``) validates the
compose syntax itself.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from mirror_core.config.loader import load_config
from mirror_core.devcluster.kafka_dist import KAFKA_VERSION
from mirror_core.metrics import Metrics
from tests.system.topology import CLUSTERS
from tests.system.topology import MIRRORS as TOPOLOGY_MIRRORS

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
MIRRORS = tuple(m.instance_id for m in TOPOLOGY_MIRRORS)  # the compose service is named after the instance id
FIRST_MIRROR = MIRRORS[0]
BROKERS = tuple(f"kafka-{c}-{i}" for c in CLUSTERS for i in (1, 2, 3))
SPARK_WORKERS = ("spark-worker-1", "spark-worker-2")
AIRFLOW = ("airflow-api-server", "airflow-scheduler", "airflow-dag-processor", "airflow-triggerer",
           "airflow-worker-1", "airflow-worker-2")
# Series Prometheus itself attaches to every scrape target (usable in rules next to ours).
PROMETHEUS_BUILTINS = {"up"}
METRIC_NAME = re.compile(r"\b(mirror_[a-z0-9_]+)\b")


def _compose() -> dict[str, Any]:
    return yaml.safe_load((REPO / "docker-compose.yml").read_text())


def _services() -> dict[str, Any]:
    return _compose()["services"]


def _pyproject_pin(package: str) -> str:
    """The tested version: constraints.txt pins every package exactly (pyproject.toml has ranges)."""
    match = re.search(rf"^{re.escape(package)}==(\S+)$", (REPO / "constraints.txt").read_text(), re.MULTILINE)
    assert match, f"{package} is not pinned in constraints.txt"
    return match.group(1)


def _arg(command: list[str], flag: str) -> str:
    assert flag in command, f"{flag} missing from {command}"
    return command[command.index(flag) + 1]


def _host_path(volume: str) -> Path | None:
    """The repo path of a bind mount ("./x:/y[:ro]"), None for a named volume."""
    source = volume.split(":", 1)[0]
    return REPO / source if source.startswith((".", "/")) else None


def exported_metric_names() -> set[str]:
    """Every series name mirror_core's registry exposes, with the suffixes Prometheus sees."""
    suffixes = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_sum", "_count", "_created"),
                "gauge": ("",), "summary": ("", "_sum", "_count", "_created"), "info": ("_info",)}
    names: set[str] = set()
    for family in Metrics().registry.collect():
        names.update(family.name + s for s in suffixes.get(family.type, ("",)))
    return names


def _dashboard() -> dict[str, Any]:
    return json.loads((DEPLOY / "grafana" / "dashboards" / "mirror-core.json").read_text())


def _dashboard_exprs(panels: list[dict[str, Any]]) -> list[str]:
    exprs = []
    for panel in panels:
        exprs += [t["expr"] for t in panel.get("targets", []) if "expr" in t]
        exprs += _dashboard_exprs(panel.get("panels", []))
    return exprs


def _alert_rules() -> list[dict[str, Any]]:
    rules = yaml.safe_load((DEPLOY / "prometheus" / "alerts.yml").read_text())
    return [r for g in rules["groups"] for r in g["rules"]]


def test_metric_names_are_collected_from_the_registry() -> None:
    names = exported_metric_names()
    assert {"mirror_records_replicated_total", "mirror_replication_latency_seconds_bucket",
            "mirror_partition_lag_records", "mirror_heartbeat_age_seconds"} <= names


def test_build_contexts_and_dockerfiles_exist() -> None:
    builds = {name: s["build"] for name, s in _services().items() if "build" in s}
    assert set(MIRRORS) | set(AIRFLOW) | {"airflow-init"} <= set(builds)
    for name, build in builds.items():
        context = REPO / build["context"]
        assert context.is_dir(), name
        dockerfile = context / build.get("dockerfile", "Dockerfile")
        assert dockerfile.is_file(), f"{name}: {dockerfile} missing"
        # Every COPY source of the Dockerfile is in its build context.
        for line in dockerfile.read_text().splitlines():
            if line.startswith("COPY"):
                sources = [w for w in line.split()[1:-1] if not w.startswith("--")]
                for src in sources:
                    assert (context / src).exists(), f"{dockerfile.name}: COPY {src} not in the build context"
    for name in ("Dockerfile", "docker/airflow.Dockerfile"):
        text = (REPO / name).read_text()
        assert "constraints.txt" in text and "examples" in text, name


def test_bind_mounts_exist() -> None:
    for name, service in _services().items():
        for volume in service.get("volumes", []):
            path = _host_path(volume)
            if path is not None:
                assert path.exists(), f"{name}: mounted {volume} does not exist"


def test_images_match_the_pinned_versions() -> None:
    services = _services()
    for name in BROKERS:
        assert services[name]["image"] == f"apache/kafka:{KAFKA_VERSION}"
    airflow_from = re.search(r"^FROM apache/airflow:(\S+)", (REPO / "docker" / "airflow.Dockerfile").read_text(),
                             re.MULTILINE)
    assert airflow_from and airflow_from.group(1).startswith(_pyproject_pin("apache-airflow") + "-python3.11")
    for name in ("spark-master", *SPARK_WORKERS):
        assert services[name]["image"].endswith(f"apache/spark:{_pyproject_pin('pyspark')}}}")


def test_every_long_running_service_has_a_healthcheck_and_waits_for_its_dependencies() -> None:
    services = _services()
    for name, service in services.items():
        if name == "airflow-init":
            continue
        assert "healthcheck" in service, f"{name} has no healthcheck"
        for dep, cond in service.get("depends_on", {}).items():
            assert dep in services, f"{name} depends on unknown service {dep}"
            expected = "service_completed_successfully" if dep == "airflow-init" else None
            if expected:
                assert cond["condition"] == expected
    for name in MIRRORS:
        deps = services[name]["depends_on"]
        assert {d for d, c in deps.items() if c["condition"] == "service_healthy"} >= {*BROKERS, "postgres"}
        assert "/healthz" in " ".join(services[name]["healthcheck"]["test"])
    for name in AIRFLOW:
        assert services[name]["depends_on"]["airflow-init"]["condition"] == "service_completed_successfully"
        assert services[name]["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert "/api/v2/monitor/health" in " ".join(services["airflow-api-server"]["healthcheck"]["test"])
    assert "pg_isready" in services["postgres"]["healthcheck"]["test"][1]
    init = services["airflow-init"]["command"]
    assert "airflow db migrate" in (init if isinstance(init, str) else " ".join(init))


def test_mirrors_run_the_repo_config_with_the_control_plane() -> None:
    services = _services()
    ports = set()
    for name in MIRRORS:
        command = services[name]["command"]
        assert command[0] == "run"
        config = load_config(REPO / _arg(command, "--config").removeprefix("/app/"), validate_clients=False)
        assert {c.bootstrap_servers for c in config.clusters.values()} == {
            ",".join(f"kafka-{c}-{i}:9092" for i in (1, 2, 3)) for c in CLUSTERS}
        assert _arg(command, "--metrics-host") == "0.0.0.0"
        assert _arg(command, "--state-db").startswith("postgresql+psycopg2://")
        assert _arg(command, "--state-db").endswith("@postgres:5432/mirror_state")
        ports.add(_arg(command, "--metrics-port"))
    assert len(ports) == 1
    # The same config and state store the DAGs use.
    env = services["airflow-scheduler"]["environment"]
    assert env["MIRROR_CORE_DB_URL"] == _arg(services[FIRST_MIRROR]["command"], "--state-db")
    assert env["MIRROR_CORE_CONFIG"] == _arg(services[FIRST_MIRROR]["command"], "--config")
    init_sql = (DEPLOY / "postgres" / "init.sql").read_text()
    assert "CREATE DATABASE mirror_state" in init_sql and "CREATE DATABASE airflow" in init_sql


def test_cli_accepts_the_flags_compose_passes() -> None:
    from mirror_core.cli import build_parser

    args = build_parser().parse_args(_services()[FIRST_MIRROR]["command"])
    assert args.metrics_port == 9464 and args.metrics_host == "0.0.0.0" and args.state_db


def test_prometheus_scrapes_both_mirrors_on_their_metrics_port() -> None:
    prometheus = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    services = _services()
    port = _arg(services[FIRST_MIRROR]["command"], "--metrics-port")
    job = next(j for j in prometheus["scrape_configs"] if j["job_name"] == "mirror-core")
    targets = {t for sc in job["static_configs"] for t in sc["targets"]}
    assert targets == {f"{m}:{port}" for m in MIRRORS}
    assert job.get("metrics_path", "/metrics") == "/metrics"
    # The rule file is loaded from where compose mounts it.
    mounts = {v.split(":")[1]: v.split(":")[0] for v in services["prometheus"]["volumes"] if v.startswith("./")}
    for rule_file in prometheus["rule_files"]:
        assert rule_file in mounts, f"{rule_file} is not mounted into the prometheus container"
        assert (REPO / mounts[rule_file]).resolve() == (DEPLOY / "prometheus" / Path(rule_file).name).resolve()
    assert {Path(f).name for f in prometheus["rule_files"]} == {"alerts.yml", "mm2-compat.yml"}
    assert (REPO / mounts["/etc/prometheus/prometheus.yml"]).resolve() == (DEPLOY / "prometheus" /
                                                                          "prometheus.yml").resolve()


def test_airflow_mounts_the_repo_dags_and_plugins() -> None:
    for name in (*AIRFLOW, "airflow-init"):
        service = _services()[name]
        env = service["environment"]
        mounts = {v.split(":")[1]: _host_path(v) for v in service["volumes"] if _host_path(v)}
        assert mounts[env["AIRFLOW__CORE__DAGS_FOLDER"]] == REPO / "dags"
        assert mounts[env["AIRFLOW__CORE__PLUGINS_FOLDER"]] == REPO / "plugins"
        assert env["AIRFLOW__CORE__EXECUTOR"] == "CeleryExecutor"
        assert env["AIRFLOW__CELERY__BROKER_URL"].startswith("redis://redis:6379/")
        assert "@postgres:5432/airflow" in env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]
        spark = json.loads(env["AIRFLOW_CONN_SPARK_DEFAULT"])
        assert f"{spark['host']}:{spark['port']}" == "spark://spark-master:7077"
        # The DAGs read the clusters from the mirror config: no Kafka connection copies its settings.
        assert not [k for k in env if k.startswith("AIRFLOW_CONN_KAFKA")]
    assert "7077" in " ".join(_services()["spark-master"]["command"])
    for name in SPARK_WORKERS:
        assert "spark://spark-master:7077" in _services()[name]["command"]


@pytest.mark.parametrize("source", ["dashboard", "alerts"])
def test_every_metric_referenced_is_exported(source: str) -> None:
    exprs = ([*_dashboard_exprs(_dashboard()["panels"]), _dashboard()["templating"]["list"][0]["definition"]]
             if source == "dashboard" else [r["expr"] for r in _alert_rules()])
    assert exprs
    exported = exported_metric_names()
    for expr in exprs:
        used = set(METRIC_NAME.findall(expr))
        assert used or set(re.findall(r"\b\w+\b", expr)) & PROMETHEUS_BUILTINS, f"no metric in {expr!r}"
        assert used <= exported, f"{source}: {sorted(used - exported)} not exported by mirror_core ({expr})"


def test_dashboard_covers_the_issue_panels() -> None:
    exprs = " ".join(_dashboard_exprs(_dashboard()["panels"]))
    assert "rate(mirror_records_replicated_total" in exprs and "rate(mirror_bytes_replicated_total" in exprs
    assert "histogram_quantile(0.5," in exprs and "histogram_quantile(0.99," in exprs
    assert "mirror_replication_latency_seconds_bucket" in exprs
    assert "by (flow, topic, partition) (mirror_partition_lag_records" in exprs
    assert "mirror_errors_total" in exprs and "mirror_heartbeat_age_seconds" in exprs
    assert "mirror_cluster_reachable" in exprs
    ids = [p["id"] for p in _dashboard()["panels"]]
    assert len(ids) == len(set(ids))


def test_alerts_cover_lag_and_heartbeat_age() -> None:
    exprs = {r["alert"]: r["expr"] for r in _alert_rules()}
    assert any("mirror_partition_lag_records" in e for e in exprs.values())
    assert any("mirror_heartbeat_age_seconds" in e for e in exprs.values())
    for rule in _alert_rules():
        assert rule["labels"]["severity"] in ("warning", "critical") and rule["annotations"]["summary"]


def test_grafana_provisioning_points_at_the_dashboard_and_prometheus() -> None:
    services = _services()
    mounts = {v.split(":")[1]: _host_path(v) for v in services["grafana"]["volumes"] if _host_path(v)}
    provisioning = mounts["/etc/grafana/provisioning"]
    assert provisioning is not None
    providers = yaml.safe_load((provisioning / "dashboards" / "mirror-core.yml").read_text())["providers"]
    path = providers[0]["options"]["path"]
    assert mounts[path] is not None and (mounts[path] / "mirror-core.json").is_file()
    datasources = yaml.safe_load((provisioning / "datasources" / "prometheus.yml").read_text())["datasources"]
    prometheus_port = services["prometheus"]["ports"][0].split(":")[-1]
    assert datasources[0]["url"] == f"http://prometheus:{prometheus_port}"
    uids = {t["datasource"]["uid"] for p in _dashboard()["panels"] for t in p.get("targets", [])}
    assert uids == {datasources[0]["uid"]}


def _published(service: dict[str, Any]) -> list[str]:
    return [p for p in service.get("ports", []) if isinstance(p, str)]


def test_no_known_secret_or_default_password_ships() -> None:
    """The recipes carry no usable secret: the JWT secret and the admin passwords are generated at first start
    (or given by the operator), never written in the files; published ports bind this host only."""
    text = (REPO / "docker-compose.yml").read_text()
    assert "change-me" not in text and ":-admin}" not in text and "POSTGRES_PASSWORD: " not in text
    services = _services()
    for name in (*AIRFLOW, "airflow-init"):
        env = services[name]["environment"]
        assert "AIRFLOW__API_AUTH__JWT_SECRET" not in env, name
        assert env["AIRFLOW__API_AUTH__JWT_SECRET_CMD"] == "cat /opt/airflow/auth/jwt_secret", name
        assert "airflow-auth:/opt/airflow/auth" in services[name]["volumes"], name
    init = services["airflow-init"]["command"][1]
    assert init.index("jwt_secret") < init.index("airflow db migrate") and "secrets.token_urlsafe(32)" in init
    assert "umask 077" in init and "passwords.json" in init
    for key in ("AIRFLOW_ADMIN_PASSWORD", "AIRFLOW_APPROVER_PASSWORD", "AIRFLOW_JWT_SECRET"):
        assert services["airflow-init"]["environment"][key] == f"${{{key}:-}}"  # the operator's, no default
    assert "GF_SECURITY_ADMIN_PASSWORD" not in services["grafana"]["environment"]
    assert "/dev/urandom" in services["grafana"]["command"][0] and "/dev/urandom" in services["postgres"]["command"][0]
    for name, service in services.items():
        for port in _published(service):
            assert port.startswith("${BIND_ADDRESS:-127.0.0.1}:"), (name, port)
    # No database password in any URL: the roles' passwords are generated by the postgres service and read
    # through pgpass files, one per reader (Airflow's uid, the mirrors' uid 10001).
    assert not re.search(r"postgresql\+psycopg2://\w+:[^@/]+@", text)
    for name in (*AIRFLOW, *MIRRORS):
        assert services[name]["environment"]["PGPASSFILE"] in ("/run/db-secrets/airflow.pgpass",
                                                               "/run/db-secrets/mirror.pgpass"), name
        assert "db-secrets:/run/db-secrets:ro" in services[name]["volumes"], name
    pg = services["postgres"]
    assert "./deploy/postgres/passwords.sh:/docker-entrypoint-initdb.d/passwords.sh:ro" in pg["volumes"]
    assert "chown 10001" in pg["command"][0] and "AIRFLOW_UID" in pg["command"][0]
    assert (DEPLOY / "postgres" / "passwords.sh").stat().st_mode & 0o111  # executed, not sourced


def test_the_mirror_port_binds_where_the_recipes_say() -> None:
    unit = (DEPLOY / "systemd" / "mirror-core@.service").read_text()
    assert "Environment=METRICS_HOST=127.0.0.1" in unit and "--metrics-host ${METRICS_HOST}" in unit
    assert "unauthenticated" in unit and "0.0.0.0" not in unit
    docs = list(yaml.safe_load_all((DEPLOY / "k8s" / "mirror-core.yaml").read_text()))
    policy = next(d for d in docs if d["kind"] == "NetworkPolicy")
    assert policy["spec"]["podSelector"]["matchLabels"] == {"app": "mirror-core", "flow": "dc1-dc2"}
    assert policy["spec"]["ingress"][0]["ports"] == [{"port": 9464, "protocol": "TCP"}]
    pod = next(d for d in docs if d["kind"] == "StatefulSet")["spec"]["template"]["spec"]
    env = {e["name"]: e for e in pod["containers"][0]["env"]}
    assert env["MIRROR_CORE_DB_URL"]["valueFrom"]["secretKeyRef"] == {"name": "mirror-core-state-db", "key": "url"}
    assert pod["automountServiceAccountToken"] is False
