#!/usr/bin/env python3
"""A real CUDA training step fed by ferroloader or by torchvision's DataLoader, alternately.

Both feed the same ImageFolder through the same torchvision transform (the ImageNet train
transform: RandomResizedCrop(224), RandomHorizontalFlip, ToTensor, Normalize; ``--recipe NAME``
one of torchvision's reference training presets, as in bench_vs_torch.py) with the same batch
size and worker count, both with ``pin_memory=True`` and ``non_blocking`` copies, into a
torchvision model trained with SGD under bf16 autocast in channels-last. Each round runs
``--steps`` steps of each loader (order flipped every round; a warm-up round discarded) and
measures images per second and the share of the step time spent waiting for the next batch
(``next()`` on the loader). Prints medians over rounds and the ratio. Needs a CUDA device.

Usage: bench_train_cuda.py FOLDER [--model resnet50] [--batch-size 128] [--workers CORES]
       [--steps 40] [--rounds 3] [--recipe NAME]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List, Tuple

import torch
import torchvision  # type: ignore[import-untyped]
from torch.utils.data import DataLoader

import ferroloader as fl
from bench_vs_torch import train_transform  # this script's folder is on sys.path
from ferroloader import recipes


def endless(loader: Any) -> Iterator[Tuple[torch.Tensor, torch.Tensor]]:
    while True:
        yield from loader


def run_steps(
    batches: Iterator[Tuple[torch.Tensor, torch.Tensor]],
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    steps: int,
) -> Tuple[float, float]:
    """Images per second and the share of wall time spent in ``next()``, over ``steps``."""
    loss_fn = torch.nn.CrossEntropyLoss()
    waited = 0.0
    images_seen = 0
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(steps):
        asked = time.perf_counter()
        images, labels = next(batches)
        waited += time.perf_counter() - asked
        images = images.cuda(non_blocking=True).to(memory_format=torch.channels_last)
        labels = labels.cuda(non_blocking=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = loss_fn(model(images), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        images_seen += len(labels)
        del images, labels
    torch.cuda.synchronize()
    elapsed = time.perf_counter() - start
    return images_seen / elapsed, waited / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("folder", type=Path)
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--recipe", default=None, help="a torchvision reference preset: ta_wide+re, ...")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("bench_train_cuda: needs a CUDA device")
    torch.backends.cudnn.benchmark = True
    transform = recipes.recipe(args.recipe) if args.recipe else train_transform()
    dataset = torchvision.datasets.ImageFolder(str(args.folder), transform=transform)
    model = torchvision.models.get_model(args.model, num_classes=len(dataset.classes))
    model = model.cuda().to(memory_format=torch.channels_last)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loaders: Dict[str, Any] = {
        "torch DataLoader": DataLoader(
            dataset,
            args.batch_size,
            shuffle=True,
            num_workers=args.workers,
            pin_memory=True,
            persistent_workers=True,
            drop_last=True,
        ),
        "ferroloader": fl.Loader(
            dataset, args.batch_size, shuffle=True, num_workers=args.workers, pin_memory=True,
            drop_last=True,
        ),
    }
    streams = {name: endless(loader) for name, loader in loaders.items()}
    print(
        f"{torch.cuda.get_device_name()}, {args.model} bf16, batch {args.batch_size}, "
        f"{args.recipe or 'ImageNet train transform'}, "
        f"{args.workers} workers on {os.cpu_count()} cores; ferroloader pinning: "
        f"{loaders['ferroloader'].pinning}"
    )
    # GPU-only ceiling: the same step on one batch kept on the device (its copy is a no-op).
    fixed_images, fixed_labels = next(streams["ferroloader"])
    fixed = (fixed_images.cuda(), fixed_labels.cuda())
    results: Dict[str, List[Tuple[float, float]]] = {name: [] for name in loaders}
    gpu_only: List[float] = []
    for round_ in range(args.rounds + 1):
        names = list(loaders) if round_ % 2 == 0 else list(reversed(loaders))
        for name in names:
            measured = run_steps(streams[name], model, optimizer, args.steps)
            if round_ > 0:
                results[name].append(measured)
        ceiling, _ = run_steps(iter(lambda: fixed, None), model, optimizer, args.steps)
        if round_ > 0:
            gpu_only.append(ceiling)
    print(f"{'GPU only (one batch replayed)':32s} {statistics.median(gpu_only):8.0f} img/s")
    for name, rows in results.items():
        rate = statistics.median(r[0] for r in rows)
        wait = statistics.median(r[1] for r in rows)
        print(f"{name:32s} {rate:8.0f} img/s   waiting for data {wait:6.1%} of the step time")
    ratios = [f[0] / t[0] for f, t in zip(results["ferroloader"], results["torch DataLoader"])]
    print(
        f"ferroloader / DataLoader: {statistics.median(ratios):.2f}x "
        f"(min {min(ratios):.2f}, max {max(ratios):.2f}, {len(ratios)} rounds)"
    )


if __name__ == "__main__":
    main()
