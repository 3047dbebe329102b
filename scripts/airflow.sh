#!/usr/bin/env bash
# `make airflow`: Airflow 3.3 standalone (api-server, scheduler, dag-processor, triggerer) with
# AIRFLOW_HOME inside the project, the SQLite metadata DB, dags/ and plugins/ wired in, and one
# Kafka connection per cluster of the mirror config (plus spark_default on local[*]).
# PostgreSQL instead: export AIRFLOW__DATABASE__SQL_ALCHEMY_CONN and MIRROR_CORE_DB_URL first.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
export PATH="$REPO/.venv/bin:$PATH"  # standalone starts its components as `airflow ...`
export AIRFLOW_HOME="${AIRFLOW_HOME:-$REPO/.airflow}"
export AIRFLOW__CORE__DAGS_FOLDER="$REPO/dags"
export AIRFLOW__CORE__PLUGINS_FOLDER="$REPO/plugins"
export AIRFLOW__CORE__LOAD_EXAMPLES=False
export MIRROR_CORE_CONFIG="${MIRROR_CORE_CONFIG:-$REPO/examples/mm2.properties}"
export MIRROR_CORE_DB_URL="${MIRROR_CORE_DB_URL:-sqlite:///$REPO/.state/mirror-core.db}"
export AIRFLOW_CONN_SPARK_DEFAULT="${AIRFLOW_CONN_SPARK_DEFAULT:-{\"conn_type\": \"spark\", \"host\": \"local[*]\"}}"
mkdir -p "$AIRFLOW_HOME" "$REPO/.state"
# One connection per cluster, derived from the mirror config (kafka_<alias>).
eval "$("$REPO/.venv/bin/python" - <<'PY'
import shlex
from mirror_core.airflow_support import airflow_connections, load_mirror_config
for key, value in airflow_connections(load_mirror_config()).items():
    print(f"export {key}={shlex.quote(value)}")
PY
)"
echo "mirror_core: config $MIRROR_CORE_CONFIG, state store $MIRROR_CORE_DB_URL, AIRFLOW_HOME $AIRFLOW_HOME"
echo "mirror_core: Airflow UI on http://localhost:8080 (status page: http://localhost:8080/mirror-core/);"
echo "mirror_core: the login (user admin) is printed by 'airflow standalone' below and kept in \$AIRFLOW_HOME."
exec "$REPO/.venv/bin/airflow" standalone
