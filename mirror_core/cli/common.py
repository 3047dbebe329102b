"""What the ``mirror-core`` commands share: loading the configuration (its warnings logged) and
naming flows."""

from __future__ import annotations

import argparse
import logging

from mirror_core.config.errors import ConfigError
from mirror_core.config.loader import load_config
from mirror_core.config.model import MirrorConfig

EXIT_CONFIG = 2
log = logging.getLogger("mirror_core")


def load_logged(path: str) -> MirrorConfig:
    config = load_config(path)
    for w in config.warnings:
        log.warning("config: %s", w)
    return config


def flow_names(config: MirrorConfig, names: list[str] | None) -> list[str] | None:
    """The flows named on the command line (standby ones too), or None for all; an unknown name is a
    configuration error naming the flows there are (exit 2)."""
    try:
        return [config.flow(name).name for name in names] if names else None
    except KeyError as exc:
        raise ConfigError(exc.args[0]) from None


def flow_name(args: argparse.Namespace) -> str:
    return f"{args.source}->{args.target}"
