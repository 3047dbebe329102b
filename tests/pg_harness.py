"""A throwaway PostgreSQL server for the test session (Debian's postgresql package)."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

from mirror_core.devcluster.local_cluster import free_port


def pg_bin(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return candidates[-1] if candidates else None


def _as_postgres(cmd: list[str]) -> list[str]:
    # PostgreSQL refuses to run as root; CI runs as root, so drop to the package's `postgres` user.
    return ["runuser", "-u", "postgres", "--", *cmd] if os.geteuid() == 0 else cmd


@contextmanager
def postgres_server() -> Iterator[str]:
    initdb, pg_ctl, psql = pg_bin("initdb"), pg_bin("pg_ctl"), pg_bin("psql")
    if not (initdb and pg_ctl and psql):
        raise RuntimeError("PostgreSQL server not installed: `make install` runs scripts/ensure-test-servers.sh")
    root = tempfile.mkdtemp(prefix="mirror-pg-")
    if os.geteuid() == 0:
        pw = pwd.getpwnam("postgres")
        os.chown(root, pw.pw_uid, pw.pw_gid)
    data, port = os.path.join(root, "data"), free_port()
    subprocess.run(_as_postgres([initdb, "-D", data, "--auth=trust", "-U", "postgres"]), check=True,
                   capture_output=True)
    subprocess.run(_as_postgres([pg_ctl, "-D", data, "-l", os.path.join(root, "server.log"), "-w", "-o",
                                 f"-p {port} -k {root} -c listen_addresses=127.0.0.1", "start"]),
                   check=True, capture_output=True)
    try:
        subprocess.run([psql, "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", "-c",
                        "CREATE DATABASE mirror"], check=True, capture_output=True)
        yield f"postgresql+psycopg2://postgres@127.0.0.1:{port}/mirror"
    finally:
        subprocess.run(_as_postgres([pg_ctl, "-D", data, "-m", "fast", "stop"]), capture_output=True)
        shutil.rmtree(root, ignore_errors=True)
