#!/usr/bin/env python3
"""Where a Python tail after native ops should run: the torchvision DataLoader, ferroloader
with the tail in worker processes (each running the native ops first: the default with two
workers or more), and ferroloader with the tail under the GIL in the native worker threads
(what ``tensor_type="numpy"`` still does), alternately; and what ``python_tail_workers="auto"``
timed and chose.

Cases (``--case``): ``ra_tail`` (RandomResizedCrop(224), flip natively, then torchvision's
RandAugment inside a ``Lambda``, standing for another library's augmentation, then ToTensor,
Normalize in Python), ``cheap_tail`` (the basic recipe natively, then an identity ``Lambda`` on
the normalized tensor). Each round runs one epoch of each loader in turn after a warm-up round
(torchvision first); prints the median images/s and the ratios.

Usage: bench_tail_workers.py FOLDER [--case NAME] [--rounds 5] [--workers 2] [--batch-size 64]
"""

from __future__ import annotations

import argparse
import warnings
from typing import Any, Callable, Dict, Iterable, Iterator, Tuple

import torch
import torchvision  # type: ignore[import-untyped]
import torchvision.transforms as tvT  # type: ignore[import-untyped]
from torch.utils.data import DataLoader

import ferroloader as fl
from bench_tails import median_rates  # scripts/ is on the path when a script runs

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def _identity(x: Any) -> Any:
    return x


def cases() -> Dict[str, Callable[[], Any]]:
    return {
        "ra_tail": lambda: tvT.Compose(
            [
                tvT.RandomResizedCrop(224),
                tvT.RandomHorizontalFlip(),
                tvT.Lambda(tvT.RandAugment()),
                tvT.ToTensor(),
                tvT.Normalize(MEAN, STD),
            ]
        ),
        "cheap_tail": lambda: tvT.Compose(
            [
                tvT.RandomResizedCrop(224),
                tvT.RandomHorizontalFlip(),
                tvT.ToTensor(),
                tvT.Normalize(MEAN, STD),
                tvT.Lambda(_identity),
            ]
        ),
    }


class AsTorch:
    """A numpy-output loader's batches as torch tensors (no copy), so the loop is the same."""

    def __init__(self, loader: fl.Loader) -> None:
        self.loader = loader

    def __iter__(self) -> Iterator[Tuple[torch.Tensor, torch.Tensor]]:
        for x, y in self.loader:
            yield torch.from_numpy(x), torch.from_numpy(y)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder")
    parser.add_argument("--case", choices=sorted(cases()), default="ra_tail")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args()
    transform = cases()[args.case]()
    warnings.simplefilter("ignore")  # the tail's UserWarning, on purpose here
    dataset = torchvision.datasets.ImageFolder(args.folder, transform=transform)
    common = dict(batch_size=args.batch_size, shuffle=True, num_workers=args.workers)
    persistent = args.workers > 0
    folder = fl.ImageFolder(args.folder)
    loaders: Dict[str, Iterable[Any]] = {
        "torchvision": DataLoader(dataset, persistent_workers=persistent, **common),
        "processes": fl.Loader(folder, transform=transform, persistent_workers=persistent, **common),
        "gil": AsTorch(fl.Loader(folder, transform=transform, tensor_type="numpy", **common)),
    }
    auto = fl.Loader(folder, transform=transform, **common)
    costs = auto.python_tail_costs
    if costs is not None:
        print(
            f"timed per sample: native prefix {costs.prefix * 1e3:.3f} ms, Python under the GIL "
            f"{costs.python * 1e3:.3f} ms; python_tail_workers='auto' chose {auto.python_tail_where}"
        )
    del auto
    median = median_rates(loaders, args.rounds)
    tv, procs, gil = median["torchvision"], median["processes"], median["gil"]
    print(f"{args.case}, {args.rounds} rounds, {args.workers} workers (median img/s):")
    print(f"  torchvision DataLoader       {tv:8.1f}")
    print(f"  tail in worker processes     {procs:8.1f}  {procs / tv:5.2f}x torchvision")
    print(f"  tail under the GIL (threads) {gil:8.1f}  {gil / tv:5.2f}x torchvision")


if __name__ == "__main__":
    main()
