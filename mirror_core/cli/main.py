"""The ``mirror-core`` command line: the parser, ``run``, ``status``, ``check``, ``dev``."""

from __future__ import annotations

import argparse
import faulthandler
import json
import logging
import os
import re
import signal
import sys
from collections.abc import Mapping, Sequence

from mirror_core import __version__
from mirror_core.cli.common import EXIT_CONFIG, add_state_db_argument, existing_state_db, flow_names, load_logged, log
from mirror_core.cli.control import add_control_parser
from mirror_core.cli.partitions import add_partitions_parser
from mirror_core.cli.tools import cmd_clusters, cmd_offsets, cmd_schemas, cmd_topics
from mirror_core.config.errors import ConfigError
from mirror_core.config.model import MirrorConfig
from mirror_core.redaction import install_log_filter, scrub

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def _setup_logging(level: str) -> None:
    # `kill -USR1 <pid>` dumps every thread's stack: the first tool to reach for when a mirror hangs.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    logging.basicConfig(level=getattr(logging, level),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    logging.getLogger("librdkafka").setLevel(logging.WARNING)
    logging.getLogger("alembic").setLevel(logging.WARNING)  # schema migrations are routine, not news
    install_log_filter()  # secrets met while loading the config are masked in every log line


def cmd_run(args: argparse.Namespace) -> int:
    from mirror_core.cli.instance import derived_instance_id
    from mirror_core.service import Service

    config = load_logged(args.config)
    _private_ticket_cache(config)
    log.info("flows: %s", ", ".join(f.name for f in config.flows))
    state_db = args.state_db
    if state_db:
        from mirror_core.state.store import StateStore

        log.info("control plane: obeying flow states in %s", StateStore(state_db).safe_url)
    instance = args.instance_id
    if instance:
        log.info("static group membership: instance id %s (a restart with this id resumes at once)", instance)
    else:
        instance = derived_instance_id()
        log.info("static group membership: instance id %s (derived: this host's name and the lowest instance slot "
                 "free on it; a restart takes it again and resumes at once; --instance-id sets another)", instance)
    return Service(config, metrics_port=args.metrics_port, metrics_host=args.metrics_host,
                   state_db=state_db, instance_name=instance).run_forever()


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

    from mirror_core.status import FlowControlView, collect_status, flow_controls, status_json, status_table

    config = load_logged(args.config)
    names = flow_names(config, args.flow)
    flows = names or [f.name for f in config.all_flows]
    controls: Mapping[str, str | FlowControlView] | None = None
    url = existing_state_db(args.state_db)  # the default store only if there is one: status creates none
    if url is None and args.state_db:
        controls = dict.fromkeys(flows, f"no state store at {args.state_db}")
    elif url is not None:
        from mirror_core.state.store import StateStore

        try:
            controls = flow_controls(StateStore(url), flows, config)
        except Exception as exc:  # in a disaster the state store may be down too: the clusters still answer
            controls = dict.fromkeys(flows, f"state store unavailable: {_one_line(exc)}")
    statuses = collect_status(config, names, controls)
    if args.json:
        print(json.dumps(status_json(statuses), indent=2))
    else:
        Console(width=None if sys.stdout.isatty() else 160).print(status_table(statuses))
    return 0 if all(s.reachable for s in statuses) else 1


def cmd_check(args: argparse.Namespace) -> int:
    config = load_logged(args.config)
    if args.strict and config.warnings:
        print(f"mirror-core: configuration error: {args.config}: {len(config.warnings)} warning(s) above; "
              "--strict treats them as errors", file=sys.stderr)
        return EXIT_CONFIG
    for f in config.all_flows:
        standby = "" if f in config.flows else " (standby: started only through the control plane)"
        print(scrub(f"flow {f.name}{standby}: policy {f.policy.name}, topics [{f.topics.include}] "
                    f"excluding [{f.topics.exclude}], data path {f.data_path} ({f.data_path_reason})"))
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
    from mirror_core.devcluster.local_cluster import ClusterStartError, LocalCluster
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
    if args.action == "up":
        def up(c: LocalCluster, was_running: bool, seconds: float) -> None:
            note = "already running" if was_running else f"started in {seconds:.1f}s"
            print(f"{c.name}: bootstrap {c.bootstrap} ({note}; logs {c.log_file})")

        try:
            dev_env.start_clusters(clusters, up)
        except ClusterStartError as exc:  # what this command started is stopped again: it changes nothing
            print(f"mirror-core: dev up: {exc}", file=sys.stderr)
            return 1
    else:
        for c in clusters:
            if args.action == "down":
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
                          "DAGs' state store); without either, only the enabled flows run, with no control plane. "
                          "The other commands' default when neither is set is the local SQLite store "
                          ".state/mirror-core.db: `make demo` passes it to its mirror")
    run.add_argument("--instance-id", type=_instance_id,
                     default=os.environ.get("MIRROR_CORE_INSTANCE_ID") or None,
                     help="a stable name for this process, unique among the mirror's processes, e.g. a StatefulSet "
                          "pod name (default: MIRROR_CORE_INSTANCE_ID, else derived: the host's name and the lowest "
                          "instance slot free on it): it becomes the group.instance.id of its group memberships, so "
                          "a restart within session.timeout.ms resumes its partitions at once instead of waiting for "
                          "the old member to time out")
    run.set_defaults(func=cmd_run)

    st = sub.add_parser("status", help="per flow and partition: source end, replicated position, lag")
    st.add_argument("--config", required=True)
    st.add_argument("--flow", action="append", help="only this flow (repeatable), e.g. 'dc1->dc2'; default: every "
                    "configured flow, standby flows included")
    add_state_db_argument(st, "also show each flow's desired state (who set it, why), what the live instances "
                              "apply and the command that changes it; the default store only if it exists")
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

    for what, help_, func in (("topics", "topic-config sync: partitions, configs and read-only ACLs", cmd_topics),
                              ("schemas", "schema sync: subjects, versions and compatibility onto the target's "
                                          "registry", cmd_schemas)):
        syncs = sub.add_parser(what, help=help_)
        syncs.add_argument("action", choices=("sync",))
        syncs.add_argument("--config", required=True)
        syncs.add_argument("--flow", action="append", help="only this flow (repeatable)")
        syncs.add_argument("--dry-run", action="store_true", help="report the differences, change nothing")
        add_state_db_argument(syncs, "state store URL where the run is recorded", aliases=("--db-url",))
        syncs.add_argument("--no-record", action="store_true", help="do not record the run in the state store")
        syncs.add_argument("--json", action="store_true")
        syncs.set_defaults(func=func)

    cl = sub.add_parser("clusters", help="active-cluster registry: which cluster an application alias uses")
    cl.add_argument("action", choices=("active", "history"),
                    help="active: print the bootstrap servers the alias should use; history: who switched it, "
                         "when, why and in which run")
    cl.add_argument("alias", nargs="?", help="application alias")
    cl.add_argument("--config", default=None, help="mm2.properties (default: $MIRROR_CORE_CONFIG)")
    add_state_db_argument(cl, "state store URL holding the registry", aliases=("--db-url",))
    cl.add_argument("--default", default=None, help="cluster alias to use while the alias is not registered")
    cl.add_argument("--limit", type=int, default=50)
    cl.add_argument("--json", action="store_true")
    cl.set_defaults(func=cmd_clusters)

    add_partitions_parser(sub)
    add_control_parser(sub)

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
