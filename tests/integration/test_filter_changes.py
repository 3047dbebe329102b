"""Filter changes in the config take effect on restart without losing (or repeating) position."""

from __future__ import annotations

from re import escape

from tests.integration.conftest import flow_lines
from tests.kafka_harness import create_topic, end_offsets, produce_sequence, read_all, topics, wait_until


def with_topics(name: str, pattern: str) -> list[str]:
    lines = flow_lines(name)
    lines[1] = f"dc1->dc2.topics = {pattern}"
    assert lines[1] != flow_lines(name)[1] and lines[1].startswith("dc1->dc2.topics = ")
    return lines


def records(bootstrap: str, topic: str) -> list[tuple[int, bytes | None, bytes | None]]:
    return [(r.partition, r.key, r.value) for r in read_all(bootstrap, topic)]


def test_filter_change_on_restart_keeps_position(dc1, dc2, name, start_mirror):
    a, b = f"{name}.a", f"{name}.b"
    create_topic(dc1, a, 2)
    create_topic(dc1, b, 2)
    produce_sequence(dc1, a, 2, 300)
    produce_sequence(dc1, b, 2, 100)

    def settled(m, topic: str) -> bool:  # type: ignore[no-untyped-def]
        """The instance owns both partitions of ``topic`` and has committed them to the end."""
        parts = [p for p in m.partitions() if p["topic"] == topic]
        return len(parts) == 2 and all(p["lag"] == 0 for p in parts)

    m = start_mirror(with_topics(name, escape(a)))
    wait_until(lambda: settled(m, a), 60, what=f"{a} replicated and committed")
    assert end_offsets(dc2, f"dc1.{a}") == end_offsets(dc1, a)
    assert f"dc1.{b}" not in topics(dc2)  # not in the filter yet
    assert m.stop() == 0, m.log()[-3000:]

    produce_sequence(dc1, a, 2, 50, start=300)  # written while no mirror runs
    m = start_mirror(with_topics(name, f"{escape(a)}, {escape(b)}"))
    wait_until(lambda: settled(m, a) and settled(m, b), 90, what=f"{b} picked up, {a} caught up")
    # A resumed where it stopped: every record once (a re-copy from the start would double 300 of them).
    assert records(dc2, f"dc1.{a}") == records(dc1, a) and len(records(dc1, a)) == 350
    assert records(dc2, f"dc1.{b}") == records(dc1, b) and len(records(dc1, b)) == 100
    assert m.stop() == 0, m.log()[-3000:]


def test_filters_changed_in_the_file_take_effect_while_running_without_a_restart(dc1, dc2, name, start_mirror):
    """Rewritten while the mirror runs (picked up from the file's change; SIGHUP does the same): an added topic is
    copied, a removed one stops with its progress kept and goes on from it when matched again, the one left in
    keeps its partitions throughout (same process, no restart), and a file that does not load changes nothing."""
    a, b = f"{name}.a", f"{name}.b"
    create_topic(dc1, a, 2)
    create_topic(dc1, b, 2)
    produce_sequence(dc1, a, 2, 100)
    produce_sequence(dc1, b, 2, 60)
    m = start_mirror(with_topics(name, escape(a)))
    wait_until(lambda: end_offsets(dc2, f"dc1.{a}") == end_offsets(dc1, a), 60, what=f"{a} copied")
    assert f"dc1.{b}" not in topics(dc2)
    pid = m.proc.pid

    m.config.write_text(m.config.read_text().replace(f"dc1->dc2.topics = {escape(a)}",
                                                     f"dc1->dc2.topics = {escape(a)}, {escape(b)}"))
    wait_until(lambda: f"dc1.{b}" in topics(dc2) and end_offsets(dc2, f"dc1.{b}") == end_offsets(dc1, b), 60,
               what=f"{b} copied after the filter was widened")
    assert "configuration reloaded: flow dc1->dc2: topics" in m.log()

    m.config.write_text(m.config.read_text().replace(f"dc1->dc2.topics = {escape(a)}, {escape(b)}",
                                                     f"dc1->dc2.topics = {escape(a)}"))
    wait_until(lambda: f"topic {b} no longer matches the flow's filters" in m.log(), 60, what=f"{b} dropped")
    produce_sequence(dc1, b, 2, 20, start=60)  # not copied while the filter leaves it out
    produce_sequence(dc1, a, 2, 20, start=100)
    wait_until(lambda: end_offsets(dc2, f"dc1.{a}") == end_offsets(dc1, a), 60, what=f"{a} goes on")
    assert sum(end_offsets(dc2, f"dc1.{b}").values()) == 60

    broken = m.config.read_text()
    m.config.write_text(broken + "dc1->dc2.topics.exclude = (\n")  # a pattern that does not compile
    wait_until(lambda: "not reloaded" in m.log(), 30, what="the bad file refused")
    m.config.write_text(broken.replace(f"dc1->dc2.topics = {escape(a)}", f"dc1->dc2.topics = {escape(a)}, "
                                                                           f"{escape(b)}"))
    wait_until(lambda: end_offsets(dc2, f"dc1.{b}") == end_offsets(dc1, b), 60, what=f"{b} resumed")
    # From its kept progress: every record once (a copy from the start would repeat the first 60).
    assert records(dc2, f"dc1.{b}") == records(dc1, b) and len(records(dc1, b)) == 80
    assert records(dc2, f"dc1.{a}") == records(dc1, a)
    assert m.proc.pid == pid and m.alive()
