# ruff: noqa: F811  (the fixtures shared with test_topic_controls are imported, then requested by name)
"""A flow's topic and group filters set in the state store (over its config file's): one active per flow, who/when/why,
a pattern that does not compile refused in one line with nothing recorded, two operators changing them at once: one
wins, the other gets one line; on SQLite and on a real PostgreSQL server started by the harness."""

from __future__ import annotations

import pytest
from alembic import command
from sqlalchemy import inspect

from mirror_core.state.errors import StateStoreError
from mirror_core.state.models import FlowFilterRecord
from mirror_core.state.store import StateStore, alembic_config
from tests.state.test_topic_controls import _at_once, _tables, empty_url, flow, postgres_url, store  # noqa: F401


def test_set_replace_clear_and_history(store: StateStore) -> None:
    f = flow()
    first = store.set_flow_filter(f, "alice", "add b\nfor the backfill", {"topics": "a, b"})
    assert first.overrides == {"topics": "a, b"} and first.reason == "add b for the backfill" and first.active
    second = store.set_flow_filter(f, "bob", "exclude tmp", {"topics.exclude": r"tmp\..*", "groups": "app-.*"},
                                   expected=first.id)
    assert store.active_flow_filters([f]) == {f: second}
    assert second.overrides == {"topics.exclude": r"tmp\..*", "groups": "app-.*"}  # topics: the file's again
    cleared = store.clear_flow_filter(f, "carol", "back to the file")
    assert (cleared.id, cleared.cleared_by, cleared.clear_reason) == (second.id, "carol", "back to the file")
    assert store.active_flow_filters([f]) == {}
    history = store.flow_filter_history(f)
    assert [h.id for h in history] == [second.id, first.id] and not any(h.active for h in history)
    assert history[1].cleared_by == "bob" and history[1].clear_reason.startswith("replaced: ")


@pytest.mark.parametrize(("values", "kwargs", "says"), [
    ({"topics": "a, ("}, {}, "filter refused on {f}: topics 'a, (': invalid regular expression '('"),
    ({"topics.excludes": "x"}, {}, "unknown filter key topics.excludes"),
    ({}, {}, "no filter given"),
    ({"topics": "a"}, {"reason": " "}, "a reason is needed"),
    ({"topics": "a"}, {"flow": "dc1"}, "'dc1' is not a flow"),
])
def test_bad_input_is_one_line_and_records_nothing(store: StateStore, values: dict, kwargs: dict,  # type: ignore[type-arg]
                                                   says: str) -> None:
    f = flow()
    args = {"flow": f, "set_by": "alice", "reason": "why", **kwargs}
    with pytest.raises(StateStoreError) as refused:
        store.set_flow_filter(args["flow"], args["set_by"], args["reason"], values)
    message = str(refused.value)
    assert says.format(f=f) in message and "\n" not in message and message.endswith("nothing was recorded"), message
    assert store.flow_filter_history() == []
    with pytest.raises(StateStoreError, match="has no filters set in the state store"):
        store.clear_flow_filter(f, "alice", "nothing to clear")


def test_two_operators_at_once_one_refused(store: StateStore) -> None:
    f = flow()
    seen = store.set_flow_filter(f, "alice", "start", {"topics": "a"})
    # Each operator read the filter id `seen` and changes it on that basis: the first one wins.
    results = _at_once(6, lambda i: store.set_flow_filter(f, f"op{i}", "at once", {"topics": f"a, b{i}"},
                                                          expected=seen.id))
    won = [r for r in results if isinstance(r, FlowFilterRecord)]
    refused = [r for r in results if isinstance(r, StateStoreError)]
    assert len(won) == 1 and len(refused) == 5, results
    assert all("another operator changed its filters at the same moment" in str(r) and "\n" not in str(r)
               for r in refused), refused
    assert store.active_flow_filters([f])[f].id == won[0].id
    assert len(store.flow_filter_history(f)) == 2  # nothing recorded for the refused ones
    # Without an expected id (the last writer replaces), concurrent changes still leave one active row.
    _at_once(6, lambda i: store.set_flow_filter(f, f"op{i}", "at once", {"topics": f"c{i}"}))
    assert len(store.active_flow_filters([f])) == 1


def test_the_migration_applies_on_a_store_at_0008_and_back(empty_url: str) -> None:
    old = StateStore(empty_url)
    with old.engine.begin() as connection:
        cfg = alembic_config(empty_url)
        cfg.attributes["connection"] = connection
        command.upgrade(cfg, "0008")
    assert "flow_filters" not in _tables(empty_url)
    old.engine.dispose()
    s = StateStore(empty_url)
    s.migrate()
    assert "flow_filters" in _tables(empty_url)
    assert "filters" in {c["name"] for c in inspect(s.engine).get_columns("flow_instances")}
    s.report_flow_states("m-1", {"a->b": "running"}, None, {"a->b": {"topics": "x", "filter_id": None}})
    assert s.flow_instances("a->b")[0].filters == {"topics": "x", "filter_id": None}
    with s.engine.begin() as connection:
        cfg = alembic_config(empty_url)
        cfg.attributes["connection"] = connection
        command.check(cfg)  # the migrated schema matches the models
        command.downgrade(cfg, "0008")
    assert "flow_filters" not in _tables(empty_url)
