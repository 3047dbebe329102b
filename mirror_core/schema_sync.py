"""Schema sync of one flow: the source registry's subjects, versions and compatibility levels onto the target's
(the plan and its checks: mirror_core/schemas/sync.py), dry or applied, recorded like the topic-config sync: a sync
run, and one drift event per change (the subject in the topic column; kind ``schema`` or ``compatibility``, or
``schemas-refused`` with the one line that refused the whole sync, nothing changed)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from mirror_core.config.model import FlowConfig, MirrorConfig
from mirror_core.schemas.registry import Registry, RegistryError
from mirror_core.schemas.sync import SchemaPlan, SchemaSyncRefused, apply, plan
from mirror_core.state.models import DriftEvent
from mirror_core.state.store import StateStore


@dataclass
class SchemaSyncResult:
    flow: str
    dry_run: bool
    subjects: int = 0
    versions: int = 0
    #: (subject or "(default)", kind, detail), proposed (dry run) or applied
    changes: list[tuple[str, str, str]] = field(default_factory=list)
    refused: str | None = None  # why nothing was changed
    #: source ids with a target id after the run (dry run: those both registries already share)
    mapped_ids: int = 0
    sync_run_id: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _changes(p: SchemaPlan) -> list[tuple[str, str, str]]:
    return ([(s.subject, "schema", f"version {s.version} (source id {s.id}, {s.schema_type})") for s in p.register]
            + [(subject or "(default)", "compatibility", level) for subject, level in p.compatibility])


def sync_schemas(config: MirrorConfig, flow: FlowConfig, dry_run: bool, store: StateStore | None,
                 run_id: str | None = None) -> SchemaSyncResult:
    """Plan the sync of ``flow``'s registries and apply it unless ``dry_run``; a refusal (a subject incompatible on
    the target, ids that cannot be kept) is a result with nothing changed; an unreachable or unauthorised registry
    raises :class:`RegistryError` (one line), recorded as a failed run."""
    src, dst = config.cluster(flow.source), config.cluster(flow.target)
    result = SchemaSyncResult(flow.name, dry_run)
    sync_id = result.sync_run_id = store.start_sync_run(flow.name, dry_run, run_id) if store else None
    try:
        with Registry(src.alias, src.schema_registry) as source, Registry(dst.alias, dst.schema_registry) as target:
            p = plan(source, target, "preserve" if flow.schema_ids == "preserve" else "translate")
            result.subjects, result.versions, result.changes = p.subjects, p.versions, _changes(p)
            result.mapped_ids = len(p.ids if dry_run else apply(p, target))
    except SchemaSyncRefused as exc:
        result.refused, result.changes = str(exc), []
    except RegistryError as exc:
        if store and sync_id is not None:
            store.finish_sync_run(sync_id, "failed", {"kind": "schemas", "error": str(exc)})
        raise
    if store and sync_id is not None:
        action = "proposed" if dry_run else "applied"
        rows = [DriftEvent(sync_run_id=sync_id, flow=flow.name, topic=subject, kind=kind, detail=detail,
                           action=action) for subject, kind, detail in result.changes]
        if result.refused:
            rows.append(DriftEvent(sync_run_id=sync_id, flow=flow.name, topic="(schemas)", kind="schemas-refused",
                                   detail=result.refused, action="refused"))
        store.add(*rows)
        store.finish_sync_run(sync_id, "drift" if rows else "ok",
                              {"kind": "schemas", "subjects": result.subjects, "versions": result.versions,
                               "changes": len(result.changes), "mapped_ids": result.mapped_ids,
                               "refused": result.refused})
    return result
