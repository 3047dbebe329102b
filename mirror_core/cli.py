"""The ``mirror-core`` command line."""

from __future__ import annotations

import argparse
import faulthandler
import json
import logging
import signal
import sys
import time
from collections.abc import Sequence

from mirror_core.config.errors import ConfigError
from mirror_core.config.loader import load_config
from mirror_core.config.model import MirrorConfig

EXIT_CONFIG = 2
log = logging.getLogger("mirror_core")


def _setup_logging(level: str) -> None:
    # `kill -USR1 <pid>` dumps every thread's stack: the first tool to reach for when a mirror hangs.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    logging.basicConfig(level=getattr(logging, level.upper(), logging.INFO),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    logging.getLogger("librdkafka").setLevel(logging.WARNING)


def _load(path: str) -> MirrorConfig:
    config = load_config(path)
    for w in config.warnings:
        log.warning("config: %s", w)
    return config


def cmd_run(args: argparse.Namespace) -> int:
    from mirror_core.service import Service

    config = _load(args.config)
    log.info("flows: %s", ", ".join(f.name for f in config.flows))
    return Service(config, metrics_port=args.metrics_port, metrics_host=args.metrics_host).run_forever()


def cmd_status(args: argparse.Namespace) -> int:
    from rich.console import Console

    from mirror_core.status import collect_status, status_json, status_table

    config = _load(args.config)
    statuses = collect_status(config, args.flow)
    if args.json:
        print(json.dumps(status_json(statuses), indent=2))
    else:
        Console(width=None if sys.stdout.isatty() else 160).print(status_table(statuses))
    return 0 if all(s.reachable for s in statuses) else 1


def cmd_check(args: argparse.Namespace) -> int:
    config = _load(args.config)
    for f in config.flows:
        print(f"flow {f.name}: policy {f.policy.name}, topics [{f.topics.include}] "
              f"excluding [{f.topics.exclude}]")
    print("configuration OK")
    return 0


def cmd_dev(args: argparse.Namespace) -> int:
    from mirror_core.devcluster.dev_env import dev_clusters
    from mirror_core.devcluster.kafka_dist import ensure_kafka

    if args.action == "fetch":
        print(f"Kafka jars: {ensure_kafka()}")
        return 0
    clusters = dev_clusters(tuple(args.clusters))
    for c in clusters:
        if args.action == "up":
            started = time.monotonic()
            was_running = c.is_running()
            c.start()
            note = "already running" if was_running else f"started in {time.monotonic() - started:.1f}s"
            print(f"{c.name}: bootstrap {c.bootstrap} ({note}; logs {c.log_file})")
        elif args.action == "down":
            c.stop()
            print(f"{c.name}: stopped")
        else:
            state = "running" if c.is_running() else "stopped"
            print(f"{c.name}: {state}, bootstrap {c.bootstrap}, data {c.base_dir}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mirror-core", description="Cross-cluster Kafka replication")
    parser.add_argument("--log-level", default="INFO")
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="replicate continuously (foreground; SIGTERM/SIGINT stop gracefully)")
    run.add_argument("--config", required=True, help="mm2.properties file")
    run.add_argument("--metrics-port", type=int, default=None, help="serve /metrics, /healthz, /status")
    run.add_argument("--metrics-host", default="127.0.0.1")
    run.set_defaults(func=cmd_run)

    st = sub.add_parser("status", help="per flow and partition: source end, replicated position, lag")
    st.add_argument("--config", required=True)
    st.add_argument("--flow", action="append", help="only this flow (repeatable), e.g. dc1->dc2")
    st.add_argument("--json", action="store_true")
    st.set_defaults(func=cmd_status)

    chk = sub.add_parser("check", help="validate a configuration file and exit")
    chk.add_argument("--config", required=True)
    chk.set_defaults(func=cmd_check)

    dev = sub.add_parser("dev", help="local single-node KRaft clusters for development")
    dev.add_argument("action", choices=("up", "down", "status", "fetch"))
    dev.add_argument("--clusters", nargs="+", default=["dc1", "dc2"])
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


if __name__ == "__main__":
    sys.exit(main())
