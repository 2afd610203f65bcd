"""No import circle anywhere in the installed package, the shell (minibroker/) included: every module's
imports are read from the source, those under `if TYPE_CHECKING:` and those inside functions too, so a
cycle held apart by a type-only or a function-local import is still found (it is one all the same:
the modules cannot be understood, tested or split apart one without the other).

The graph is of modules as installed (the core layers protocol/, storage/, quotas/, producer/ and
pipeline/ are mapped under `minibroker`, pyproject's package-dir). An edge runs from a module to each
first-party module it imports, and to the packages above that one (importing `a.b.c` runs `a/__init__`
and `a/b/__init__` first) unless they are above the importing module too (they are being imported
already when it runs). `from pkg import name` is an edge to `pkg.name` when that is a module, else to
`pkg`.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# folder -> the package it is installed as
PACKAGES = {
    "minibroker": "minibroker",
    "protocol": "minibroker.protocol",
    "storage": "minibroker.storage",
    "quotas": "minibroker.quotas",
    "producer": "minibroker.producer",
    "pipeline": "minibroker.pipeline",
}


def installed_modules() -> dict[str, Path]:
    """Every module of the installed package: dotted name -> source file."""
    modules = {}
    for folder, package in PACKAGES.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join([package, *parts])] = path
    return modules


def _parents(module: str) -> list[str]:
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def imports_of(name: str, tree: ast.AST, modules: dict[str, Path], is_package: bool) -> set[str]:
    """The first-party modules `tree` (module `name`) imports, wherever the import stands."""
    found: set[str] = set()
    package = name if is_package else name.rpartition(".")[0]
    # The packages above `name` are being imported already whenever `name` runs (Python imports a
    # package before its modules): importing them again starts nothing.
    running = set(_parents(name))

    def add(target: str) -> None:
        if target in modules:
            found.add(target)
            found.update(parent for parent in _parents(target) if parent in modules and parent not in running)

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = package.split(".")
                base_parts = base_parts[:len(base_parts) - (node.level - 1)]
                base = ".".join(base_parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            for alias in node.names:
                add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base)
    found.discard(name)
    return found


def import_graph() -> dict[str, set[str]]:
    modules = installed_modules()
    return {
        name: imports_of(name, ast.parse(path.read_text(), str(path)), modules, path.name == "__init__.py")
        for name, path in modules.items()
    }


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm), each sorted;
    a module importing itself is no cycle here (imports_of leaves it out)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    def visit(root: str) -> None:
        nonlocal counter
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            for target in edges:
                if target not in index:
                    index[target] = low[target] = counter
                    counter += 1
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph.get(target, ())))))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def test_the_installed_package_has_no_import_cycle():
    graph = import_graph()
    assert len(graph) > 150  # the whole package was read
    assert cycles(graph) == []


def test_only_the_entry_points_know_the_broker():
    """Handlers and the broker's collaborators are given what they use (minibroker.context's services,
    constructor arguments), never the whole `Broker`: only what runs a broker imports its module (the
    server, the cluster that runs several, the metrics page it serves, the test harness)."""
    graph = import_graph()
    assert sorted(m for m, targets in graph.items() if "minibroker.broker" in targets) == [
        "minibroker.cluster_runtime", "minibroker.metrics_http", "minibroker.server", "minibroker.testing"]
    # and the broker's services are defined where no handler is imported
    assert not {m for m in graph["minibroker.context"] if m.startswith("minibroker.handlers")}


def test_the_graph_sees_type_only_function_local_and_parent_imports():
    """What the check must find (so an empty answer above means no cycle, not that none was seen):
    a TYPE_CHECKING import, a function-local one, `from pkg import module`, a relative import, and
    the packages above an imported module."""
    modules = {name: Path() for name in ("minibroker", "minibroker.a", "minibroker.b", "minibroker.pkg",
                                         "minibroker.pkg.c", "minibroker.pkg.d", "minibroker.storage",
                                         "minibroker.storage.log")}
    tree = ast.parse(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from minibroker.a import A\n"
        "def f():\n    import minibroker.b\n"
        "from minibroker.pkg import c\n"
        "from . import d\n"
        "from minibroker.storage.log import PartitionLog\n"
    )
    assert imports_of("minibroker.pkg.x", tree, modules, False) == {
        "minibroker.a", "minibroker.b", "minibroker.pkg.c", "minibroker.pkg.d", "minibroker.storage",
        "minibroker.storage.log"}
    # A name (not a module) from a package is an edge to the package, even to one above the importer.
    assert imports_of("minibroker.pkg.x", ast.parse("from minibroker.pkg import helper\n"), modules, False) == {
        "minibroker.pkg"}


def test_cycles_are_found():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a", "e"}, "e": {"d"}, "f": set(), "g": {"g"}}
    assert cycles(graph) == [["a", "b", "c"], ["d", "e"]]
