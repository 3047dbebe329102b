"""Schema sync between two real schema registries (Apicurio Registry on loopback, tests/registry_harness.py):
subjects, versions and compatibility copied, ids translated where they differ; refusals in one line with
nothing changed. Then a real mirror copying records in the Confluent wire format with schema.ids = translate: read
on the target with the target registry's schemas (fastavro; and confluent-kafka's own Avro and Protobuf
serializers and deserializers, as applications use them); a record of a schema not synced yet pauses its
partition until the sync, then goes on by itself."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mirror_core.devcluster.local_cluster import free_port
from mirror_core.replication.schema_ids import RETRY_S
from mirror_core.schemas.registry import Registry, RegistryError, SchemaVersion
from mirror_core.schemas.sync import SchemaSyncRefused, apply, id_map, plan
from mirror_core.state.store import StateStore
from tests.integration.conftest import flow_lines
from tests.kafka_harness import REPO, admin, create_topic, mirror_env, producer, read_all, wait_until
from tests.registry_harness import RegistryServer


def _avro(name: str, *fields: str) -> str:
    return json.dumps({"type": "record", "name": name, "fields": [
        {"name": f, "type": "string", **({"default": ""} if i else {})} for i, f in enumerate(fields)]})


def test_subjects_versions_and_compatibility_copied_ids_translated(
        registries: tuple[RegistryServer, RegistryServer], name: str) -> None:
    src_srv, tgt_srv = registries
    with Registry("dc1", {"url": src_srv.url}) as src, Registry("dc2", {"url": tgt_srv.url}) as tgt:
        subject = f"{name}-value"
        # Content of this test's own (an id names a content, and the registries are the session's): the target holds
        # other schemas up to v1's id at least, so what the sync registers there gets other ids.
        order = f"Order{name[-6:]}"
        v1 = src.register(SchemaVersion(subject, 1, 0, _avro(order, "id"), "AVRO"))
        v2 = src.register(SchemaVersion(subject, 2, 0, _avro(order, "id", "note"), "AVRO"))
        other, n = 0, 0
        while other < v1:
            n += 1
            other = tgt.register(SchemaVersion(f"{name}-other{n}-value", 1, 0, _avro(f"Other{n}{name[-6:]}", "x"),
                                               "AVRO"))
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
        # (the registries are shared by the module's tests: the clash must not refuse their syncs)
        for registry in (src, tgt):
            registry.call("DELETE", f"/subjects/{clash}")
        assert clash not in tgt.subjects() and clash not in src.subjects()


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


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mirror_core", *args], capture_output=True, text=True, timeout=120,
                          cwd=REPO, env=mirror_env())


def _framed(schema_id: int, schema: dict[str, Any], record: dict[str, Any]) -> bytes:
    import fastavro

    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), record)
    return b"\x00" + schema_id.to_bytes(4, "big") + out.getvalue()


def _translating_flow(name: str, dc1: str, dc2: str, registries: tuple[RegistryServer, RegistryServer],
                      tmp_path: Path) -> tuple[str, list[str], Path]:
    """(state store URL, flow lines, config file) of a dc1->dc2 flow with schema.ids = translate."""
    lines = flow_lines(name, "dc1->dc2.schema.ids = translate", f"dc1.schema.registry.url = {registries[0].url}",
                       f"dc2.schema.registry.url = {registries[1].url}")
    config = tmp_path / "mm2.properties"
    config.write_text("clusters = dc1, dc2\n" f"dc1.bootstrap.servers = {dc1}\ndc2.bootstrap.servers = {dc2}\n"
                      + "\n".join(lines) + "\n")
    return f"sqlite:///{tmp_path / 'state.db'}", lines, config


def _decoded(registry: Registry, data: bytes) -> tuple[int, dict[str, Any]]:
    """(schema id, record) as a consumer of the target decodes it: the schema fetched from its registry by id."""
    import fastavro

    assert data[0] == 0
    schema_id = int.from_bytes(data[1:5], "big")
    text = registry.schema_by_id(schema_id)
    assert text is not None, f"the target registry has no schema {schema_id}"
    return schema_id, dict(fastavro.schemaless_reader(io.BytesIO(data[5:]), fastavro.parse_schema(json.loads(text))))


def test_avro_records_are_read_on_the_target_with_its_ids_and_an_unsynced_schema_pauses_until_synced(
        registries: tuple[RegistryServer, RegistryServer], dc1: str, dc2: str, name: str, start_mirror: Any,
        tmp_path: Path) -> None:
    src_srv, tgt_srv = registries
    topic, remote = f"{name}.orders", f"dc1.{name}.orders"
    subject = f"{topic}-value"
    v1 = {"type": "record", "name": f"Order{name[-6:]}", "fields": [{"name": "id", "type": "long"}, {"name": "item",
                                                                                          "type": "string"}]}
    v2 = {**v1, "fields": [*v1["fields"], {"name": "note", "type": "string", "default": ""}]}
    with Registry("dc1", {"url": src_srv.url}) as src, Registry("dc2", {"url": tgt_srv.url}) as tgt:
        tgt.register(SchemaVersion(f"{name}-unrelated-value", 1, 0, json.dumps({"type": "string"}), "AVRO"))
        s1 = src.register(SchemaVersion(subject, 1, 0, json.dumps(v1), "AVRO"))
        create_topic(dc1, topic, 1)
        p = producer(dc1)
        sent = [{"id": i, "item": f"item-{i}"} for i in range(200)]
        for r in sent:
            p.produce(topic, value=_framed(s1, v1, r), key=b"%d" % r["id"])
        assert p.flush(30) == 0

        db, lines, config = _translating_flow(name, dc1, dc2, registries, tmp_path)

        # The dry run proposes and records, and changes nothing; the sync applies.
        dry = _cli("schemas", "sync", "--config", str(config), "--dry-run", "--state-db", db)
        assert dry.returncode == 0, dry.stderr
        assert f"proposed: schema {subject}: version 1" in dry.stdout and subject not in tgt.subjects()
        store = StateStore(db)
        assert any(e.topic == subject and e.action == "proposed" for e in store.recent_drift("dc1->dc2"))
        applied = _cli("schemas", "sync", "--config", str(config), "--state-db", db)
        assert applied.returncode == 0, applied.stderr
        [t1] = [v.id for v in tgt.versions(subject)]
        assert t1 != s1, "the target's id was meant to differ"

        m = start_mirror(lines, config=config, args=["--state-db", db])
        wait_until(lambda: remote in admin(dc2).list_topics(timeout=5).topics, 60, what="the remote topic")
        wait_until(lambda: len(read_all(dc2, remote, timeout=10)) == len(sent), 120, what="the 200 records there")
        copied = read_all(dc2, remote)
        assert [_decoded(tgt, r.value) for r in copied] == [(t1, r) for r in sent]
        assert [r.key for r in copied] == [b"%d" % r["id"] for r in sent]  # unframed keys as they were

        # A schema registered on the source since, not synced: its record is not copied, the partition pauses.
        s2 = src.register(SchemaVersion(subject, 2, 0, json.dumps(v2), "AVRO"))
        later = [{"id": 200, "item": "new", "note": "v2"}, {"id": 201, "item": "old"}]
        p.produce(topic, value=_framed(s2, v2, later[0]))
        p.produce(topic, value=_framed(s1, v1, later[1]))
        assert p.flush(30) == 0

        def paused() -> str:
            return next((q["paused"] for q in m.partitions() if q["topic"] == topic and q["paused"]), "")

        reason = wait_until(paused, 60, what="the partition paused at the unknown schema id")
        assert f"offset 200 names schema id {s2}" in reason and "mirror-core schemas sync" in reason, reason
        assert len(read_all(dc2, remote)) == len(sent), "nothing after the unknown id was copied"

        # The operator syncs: the partition looks at the registries again by itself (every RETRY_S) and goes on;
        # both records land, each with the target's id of its schema.
        assert _cli("schemas", "sync", "--config", str(config), "--state-db", db).returncode == 0
        t2 = next(v.id for v in tgt.versions(subject) if v.version == 2)
        wait_until(lambda: len(read_all(dc2, remote, timeout=10)) == len(sent) + 2, RETRY_S + 60,
                   what="the two later records")
        went_on = f"goes on from offset 200: schema id {s2} maps to the target registry's id {t2}"
        assert went_on in m.log_path.read_text()
        tail = [_decoded(tgt, r.value) for r in read_all(dc2, remote)[len(sent):]]
        assert tail == [(t2, {**later[0]}), (t1, later[1])]


def _protobuf_order(package: str) -> Any:
    """A Protobuf message class built at run time (no protoc): ``<package>.Order`` with a nested message field.
    (One file: Apicurio 2.0.2, the registry the tests can build, drops a schema's references, so a deserializer
    cannot resolve an imported file there, on the source as on the target; the sync's handling of references is
    unit-tested in tests/unit/test_schema_registration_order.py.)"""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    field = descriptor_pb2.FieldDescriptorProto
    orders = descriptor_pb2.FileDescriptorProto(name=f"{package}/order.proto", package=package, syntax="proto3")
    order = orders.message_type.add(name="Order")
    money = order.nested_type.add(name="Money")
    money.field.add(name="cents", number=1, type=field.TYPE_INT64, label=field.LABEL_OPTIONAL)
    money.field.add(name="currency", number=2, type=field.TYPE_STRING, label=field.LABEL_OPTIONAL)
    order.field.add(name="id", number=1, type=field.TYPE_INT64, label=field.LABEL_OPTIONAL)
    order.field.add(name="price", number=2, type=field.TYPE_MESSAGE, type_name=f".{package}.Order.Money",
                    label=field.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(orders)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{package}.Order"))


def test_confluent_avro_and_protobuf_serializers_on_the_source_deserializers_on_the_target(
        registries: tuple[RegistryServer, RegistryServer], dc1: str, dc2: str, name: str, start_mirror: Any,
        tmp_path: Path) -> None:
    """What applications do: confluent-kafka's serializers register their schemas on the source registry and frame
    every record; after the sync and the copy, its deserializers read every record on the target with the target
    registry (each fetches the writer's schema by the id the record names)."""
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
    from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    src_srv, tgt_srv = registries
    avro_topic, proto_topic = f"{name}.payments", f"{name}.orders"
    tag = name[-6:]
    payment = json.dumps({"type": "record", "name": f"Payment{tag}", "fields": [
        {"name": "id", "type": "long"}, {"name": "amount", "type": "double"}, {"name": "note", "type": "string"}]})
    order_class = _protobuf_order(f"shop{tag}")
    source, target = SchemaRegistryClient({"url": src_srv.url}), SchemaRegistryClient({"url": tgt_srv.url})
    avro_out = AvroSerializer(source, payment)
    proto_out = ProtobufSerializer(order_class, source, {"use.deprecated.format": False})
    payments = [{"id": i, "amount": i * 1.25, "note": f"p{i}"} for i in range(150)]
    orders = []
    for i in range(150):
        o = order_class(id=i)
        o.price.cents, o.price.currency = 100 + i, "EUR"
        orders.append(o)
    for t in (avro_topic, proto_topic):
        create_topic(dc1, t, 2)
    p = producer(dc1)
    for r in payments:
        p.produce(avro_topic, key=b"%d" % r["id"],
                  value=avro_out(r, SerializationContext(avro_topic, MessageField.VALUE)))
    for o in orders:
        p.produce(proto_topic, key=b"%d" % o.id,
                  value=proto_out(o, SerializationContext(proto_topic, MessageField.VALUE)))
    assert p.flush(30) == 0

    with Registry("dc1", {"url": src_srv.url}) as src, Registry("dc2", {"url": tgt_srv.url}) as tgt:
        mine = [s for s in src.subjects() if tag in s or s.startswith(name)]
        assert {f"{avro_topic}-value", f"{proto_topic}-value"} <= set(mine), mine  # registered by the serializers
        highest = max(v.id for s in mine for v in src.versions(s))
        filler, n = 0, 0
        while filler <= highest:  # what the sync registers on the target then gets ids the source does not use
            n += 1
            filler = tgt.register(SchemaVersion(f"{name}-filler{n}-value", 1, 0, _avro(f"Filler{n}{tag}", "x"),
                                                "AVRO"))

    db, lines, config = _translating_flow(name, dc1, dc2, registries, tmp_path)
    synced = _cli("schemas", "sync", "--config", str(config), "--state-db", db)
    assert synced.returncode == 0, synced.stderr
    start_mirror(lines, config=config, args=["--state-db", db])

    def copied(remote: str, count: int) -> bool:
        return remote in admin(dc2).list_topics(timeout=5).topics and len(read_all(dc2, remote, timeout=10)) == count

    for topic in (avro_topic, proto_topic):
        wait_until(lambda t=topic: copied(f"dc1.{t}", 150), 120, what=f"the 150 records of dc1.{topic}")
    avro_in = AvroDeserializer(target)
    proto_in = ProtobufDeserializer(order_class, {"use.deprecated.format": False}, target)
    got_payments = [avro_in(r.value, SerializationContext(f"dc1.{avro_topic}", MessageField.VALUE))
                    for r in read_all(dc2, f"dc1.{avro_topic}")]
    got_orders = [proto_in(r.value, SerializationContext(f"dc1.{proto_topic}", MessageField.VALUE))
                  for r in read_all(dc2, f"dc1.{proto_topic}")]
    assert sorted(got_payments, key=lambda r: r["id"]) == payments
    assert sorted(got_orders, key=lambda o: o.id) == orders
    # The ids really were translated: every record on the target names a target id, never the source's.
    source_ids = {int.from_bytes(r.value[1:5], "big") for t in (avro_topic, proto_topic) for r in read_all(dc1, t)}
    target_ids = {int.from_bytes(r.value[1:5], "big") for t in (avro_topic, proto_topic)
                  for r in read_all(dc2, f"dc1.{t}")}
    assert len(source_ids) == 2 and len(target_ids) == 2 and not source_ids & target_ids, (source_ids, target_ids)
