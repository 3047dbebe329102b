"""Operators' runtime controls applied by running mirrors (replication/controls.py), through the CLI and the state
store: a paused topic stops moving while the others go on and resumes where it stopped, with no restart; a
bandwidth limit, shared by two processes, holds the copy near it (the rate is printed, not timed)."""

from __future__ import annotations

import subprocess
import sys
import time

from tests.integration.conftest import flow_lines
from tests.kafka_harness import (
    REPO,
    create_topic,
    end_offsets,
    metric,
    mirror_env,
    produce_sequence,
    read_all,
    wait_until,
)


def control(db: str, *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([sys.executable, "-m", "mirror_core", "control", *args, "--state-db", db, "--by", "carol"],
                          capture_output=True, text=True, timeout=60, cwd=REPO, env=mirror_env())
    assert done.returncode == 0, done.stderr
    return done


def copied(bootstrap: str, topic: str) -> int:
    return sum(end_offsets(bootstrap, topic).values())


def test_a_paused_topic_stops_while_the_others_go_on_and_resumes_where_it_stopped(
        dc1, dc2, name, start_mirror, tmp_path):  # type: ignore[no-untyped-def]
    held, other = f"{name}.held", f"{name}.other"
    create_topic(dc1, held, 2)
    create_topic(dc1, other, 2)
    db = f"sqlite:///{tmp_path / 'state.db'}"
    m = start_mirror(flow_lines(name), args=["--state-db", db])
    produce_sequence(dc1, held, 2, 100)
    produce_sequence(dc1, other, 2, 100)
    wait_until(lambda: copied(dc2, f"dc1.{held}") == 100 and copied(dc2, f"dc1.{other}") == 100, 60,
               what="both copied")
    pid = m.proc.pid

    control(db, "pause", "--flow", "dc1->dc2", "--topic", held, "--reason", "backfill elsewhere")
    wait_until(lambda: all((p["paused"] or "").startswith("paused by carol") for p in m.partitions()
                           if p["topic"] == held) and len([p for p in m.partitions() if p["topic"] == held]) == 2,
               30, what="the topic paused for the operator")
    produce_sequence(dc1, held, 2, 50, start=100)
    produce_sequence(dc1, other, 2, 50, start=100)
    wait_until(lambda: copied(dc2, f"dc1.{other}") == 150, 60, what="the other topic goes on")
    time.sleep(2)  # (records of the paused topic would have landed by now)
    assert copied(dc2, f"dc1.{held}") == 100

    control(db, "resume", "--flow", "dc1->dc2", "--topic", held, "--reason", "done")
    wait_until(lambda: copied(dc2, f"dc1.{held}") == 150, 60, what="the paused topic resumed")
    got = [(r.partition, r.value) for r in read_all(dc2, f"dc1.{held}")]
    assert got == [(r.partition, r.value) for r in read_all(dc1, held)]  # from where it stopped: each once
    assert m.proc.pid == pid and m.alive()


def test_a_bandwidth_limit_holds_the_copy_across_two_processes(dc1, dc2, name, start_mirror, tmp_path):  # type: ignore[no-untyped-def]
    topic = f"{name}.limited"
    create_topic(dc1, topic, 4)
    db = f"sqlite:///{tmp_path / 'state.db'}"
    limit = 100_000  # bytes per second: about 1,000 records of 100 B
    control(db, "limit", "--flow", "dc1->dc2", "--topic", topic, "--bytes-per-second", str(limit),
            "--reason", "share the link")
    lines = flow_lines(name)
    first = start_mirror(lines, args=["--state-db", db])
    second = start_mirror(lines, config=first.config, args=["--state-db", db], name="second")
    wait_until(lambda: {p["topic"] for p in first.partitions()} == {topic} == {p["topic"]
               for p in second.partitions()}, 60, what="both processes own partitions of the topic")
    produce_sequence(dc1, topic, 4, 20_000, value_size=100)  # 2 MB: 20 s at the limit
    wait_until(lambda: copied(dc2, f"dc1.{topic}") > 2_000, 60, what="copying started")
    start, t0 = copied(dc2, f"dc1.{topic}"), time.monotonic()
    time.sleep(10)
    rate = (copied(dc2, f"dc1.{topic}") - start) * 100 / (time.monotonic() - t0)
    print(f"limit {limit} B/s, observed {rate:,.0f} B/s ({rate / limit:.2f}x) over two processes")
    assert copied(dc2, f"dc1.{topic}") < 20_000, "the whole backlog copied: no limit held"
    throttled = sum(metric(m, "mirror_throttled_seconds_total", topic=topic) or 0 for m in (first, second))
    assert throttled > 0
    control(db, "unlimit", "--flow", "dc1->dc2", "--topic", topic, "--reason", "done")
    wait_until(lambda: copied(dc2, f"dc1.{topic}") == 20_000, 90, what="the rest copied once unlimited")
