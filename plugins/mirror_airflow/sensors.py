"""Sensors shared by the DAGs."""

from __future__ import annotations

from typing import Any

from airflow.sdk import BaseSensorOperator

from mirror_core.airflow_support import load_mirror_config
from mirror_core.status import flow_status


class ReplicationLagSensor(BaseSensorOperator):
    """Wait until the total replication lag of ``flow`` is at most ``max_lag`` records."""

    template_fields = ("flow", "max_lag")

    def __init__(self, *, flow: str, max_lag: int = 0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if "->" not in str(flow) and "{{" not in str(flow):
            raise ValueError(f"flow must look like 'source->target', got {flow!r}")
        if isinstance(max_lag, int) and max_lag < 0:
            raise ValueError(f"max_lag must be >= 0, got {max_lag}")
        self.flow = flow
        self.max_lag = max_lag

    def poke(self, context: Any) -> bool:
        config = load_mirror_config()
        status = flow_status(config, config.flow(self.flow))
        if not status.reachable:
            self.log.warning("flow %s: %s", self.flow, status.error)
            return False
        lag = status.total_lag
        self.log.info("flow %s: total lag %s (want <= %s)", self.flow, lag, self.max_lag)
        return lag is not None and lag <= int(self.max_lag)
