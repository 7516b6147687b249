"""timm's ``FastCollateMixup`` run natively on each uint8 batch (``_native.fast_collate_mix``,
``ferroloader._fastmix``). The reference is timm's own ``FastCollateMixup.__call__``: with
numpy's global generator seeded as our replay of its draws is (kernels), or set to the state of
the generator the loader keyed for the batch (loaders)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Tuple

import numpy as np
import pytest
import torch
import torchvision
import torchvision.transforms as tv
from timm.data import FastCollateMixup
from timm.data.mixup import cutmix_bbox_and_lam, mixup_target

import ferroloader as fl
from ferroloader import _native
from ferroloader._fastmix import FastCollateMix, batch_rng, plan

CLASSES = 3  # the folder fixture's

CONFIGS: Dict[str, Dict[str, Any]] = {
    "mixup": dict(mixup_alpha=0.8),
    "cutmix": dict(mixup_alpha=0.0, cutmix_alpha=1.0),
    "both": dict(mixup_alpha=0.8, cutmix_alpha=1.0, switch_prob=0.5),
    "minmax": dict(mixup_alpha=0.8, cutmix_minmax=(0.2, 0.8)),
    "uncorrected": dict(mixup_alpha=0.3, cutmix_alpha=0.7, correct_lam=False),
    "prob": dict(mixup_alpha=0.8, cutmix_alpha=1.0, prob=0.5),
    "disabled": dict(mixup_alpha=0.8, cutmix_alpha=1.0),
}
MODES = ["batch", "pair", "elem", "half"]


def timm_mixup(config: str, mode: str) -> Any:
    mixup = FastCollateMixup(mode=mode, num_classes=CLASSES, label_smoothing=0.1, **CONFIGS[config])
    mixup.mixup_enabled = config != "disabled"
    return mixup


def samples(images: np.ndarray, labels: np.ndarray, as_numpy: bool = False) -> List[Tuple[Any, int]]:
    """A batch as timm's collate gets it (copies: timm writes into some of them)."""
    return [(x.copy() if as_numpy else torch.from_numpy(x.copy()), int(y)) for x, y in zip(images, labels)]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("config", list(CONFIGS))
def test_the_kernels_and_draws_are_timms_to_the_bit(config: str, mode: str) -> None:
    rng = np.random.default_rng(1)
    images = rng.integers(0, 256, (8, 3, 19, 26), dtype=np.uint8)
    labels = rng.integers(0, CLASSES, 8)
    changed = 0
    for seed in range(25):
        mixup = timm_mixup(config, mode)
        np.random.seed(seed)
        want_x, want_y = mixup(samples(images, labels, as_numpy=seed % 5 == 0))
        np.random.seed(seed)
        drawn = plan(mixup, np.random, 8, 19, 26)
        assert drawn is not None
        got = images.copy()
        _native.fast_collate_mix(got, drawn.mixes)
        n = len(want_x)
        assert n == (4 if mode == "half" else 8)
        assert torch.equal(torch.from_numpy(got[:n]), want_x), seed
        if mode == "half":
            assert np.array_equal(got[4:], images[4:])
        target = mixup_target(torch.from_numpy(labels), CLASSES, drawn.lam, 0.1)[:n]
        assert torch.equal(target, want_y), seed
        changed += not np.array_equal(got[:n], images[:n])
    assert (changed == 0) == (config == "disabled")


def test_the_blend_rounds_each_value_as_torch_does() -> None:
    # Every pair of values at lambdas whose float32 arithmetic lands on and near halves.
    x, y = np.meshgrid(np.arange(256, dtype=np.uint8), np.arange(256, dtype=np.uint8))
    pair = np.stack([x.reshape(1, -1, 1), y.reshape(1, -1, 1)])  # [2, 1, 65536, 1]
    for lam in (0.5, 0.25, 0.75, 0.1, 0.3, 1e-8, float(np.float32(0.9)), 0.0, 1.0):
        got = pair.copy()
        _native.fast_collate_mix(got, [lam, lam])
        a, b = torch.from_numpy(pair[0]), torch.from_numpy(pair[1])
        want_a = torch.round(a.float() * lam + b.float() * (1 - lam)).byte()
        want_b = torch.round(b.float() * lam + a.float() * (1 - lam)).byte()
        assert torch.equal(torch.from_numpy(got[0]), want_a) and torch.equal(torch.from_numpy(got[1]), want_b), lam


def test_the_kernels_refuse_what_they_cannot_mix() -> None:
    with pytest.raises(TypeError, match="uint8"):
        _native.fast_collate_mix(np.zeros((2, 3, 4, 4), np.float32), [0.5, 0.5])
    with pytest.raises(ValueError, match="lam"):
        _native.fast_collate_mix(np.zeros((2, 3, 4, 4), np.uint8), [0.5, 1.5])
    with pytest.raises(ValueError, match="box"):
        _native.fast_collate_mix(np.zeros((2, 3, 4, 4), np.uint8), [(0, 0, 5, 4), None])
    with pytest.raises(ValueError, match="mixes"):
        _native.fast_collate_mix(np.zeros((4, 3, 4, 4), np.uint8), [None] * 3)
    with pytest.raises(ValueError, match="not C-contiguous"):
        _native.fast_collate_mix(np.zeros((2, 3, 4, 8), np.uint8)[..., ::2], [None, None])


def dataset(folder: Path) -> Any:
    transform = tv.Compose([tv.RandomResizedCrop(24), tv.RandomHorizontalFlip(), tv.PILToTensor()])
    return torchvision.datasets.ImageFolder(str(folder), transform=transform)


Batches = List[Tuple[torch.Tensor, torch.Tensor]]


def run(loader: Any) -> Batches:
    return [(x.clone(), y.clone()) for x, y in loader]


def expected(mixup: Any, plain: Batches, seed: int, epoch: int) -> Batches:
    """timm's collate of the plain batches, drawing as the loader drew for each batch."""
    out = []
    for batch, (x, y) in enumerate(plain):
        np.random.set_state(batch_rng((seed, epoch, batch)).get_state())
        out.append(mixup(samples(x.numpy(), y.numpy())))
    return out


def same(a: Batches, b: Batches) -> bool:
    return len(a) == len(b) and all(torch.equal(x, u) and torch.equal(y, v) for (x, y), (u, v) in zip(a, b))


@pytest.mark.parametrize("mode", MODES)
def test_a_loader_mixes_each_batch_natively_as_timms_collate_would(folder: Path, mode: str) -> None:
    mixup = timm_mixup("both", mode)
    loader = fl.Loader(dataset(folder), 4, shuffle=True, num_workers=2, seed=5, drop_last=True,
                       collate_fn=mixup, profile="spans")
    assert isinstance(loader.batch_mix, FastCollateMix)
    plain = fl.Loader(dataset(folder), 4, shuffle=True, num_workers=2, seed=5, drop_last=True)
    for epoch in range(2):
        got = run(loader)
        assert same(got, expected(timm_mixup("both", mode), run(plain), 5, epoch))
        assert got[0][0].shape == ((2 if mode == "half" else 4), 3, 24, 24) and got[0][0].dtype == torch.uint8
        assert got[0][1].shape == (len(got[0][0]), CLASSES) and got[0][1].dtype == torch.float32
    spans = loader.profile().to_dict()["pipelines"][0]["spans"]
    mixing = [s for s in spans if s["op"] == f"FastCollateMixup/{mode}"]
    # Mixed by the workers that completed the batches, or by the consumer where a batch
    # completed before its plan (only the first ones can).
    assert len(mixing) == 2 * len(loader) and {s["worker"] for s in mixing} <= {0, 1, _native.CONSUMER}


def test_the_targets_come_from_the_older_timms_mixup_target_too(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # timm 1.0.29's mixup_target takes no multi_label; the native path must not pass one.
    import timm.data.mixup

    def four_arguments(target: torch.Tensor, num_classes: int, lam: float = 1.0, smoothing: float = 0.0) -> Any:
        return mixup_target(target, num_classes, lam, smoothing)

    want = run(fl.Loader(dataset(folder), 4, shuffle=True, seed=3, num_workers=2, collate_fn=timm_mixup("both", "elem")))
    monkeypatch.setattr(timm.data.mixup, "mixup_target", four_arguments)
    got = run(fl.Loader(dataset(folder), 4, shuffle=True, seed=3, num_workers=2, collate_fn=timm_mixup("both", "elem")))
    assert same(got, want)


def test_mixed_batches_are_the_same_whatever_the_workers_and_on_resume(folder: Path) -> None:
    def make(**kw: Any) -> fl.Loader:
        return fl.Loader(dataset(folder), 4, shuffle=True, seed=2, drop_last=True,
                         collate_fn=timm_mixup("both", "elem"), **kw)

    want = run(make(num_workers=2))
    assert same(run(make(num_workers=0)), want)
    resumed = make(num_workers=2)
    it = iter(resumed)
    next(it), next(it)
    state = resumed.state_dict()
    again = make(num_workers=1)
    again.load_state_dict(state)
    assert same(run(again), want[2:])


def test_mixup_enabled_is_read_when_each_batch_is_planned(folder: Path) -> None:
    # Each batch's draws are made prefetch_batches + 1 batches ahead of its delivery (for the
    # workers to mix it), as DataLoader's workers collate ahead: a change after batch b is read
    # from batch b + prefetch_batches + 2 on, and a change between epochs from the next epoch's
    # first batch (train.py's --mixup-off-epoch).
    mixup = timm_mixup("both", "batch")
    loader = fl.Loader(dataset(folder), 2, num_workers=2, seed=3, drop_last=True, collate_fn=mixup, prefetch_batches=1)
    plain = fl.Loader(dataset(folder), 2, num_workers=2, seed=3, drop_last=True, prefetch_batches=1)
    got = []
    for b, (x, y) in enumerate(loader):
        got.append((x.clone(), y.clone()))
        if b == 1:
            mixup.mixup_enabled = False  # mid-epoch here
    got_next_epoch = run(loader)
    reference = timm_mixup("both", "batch")
    for epoch, batches in enumerate([got, got_next_epoch]):
        raw = run(plain)
        assert len(batches) == len(raw) == 9
        for b, ((x, y), (u, v)) in enumerate(zip(batches, raw)):
            reference.mixup_enabled = epoch == 0 and b <= 3
            np.random.set_state(batch_rng((3, epoch, b)).get_state())
            want_x, want_y = reference(samples(u.numpy(), v.numpy()))
            assert torch.equal(x, want_x) and torch.equal(y, want_y), (epoch, b)
            assert torch.equal(x, u) == (not reference.mixup_enabled), (epoch, b)


def test_what_timm_would_not_mix_natively_runs_timms_collate(folder: Path) -> None:
    floats = fl.Loader(fl.ImageFolder(folder), 4, transform=tv.Compose([tv.CenterCrop(24), tv.ToTensor()]),
                       collate_fn=timm_mixup("mixup", "batch"))
    assert floats.batch_mix is None  # timm's collate of float samples, as given
    odd = fl.Loader(dataset(folder), 5, collate_fn=timm_mixup("mixup", "batch"))
    assert odd.batch_mix is not None
    with pytest.raises(AssertionError, match="even"):
        run(odd)  # timm's own refusal of an odd batch
    multi = timm_mixup("mixup", "batch")
    multi.multi_label = True
    assert plan(multi, np.random, 4, 24, 24) is None
    with pytest.raises(ValueError, match="Multi-label"):
        next(iter(fl.Loader(dataset(folder), 4, collate_fn=multi)))  # timm's own refusal of index labels


def test_the_draws_follow_timms_distributions() -> None:
    draws = 3000
    mixup = timm_mixup("both", "batch")
    mixup.mix_prob, mixup.switch_prob = 0.8, 0.3
    ours = [plan(mixup, batch_rng((1, 0, b)), 2, 32, 48) for b in range(draws)]
    np.random.seed(0)
    theirs = [mixup._params_per_batch() for _ in range(draws)]
    kinds = [("keep" if p.mixes[0] is None else "mixup" if isinstance(p.mixes[0], float) else "cutmix") for p in ours if p]
    their_kinds = ["keep" if lam == 1.0 else "cutmix" if cut else "mixup" for lam, cut in theirs]
    for kind, share in (("keep", 0.2), ("mixup", 0.8 * 0.7), ("cutmix", 0.8 * 0.3)):
        assert abs(kinds.count(kind) / draws - share) < 0.03, kind
        assert abs(their_kinds.count(kind) / draws - share) < 0.03, kind
    # MixUp's lambda against timm's own draws (two-sample Kolmogorov-Smirnov).
    our_lams = np.array([p.lam for p, k in zip(ours, kinds) if p and k == "mixup"])
    their_lams = np.array([lam for (lam, _), k in zip(theirs, their_kinds) if k == "mixup"])
    assert ks(our_lams, their_lams) < 0.06
    # CutMix's boxes: the corrected lambda and the corners, against timm's own.
    our_cuts = [p for p, k in zip(ours, kinds) if p and k == "cutmix"]
    their_cuts = [cutmix_bbox_and_lam((32, 48), lam) for (lam, _), k in zip(theirs, their_kinds) if k == "cutmix"]
    assert ks(np.array([float(p.lam) for p in our_cuts]), np.array([float(lam) for _, lam in their_cuts])) < 0.1
    for corner, theirs_at in enumerate((2, 0, 3, 1)):  # (x1, y1, x2, y2) from timm's (yl, yh, xl, xh)
        ours_at = np.array([p.mixes[0][corner] for p in our_cuts])  # type: ignore[index]
        assert ks(ours_at, np.array([box[theirs_at] for box, _ in their_cuts])) < 0.1, corner
    # Per element: each element's choice and MixUp lambda.
    elem = timm_mixup("both", "elem")
    our_plans = [plan(elem, batch_rng((2, 0, b)), 8, 32, 48) for b in range(400)]
    our_mixes = [m for p in our_plans if p for m in p.mixes]
    np.random.seed(1)
    their_params = [elem._params_per_elem(8) for _ in range(400)]
    their_lams = np.concatenate([lam[~cut] for lam, cut in their_params])
    their_cut = np.concatenate([cut for _, cut in their_params]).mean()
    assert abs(sum(isinstance(m, tuple) for m in our_mixes) / len(our_mixes) - their_cut) < 0.04
    our_lams = np.array([m for m in our_mixes if isinstance(m, float)])
    assert ks(our_lams, their_lams[their_lams < 1]) < 0.06


def ks(a: np.ndarray, b: np.ndarray) -> float:
    """The two-sample Kolmogorov-Smirnov statistic."""
    grid = np.sort(np.concatenate([a, b]))
    return float(np.abs(np.searchsorted(np.sort(a), grid, "right") / len(a) - np.searchsorted(np.sort(b), grid, "right") / len(b)).max())
