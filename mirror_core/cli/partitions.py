"""``mirror-core partitions resume|skip|actions``: an operator's remedy for a source partition the mirror
paused (a damaged record batch, a record the target refused), recorded in the state store with who and
why; a mirror running with ``--state-db`` on the same store applies it within seconds."""

from __future__ import annotations

import argparse
import getpass
import json
import re
import sys
from typing import Any

from mirror_core.cli.common import EXIT_CONFIG, add_state_db_argument, flow_names, load_logged
from mirror_core.workflows.topic_control import parse_offsets

_FLOW = re.compile(r"[A-Za-z0-9_\-]+->[A-Za-z0-9_\-]+")  # cluster aliases as the config allows them


def _refuse(args: argparse.Namespace, message: str) -> int:
    print(f"mirror-core: partitions {args.partitions_action}: {message}", file=sys.stderr)
    return EXIT_CONFIG


def _default_user() -> str:
    try:
        return getpass.getuser()
    except (OSError, KeyError):  # no login name and no $USER (e.g. a container's anonymous uid)
        return ""


def cmd_partitions(args: argparse.Namespace) -> int:
    from mirror_core.state.errors import StateStoreError
    from mirror_core.state.store import StateStore

    if args.flow is not None and not _FLOW.fullmatch(args.flow):
        return _refuse(args, f"--flow {args.flow!r} is not a flow: use SOURCE->TARGET with the clusters' aliases, "
                             "e.g. 'dc1->dc2' (quoted: '>' redirects in a shell)")
    offsets = None
    if args.partitions_action == "skip":
        offsets = parse_offsets(args.offsets)
        if offsets is None:
            return _refuse(args, f"--offsets {args.offsets!r} is not an offset range: use FIRST-LAST (inclusive, "
                                 "e.g. 3061-3263, as the mirror's pause line prints it) or one offset")
    if args.partitions_action != "actions" and not args.by.strip():
        return _refuse(args, "who requests it is unknown (no OS user name): pass --by NAME")
    if args.config:
        config = load_logged(args.config)
        flow_names(config, [args.flow] if args.flow else None)  # an unknown flow: exit 2, naming the flows
        if args.partitions_action != "actions" and not config.flow(args.flow).should_replicate(args.topic):
            return _refuse(args, f"topic {args.topic!r} is not replicated by flow {args.flow} (its topic filter "
                                 f"in {args.config}): name the source topic as the mirror's pause line does")
    store = StateStore(args.state_db)
    store.migrate()
    if args.partitions_action == "actions":
        return _print_actions(store.partition_actions(args.flow, limit=args.limit), args.json)
    first, last = offsets if offsets is not None else (None, None)
    try:
        record = store.request_partition_action(args.flow, args.topic, args.partition, args.partitions_action,
                                                args.by, args.reason, first, last)
    except StateStoreError as exc:
        return _refuse(args, str(exc))
    what = f"{record.action} {record.where}" + (f" offsets {record.offsets}" if record.offsets else "")
    live = [i for i in store.flow_instances(record.flow) if i.state == "running"]
    applies = ("a mirror running with --state-db applies it within seconds" if live else
               f"no mirror instance has reported flow {record.flow} running in the last 20 s on this store: it "
               "applies once one runs with --state-db")
    print(f"requested: {what} (id {record.id}, by {record.requested_by}, in {store.safe_url}): {applies}; "
          "`mirror-core partitions actions` shows the outcome")
    return 0


def _print_actions(rows: list[Any], as_json: bool) -> int:
    from rich.console import Console
    from rich.table import Table

    if as_json:
        print(json.dumps([{"id": r.id, "flow": r.flow, "topic": r.topic, "partition": r.partition,
                           "action": r.action, "first_offset": r.first_offset, "last_offset": r.last_offset,
                           "requested_by": r.requested_by, "requested_at": r.requested_at.isoformat(),
                           "reason": r.reason, "applied_at": r.applied_at.isoformat() if r.applied_at else None,
                           "applied_by": r.applied_by, "outcome": r.outcome, "ok": r.ok} for r in rows], indent=2))
        return 0
    if not rows:
        print("no partition actions recorded")
        return 0
    table = Table(title="partition actions (newest first)")
    for col in ("id", "requested", "flow", "partition", "action", "offsets", "by", "reason", "applied",
                "outcome"):
        table.add_column(col)
    for r in rows:
        if r.applied_at is None:
            applied, outcome = "[yellow]pending[/yellow]", ""
        else:
            applied = f"{r.applied_at:%Y-%m-%d %H:%M:%S} by {r.applied_by or '-'}"
            outcome = f"[{'green' if r.ok else 'red'}]{r.outcome or ('ok' if r.ok else 'failed')}[/]"
        table.add_row(str(r.id), f"{r.requested_at:%Y-%m-%d %H:%M:%S}", r.flow, f"{r.topic}[{r.partition}]",
                      r.action, r.offsets or "-", r.requested_by, r.reason, applied, outcome)
    Console(width=None if sys.stdout.isatty() else 200).print(table)
    return 0


def add_partitions_parser(sub: Any) -> None:
    """``partitions resume|skip|actions`` on the parser's subcommands."""
    config: dict[str, Any] = dict(
        default=None, help="mm2.properties: also check that the flow exists and replicates the topic")
    parts = sub.add_parser("partitions", help="resume or skip offsets of a source partition the mirror paused "
                                              "(damaged batch, record refused by the target); the history")
    actions = parts.add_subparsers(dest="partitions_action", required=True)
    for name, help_text in (
            ("resume", "re-read the paused partition from where it stopped (e.g. after moving its leadership "
                       "to an intact replica)"),
            ("skip", "pass over an inclusive offset range of the paused partition (the damaged batch): those "
                     "records are not replicated")):
        p = actions.add_parser(name, help=help_text)
        p.add_argument("--flow", required=True, help="the flow, e.g. 'dc1->dc2'")
        p.add_argument("--topic", required=True, help="the source topic")
        p.add_argument("--partition", required=True, type=int)
        if name == "skip":
            p.add_argument("--offsets", required=True, metavar="FIRST-LAST",
                           help="inclusive, as the mirror's pause line prints them (e.g. 3061-3263), or one offset")
        p.add_argument("--reason", required=True, help="why (recorded with the action)")
        p.add_argument("--by", default=_default_user(), help="who requests it (default: the OS user)")
        add_state_db_argument(p, "state store URL: the one the mirror runs with")
        p.add_argument("--config", **config)
        p.set_defaults(func=cmd_partitions)
    hist = actions.add_parser("actions", help="the actions requested, newest first: who, when, why, the outcome")
    hist.add_argument("--flow", default=None, help="only this flow, e.g. 'dc1->dc2'")
    hist.add_argument("--limit", type=int, default=100)
    hist.add_argument("--json", action="store_true")
    add_state_db_argument(hist, "state store URL: the one the mirror runs with")
    hist.add_argument("--config", **config)
    hist.set_defaults(func=cmd_partitions)
