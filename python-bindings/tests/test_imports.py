"""The package's modules import one another without a cycle, and each imports on its own.

A cycle is looked for in every import a module makes (at its top or deferred inside a function,
since a deferred import still runs whenever that function does), except those under
``if TYPE_CHECKING:``, which never run. The package root ``ferroloader/__init__.py`` is the
composition root: it imports the modules, so an import of the root is not counted as an edge
(every submodule runs it first anyway)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional, Set

import ferroloader

PACKAGE = Path(ferroloader.__file__).parent
ROOT = "ferroloader"


def _modules() -> Dict[str, Path]:
    out: Dict[str, Path] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join([ROOT, *parts])] = path
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST, modules: Set[str], package: str) -> Set[str]:
    """The package's modules that ``tree`` imports (outside ``if TYPE_CHECKING:``)."""
    found: Set[str] = set()

    def resolve(name: str) -> Optional[str]:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for stmt in node.orelse:
                visit(stmt)
            return
        if isinstance(node, ast.Import):
            for alias in node.names:
                target = resolve(alias.name)
                if target is not None:
                    found.add(target)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1]
                                + ([base] if base else []))
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                target = submodule if submodule in modules else resolve(base)
                if target is not None:
                    found.add(target)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    found.discard(ROOT)
    return found


def _graph() -> Dict[str, Set[str]]:
    modules = _modules()
    names = set(modules)
    graph: Dict[str, Set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        graph[name] = _imports(ast.parse(path.read_text(), str(path)), names, package) - {name}
    return graph


def _cycle(graph: Dict[str, Set[str]]) -> Optional[List[str]]:
    """One import cycle, as the modules along it, or None."""
    state: Dict[str, int] = {}  # 1: on the current path, 2: done
    path: List[str] = []

    def dfs(node: str) -> Optional[List[str]]:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                found = dfs(nxt)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = dfs(node)
            if found:
                return found
    return None


def test_no_module_of_the_package_imports_itself_back() -> None:
    graph = _graph()
    assert "ferroloader.profiling" in graph and "ferroloader.report" in graph
    # What this test is for: the report reads profiles, the profile model knows no report.
    assert "ferroloader.profiling" in graph["ferroloader.report"]
    assert "ferroloader.report" not in graph["ferroloader.profiling"]
    cycle = _cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycle(graph) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None
    tree = ast.parse(
        "from ferroloader import report\n"
        "if TYPE_CHECKING:\n    from ferroloader import torch\n"
        "def f():\n    from ferroloader.loader import Loader\n"
    )
    mods = {"ferroloader", "ferroloader.report", "ferroloader.torch", "ferroloader.loader"}
    assert _imports(tree, mods, "ferroloader") == {"ferroloader.report", "ferroloader.loader"}


def test_each_module_imports_in_a_fresh_interpreter() -> None:
    procs = {
        name: subprocess.Popen(
            [sys.executable, "-c", f"import {name}"], stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True,
        )
        for name in _modules()
    }
    failed = {}
    for name, proc in procs.items():
        _, err = proc.communicate(timeout=240)
        if proc.returncode != 0:
            failed[name] = err.strip().splitlines()[-1:]
    assert not failed, failed
