#!/usr/bin/env bash
# Installs Debian's headless-capable Chromium and its WebDriver when missing; the status-page browser
# test (tests/dags/test_status_page_browser.py) drives them through Selenium.
set -euo pipefail
if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "ensure-chromium: Chromium is missing; install it with: sudo apt-get install chromium chromium-driver" >&2
  exit 1
fi
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null
