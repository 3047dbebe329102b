"""``mirror-core control pause|resume|limit|unlimit|list|history|filter|unfilter|filters``: an operator's runtime
controls of a flow — its topic and group filters (over the config file's, ``filter``), pause or resume a source
topic or one partition, limit the bytes per second of the flow or a topic — recorded in the state store with who
and why (:mod:`mirror_core.workflows.topic_control`); mirrors running with ``--state-db`` on the same store apply
them within seconds, without a restart."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from mirror_core.cli.common import EXIT_CONFIG, add_state_db_argument, load_logged
from mirror_core.cli.partitions import _default_user

_CHANGES = ("pause", "resume", "limit", "unlimit")


def _refuse(args: argparse.Namespace, message: str) -> int:
    print(f"mirror-core: control {args.control_action}: {message}", file=sys.stderr)
    return EXIT_CONFIG


def cmd_control(args: argparse.Namespace) -> int:
    from mirror_core.state.store import StateStore
    from mirror_core.workflows.errors import WorkflowError
    from mirror_core.workflows.topic_control import apply_control, check_against_config, control_request

    if args.control_action in ("list", "history"):
        store = StateStore(args.state_db)
        store.migrate()
        if args.control_action == "list":
            return _print(store.active_topic_controls([args.flow] if args.flow else None), args.json,
                          "active runtime controls (desired)")
        return _print(store.topic_control_history(args.flow, limit=args.limit), args.json,
                      "runtime controls (newest first)")
    if not args.by.strip():
        return _refuse(args, "who does it is unknown (no OS user name): pass --by NAME")
    try:
        req = control_request(args.control_action, args.flow, args.topic, getattr(args, "partition", None),
                              getattr(args, "bytes_per_second", None), None, args.reason)
        if args.config:
            check_against_config(load_logged(args.config), req)
        store = StateStore(args.state_db)
        store.migrate()
        print(apply_control(store, req, args.by.strip()))
    except WorkflowError as exc:
        return _refuse(args, str(exc))
    return 0


def cmd_filter(args: argparse.Namespace) -> int:
    """``control filter|unfilter|filters``: a flow's topic and group filters set in the state store."""
    from mirror_core.state.errors import StateStoreError
    from mirror_core.state.flow_filters import describe, filter_json
    from mirror_core.state.store import StateStore

    store = StateStore(args.state_db)
    store.migrate()
    if args.control_action == "filters":
        active = store.active_flow_filters([args.flow] if args.flow else None)
        if args.json:
            print(json.dumps([filter_json(f) for f in active.values()], indent=2))
        for name, f in sorted(active.items()) if not args.json else ():
            print(f"{name}: {describe(f)} (id {f.id})")
        if not active and not args.json:
            print("no filters set in the state store: every flow applies its config file's")
        return 0
    if not args.by.strip():
        return _refuse(args, "who does it is unknown (no OS user name): pass --by NAME")
    try:
        if args.config:
            load_logged(args.config).flow(args.flow)
        if args.control_action == "unfilter":
            rec = store.clear_flow_filter(args.flow, args.by.strip(), args.reason)
            print(f"cleared the filters of {rec.flow} set by {rec.set_by} (id {rec.id}): the config file's apply "
                  "again; the running mirror instances follow within seconds")
            return 0
        values = {"topics": args.topics, "topics.exclude": args.topics_exclude, "groups": args.groups,
                  "groups.exclude": args.groups_exclude}
        expected = -1 if args.expect_id is None else (None if args.expect_id == 0 else args.expect_id)
        rec = store.set_flow_filter(args.flow, args.by.strip(), args.reason, values, expected)
        print(f"filters of {rec.flow}: {describe(rec)} (id {rec.id}); the running mirror instances apply them within "
              "seconds (`mirror-core status` shows desired and applied)")
    except KeyError as exc:
        return _refuse(args, str(exc.args[0]))
    except StateStoreError as exc:
        return _refuse(args, str(exc))
    return 0


def _print(rows: list[Any], as_json: bool, title: str) -> int:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from mirror_core.state.topic_controls import control_json

    if as_json:
        print(json.dumps([control_json(r) for r in rows], indent=2))
        return 0
    if not rows:
        print(f"no {title.split(' (')[0]}")
        return 0
    table = Table(title=title)
    for col in ("id", "flow", "control", "scope", "set", "by", "reason", "cleared"):
        table.add_column(col)
    for r in rows:
        control = "pause" if r.kind == "pause" else f"limit {r.limit_bytes_per_s} bytes/s"
        cleared = ("[yellow]active[/yellow]" if r.active else
                   escape(f"{r.cleared_at:%Y-%m-%d %H:%M:%S} by {r.cleared_by}: {r.clear_reason}"))
        table.add_row(str(r.id), escape(r.flow), control, escape(r.scope or "(whole flow)"),
                      f"{r.set_at:%Y-%m-%d %H:%M:%S}", escape(r.set_by), escape(r.reason), cleared)
    Console(width=None if sys.stdout.isatty() else 200).print(table)
    return 0


def add_control_parser(sub: Any) -> None:
    """``control pause|resume|limit|unlimit|list|history`` on the parser's subcommands."""
    ctl = sub.add_parser("control", help="runtime controls of a flow while it runs: pause/resume a topic or "
                                         "partition, bandwidth limits of the flow or a topic; the history")
    actions = ctl.add_subparsers(dest="control_action", required=True)
    for name, help_text in (
            ("pause", "stop copying a source topic (or one partition of it) until resumed"),
            ("resume", "clear an operator's pause; a partition the mirror paused itself (damaged batch, record "
                       "refused) is resumed the same way (a recorded partition action)"),
            ("limit", "limit the bytes per second copied for the flow (or one topic), across all its processes "
                      "(each takes the share of the partitions it owns); replaces a limit already set"),
            ("unlimit", "lift the bandwidth limit of the flow (or of one topic)")):
        p = actions.add_parser(name, help=help_text)
        p.add_argument("--flow", required=True, help="the flow, e.g. 'dc1->dc2' (quoted: '>' redirects in a shell)")
        topic_help = "the source topic" + ("" if name in ("pause", "resume") else " (default: the whole flow)")
        p.add_argument("--topic", required=name in ("pause", "resume"), default=None, help=topic_help)
        if name in ("pause", "resume"):
            p.add_argument("--partition", type=int, default=None, help="only this partition (default: the topic)")
        if name == "limit":
            p.add_argument("--bytes-per-second", required=True, type=int, metavar="N",
                           help="the flow's (or topic's) limit in bytes per second, > 0")
        p.add_argument("--reason", required=True, help="why (recorded with the change)")
        p.add_argument("--by", default=_default_user(), help="who does it (default: the OS user)")
        add_state_db_argument(p, "state store URL: the one the mirror runs with")
        p.add_argument("--config", default=None,
                       help="mm2.properties: also check that the flow exists and replicates the topic")
        p.set_defaults(func=cmd_control)
    for name in ("filter", "unfilter", "filters"):
        p = actions.add_parser(name, help={
            "filter": "set a flow's topics / topics.exclude / groups / groups.exclude in the state store (regexes, "
                      "comma-separated, as in the config file; each overrides the file's value, the others are kept)",
            "unfilter": "clear the filters set in the state store: the config file's apply again",
            "filters": "the filters set in the state store, by flow"}[name])
        p.add_argument("--flow", required=name != "filters", default=None,
                       help="the flow, e.g. 'dc1->dc2' (quoted: '>' redirects in a shell)")
        if name == "filter":
            for key in ("topics", "topics-exclude", "groups", "groups-exclude"):
                p.add_argument(f"--{key}", default=None, metavar="REGEXES",
                               help=f"{key.replace('-exclude', '.exclude')}: comma-separated regexes (default: the "
                                    "config file's)")
            p.add_argument("--expect-id", type=int, default=None, metavar="ID",
                           help="refuse unless the filter set now has this id (0: none set), as `control filters` "
                                "showed it: another operator's change in between is not overwritten")
        if name != "filters":
            p.add_argument("--reason", required=True, help="why (recorded with the change)")
            p.add_argument("--by", default=_default_user(), help="who does it (default: the OS user)")
            p.add_argument("--config", default=None, help="mm2.properties: also check that the flow exists")
        else:
            p.add_argument("--json", action="store_true")
        add_state_db_argument(p, "state store URL: the one the mirror runs with")
        p.set_defaults(func=cmd_filter)
    for name, help_text in (("list", "the active controls (desired state) by flow"),
                            ("history", "every control set and cleared, newest first: who, when, why")):
        p = actions.add_parser(name, help=help_text)
        p.add_argument("--flow", default=None, help="only this flow, e.g. 'dc1->dc2'")
        if name == "history":
            p.add_argument("--limit", type=int, default=100)
        p.add_argument("--json", action="store_true")
        add_state_db_argument(p, "state store URL: the one the mirror runs with")
        p.set_defaults(func=cmd_control)
