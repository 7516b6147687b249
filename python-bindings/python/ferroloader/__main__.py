"""``python -m ferroloader``: the ``ferroloader`` command (see ``ferroloader.cli``)."""

from __future__ import annotations

from ferroloader.cli import main, run

__all__ = ["main"]

if __name__ == "__main__":
    run()
