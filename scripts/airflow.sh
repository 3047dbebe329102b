#!/usr/bin/env bash
# `make airflow`: Airflow 3.3 standalone (api-server, scheduler, dag-processor, triggerer) with
# AIRFLOW_HOME inside the project, the SQLite metadata DB, dags/ and plugins/ wired in, and one
# Kafka connection per cluster of the mirror config (plus spark_default on local[*]).
# PostgreSQL instead: export AIRFLOW__DATABASE__SQL_ALCHEMY_CONN and MIRROR_CORE_DB_URL first.
# It stops, before starting anything, when the mirror config is invalid. MIRROR_CORE_AIRFLOW_BIN
# replaces the airflow command (the tests use a stand-in).
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
# A broken config stops here, loudly: Airflow started with it would only fail later, less clearly. No
# Kafka connection is derived from it: the DAGs read the clusters (and their secrets, through the
# config's providers) from the config itself, so no secret is copied into Airflow's environment.
if ! "$REPO/.venv/bin/python" - <<'PY'
import sys

from mirror_core.airflow_support import config_path, load_mirror_config

try:
    load_mirror_config()
except Exception as exc:
    sys.exit(f"mirror_core: the mirror config {config_path()} is invalid: {exc}")
PY
then
    echo "mirror_core: Airflow not started; fix the config (MIRROR_CORE_CONFIG=$MIRROR_CORE_CONFIG) and retry" >&2
    exit 1
fi
echo "mirror_core: config $MIRROR_CORE_CONFIG, state store $MIRROR_CORE_DB_URL, AIRFLOW_HOME $AIRFLOW_HOME"
echo "mirror_core: Airflow UI on http://localhost:8080 (status page: http://localhost:8080/mirror-core/)"
# The login, on every start: 'airflow standalone' prints the generated password only on the first one.
"$REPO/.venv/bin/python" - <<'PY'
import json
import os

home = os.environ["AIRFLOW_HOME"]
if os.environ.get("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS", "").lower() == "true":
    print("mirror_core: no login needed (AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS)")
    raise SystemExit
path = os.environ.get("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE") or os.path.join(
    home, "simple_auth_manager_passwords.json.generated")
users = [u.split(":")[0].strip() for u in
         os.environ.get("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS", "admin:admin").split(",") if u.strip()]
try:
    with open(path) as f:
        passwords = json.load(f)
except FileNotFoundError:
    print(f"mirror_core: login {', '.join(users)}; first start: 'airflow standalone' generates the password, "
          f"prints it below and keeps it in {path}")
except (OSError, ValueError) as exc:
    print(f"mirror_core: login {', '.join(users)}; the password is in {path} (cannot read it: {exc})")
else:
    for user in users:
        password = passwords.get(user)
        shown = password if password else f"not generated yet (kept in {path} once it is)"
        print(f"mirror_core: login {user} / {shown}")
    print(f"mirror_core: (passwords kept in {path})")
PY
exec "${MIRROR_CORE_AIRFLOW_BIN:-$REPO/.venv/bin/airflow}" standalone
