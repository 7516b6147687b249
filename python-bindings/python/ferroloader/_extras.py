"""What the optional parts of the package need, and the error that says how to get it.

The loader, the transforms, profiling and the torch instrumentation need numpy alone (torch
for torch tensors); the tools in ``ferroloader.cli`` (the command line, ``compare``, the HTML
report, ``advise`` and the sample data) need the ``cli`` extra. Must not import any of those
packages itself.
"""

from __future__ import annotations

import importlib.util
from typing import Sequence

__all__ = ["CLI", "require"]

#: What ``pip install "ferroloader[cli]"`` brings, by import name.
CLI = ("click", "rich", "matplotlib", "PIL")


def require(modules: Sequence[str], what: str) -> None:
    """Raises ``ImportError`` naming ``what``, the missing modules and the extra to install,
    when any of ``modules`` cannot be imported."""
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        raise ImportError(
            f"{what} needs {', '.join(missing)}: pip install \"ferroloader[cli]\""
        )
