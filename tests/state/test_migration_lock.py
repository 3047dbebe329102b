"""Migrations under a lock: 8 processes started at once on a fresh store all come up, 10 rounds, on SQLite
(a file lock) and on a real PostgreSQL server (an advisory lock)."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, inspect, text

from mirror_core.state.errors import StateStoreError
from mirror_core.state.store import StateStore
from tests.state.test_store import postgres_url  # noqa: F401 - a fixture: one PostgreSQL server per session

REPO = Path(__file__).resolve().parents[2]
PROCESSES, ROUNDS = 8, 10
# Each process imports everything first, says it is ready, then waits for the go: the 8 migrate at once.
CHILD = """
import sys, time
from pathlib import Path
from mirror_core.state.store import StateStore
store = StateStore(sys.argv[1])
barrier = Path(sys.argv[2])
(barrier / sys.argv[3]).touch()
while not (barrier / "go").exists():
    time.sleep(0.002)
store.migrate()
"""


def head() -> str:
    from alembic.script import ScriptDirectory

    from mirror_core.state.store import alembic_config

    return str(ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head())


def new_pg_database(server: str) -> str:
    name = f"m{uuid.uuid4().hex[:12]}"
    admin = create_engine(server, isolation_level="AUTOCOMMIT")
    with admin.connect() as c:
        c.execute(text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    return server.rsplit("/", 1)[0] + f"/{name}"


@pytest.fixture(params=["sqlite", "postgresql"])
def fresh_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[object]:
    """A function giving a new empty database's URL for each round."""
    if request.param == "sqlite":
        yield lambda i: f"sqlite:///{tmp_path / f'round{i}' / 'state.db'}"
    else:
        server = request.getfixturevalue("postgres_url")
        yield lambda i: new_pg_database(server)


def test_processes_started_at_once_all_migrate(fresh_url, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    started = time.monotonic()
    for i in range(ROUNDS):
        url = fresh_url(i)
        barrier = tmp_path / f"barrier{i}"
        barrier.mkdir()
        procs = [subprocess.Popen([sys.executable, "-c", CHILD, url, str(barrier), f"ready{k}"], cwd=REPO,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                 for k in range(PROCESSES)]
        deadline = time.monotonic() + 120
        while len(list(barrier.glob("ready*"))) < PROCESSES:
            assert time.monotonic() < deadline and all(p.poll() is None for p in procs), \
                [p.communicate()[0][-2000:] for p in procs if p.poll() is not None]
            time.sleep(0.01)
        (barrier / "go").touch()
        outputs = [p.communicate(timeout=300)[0] for p in procs]
        failed = [(p.returncode, out[-1500:]) for p, out in zip(procs, outputs, strict=True) if p.returncode]
        assert not failed, f"round {i}: {len(failed)} of {PROCESSES} failed: {failed[0]}"
        engine = create_engine(url)
        with engine.connect() as c:
            assert c.execute(text("SELECT version_num FROM alembic_version")).scalars().all() == [head()]
        assert {"failovers", "bound_plans", "flow_instances"} <= set(inspect(engine).get_table_names())
        engine.dispose()
    print(f"{ROUNDS} rounds of {PROCESSES} processes: {time.monotonic() - started:.1f}s")


def test_an_unusable_lock_file_is_one_line(tmp_path: Path) -> None:
    db = tmp_path / "state.db"
    Path(f"{db}.migrate-lock").mkdir()  # something that cannot be the lock file
    with pytest.raises(StateStoreError) as err:
        StateStore(f"sqlite:///{db}").migrate()
    line = str(err.value)
    assert line.startswith(f"cannot open the migration lock {db}.migrate-lock: Is a directory; ") and "\n" not in line
    assert not db.exists() or "bound_plans" not in inspect(create_engine(f"sqlite:///{db}")).get_table_names()


def test_a_process_forked_while_the_lock_is_held_does_not_keep_it(tmp_path: Path) -> None:
    """Airflow's task runners fork without exec: a child forked while a migration holds the lock shares its
    descriptor. The lock is let go when the migration ends, not when the child exits."""
    import os

    from sqlalchemy.engine import make_url

    from mirror_core.state.migration_lock import file_lock

    url = make_url(f"sqlite:///{tmp_path / 's.db'}")
    with file_lock(url):
        child = os.fork()
        if child == 0:  # pragma: no cover - the child only lives on, holding the inherited descriptor
            time.sleep(20)
            os._exit(0)
    try:
        other = subprocess.run([sys.executable, "-c", (
            "import sys\nfrom sqlalchemy.engine import make_url\nfrom mirror_core.state.migration_lock import "
            "file_lock\nwith file_lock(make_url(sys.argv[1]), 5):\n    print('locked')"), str(url)],
            capture_output=True, text=True, timeout=60, cwd=REPO)
        assert other.stdout.strip() == "locked", other.stderr[-500:]
        assert os.waitpid(child, os.WNOHANG) == (0, 0), "the child still lives (the precondition)"
    finally:
        os.kill(child, 9)
        os.waitpid(child, 0)
