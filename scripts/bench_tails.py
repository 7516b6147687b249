#!/usr/bin/env python3
"""What a Python tail costs: the torchvision DataLoader, ferroloader running a transform
natively, and ferroloader running the very same transform as a Python tail, alternately.

The tail form hands the Loader a plain callable wrapping the torchvision ``Compose``, which it
cannot convert: every op then runs in Python, as any transform without a native equivalent
does (and as the built-in cases below all did before they were made native); with no native
op before it, in worker processes as DataLoader runs it (persistent, as the DataLoader's). Each round runs one whole epoch of each loader in turn, after a
warm-up round (torchvision first, so that its workers fork before ferroloader allocates);
prints each loader's median images/s and the ratios of the medians.

Cases (``--case``): ``lanczos_eval`` (Resize(256, LANCZOS), CenterCrop(224), ToTensor,
Normalize), ``resize_then_rrc`` (Resize(256), RandomResizedCrop(224), flip, ToTensor,
Normalize), ``cifar_test`` (ToTensor, Normalize on the images as they are: give a folder of
equal-sized images); or ``--transform FILE.py:NAME``, your own Compose.

Usage: bench_tails.py FOLDER [--case NAME | --transform FILE.py:NAME] [--rounds 5]
       [--workers 2] [--batch-size 64]
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings
from typing import Any, Callable, Dict, Iterable, List

import torchvision  # type: ignore[import-untyped]
import torchvision.transforms as tvT  # type: ignore[import-untyped]
from torch.utils.data import DataLoader

import ferroloader as fl
from ferroloader import recipes

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def cases() -> Dict[str, Callable[[], Any]]:
    lanczos = tvT.InterpolationMode.LANCZOS
    return {
        "lanczos_eval": lambda: tvT.Compose(
            [tvT.Resize(256, interpolation=lanczos), tvT.CenterCrop(224), tvT.ToTensor(), tvT.Normalize(MEAN, STD)]
        ),
        "resize_then_rrc": lambda: tvT.Compose(
            [tvT.Resize(256), tvT.RandomResizedCrop(224), tvT.RandomHorizontalFlip(), tvT.ToTensor(), tvT.Normalize(MEAN, STD)]
        ),
        "cifar_test": lambda: tvT.Compose([tvT.ToTensor(), tvT.Normalize([0.49, 0.48, 0.45], [0.25, 0.24, 0.26])]),
    }


def images_per_second(loader: Iterable[Any]) -> float:
    """One whole epoch (a torch DataLoader left mid-epoch keeps decoding into the next round)."""
    images = 0
    start = time.perf_counter()
    for x, _ in loader:
        images += int(x.shape[0])
    return images / (time.perf_counter() - start)


def median_rates(loaders: Dict[str, Iterable[Any]], rounds: int) -> Dict[str, float]:
    """Each loader's median images/s over ``rounds`` rounds of one epoch each, in turn, after a
    warm-up round (in the order given: a torch DataLoader first, so its workers fork before
    ferroloader allocates)."""
    for loader in loaders.values():
        images_per_second(loader)
    rates: Dict[str, List[float]] = {name: [] for name in loaders}
    for _ in range(rounds):
        for name, loader in loaders.items():
            rates[name].append(images_per_second(loader))
    return {name: statistics.median(r) for name, r in rates.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--case", choices=sorted(cases()), default="lanczos_eval")
    which.add_argument("--transform", metavar="FILE.py:NAME")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args()
    transform = recipes.load_transform(args.transform) if args.transform else cases()[args.case]()
    warnings.simplefilter("ignore")  # the tail's UserWarning, on purpose here

    def as_tail(img: Any) -> Any:
        return transform(img)

    dataset = torchvision.datasets.ImageFolder(args.folder, transform=transform)
    common = dict(batch_size=args.batch_size, shuffle=True, num_workers=args.workers)
    loaders: Dict[str, Iterable[Any]] = {
        "torchvision": DataLoader(dataset, persistent_workers=args.workers > 0, **common),
        "native": fl.Loader(fl.ImageFolder(args.folder), transform=transform, python_tail="error", **common),
        "tail": fl.Loader(
            fl.ImageFolder(args.folder), transform=as_tail, python_tail="allow",
            persistent_workers=args.workers > 0, **common,
        ),
    }
    median = median_rates(loaders, args.rounds)
    tv, native, tail = median["torchvision"], median["native"], median["tail"]
    print(f"{args.transform or args.case}, {args.rounds} rounds, {args.workers} workers (median img/s):")
    print(f"  torchvision DataLoader {tv:10.0f}")
    print(f"  ferroloader native     {native:10.0f}  {native / tv:6.2f}x torchvision")
    print(f"  ferroloader tail       {tail:10.0f}  {tail / tv:6.2f}x torchvision  (native {native / tail:.2f}x the tail)")


if __name__ == "__main__":
    main()
