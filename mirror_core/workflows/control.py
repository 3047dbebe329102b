"""Flow control through the state store, and the active-cluster registry as applications see it."""

from __future__ import annotations

import logging
import time
from typing import Any

from mirror_core.config.model import FlowConfig, MirrorConfig
from mirror_core.state.store import StateStore
from mirror_core.workflows.errors import WorkflowError

log = logging.getLogger(__name__)

__all__ = ["WorkflowError", "active_cluster", "flow_of", "set_flow"]


def flow_of(config: MirrorConfig, name: str) -> FlowConfig:
    """The flow ``name`` (standby flows too); an unknown one is a WorkflowError with the config's own words
    (:meth:`MirrorConfig.flow`: ``unknown flow '<name>' (enabled flows: ...)``)."""
    try:
        return config.flow(name)
    except KeyError as exc:
        raise WorkflowError(str(exc.args[0])) from None


def set_flow(store: StateStore, flow: str, desired: str, who: str, why: str, run_id: str | None,
             timeout: float = 120.0, settle_s: float = 10.0) -> dict[str, Any]:
    """Ask the mirror instances to run or stop ``flow`` and wait until every live instance applies it.

    A stop returns once each instance has drained and committed (they report only after that). No
    live instance within ``settle_s`` is reported, not an error: during an unplanned failover the
    mirror may be down with the primary, and a stopped flow is what we want anyway.
    """
    store.set_flow_desired(flow, desired, who, why, run_id)
    deadline = time.monotonic() + timeout
    first_seen = time.monotonic()
    while True:
        instances = store.flow_instances(flow)
        states = {i.instance: i.state for i in instances}
        if instances and all(s == desired for s in states.values()):
            log.info("flow %s is %s on %d instance(s)", flow, desired, len(states))
            return {"flow": flow, "desired": desired, "instances": states}
        if not instances and time.monotonic() - first_seen > settle_s:
            log.warning("flow %s: no mirror instance reported within %.0fs; desired state %s recorded",
                        flow, settle_s, desired)
            return {"flow": flow, "desired": desired, "instances": {},
                    "note": "no live mirror instance reported; the desired state applies when one starts"}
        if time.monotonic() > deadline:
            raise WorkflowError(f"flow {flow}: instances did not reach '{desired}' within {timeout:.0f}s: {states}")
        time.sleep(1.0)


def active_cluster(store: StateStore, config: MirrorConfig, app_alias: str,
                   default: str | None = None) -> tuple[str, str]:
    """(cluster alias, bootstrap servers) an application alias should use now."""
    row = store.active_cluster(app_alias)
    cluster = row.cluster if row is not None else default
    if cluster is None:
        raise WorkflowError(f"application alias '{app_alias}' is not in the registry (the failover and cutover "
                            "workflows register it; pass a default cluster to use until then)")
    return cluster, config.cluster(cluster).bootstrap_servers
