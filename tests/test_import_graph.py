"""No import circle inside solbench/: the import graph of its modules, read statically (ast), is acyclic.

A circle makes the import order decide which module sees a half-initialised other, and it hides which
idea depends on which. Every import counts, at the top or inside a function (a deferred import still
joins the two modules); only those under `if TYPE_CHECKING:` are left out, as they never run.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "solbench"


def module_paths() -> dict[str, Path]:
    """Dotted module name -> file, for every module of the package (a package is its __init__)."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    skipped = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped.update(id(inner) for inner in ast.walk(node))
    return skipped


def imported_modules(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The package's modules that `name` imports: `from a.b import c` is a.b.c where c is a module, else a.b."""
    tree = ast.parse(path.read_text())
    skipped = _type_checking_nodes(tree)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            targets.update(f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names)
    return {t for t in targets if t in modules and t != name}


def import_graph() -> dict[str, set[str]]:
    modules = module_paths()
    return {name: imported_modules(name, path, modules) for name, path in modules.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of `graph` (its modules in order, the first repeated at the end), or None."""
    state: dict[str, str] = {}  # "open" while on the current path, "done" once fully explored
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = "open"
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        path.pop()
        state[node] = "done"
        return None

    for start in sorted(graph):
        if start not in state:
            found = visit(start)
            if found:
                return found
    return None


def test_the_graph_sees_the_package():
    graph = import_graph()
    assert "solbench.orchestrator.scheduler" in graph
    assert "solbench.orchestrator.config" in graph["solbench.orchestrator.scheduler"]
    assert "solbench.orchestrator.cluster" in graph["solbench.orchestrator.scheduler"]  # a deferred import counts


def test_find_cycle_finds_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_no_import_circle_in_the_package():
    cycle = find_cycle(import_graph())
    assert cycle is None, f"import circle: {' -> '.join(cycle)}"
