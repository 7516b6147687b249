"""timm's ``RandAugment`` (``timm.data.auto_augment``, what ``create_transform(auto_augment=
"rand-...")`` builds) run natively as ``TimmRandAugment``.

Pixels: every op with its level argument given equals timm's own op function
(``NAME_TO_OP[name](img, arg, fillcolor=..., resample=...)``) bit for bit, and loader samples
equal timm's functions applied with the plan the loader drew (``_native.timm_rand_augment_draws``
exposes it). Draws: Python's ``random`` and numpy's global streams cannot be reproduced, so the
distributions are compared with timm's own, recorded over many calls of timm's object: the op
choice with and without weights, the skip coin, the magnitude noise (Gaussian, uniform for
``mstd > 100``, clamped), the sign and the filter.
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
WARPS = ("Rotate", "ShearX", "ShearY", "TranslateX", "TranslateY", "TranslateXRel", "TranslateYRel")
NO_ARG = ("AutoContrast", "Equalize", "Invert")
RECIPE = "rand-m9-mstd0.5-inc1"


def images(folder: Path) -> List[Image.Image]:
    """Two fixture photos cut to odd, non-square sizes (width and height differ, so relative
    translations read the right side), and one 224-square (the recipe's size, where the vector
    warp paths run)."""
    paths = sorted(folder.rglob("*.jpg"))
    out = []
    for path, size in zip(paths[:3], [(47, 39), (36, 53), (224, 224)]):
        with Image.open(path) as img:
            out.append(img.convert("RGB").resize(size, Image.Resampling.BILINEAR))
    return out


def level_args(name: str, levels: Sequence[float], hparams: Dict[str, Any]) -> List[Any]:
    """timm's level arguments of ``name`` at ``levels``, with both signs where it draws one."""
    if name in NO_ARG:
        return [None]
    args = []
    for level in levels:
        for coin in (0.25, 0.75):  # _randomly_negate keeps, then flips
            saved = random.random
            random.random = lambda: coin  # type: ignore[assignment]
            try:
                args.append(aa.LEVEL_TO_ARG[name](level, hparams)[0])
            finally:
                random.random = saved  # type: ignore[assignment]
    return sorted(set(args), key=repr)


def timm_op(img: Image.Image, name: str, arg: Any, interpolation: str, fill: Tuple[int, int, int]) -> np.ndarray:
    fn = aa.NAME_TO_OP[name]
    args = () if arg is None else (arg,)
    return np.asarray(fn(img, *args, fillcolor=fill, resample=FILTERS[interpolation]))


def timm_blur_rand(img: Image.Image, factor: float, seed: int) -> Tuple[np.ndarray, float]:
    """timm's ``gaussian_blur_rand(img, factor)`` with Python's ``random`` seeded, and the
    radius it drew (``random.uniform(0.1, 2.0 * factor)`` from the same state), which is the
    argument the loader's plan holds for GaussianBlurRand."""
    state = random.getstate()
    try:
        random.seed(seed)
        out = np.asarray(aa.NAME_TO_OP["GaussianBlurRand"](img, factor))
        random.seed(seed)
        radius = random.uniform(0.1, 2.0 * factor)
    finally:
        random.setstate(state)
    return out, radius


def ours(img: Image.Image, name: str, arg: Any, interpolation: str, fill: Tuple[int, int, int]) -> np.ndarray:
    return _native.timm_rand_augment_apply(
        np.asarray(img), name, None if arg is None else float(arg), interpolation=interpolation, fill=fill
    )


HPARAMS = dict(translate_const=100, translate_pct=0.45, img_mean=FILL)
LEVELS = (0.0, 1.0, 4.5, 7.3, 9.0, 10.0, 13.7)


@pytest.mark.parametrize("name", T.TIMM_AUGMENT_OPS)
def test_each_op_equals_timms_own_function(folder: Path, name: str) -> None:
    filters = list(FILTERS) if name in WARPS else ["bicubic"]
    args = level_args(name, LEVELS, HPARAMS)
    if name in ("TranslateX", "TranslateY"):
        args += [12.37, -7.5, 0.49, 300.0]  # float offsets Pillow samples; one past the image
    if name in ("ShearX", "ShearY"):
        args += [0.013, -0.9]
    if name.startswith("Posterize"):
        args = [a for a in args if a >= 1]  # 0 bits: Pillow 13 raises, see below
    if name == "GaussianBlur":
        args += [0.0, 0.37, 3.3, 7.0, 60.0]  # no blur; radii past the level range and the image
    checked = 0
    for img in images(folder):
        if name == "GaussianBlurRand":
            # The op draws its radius: timm's with random() fixed, ours with the radius drawn.
            for factor in args:
                for seed in range(4):
                    want, radius = timm_blur_rand(img, factor, seed)
                    got = ours(img, name, radius, "bicubic", FILL)
                    assert np.array_equal(got, want), f"GaussianBlurRand({factor!r}), radius {radius} on {img.size}"
                    checked += 1
            continue
        for arg in args:
            for interpolation in filters:
                want = timm_op(img, name, arg, interpolation, FILL)
                got = ours(img, name, arg, interpolation, FILL)
                assert got.shape == want.shape
                diff = np.argwhere(got != want)
                assert len(diff) == 0, (
                    f"{name}({arg!r}, {interpolation}) on {img.size}: {len(diff)} values differ, first at "
                    f"{diff[0].tolist()}: {got[tuple(diff[0])]} vs timm's {want[tuple(diff[0])]}"
                )
                checked += 1
    assert checked >= 3


def test_posterize_to_zero_bits_is_pillow_12s_black_image(folder: Path) -> None:
    """timm's PosterizeIncreasing at magnitude 10 keeps 0 bits; Pillow 13 raises there (timm's
    sample fails), Pillow 12 computed ``i & ~255``: black. ferroloader computes the latter."""
    img = images(folder)[0]
    op = aa.AugmentOp("PosterizeIncreasing", prob=1.0, magnitude=10, hparams=dict(HPARAMS))
    with pytest.raises(ValueError, match="bits must be between"):
        op(img)
    assert aa.LEVEL_TO_ARG["PosterizeIncreasing"](10, HPARAMS) == (0,)
    got = ours(img, "PosterizeIncreasing", 0, "bicubic", FILL)
    assert not got.any()
    assert np.array_equal(got, np.asarray(img.point([i & ~255 for i in range(256)] * 3)))


# ------------------------------------------------------------------------------ the draws


def recipe(config: str = RECIPE, **hparams: Any) -> Any:
    """timm's RandAugment as create_transform(224, auto_augment=config) builds it."""
    params = dict(translate_const=int(224 * 0.45), img_mean=FILL, **hparams)
    return aa.rand_augment_transform(config, params)


def spec_of(policy: Any) -> str:
    converted = T.from_torchvision([policy]).transforms[0]
    assert isinstance(converted, T.TimmRandAugment)
    return json.dumps(converted.to_spec())


Step = Tuple[str, bool, float, Optional[float], Optional[str]]


def timm_plans(policy: Any, n: int, seed: int) -> List[List[Step]]:
    """What timm's object draws on ``n`` calls: per call the chosen ops in order, as
    ``_native.timm_rand_augment_draws`` reports them (name, applied, magnitude, level argument,
    filter), recorded by wrapping its ops, level and op functions and its filter choice. An op
    without a level (AutoContrast, Equalize, Invert) shows no magnitude (0). The pixels are
    not computed: only the draws are compared here."""
    img = Image.new("RGB", (4, 4))
    record: List[Step] = []
    filters = {v: k for k, v in FILTERS.items()}

    class Recorder:
        def __init__(self, op: Any) -> None:
            self.op = op

        def __call__(self, image: Any) -> Any:
            record.append((self.op.name, False, 0.0, None, None))
            return self.op(image)

    def levels(op: Any, inner: Any) -> Callable[..., Any]:
        def level_fn(level: float, hparams: Any) -> Any:
            args = inner(level, hparams)
            record[-1] = (op.name, False, float(level), float(args[0]), None)
            return args

        return level_fn

    def applies(op: Any) -> Callable[..., Any]:
        # Records the call instead of computing it (timm's PosterizeIncreasing at magnitude 10
        # raises on Pillow 13), drawing the filter as the warps do.
        def aug_fn(image: Any, *args: Any, **kwargs: Any) -> Any:
            name, _, magnitude, arg, _ = record[-1]
            if name == "GaussianBlurRand":
                # The op's own draw; the loader's plan reports the radius as the argument.
                arg = random.uniform(0.1, 2.0 * args[0])
            record[-1] = (name, True, magnitude, arg, None)
            if name in WARPS:
                aa._check_args_tf(kwargs)
            return image

        return aug_fn

    def interpolation(kwargs: Dict[str, Any]) -> Any:
        choice = original(kwargs)
        name, applied, magnitude, arg, _ = record[-1]
        record[-1] = (name, applied, magnitude, arg, filters[choice])
        return choice

    ops = policy.ops
    for op in ops:
        if op.level_fn is not None:
            op.level_fn = levels(op, op.level_fn)
        op.aug_fn = applies(op)
    original = aa._interpolation
    plans = []
    random.seed(seed)
    np.random.seed(seed)
    aa._interpolation = interpolation
    try:
        policy.ops = [Recorder(op) for op in ops]
        for _ in range(n):
            record.clear()
            policy(img)
            plans.append(list(record))
    finally:
        aa._interpolation = original
        policy.ops = ops
    return plans


def flat(plans: List[List[Step]]) -> List[Step]:
    return [s for p in plans for s in p]


def assert_close(ours_: float, theirs: float, n_ours: int, n_theirs: int, p: float, what: str) -> None:
    """Two frequencies of an event of probability about ``p``, within 5 standard errors."""
    error = math.sqrt(p * (1 - p) * (1 / n_ours + 1 / n_theirs))
    assert abs(ours_ - theirs) <= 5 * error + 1e-12, f"{what}: {ours_:.4f} vs timm's {theirs:.4f} (5 se = {5 * error:.4f})"


def ks_statistic(a: np.ndarray, b: np.ndarray) -> float:
    """The two-sample Kolmogorov-Smirnov statistic."""
    a, b = np.sort(a), np.sort(b)
    grid = np.concatenate([a, b])
    return float(np.max(np.abs(np.searchsorted(a, grid, side="right") / len(a) - np.searchsorted(b, grid, side="right") / len(b))))


def ks_bound(n: int, m: int) -> float:
    """The KS statistic two samples of one distribution exceed with probability about 1e-4."""
    return 2.15 * math.sqrt((n + m) / (n * m))


N = 12000


def our_plans(policy: Any, n: int, seed: int = 5) -> List[List[Step]]:
    return _native.timm_rand_augment_draws(spec_of(policy), list(range(n)), seed=seed)


@pytest.mark.parametrize(
    "config", [RECIPE, "rand-m9-n3-mstd101-p0.7", "rand-m7-mstd1-tweights", "rand-m10-n2-mstd0.5-mmax15-inc1", "rand-m9-mstd0.5-t3a"]
)
def test_draws_follow_timms_distributions(config: str) -> None:
    policy = recipe(config)
    mine, theirs = our_plans(policy, N), timm_plans(recipe(config), N, seed=3)
    assert all(len(p) == policy.num_layers for p in mine)
    assert all(len(p) == policy.num_layers for p in theirs)
    names = [op.name for op in policy.ops]
    # The op choice, per layer and overall.
    if policy.choice_weights is None:
        probs = np.full(len(names), 1 / len(names))
    else:
        probs = np.asarray(policy.choice_weights)
        # Without replacement: no op twice in a sample.
        assert all(len({s[0] for s in p}) == len(p) for p in mine)
    for layer in range(policy.num_layers):
        for k, name in enumerate(names):
            a = sum(p[layer][0] == name for p in mine) / N
            b = sum(p[layer][0] == name for p in theirs) / N
            assert_close(a, b, N, N, max(float(probs[k]), 1 / N), f"{config}: layer {layer} chooses {name}")
            if layer == 0:
                assert_close(a, float(probs[k]), N, 10**9, max(float(probs[k]), 1 / N), f"{config}: {name} vs p")
    # The skip coin.
    a_all, b_all = flat(mine), flat(theirs)
    prob = policy.ops[0].prob
    a = sum(s[1] for s in a_all) / len(a_all)
    b = sum(s[1] for s in b_all) / len(b_all)
    assert_close(a, b, len(a_all), len(b_all), prob, f"{config}: applied")
    assert_close(a, prob, len(a_all), 10**9, prob, f"{config}: applied vs prob")
    # The magnitude after noise and clamp: one distribution for every op (same hparams); timm's
    # record has it for the ops with a level.
    a_steps = [s for s in a_all if s[0] not in NO_ARG]
    b_steps = [s for s in b_all if s[0] not in NO_ARG]
    ma = np.array([s[2] for s in a_steps if s[1]])
    mb = np.array([s[2] for s in b_steps if s[1]])
    assert ks_statistic(ma, mb) < ks_bound(len(ma), len(mb)), f"{config}: magnitudes"
    top = policy.ops[0].magnitude_max or 10
    clamp_a, clamp_b = float(np.mean(ma == top)), float(np.mean(mb == top))
    assert_close(clamp_a, clamp_b, len(ma), len(mb), max(clamp_b, 1e-3), f"{config}: clamped to {top}")
    assert ma.min() >= 0 and ma.max() <= top
    # Signs (Rotate's degrees) and the level arguments of a few ops.
    for name in ("Rotate", "ShearX", "TranslateXRel", names[-1]):
        xa = np.array([s[3] for s in a_steps if s[1] and s[0] == name])
        xb = np.array([s[3] for s in b_steps if s[1] and s[0] == name])
        if len(xb) < 200:
            continue
        assert ks_statistic(xa, xb) < ks_bound(len(xa), len(xb)), f"{config}: {name}'s arguments"
        if name == "Rotate":
            assert_close(float(np.mean(xa < 0)), float(np.mean(xb < 0)), len(xa), len(xb), 0.5, f"{config}: sign")


def test_uniform_magnitude_and_random_filters() -> None:
    """``mstd > 100`` samples the magnitude uniformly in [0, m]; without an ``interpolation``
    hparam each warp call draws BILINEAR or BICUBIC."""
    policy = aa.rand_augment_transform("rand-m9-mstd200", dict(translate_const=100, img_mean=FILL))
    assert policy.ops[0].magnitude_std == math.inf
    converted = json.loads(spec_of(policy))
    assert converted["ops"][0]["magnitude_std"] == "inf"
    assert converted["ops"][3]["name"] == "Rotate"
    assert converted["ops"][3]["interpolation"] == ["bilinear", "bicubic"]
    mine = flat(our_plans(policy, N))
    theirs = flat(timm_plans(aa.rand_augment_transform("rand-m9-mstd200", dict(translate_const=100, img_mean=FILL)), N, seed=9))
    ma = np.array([s[2] for s in mine if s[1] and s[0] not in NO_ARG])
    mb = np.array([s[2] for s in theirs if s[1] and s[0] not in NO_ARG])
    assert abs(ma.mean() - 4.5) < 0.1 and ma.max() < 9
    assert ks_statistic(ma, mb) < ks_bound(len(ma), len(mb))
    warps_a = [s[4] for s in mine if s[1] and s[0] in WARPS]
    warps_b = [s[4] for s in theirs if s[1] and s[0] in WARPS]
    assert set(warps_a) == set(warps_b) == {"bilinear", "bicubic"}
    a, b = warps_a.count("bicubic") / len(warps_a), warps_b.count("bicubic") / len(warps_b)
    assert_close(a, b, len(warps_a), len(warps_b), 0.5, "bicubic share")
    assert all(s[4] is None for s in mine if s[0] not in WARPS or not s[1])


# --------------------------------------------------------------------- in the loader


def test_loader_samples_are_timms_ops_with_the_drawn_plan(folder: Path) -> None:
    """The loader's samples, op by op, are timm's functions applied with the plan the sample's
    generator draws (the policy stands first after a crop that draws nothing)."""
    policy = T.from_torchvision([recipe(RECIPE, interpolation=Image.Resampling.BICUBIC)]).transforms[0]
    spec = json.dumps(policy.to_spec())
    transform = T.Compose([T.Resize(56), T.CenterCrop((40, 44)), policy, T.PILToTensor()])
    prepared = torchvision.transforms.Compose([torchvision.transforms.Resize(56), torchvision.transforms.CenterCrop((40, 44))])
    dataset = torchvision.datasets.ImageFolder(str(folder))
    ran = changed = 0
    for seed in (0, 1):
        loader = fl.Loader(fl.ImageFolder(folder), batch_size=4, num_workers=2, transform=transform, output="uint8", seed=seed)
        samples = torch.cat([images for images, _ in loader])
        plans = _native.timm_rand_augment_draws(spec, list(range(len(dataset))), seed=seed)
        for index, (path, _) in enumerate(dataset.samples):
            with Image.open(path) as source:
                out = prepared(source.convert("RGB"))
            plain = np.asarray(out)
            for name, applied, _, arg, interpolation in plans[index]:
                if not applied:
                    continue
                if name == "PosterizeIncreasing" and arg == 0:
                    out = out.point([0] * 768)  # see test_posterize_to_zero_bits_is_pillow_12s_black_image
                    continue
                args = () if arg is None else (int(arg) if name.startswith(("Posterize", "Solarize")) else arg,)
                out = aa.NAME_TO_OP[name](out, *args, fillcolor=FILL, resample=FILTERS[interpolation or "bicubic"])
                ran += 1
            got = samples[index].permute(1, 2, 0).numpy()
            assert np.array_equal(got, np.asarray(out)), f"seed {seed}, image {index}: {plans[index]}"
            changed += not np.array_equal(got, plain)
    assert ran > len(dataset) and changed > len(dataset)


def test_create_transform_runs_natively_with_no_python_tail(folder: Path) -> None:
    train = timm_data.create_transform(
        224, is_training=True, auto_augment=RECIPE, re_prob=0.25, re_mode="pixel", interpolation="bicubic"
    )
    split = T.split_python_tail(train)
    assert split.tail == []
    names = [type(t).__name__ for t in split.prefix.transforms]
    assert names == ["RandomResizedCrop", "RandomHorizontalFlip", "TimmRandAugment", "ToTensor", "Normalize", "TimmRandomErasing"]
    policy = split.prefix.transforms[2]
    assert isinstance(policy, T.TimmRandAugment)
    assert policy.num_layers == 2 and policy.choice_weights is None
    assert [o.name for o in policy.ops] == aa._RAND_INCREASING_TRANSFORMS
    first = policy.ops[0].to_spec()
    assert first == {
        "name": "AutoContrast",
        "prob": 0.5,
        "magnitude": 9.0,
        "magnitude_std": 0.5,
        "magnitude_max": None,
        "translate_pct": 0.45,
        "translate_const": 100.0,
        "fill": list(FILL),
        "interpolation": "bicubic",
    }
    small = timm_data.create_transform(
        64, is_training=True, auto_augment=RECIPE, re_prob=0.25, re_mode="pixel", interpolation="bicubic"
    )
    loader = fl.Loader(torchvision.datasets.ImageFolder(str(folder), transform=small), 6, num_workers=2, python_tail="error")
    shapes = {tuple(x.shape[1:]) for x, _ in loader}
    assert shapes == {(3, 64, 64)}
    profile = fl.Loader(
        torchvision.datasets.ImageFolder(str(folder), transform=small), 6, num_workers=1, python_tail="error", profile="spans"
    )
    for _ in profile:
        pass
    ops = {span["op"] for span in profile.profile().pipeline("native")["spans"]}
    assert "TimmRandAugment" in ops
    assert any(op.startswith("TimmRandAugment/") for op in ops), ops


def test_timm_rand_augment_is_identical_whatever_the_worker_count(folder: Path) -> None:
    train = timm_data.create_transform(
        48, is_training=True, auto_augment="rand-m9-mstd0.5-inc1", re_prob=0.25, re_mode="pixel", interpolation="bicubic"
    )
    weighted = T.from_torchvision([recipe("rand-m9-mstd1-tweights")]).transforms[0]
    ours_ = T.Compose([T.RandomResizedCrop(40), weighted, T.ToTensor()])

    def run(transform: Any, dataset: Any, workers: int) -> torch.Tensor:
        loader = fl.Loader(dataset, batch_size=4, num_workers=workers, transform=transform, seed=21, python_tail="error")
        return torch.cat([images.clone() for images, _ in loader])

    for transform, dataset in (
        (None, torchvision.datasets.ImageFolder(str(folder), transform=train)),
        (ours_, fl.ImageFolder(folder)),
    ):
        zero = run(transform, dataset, 0)
        assert torch.equal(zero, run(transform, dataset, 1))
        assert torch.equal(zero, run(transform, dataset, 2))


def test_gaussian_blur_rand_radius_follows_timms_draws() -> None:
    """GaussianBlurRand (only in AutoAugment's ``3a`` among timm's configs) in a hand-built
    RandAugment: its radius, drawn inside timm's op, against timm's own draws."""
    hparams = dict(translate_const=100, img_mean=FILL)

    def policy() -> Any:
        ops = [aa.AugmentOp("GaussianBlurRand", 0.8, 7, hparams), aa.AugmentOp("Rotate", 0.5, 9, hparams)]
        return aa.RandAugment(ops, 2)

    mine, theirs = our_plans(policy(), N), timm_plans(policy(), N, seed=4)
    for name in ("GaussianBlurRand", "Rotate"):
        xa = np.array([s[3] for p in mine for s in p if s[1] and s[0] == name])
        xb = np.array([s[3] for p in theirs for s in p if s[1] and s[0] == name])
        assert ks_statistic(xa, xb) < ks_bound(len(xa), len(xb)), f"{name}'s arguments"
    radii = np.array([s[3] for p in mine for s in p if s[1] and s[0] == "GaussianBlurRand"])
    assert radii.min() >= 0.1 and radii.max() <= 1.4  # uniform(0.1, 2 * 0.7)


def test_what_does_not_convert_is_named_and_left_to_the_tail(folder: Path) -> None:
    lanczos = recipe(interpolation=Image.Resampling.LANCZOS)
    with pytest.raises(ValueError, match=r"ops\[3\] \(Rotate\).*interpolation"):
        T.from_torchvision([lanczos])
    packed = aa.rand_augment_transform(RECIPE, dict(translate_const=100, img_mean=128))
    with pytest.raises(ValueError, match=r"ops\[0\] fillcolor=128"):
        T.from_torchvision([packed])
    changed = recipe()
    changed.ops[5].aug_fn = aa.NAME_TO_OP["Invert"]
    with pytest.raises(ValueError, match=r"ops\[5\] name='SolarizeIncreasing': its functions are not timm's"):
        T.from_torchvision([changed])
    transform = torchvision.transforms.Compose([torchvision.transforms.CenterCrop(32), lanczos, torchvision.transforms.ToTensor()])
    with pytest.warns(UserWarning, match=r"RandAugment"):
        ld = fl.Loader(fl.ImageFolder(folder), 4, transform=transform, num_workers=1)
    assert [type(t).__name__ for t in ld.transform.transforms] == ["CenterCrop"]
    assert len(ld.python_tail) == 2 and ld.python_tail[0] is lanczos
    with pytest.raises(ValueError, match="TimmAugmentOp: name 'Cutout'"):
        T.TimmAugmentOp("Cutout")
    with pytest.raises(ValueError, match="choice_weights"):
        T.TimmRandAugment([T.TimmAugmentOp("Invert")], 2, [1.0])
    with pytest.raises(ValueError, match=r"interpolation.*ops\[0\] \(Rotate\): \"box\""):
        _native.check_pipeline(
            json.dumps({"ops": [{"op": "CenterCrop", "size": 8}, {"op": "TimmRandAugment", "ops": [{"name": "Rotate", "interpolation": "box"}]}, {"op": "ToTensor"}]})
        )
