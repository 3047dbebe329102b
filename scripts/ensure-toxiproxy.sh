#!/usr/bin/env bash
# Ensures toxiproxy-server (Shopify's TCP fault proxy: the "WAN" between the local clusters in tests,
# `make bench` and `mirror-core dev up --wan`) is in the mirror-core cache. Built once from its Go module
# (the Go proxy is a reachable registry) like scripts/compose-plugin.sh; prints the binary's path.
set -euo pipefail
VERSION="${TOXIPROXY_VERSION:-v2.12.0}"
CACHE="${MIRROR_CORE_CACHE:-$HOME/.cache/mirror-core}"
BIN="$CACHE/bin/toxiproxy-server-$VERSION"

if [ ! -x "$BIN" ]; then
  command -v go >/dev/null || { echo "ensure-toxiproxy: Go is needed to build toxiproxy-server" >&2; exit 1; }
  export GOTOOLCHAIN=auto GOFLAGS=-mod=mod
  src=$(go mod download -json "github.com/Shopify/toxiproxy/v2@$VERSION" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
  work=$(mktemp -d)
  cp -r "$src/." "$work/" && chmod -R u+w "$work"
  mkdir -p "$(dirname "$BIN")"
  (cd "$work" && go build -o "$BIN.tmp" ./cmd/server) && mv "$BIN.tmp" "$BIN"
  rm -rf "$work"
fi
echo "$BIN"
