"""The package without its optional parts: the loader runs with numpy alone; the command line
and the HTML report say which extra to install instead of failing with a traceback."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

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


def test_the_loader_runs_with_numpy_alone(folder: Path) -> None:
    result = _run(
        f"""
        import ferroloader as fl
        from ferroloader import transforms as T
        loader = fl.Loader(fl.ImageFolder({str(folder)!r}), batch_size=4, num_workers=2, tensor_type="numpy",
                           transform=T.Compose([T.Resize(16), T.CenterCrop(16), T.ToTensor()]), profile="spans")
        assert sum(len(labels) for _, labels in loader) == 18
        assert "decode" in loader.profile().summary().table()
        try:
            loader.profile().to_html("x.html")
        except ImportError as e:
            print("to_html:", e)
        for name in ("click", "rich", "matplotlib", "torch"):
            assert name not in sys.modules, name
        print("ok")
        """
    )
    assert result.returncode == 0, result.stderr
    assert "ok" in result.stdout
    assert 'to_html: Profile.to_html needs matplotlib: pip install "ferroloader[cli]"' in result.stdout


def test_the_command_line_names_the_extra_it_needs() -> None:
    result = _run("import sys; sys.argv = ['ferroloader', '--help']; from ferroloader.__main__ import run_cli; run_cli()")
    assert result.returncode == 2
    assert 'the ferroloader command needs click, rich, matplotlib, PIL: pip install "ferroloader[cli]"' in result.stderr
    # With the extra installed (as here), the same entry point runs the command.
    full = subprocess.run([sys.executable, "-m", "ferroloader", "--help"], capture_output=True, text=True, check=False)
    assert full.returncode == 0 and "compare" in full.stdout
