#!/usr/bin/env bash
# Installs the Debian packages the tests run for real, when missing, in one apt-get: PostgreSQL (the
# harness starts its own throwaway instance, tests/pg_harness.py), Prometheus and promtool (tests load
# the shipped rules into a server on loopback, tests/prom_harness.py), Chromium and its WebDriver (the
# status-page browser test), Redis (the Celery broker of the system test, tests/system/airflow_celery.py).
# No service is started here.
set -euo pipefail
missing=()
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing+=(postgresql)
{ command -v prometheus && command -v promtool; } >/dev/null 2>&1 || missing+=(prometheus)
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
{ command -v chromium && command -v chromedriver; } >/dev/null 2>&1 || missing+=(chromium chromium-driver)
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "ensure-test-servers: missing Debian packages; install them with: sudo apt-get install ${missing[*]}" >&2
  exit 1
fi
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
