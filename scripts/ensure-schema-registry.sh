#!/usr/bin/env bash
# Builds Apicurio Registry (a real schema registry with a Confluent-compatible API at /apis/ccompat/v6) once
# into the mirror-core cache, for the schema-migration tests (tests/integration/registry_harness.py starts it on
# loopback, in-memory storage). Maven Central serves no runnable build of it: scripts/apicurio-registry/pom.xml
# depends on the app's jar and the quarkus-maven-plugin makes the runnable app. 2.0.2.Final is the newest whose
# dependencies Maven Central serves whole (later versions need apicurio-registry-schema-util-provider, not
# served; everit json-schema, only on another repository, is left out: JSON Schema artifacts are not used).
# Prints the path of the runnable jar. Needs Java 11+ and Maven; about a minute the first time.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE="${MIRROR_CORE_CACHE:-$HOME/.cache/mirror-core}"
REV=1  # bump when scripts/apicurio-registry changes, so every cache rebuilds
DIR="$CACHE/apicurio-registry/2.0.2.Final-$REV"
JAR="$DIR/target/quarkus-app/quarkus-run.jar"
if [ -f "$JAR" ]; then
  echo "$JAR"
  exit 0
fi
command -v mvn >/dev/null && command -v java >/dev/null || {
  echo "ensure-schema-registry: Maven and a JDK are needed to build Apicurio Registry (apt-get install maven default-jdk-headless)" >&2
  exit 1
}
rm -rf "$DIR.tmp" && mkdir -p "$DIR.tmp/src/main/resources"
cp "$HERE/apicurio-registry/pom.xml" "$DIR.tmp/pom.xml"
cp "$HERE/apicurio-registry/application.properties" "$DIR.tmp/src/main/resources/application.properties"
if ! (cd "$DIR.tmp" && mvn -B -q package -DskipTests >build.log 2>&1); then
  echo "ensure-schema-registry: the Maven build failed; see $DIR.tmp/build.log" >&2
  exit 1
fi
rm -rf "$DIR" && mv "$DIR.tmp" "$DIR"
echo "$JAR"
