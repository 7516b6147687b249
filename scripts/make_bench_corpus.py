#!/usr/bin/env python3
"""Writes a deterministic corpus of ImageNet-like JPEGs for the benches.

The generator is ``ferroloader.cli.sample_data`` (photo-like content, ImageNet's sizes in both
orientations and its mix of encodings); this script only lays the files out. Usage:
make_bench_corpus.py OUTDIR [COUNT] [--classes N]; with --classes the files go into N class
folders (an ImageFolder).
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

SAMPLE_DATA = Path(__file__).resolve().parent.parent / "python-bindings/python/ferroloader/cli/sample_data.py"


def load_sample_data() -> ModuleType:
    """Loads the generator by path: the benches need the corpus before the Python extension is
    built, and importing the ``ferroloader`` package would load the extension."""
    spec = importlib.util.spec_from_file_location("ferroloader_sample_data", SAMPLE_DATA)
    assert spec is not None and spec.loader is not None, SAMPLE_DATA
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out", type=Path)
    parser.add_argument("count", type=int, nargs="?", default=48)
    parser.add_argument("--classes", type=int, default=0, help="write an ImageFolder of N classes")
    args = parser.parse_args()
    sample_data = load_sample_data()
    if args.classes:
        paths = [args.out / f"class{i % args.classes:02d}" / f"img{i:04d}.jpg" for i in range(args.count)]
    else:
        paths = [args.out / f"img{i:04d}.jpg" for i in range(args.count)]
    sample_data.write_corpus(paths, seed=20261121)


if __name__ == "__main__":
    main()
