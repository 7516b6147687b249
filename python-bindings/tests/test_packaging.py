"""The package without its optional parts, and the shape of its imports.

The core (loader, transforms, datasets, profiling, torch instrumentation, recipes, offline
preparation) runs with numpy alone; the tools in ``ferroloader.cli`` (command line, compare,
report, advisor, sample data) need the ``cli`` extra and say so instead of failing with a
traceback. Held three ways: the core's imports read from its source (no click, rich or
matplotlib anywhere in it, no import of the tools, no import cycle in the package), every core
module imported in a child with the extra's packages blocked, and (marked ``slow``) a wheel
installed into a fresh virtual environment, first alone and then with the extra.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import textwrap
import venv
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Set, Tuple

import pytest

import ferroloader

PACKAGE_DIR = Path(ferroloader.__file__).resolve().parent
REPO = Path(__file__).resolve().parents[2]
#: What the `cli` extra brings, by import name (Pillow too: the sample data and the advisor
#: write images with it).
EXTRA_MODULES = ("click", "rich", "matplotlib", "PIL")
#: The core may import Pillow lazily where the user's own pipeline already holds PIL images (a
#: Python tail of PIL ops, torchvision's loader); these it must never import, even lazily.
TOOL_ONLY = ("click", "rich", "matplotlib")
#: The entry point that dispatches to the tools once it has checked the extra.
ENTRY_POINTS = ("ferroloader.__main__",)

# Runs first in the child: makes the cli extra's packages (and torch) unimportable, as in a
# fresh `pip install ./python-bindings`.
_HIDE = """
import sys, importlib.abc
class Hide(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {"click", "rich", "matplotlib", "PIL", "torch", "torchvision"}:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, Hide())
import importlib.util
_find = importlib.util.find_spec
def find_spec(name, package=None):
    if name.split(".")[0] in {"click", "rich", "matplotlib", "PIL", "torch", "torchvision"}:
        return None
    return _find(name, package)
importlib.util.find_spec = find_spec
"""


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _HIDE + textwrap.dedent(code)], capture_output=True, text=True, check=False
    )


# -- the imports, read from the source ------------------------------------------------------------


def package_modules(package_dir: Path) -> Dict[str, Optional[Path]]:
    """Every module of the package at ``package_dir``, by dotted name: its source, or None for
    an extension module (known by its stub or its shared library; it imports nothing of ours)."""
    root = package_dir.parent
    modules: Dict[str, Optional[Path]] = {}
    for path in sorted(package_dir.rglob("*")):
        if path.suffix not in {".py", ".pyi", ".so"}:
            continue
        parts = list(path.relative_to(root).parts)
        parts[-1] = parts[-1].split(".")[0]
        if parts[-1] == "__init__":
            parts.pop()
        name = ".".join(parts)
        if path.suffix == ".py":
            modules[name] = path
        else:
            modules.setdefault(name, None)
    return modules


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _runtime_nodes(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node that can run, at import or in a function: ``if TYPE_CHECKING:`` bodies are
    left out (the type checker's imports never run)."""
    stack: List[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        stack.extend(ast.iter_child_nodes(node))


def _imports(module: str, path: Path) -> Iterator[Tuple[str, List[str]]]:
    """What ``module`` imports anywhere, as ``(base, names)``: ``import a.b`` is ``("a.b",
    [])``, ``from a import b, c`` is ``("a", ["b", "c"])`` (relative bases made absolute), and
    ``importlib.import_module("a.b")`` with a literal name counts as ``import a.b``."""
    tree = ast.parse(path.read_text(), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in _runtime_nodes(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, []
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            yield base, [alias.name for alias in node.names]
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            yield node.args[0].value, []


def imported_modules(module: str, path: Path) -> Set[str]:
    """Every module name ``module`` imports (``from a import b`` names ``a`` and ``a.b``)."""
    names = set()
    for base, attributes in _imports(module, path):
        names.add(base)
        names.update(f"{base}.{a}" for a in attributes)
    return names


def import_graph(package_dir: Path) -> Dict[str, Set[str]]:
    """Module -> the package's modules it imports. ``from P import x`` leads to ``P.x`` when
    that is a module, else to ``P`` (``x`` is an attribute its ``__init__`` sets). The parent
    packages that every import runs first are not edges: a package's ``__init__`` importing its
    submodules, which import their siblings through it, is the facade pattern, not a cycle."""
    modules = package_modules(package_dir)
    graph: Dict[str, Set[str]] = {}
    for module, path in modules.items():
        if path is None:
            continue
        edges = set()
        for base, attributes in _imports(module, path):
            if not attributes and base in modules:
                edges.add(base)
            for a in attributes:
                if f"{base}.{a}" in modules:
                    edges.add(f"{base}.{a}")
                elif base in modules:
                    edges.add(base)
        graph[module] = edges - {module}
    return graph


def find_cycle(graph: Dict[str, Set[str]]) -> Optional[List[str]]:
    """One import cycle as ``[a, b, ..., a]``, or None when the graph has none."""
    state: Dict[str, int] = {}  # 1: on the current path, 2: done
    path: List[str] = []

    def visit(node: str) -> Optional[List[str]]:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state:
            found = visit(start)
            if found:
                return found
    return None


def core_modules(package_dir: Path) -> List[str]:
    """The modules outside the tools' subpackage and the entry point."""
    return [
        m for m in package_modules(package_dir)
        if not (m == "ferroloader.cli" or m.startswith("ferroloader.cli.")) and m not in ENTRY_POINTS
    ]


def test_the_package_has_no_import_cycle() -> None:
    graph = import_graph(PACKAGE_DIR)
    assert "ferroloader.cli.report" in graph["ferroloader.cli.commands"]  # the walk sees lazy imports
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph) or [])


def test_the_cycle_finder_finds_a_cycle_through_function_level_imports(tmp_path: Path) -> None:
    # The shape this package had: profiling imported the report inside a method, the report
    # imported profiling inside a function.
    pkg = tmp_path / "ferroloader"
    (pkg / "cli").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from ferroloader.profiling import Profile\n")
    (pkg / "cli" / "__init__.py").write_text("")
    (pkg / "profiling.py").write_text(
        "class Profile:\n    def to_html(self):\n        from ferroloader.cli import report\n"
    )
    (pkg / "cli" / "report.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import ferroloader.loader\n"
        "def write_html():\n    from ferroloader.profiling import Profile\n"
    )
    (pkg / "loader.py").write_text("from ferroloader import profiling, __version__\n")
    graph = import_graph(pkg)
    assert graph["ferroloader.loader"] == {"ferroloader.profiling", "ferroloader"}
    assert graph["ferroloader.cli.report"] == {"ferroloader.profiling"}
    assert find_cycle(graph) == ["ferroloader.profiling", "ferroloader.cli.report", "ferroloader.profiling"]
    (pkg / "profiling.py").write_text("class Profile:\n    pass\n")
    assert find_cycle(import_graph(pkg)) is None


def test_the_core_never_imports_the_tools_or_their_packages() -> None:
    modules = package_modules(PACKAGE_DIR)
    core = core_modules(PACKAGE_DIR)
    assert {"ferroloader", "ferroloader.loader", "ferroloader.profiling", "ferroloader.torch"} <= set(core)
    assert "ferroloader.cli.report" not in core
    for module in core:
        path = modules[module]
        if path is None:
            continue
        for name in imported_modules(module, path):
            assert name.split(".")[0] not in TOOL_ONLY, f"{module} imports {name}"
            assert not (name == "ferroloader.cli" or name.startswith("ferroloader.cli.")), (
                f"{module} imports {name}: the tools build on the core, not the reverse"
            )


def _import_with_blocked(modules: List[str], blocked: Tuple[str, ...]) -> subprocess.CompletedProcess[str]:
    """Imports ``modules`` in a child where each of ``blocked`` is unimportable."""
    code = (
        "import importlib, sys\n"
        f"for name in {list(blocked)!r}:\n"
        "    sys.modules[name] = None  # `import name` raises ImportError\n"
        f"for module in {modules!r}:\n"
        "    importlib.import_module(module)\n"
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)


def test_every_core_module_imports_without_the_cli_extra() -> None:
    core = core_modules(PACKAGE_DIR)
    # torch is optional too: everything but the torch instrumentation and the running of a
    # dataset in DataLoader's workers imports without it.
    with_torch = ["ferroloader.torch", "ferroloader._pydataset"]
    without_torch = [m for m in core if m not in with_torch]
    result = _import_with_blocked(without_torch, EXTRA_MODULES + ("torch", "torchvision"))
    assert result.returncode == 0, result.stderr
    result = _import_with_blocked(with_torch, EXTRA_MODULES)
    assert result.returncode == 0, result.stderr
    # The tools, blocked the same way, say what to install.
    result = _import_with_blocked(["ferroloader.cli.report"], EXTRA_MODULES)
    assert result.returncode != 0
    assert 'needs click, rich, matplotlib, PIL: pip install "ferroloader[cli]"' in result.stderr


def test_the_loader_runs_with_numpy_alone(folder: Path) -> None:
    result = _run(
        f"""
        import ferroloader as fl
        from ferroloader import transforms as T
        loader = fl.Loader(fl.ImageFolder({str(folder)!r}), batch_size=4, num_workers=2, tensor_type="numpy",
                           transform=T.Compose([T.Resize(16), T.CenterCrop(16), T.ToTensor()]), profile="spans")
        assert sum(len(labels) for _, labels in loader) == 18
        assert "decode" in loader.profile().summary().table()
        for name in ("report", "advise"):
            try:
                getattr(fl, name)
            except ImportError as e:
                print(f"{{name}}:", e)
        namespace = {{}}
        exec("from ferroloader import *", namespace)  # every name in __all__ is there
        assert "Loader" in namespace and "torch" not in namespace and "report" not in namespace
        for name in ("click", "rich", "matplotlib", "torch"):
            assert name not in sys.modules, name
        print("ok")
        """
    )
    assert result.returncode == 0, result.stderr
    assert "ok" in result.stdout
    needs = 'needs click, rich, matplotlib, PIL: pip install "ferroloader[cli]"'
    assert f"report: ferroloader.cli (the command line, compare, report, advise, sample data) {needs}" in result.stdout
    assert f"advise: ferroloader.cli (the command line, compare, report, advise, sample data) {needs}" in result.stdout


def test_the_command_line_names_the_extra_it_needs() -> None:
    result = _run("import sys; sys.argv = ['ferroloader', '--help']; from ferroloader.__main__ import run_cli; run_cli()")
    assert result.returncode == 2
    assert 'the ferroloader command needs click, rich, matplotlib, PIL: pip install "ferroloader[cli]"' in result.stderr
    # With the extra installed (as here), the same entry point runs the command.
    full = subprocess.run([sys.executable, "-m", "ferroloader", "--help"], capture_output=True, text=True, check=False)
    assert full.returncode == 0 and "compare" in full.stdout


def test_the_dev_requirements_bring_the_cli_extra() -> None:
    """``make venv`` installs requirements-dev.txt, which must hold the extra the tests use."""
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((REPO / "python-bindings" / "pyproject.toml").read_text())["project"]

    def names(requirements: List[str]) -> Set[str]:
        found = (re.match(r"[A-Za-z0-9_.-]+", r.split("#")[0].strip()) for r in requirements)
        return {m.group(0).lower() for m in found if m}

    def lines(path: Path) -> List[str]:
        """The requirement lines of a file and of the files it includes with ``-r``."""
        out: List[str] = []
        for line in path.read_text().splitlines():
            if line.startswith("-r "):
                out += lines(path.parent / line[3:].strip())
            else:
                out.append(line)
        return out

    extra = names(project["optional-dependencies"]["cli"])
    assert extra == {"click", "rich", "matplotlib", "pillow"}
    assert extra <= names(lines(REPO / "requirements-dev.txt"))
    assert names(project["dependencies"]) == {"numpy"}


# -- a wheel in a fresh virtual environment ------------------------------------------------------


def _wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``FERROLOADER_WHEEL`` when set, else a wheel built by maturin from this checkout (cargo
    reuses the release build of ``make py-build``, so this relinks rather than rebuilds)."""
    given = os.environ.get("FERROLOADER_WHEEL")
    if given:
        wheel = Path(given)
        assert wheel.is_file(), f"FERROLOADER_WHEEL={given}: no such file"
        return wheel
    out = tmp_path_factory.mktemp("wheel")
    build = subprocess.run(
        [sys.executable, "-m", "maturin", "build", "--release", "--quiet", "-m",
         str(REPO / "python-bindings" / "Cargo.toml"), "-i", sys.executable, "-o", str(out)],
        capture_output=True, text=True, check=False, timeout=600,
    )
    assert build.returncode == 0, build.stderr[-3000:]
    (wheel,) = out.glob("ferroloader-*.whl")
    return wheel


def _clean_env() -> Dict[str, str]:
    """The environment without this checkout on the path: the fresh venv must see only what pip
    installed into it. pip's own settings (PIP_INDEX_URL, PIP_FIND_LINKS, PIP_NO_INDEX for an
    offline wheelhouse) pass through."""
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV"}}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_fresh_venv_runs_the_loader_without_the_extra_and_the_command_with_it(
    tmp_path_factory: pytest.TempPathFactory, folder: Path
) -> None:
    wheel = _wheel(tmp_path_factory)
    home = tmp_path_factory.mktemp("venv")
    venv.EnvBuilder(with_pip=True).create(home / "env")
    python, command = home / "env" / "bin" / "python", home / "env" / "bin" / "ferroloader"
    env = _clean_env()

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(list(args), capture_output=True, text=True, check=False, cwd=home, env=env,
                              timeout=300)

    installed = run(str(python), "-m", "pip", "install", "-q", str(wheel))
    assert installed.returncode == 0, installed.stderr[-3000:]
    loaded = run(str(python), "-c", textwrap.dedent(f"""
        import importlib.util, sys
        import ferroloader as fl
        from ferroloader import transforms as T
        assert fl.__file__.startswith(sys.prefix), fl.__file__  # the installed package
        for name in ("click", "rich", "matplotlib", "PIL", "torch"):
            assert importlib.util.find_spec(name) is None, name
        loader = fl.Loader(fl.ImageFolder({str(folder)!r}), batch_size=4, num_workers=2,
                           tensor_type="numpy", transform=T.Compose([T.Resize(16), T.CenterCrop(16),
                           T.ToTensor()]))
        shapes = {{images.shape[1:] for images, _ in loader}}
        assert shapes == {{(3, 16, 16)}}, shapes
        assert sum(len(labels) for _, labels in loader) == 18
        print("loaded")
        """))
    assert loaded.returncode == 0 and "loaded" in loaded.stdout, loaded.stderr[-3000:]

    for hint in (run(str(command), "--help"), run(str(python), "-m", "ferroloader", "--help")):
        assert hint.returncode == 2, hint.stdout + hint.stderr
        assert hint.stderr.strip().splitlines() == [
            'ferroloader: the ferroloader command needs click, rich, matplotlib, PIL: '
            'pip install "ferroloader[cli]"'
        ]

    extra = run(str(python), "-m", "pip", "install", "-q", f"{wheel}[cli]")
    assert extra.returncode == 0, extra.stderr[-3000:]
    helped = run(str(command), "--help")
    assert helped.returncode == 0, helped.stderr[-3000:]
    assert all(c in helped.stdout for c in ("compare", "report", "advise", "sample-data"))
    tools = run(str(python), "-c", "import ferroloader as fl; print(fl.report.write_html.__name__, fl.advise.__name__)")
    assert tools.returncode == 0 and tools.stdout.split() == ["write_html", "advise"], tools.stderr[-3000:]
