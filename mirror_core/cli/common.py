"""What the ``mirror-core`` commands share: loading the configuration (its warnings logged), naming
flows, and which state store a command uses."""

from __future__ import annotations

import argparse
import logging
import os
from pathlib import Path
from typing import Any

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


#: What every ``--state-db`` says of its default (``run`` adds that it has no control plane without one).
STATE_DB_DEFAULT = ("default: MIRROR_CORE_DB_URL, else the local SQLite store .state/mirror-core.db, the one "
                    "`make demo` and `make airflow` use")


def default_state_db(base: Path | None = None) -> str:
    """The state store a command uses when ``--state-db`` names none: ``MIRROR_CORE_DB_URL``, else the SQLite
    file ``.state/mirror-core.db`` under ``base`` (the working directory: the repository for ``make demo``,
    ``make airflow`` and the commands run from it). The same URL :class:`~mirror_core.state.store.StateStore`
    opens when given none."""
    return os.environ.get("MIRROR_CORE_DB_URL") or f"sqlite:///{(base or Path.cwd()) / '.state' / 'mirror-core.db'}"


def existing_state_db(url: str | None) -> str | None:
    """``url`` (else the default store) if there is a store to read there, None if not: a SQLite file that does
    not exist is no store yet (reading one must not create it); a server URL is taken as given."""
    url = url or default_state_db()
    if url.startswith("sqlite:///") and not Path(url.removeprefix("sqlite:///")).exists():
        return None
    return url


def add_state_db_argument(parser: Any, purpose: str, aliases: tuple[str, ...] = ()) -> None:
    """``--state-db URL`` on a subcommand (``aliases``: older spellings, kept working, not shown); ``None`` when
    not given: the command resolves the default (:func:`default_state_db`) itself."""
    parser.add_argument("--state-db", dest="state_db", default=None, help=f"{purpose} ({STATE_DB_DEFAULT})")
    for alias in aliases:
        parser.add_argument(alias, dest="state_db", default=None, help=argparse.SUPPRESS)
