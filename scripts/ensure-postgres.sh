#!/usr/bin/env bash
# Installs Debian's PostgreSQL server when missing; the test harness starts its own throwaway
# instance (tests/pg_harness.py), so no running service is needed.
set -euo pipefail
if ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "ensure-postgres: PostgreSQL is missing; install it with: sudo apt-get install postgresql" >&2
  exit 1
fi
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
