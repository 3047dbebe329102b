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
