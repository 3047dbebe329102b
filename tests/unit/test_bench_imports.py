"""bench/ has no import cycle: the parts of ``make bench`` and the probes import the harness (and parts import
parts) in one direction only, counting imports inside functions too (grimp reads every import statement).
The project's import-linter contracts cover the mirror_core package only (its root), hence this test."""

from __future__ import annotations

import grimp

HARNESS = "bench.harness"


def _graph() -> grimp.ImportGraph:
    return grimp.build_graph("bench", include_external_packages=False)


def _cycle(graph: grimp.ImportGraph) -> list[str] | None:
    """One import cycle among bench's modules, or None."""
    modules = sorted(m for m in graph.modules if m.startswith("bench."))
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = 1
        path.append(module)
        for imported in sorted(graph.find_modules_directly_imported_by(module)):
            if not imported.startswith("bench."):
                continue
            if state.get(imported) == 1:
                return [*path[path.index(imported):], imported]
            if imported not in state and (found := visit(imported)):
                return found
        state[module] = 2
        path.pop()
        return None

    for m in modules:
        if m not in state and (found := visit(m)):
            return found
    return None


def test_no_module_of_bench_takes_part_in_an_import_cycle() -> None:
    cycle = _cycle(_graph())
    assert cycle is None, " -> ".join(cycle or [])


def test_the_harness_imports_nothing_of_bench_and_nothing_imports_the_command_line() -> None:
    graph = _graph()
    assert {m for m in graph.find_modules_directly_imported_by(HARNESS) if m.startswith("bench")} == set()
    assert graph.find_modules_that_directly_import("bench.run") == set()


def test_the_check_finds_a_cycle_through_an_import_inside_a_function() -> None:
    graph = grimp.ImportGraph()
    for m in ("bench", "bench.a", "bench.b"):
        graph.add_module(m)
    graph.add_import(importer="bench.a", imported="bench.b", line_number=1, line_contents="from bench import b")
    assert _cycle(graph) is None
    graph.add_import(importer="bench.b", imported="bench.a", line_number=9, line_contents="    from bench import a")
    assert _cycle(graph) == ["bench.a", "bench.b", "bench.a"]
