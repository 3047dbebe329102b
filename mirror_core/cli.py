"""The ``mirror-core`` command line."""

from __future__ import annotations

import argparse
import faulthandler
import json
import logging
import os
import re
import signal
import sys
import time
from collections.abc import Mapping, Sequence

from mirror_core import __version__
from mirror_core.config.errors import ConfigError
from mirror_core.config.loader import load_config
from mirror_core.config.model import MirrorConfig
from mirror_core.errors import ClusterUnavailable, MirrorError
from mirror_core.redaction import install_log_filter, scrub

EXIT_CONFIG = 2
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
log = logging.getLogger("mirror_core")


def _setup_logging(level: str) -> None:
    # `kill -USR1 <pid>` dumps every thread's stack: the first tool to reach for when a mirror hangs.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    logging.basicConfig(level=getattr(logging, level),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    logging.getLogger("librdkafka").setLevel(logging.WARNING)
    logging.getLogger("alembic").setLevel(logging.WARNING)  # schema migrations are routine, not news
    install_log_filter()  # secrets met while loading the config are masked in every log line


def _load(path: str) -> MirrorConfig:
    config = load_config(path)
    for w in config.warnings:
        log.warning("config: %s", w)
    return config


def cmd_run(args: argparse.Namespace) -> int:
    from mirror_core.service import Service

    config = _load(args.config)
    _private_ticket_cache(config)
    log.info("flows: %s", ", ".join(f.name for f in config.flows))
    state_db = args.state_db
    if state_db:
        from mirror_core.state.store import StateStore

        log.info("control plane: obeying flow states in %s", StateStore(state_db).safe_url)
    if args.instance_id:
        log.info("static group membership: instance id %s (a restart with this id resumes at once)", args.instance_id)
    return Service(config, metrics_port=args.metrics_port, metrics_host=args.metrics_host,
                   state_db=state_db, instance_name=args.instance_id).run_forever()


def _private_ticket_cache(config: MirrorConfig) -> None:
    """A keytab login gets this process's own Kerberos ticket cache (unless KRB5CCNAME says otherwise):
    mirrors on one host would otherwise share /tmp/krb5cc_<uid> and overwrite each other's tickets."""
    import tempfile

    keytab = any(settings.get("sasl.kerberos.keytab") for c in config.clusters.values()
                 for settings in c.clients.values())
    if keytab and "KRB5CCNAME" not in os.environ:
        os.environ["KRB5CCNAME"] = f"FILE:{tempfile.mkdtemp(prefix='mirror-core-krb5-')}/ccache"
        log.info("kerberos: ticket cache %s (set KRB5CCNAME to choose another)", os.environ["KRB5CCNAME"])


def cmd_status(args: argparse.Namespace) -> int:
    from rich.console import Console

    from mirror_core.status import collect_status, flow_controls, status_json, status_table

    config = _load(args.config)
    names = _flow_names(config, args.flow)
    controls = None
    if args.state_db:
        from mirror_core.state.store import StateStore

        flows = names or [f.name for f in config.all_flows]
        try:
            controls = flow_controls(StateStore(args.state_db), flows)
        except Exception as exc:  # in a disaster the state store may be down too: the clusters still answer
            controls = dict.fromkeys(flows, f"state store unavailable: {_one_line(exc)}")
    statuses = collect_status(config, names, controls)
    if args.json:
        print(json.dumps(status_json(statuses), indent=2))
    else:
        Console(width=None if sys.stdout.isatty() else 160).print(status_table(statuses))
    return 0 if all(s.reachable for s in statuses) else 1


def cmd_check(args: argparse.Namespace) -> int:
    config = _load(args.config)
    if args.strict and config.warnings:
        print(f"mirror-core: configuration error: {args.config}: {len(config.warnings)} warning(s) above; "
              "--strict treats them as errors", file=sys.stderr)
        return EXIT_CONFIG
    for f in config.all_flows:
        standby = "" if f in config.flows else " (standby: started only through the control plane)"
        print(scrub(f"flow {f.name}{standby}: policy {f.policy.name}, topics [{f.topics.include}] "
                    f"excluding [{f.topics.exclude}]"))
    for alias, cluster in config.clusters.items():
        consumer = cluster.clients.get("consumer", {})
        print(f"cluster {alias}: {cluster.bootstrap_servers}, {_security(consumer)}")
    print("configuration OK" + (f" ({len(config.warnings)} warning(s))" if config.warnings else ""))
    return 0


def _security(settings: Mapping[str, str]) -> str:
    """How a client authenticates, in words (never a secret)."""
    protocol = settings.get("security.protocol", "PLAINTEXT").upper()
    parts = [protocol]
    if protocol.startswith("SASL"):
        mechanism = settings.get("sasl.mechanisms", "GSSAPI")
        if settings.get("mirror_core.aws.msk.iam.enabled"):
            mechanism = "AWS_MSK_IAM"
        elif mechanism == "OAUTHBEARER" and settings.get("sasl.oauthbearer.method") == "oidc":
            mechanism = f"OAUTHBEARER (OIDC client {settings.get('sasl.oauthbearer.client.id')})"
        elif mechanism == "GSSAPI":
            mechanism = f"GSSAPI ({settings.get('sasl.kerberos.principal', 'ticket cache')})"
        elif "sasl.username" in settings:
            mechanism = f"{mechanism} (user {settings['sasl.username']})"
        parts.append(mechanism)
    if "ssl.ca.pem" in settings or "ssl.ca.location" in settings:
        parts.append("trust store loaded")
    if "ssl.certificate.pem" in settings or "ssl.certificate.location" in settings:
        parts.append("client certificate")
    return ", ".join(parts)


def cmd_dev(args: argparse.Namespace) -> int:
    from mirror_core.devcluster import dev_env
    from mirror_core.devcluster.kafka_dist import ensure_kafka
    from mirror_core.devcluster.toxiproxy import ToxiproxyError
    from mirror_core.devcluster.wan_spec import WanSpecError, parse_wan_spec

    if args.action == "fetch":
        print(f"Kafka jars: {ensure_kafka()}")
        return 0
    clusters = dev_env.dev_clusters(tuple(args.clusters))
    wan = clusters[-1]  # the WAN sits in front of the last cluster named (dc2, the target, by default)
    try:
        spec = parse_wan_spec(args.wan) if args.wan and args.action == "up" else None
        if spec is not None:
            dev_env.add_wan_listener(wan)
    except WanSpecError as exc:
        print(f"mirror-core: {exc}", file=sys.stderr)
        return 2
    for c in clusters:
        if args.action == "up":
            started = time.monotonic()
            was_running = c.is_running()
            c.start()
            note = "already running" if was_running else f"started in {time.monotonic() - started:.1f}s"
            print(f"{c.name}: bootstrap {c.bootstrap} ({note}; logs {c.log_file})")
        elif args.action == "down":
            print(f"{c.name}: {'stopped' if c.stop() else 'was not running'}")
        else:
            state = "running" if c.is_running() else "stopped"
            print(f"{c.name}: {state}, bootstrap {c.bootstrap}, data {c.base_dir}")
    if spec is not None:
        try:
            print(dev_env.start_wan(wan, spec))
        except ToxiproxyError as exc:
            print(f"mirror-core: {exc}", file=sys.stderr)
            return 1
    elif args.action == "down" and dev_env.dev_toxiproxy().stop():
        print("WAN (toxiproxy): stopped")
    return 0


def _flow_names(config: MirrorConfig, names: list[str] | None) -> list[str] | None:
    """The flows named on the command line (standby ones too), or None for all; an unknown name is a
    configuration error naming the flows there are (exit 2)."""
    try:
        return [config.flow(name).name for name in names] if names else None
    except KeyError as exc:
        raise ConfigError(exc.args[0]) from None


def _flow_name(args: argparse.Namespace) -> str:
    return f"{args.source}->{args.target}"


def cmd_offsets(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from mirror_core.offsets.failback import seed_progress, unreplicated
    from mirror_core.offsets.translate import GroupActive, apply_translation, translate_group

    config = _load(args.config)
    try:
        flow = config.flow(_flow_name(args))
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

    from mirror_core.state.store import StateStore
    from mirror_core.topic_sync import sync_topics

    config = _load(args.config)
    flows = _flow_names(config, args.flow)
    store = None
    if not args.no_record:
        store = StateStore(args.db_url)
        store.migrate()
        store.record_config(config)
    try:
        results = sync_topics(config, flows, dry_run=args.dry_run, store=store)
    except ClusterUnavailable as exc:  # expected when a cluster is down: its own words, no traceback hint
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


def cmd_clusters(args: argparse.Namespace) -> int:
    """The active-cluster registry as applications see it (read-only: only workflows change it)."""
    from mirror_core.state.store import StateStore
    from mirror_core.workflows.control import WorkflowError, active_cluster

    path = args.config or os.environ.get("MIRROR_CORE_CONFIG")
    if not path:
        print("mirror-core: 'clusters' needs the mirror configuration: --config mm2.properties (or set "
              "MIRROR_CORE_CONFIG)", file=sys.stderr)
        return EXIT_CONFIG
    config = _load(path)
    store = StateStore(args.db_url)
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


_INSTANCE_ID = re.compile(r"[A-Za-z0-9._-]{1,200}")


def _instance_id(value: str) -> str:
    if not _INSTANCE_ID.fullmatch(value):
        raise argparse.ArgumentTypeError(
            f"{value!r} (--instance-id or MIRROR_CORE_INSTANCE_ID) is not a usable instance id: use 1-200 "
            "letters, digits, '.', '_' or '-' (e.g. a pod name such as mirror-0)")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mirror-core", description="Cross-cluster Kafka replication")
    parser.add_argument("--version", action="version", version=f"mirror-core {__version__}")
    parser.add_argument("--log-level", default="INFO", type=str.upper, choices=LOG_LEVELS,
                        help="DEBUG, INFO (default), WARNING, ERROR or CRITICAL")
    parser.add_argument("--debug", action="store_true", help="show the traceback of an unexpected error")
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="replicate continuously (foreground; SIGTERM/SIGINT stop gracefully)")
    run.add_argument("--config", required=True, help="mm2.properties file")
    run.add_argument("--metrics-port", type=int, default=None, help="serve /metrics, /healthz, /status")
    run.add_argument("--metrics-host", default="127.0.0.1")
    run.add_argument("--state-db", default=os.environ.get("MIRROR_CORE_DB_URL") or None,
                     help="state store URL whose flow states this instance obeys (default: MIRROR_CORE_DB_URL, the "
                          "DAGs' state store); without either, only the enabled flows run, with no control plane")
    run.add_argument("--instance-id", type=_instance_id,
                     default=os.environ.get("MIRROR_CORE_INSTANCE_ID") or None,
                     help="a stable name for this process, unique among the mirror's processes, e.g. a StatefulSet "
                          "pod name (default: MIRROR_CORE_INSTANCE_ID): it becomes the group.instance.id of its "
                          "group memberships, so a restart within session.timeout.ms resumes its partitions at "
                          "once instead of waiting for the old member to time out")
    run.set_defaults(func=cmd_run)

    st = sub.add_parser("status", help="per flow and partition: source end, replicated position, lag")
    st.add_argument("--config", required=True)
    st.add_argument("--flow", action="append", help="only this flow (repeatable), e.g. 'dc1->dc2'; default: every "
                    "configured flow, standby flows included")
    st.add_argument("--state-db", default=os.environ.get("MIRROR_CORE_DB_URL") or None,
                    help="also show each flow's desired state and what the live instances apply (default: "
                         "MIRROR_CORE_DB_URL)")
    st.add_argument("--json", action="store_true")
    st.set_defaults(func=cmd_status)

    chk = sub.add_parser("check", help="validate a configuration file and exit")
    chk.add_argument("--config", required=True)
    chk.add_argument("--strict", action="store_true", help="treat warnings as errors (exit 2), e.g. in CI")
    chk.set_defaults(func=cmd_check)

    off = sub.add_parser("offsets", help="translate/apply consumer-group offsets; failback helpers")
    off.add_argument("action", choices=("translate", "apply", "unreplicated", "seed-at-end"),
                     help="translate: exact target offsets of a group; apply: commit them on the target; "
                          "unreplicated: source records the target never got; seed-at-end: start a (reverse) "
                          "flow at the source's current end")
    off.add_argument("--config", required=True)
    off.add_argument("--from", dest="source", required=True, help="source cluster alias")
    off.add_argument("--to", dest="target", required=True, help="target cluster alias")
    off.add_argument("--group", help="consumer group (translate/apply)")
    off.add_argument("--topic", help="only this source topic")
    off.add_argument("--force", action="store_true", help="apply even if the group has active members")
    off.add_argument("--allow-approximate", action="store_true",
                     help="apply also offsets that are not exact (time-index fallback, not replicated yet)")
    off.add_argument("--sample", type=int, default=20, help="records listed per partition (unreplicated)")
    off.add_argument("--json", action="store_true")
    off.set_defaults(func=cmd_offsets)

    top = sub.add_parser("topics", help="topic-config sync: partitions, configs and read-only ACLs")
    top.add_argument("action", choices=("sync",))
    top.add_argument("--config", required=True)
    top.add_argument("--flow", action="append", help="only this flow (repeatable)")
    top.add_argument("--dry-run", action="store_true", help="report the differences, change nothing")
    top.add_argument("--db-url", default=None, help="state store URL (default: MIRROR_CORE_DB_URL or SQLite)")
    top.add_argument("--no-record", action="store_true", help="do not record the run in the state store")
    top.add_argument("--json", action="store_true")
    top.set_defaults(func=cmd_topics)

    cl = sub.add_parser("clusters", help="active-cluster registry: which cluster an application alias uses")
    cl.add_argument("action", choices=("active", "history"),
                    help="active: print the bootstrap servers the alias should use; history: who switched it, "
                         "when, why and in which run")
    cl.add_argument("alias", nargs="?", help="application alias")
    cl.add_argument("--config", default=None, help="mm2.properties (default: $MIRROR_CORE_CONFIG)")
    cl.add_argument("--db-url", default=None, help="state store URL (default: MIRROR_CORE_DB_URL or SQLite)")
    cl.add_argument("--default", default=None, help="cluster alias to use while the alias is not registered")
    cl.add_argument("--limit", type=int, default=50)
    cl.add_argument("--json", action="store_true")
    cl.set_defaults(func=cmd_clusters)

    dev = sub.add_parser("dev", help="local single-node KRaft clusters for development")
    dev.add_argument("action", choices=("up", "down", "status", "fetch"))
    dev.add_argument("--clusters", nargs="+", default=["dc1", "dc2"])
    dev.add_argument("--wan", metavar="SPEC", help="up: put a WAN (toxiproxy) in front of the last cluster, e.g. "
                     "latency=80ms,jitter=10ms,bandwidth=10MB/s (round trip; bandwidth each way per connection); "
                     "clients on its WAN bootstrap cross it for every broker")
    dev.set_defaults(func=cmd_dev)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    _setup_logging(args.log_level)
    try:
        return int(args.func(args))
    except ConfigError as exc:
        print(f"mirror-core: configuration error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        # One line naming what failed (state store, cluster, workflow); the traceback only on request.
        if args.debug:
            raise
        print(scrub(f"mirror-core: {args.command}: {_one_line(exc)} (--debug shows the traceback)"), file=sys.stderr)
        return 1


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 300 else text[:297] + "..."


if __name__ == "__main__":
    sys.exit(main())
