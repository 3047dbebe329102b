"""This process's stable instance id when none is given (``--instance-id`` / MIRROR_CORE_INSTANCE_ID): the host's
name and the lowest instance slot free on it, ``<host>-<slot>``.

A slot is a lock file held (``flock``) for the life of the process. The kernel lets go of it when the process
dies however it dies, so a process restarted after a SIGKILL takes the same slot, hence the same id, and its
static group memberships give it its partitions back at once. Two processes on one host never hold one slot, so
they never share an id (which would fence them in turn). The slots live in /dev/shm, which systemd's PrivateTmp
does not separate; containers each have their own, and their own host name. Hosts that share a name (containers on
the host network) must give each process its own --instance-id.
"""

from __future__ import annotations

import fcntl
import os
import re
import socket
import tempfile
from pathlib import Path

from mirror_core.errors import MirrorError

#: more mirror processes than this on one host: say so rather than guess
MAX_SLOTS = 256
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
#: the open lock file of the slot this process holds (never closed: the lock lasts as long as the process)
_held: list[int] = []


def slot_dir() -> Path:
    """Where the slots' lock files are: per user, in /dev/shm where there is one, else the temporary directory."""
    base = Path("/dev/shm") if os.access("/dev/shm", os.W_OK) else Path(tempfile.gettempdir())
    return base / f"mirror-core-{os.getuid()}" / "instance-slots"


def host_name(raw: str | None = None) -> str:
    """The host's name as an id may hold it (letters, digits, '.', '_', '-'; at most 180 characters)."""
    name = _UNSAFE.sub("-", (raw or socket.gethostname()).strip()).strip("-") or "host"
    return name[:180]


def derived_instance_id(directory: Path | None = None, host: str | None = None) -> str:
    """``<host>-<slot>``, the lowest slot this process can hold (kept until it exits)."""
    directory = directory or slot_dir()
    try:
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as exc:
        raise MirrorError(f"cannot make the instance slots' directory {directory} ({exc}): give this process its own "
                          "--instance-id (or MIRROR_CORE_INSTANCE_ID)") from None
    for slot in range(MAX_SLOTS):
        fd = os.open(directory / f"slot-{slot}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        _held.append(fd)
        return f"{host_name(host)}-{slot}"
    raise MirrorError(f"every one of the {MAX_SLOTS} instance slots in {directory} is held by a running process: give "
                      "this process its own --instance-id (or MIRROR_CORE_INSTANCE_ID)")


def release_all() -> None:
    """Let go of the slots held (tests; a process lets go when it exits)."""
    while _held:
        os.close(_held.pop())
