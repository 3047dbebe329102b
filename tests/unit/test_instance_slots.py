"""cli/instance.py: a derived instance id is this host's and the lowest free slot's; a process that dies frees it,
two live processes never share one."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from mirror_core.cli import instance


def test_two_holders_on_one_host_get_different_ids_and_a_freed_slot_is_taken_again(tmp_path: Path) -> None:
    try:
        first = instance.derived_instance_id(tmp_path, "db-host.example")
        second = instance.derived_instance_id(tmp_path, "db-host.example")
        assert (first, second) == ("db-host.example-0", "db-host.example-1")
        instance.release_all()
        assert instance.derived_instance_id(tmp_path, "db-host.example") == "db-host.example-0"
    finally:
        instance.release_all()


def test_a_process_killed_frees_its_slot_for_its_restart(tmp_path: Path) -> None:
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from pathlib import Path; from mirror_core.cli import instance; "
        f"print(instance.derived_instance_id(Path({str(tmp_path)!r}), 'h'), flush=True); time.sleep(60)")],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "h-0"
        assert instance.derived_instance_id(tmp_path, "h") == "h-1"  # held by the live one
        instance.release_all()
        holder.kill()  # (SIGKILL: nothing of the process runs)
        holder.wait(10)
        assert instance.derived_instance_id(tmp_path, "h") == "h-0"
    finally:
        instance.release_all()
        holder.kill()


def test_a_host_name_becomes_a_usable_id() -> None:
    assert instance.host_name("ip-10-0-0-1.ec2 internal") == "ip-10-0-0-1.ec2-internal"
    assert instance.host_name("///") == "host"
    assert len(instance.host_name("x" * 500)) == 180
