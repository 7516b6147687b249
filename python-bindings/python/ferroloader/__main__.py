"""``python -m ferroloader`` and the ``ferroloader`` command (see ``ferroloader.cli.commands``),
with a one-line hint instead of a traceback when the ``cli`` extra is not installed.

The one module outside ``ferroloader.cli`` that imports it, and only after checking the extra."""

from __future__ import annotations

import sys

__all__ = ["run_cli"]


def run_cli() -> None:
    """Runs the command line; exits 2 with what to install when its packages are missing."""
    from ferroloader._extras import CLI, require

    try:
        require(CLI, "the ferroloader command")
    except ImportError as e:
        print(f"ferroloader: {e}", file=sys.stderr)
        sys.exit(2)
    from ferroloader.cli.commands import run

    run()


if __name__ == "__main__":
    run_cli()
