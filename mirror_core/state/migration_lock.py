"""One schema migration at a time.

Every process that opens the state store brings its schema up to date first (mirrors, DAG tasks, the API
server's status page, the CLI), so a fresh store sees many at once. Unlocked, two of them create the same
table and one fails (``table ... already exists``: a mirror that fails there exits). Each migration runs under
a lock instead — on PostgreSQL a transaction-scoped advisory lock taken on the connection that migrates
(released with its commit), on SQLite an exclusive ``flock`` on ``<database>.migrate-lock`` next to the file —
so the first process migrates and the others, once they hold the lock, find the schema at head.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Connection, text
from sqlalchemy.engine import URL
from sqlalchemy.exc import OperationalError

from mirror_core.state.errors import StateStoreError

#: the PostgreSQL advisory lock key of mirror_core's migrations (64-bit: "mirror" and a version)
PG_LOCK_KEY = 0x6D6972726F720001
LOCK_TIMEOUT_S = 300.0
#: a wait for the lock longer than this is said once (a process stuck migrating holds everyone up)
LOCK_WAIT_SAID_S = 10.0

log = logging.getLogger(__name__)


def _sqlite_file(url: URL) -> str | None:
    """The database file of a SQLite URL (None: not SQLite, or in memory)."""
    if url.get_backend_name() != "sqlite" or not url.database or url.database == ":memory:":
        return None
    return url.database


@contextmanager
def file_lock(url: URL, timeout_s: float = LOCK_TIMEOUT_S) -> Iterator[None]:
    """Hold the migration lock of a SQLite database file (nothing to hold for another database)."""
    database = _sqlite_file(url)
    if database is None:
        yield
        return
    path = f"{database}.migrate-lock"
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as exc:
        raise StateStoreError(f"cannot open the migration lock {path}: {exc.strerror}; let this user read and "
                              "write it (and its directory), or remove it when no process is starting") from None
    locked = False
    try:
        start = time.monotonic()
        deadline, said = start + timeout_s, False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                locked = True
                break
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    raise StateStoreError(f"cannot lock the migration lock {path}: {exc.strerror}") from None
                if not said and time.monotonic() - start > LOCK_WAIT_SAID_S:
                    said = True
                    log.warning("waiting for the migration lock %s, held by another process for %.0fs (lsof the "
                                "file to see which)", path, LOCK_WAIT_SAID_S)
                if time.monotonic() > deadline:
                    raise StateStoreError(f"the migration lock {path} has been held by another process for over "
                                          f"{timeout_s:.0f}s: look for a process stuck migrating this store "
                                          "(lsof the file) and stop it") from None
                time.sleep(0.05)
        yield
    finally:
        # Unlocked explicitly: a process forked meanwhile (Airflow's task runners fork without exec) shares the
        # descriptor, and closing ours alone would leave the lock held for as long as that child lives.
        if locked:
            fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def advisory_lock(connection: Connection, timeout_s: float = LOCK_TIMEOUT_S) -> None:
    """Take the migration lock on the PostgreSQL connection that migrates, for the rest of its transaction
    (nothing to take on another database)."""
    if connection.dialect.name != "postgresql":
        return
    connection.execute(text(f"SET LOCAL lock_timeout = '{int(timeout_s * 1000)}ms'"))
    try:
        connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": PG_LOCK_KEY})
    except OperationalError as exc:
        if "lock timeout" not in str(exc.orig):
            raise
        raise StateStoreError(f"the migration lock (pg_advisory_xact_lock({PG_LOCK_KEY})) has been held by another "
                              f"session for over {timeout_s:.0f}s: look for a session stuck migrating this store in "
                              "pg_locks / pg_stat_activity and end it") from None
    connection.execute(text("SET LOCAL lock_timeout = 0"))
