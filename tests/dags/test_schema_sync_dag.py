"""schema_sync runs for real (dag.test) between two real schema registries (Apicurio on loopback): a dry run
proposes and records and changes nothing, a run applies, a subject whose versions differ on the target fails the
run in one line with nothing changed; the cutover DAG syncs schemas right after its start is approved."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mirror_core.schemas.registry import Registry, SchemaVersion
from mirror_core.state.store import StateStore
from tests.dags.conftest import REPO
from tests.kafka_harness import write_config
from tests.registry_harness import RegistryServer


def load_dag(dag_id: str, file: str):  # type: ignore[no-untyped-def]
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(REPO / "dags" / file))
    assert bag.import_errors == {}
    return bag.get_dag(dag_id)


def _avro(name: str, *fields: str) -> str:
    return json.dumps({"type": "record", "name": name, "fields": [{"name": f, "type": "string"} for f in fields]})


@pytest.fixture
def store(registries: tuple[RegistryServer, RegistryServer], dc1: str, dc2: str, name: str, tmp_path: Path,
          monkeypatch: pytest.MonkeyPatch) -> StateStore:
    src, tgt = registries
    config = write_config(tmp_path / "mm2.properties", {"dc1": dc1, "dc2": dc2},
                          ["dc1->dc2.enabled = true", f"dc1->dc2.topics = {name}.*", "dc2->dc1.enabled = false",
                           f"dc1.schema.registry.url = {src.url}", f"dc2.schema.registry.url = {tgt.url}"])
    monkeypatch.setenv("MIRROR_CORE_CONFIG", str(config))
    monkeypatch.setenv("MIRROR_CORE_DB_URL", f"sqlite:///{tmp_path}/state.db")
    s = StateStore(f"sqlite:///{tmp_path}/state.db")
    s.migrate()
    return s


def _states(run: Any) -> dict[str, str]:
    return {ti.task_id: ti.state for ti in run.get_task_instances()}


def test_dry_run_then_applied_then_refused_in_one_line(store: StateStore, registries: tuple[RegistryServer,
                                                                                            RegistryServer],
                                                       name: str) -> None:
    src_srv, tgt_srv = registries
    dag = load_dag("schema_sync", "schema_sync.py")
    subject = f"{name}.orders-value"
    with Registry("dc1", {"url": src_srv.url}) as src, Registry("dc2", {"url": tgt_srv.url}) as tgt:
        src.register(SchemaVersion(subject, 1, 0, _avro(f"Order{name[-6:]}", "id"), "AVRO"))

        dry = dag.test(run_conf={"flow": "dc1->dc2", "dry_run": True})
        assert dry.state == "success", _states(dry)
        assert subject not in tgt.subjects(), "a dry run changes nothing"
        proposed = [e for e in store.recent_drift("dc1->dc2") if e.topic == subject]
        assert [(e.kind, e.action) for e in proposed] == [("schema", "proposed")]

        run = dag.test(run_conf={"flow": "dc1->dc2", "dry_run": False})
        assert run.state == "success", _states(run)
        assert [v.version for v in tgt.versions(subject)] == [1]
        assert any(e.topic == subject and e.action == "applied" for e in store.recent_drift("dc1->dc2"))

        # The target holds another version 2 of the subject: the whole sync is refused, nothing changed.
        clash = f"{name}.payments-value"
        src.register(SchemaVersion(clash, 1, 0, _avro("Payment", "id"), "AVRO"))
        tgt.register(SchemaVersion(clash, 1, 0, _avro("Payment", "other"), "AVRO"))
        later = f"{name}.audit-value"
        src.register(SchemaVersion(later, 1, 0, _avro("Audit", "id"), "AVRO"))
        try:
            refused = dag.test(run_conf={"flow": "dc1->dc2", "dry_run": False})
            assert refused.state == "failed" and _states(refused)["sync"] == "failed"
            assert later not in tgt.subjects(), "nothing applied"
            [event] = [e for e in store.recent_drift("dc1->dc2") if e.kind == "schemas-refused"]
            assert clash in event.detail and "\n" not in event.detail and event.action == "refused"
        finally:  # the registries are shared by the session's tests
            for registry in (src, tgt):
                registry.call("DELETE", f"/subjects/{clash}")


def test_the_cutover_syncs_schemas_right_after_its_start_is_approved() -> None:
    dag = load_dag("cloud_migration_cutover", "cloud_migration_cutover.py")
    schemas = dag.get_task("schemas")
    assert schemas.upstream_task_ids == {"approve_start"} and schemas.downstream_task_ids == {"deny_writes"}
