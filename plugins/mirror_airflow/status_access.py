"""Who reads what on the status page: every section belongs to the DAG whose runs write it, and Airflow's
auth manager (the deployment's own: simple, FAB, Keycloak...) decides whether the user may read that DAG's
runs. The page and ``/api/summary`` leave out what the user may not read, whole (no row, no count, no entry
among the empty sections), and say once which DAGs that is.

The mapping (docs/security.md, "Who reads what on the status page"):

* flows (state, lag, partitions, instances) and the partitions the mirrors report paused: the ``failover``
  DAG, the one that acts on flows (stops one, starts its reverse);
* failover records: ``failover``; failback records: ``failback`` (row by row);
* cutovers: ``cloud_migration_cutover``; DR drills and their trends: ``dr_drill``;
* topic sync runs and drift: ``topic_config_sync``; reconciliations: ``checkpoint_reconciliation``;
* runtime controls and partition actions (resume/skip requests): ``runtime_control``;
* the active-cluster registry: any of ``failover``, ``failback``, ``cloud_migration_cutover`` (each changes
  it and shows its moves in its gate);
* an approval waiting: its own DAG, as Airflow's Required Actions page decides (its HITL details).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

FAILOVER, FAILBACK, CUTOVER = "failover", "failback", "cloud_migration_cutover"
DRILL, SYNC, RECONCILIATION, CONTROL = "dr_drill", "topic_config_sync", "checkpoint_reconciliation", "runtime_control"
MIRROR_DAGS = (FAILOVER, FAILBACK, CUTOVER, DRILL, SYNC, RECONCILIATION, CONTROL)

#: ``/api/summary`` key -> the DAGs, any of which makes it readable
SECTION_DAGS: dict[str, tuple[str, ...]] = {
    "flows": (FAILOVER,), "paused_partitions": (FAILOVER,),
    "failovers": (FAILOVER, FAILBACK),  # and each row by its kind
    "cutovers": (CUTOVER,), "drills": (DRILL,), "drill_trends": (DRILL,),
    "registry": (FAILOVER, FAILBACK, CUTOVER), "reconciliations": (RECONCILIATION,),
    "sync_runs": (SYNC,), "drift": (SYNC,), "runtime_controls": (CONTROL,), "partition_actions": (CONTROL,),
}
_KIND_DAG = {"failover": FAILOVER, "failback": FAILBACK}


@dataclass(frozen=True)
class Access:
    """What one user may read: the mirror DAGs whose runs they may read, and the DAGs whose approvals they
    may see. ``None``: everything (no user to ask about: tools and tests of the summary itself)."""

    runs: frozenset[str] | None = None
    approvals: frozenset[str] | None = None
    unreadable: tuple[str, ...] = field(default=())

    def section(self, key: str) -> bool:
        return self.runs is None or any(d in self.runs for d in SECTION_DAGS[key])

    def approval(self, dag_id: str) -> bool:
        return self.approvals is None or dag_id in self.approvals

    def records(self, recs: dict[str, list[dict[str, Any]]]) -> dict[str, list[dict[str, Any]]]:
        """``recs`` without the sections the user may not read; failover records only of the readable kinds."""
        out = {k: v for k, v in recs.items() if self.section(k)}
        if "failovers" in out and self.runs is not None:
            out["failovers"] = [r for r in out["failovers"] if _KIND_DAG.get(r["kind"], FAILOVER) in self.runs]
        return out

    def hidden(self) -> dict[str, list[str]]:
        """For the JSON: the sections left out and the mirror DAGs whose runs the user may not read (both
        fixed names: nothing about what is recorded)."""
        return {"sections": [k for k in SECTION_DAGS if not self.section(k)], "dags": list(self.unreadable)}


def access_for(user: Any, approval_dags: Iterable[str]) -> Access:
    """Ask Airflow's auth manager about ``user``: reading the runs of each mirror DAG, and the
    human-in-the-loop details of each DAG with an approval waiting (``approval_dags``)."""
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity, DagDetails
    from airflow.configuration import conf
    from airflow.models.dag import DagModel

    manager = get_auth_manager()
    multi_team = conf.getboolean("core", "multi_team", fallback=False)

    def may(dag_id: str, entity: DagAccessEntity) -> bool:
        # as Airflow's own requires_access_dag: the DAG's team, when teams are on
        team = DagModel.get_team_name(dag_id) if multi_team else None
        return bool(manager.is_authorized_dag(method="GET", access_entity=entity,
                                              details=DagDetails(id=dag_id, team_name=team), user=user))

    runs = frozenset(d for d in MIRROR_DAGS if may(d, DagAccessEntity.RUN))
    approvals = frozenset(d for d in set(approval_dags) if may(d, DagAccessEntity.HITL_DETAIL))
    return Access(runs, approvals, tuple(d for d in MIRROR_DAGS if d not in runs))
