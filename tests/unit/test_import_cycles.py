"""No module of the namespace imports in a circle, at module level or inside a function."""

from __future__ import annotations

from tests.unit.test_architecture import ROOT, _all_imports, _modules, _target


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The groups of two or more modules that reach each other (strongly connected, Tarjan's way)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for target in graph[module]:
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == module:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for module in graph:
        if module not in index:
            visit(module)
    return found


def test_no_module_imports_in_a_circle():
    known = _modules(ROOT)
    graph = {module: {target for imported, names, _level, _lazy in _all_imports(path)
                      if imported.split(".")[0] == "eaglefeed"
                      for target in _target(imported, names, known) if target in known and target != module}
             for module, path in known.items()}
    assert cycles(graph) == []


def test_a_circle_is_found():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
