"""The WAN fault suite (``make wan-test``, not part of ``make test``): a mirror dc1 -> dc2 whose every
connection to dc2 crosses the toxiproxy WAN (the ``wan`` fixture), faults on that link."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.integration.conftest import flow_lines
from tests.kafka_harness import MirrorProcess, unique, write_config

pytestmark = pytest.mark.integration


def seconds(var: str, default: float) -> float:
    """A duration of the suite from the environment (e.g. WAN_PARTITION_SECONDS=300: the issue's 5 minutes)."""
    return float(os.environ.get(var, default))


@pytest.fixture
def wan_mirror(dc1, wan, name, start_mirror, tmp_path: Path):  # type: ignore[no-untyped-def]
    """Start a mirror of ``<name>.*`` from dc1 to dc2 over the WAN, plus config ``lines``."""

    def start(*lines: str) -> MirrorProcess:
        config = write_config(tmp_path / f"{unique('mm2-')}.properties", {"dc1": dc1, "dc2": wan.bootstrap},
                              flow_lines(name, *lines))
        m: MirrorProcess = start_mirror([], config=config)
        return m

    return start
