"""Schema sync between two real schema registries (Apicurio Registry on loopback, tests/registry_harness.py):
subjects, versions and compatibility copied, ids translated where they differ; refusals in one line with
nothing changed."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from mirror_core.devcluster.local_cluster import free_port
from mirror_core.schemas.registry import Registry, RegistryError, SchemaVersion
from mirror_core.schemas.sync import SchemaSyncRefused, apply, id_map, plan
from tests.registry_harness import RegistryServer, registry_jar


@pytest.fixture(scope="session")
def registries(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RegistryServer, RegistryServer]]:
    jar = registry_jar()
    a = RegistryServer(tmp_path_factory.mktemp("registry-src"), jar).start()
    try:
        b = RegistryServer(tmp_path_factory.mktemp("registry-tgt"), jar).start()
        try:
            yield a, b
        finally:
            b.stop()
    finally:
        a.stop()


def _avro(name: str, *fields: str) -> str:
    return json.dumps({"type": "record", "name": name, "fields": [
        {"name": f, "type": "string", **({"default": ""} if i else {})} for i, f in enumerate(fields)]})


def test_subjects_versions_and_compatibility_copied_ids_translated(
        registries: tuple[RegistryServer, RegistryServer], name: str) -> None:
    src_srv, tgt_srv = registries
    with Registry("dc1", {"url": src_srv.url}) as src, Registry("dc2", {"url": tgt_srv.url}) as tgt:
        subject = f"{name}-value"
        # The target already holds another schema: the same content gets other ids there.
        tgt.register(SchemaVersion(f"{name}-other-value", 1, 0, _avro(f"Other{name[-6:]}", "x"), "AVRO"))
        v1 = src.register(SchemaVersion(subject, 1, 0, _avro("Order", "id"), "AVRO"))
        v2 = src.register(SchemaVersion(subject, 2, 0, _avro("Order", "id", "note"), "AVRO"))
        src.set_compatibility("BACKWARD", subject)
        assert subject not in tgt.subjects()

        p = plan(src, tgt, "translate")
        assert [(s.subject, s.version) for s in p.register if s.subject == subject] == [(subject, 1), (subject, 2)]
        ids = apply(p, tgt)

        copied = tgt.versions(subject)
        assert [v.version for v in copied] == [1, 2]
        assert tgt.compatibility(subject) == "BACKWARD"
        assert ids[v1] == copied[0].id and ids[v2] == copied[1].id
        assert ids[v1] != v1, "the target's ids were meant to differ"
        assert id_map(src, tgt)[v2] == copied[1].id
        assert plan(src, tgt, "translate").register == [], "a second run changes nothing"


def test_incompatible_subject_refused_nothing_applied(registries: tuple[RegistryServer, RegistryServer],
                                                       name: str) -> None:
    src_srv, tgt_srv = registries
    with Registry("dc1", {"url": src_srv.url}) as src, Registry("dc2", {"url": tgt_srv.url}) as tgt:
        fine, clash = f"{name}-a-value", f"{name}-b-value"
        src.register(SchemaVersion(fine, 1, 0, _avro("A", "id"), "AVRO"))
        src.register(SchemaVersion(clash, 1, 0, _avro("B", "id"), "AVRO"))
        tgt.register(SchemaVersion(clash, 1, 0, _avro("B", "other"), "AVRO"))
        with pytest.raises(SchemaSyncRefused) as refused:
            plan(src, tgt, "translate")
        line = str(refused.value)
        assert "\n" not in line and clash in line and "incompatible on the target" in line
        assert fine not in tgt.subjects(), "nothing was applied"


def test_preserve_refused_without_import_mode(registries: tuple[RegistryServer, RegistryServer]) -> None:
    src_srv, tgt_srv = registries
    with Registry("dc1", {"url": src_srv.url}) as src, Registry("dc2", {"url": tgt_srv.url}) as tgt:
        assert tgt.mode() is None  # Apicurio 2 has no modes
        with pytest.raises(SchemaSyncRefused, match="IMPORT mode"):
            plan(src, tgt, "preserve")


def test_unreachable_registry_one_line() -> None:
    src = Registry("dc1", {"url": f"http://127.0.0.1:{free_port()}/apis/ccompat/v6",
                           "basic.auth.user.info": "mirror:s3cr3t-pass"})
    with src, pytest.raises(RegistryError) as failed:
        src.subjects()
    line = str(failed.value)
    assert "\n" not in line and "cannot be reached" in line and "dc1.schema.registry.url" in line
    assert "s3cr3t-pass" not in line
