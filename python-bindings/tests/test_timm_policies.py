"""timm's ``AutoAugment`` and ``AugMixAugment`` (``timm.data.auto_augment``, what
``create_transform(auto_augment="original" / "v0" / "augmix-...")`` builds) run natively as
``TimmAutoAugment`` and ``TimmAugMix``.

Pixels: loader samples equal timm's own code applied with the draws the loader made
(``_native.timm_auto_augment_draws`` / ``timm_augmix_draws`` expose them): timm's op functions
for AutoAugment; for AugMix timm's own ``_apply_basic`` / ``_apply_blended`` (its float32 mix,
``_calc_blended_weights`` and Pillow's ``Image.blend``) with the weights, depths and ops
injected. Draws: Python's and numpy's global streams cannot be reproduced, so distributions
are compared with timm's objects' own over many calls: the sub-policy choice and skip coins,
AugMix's Dirichlet and Beta weights, depths, op choice and uniform magnitudes.
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import pytest
import torch
import torchvision
from PIL import Image

import ferroloader as fl
from ferroloader import _native
from ferroloader import transforms as T

timm_data = pytest.importorskip("timm.data")
from timm.data import auto_augment as aa  # noqa: E402

FILTERS = {"nearest": Image.Resampling.NEAREST, "bilinear": Image.Resampling.BILINEAR, "bicubic": Image.Resampling.BICUBIC}
FILL = (124, 116, 104)  # create_transform's img_mean for ImageNet's mean
HPARAMS = dict(translate_const=100, img_mean=FILL)
Step = Tuple[str, bool, float, Optional[float], Optional[str]]


def converted(t: Any) -> Any:
    return T.from_torchvision([t]).transforms[0]


def spec_of(t: Any) -> str:
    return json.dumps(converted(t).to_spec())


def timm_apply(img: Image.Image, step: Step) -> Image.Image:
    """timm's op function with the level argument and filter the native plan drew."""
    name, applied, _, arg, interpolation = step
    if not applied:
        return img
    if name == "PosterizeIncreasing" and arg == 0:
        # Pillow 13 raises at 0 bits; ferroloader keeps Pillow 12's black image (see
        # test_timm_randaugment.py).
        return img.point([0] * 768)
    if name == "GaussianBlurRand":
        # The plan holds the radius timm's op draws inside itself; blur with it.
        return aa.NAME_TO_OP["GaussianBlur"](img, arg)
    args = () if arg is None else (int(arg) if name.startswith(("Posterize", "Solarize")) else arg,)
    return aa.NAME_TO_OP[name](img, *args, fillcolor=FILL, resample=FILTERS[interpolation or "bicubic"])


def loader_samples(folder: Path, policy: Any, seed: int, workers: int = 2) -> torch.Tensor:
    transform = T.Compose([T.Resize(56), T.CenterCrop((40, 44)), policy, T.PILToTensor()])
    loader = fl.Loader(fl.ImageFolder(folder), batch_size=8, num_workers=workers, transform=transform, output="uint8", seed=seed)
    return torch.cat([images for images, _ in loader])


def prepared(folder: Path) -> List[Image.Image]:
    crop = torchvision.transforms.Compose([torchvision.transforms.Resize(56), torchvision.transforms.CenterCrop((40, 44))])
    out = []
    for path, _ in torchvision.datasets.ImageFolder(str(folder)).samples:
        with Image.open(path) as source:
            out.append(crop(source.convert("RGB")))
    return out


def assert_same(got: torch.Tensor, want: Image.Image, what: str) -> None:
    g, w = got.permute(1, 2, 0).numpy(), np.asarray(want)
    diff = np.argwhere(g != w)
    assert len(diff) == 0, f"{what}: {len(diff)} values differ, first at {diff[0].tolist()}: {g[tuple(diff[0])]} vs {w[tuple(diff[0])]}"


# ----------------------------------------------------------------------- AutoAugment pixels


@pytest.mark.parametrize("name", ["original", "v0r", "3a"])
def test_auto_augment_samples_are_timms_ops_with_the_drawn_plan(folder: Path, name: str) -> None:
    policy = aa.auto_augment_transform(name, dict(HPARAMS))  # random BILINEAR/BICUBIC per warp
    ours = converted(policy)
    assert isinstance(ours, T.TimmAutoAugment) and len(ours.policy) == len(policy.policy)
    images = prepared(folder)
    chosen = set()
    ran = 0
    for seed in range(8):
        samples = loader_samples(folder, ours, seed=seed)
        plans = _native.timm_auto_augment_draws(json.dumps(ours.to_spec()), list(range(len(images))), seed=seed)
        for index, (img, (sub, steps)) in enumerate(zip(images, plans)):
            assert [s[0] for s in steps] == [op.name for op in policy.policy[sub]]
            chosen.add(sub)
            for step in steps:
                img = timm_apply(img, step)
                ran += step[1]
            assert_same(samples[index], img, f"{name} seed {seed} image {index}: sub-policy {sub} {steps}")
    # 144 samples: each of the 25 sub-policies is missed with probability about 0.3%.
    assert len(chosen) >= min(20, len(policy.policy)) and ran > len(images) * 8 // 2


# ---------------------------------------------------------------------------- AugMix pixels


def timm_augmix(t: Any, img: Image.Image, draws: Tuple[List[float], float, List[List[Step]]], monkeypatch: Any) -> Image.Image:
    """timm's own ``_apply_basic`` / ``_apply_blended`` with the native draws injected: the
    weights and ``m`` as its ``__call__`` hands them over (float32), each chain's depth and ops
    through numpy's ``randint`` and ``choice``."""
    weights, m, chains = draws
    pending = list(chains)

    def op(step: Step) -> Callable[[Image.Image], Image.Image]:
        return lambda image: timm_apply(image, step)

    def randint(low: int, high: int) -> int:
        assert (low, high) == (1, 4)
        return len(pending[0])

    def choice(ops: Any, depth: int, replace: bool) -> List[Any]:
        chain = pending.pop(0)
        assert replace and depth == len(chain)
        return [op(s) for s in chain]

    with monkeypatch.context() as patch:
        patch.setattr(np.random, "randint", randint)
        patch.setattr(np.random, "choice", choice)
        w, m32 = np.asarray(weights, dtype=np.float32), np.float32(m)
        out = t._apply_blended(img, w, m32) if t.blended else t._apply_basic(img, w, m32)
    assert not pending
    return out


@pytest.mark.parametrize("config", ["augmix-m5-w4-d2", "augmix-m3-w3-b1", "augmix-m9-w2-a0.5-mstd1"])
def test_augmix_samples_are_timms_mix_with_the_drawn_plan(folder: Path, config: str, monkeypatch: Any) -> None:
    t = aa.augment_and_mix_transform(config, dict(HPARAMS, translate_pct=0.3))
    ours = converted(t)
    assert isinstance(ours, T.TimmAugMix)
    assert (ours.width, ours.depth, ours.blended, ours.alpha) == (t.width, t.depth, t.blended, t.alpha)
    images = prepared(folder)
    depths = set()
    for seed in (5, 6, 7):
        samples = loader_samples(folder, ours, seed=seed)
        draws = _native.timm_augmix_draws(json.dumps(ours.to_spec()), list(range(len(images))), seed=seed)
        for index, (img, d) in enumerate(zip(images, draws)):
            weights, m, chains = d
            assert len(weights) == t.width and len(chains) == t.width
            depths.update(len(c) for c in chains)
            assert all(s[1] for c in chains for s in c), "prob 1.0: every op runs"
            assert_same(samples[index], timm_augmix(t, img, d, monkeypatch), f"{config} seed {seed} image {index}: {d}")
    assert depths == ({t.depth} if t.depth > 0 else {1, 2, 3})


def test_pillow_blend_model_holds_for_every_pair_of_levels() -> None:
    """The native blend computes ``(uint8)(in1 + alpha * (in2 - in1))`` in float32 (clipped
    outside [0, 1]); Pillow's wheel computes exactly that for every pair of levels (no FMA)."""
    levels = np.arange(256, dtype=np.uint8)
    a = np.repeat(levels, 256).reshape(256, 256)
    b = np.tile(levels, 256).reshape(256, 256)
    im1, im2 = Image.fromarray(np.stack([a, b, a], -1)), Image.fromarray(np.stack([b, a, 255 - a], -1))
    x1, x2 = np.asarray(im1).astype(np.float32), np.asarray(im2).astype(np.float32)
    for alpha in [*np.random.default_rng(0).random(40).astype(np.float32), np.float32(1 / 3), np.float32(1.25), np.float32(-0.5)]:
        want = np.clip(x1 + alpha * (x2 - x1), 0, 255).astype(np.uint8)
        assert np.array_equal(np.asarray(Image.blend(im1, im2, float(alpha))), want), alpha


# ------------------------------------------------------------------------------ the draws


def assert_close(ours: float, theirs: float, n_ours: int, n_theirs: int, p: float, what: str) -> None:
    """Two frequencies of an event of probability about ``p``, within 5 standard errors."""
    error = math.sqrt(p * (1 - p) * (1 / n_ours + 1 / n_theirs))
    assert abs(ours - theirs) <= 5 * error + 1e-12, f"{what}: {ours:.4f} vs timm's {theirs:.4f} (5 se = {5 * error:.4f})"


def ks_statistic(a: np.ndarray, b: np.ndarray) -> float:
    a, b = np.sort(a), np.sort(b)
    grid = np.concatenate([a, b])
    return float(np.max(np.abs(np.searchsorted(a, grid, side="right") / len(a) - np.searchsorted(b, grid, side="right") / len(b))))


def ks_bound(n: int, m: int) -> float:
    """The KS statistic two samples of one distribution exceed with probability about 1e-4."""
    return 2.15 * math.sqrt((n + m) / (n * m))


N = 10000


def timm_auto_draws(policy: Any, n: int, seed: int) -> List[Tuple[int, List[Dict[str, Any]]]]:
    """timm's AutoAugment's draws over ``n`` calls: the sub-policy and, per op, whether it ran."""
    record: List[List[Dict[str, Any]]] = []
    applied: List[bool] = []

    def recording_level(inner: Any) -> Any:
        def level_fn(level: float, hp: Any) -> Any:
            args = inner(level, hp)
            record[-1][-1]["arg"] = float(args[0])
            return args

        return level_fn

    for i, sub in enumerate(policy.policy):
        for j, op in enumerate(sub):
            op.aug_fn = lambda image, *a, **kw: applied.append(True) or image
            if op.level_fn is not None:
                op.level_fn = recording_level(op.level_fn)

    class Op:
        def __init__(self, op: Any, key: Tuple[int, int]) -> None:
            self.op, self.key = op, key

        def __call__(self, image: Any) -> Any:
            record[-1].append(dict(key=self.key, applied=False, arg=None))
            applied.clear()
            self.op(image)
            record[-1][-1]["applied"] = bool(applied)
            return image

    original = policy.policy
    policy.policy = [[Op(op, (i, j)) for j, op in enumerate(sub)] for i, sub in enumerate(original)]
    random.seed(seed)
    out = []
    img = Image.new("RGB", (4, 4))
    try:
        for _ in range(n):
            record.append([])
            policy(img)
            steps = record[-1]
            out.append((steps[0]["key"][0] if steps else -1, steps))
    finally:
        policy.policy = original
    return out


def test_auto_augment_draws_follow_timms() -> None:
    name = "v0"
    policy = aa.auto_augment_transform(name, dict(HPARAMS))
    mine = _native.timm_auto_augment_draws(spec_of(policy), list(range(N)), seed=2)
    theirs = timm_auto_draws(aa.auto_augment_transform(name, dict(HPARAMS)), N, seed=4)
    k = len(policy.policy)
    for i in range(k):
        a = sum(sub == i for sub, _ in mine) / N
        b = sum(sub == i for sub, _ in theirs) / N
        assert_close(a, b, N, N, 1 / k, f"sub-policy {i}")
        assert_close(a, 1 / k, N, 10**9, 1 / k, f"sub-policy {i} vs uniform")
    # The skip coin of each op position, against timm's and against its prob.
    for i, sub in enumerate(policy.policy):
        for j, op in enumerate(sub):
            a_runs = [steps[j][1] for s, steps in mine if s == i]
            b_runs = [steps[j]["applied"] for s, steps in theirs if s == i]
            p = max(min(op.prob, 1 - 1e-3), 1e-3)
            assert_close(float(np.mean(a_runs)), float(np.mean(b_runs)), len(a_runs), len(b_runs), p, f"policy[{i}][{j}] applied")
            assert_close(float(np.mean(a_runs)), op.prob, len(a_runs), 10**9, p, f"policy[{i}][{j}] vs prob")
    # The random sign of the warps' arguments.
    a_args = np.array([s[3] for _, steps in mine for s in steps if s[1] and s[0] in ("Rotate", "ShearX", "ShearY", "TranslateY")])
    b_args = np.array([s["arg"] for _, steps in theirs for s in steps if s["applied"] and policy.policy[s["key"][0]][s["key"][1]].name in ("Rotate", "ShearX", "ShearY", "TranslateY")])
    assert_close(float(np.mean(a_args < 0)), float(np.mean(b_args < 0)), len(a_args), len(b_args), 0.5, "sign")


def timm_augmix_draws(t: Any, n: int, seed: int) -> List[Tuple[np.ndarray, float, List[List[Tuple[str, float]]]]]:
    """timm's AugMixAugment's draws over ``n`` calls of its own ``__call__``: the weights and
    ``m`` handed to ``_apply_basic``/``_apply_blended``, and per chain its ops (name,
    magnitude), told apart by the image each op receives."""
    out: List[Tuple[np.ndarray, float, List[List[Tuple[str, float]]]]] = []
    calls: List[Tuple[Any, str, float]] = []

    def wrap(op: Any) -> Any:
        inner = op.level_fn

        def level_fn(level: float, hp: Any) -> Any:
            calls[-1] = (calls[-1][0], calls[-1][1], float(level))
            return inner(level, hp)

        if inner is not None:
            op.level_fn = level_fn
        op.aug_fn = lambda image, *a, **kw: image.copy()

        class Op:
            name = op.name

            def __call__(self, image: Any) -> Any:
                calls.append((image, op.name, 0.0))
                return op(image)

        return Op()

    t.ops = [wrap(op) for op in t.ops]
    cls = type(t)
    basic = cls._apply_blended if t.blended else cls._apply_basic

    def recording(img: Any, weights: Any, m: Any) -> Any:
        calls.clear()
        result = basic(t, img, weights, m)
        # Every chain starts from one image (basic: ``img``; blended: its copy), which only a
        # chain's first op receives (the recorded ops return new images).
        chains: List[List[Tuple[str, float]]] = []
        origin = calls[0][0] if calls else None
        for image, name, magnitude in calls:
            if image is origin:
                chains.append([])
            chains[-1].append((name, magnitude))
        out.append((np.asarray(weights), float(m), chains))
        return result

    if t.blended:
        setattr(t, "_apply_blended", lambda img, w, m: recording(img, w, m))
    else:
        setattr(t, "_apply_basic", lambda img, w, m: recording(img, w, m))
    np.random.seed(seed)
    random.seed(seed)
    img = Image.new("RGB", (4, 4))
    for _ in range(n):
        t(img)
    return out


@pytest.mark.parametrize("config", ["augmix-m5-w4", "augmix-m3-w3-d2-a0.5"])
def test_augmix_draws_follow_timms(config: str) -> None:
    t = aa.augment_and_mix_transform(config, dict(HPARAMS, translate_pct=0.3))
    n = 6000
    mine = _native.timm_augmix_draws(spec_of(t), list(range(n)), seed=8)
    theirs = timm_augmix_draws(aa.augment_and_mix_transform(config, dict(HPARAMS, translate_pct=0.3)), n, seed=6)
    # The weights: a Dirichlet per sample (sums to 1, float32), and the Beta draw.
    wa = np.array([w for w, _, _ in mine], dtype=np.float32)
    wb = np.stack([w for w, _, _ in theirs])
    assert wb.dtype == np.float32 and wa.shape == wb.shape
    assert np.allclose(wa.sum(1), 1, atol=1e-5)
    for col in range(t.width):
        assert ks_statistic(wa[:, col], wb[:, col]) < ks_bound(n, n), f"{config}: weight {col}"
    ma, mb = np.array([m for _, m, _ in mine]), np.array([m for _, m, _ in theirs])
    assert ks_statistic(ma, mb) < ks_bound(n, n), f"{config}: m"
    assert abs(ma.mean() - 0.5) < 0.02 and abs(ma.var() - mb.var()) < 0.01
    # Depths, op choice and magnitudes.
    da = np.array([len(c) for _, _, chains in mine for c in chains])
    db = np.array([len(c) for _, _, chains in theirs for c in chains])
    for d in (1, 2, 3):
        p = float(np.mean(db == d))
        assert_close(float(np.mean(da == d)), p, len(da), len(db), max(p, 1e-3), f"{config}: depth {d}")
    names = [op.name for op in aa.augment_and_mix_transform(config, dict(HPARAMS)).ops]
    oa = [s[0] for _, _, chains in mine for c in chains for s in c]
    ob = [s[0] for _, _, chains in theirs for c in chains for s in c]
    for name in names:
        assert_close(oa.count(name) / len(oa), ob.count(name) / len(ob), len(oa), len(ob), 1 / len(names), f"{config}: {name}")
    xa = np.array([s[2] for _, _, chains in mine for c in chains for s in c if s[0] not in ("AutoContrast", "Equalize")])
    xb = np.array([s[1] for _, _, chains in theirs for c in chains for s in c if s[0] not in ("AutoContrast", "Equalize")])
    assert ks_statistic(xa, xb) < ks_bound(len(xa), len(xb)), f"{config}: magnitudes"


# --------------------------------------------------------------------- in the loader


CONFIGS = ["original", "originalr", "v0", "v0r", "3a", "augmix-m5-w4-d2", "augmix-m3-w3-b1"]


@pytest.mark.parametrize("config", CONFIGS)
def test_create_transform_runs_natively_with_no_python_tail(folder: Path, config: str) -> None:
    train = timm_data.create_transform(224, is_training=True, auto_augment=config, interpolation="bicubic")
    split = T.split_python_tail(train)
    assert split.tail == []
    names = [type(t).__name__ for t in split.prefix.transforms]
    kind = "TimmAugMix" if config.startswith("augmix") else "TimmAutoAugment"
    # timm keeps its colour jitter with 3a (DeiT III's 3-Augment); the other policies drop it.
    jitter = ["ColorJitter"] if config == "3a" else []
    assert names == ["RandomResizedCrop", "RandomHorizontalFlip", kind, *jitter, "ToTensor", "Normalize"]
    small = timm_data.create_transform(48, is_training=True, auto_augment=config, interpolation="bicubic")
    profile = fl.Loader(
        torchvision.datasets.ImageFolder(str(folder), transform=small), 16, num_workers=1, python_tail="error", profile="spans"
    )
    shapes = {tuple(x.shape[1:]) for x, _ in profile}
    assert shapes == {(3, 48, 48)}
    ops = {span["op"] for span in profile.profile().pipeline("native")["spans"]}
    assert kind in ops
    assert any(op.startswith(kind + "/") for op in ops), ops


def test_timm_augmix_config_syntax() -> None:
    """timm's parser splits on '-', so a negative depth (``d-1``) fails in timm itself; the
    default depth (-1, random) is had by leaving ``d`` out."""
    with pytest.raises(AssertionError, match="Unknown AugMix config section"):
        aa.augment_and_mix_transform("augmix-m3-w3-d-1-b1", dict(HPARAMS))
    t = aa.augment_and_mix_transform("augmix-m3-w3-b1", dict(HPARAMS))
    assert (t.depth, t.blended) == (-1, True)


@pytest.mark.parametrize("config", ["v0", "augmix-m3-w3-b1", "augmix-m5-w4-d2"])
def test_identical_whatever_the_worker_count(folder: Path, config: str) -> None:
    train = timm_data.create_transform(40, is_training=True, auto_augment=config, interpolation="bicubic")

    def run(workers: int) -> torch.Tensor:
        dataset = torchvision.datasets.ImageFolder(str(folder), transform=train)
        loader = fl.Loader(dataset, batch_size=8, num_workers=workers, seed=13, python_tail="error")
        return torch.cat([images.clone() for images, _ in loader])

    zero = run(0)
    assert torch.equal(zero, run(1))
    assert torch.equal(zero, run(2))


def test_what_does_not_convert_is_named_and_left_to_the_tail(folder: Path) -> None:
    changed_v0 = aa.auto_augment_transform("v0", dict(HPARAMS))
    timms = aa.NAME_TO_OP[changed_v0.policy[2][0].name]
    # A wrapper of timm's own function: it runs in the tail, but is not timm's, so it stays there.
    changed_v0.policy[2][0].aug_fn = lambda img, *args, **kwargs: timms(img, *args, **kwargs)
    with pytest.raises(ValueError, match=r"policy\[2\]\[0\] name='\w+': its functions are not timm's"):
        T.from_torchvision([changed_v0])
    transform = torchvision.transforms.Compose([torchvision.transforms.CenterCrop(32), changed_v0, torchvision.transforms.ToTensor()])
    with pytest.warns(UserWarning, match=r"AutoAugment"):
        ld = fl.Loader(fl.ImageFolder(folder), 4, transform=transform, num_workers=1)
    assert [type(t).__name__ for t in ld.transform.transforms] == ["CenterCrop"]
    assert ld.python_tail[0] is changed_v0
    changed = aa.augment_and_mix_transform("augmix-m3-w3", dict(HPARAMS))
    changed.ops[1].aug_fn = aa.NAME_TO_OP["Invert"]
    with pytest.raises(ValueError, match=r"ops\[1\] name='ColorIncreasing': its functions are not timm's"):
        T.from_torchvision([changed])
    after = torchvision.transforms.Compose(
        [torchvision.transforms.PILToTensor(), aa.augment_and_mix_transform("augmix-m3-w3", dict(HPARAMS))]
    )
    with pytest.raises(ValueError, match="follows ToImage/PILToTensor"):
        T.from_torchvision(after)
    with pytest.raises(ValueError, match="width"):
        T.TimmAugMix([T.TimmAugmentOp("Invert")], width=17)
    with pytest.raises(ValueError, match="alpha"):
        T.TimmAugMix([T.TimmAugmentOp("Invert")], alpha=0.0)
    with pytest.raises(ValueError, match="1 to 256 sub-policies"):
        T.TimmAutoAugment([])
    for op in ("TimmAutoAugment", "TimmAugMix"):
        body = {"op": op, "policy": [[{"name": "Invert"}]]} if op == "TimmAutoAugment" else {"op": op, "ops": [{"name": "Invert"}]}
        with pytest.raises(ValueError, match=f"{op}.*PIL image"):
            _native.check_pipeline(json.dumps({"ops": [{"op": "CenterCrop", "size": 8}, {"op": "ToImage"}, body, {"op": "ToTensor"}]}))
