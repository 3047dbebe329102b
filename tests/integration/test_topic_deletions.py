"""Deletion propagation (sync.topic.deletions.*): a remote topic deleted after its source, past the grace period,
only when the mirror wrote every record in it."""

from __future__ import annotations

import json
import time
from pathlib import Path

from mirror_core.state.store import StateStore
from tests.integration.conftest import flow_lines
from tests.integration.test_topic_sync import run_sync
from tests.kafka_harness import (
    create_topic,
    delete_topic,
    produce_sequence,
    producer,
    read_all,
    topics,
    wait_until,
    write_config,
)


def test_a_deleted_source_topic_takes_its_complete_remote_copy_with_it(dc1, dc2, name, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                                        start_mirror) -> None:
    clean, foreign = f"{name}.clean", f"{name}.foreign"
    r_clean, r_foreign = f"dc1.{clean}", f"dc1.{foreign}"
    for t in (clean, foreign):
        create_topic(dc1, t, 2)
        produce_sequence(dc1, t, 2, 10)
    m = start_mirror(flow_lines(name))
    for r in (r_clean, r_foreign):
        wait_until(lambda r=r: len(read_all(dc2, r, timeout=5)) == 10, 60, what=f"{r} copied")
    assert m.stop() == 0  # progress committed
    p = producer(dc2)
    p.produce(r_foreign, b"written on the target by an application", partition=0)
    assert p.flush(10) == 0
    for t in (clean, foreign):
        delete_topic(dc1, t)

    lines = ["dc1->dc2.enabled = true", f"dc1->dc2.topics = {name}.*"]
    db = f"sqlite:///{tmp_path / 'state.db'}"
    off = write_config(tmp_path / "off.properties", {"dc1": dc1, "dc2": dc2}, lines)
    on = write_config(tmp_path / "on.properties", {"dc1": dc1, "dc2": dc2},
                      [*lines, "sync.topic.deletions.enabled = true", "sync.topic.deletions.grace.seconds = 3"])

    quiet = run_sync(off, db)  # off by default: nothing proposed, nothing deleted
    assert quiet.returncode == 0 and json.loads(quiet.stdout)[0]["changes"] == [], quiet.stdout
    pending = run_sync(on, db)
    assert pending.returncode == 0, pending.stderr
    assert {(c["topic"], c["kind"]) for c in json.loads(pending.stdout)[0]["changes"]} == {
        (r_clean, "delete-pending"), (r_foreign, "delete-pending")}
    assert {r_clean, r_foreign} <= topics(dc2)  # within the grace period: kept
    time.sleep(3)

    dry = run_sync(on, db, "--dry-run")
    assert dry.returncode == 1  # the foreign record: refused, loudly
    assert [(c["topic"], c["kind"]) for c in json.loads(dry.stdout)[0]["changes"]] == [(r_clean, "deleted")]
    assert {r_clean, r_foreign} <= topics(dc2)  # a dry run deletes nothing

    applied = run_sync(on, db)
    assert applied.returncode == 1 and r_foreign in applied.stderr and "did not write every record" in applied.stderr
    assert r_clean not in topics(dc2) and r_foreign in topics(dc2)
    rows = {(d.topic, d.kind, d.action) for d in StateStore(db).recent_drift("dc1->dc2", limit=100)}
    assert {(r_clean, "delete-pending", "applied"), (r_clean, "deleted", "proposed"), (r_clean, "deleted", "applied"),
            (r_foreign, "delete-refused", "refused")} <= rows
    delete_topic(dc2, r_foreign)
