"""Registers the status page with the Airflow API server and links it from the navigation."""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from mirror_airflow.status_app import create_app

STATUS_PREFIX = "/mirror-core"
NAV_LABEL = "Mirror"


class MirrorCorePlugin(AirflowPlugin):
    name = "mirror_core"
    fastapi_apps = [{"app": create_app(), "url_prefix": STATUS_PREFIX, "name": "mirror_core status"}]
    # The navigation shows about 8 characters under the icon: a longer name is cut ("Replicatio…").
    external_views = [{"name": NAV_LABEL, "href": STATUS_PREFIX.lstrip("/") + "/",
                       "destination": "nav", "url_route": "mirror-core-status"}]
