"""Registers the status page with the Airflow API server and links it from the navigation."""

from __future__ import annotations

from typing import Any

from airflow.plugins_manager import AirflowPlugin
from fastapi import Depends, FastAPI, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse

from mirror_airflow.status_app import create_app

STATUS_PREFIX = "/mirror-core"
NAV_LABEL = "Mirror"


def docs_behind_login(app: FastAPI) -> FastAPI:
    """FastAPI serves /openapi.json, /docs and /redoc without the app's dependencies: they would answer
    without login. Served here again as routes of the app, so Airflow's login check applies to them too."""
    from airflow.api_fastapi.core_api.security import requires_authenticated

    served = {app.openapi_url, app.docs_url, app.redoc_url, app.swagger_ui_oauth2_redirect_url}
    app.router.routes[:] = [r for r in app.router.routes if getattr(r, "path", None) not in served]
    login: list[Any] = [Depends(requires_authenticated())]

    def schema_url(request: Request) -> str:
        return str(request.scope.get("root_path", "")).rstrip("/") + "/openapi.json"

    @app.get("/openapi.json", include_in_schema=False, dependencies=login)
    def openapi() -> JSONResponse:
        return JSONResponse(app.openapi())

    @app.get("/docs", include_in_schema=False, dependencies=login)
    def docs(request: Request) -> HTMLResponse:
        return get_swagger_ui_html(openapi_url=schema_url(request), title=f"{app.title} - API")

    @app.get("/redoc", include_in_schema=False, dependencies=login)
    def redoc(request: Request) -> HTMLResponse:
        return get_redoc_html(openapi_url=schema_url(request), title=f"{app.title} - API")

    return app


class MirrorCorePlugin(AirflowPlugin):
    name = "mirror_core"
    fastapi_apps = [{"app": docs_behind_login(create_app()), "url_prefix": STATUS_PREFIX,
                     "name": "mirror_core status"}]
    # The navigation shows about 8 characters under the icon: a longer name is cut ("Replicatio…").
    external_views = [{"name": NAV_LABEL, "href": STATUS_PREFIX.lstrip("/") + "/",
                       "destination": "nav", "url_route": "mirror-core-status"}]
