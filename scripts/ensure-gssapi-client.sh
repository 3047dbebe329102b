#!/usr/bin/env bash
# Replaces the PyPI confluent-kafka wheel in .venv with one built against a librdkafka that has SASL
# GSSAPI (Kerberos): the PyPI wheel's bundled librdkafka is built without Cyrus SASL, so
# `sasl.mechanisms=GSSAPI` fails with "No provider for SASL mechanism GSSAPI".
#
# librdkafka's source comes from the npm registry (it is bundled in @confluentinc/kafka-javascript);
# confluent-kafka's from its PyPI sdist, at the version pinned in constraints.txt. Everything is built
# once into ${MIRROR_CORE_CACHE:-$HOME/.cache/mirror-core}/gssapi-client/<build id>/; later runs only
# check (a fraction of a second) or reinstall the cached wheel (about a second). The extension finds
# the private librdkafka through an rpath into that cache (no LD_LIBRARY_PATH): removing the cache means
# running this again.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=${MIRROR_CORE_PYTHON:-$ROOT/.venv/bin/python}
CACHE=${MIRROR_CORE_CACHE:-$HOME/.cache/mirror-core}

# The newest librdkafka on npm: kafka-javascript 1.10.1 bundles 2.15.1 (none bundles 2.16.x yet).
KJS_VERSION=1.10.1
RDK_VERSION=2.15.1
RDK_HEX=0x020f01ff  # RD_KAFKA_VERSION of $RDK_VERSION (major, minor, revision, 0xff = final release)
CK_VERSION=$(sed -n 's/^confluent-kafka==//p' "$ROOT/constraints.txt")
[ -n "$CK_VERSION" ] || { echo "ensure-gssapi-client: no confluent-kafka pin in constraints.txt" >&2; exit 1; }
BUILD_REV=1  # bump when the build recipe below changes, so every cache rebuilds
DIR=$CACHE/gssapi-client/ck$CK_VERSION-rdk$RDK_VERSION-r$BUILD_REV
PREFIX=$DIR/librdkafka
# What the PyPI wheel has, plus sasl_gssapi: the rebuilt client must lose nothing.
FEATURES=gzip,snappy,ssl,sasl,regex,lz4,sasl_gssapi,sasl_plain,sasl_scram,plugins,zstd,sasl_oauthbearer,http,oidc

log() { echo "ensure-gssapi-client: $*" >&2; }

# Exit 0 when the installed confluent_kafka is this build: version, librdkafka version, every feature.
# Setting builtin.features makes librdkafka refuse a client lacking any of them (no network involved).
installed_ok() {
  "$PY" - "$CK_VERSION" "$RDK_VERSION" "$FEATURES" <<'EOF' 2>/dev/null
import sys
from importlib.metadata import version
import confluent_kafka as ck
want_ck, want_rdk, features = sys.argv[1:]
assert version("confluent-kafka") == want_ck and ck.libversion()[0] == want_rdk, ck.libversion()
ck.Producer({"builtin.features": features, "log_level": 0})
EOF
}

if [ -f "$DIR/wheel.done" ] && installed_ok; then
  exit 0
fi

mkdir -p "$DIR"
exec 9>"$DIR.lock"
flock 9  # two `make install`s at once must not build into the same directories

# --- system packages: build dependencies, the Cyrus SASL GSSAPI plugin (run time), kinit and the KDC
# (krb5kdc/kadmin.local for the test harness).
PKGS=(build-essential pkg-config libsasl2-dev libsasl2-modules-gssapi-mit libssl-dev
      libcurl4-openssl-dev zlib1g-dev libzstd-dev liblz4-dev krb5-user krb5-kdc krb5-admin-server)
# Python.h: a pyenv/python.org interpreter ships its own; Debian's python3 needs python3-dev.
PYINC=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
[ -f "$PYINC/Python.h" ] || PKGS+=(python3-dev)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    log "missing Debian packages; install them with: sudo apt-get install ${missing[*]}"
    exit 1
  fi
  log "installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# --- librdkafka with Cyrus SASL (GSSAPI), OpenSSL, libcurl (OIDC), zlib, zstd, lz4; snappy is built in.
if [ ! -f "$PREFIX/.done" ] || [ ! -f "$PREFIX/lib/librdkafka.so.1" ]; then
  command -v npm >/dev/null || { log "npm is needed to fetch librdkafka's source (apt-get install npm)"; exit 1; }
  log "building librdkafka $RDK_VERSION (from @confluentinc/kafka-javascript@$KJS_VERSION on npm)"
  rm -rf "$DIR/src" "$PREFIX"
  mkdir -p "$DIR/src"
  (cd "$DIR/src" && npm pack --silent "@confluentinc/kafka-javascript@$KJS_VERSION" >/dev/null)
  tar -xzf "$DIR"/src/*.tgz -C "$DIR/src" package/deps/librdkafka
  SRC=$DIR/src/package/deps/librdkafka
  grep -q "#define RD_KAFKA_VERSION *$RDK_HEX" "$SRC/src/rdkafka.h" \
    || { log "the npm package does not bundle librdkafka $RDK_VERSION"; exit 1; }
  # --enable-X (not the default "try") makes configure fail instead of silently dropping a feature.
  (cd "$SRC" && ./configure --prefix="$PREFIX" --no-download --enable-gssapi --enable-ssl --enable-curl \
      --enable-zlib --enable-zstd --enable-lz4-ext >"$DIR/configure.log" 2>&1) \
    || { log "configure failed, see $DIR/configure.log"; exit 1; }
  # Only the C library (src/); the C++ wrapper (src-cpp/) is not used by confluent-kafka.
  (make -C "$SRC/src" -j"$(nproc)" && make -C "$SRC/src" install) >"$DIR/build.log" 2>&1 \
    || { log "librdkafka build failed, see $DIR/build.log"; exit 1; }
  # Only the shared library is linked against: drop the static archives and the build tree (~230 MB).
  rm -f "$PREFIX"/lib/librdkafka*.a "$PREFIX"/lib/pkgconfig/rdkafka-static.pc
  rm -rf "$DIR/src"
  touch "$PREFIX/.done"
fi

# --- the confluent-kafka wheel, from the PyPI sdist of the pinned version.
if [ ! -f "$DIR/wheel.done" ]; then
  log "building confluent-kafka $CK_VERSION against it"
  rm -rf "$DIR/sdist" "$DIR/wheel"
  "$PY" -m pip download -q --no-binary confluent-kafka --no-deps -d "$DIR/sdist" "confluent-kafka==$CK_VERSION"
  tar -xzf "$DIR/sdist/confluent_kafka-$CK_VERSION.tar.gz" -C "$DIR/sdist"
  CK_SRC=$DIR/sdist/confluent_kafka-$CK_VERSION
  HDR=$CK_SRC/src/confluent_kafka/src/confluent_kafka.h
  MIN_HEX=$(sed -n 's/^#define MIN_RD_KAFKA_VERSION \(0x[0-9a-fA-F]*\).*/\1/p' "$HDR")
  [ -n "$MIN_HEX" ] || { log "no MIN_RD_KAFKA_VERSION in $HDR"; exit 1; }
  if (( MIN_HEX > RDK_HEX )); then
    # confluent-kafka 2.16.x refuses (#error at build time, RuntimeError at client creation) any
    # librdkafka older than 2.16.0, which no registry carries as source. 2.16.0 adds no public API over
    # 2.15.1 (every rd_kafka_* symbol the PyPI wheel's 2.16.0 exports, and every one this sdist uses, is
    # declared in 2.15.1's rdkafka.h; the configuration properties are the same), so that floor, and only
    # that one, is lowered to the librdkafka built here. confluent_kafka.libversion() tells the truth.
    if [ "$MIN_HEX" != 0x021000ff ]; then
      log "confluent-kafka $CK_VERSION needs librdkafka $MIN_HEX, newer than $RDK_VERSION: update KJS_VERSION"
      exit 1
    fi
    sed -i -e "s/^#define MIN_RD_KAFKA_VERSION 0x[0-9a-fA-F]*/#define MIN_RD_KAFKA_VERSION $RDK_HEX/" \
      -e "s/requires librdkafka v2\.16\.0 or later/requires librdkafka v$RDK_VERSION or later/" "$HDR"
  fi
  CFLAGS="-I$PREFIX/include" LDFLAGS="-L$PREFIX/lib -Wl,-rpath,$PREFIX/lib" \
    "$PY" -m pip wheel -q --no-deps -w "$DIR/wheel" "$CK_SRC" >"$DIR/wheel.log" 2>&1 \
    || { log "wheel build failed, see $DIR/wheel.log"; exit 1; }
  rm -rf "$DIR/sdist"
  touch "$DIR/wheel.done"
fi

WHEEL=$(ls "$DIR"/wheel/confluent_kafka-"$CK_VERSION"-*.whl)
"$PY" -m pip install -q --no-deps --force-reinstall "$WHEEL"
installed_ok || { log "the installed confluent-kafka lacks a feature of: $FEATURES"; exit 1; }
log "confluent-kafka $CK_VERSION with librdkafka $RDK_VERSION ($FEATURES) installed"
