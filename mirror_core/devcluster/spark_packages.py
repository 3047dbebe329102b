"""Spark's Kafka source (``spark-sql-kafka-0-10_2.13``) from Maven Central, fetched once into the cache.

``python -m mirror_core.devcluster.spark_packages`` (run by ``make install``) resolves the package for
the installed pyspark version with Maven, like the Kafka jars of kafka_dist, and keeps only the jars
Spark does not ship itself; the reconciliation job is then submitted with ``--jars`` and needs no
network. Why not ``--packages``: Ivy refuses the whole resolution when one transitive artifact is
missing from the repository it reaches, and ``spark-token-provider-kafka-0-10`` (a tiny, stable
delegation-token helper) is not published for every Spark release on every Maven mirror; Maven lets
us pin it to the newest resolvable version instead. On a Spark cluster with full Maven Central access,
``--packages org.apache.spark:spark-sql-kafka-0-10_2.13:<spark version>`` works as well.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from mirror_core.devcluster.kafka_dist import KafkaDistError, cache_root

_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>mirror-core.dev</groupId><artifactId>spark-kafka</artifactId><version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>org.apache.spark</groupId><artifactId>spark-sql-kafka-0-10_2.13</artifactId>
      <version>{spark}</version>
      <exclusions><exclusion><groupId>org.apache.spark</groupId>
        <artifactId>spark-token-provider-kafka-0-10_2.13</artifactId></exclusion></exclusions></dependency>
    <dependency><groupId>org.apache.spark</groupId><artifactId>spark-token-provider-kafka-0-10_2.13</artifactId>
      <version>{token}</version>
      <exclusions><exclusion><groupId>*</groupId><artifactId>*</artifactId></exclusion></exclusions></dependency>
  </dependencies>
</project>
"""
# Tried in order after the Spark version itself (see the module docstring).
TOKEN_PROVIDER_FALLBACKS = ("4.0.0",)


def spark_version() -> str:
    import pyspark

    return str(pyspark.__version__)


def package_coordinate(version: str | None = None) -> str:
    return f"org.apache.spark:spark-sql-kafka-0-10_2.13:{version or spark_version()}"


def jars_dir(version: str | None = None) -> Path:
    return cache_root() / f"spark-kafka-{version or spark_version()}"


def _spark_jar_names() -> set[str]:
    """Artifact names (without version) of the jars Spark ships: those must not be added twice."""
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    return {re.sub(r"-\d[\w.\-]*\.jar$", "", j.name) for j in jars.glob("*.jar")}


def ensure_spark_kafka_jars(version: str | None = None) -> list[Path]:
    """Jars to pass to spark-submit ``--jars`` for Spark's Kafka source, fetched the first time."""
    version = version or spark_version()
    target = jars_dir(version)
    marker = target / ".complete"
    if marker.exists():
        return sorted(target.glob("*.jar"))
    mvn = shutil.which("mvn")
    if not mvn:
        raise KafkaDistError("mvn not found: Maven is needed once to fetch Spark's Kafka source")
    staging = target.with_name(target.name + ".partial")
    errors = []
    for token in (version, *TOKEN_PROVIDER_FALLBACKS):
        shutil.rmtree(staging, ignore_errors=True)
        with tempfile.TemporaryDirectory() as work:
            (Path(work) / "pom.xml").write_text(_POM.format(spark=version, token=token))
            proc = subprocess.run([mvn, "-q", "-B", "dependency:copy-dependencies",
                                   f"-DoutputDirectory={staging}"], cwd=work, capture_output=True, text=True,
                                  check=False)
        if proc.returncode == 0:
            break
        errors.append(f"token provider {token}: {proc.stdout[-1500:]}{proc.stderr[-500:]}")
    else:
        raise KafkaDistError(f"Maven could not fetch {package_coordinate(version)}:\n" + "\n".join(errors))
    shipped = _spark_jar_names()
    for jar in staging.glob("*.jar"):
        if re.sub(r"-\d[\w.\-]*\.jar$", "", jar.name) in shipped:
            jar.unlink()
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)
    marker.write_text(f"{version} token-provider {token}\n")
    return sorted(target.glob("*.jar"))


def jars_argument(version: str | None = None) -> str:
    """The comma-separated ``--jars`` value (``MIRROR_CORE_SPARK_JARS`` overrides it)."""
    return os.environ.get("MIRROR_CORE_SPARK_JARS") or ",".join(str(j) for j in ensure_spark_kafka_jars(version))


if __name__ == "__main__":
    try:
        print("Spark Kafka source jars:", jars_argument())
    except KafkaDistError as exc:
        sys.exit(str(exc))
