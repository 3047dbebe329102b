"""A flow's topic filter set in the state store (``mirror-core control filter``) over the config file's, applied by the
running mirror without a restart: an added topic is copied, a removed one stops with its progress kept and goes on
from it when added again; a pattern that does not compile is one line with nothing stored; `mirror-core status`
shows desired vs applied."""

from __future__ import annotations

import json
import subprocess
import sys
from re import escape

from mirror_core.state.store import StateStore
from tests.integration.conftest import flow_lines
from tests.kafka_harness import (
    REPO,
    create_topic,
    end_offsets,
    mirror_env,
    produce_sequence,
    read_all,
    topics,
    wait_until,
)

FLOW = "dc1->dc2"


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mirror_core", *args], capture_output=True, text=True, timeout=120,
                          cwd=REPO, env=mirror_env())


def records(bootstrap: str, topic: str) -> list[tuple[int, bytes | None, bytes | None]]:
    return [(r.partition, r.key, r.value) for r in read_all(bootstrap, topic)]


def test_a_topic_added_and_removed_through_the_store_without_a_restart(dc1, dc2, name, start_mirror,
                                                                        tmp_path):  # type: ignore[no-untyped-def]
    a, b = f"{name}.a", f"{name}.b"
    create_topic(dc1, a, 2)
    create_topic(dc1, b, 2)
    produce_sequence(dc1, a, 2, 100)
    produce_sequence(dc1, b, 2, 60)
    db = f"sqlite:///{tmp_path / 'state.db'}"
    lines = flow_lines(name)
    lines[1] = f"{FLOW}.topics = {escape(a)}"  # the file's filter: a only
    m = start_mirror(lines, args=["--state-db", db])
    store = StateStore(db)
    wait_until(lambda: end_offsets(dc2, f"dc1.{a}") == end_offsets(dc1, a), 60, what=f"{a} copied")
    assert f"dc1.{b}" not in topics(dc2)  # precondition: the file leaves b out
    pid = m.proc.pid

    # A pattern that does not compile: one line, nothing stored, the mirror unchanged.
    bad = cli("control", "filter", "--flow", FLOW, "--topics", f"{escape(a)}, (", "--reason", "typo",
              "--state-db", db, "--by", "alice")
    assert bad.returncode != 0 and bad.stderr.count("\n") == 1, bad.stderr
    assert "filter refused on dc1->dc2: topics" in bad.stderr and bad.stderr.endswith("nothing was recorded\n")
    assert store.active_flow_filters() == {} and store.flow_filter_history() == []

    # Widened through the store: b is copied, no restart.
    ok = cli("control", "filter", "--flow", FLOW, "--topics", f"{escape(a)}, {escape(b)}", "--reason", "add b",
             "--state-db", db, "--by", "alice", "--config", str(m.config))
    assert ok.returncode == 0, ok.stderr
    wait_until(lambda: f"dc1.{b}" in topics(dc2) and end_offsets(dc2, f"dc1.{b}") == end_offsets(dc1, b), 60,
               what=f"{b} copied after the store widened the filter")
    first = store.active_flow_filters()[FLOW]
    assert first.overrides == {"topics": f"{escape(a)}, {escape(b)}"} and first.set_by == "alice"
    wait_until(lambda: [(i.filters or {}).get("filter_id") for i in store.flow_instances(FLOW)] == [first.id], 30,
               what="the instance reports the store's filter applied")
    status = cli("status", "--config", str(m.config), "--state-db", db, "--flow", FLOW, "--json")
    detail = json.loads(status.stdout)["flows"][0]["control_detail"]
    assert f"(state store id {first.id}, by alice" in detail["filters"], detail
    assert f"=id {first.id} (topics '{escape(a)}, {escape(b)}'" in detail["filters"], detail  # applied

    # Another operator's change in between is not overwritten (compare-and-set on the id they saw).
    stale = cli("control", "filter", "--flow", FLOW, "--topics", escape(a), "--reason", "drop b",
                "--expect-id", "0", "--state-db", db, "--by", "bob")
    assert stale.returncode != 0 and "another operator changed its filters at the same moment" in stale.stderr
    assert stale.stderr.count("\n") == 1 and store.active_flow_filters()[FLOW].id == first.id

    # Narrowed: b stops (its progress kept) while a goes on.
    store.set_flow_filter(FLOW, "bob", "drop b", {"topics": escape(a)}, expected=first.id)
    wait_until(lambda: f"topic {b} no longer matches the flow's filters" in m.log(), 60, what=f"{b} dropped")
    produce_sequence(dc1, b, 2, 20, start=60)
    produce_sequence(dc1, a, 2, 20, start=100)
    wait_until(lambda: end_offsets(dc2, f"dc1.{a}") == end_offsets(dc1, a), 60, what=f"{a} goes on")
    assert sum(end_offsets(dc2, f"dc1.{b}").values()) == 60

    # Cleared: the file's filter again (still a only); then b added once more, from its kept progress.
    store.clear_flow_filter(FLOW, "bob", "back to the file")
    store.set_flow_filter(FLOW, "alice", "b again", {"topics": f"{escape(a)}, {escape(b)}"})
    wait_until(lambda: end_offsets(dc2, f"dc1.{b}") == end_offsets(dc1, b), 60, what=f"{b} resumed")
    assert records(dc2, f"dc1.{b}") == records(dc1, b) and len(records(dc1, b)) == 80  # every record once
    assert records(dc2, f"dc1.{a}") == records(dc1, a)
    assert [h.set_by for h in store.flow_filter_history(FLOW)] == ["alice", "bob", "alice"]

    # The file changes meanwhile (its topics.exclude): taken, and the store's topics stay on top of it.
    m.config.write_text(m.config.read_text() + f"{FLOW}.topics.exclude = {escape(name)}\\.none\n")
    wait_until(lambda: "still overrides topics" in m.log(), 30, what="the file reloaded under the store's filter")
    produce_sequence(dc1, b, 2, 10, start=80)
    wait_until(lambda: end_offsets(dc2, f"dc1.{b}") == end_offsets(dc1, b), 60, what=f"{b} still copied")
    assert records(dc2, f"dc1.{b}") == records(dc1, b)
    assert m.proc.pid == pid and m.alive()
