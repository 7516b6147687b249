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

``--mix`` adds torchvision's reference MixUp/CutMix collate (``RandomChoice([MixUp(0.2),
CutMix(1.0)])`` after ``default_collate``) to both loaders, and the step trains on the soft
targets. ``--timm AA`` feeds the step as timm's train.py does instead: ``timm.data.create_loader``
against ``ferroloader.timm.create_loader`` with the same arguments (``auto_augment=AA``,
``re_prob=0.25``, ``FastCollateMixup(0.8, 1.0)`` as the collate, the prefetcher on the GPU: its
normalize and erasing run there, and the batches arrive on the device).

Usage: bench_train_cuda.py FOLDER [--model resnet50] [--batch-size 128] [--workers CORES]
       [--steps 40] [--rounds 3] [--recipe NAME | --timm AA] [--mix]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple

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
            logits = model(images)
        # Soft targets (mixed batches) as timm's SoftTargetCrossEntropy, class indices as torch's.
        if labels.dim() == 2:
            loss = torch.sum(-labels * torch.log_softmax(logits.float(), dim=-1), dim=-1).mean()
        else:
            loss = torch.nn.functional.cross_entropy(logits.float(), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        images_seen += len(labels)
        del images, labels
    torch.cuda.synchronize()
    elapsed = time.perf_counter() - start
    return images_seen / elapsed, waited / elapsed


def torchvision_loaders(
    folder: Path, batch_size: int, workers: int, recipe: Optional[str], mix: bool
) -> Tuple[Dict[str, Any], int]:
    """The two loaders of ``folder`` with the same torchvision transform (and collate)."""
    transform = recipes.recipe(recipe) if recipe else train_transform()
    dataset = torchvision.datasets.ImageFolder(str(folder), transform=transform)
    collate = recipes.reference_collate(recipes.mixup_cutmix(len(dataset.classes))) if mix else None
    loaders: Dict[str, Any] = {
        "torch DataLoader": DataLoader(
            dataset,
            batch_size,
            shuffle=True,
            num_workers=workers,
            pin_memory=True,
            persistent_workers=True,
            drop_last=True,
            collate_fn=collate,
        ),
        "ferroloader": fl.Loader(
            dataset, batch_size, shuffle=True, num_workers=workers, pin_memory=True, drop_last=True,
            collate_fn=collate,
        ),
    }
    return loaders, len(dataset.classes)


def timm_loaders(folder: Path, batch_size: int, workers: int, auto_augment: str) -> Tuple[Dict[str, Any], int]:
    """timm's training loaders of ``folder`` as train.py builds them, each over its own
    ``ImageDataset`` and ``FastCollateMixup``, the prefetcher on the GPU."""
    import timm.data  # type: ignore[import-untyped]

    import ferroloader.timm

    def built(create_loader: Any) -> Any:
        dataset = timm.data.create_dataset("", root=str(folder))
        mixup = timm.data.FastCollateMixup(
            mixup_alpha=0.8, cutmix_alpha=1.0, label_smoothing=0.1, num_classes=len(dataset.reader.class_to_idx)
        )
        return create_loader(
            dataset,
            (3, 224, 224),
            batch_size,
            is_training=True,
            auto_augment=auto_augment,
            re_prob=0.25,
            num_workers=workers,
            pin_memory=True,
            persistent_workers=True,
            collate_fn=mixup,
            device=torch.device("cuda"),
        )

    stock = built(timm.data.create_loader)
    classes = len(stock.loader.dataset.reader.class_to_idx)
    return {"timm create_loader": stock, "ferroloader": built(ferroloader.timm.create_loader)}, classes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("folder", type=Path)
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=3)
    choice = parser.add_mutually_exclusive_group()
    choice.add_argument("--recipe", default=None, help="a torchvision reference preset: ta_wide+re, ...")
    choice.add_argument("--timm", metavar="AA", default=None, help="timm's loaders with auto_augment=AA")
    parser.add_argument("--mix", action="store_true", help="torchvision's reference MixUp/CutMix collate")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("bench_train_cuda: needs a CUDA device")
    if args.timm is not None and args.mix:
        parser.error("--timm mixes with timm's FastCollateMixup already; no --mix")
    torch.backends.cudnn.benchmark = True
    if args.timm is not None:
        loaders, classes = timm_loaders(args.folder, args.batch_size, args.workers, args.timm)
        described = f"timm create_loader(auto_augment={args.timm!r}, re_prob=0.25, FastCollateMixup)"
        pinning = loaders["ferroloader"].loader.pinning
    else:
        loaders, classes = torchvision_loaders(args.folder, args.batch_size, args.workers, args.recipe, args.mix)
        described = (args.recipe or "ImageNet train transform") + (" + MixUp/CutMix" if args.mix else "")
        pinning = loaders["ferroloader"].pinning
    model = torchvision.models.get_model(args.model, num_classes=classes)
    model = model.cuda().to(memory_format=torch.channels_last)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    streams = {name: endless(loader) for name, loader in loaders.items()}
    print(
        f"{torch.cuda.get_device_name()}, {args.model} bf16, batch {args.batch_size}, {described}, "
        f"{args.workers} workers on {os.cpu_count()} cores; ferroloader pinning: {pinning}"
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
    stock = next(name for name in results if name != "ferroloader")
    ratios = [f[0] / t[0] for f, t in zip(results["ferroloader"], results[stock])]
    print(
        f"ferroloader / {stock}: {statistics.median(ratios):.2f}x "
        f"(min {min(ratios):.2f}, max {max(ratios):.2f}, {len(ratios)} rounds)"
    )


if __name__ == "__main__":
    main()
