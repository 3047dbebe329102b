"""A schema registry's Confluent-compatible REST API (Confluent Schema Registry, Apicurio's ``/apis/ccompat``),
the few calls the schema sync and the id translation need. Every failure is a :class:`RegistryError` of one line
naming the registry and what to do; the credentials (``basic.auth.user.info``) are never part of it."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx

from mirror_core.redaction import scrub

TIMEOUT_S = 10.0


# Every request at INFO is noise in a sync's output; a failure is one RegistryError line.
logging.getLogger("httpx").setLevel(logging.WARNING)


class RegistryError(Exception):
    """One line: which registry, what failed, what to do."""


@dataclass(frozen=True)
class SchemaReference:
    """Another subject's version a schema imports (a Protobuf import, an Avro named type), under ``name``."""

    name: str
    subject: str
    version: int


@dataclass(frozen=True)
class SchemaVersion:
    subject: str
    version: int
    id: int
    schema: str
    schema_type: str  # AVRO, PROTOBUF, JSON
    references: tuple[SchemaReference, ...] = ()


class Registry:
    """The registry of cluster ``alias`` (``<alias>.schema.registry.*``, keys without the prefix)."""

    def __init__(self, alias: str, settings: Mapping[str, str]) -> None:
        url = settings.get("url", "").strip()
        if not url:
            raise RegistryError(f"cluster {alias} has no schema registry: set {alias}.schema.registry.url")
        self.alias = alias
        self.url = url.split(",")[0].rstrip("/")
        auth = None
        if info := settings.get("basic.auth.user.info", ""):
            user, _, password = info.partition(":")
            auth = httpx.BasicAuth(user, password)
        self.http = httpx.Client(base_url=self.url, auth=auth, timeout=TIMEOUT_S,
                                 headers={"Accept": "application/vnd.schemaregistry.v1+json, application/json"})

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> Registry:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def call(self, method: str, path: str, body: Any = None, missing_ok: bool = False) -> Any:
        """The answer's JSON; None for a 404 when ``missing_ok``."""
        try:
            r = self.http.request(method, path, json=body)
        except httpx.HTTPError as exc:
            raise RegistryError(f"schema registry of {self.alias} ({self.url}) cannot be reached: "
                                f"{scrub(str(exc)) or type(exc).__name__}; check {self.alias}.schema.registry.url "
                                "and that the registry runs") from None
        if r.status_code in (401, 403):
            raise RegistryError(f"schema registry of {self.alias} ({self.url}) refused the mirror's credentials "
                                f"(HTTP {r.status_code} on {method} {path}): check "
                                f"{self.alias}.schema.registry.basic.auth.user.info")
        if r.status_code == 404 and missing_ok:
            return None
        if r.status_code >= 400:
            try:
                message = r.json().get("message", "")
            except ValueError:
                message = r.text[:200]
            raise RegistryError(f"schema registry of {self.alias} ({self.url}) answered HTTP {r.status_code} to "
                                f"{method} {path}: {scrub(str(message))}")
        return r.json() if r.content else None

    def subjects(self) -> list[str]:
        return sorted(self.call("GET", "/subjects"))

    def versions(self, subject: str) -> list[SchemaVersion]:
        s = quote(subject, safe="")
        found = []
        for v in sorted(self.call("GET", f"/subjects/{s}/versions", missing_ok=True) or []):
            d = self.call("GET", f"/subjects/{s}/versions/{v}")
            refs = tuple(SchemaReference(str(r["name"]), str(r["subject"]), int(r["version"]))
                         for r in d.get("references") or [])
            found.append(SchemaVersion(subject, int(d["version"]), int(d["id"]), d["schema"],
                                       d.get("schemaType") or "AVRO", refs))
        return found

    def compatibility(self, subject: str | None = None) -> str | None:
        """The compatibility level of ``subject`` (None: none of its own) or the registry's default."""
        path = f"/config/{quote(subject, safe='')}" if subject else "/config"
        d = self.call("GET", path, missing_ok=True)
        return None if not d else (d.get("compatibilityLevel") or d.get("compatibility"))

    def set_compatibility(self, level: str, subject: str | None = None) -> None:
        path = f"/config/{quote(subject, safe='')}" if subject else "/config"
        # Apicurio answers 404 to NONE for a subject without a rule of its own: it has none to remove.
        self.call("PUT", path, {"compatibility": level}, missing_ok=level == "NONE")

    def mode(self) -> str | None:
        """READWRITE, READONLY, IMPORT; None where the registry has no modes (Apicurio 2)."""
        try:
            d = self.call("GET", "/mode", missing_ok=True)
        except RegistryError:
            return None
        return None if not d else d.get("mode")

    def is_compatible(self, subject: str, schema: SchemaVersion) -> bool:
        d = self.call("POST", f"/compatibility/subjects/{quote(subject, safe='')}/versions/latest",
                      _body(schema), missing_ok=True)
        return True if d is None else bool(d.get("is_compatible"))

    def register(self, schema: SchemaVersion, with_id: bool = False) -> int:
        """Register ``schema`` under its subject; its id (``with_id``: the same id, a registry in IMPORT mode)."""
        body = _body(schema)
        if with_id:
            body.update(id=schema.id, version=schema.version)
        return int(self.call("POST", f"/subjects/{quote(schema.subject, safe='')}/versions", body)["id"])

    def schema_by_id(self, schema_id: int) -> str | None:
        d = self.call("GET", f"/schemas/ids/{schema_id}", missing_ok=True)
        return None if d is None else str(d["schema"])


def _body(schema: SchemaVersion) -> dict[str, Any]:
    body: dict[str, Any] = {"schema": schema.schema}
    if schema.schema_type != "AVRO":
        body["schemaType"] = schema.schema_type
    if schema.references:
        body["references"] = [{"name": r.name, "subject": r.subject, "version": r.version} for r in schema.references]
    return body
