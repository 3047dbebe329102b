"""Sensors shared by the DAGs."""

from __future__ import annotations

from typing import Any

from airflow.sdk import BaseSensorOperator
from airflow.sdk.exceptions import AirflowFailException, AirflowSensorTimeout

from mirror_core.airflow_support import load_mirror_config


class ReplicationLagSensor(BaseSensorOperator):
    """Wait until the data lag of ``flow`` is at most ``max_lag`` records.

    Data lag: every replicated partition except the heartbeats topic (heartbeats never stop while a
    flow runs); unknown (a cluster unreachable, a partition without watermarks) is never "caught up".
    ``flow``, ``max_lag`` and ``max_wait_s`` are templated, so a DAG can take them from its Params or
    an upstream task; ``max_wait_s``, when given, is the sensor's ``timeout`` in seconds.
    """

    template_fields = ("flow", "max_lag", "max_wait_s")

    def __init__(self, *, flow: str, max_lag: int | str = 0, max_wait_s: float | str | None = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if "->" not in str(flow) and "{{" not in str(flow):
            raise ValueError(f"flow must look like 'source->target', got {flow!r}")
        if isinstance(max_lag, int) and max_lag < 0:
            raise ValueError(f"max_lag must be >= 0, got {max_lag}")
        if isinstance(max_wait_s, int | float) and max_wait_s < 0:
            raise ValueError(f"max_wait_s must be >= 0, got {max_wait_s}")
        self.flow = flow
        self.max_lag = max_lag
        self.max_wait_s = max_wait_s
        self.last_lag: int | None = None
        self.last_note = "not measured yet"

    def execute(self, context: Any) -> Any:
        if self.max_wait_s not in (None, ""):
            self.timeout = float(self.max_wait_s)
        try:
            return super().execute(context)
        except AirflowSensorTimeout:
            raise AirflowSensorTimeout(
                f"flow {self.flow}: data lag still {self.last_note} after {self.timeout:g}s "
                f"(want <= {self.max_lag}); is something still writing on {str(self.flow).split('->')[0]}?"
            ) from None

    def poke(self, context: Any) -> bool:
        from mirror_core.status import flow_status
        from mirror_core.workflows.failover import data_lag

        config = load_mirror_config()
        try:
            flow = config.flow(self.flow)
        except KeyError as exc:  # retrying cannot help
            raise AirflowFailException(f"ReplicationLagSensor: {exc.args[0]}") from None
        status = flow_status(config, flow)
        if not status.reachable:
            self.last_lag, self.last_note = None, f"unknown ({status.error})"
            self.log.warning("flow %s: %s", self.flow, status.error)
            return False
        lag = data_lag(status, flow)
        self.last_lag = lag.total
        self.last_note = (str(lag.total) if lag.total is not None
                          else f"unknown (no watermarks for {', '.join(lag.unknown)})")
        self.log.info("flow %s: data lag %s (want <= %s)", self.flow, self.last_note, self.max_lag)
        return self.last_lag is not None and self.last_lag <= int(self.max_lag)
