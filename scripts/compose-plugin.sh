#!/usr/bin/env bash
# Ensures `docker compose` (the v2 CLI plugin) is available, so `docker compose config` can validate
# docker-compose.yml on machines with a Docker client but no plugin (and no Docker engine).
# Built once from its Go module (the Go proxy is a reachable registry) into the mirror-core cache.
set -euo pipefail
VERSION="${COMPOSE_VERSION:-v2.40.3}"
CACHE="${MIRROR_CORE_CACHE:-$HOME/.cache/mirror-core}"
BIN="$CACHE/bin/docker-compose-$VERSION"
PLUGIN_DIR="${DOCKER_CONFIG:-$HOME/.docker}/cli-plugins"

if docker compose version >/dev/null 2>&1; then
  exit 0
fi
if [ ! -x "$BIN" ]; then
  command -v go >/dev/null || { echo "compose-plugin: Go is needed to build docker compose" >&2; exit 1; }
  export GOTOOLCHAIN=auto GOFLAGS=-mod=mod
  src=$(go mod download -json "github.com/docker/compose/v2@$VERSION" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
  work=$(mktemp -d)
  cp -r "$src/." "$work/" && chmod -R u+w "$work"
  mkdir -p "$(dirname "$BIN")"
  (cd "$work" && go build -o "$BIN" ./cmd)
  rm -rf "$work"
fi
mkdir -p "$PLUGIN_DIR"
ln -sf "$BIN" "$PLUGIN_DIR/docker-compose"
docker compose version
