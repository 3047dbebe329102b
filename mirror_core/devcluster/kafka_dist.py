"""Apache Kafka jars from Maven Central, fetched once with Maven into a cache directory."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from importlib import resources
from pathlib import Path

KAFKA_VERSION = os.environ.get("MIRROR_CORE_KAFKA_VERSION", "4.3.1")


class KafkaDistError(RuntimeError):
    """The Kafka jars could not be fetched or Java is missing."""


def cache_root() -> Path:
    return Path(os.environ.get("MIRROR_CORE_CACHE", Path.home() / ".cache" / "mirror-core"))


def kafka_libs_dir(version: str = KAFKA_VERSION) -> Path:
    return cache_root() / f"kafka-{version}" / "libs"


def classpath(version: str = KAFKA_VERSION) -> str:
    return str(ensure_kafka(version) / "*")


def java_executable() -> str:
    java_home = os.environ.get("JAVA_HOME")
    candidate = Path(java_home) / "bin" / "java" if java_home else None
    if candidate and candidate.exists():
        return str(candidate)
    found = shutil.which("java")
    if not found:
        raise KafkaDistError("java not found: install a Java 17+ runtime (the Kafka broker needs it)")
    return found


def ensure_kafka(version: str = KAFKA_VERSION) -> Path:
    """Return the directory of Kafka's jars, downloading them with Maven the first time."""
    libs = kafka_libs_dir(version)
    marker = libs / ".complete"
    if marker.exists():
        return libs
    mvn = shutil.which("mvn")
    if not mvn:
        raise KafkaDistError("mvn not found: Maven is needed once to fetch Kafka from Maven Central")
    pom = resources.files("mirror_core.devcluster").joinpath("kafka-pom.xml").read_text()
    staging = libs.with_name("libs.partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as work:
        (Path(work) / "pom.xml").write_text(pom.replace("@KAFKA_VERSION@", version))
        proc = subprocess.run(
            [mvn, "-q", "-B", "dependency:copy-dependencies", f"-DoutputDirectory={staging}"],
            cwd=work, capture_output=True, text=True, check=False,
        )
    if proc.returncode != 0:
        raise KafkaDistError(f"Maven could not fetch Kafka {version}:\n{proc.stdout[-4000:]}{proc.stderr[-2000:]}")
    shutil.rmtree(libs, ignore_errors=True)
    staging.rename(libs)
    marker.write_text(version)
    return libs
