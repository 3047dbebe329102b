"""Registers the status page with the Airflow API server and links it from the navigation."""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from mirror_airflow.status_app import create_app

STATUS_PREFIX = "/mirror-core"


class MirrorCorePlugin(AirflowPlugin):
    name = "mirror_core"
    fastapi_apps = [{"app": create_app(), "url_prefix": STATUS_PREFIX, "name": "mirror_core status"}]
    external_views = [{"name": "Replication status", "href": STATUS_PREFIX.lstrip("/") + "/",
                       "destination": "nav", "url_route": "mirror-core-status"}]
