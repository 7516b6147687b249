"""The ``ferroloader`` command (``python -m ferroloader``)."""

from __future__ import annotations

import argparse
import sys
from typing import List, Optional

from ferroloader import __version__


def main(argv: Optional[List[str]] = None) -> int:
    """Runs the command line; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="ferroloader",
        description="A native image-classification data loader for PyTorch.",
    )
    parser.add_argument("--version", action="version", version=f"ferroloader {__version__}")
    parser.parse_args(argv)
    parser.print_help()
    return 0


if __name__ == "__main__":
    sys.exit(main())
