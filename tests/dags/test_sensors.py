"""The plugin's lag sensor against real clusters, the clusters from the mirror config."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.kafka_harness import create_topic, produce_sequence, write_config


def test_lag_sensor(dc1, dc2, name, tmp_path: Path, monkeypatch) -> None:
    config_path = write_config(tmp_path / "mm2.properties", {"dc1": dc1, "dc2": dc2},
                               ["dc1->dc2.enabled = true", f"dc1->dc2.topics = {name}.*",
                                "emit.heartbeats.enabled = false"])
    monkeypatch.setenv("MIRROR_CORE_CONFIG", str(config_path))
    from airflow.sdk.exceptions import AirflowFailException, AirflowSensorTimeout
    from mirror_airflow.sensors import ReplicationLagSensor

    t = f"{name}.lagging"
    create_topic(dc1, t, 1)
    strict = ReplicationLagSensor(task_id="lag0", flow="dc1->dc2", max_lag=0)
    assert strict.poke({}) is True  # empty topic: nothing to replicate
    produce_sequence(dc1, t, 1, 5)
    assert strict.poke({}) is False  # 5 records not replicated (no mirror running)
    assert ReplicationLagSensor(task_id="lag10", flow="dc1->dc2", max_lag=10).poke({}) is True
    # As a task: waits at most max_wait_s (templated, e.g. from a Param), then says what the lag was.
    waiting = ReplicationLagSensor(task_id="wait", flow="dc1->dc2", max_lag="0", max_wait_s="1", poke_interval=0.2)
    with pytest.raises(AirflowSensorTimeout, match=r"flow dc1->dc2: data lag still 5 after 1s \(want <= 0\)"):
        waiting.execute({})
    assert ReplicationLagSensor(task_id="wait10", flow="dc1->dc2", max_lag="10", max_wait_s="1").execute({}) is None
    # A flow the config does not have fails at once (no retries until the timeout).
    with pytest.raises(AirflowFailException, match="unknown flow 'dc2->dc9'"):
        ReplicationLagSensor(task_id="unknown", flow="dc2->dc9", max_wait_s=60).execute({})
    assert os.environ["MIRROR_CORE_CONFIG"] == str(config_path)


def test_sensor_validates_its_arguments() -> None:
    from mirror_airflow.sensors import ReplicationLagSensor

    with pytest.raises(ValueError, match="source->target"):
        ReplicationLagSensor(task_id="bad", flow="dc1", max_lag=0)
    with pytest.raises(ValueError, match="max_lag"):
        ReplicationLagSensor(task_id="bad2", flow="dc1->dc2", max_lag=-1)
    with pytest.raises(ValueError, match="max_wait_s"):
        ReplicationLagSensor(task_id="bad3", flow="dc1->dc2", max_wait_s=-1)
