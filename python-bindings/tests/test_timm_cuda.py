"""``ferroloader.timm.create_loader`` and batch mixing on a real GPU: timm's prefetcher path
(``device='cuda'``, its side stream, its normalize and erasing on the device) and a pinned
loader mixing its batches in place. The reference is timm's own ``create_loader`` on the same
device, and the same loader without pinning. Skipped without CUDA; test_timm_loader.py and
test_batch_mix.py check the same logic on the CPU."""

from __future__ import annotations

from pathlib import Path
from typing import Any, List, Tuple

import numpy as np
import pytest
import torch
import timm.data as td
import torchvision.transforms.v2 as v2
from timm.data import FastCollateMixup

import ferroloader as fl
from ferroloader._fastmix import batch_rng
from ferroloader.timm import PrefetchLoader, create_loader

pytestmark = [
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]

CUDA = torch.device("cuda")
SIZE = (3, 32, 32)
Batches = List[Tuple[torch.Tensor, torch.Tensor]]


def dataset(folder: Path) -> Any:
    return td.create_dataset("", root=str(folder), split="train")


def run(loader: Any) -> Batches:
    return [(x.clone(), y.clone()) for x, y in loader]


@pytest.mark.parametrize("img_dtype", [torch.float32, torch.bfloat16])
def test_an_eval_prefetcher_on_the_gpu_equals_timms(folder: Path, img_dtype: torch.dtype) -> None:
    kw: Any = dict(is_training=False, num_workers=2, device=CUDA, img_dtype=img_dtype, crop_pct=0.8)
    ours = create_loader(dataset(folder), SIZE, 4, **kw)
    theirs = td.create_loader(dataset(folder), SIZE, 4, **kw)
    assert isinstance(ours, PrefetchLoader)
    got, want = run(ours), run(theirs)
    assert len(got) == len(want) == 5
    for (x, y), (u, v) in zip(got, want):
        assert x.device.type == u.device.type == "cuda" and x.dtype == u.dtype == img_dtype
        assert torch.equal(y, v)
        assert torch.equal(x, u), (x.float() - u.float()).abs().max()


def test_the_prefetchers_mixing_on_the_gpu_equals_timms_collate(folder: Path) -> None:
    args: Any = dict(is_training=True, no_aug=True, num_workers=2, device=CUDA, seed=3)

    def mixup() -> FastCollateMixup:
        return FastCollateMixup(mixup_alpha=0.8, cutmix_alpha=1.0, num_classes=3, label_smoothing=0.1)

    mixed = create_loader(dataset(folder), SIZE, 6, collate_fn=mixup(), **args)
    plain = create_loader(dataset(folder), SIZE, 6, **args).loader  # the uint8 batches under the prefetcher
    reference = mixup()
    mean = torch.tensor([255 * m for m in td.IMAGENET_DEFAULT_MEAN], device=CUDA).view(1, 3, 1, 1)
    std = torch.tensor([255 * s for s in td.IMAGENET_DEFAULT_STD], device=CUDA).view(1, 3, 1, 1)
    got = run(mixed)
    assert len(got) == 3
    for b, ((x, y), (raw_x, raw_y)) in enumerate(zip(got, run(plain))):
        np.random.set_state(batch_rng((3, 0, b)).get_state())
        want_x, want_y = reference([(raw_x[i].clone(), int(raw_y[i])) for i in range(len(raw_y))])
        assert x.device.type == "cuda" and y.device.type == "cuda"
        assert torch.equal(y.cpu(), want_y)
        assert torch.equal(x, want_x.to(CUDA).float().sub_(mean).div_(std))


def test_erasing_on_the_gpu_runs_on_the_prefetchers_batches(folder: Path) -> None:
    # Not no_aug: timm's create_loader then gives its prefetcher no erasing.
    args: Any = dict(is_training=True, num_workers=2, device=CUDA, seed=5, re_mode="const")
    erased = run(create_loader(dataset(folder), SIZE, 6, re_prob=1.0, **args))
    clean = run(create_loader(dataset(folder), SIZE, 6, re_prob=0.0, **args))
    for (x, y), (u, v) in zip(erased, clean):
        assert torch.equal(y, v)
        assert all((x[i] == 0).any() and not torch.equal(x[i], u[i]) for i in range(len(x)))


def test_a_prefetcher_on_the_gpu_resumes_where_the_consumer_stood(folder: Path) -> None:
    args: Any = dict(is_training=True, num_workers=2, device=CUDA, seed=11, auto_augment="rand-m9-mstd0.5")
    whole = run(create_loader(dataset(folder), SIZE, 4, **args))
    loader = create_loader(dataset(folder), SIZE, 4, **args)
    it = iter(loader)
    first = next(it)[0].clone()
    state = loader.state_dict()
    del it
    resumed = create_loader(dataset(folder), SIZE, 4, **args)
    resumed.load_state_dict(state)
    rest = run(resumed)
    assert torch.equal(first, whole[0][0])
    assert len(rest) == len(whole) - 1
    assert all(torch.equal(x, u) and torch.equal(y, v) for (x, y), (u, v) in zip(rest, whole[1:]))


def test_a_pinned_loader_mixes_its_batches_as_an_unpinned_one(folder: Path) -> None:
    def loader(pin_memory: bool) -> fl.Loader:
        return fl.Loader(
            fl.ImageFolder(folder),
            6,
            shuffle=True,
            num_workers=2,
            seed=2,
            pin_memory=pin_memory,
            transform=v2.Compose([v2.RandomResizedCrop(32), v2.ToImage(), v2.ToDtype(torch.float32, scale=True)]),
            batch_transform=v2.RandomChoice([v2.MixUp(alpha=0.2, num_classes=3), v2.CutMix(alpha=1.0, num_classes=3)]),
        )

    pinned = loader(True)
    assert pinned.pinning == "ring"
    want = run(loader(False))
    got = []
    for images, labels in pinned:
        assert images.is_pinned()
        torch.cuda._sleep(50_000_000)  # the copy runs long after the batch is dropped
        got.append((images.to(CUDA, non_blocking=True), labels.to(CUDA, non_blocking=True)))
    torch.cuda.synchronize()
    assert len(got) == len(want) == 3
    for (x, y), (u, v) in zip(got, want):
        assert torch.equal(x.cpu(), u) and torch.equal(y.cpu(), v)
