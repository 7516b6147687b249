#!/usr/bin/env python3
"""A training script's own Dataset class (it opens each file with Pillow and runs a torchvision
Compose) through the torch DataLoader and through ``fl.Loader``, given as it is: the loader
traces its ``__getitem__`` and reads it natively (``ferroloader._getitem``; until session 34 it
ran such a dataset in worker processes, as DataLoader does); and the same files as ``(path,
label)`` with the transform given to the loader, for what the traced ``__getitem__`` per sample
costs against a listing.

Rounds alternate the loaders (a warm-up round first, DataLoader first so its workers fork before
ferroloader allocates); prints each one's median images/s and the ratio to DataLoader.

Usage: bench_python_dataset.py FOLDER [--rounds 5] [--workers 2] [--batch-size 64]
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Dict, Iterable, List, Tuple

import torch
import torchvision.transforms as tvT  # type: ignore[import-untyped]
from PIL import Image
from torch.utils.data import DataLoader, Dataset

import ferroloader as fl
from bench_tails import median_rates  # scripts/ is on the path when a script runs

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


class Photos(Dataset[Tuple[torch.Tensor, int]]):
    """What a training script writes: a list of files, Pillow, the transform."""

    def __init__(self, files: List[Tuple[str, int]], transform: Any) -> None:
        self.files = files
        self.transform = transform

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i: int) -> Tuple[torch.Tensor, int]:
        path, label = self.files[i]
        with Image.open(path) as img:
            return self.transform(img.convert("RGB")), label


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args()
    classes = sorted(p.name for p in args.folder.iterdir() if p.is_dir())
    files = [
        (str(path), label)
        for label, name in enumerate(classes)
        for path in sorted((args.folder / name).iterdir())
        if path.suffix.lower() in (".jpg", ".jpeg", ".png")
    ]
    transform = tvT.Compose(
        [tvT.RandomResizedCrop(224), tvT.RandomHorizontalFlip(), tvT.ToTensor(), tvT.Normalize(MEAN, STD)]
    )
    dataset = Photos(files, transform)
    common: Dict[str, Any] = dict(batch_size=args.batch_size, shuffle=True, num_workers=args.workers)
    persistent = args.workers > 0
    loaders: Dict[str, Iterable[Any]] = {
        "torch": DataLoader(dataset, persistent_workers=persistent, **common),
        "traced": fl.Loader(dataset, python_dataset="error", persistent_workers=persistent, **common),
        "native": fl.Loader(files, transform=transform, python_tail="error", **common),
    }
    median = median_rates(loaders, args.rounds)
    base = median["torch"]
    print(f"{len(files)} images, {args.rounds} rounds, {args.workers} workers (median img/s):")
    print(f"  torch DataLoader                        {base:8.1f}")
    print(f"  fl.Loader(dataset), traced, native      {median['traced']:8.1f}  {median['traced'] / base:5.2f}x")
    print(f"  fl.Loader(files, transform=...), native {median['native']:8.1f}  {median['native'] / base:5.2f}x")


if __name__ == "__main__":
    main()
