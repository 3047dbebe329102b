#!/usr/bin/env bash
# Installs Debian's Prometheus (server and promtool) when missing: tests start their own throwaway
# server on loopback (tests/prom_harness.py) to load the shipped rules and query them; no service runs.
set -euo pipefail
if command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "ensure-prometheus: Prometheus is missing; install it with: sudo apt-get install prometheus" >&2
  exit 1
fi
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus >/dev/null
