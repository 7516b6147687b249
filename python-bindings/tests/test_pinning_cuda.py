"""``pin_memory=True`` on a real GPU: batches come pinned from the page-locked ring, and
asynchronous copies from them land intact even when the CPU batch is dropped at once and the
copy runs long after (a slow kernel queued ahead of it), on the default stream and on a side
stream. Skipped without CUDA; test_pinning.py covers the same logic with a stand-in runtime."""

from __future__ import annotations

from pathlib import Path
from typing import List, Tuple

import pytest
import torch

import ferroloader as fl
from ferroloader import transforms as T

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

# Long enough that a worker would refill a released buffer before the copy reads it.
SLOW_KERNEL_CYCLES = 50_000_000


def transform() -> T.Compose:
    return T.Compose([T.RandomResizedCrop(64), T.RandomHorizontalFlip(), T.ToTensor()])


def loader(folder: Path, **kw: object) -> fl.Loader:
    return fl.Loader(
        fl.ImageFolder(folder), 2, shuffle=True, num_workers=2, transform=transform(), **kw
    )


def reference(folder: Path) -> List[Tuple[torch.Tensor, torch.Tensor]]:
    return [(x.clone(), y.clone()) for x, y in loader(folder)]


def test_batches_come_pinned_from_the_ring(folder: Path) -> None:
    pinned = loader(folder, pin_memory=True)
    assert pinned.pinning == "ring"
    it = iter(pinned)
    images, labels = next(it)
    assert images.is_pinned() and labels.is_pinned()
    assert images.data_ptr() == it.indices.base.images_address  # type: ignore[union-attr]


def test_copies_from_dropped_batches_on_the_default_stream_are_intact(folder: Path) -> None:
    want = reference(folder)
    got = []
    for images, labels in loader(folder, pin_memory=True):
        torch.cuda._sleep(SLOW_KERNEL_CYCLES)
        got.append((images.cuda(non_blocking=True), labels.cuda(non_blocking=True)))
        del images, labels  # the ring may refill this buffer once the copy has run, not before
    torch.cuda.synchronize()
    assert len(got) == len(want) == 9
    for (x, y), (wx, wy) in zip(got, want):
        assert torch.equal(x.cpu(), wx) and torch.equal(y.cpu(), wy)


def test_copies_on_a_side_stream_are_intact(folder: Path) -> None:
    """A prefetcher's pattern: copy on a side stream, drop the CPU batch inside it."""
    want = reference(folder)
    side = torch.cuda.Stream()
    got = []
    for images, labels in loader(folder, pin_memory=True):
        with torch.cuda.stream(side):
            torch.cuda._sleep(SLOW_KERNEL_CYCLES)
            x = images.cuda(non_blocking=True)
            y = labels.cuda(non_blocking=True)
            del images, labels
        torch.cuda.current_stream().wait_stream(side)
        got.append((x, y))
    torch.cuda.synchronize()
    for (x, y), (wx, wy) in zip(got, want):
        assert torch.equal(x.cpu(), wx) and torch.equal(y.cpu(), wy)


class _TwoViews:
    def __init__(self) -> None:
        import torchvision.transforms as tv

        self.large = tv.Compose([tv.RandomResizedCrop(64), tv.ToTensor()])
        self.small = tv.Compose([tv.RandomResizedCrop(32), tv.ToTensor()])

    def __call__(self, image: object) -> List[torch.Tensor]:
        return [self.large(image), self.small(image)]


def test_views_come_pinned_and_equal_the_unpinned_ones(folder: Path) -> None:
    from torchvision.datasets import ImageFolder

    def views(**kw: object) -> List[List[torch.Tensor]]:
        ld = fl.Loader(ImageFolder(str(folder), _TwoViews()), 3, seed=4, num_workers=2, **kw)
        assert ld.views is not None and ld._python is None
        return [x for x, _ in ld]

    pinned, plain = views(pin_memory=True), views()
    assert all(v.is_pinned() and v.is_contiguous() for batch in pinned for v in batch)
    on_device = [[v.cuda(non_blocking=True) for v in batch] for batch in pinned]
    torch.cuda.synchronize()
    assert all(torch.equal(a.cpu(), b) for x, y in zip(on_device, plain) for a, b in zip(x, y))
