"""An Airflow auth manager with per-DAG read rights, for tests of the status page's authorization.

The simple auth manager's roles (viewer, user, op, admin) apply to every DAG, and the FAB provider (which
has per-DAG rights) is not installed here. This is Airflow's own SimpleAuthManager — its users, tokens and
login — with one change: a non-admin user reads only the DAGs :data:`READS` lists for them. It is plugged in
the documented way (``AIRFLOW__CORE__AUTH_MANAGER``), so the status page asks it through Airflow's API
exactly as it asks FAB or Keycloak in a deployment.
"""

from __future__ import annotations

from typing import Any

from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager

CLASS_PATH = "tests.dags.per_dag_auth.PerDagAuthManager"
#: user name -> the DAGs they may read (runs, HITL details...); anyone else: none
READS: dict[str, frozenset[str]] = {}


class PerDagAuthManager(SimpleAuthManager):
    def is_authorized_dag(self, *, method: Any, user: Any, access_entity: Any = None, details: Any = None) -> bool:
        if self._is_admin(user):
            return True
        if details is None or details.id is None:  # "any DAG" questions: as the simple manager answers
            return bool(super().is_authorized_dag(method=method, user=user, access_entity=access_entity,
                                                  details=details))
        return method == "GET" and details.id in READS.get(user.username, frozenset())
