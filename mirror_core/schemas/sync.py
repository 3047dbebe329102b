"""Copying subjects, their versions and compatibility settings from the source cluster's schema registry to the
target's, and the id map that follows from it (a source schema id → the id the same subject version has on the
target).

Validated first, applied second: :func:`plan` reads both registries and refuses in one line (nothing changed) a
target subject whose versions differ from the source's, a version the target's compatibility rules would refuse, or
``preserve`` where the target cannot take given ids; :func:`apply` then makes the changes the plan lists.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from mirror_core.schemas.registry import Registry, RegistryError, SchemaVersion

IMPORT = "IMPORT"


class SchemaSyncRefused(RegistryError):
    """The sync would leave the target half-applied or wrong: nothing was changed."""


@dataclass
class SchemaPlan:
    """What one sync changes on the target, and the ids of what both registries already share."""

    preserve_ids: bool
    #: versions to register on the target, in order (a subject's versions oldest first)
    register: list[SchemaVersion] = field(default_factory=list)
    #: (subject or None for the registry's default, level) to set on the target
    compatibility: list[tuple[str | None, str]] = field(default_factory=list)
    #: source id → target id of the versions both hold already
    ids: dict[int, int] = field(default_factory=dict)
    #: what was seen, for the run's summary (drift history)
    subjects: int = 0
    versions: int = 0

    @property
    def changes(self) -> list[str]:
        return ([f"register {s.subject} version {s.version} (source id {s.id})" for s in self.register]
                + [f"compatibility of {subject or '(default)'} = {level}" for subject, level in self.compatibility])


def same_schema(a: SchemaVersion, b: SchemaVersion) -> bool:
    """The same schema, whatever whitespace each registry keeps (JSON for Avro and JSON Schema), importing the same
    subjects' versions."""
    if a.schema_type != b.schema_type or a.references != b.references:
        return False
    if a.schema_type in ("AVRO", "JSON"):
        try:
            return bool(json.loads(a.schema) == json.loads(b.schema))
        except ValueError:
            pass
    return a.schema.strip() == b.schema.strip()


def plan(source: Registry, target: Registry, mode: str) -> SchemaPlan:
    """What the sync would change (``mode``: schema.ids, translate or preserve); refused in one line when the
    target cannot take it."""
    preserve = mode == "preserve"
    if preserve:
        target_mode = target.mode()
        if target_mode != IMPORT and target.subjects():
            raise SchemaSyncRefused(
                f"schema.ids = preserve: the schema registry of {target.alias} ({target.url}) is "
                f"{'not in IMPORT mode' if target_mode else 'without modes (no IMPORT mode)'} and holds subjects, "
                "so the source's ids cannot be kept: put it in IMPORT mode, or use schema.ids = translate")
        if target_mode != IMPORT:
            raise SchemaSyncRefused(
                f"schema.ids = preserve: the schema registry of {target.alias} ({target.url}) has no IMPORT mode "
                f"({target_mode or 'GET /mode is not supported'}), so ids cannot be given: put it in IMPORT mode, or "
                "use schema.ids = translate")
    p = SchemaPlan(preserve_ids=preserve)
    default_src, default_tgt = source.compatibility(), target.compatibility()
    if default_src and default_src != default_tgt:
        p.compatibility.append((None, default_src))
    subjects = source.subjects()
    theirs_all = {subject: source.versions(subject) for subject in subjects}
    ours_all = {subject: target.versions(subject) for subject in subjects}
    as_target = _on_target(theirs_all, ours_all)
    for subject in subjects:
        theirs, ours = theirs_all[subject], ours_all[subject]
        p.subjects += 1
        p.versions += len(theirs)
        if len(ours) > len(theirs) or any(not same_schema(as_target(a), b) for a, b in zip(theirs, ours, strict=False)):
            raise SchemaSyncRefused(
                f"subject {subject} is incompatible on the target ({target.alias}): its versions there are not the "
                f"source's first {len(ours)} (source {len(theirs)} versions, target {len(ours)}); nothing was "
                "changed: delete or rename that subject on the target, or leave it out of the sync")
        for a, b in zip(theirs, ours, strict=False):
            if preserve and a.id != b.id:
                raise SchemaSyncRefused(
                    f"schema.ids = preserve: subject {subject} version {a.version} has id {b.id} on the target, "
                    f"{a.id} on the source; nothing was changed: use schema.ids = translate")
            p.ids[a.id] = b.id
        missing = theirs[len(ours):]
        if ours and missing and not target.is_compatible(subject, as_target(missing[0])):
            raise SchemaSyncRefused(
                f"subject {subject} is incompatible on the target ({target.alias}): version {missing[0].version} "
                f"is refused by the target's compatibility rules; nothing was changed: align "
                f"{target.alias}'s compatibility for {subject} with the source's")
        p.register.extend(missing)
        level = source.compatibility(subject)
        # A subject new on the target takes the target's default (the source's, once the plan sets it).
        theirs_now = target.compatibility(subject) if ours else (default_src or default_tgt)
        if level and level != theirs_now:
            p.compatibility.append((subject, level))
    p.register = [as_target(v) for v in registration_order(p.register)]
    return p


def _on_target(theirs_all: dict[str, list[SchemaVersion]],
               ours_all: dict[str, list[SchemaVersion]]) -> Callable[[SchemaVersion], SchemaVersion]:
    """A source version as the target holds it: its references to the version numbers the target gives (a
    subject's versions pair by position: a source whose versions 2 was deleted has 1, 3; the target 1, 2)."""
    numbers: dict[tuple[str, int], int] = {}
    for subject, theirs in theirs_all.items():
        ours = ours_all.get(subject, [])
        last = ours[-1].version if ours else 0
        for i, v in enumerate(theirs):
            numbers[(subject, v.version)] = ours[i].version if i < len(ours) else last + i - len(ours) + 1

    def as_target(v: SchemaVersion) -> SchemaVersion:
        if not v.references:
            return v
        return replace(v, references=tuple(replace(r, version=numbers.get((r.subject, r.version), r.version))
                                           for r in v.references))
    return as_target


def registration_order(versions: list[SchemaVersion]) -> list[SchemaVersion]:
    """``versions`` with every version after the versions it references (a registry refuses a reference to a
    version it does not hold yet) and after its subject's earlier versions; otherwise in their order."""
    pending = {(v.subject, v.version): v for v in versions}
    ordered: list[SchemaVersion] = []

    def place(v: SchemaVersion, trail: tuple[tuple[str, int], ...]) -> None:
        key = (v.subject, v.version)
        if key not in pending:
            return
        if key in trail:
            raise SchemaSyncRefused(f"subject {v.subject} version {v.version} references itself through "
                                    f"{' -> '.join(f'{s} v{n}' for s, n in trail)}; nothing was changed: "
                                    "fix the source registry's references")
        needs = [(v.subject, n) for n in range(1, v.version)] + [(r.subject, r.version) for r in v.references]
        for need in needs:
            if need in pending:
                place(pending[need], (*trail, key))
        ordered.append(pending.pop(key))

    for v in versions:
        place(v, ())
    return ordered


def apply(p: SchemaPlan, target: Registry) -> dict[int, int]:
    """Make the plan's changes on the target; the whole id map (source id → target id)."""
    ids = dict(p.ids)
    for schema in p.register:
        ids[schema.id] = target.register(schema, with_id=p.preserve_ids)
    for subject, level in p.compatibility:
        target.set_compatibility(level, subject)
    return ids


def id_map(source: Registry, target: Registry) -> dict[int, int]:
    """Source schema id → target schema id, for every subject version both registries hold alike."""
    ids: dict[int, int] = {}
    subjects = source.subjects()
    theirs_all = {subject: source.versions(subject) for subject in subjects}
    ours_all = {subject: target.versions(subject) for subject in subjects}
    as_target = _on_target(theirs_all, ours_all)
    for subject in subjects:
        for a, b in zip(theirs_all[subject], ours_all[subject], strict=False):
            if same_schema(as_target(a), b):
                ids[a.id] = b.id
    return ids
