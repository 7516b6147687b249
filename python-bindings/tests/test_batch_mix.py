"""torchvision v2's MixUp and CutMix run natively on each batch: given as ``batch_transform`` or
inside the ``collate_fn`` torchvision's reference train.py writes. The reference is the v2
transform itself, applied with the parameters the loader drew (``BatchMix.draw``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import pytest
import torch
import torchvision
import torchvision.transforms as tv
import torchvision.transforms.v2 as v2
from torch.utils.data import default_collate

import ferroloader as fl
from ferroloader import _native
from ferroloader._batchmix import BatchMix, collated_mixing

CLASSES = 3  # the folder fixture's


def mixup_cutmix(p: Any = None) -> Any:
    return v2.RandomChoice([v2.MixUp(alpha=0.2, num_classes=CLASSES), v2.CutMix(alpha=1.0, num_classes=CLASSES)], p=p)


def reference_collate(mixing: Any) -> Any:
    """torchvision's references/classification/train.py, as written there."""

    def collate_fn(batch):  # type: ignore[no-untyped-def]
        return mixing(*default_collate(batch))

    return collate_fn


def dataset(folder: Path, transform: Any = None) -> Any:
    transform = transform or tv.Compose([tv.RandomResizedCrop(24), tv.RandomHorizontalFlip(), tv.ToTensor()])
    return torchvision.datasets.ImageFolder(str(folder), transform=transform)


Batches = List[Tuple[torch.Tensor, torch.Tensor]]


def run(loader: Any) -> Batches:
    return [(x.clone(), y.clone()) for x, y in loader]


def expected(mix: BatchMix, plain: Batches, seed: int, epoch: int) -> Batches:
    """The plain batches through the v2 transforms, with the draws the loader made."""
    out = []
    for batch, (x, y) in enumerate(plain):
        draw = mix.draw((seed, epoch, batch), x.shape[-2], x.shape[-1])
        if draw.kind == "MixUp":
            t: Any = v2.MixUp(alpha=1.0, num_classes=CLASSES)
            params = {"lam": draw.lam}
        else:
            t = v2.CutMix(alpha=1.0, num_classes=CLASSES)
            params = {"box": draw.box, "lam_adjusted": draw.lam}
        params.update(labels=y, batch_size=len(y))
        out.append((t.transform(x, params), t.transform(y, params)))
    return out


def same(a: Batches, b: Batches) -> bool:
    return len(a) == len(b) and all(torch.equal(x, u) and torch.equal(y, v) for (x, y), (u, v) in zip(a, b))


def test_the_kernels_are_torchvisions_arithmetic_to_the_bit() -> None:
    rng = np.random.default_rng(0)
    images = torch.from_numpy(rng.standard_normal((5, 3, 17, 23), dtype=np.float32))
    labels = torch.arange(5) % CLASSES
    mixup = v2.MixUp(num_classes=CLASSES)
    for lam in (0.0, 1e-7, 0.3, 0.5, 0.9999, 1.0, float(np.float32(0.123456789))):
        got = images.clone()
        _native.mix_batch(got.numpy(), lam=lam)
        assert torch.equal(got, mixup.transform(images, {"lam": lam, "labels": labels, "batch_size": 5})), lam
    cutmix = v2.CutMix(num_classes=CLASSES)
    pixels = torch.from_numpy(rng.integers(0, 256, (4, 3, 17, 23), dtype=np.uint8))
    for batch in (images, pixels):
        for box in ((0, 0, 23, 17), (3, 2, 20, 9), (22, 16, 23, 17), (5, 5, 5, 12), (0, 0, 0, 0)):
            got = batch.clone()
            _native.mix_batch(got.numpy(), box=box)
            params = {"box": box, "lam_adjusted": 0.5, "labels": labels[: len(batch)], "batch_size": len(batch)}
            assert torch.equal(got, cutmix.transform(batch, params)), box


def test_the_kernels_refuse_what_torchvision_would_not_mix() -> None:
    with pytest.raises(TypeError, match="MixUp needs a float32"):
        _native.mix_batch(np.zeros((2, 3, 4, 4), np.uint8), lam=0.5)
    with pytest.raises(ValueError, match="lam"):
        _native.mix_batch(np.zeros((2, 3, 4, 4), np.float32), lam=1.5)
    with pytest.raises(ValueError, match="box"):
        _native.mix_batch(np.zeros((2, 3, 4, 4), np.float32), box=(0, 0, 5, 4))
    with pytest.raises(ValueError, match="not C-contiguous"):
        _native.mix_batch(np.zeros((2, 3, 4, 8), np.float32)[..., ::2], lam=0.5)
    with pytest.raises(TypeError, match="give lam"):
        _native.mix_batch(np.zeros((2, 3, 4, 4), np.float32))


@pytest.mark.parametrize("form", ["batch_transform", "reference collate_fn"])
def test_a_loader_mixes_each_batch_natively_as_torchvision_would(folder: Path, form: str) -> None:
    mixing = mixup_cutmix()
    kw: Any = {"batch_transform": mixing} if form == "batch_transform" else {"collate_fn": reference_collate(mixing)}
    loader = fl.Loader(dataset(folder), 4, shuffle=True, num_workers=2, seed=5, **kw)
    assert loader.batch_mix is not None and loader.batch_mix.probabilities.tolist() == [0.5, 0.5]
    plain = fl.Loader(dataset(folder), 4, shuffle=True, num_workers=2, seed=5)
    for epoch in range(2):
        got, want = run(loader), expected(loader.batch_mix, run(plain), 5, epoch)
        assert same(got, want)
        assert got[0][1].shape == (4, CLASSES) and got[0][1].dtype == torch.float32
    kinds = {loader.batch_mix.draw((5, 0, b), 24, 24).kind for b in range(40)}
    assert kinds == {"MixUp", "CutMix"}


def test_mixed_batches_are_the_same_whatever_the_workers_and_on_resume(folder: Path) -> None:
    def make(**kw: Any) -> fl.Loader:
        return fl.Loader(dataset(folder), 4, shuffle=True, seed=2, batch_transform=mixup_cutmix(), **kw)

    want = run(make(num_workers=2))
    assert same(run(make(num_workers=0)), want)
    unordered = make(num_workers=2, in_order=False)
    got = {tuple(it.indices.tolist()): (x.clone(), y.clone()) for it in [iter(unordered)] for x, y in it}
    ordered = make(num_workers=1)
    for x, y in (it := iter(ordered)):
        u, v = got[tuple(it.indices.tolist())]
        assert torch.equal(x, u) and torch.equal(y, v)
    resumed = make(num_workers=2)
    it = iter(resumed)
    next(it), next(it)
    state = resumed.state_dict()
    again = make(num_workers=1)
    again.load_state_dict(state)
    assert same(run(again), want[2:])


def test_the_draws_follow_torchvisions_distributions() -> None:
    torch.manual_seed(0)
    draws = 4000
    mix = BatchMix.of(mixup_cutmix(p=[0.75, 0.25]))
    assert mix is not None
    ours = [mix.draw((1, 0, b), 32, 48) for b in range(draws)]
    kinds = [d.kind for d in ours]
    assert abs(kinds.count("MixUp") / draws - 0.75) < 0.03
    # MixUp's lambda against torchvision's own draws (two-sample Kolmogorov-Smirnov).
    mixup = v2.MixUp(alpha=0.2, num_classes=CLASSES)
    theirs = np.array([mixup.make_params([])["lam"] for _ in range(draws)])
    assert ks(np.array([d.lam for d in ours if d.kind == "MixUp"]), theirs) < 0.05
    # CutMix's boxes: their area (the labels' lambda) and corners.
    cutmix = v2.CutMix(alpha=1.0, num_classes=CLASSES)
    image = torch.zeros(1, 3, 32, 48)
    their_params = [cutmix.make_params([image]) for _ in range(draws)]
    our_cuts = [d for d in ours if d.kind == "CutMix"]
    assert ks(np.array([d.lam for d in our_cuts]), np.array([p["lam_adjusted"] for p in their_params])) < 0.08
    for corner in range(4):
        assert ks(np.array([d.box[corner] for d in our_cuts]), np.array([p["box"][corner] for p in their_params])) < 0.08


def ks(a: np.ndarray, b: np.ndarray) -> float:
    """The two-sample Kolmogorov-Smirnov statistic."""
    grid = np.sort(np.concatenate([a, b]))
    return float(np.abs(np.searchsorted(np.sort(a), grid, "right") / len(a) - np.searchsorted(np.sort(b), grid, "right") / len(b)).max())


def test_what_is_not_torchvisions_mixing_or_not_its_batches_runs_as_given(folder: Path) -> None:
    def other_collate(batch):  # type: ignore[no-untyped-def]
        images, labels = default_collate(batch)
        return mixup_cutmix()(images, labels)

    assert collated_mixing(other_collate) is None
    assert collated_mixing(reference_collate(mixup_cutmix())) is not None

    def imported_inside(mixing: Any) -> Any:
        from torch.utils.data import default_collate as collate

        return lambda batch: mixing(*collate(batch))

    assert collated_mixing(imported_inside(mixup_cutmix())) is not None
    assert collated_mixing(lambda batch: mixup_cutmix()(*default_collate(batch))) is None  # a call, not a load
    assert BatchMix.of(v2.MixUp(alpha=0.2)) is None  # no num_classes: torchvision needs one-hot labels
    assert BatchMix.of(v2.RandomChoice([v2.MixUp(num_classes=3), v2.RandomHorizontalFlip()])) is None
    runs_as_given = [
        fl.Loader(dataset(folder), 4, batch_transform=mixup_cutmix(), tensor_type="numpy"),
        fl.Loader(dataset(folder, tv.Compose([tv.CenterCrop(24), tv.PILToTensor()])), 4,
                  batch_transform=v2.MixUp(num_classes=CLASSES)),  # uint8: torchvision's MixUp refuses it
        fl.Loader(fl.ImageFolder(folder), 4, transform=tv.Compose([tv.CenterCrop(24), tv.ToTensor()]),
                  collate_fn=other_collate),
    ]
    assert all(loader.batch_mix is None for loader in runs_as_given)
    x, y = next(iter(runs_as_given[2]))
    assert y.shape == (4, CLASSES)
    # CutMix alone mixes uint8 batches natively, as torchvision does.
    pixels = fl.Loader(dataset(folder, tv.Compose([tv.CenterCrop(24), tv.PILToTensor()])), 4,
                       batch_transform=v2.CutMix(num_classes=CLASSES))
    assert pixels.batch_mix is not None and next(iter(pixels))[0].dtype == torch.uint8


def test_each_batchs_mixing_is_a_span_of_the_worker_that_completed_it_named_by_the_choice(folder: Path) -> None:
    loader = fl.Loader(dataset(folder), 4, num_workers=2, batch_transform=mixup_cutmix(), profile="spans")
    run(loader)
    spans = loader.profile().to_dict()["pipelines"][0]["spans"]
    mixing = [s for s in spans if s["op"].startswith("RandomChoice/")]
    assert len(mixing) == len(loader) and {s["op"] for s in mixing} <= {"RandomChoice/MixUp", "RandomChoice/CutMix"}
    # Planned when the epoch starts, prefetch_batches + 1 ahead: a batch that completes before
    # its plan (only the first ones can) is mixed by the consumer; the others, by the workers.
    workers = [s["worker"] for s in mixing]
    assert set(workers) <= {0, 1, _native.CONSUMER}
    assert sum(w != _native.CONSUMER for w in workers) >= len(loader) - loader.prefetch_batches - 1
    assert {s["batch"] for s in mixing} == {s["batch"] for s in spans if s["op"] == "decode"}


@pytest.mark.parametrize("in_order", [True, False])
def test_the_workers_mix_as_the_consumer_does(folder: Path, in_order: bool) -> None:
    # on_error="skip" leaves every batch to the consumer (batches are only known as delivered);
    # with nothing to skip, the batches must be the ones the workers mixed.
    def loader(on_error: Any) -> fl.Loader:
        return fl.Loader(dataset(folder), 4, shuffle=True, num_workers=2, seed=9, in_order=in_order,
                         on_error=on_error, batch_transform=mixup_cutmix(), profile="spans")

    def by_content(batches: Batches) -> Batches:  # completion order differs from run to run
        return batches if in_order else sorted(batches, key=lambda b: float(b[0].sum()))

    by_workers, by_consumer = loader("raise"), loader("skip")
    got, want = by_content(run(by_workers)), by_content(run(by_consumer))
    assert len(got) == len(want) == 5
    assert all(torch.equal(x, u) and torch.equal(y, v) for (x, y), (u, v) in zip(got, want))
    workers = {s["worker"] for s in by_consumer.profile().to_dict()["pipelines"][0]["spans"] if "Mix" in s["op"]}
    assert workers == {_native.CONSUMER}


def test_a_mixing_loader_keeps_one_more_batch_in_flight_unless_told(folder: Path) -> None:
    # A batch a worker is mixing holds its place in the window while the others go on.
    assert fl.Loader(dataset(folder), 4, batch_transform=mixup_cutmix()).prefetch_batches == 3
    assert fl.Loader(dataset(folder), 4, collate_fn=reference_collate(mixup_cutmix())).prefetch_batches == 3
    assert fl.Loader(dataset(folder), 4, batch_transform=mixup_cutmix(), prefetch_batches=2).prefetch_batches == 2
    assert fl.Loader(dataset(folder), 4).prefetch_batches == 2


def test_completion_order_batches_resume_mixed_as_the_uninterrupted_run_mixed_them(folder: Path) -> None:
    # Out of order, a batch's draws are keyed by its planned number, which a resumed epoch
    # keeps (batch_numbers): each batch is mixed the same, whichever thread mixes it.
    def loader() -> fl.Loader:
        return fl.Loader(dataset(folder), 4, shuffle=True, num_workers=2, seed=4, in_order=False,
                         batch_transform=mixup_cutmix())

    def by_indices(it: Any, count: Optional[int] = None) -> Dict[Tuple[int, ...], Tuple[torch.Tensor, torch.Tensor]]:
        out = {}
        for n, (x, y) in enumerate(it):
            out[tuple(it.indices.tolist())] = (x.clone(), y.clone())
            if count is not None and n + 1 == count:
                break
        return out

    whole = by_indices(iter(loader()))
    first = loader()
    it = iter(first)
    seen = by_indices(it, 2)
    state = first.state_dict()
    del it
    resumed = loader()
    resumed.load_state_dict(state)
    rest = by_indices(iter(resumed))
    assert len(whole) == 5 and set(seen) | set(rest) == set(whole) and not set(seen) & set(rest)
    for key, (x, y) in {**seen, **rest}.items():
        assert torch.equal(x, whole[key][0]) and torch.equal(y, whole[key][1]), key
