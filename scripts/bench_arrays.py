#!/usr/bin/env python3
"""torchvision's in-memory datasets (CIFAR-10, MNIST) through the torch DataLoader and through
ferroloader, alternately: the same dataset object, the transform set on it.

The datasets are torchvision's own classes holding made-up images (smooth colour fields with
noise, as the real ones are not downloadable here); their ``__getitem__`` is torchvision's, so
the DataLoader side runs exactly what a user's script runs. Each round runs one whole epoch of
each loader in turn, after a warm-up round (torch first, so that its workers fork before
ferroloader allocates); prints each loader's median images/s and the ratio of the medians.

Cases (``--case``): ``cifar_train`` (RandomCrop(32, padding=4), RandomHorizontalFlip, ToTensor,
Normalize), ``cifar_test`` (ToTensor, Normalize), ``cifar_224`` (Resize(224), ToTensor,
Normalize: a pretrained model's input), ``mnist`` (ToTensor, Normalize((0.1307,), (0.3081,))).

Usage: bench_arrays.py [--case NAME] [--images 20000] [--rounds 5] [--workers 2]
       [--batch-size 128]
"""

from __future__ import annotations

import argparse
from typing import Any, Callable, Dict, Iterable, Tuple

import numpy as np
import torch
import torchvision  # type: ignore[import-untyped]
import torchvision.transforms as tvT  # type: ignore[import-untyped]
from torch.utils.data import DataLoader

import ferroloader as fl
from bench_tails import median_rates  # scripts/ is on the path when a script runs

CIFAR_MEAN, CIFAR_STD = (0.4914, 0.4822, 0.4465), (0.247, 0.243, 0.261)


def images(n: int, size: int, channels: int, seed: int = 0) -> np.ndarray:
    """``(n, size, size, channels)`` uint8: smooth fields plus noise, made in chunks."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:size, 0:size].astype(np.float32)
    out = np.empty((n, size, size, channels), np.uint8)
    for start in range(0, n, 1000):
        k = min(1000, n - start)
        phase = rng.uniform(0, 6, (k, 1, 1, channels)).astype(np.float32)
        field = 127 + 100 * np.sin((x[None, ..., None] + 2 * y[None, ..., None]) / size * 3 + phase)
        noise = rng.normal(0, 20, field.shape).astype(np.float32)
        out[start : start + k] = np.clip(field + noise, 0, 255).astype(np.uint8)
    return out


def cifar10(n: int, transform: Any) -> Any:
    """torchvision's CIFAR10 with the attributes its ``__init__`` sets from the batch files."""
    ds = torchvision.datasets.CIFAR10.__new__(torchvision.datasets.CIFAR10)
    torchvision.datasets.VisionDataset.__init__(ds, "unused", transform=transform)
    ds.train = True
    ds.data = images(n, 32, 3)
    ds.targets = np.random.default_rng(1).integers(0, 10, n).tolist()
    ds.classes = [str(i) for i in range(10)]
    return ds


def mnist(n: int, transform: Any) -> Any:
    """torchvision's MNIST with the tensors its ``__init__`` loads."""
    ds = torchvision.datasets.MNIST.__new__(torchvision.datasets.MNIST)
    torchvision.datasets.VisionDataset.__init__(ds, "unused", transform=transform)
    ds.train = True
    ds.data = torch.from_numpy(images(n, 28, 1)[..., 0])
    ds.targets = torch.from_numpy(np.random.default_rng(1).integers(0, 10, n))
    return ds


def cases() -> Dict[str, Tuple[Callable[[int, Any], Any], Callable[[], Any]]]:
    normalize = tvT.Normalize(CIFAR_MEAN, CIFAR_STD)
    return {
        "cifar_train": (
            cifar10,
            lambda: tvT.Compose([tvT.RandomCrop(32, padding=4), tvT.RandomHorizontalFlip(), tvT.ToTensor(), normalize]),
        ),
        "cifar_test": (cifar10, lambda: tvT.Compose([tvT.ToTensor(), normalize])),
        "cifar_224": (cifar10, lambda: tvT.Compose([tvT.Resize(224), tvT.ToTensor(), normalize])),
        "mnist": (mnist, lambda: tvT.Compose([tvT.ToTensor(), tvT.Normalize((0.1307,), (0.3081,))])),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--case", choices=sorted(cases()), default="cifar_train")
    parser.add_argument("--images", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=128)
    args = parser.parse_args()
    make, transform = cases()[args.case]
    dataset = make(args.images, transform())
    common = dict(batch_size=args.batch_size, shuffle=True, num_workers=args.workers)
    loaders: Dict[str, Iterable[Any]] = {
        "torch": DataLoader(dataset, persistent_workers=args.workers > 0, **common),
        "ferroloader": fl.Loader(dataset, python_tail="error", **common),
    }
    median = median_rates(loaders, args.rounds)
    torch_rate, ours = median["torch"], median["ferroloader"]
    print(f"{args.case}, {args.images} images, {args.rounds} rounds, {args.workers} workers (median img/s):")
    print(f"  torch DataLoader {torch_rate:10.0f}")
    print(f"  ferroloader      {ours:10.0f}  {ours / torch_rate:6.2f}x")


if __name__ == "__main__":
    main()
