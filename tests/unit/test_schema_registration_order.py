"""A sync registers every schema version after the versions it references and after its subject's earlier ones."""

from __future__ import annotations

import pytest

from mirror_core.schemas.registry import SchemaReference, SchemaVersion
from mirror_core.schemas.sync import SchemaSyncRefused, registration_order


def _v(subject: str, version: int, *refs: tuple[str, int]) -> SchemaVersion:
    return SchemaVersion(subject, version, 0, "{}", "PROTOBUF",
                         tuple(SchemaReference(f"{s}.proto", s, n) for s, n in refs))


def test_referenced_versions_first_and_each_subject_oldest_first() -> None:
    # (subjects come sorted by name from the registry: "a-value" imports "z-common" version 2)
    order = registration_order([_v("a-value", 1, ("z-common", 2)), _v("z-common", 1), _v("z-common", 2)])
    assert [(v.subject, v.version) for v in order] == [("z-common", 1), ("z-common", 2), ("a-value", 1)]


def test_references_to_versions_the_target_holds_and_plain_order_kept() -> None:
    versions = [_v("b", 1), _v("a", 1, ("common", 1)), _v("a", 2)]
    assert registration_order(versions) == versions  # "common" v1 is not in the plan: already on the target


def test_a_reference_cycle_refused_in_one_line() -> None:
    with pytest.raises(SchemaSyncRefused) as refused:
        registration_order([_v("a", 1, ("b", 1)), _v("b", 1, ("a", 1))])
    line = str(refused.value)
    assert "\n" not in line and "references itself" in line and "a v1" in line


class FakeRegistry:
    """As much of schemas.registry.Registry as plan() and id_map() read (pure logic: no HTTP)."""

    alias, url = "fake", "http://fake"

    def __init__(self, versions: dict[str, list[SchemaVersion]]) -> None:
        self._versions = versions

    def subjects(self) -> list[str]:
        return sorted(self._versions)

    def versions(self, subject: str) -> list[SchemaVersion]:
        return list(self._versions.get(subject, []))

    def compatibility(self, subject: str | None = None) -> str | None:
        return None

    def is_compatible(self, subject: str, schema: SchemaVersion) -> bool:
        return True


def _s(subject: str, version: int, schema_id: int, text: str, *refs: tuple[str, int]) -> SchemaVersion:
    return SchemaVersion(subject, version, schema_id, text, "PROTOBUF",
                         tuple(SchemaReference(f"{s}.proto", s, n) for s, n in refs))


def test_references_name_the_version_numbers_the_target_gives() -> None:
    from mirror_core.schemas.sync import id_map, plan

    # The source deleted common's version 2: its versions are 1 and 3, and orders imports version 3.
    source = FakeRegistry({"common": [_s("common", 1, 10, "money"), _s("common", 3, 12, "money, cents")],
                           "orders": [_s("orders", 1, 13, "order", ("common", 3))]})
    p = plan(source, FakeRegistry({}), "translate")  # type: ignore[arg-type]
    assert [(v.subject, v.version, v.references) for v in p.register] == [
        ("common", 1, ()), ("common", 3, ()), ("orders", 1, (SchemaReference("common.proto", "common", 2),))]
    # Synced: the target numbers common 1, 2 and orders imports its 2; nothing more to do, every id maps.
    target = FakeRegistry({"common": [_s("common", 1, 50, "money"), _s("common", 2, 51, "money, cents")],
                           "orders": [_s("orders", 1, 52, "order", ("common", 2))]})
    assert plan(source, target, "translate").register == []  # type: ignore[arg-type]
    assert id_map(source, target) == {10: 50, 12: 51, 13: 52}  # type: ignore[arg-type]
