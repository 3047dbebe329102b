"""The operator's commands beside ``run``: ``offsets`` (translate, apply, failback helpers), ``topics``
(config sync) and ``clusters`` (the active-cluster registry)."""

from __future__ import annotations

import argparse
import json
import os
import sys

from mirror_core.cli.common import EXIT_CONFIG, flow_name, flow_names, load_logged
from mirror_core.errors import ClusterUnavailable, MirrorError
from mirror_core.redaction import scrub


def cmd_offsets(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from mirror_core.offsets.failback import seed_progress, unreplicated
    from mirror_core.offsets.translate import GroupActive, apply_translation, translate_group

    config = load_logged(args.config)
    try:
        flow = config.flow(flow_name(args))
    except KeyError as exc:
        print(f"mirror-core: {exc.args[0]}", file=sys.stderr)
        return EXIT_CONFIG
    console = Console(width=None if sys.stdout.isatty() else 160)
    if args.action in ("translate", "apply"):
        if not args.group:
            print("mirror-core: --group is required", file=sys.stderr)
            return EXIT_CONFIG
        try:
            rows = translate_group(config, args.group, args.source, args.target, args.topic)
        except MirrorError as exc:
            print(f"mirror-core: {exc} (has the mirror replicated flow {flow.name} yet?)", file=sys.stderr)
            return 1
        if not rows:
            if args.topic and not flow.should_replicate(args.topic):
                print(f"mirror-core: --topic '{args.topic}' is not replicated by flow {flow.name} (topic filter)",
                      file=sys.stderr)
            elif args.topic:
                print(f"mirror-core: group '{args.group}' has no committed offsets for topic '{args.topic}' on "
                      f"{flow.source} (does the topic exist there?)", file=sys.stderr)
            else:
                print(f"mirror-core: group '{args.group}' has no committed offsets for flow {flow.name}",
                      file=sys.stderr)
            return 1
        result: dict[str, object] = {"flow": flow.name, "group": args.group,
                                     "partitions": [r.as_dict() for r in rows]}
        committed: list[dict[str, object]] = []
        if args.action == "apply":
            approximate = [f"{r.topic}[{r.partition}]" for r in rows
                           if (r.target_offset is not None and not r.exact) or r.beyond_retention]
            if approximate and not args.allow_approximate:
                print(f"mirror-core: refused: no exact translation for {', '.join(approximate)} (see "
                      "`offsets translate`); the group may re-read or skip records there. Pass "
                      "--allow-approximate to commit them anyway", file=sys.stderr)
                return 3
            try:
                committed = apply_translation(config, args.target, rows, force=args.force)
            except GroupActive as exc:
                print(f"mirror-core: refused: {exc}", file=sys.stderr)
                return 3
            result["committed"] = committed
        if args.json:
            print(json.dumps(result, indent=2))
            return 0
        table = Table(title=f"{args.action}: group {args.group}, {flow.name}")
        for col in ("topic", "partition", "remote topic", "source offset", "target offset", "exact", "basis",
                    "note"):
            table.add_column(col)
        for r in rows:
            table.add_row(r.topic, str(r.partition), r.remote_topic, str(r.source_offset),
                          "-" if r.target_offset is None else str(r.target_offset),
                          "yes" if r.exact else "[red]beyond retention[/red]" if r.beyond_retention
                          else "[yellow]approximate[/yellow]", r.basis, r.note)
        console.print(table)
        if args.action == "apply":
            console.print(f"committed {len(committed)} offsets to group {args.group} on {args.target}")
        return 0
    if args.action == "unreplicated":
        ranges = unreplicated(config, flow, sample=args.sample)
        if args.json:
            print(json.dumps({"flow": flow.name, "partitions": [r.as_dict() for r in ranges]}, indent=2))
            return 0
        table = Table(title=f"records on {flow.source} never replicated to {flow.target}")
        for col in ("topic", "partition", "first offset", "end offset", "records", "sample keys"):
            table.add_column(col)
        for u in ranges:
            keys = ", ".join(str(x["key"]) for x in u.records[:5])
            table.add_row(u.topic, str(u.partition), str(u.first), str(u.end), str(u.count), keys)
        console.print(table if ranges else "nothing unreplicated: the target has every source record")
        return 0
    seeded = seed_progress(config, flow)
    print(json.dumps({"flow": flow.name, "seeded": [{"topic": t, "partition": p, "next": o}
                                                    for (t, p), o in sorted(seeded.items())]}, indent=2))
    return 0


def cmd_topics(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from mirror_core.replication.acls import AclSyncError
    from mirror_core.state.store import StateStore
    from mirror_core.topic_sync import sync_topics

    config = load_logged(args.config)
    flows = flow_names(config, args.flow)
    store = None
    if not args.no_record:
        store = StateStore(args.state_db)
        store.migrate()
        store.record_config(config)
    try:
        results = sync_topics(config, flows, dry_run=args.dry_run, store=store)
    except (ClusterUnavailable, AclSyncError) as exc:  # a cluster down, an ACL refused: its own words, no traceback
        print(scrub(f"mirror-core: topics sync: {exc}"), file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps([r.as_dict() for r in results], indent=2))
    else:
        table = Table(title=f"topic sync{' (dry run: nothing changed)' if args.dry_run else ''}")
        for col in ("flow", "remote topic", "kind", "detail", "action"):
            table.add_column(col)
        for r in results:
            for c in r.changes:
                table.add_row(r.flow, c.topic, c.kind, c.detail, "proposed" if args.dry_run else "applied")
            for c in r.refused:
                table.add_row(r.flow, c.topic, f"[red]{c.kind}[/red]", c.detail, "[red]refused[/red]")
        Console(width=None if sys.stdout.isatty() else 200).print(
            table if any(r.changes or r.refused for r in results) else "in sync: nothing to do")
    refused = [c for r in results for c in r.refused]
    for c in refused:
        print(f"mirror-core: drift refused: {c.topic}: {c.detail}", file=sys.stderr)
    return 1 if refused else 0


def cmd_schemas(args: argparse.Namespace) -> int:
    """``schemas sync``: the source registry's subjects, versions and compatibility onto the target's, per flow."""
    from mirror_core.schema_sync import sync_schemas
    from mirror_core.schemas.registry import RegistryError
    from mirror_core.state.store import StateStore

    config = load_logged(args.config)
    names = flow_names(config, args.flow) or [f.name for f in config.flows if f.schema_ids != "off"]
    if not names:
        print("mirror-core: schemas sync: no enabled flow sets schema.ids = translate: name one with --flow",
              file=sys.stderr)
        return EXIT_CONFIG
    unset = [n for n in names if config.without_registry(config.flow(n))]
    if unset:
        print(f"mirror-core: schemas sync: flow {unset[0]} has no schema registry on both clusters: set "
              "<alias>.schema.registry.url for its source and target", file=sys.stderr)
        return EXIT_CONFIG
    store = None
    if not args.no_record:
        store = StateStore(args.state_db)
        store.migrate()
    results = []
    for name in names:
        try:
            results.append(sync_schemas(config, config.flow(name), args.dry_run, store, "cli"))
        except RegistryError as exc:
            print(scrub(f"mirror-core: schemas sync: flow {name}: {exc}"), file=sys.stderr)
            return 1
    if args.json:
        print(json.dumps([r.as_dict() for r in results], indent=2))
    else:
        verb = "proposed" if args.dry_run else "applied"
        for r in results:
            for subject, kind, detail in r.changes:
                print(f"{r.flow}: {verb}: {kind} {subject}: {detail}")
            print(f"{r.flow}: {r.subjects} subjects, {r.versions} versions on the source; {len(r.changes)} changes "
                  f"{verb}; {r.mapped_ids} source ids with a target id" + (" (dry run: nothing changed)"
                                                                          if args.dry_run else ""))
    refused = [r for r in results if r.refused]
    for r in refused:
        print(scrub(f"mirror-core: schemas sync: flow {r.flow} refused: {r.refused}"), file=sys.stderr)
    return 1 if refused else 0


def cmd_clusters(args: argparse.Namespace) -> int:
    """The active-cluster registry as applications see it (read-only: only workflows change it)."""
    from mirror_core.state.store import StateStore
    from mirror_core.workflows.control import WorkflowError, active_cluster

    path = args.config or os.environ.get("MIRROR_CORE_CONFIG")
    if not path:
        print("mirror-core: 'clusters' needs the mirror configuration: --config mm2.properties (or set "
              "MIRROR_CORE_CONFIG)", file=sys.stderr)
        return EXIT_CONFIG
    config = load_logged(path)
    store = StateStore(args.state_db)
    store.migrate()
    if args.action == "active":
        if not args.alias:
            print("mirror-core: 'clusters active' needs an application alias", file=sys.stderr)
            return 2
        try:
            cluster, bootstrap = active_cluster(store, config, args.alias, args.default)
        except (WorkflowError, KeyError) as exc:
            print(f"mirror-core: {exc.args[0]}", file=sys.stderr)
            return 1
        row = store.active_cluster(args.alias)
        if args.json:
            print(json.dumps({"alias": args.alias, "cluster": cluster, "bootstrap.servers": bootstrap,
                              "registered": row is not None,
                              "changed_at": row.changed_at.isoformat() if row else None,
                              "changed_by": row.changed_by if row else None, "run_id": row.run_id if row else None}))
        else:
            print(bootstrap)  # plain, so that scripts can use $(mirror-core clusters active app ...)
        return 0
    rows = store.registry_history(args.alias, limit=args.limit)
    if args.json:
        print(json.dumps([{"alias": r.app_alias, "from": r.from_cluster, "to": r.to_cluster,
                           "at": r.changed_at.isoformat(), "by": r.changed_by, "reason": r.reason,
                           "run_id": r.run_id} for r in rows], indent=2))
        return 0
    for r in rows:
        print(f"{r.changed_at:%Y-%m-%d %H:%M:%S} {r.app_alias}: {r.from_cluster or '-'} -> {r.to_cluster} "
              f"by {r.changed_by} ({r.reason}; run {r.run_id or '-'})")
    return 0
