"""Spark fixtures: one local[2] SparkSession with Spark's Kafka source for the whole session."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import pytest

from tests.kafka_harness import REPO

pytestmark = pytest.mark.integration
LEAN_CONF = {"spark.sql.shuffle.partitions": "4", "spark.ui.enabled": "false",
             "spark.driver.memory": "1g", "spark.sql.adaptive.enabled": "true"}


@pytest.fixture(scope="session")
def job() -> ModuleType:
    """spark_jobs/reconcile_checkpoints.py, imported from its file (it is not part of a package)."""
    path = REPO / "spark_jobs" / "reconcile_checkpoints.py"
    spec = importlib.util.spec_from_file_location("reconcile_checkpoints", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from pyspark.sql import SparkSession

    from mirror_core.devcluster.spark_packages import jars_argument

    builder = SparkSession.builder.master("local[2]").appName("mirror-core tests").config("spark.jars",
                                                                                          jars_argument())
    for k, v in LEAN_CONF.items():
        builder = builder.config(k, v)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    yield session
    session.stop()
