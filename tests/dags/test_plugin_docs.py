"""The status plugin's API documentation (/openapi.json, /docs, /redoc) answers only after login."""

from __future__ import annotations

from fastapi.testclient import TestClient


def test_api_docs_require_login(auth_headers: dict[str, str]) -> None:
    from mirror_airflow.plugin import MirrorCorePlugin, docs_behind_login
    from mirror_airflow.status_app import create_app

    app = MirrorCorePlugin.fastapi_apps[0]["app"]
    bare = TestClient(create_app(with_lag=False))
    assert bare.get("/openapi.json").status_code == 200  # precondition: FastAPI alone serves it to anyone
    anonymous, logged_in = TestClient(app), TestClient(app, headers=auth_headers)
    for path in ("/openapi.json", "/docs", "/redoc"):
        assert anonymous.get(path).status_code in (401, 403), path
        assert logged_in.get(path).status_code == 200, path
    assert "/api/summary" in logged_in.get("/openapi.json").json()["paths"]
    assert "/mirror-core/openapi.json" in TestClient(docs_behind_login(create_app(with_lag=False)),
                                                     root_path="/mirror-core", headers=auth_headers).get(
        "/docs").text
    assert anonymous.get("/api/summary").status_code in (401, 403)  # the app itself, as before
