"""The small torchvision transforms that a user's ``Compose`` carries and that used to stop the
converter (a Python tail from there on): ``v2.Identity``/``torch.nn.Identity``, ``v2.RGB``, a
``ToDtype``/``ConvertImageDtype`` to float32 standing after the conversion to float (also
v2's per-type dict form), and ``v2.RandomChannelPermutation``. Each runs natively with
torchvision's semantics, checked against torchvision itself: the whole loader's samples equal
torchvision's dataset bit for bit where nothing is left to chance, the channel permutation's
samples are always one of torchvision's possible outputs and its draws uniform over the six
orders, and every pipeline runs with no Python tail and the same batches whatever
``num_workers``.
"""

from __future__ import annotations

import json
from collections import Counter
from itertools import permutations
from pathlib import Path
from typing import Any, List, Tuple

import numpy as np
import pytest
import torch
import torchvision
import torchvision.transforms as tvT
import torchvision.transforms.v2 as v2
from PIL import Image
from torchvision import tv_tensors

import ferroloader as fl
from ferroloader import transforms as T

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def _native_epoch(dataset: Any, transform: Any, *, workers: int = 2, **kw: Any) -> torch.Tensor:
    """Every sample of one epoch, unshuffled; the transform must run with no Python tail."""
    loader = fl.Loader(dataset, batch_size=5, num_workers=workers, transform=transform, python_tail="error",
                       seed=11, **kw)
    assert loader.python_tail == []
    return torch.cat([x for x, _ in loader])


def _torchvisions(folder: Path, transform: Any) -> torch.Tensor:
    reference = torchvision.datasets.ImageFolder(str(folder), transform=transform)
    return torch.stack([torch.as_tensor(reference[i][0]) for i in range(len(reference))])


def _same_across_workers(dataset: Any, transform: Any, **kw: Any) -> torch.Tensor:
    """The epoch, checked bit-identical with 0, 1 and 3 workers."""
    first = _native_epoch(dataset, transform, workers=0, **kw)
    for workers in (1, 3):
        assert torch.equal(_native_epoch(dataset, transform, workers=workers, **kw), first), workers
    return first


# Identity


def _with_identities(tv: Any, ops: List[Any]) -> List[Any]:
    """``ops`` with an Identity (both kinds) before, between and after them."""
    out: List[Any] = [torch.nn.Identity()]
    for op in ops:
        out += [op, v2.Identity() if tv is v2 else torch.nn.Identity()]
    return out


@pytest.mark.parametrize("tv", [tvT, v2], ids=["v1", "v2"])
def test_identity_converts_to_nothing(tv: Any) -> None:
    crop = tv.RandomResizedCrop(224)
    plain = [crop, tv.RandomHorizontalFlip(), tv.ToTensor() if tv is tvT else v2.ToImage(), tv.Normalize(MEAN, STD)]
    if tv is v2:
        plain.insert(3, v2.ToDtype(torch.float32, scale=True))
    # The same transforms, so the same plan: the single fused pass and the crop's region decode.
    assert T.from_torchvision(_with_identities(tv, plain)) == T.from_torchvision(plain)
    assert T.from_torchvision(tv.Compose(_with_identities(tv, plain))) == T.from_torchvision(plain)
    assert T.from_torchvision([v2.Identity()]) == T.Compose([])


def test_identity_stays_one_choice_inside_random_compositions() -> None:
    converted = T.from_torchvision([v2.RandomChoice([v2.Identity(), v2.RandomInvert(1.0)]), v2.PILToTensor()])
    choice = converted.transforms[0]
    assert isinstance(choice, T.RandomChoice) and len(choice.transforms) == 2
    assert choice.transforms[0] == T.Identity() and repr(T.Identity()) == "Identity()"
    assert T.from_torchvision([tvT.RandomApply(torch.nn.ModuleList([torch.nn.Identity()]), p=0.3), tvT.PILToTensor()])


def test_identity_keeps_the_samples_torchvisions(folder: Path) -> None:
    tv = v2.Compose([v2.Resize(64), torch.nn.Identity(), v2.CenterCrop(48), v2.Identity(), v2.PILToTensor()])
    got = _same_across_workers(fl.ImageFolder(folder), tv, output="uint8")
    assert torch.equal(got, _torchvisions(folder, tv))
    # Inside RandomChoice with RandomInvert(p=1): each sample is the image or its inverse,
    # and both occur.
    chosen = v2.Compose([v2.Resize(64), v2.CenterCrop(48), v2.RandomChoice([v2.Identity(), v2.RandomInvert(1.0)]),
                         v2.PILToTensor()])
    got = _same_across_workers(fl.ImageFolder(folder), chosen, output="uint8")
    want = _torchvisions(folder, tv)
    kept = [torch.equal(g, w) for g, w in zip(got, want)]
    inverted = [torch.equal(g, 255 - w) for g, w in zip(got, want)]
    assert all(k or i for k, i in zip(kept, inverted)) and any(kept) and any(inverted)


# RGB


def _gray_array(n: int = 12, size: Tuple[int, int] = (40, 36)) -> np.ndarray:
    rng = np.random.default_rng(5)
    y, x = np.mgrid[0:size[0], 0:size[1]]
    return np.stack([((x * (3 + i) + y * 7 + rng.integers(0, 40, size)) % 256).astype(np.uint8) for i in range(n)])


@pytest.mark.parametrize("tensor", [False, True], ids=["pil", "to-image"])
def test_rgb_makes_three_equal_channels_of_a_gray_image(tensor: bool) -> None:
    gray = _gray_array()
    head = [v2.ToImage()] if tensor else []
    # After RGB the colour ops mix three channels (torchvision's three-channel kernels).
    tv = v2.Compose([*head, v2.CenterCrop(32), v2.RGB(), v2.ColorJitter(contrast=(0.6, 0.6)),
                     *([] if tensor else [v2.PILToTensor()])])
    got = _same_across_workers(fl.ImageArray(gray, list(range(len(gray)))), tv, output="uint8")
    want = torch.stack([torch.as_tensor(tv(Image.fromarray(g))) for g in gray])
    assert got.shape == want.shape == (len(gray), 3, 32, 32)
    assert torch.equal(got, want)
    # Without RGB the same dataset gives one channel.
    assert fl.Loader(fl.ImageArray(gray, [0] * len(gray)), batch_size=2, transform=v2.Compose([v2.ToImage(), v2.ToDtype(torch.float32, scale=True)])).sample_shape[0] == 1


def test_rgb_changes_nothing_on_an_rgb_image(folder: Path) -> None:
    tv = v2.Compose([v2.Resize(64), v2.CenterCrop(48), v2.RGB(), v2.PILToTensor()])
    assert T.check(T.from_torchvision(tv), output="uint8")["shape"] == (3, 48, 48)
    got = _same_across_workers(fl.ImageFolder(folder), tv, output="uint8")
    assert torch.equal(got, _torchvisions(folder, tv))


def test_rgb_that_would_change_some_samples_only_is_refused() -> None:
    gray = _gray_array(4)
    spec = T.pipeline_spec(T.Compose([T.RandomApply([T.RGB()], p=0.5), T.ToTensor()]), mode="L")
    with pytest.raises(ValueError, match="RGB inside RandomApply"):
        fl._native.check_pipeline(spec.replace('"ops"', '"image_size": [40, 36], "ops"'))
    # On three channels it changes nothing, so it is fine there.
    T.check(T.Compose([T.CenterCrop(8), T.RandomApply([T.RGB()], p=0.5), T.ToTensor()]))
    del gray


# ToDtype / ConvertImageDtype float32 after the float conversion


@pytest.mark.parametrize(
    "ops",
    [
        [tvT.ToTensor(), tvT.ConvertImageDtype(torch.float32)],
        [tvT.ToTensor(), tvT.ConvertImageDtype(torch.float), tvT.Normalize(MEAN, STD)],
        [tvT.PILToTensor(), tvT.ConvertImageDtype(torch.float), tvT.ConvertImageDtype(torch.float32)],
        [v2.ToImage(), v2.ToDtype(torch.float32, scale=True), v2.ToDtype(torch.float32, scale=True)],
        [v2.ToImage(), v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD), v2.ToDtype(torch.float32)],
        [v2.ToImage(), v2.ToDtype({tv_tensors.Image: torch.float32, "others": None}, scale=True),
         v2.Normalize(MEAN, STD)],
        [v2.ToImage(), v2.ToDtype(torch.float32, scale=True),
         v2.ToDtype({tv_tensors.Image: torch.float32, "others": None}, scale=True)],
    ],
    ids=["v1", "v1-normalize", "v1-pil", "v2", "v2-unscaled", "v2-dict", "v2-dict-after"],
)
def test_float32_to_float32_is_dropped(folder: Path, ops: List[Any]) -> None:
    head = [tvT.Resize(64), tvT.CenterCrop(48)]
    converted = T.from_torchvision([*head, *ops])
    v2_conversion = type(ops[1]).__module__.startswith("torchvision.transforms.v2")
    assert type(converted.transforms[2]) is (T.ToDtype if v2_conversion else T.ToTensor)
    assert not any(isinstance(t, T.PILToTensor) for t in converted.transforms)
    tv = tvT.Compose([*head, *ops])
    got = _native_epoch(fl.ImageFolder(folder), tv)
    assert torch.equal(got, _torchvisions(folder, tv))


def test_the_per_type_dtype_converts_as_the_plain_one() -> None:
    per_type = [v2.ToImage(), v2.RandomResizedCrop(224), v2.RandomHorizontalFlip(),
                v2.ToDtype({tv_tensors.Image: torch.float32, "others": None}, scale=True), v2.Normalize(MEAN, STD)]
    plain = [*per_type[:3], v2.ToDtype(torch.float32, scale=True), per_type[4]]
    assert T.from_torchvision(per_type) == T.from_torchvision(plain)
    # On a plain tensor (v1's PILToTensor) torchvision looks up "others": None, no conversion.
    passes = [tvT.PILToTensor(), v2.ToDtype({tv_tensors.Image: torch.float32, "others": None}, scale=True)]
    assert T.from_torchvision(passes) == T.from_torchvision([tvT.PILToTensor()])
    img = Image.new("RGB", (4, 4), (9, 8, 7))
    with pytest.warns(UserWarning, match="no dtype was specified"):
        assert v2.Compose(passes)(img).dtype == torch.uint8  # what torchvision does there


def test_other_dtypes_after_the_float_conversion_are_refused() -> None:
    for op in (tvT.ConvertImageDtype(torch.float64), v2.ToDtype(torch.uint8, scale=True),
               v2.ToDtype(torch.float16, scale=True)):
        with pytest.raises(ValueError, match="dtype=torch.(float64|uint8|float16).*the image is float32 here"):
            T.from_torchvision([tvT.ToTensor(), op])
    with pytest.raises(ValueError, match="no dtype for"):
        T.from_torchvision([v2.ToImage(), v2.ToDtype({tv_tensors.Mask: torch.int64}, scale=True)])


# RandomChannelPermutation


def _permuted_images() -> np.ndarray:
    """Images whose three channels differ everywhere, so a sample names its permutation."""
    rng = np.random.default_rng(3)
    base = rng.integers(0, 80, (20, 16, 12, 1)).astype(np.uint8)
    return np.concatenate([base, base + 90, base + 175], axis=-1)


def _which_permutation(sample: torch.Tensor, original: torch.Tensor) -> Tuple[int, ...]:
    for perm in permutations(range(3)):
        if torch.equal(sample, original[list(perm)]):
            return perm
    raise AssertionError("the sample is no permutation of the image's channels")


@pytest.mark.parametrize("tensor", [False, True], ids=["pil", "to-image"])
def test_random_channel_permutation_is_one_of_torchvisions_outputs_uniformly(tensor: bool) -> None:
    images = _permuted_images()
    head = [v2.ToImage()] if tensor else []
    tv = v2.Compose([*head, v2.RandomChannelPermutation(), *([] if tensor else [v2.ToImage()])])
    dataset = fl.ImageArray(images, list(range(len(images))))
    converted = T.from_torchvision(tv)
    assert T.RandomChannelPermutation() in converted.transforms
    got = _same_across_workers(dataset, tv, output="uint8")
    original = torch.from_numpy(images).permute(0, 3, 1, 2)
    # Every sample is what torchvision gives for one of randperm(3)'s outputs.
    for perm in permutations(range(3)):
        torch.manual_seed(0)
        outputs = {tuple(torch.randperm(3).tolist()) for _ in range(60)}
        assert perm in outputs
    seen = [_which_permutation(g, o) for g, o in zip(got, original)]
    # Uniform over the six orders: many epochs (seeds), a chi-square test at 6 categories.
    counts: Counter[Tuple[int, ...]] = Counter(seen)
    for seed in range(1, 40):
        loader = fl.Loader(dataset, batch_size=20, transform=tv, output="uint8", python_tail="error", seed=seed)
        for x, _ in loader:
            counts.update(_which_permutation(g, o) for g, o in zip(x, original))
    total = sum(counts.values())
    expected = total / 6
    chi2 = sum((counts[p] - expected) ** 2 / expected for p in permutations(range(3)))
    assert len(counts) == 6 and chi2 < 20.5, (counts, chi2)  # p ~ 0.001 at 5 degrees of freedom


def test_random_channel_permutation_matches_torchvisions_kernel_per_order() -> None:
    """torchvision's kernel for each order equals the sample of that order (the permutation
    indexes the input's channels: output c is input perm[c])."""
    images = _permuted_images()
    original = torch.from_numpy(images).permute(0, 3, 1, 2)
    got = _native_epoch(fl.ImageArray(images, [0] * len(images)),
                        v2.Compose([v2.RandomChannelPermutation(), v2.PILToTensor()]), output="uint8")
    for g, o, img in zip(got, original, images):
        perm = _which_permutation(g, o)
        want = v2.functional.permute_channels(tv_tensors.Image(torch.from_numpy(img).permute(2, 0, 1)), list(perm))
        assert torch.equal(g, want)
        pil = v2.functional.permute_channels(Image.fromarray(img), list(perm))
        assert torch.equal(g, torch.from_numpy(np.array(pil)).permute(2, 0, 1))


def test_random_channel_permutation_of_a_gray_image_changes_nothing() -> None:
    gray = _gray_array(6)
    tv = v2.Compose([v2.RandomChannelPermutation(), v2.PILToTensor()])
    got = _native_epoch(fl.ImageArray(gray, [0] * len(gray)), tv, output="uint8")
    assert torch.equal(got, torch.stack([tv(Image.fromarray(g)) for g in gray]))


def test_random_channel_permutation_is_a_staged_op_with_its_span(folder: Path) -> None:
    tv = v2.Compose([v2.RandomResizedCrop(64), v2.RandomChannelPermutation(), v2.ToImage(),
                     v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)])
    loader = fl.Loader(fl.ImageFolder(folder), batch_size=6, num_workers=2, transform=tv, python_tail="error",
                       profile="spans")
    assert loader.python_tail == []
    for _ in loader:
        pass
    spans = loader.profile().pipeline("native")["spans"]
    assert sum(s["op"] == "RandomChannelPermutation" for s in spans) == 18


# GaussianNoise


def _noise_spec(mean: float = 0.0, sigma: float = 0.1, clip: bool = True) -> str:
    return json.dumps(T.GaussianNoise(mean, sigma, clip).to_spec())


@pytest.mark.parametrize("mean, sigma, clip", [(0.0, 0.1, True), (0.2, 0.35, True), (-0.05, 0.5, False), (0.0, 0.0, True)])
def test_gaussian_noise_is_torchvisions_arithmetic_with_the_same_normals(mean: float, sigma: float, clip: bool) -> None:
    """The hook adds the noise the pipeline adds and returns the normals it drew; torch's own
    ``image + (mean + z * sigma)`` (then ``clamp``) with those normals is the same, bit for bit."""
    rng = np.random.default_rng(0)
    image = rng.random((3, 17, 23), dtype=np.float32)
    noisy, normals = fl._native.gaussian_noise_apply(_noise_spec(mean, sigma, clip), image, 4, seed=9)
    assert noisy.shape == normals.shape == image.shape
    img = torch.from_numpy(image)
    z = torch.from_numpy(normals)
    # torchvision's gaussian_noise_image with randn_like replaced by the normals drawn.
    original = torch.randn_like
    try:
        torch.randn_like = lambda t, **kw: z.clone()  # type: ignore[assignment]
        want = v2.functional.gaussian_noise(img, mean=mean, sigma=sigma, clip=clip)
    finally:
        torch.randn_like = original  # type: ignore[assignment]
    assert torch.equal(torch.from_numpy(noisy), want)
    if clip:
        assert 0.0 <= float(want.min()) and float(want.max()) <= 1.0


def test_gaussian_noise_draws_standard_normals() -> None:
    """The normals of many samples: mean 0 and standard deviation 1 (within a few standard
    errors), symmetric tails as a normal's, and another sample index draws others."""
    image = np.full((3, 64, 64), 0.5, np.float32)
    draws = np.concatenate([fl._native.gaussian_noise_apply(_noise_spec(), image, i, seed=3)[1].ravel()
                            for i in range(40)])
    n = draws.size
    assert abs(draws.mean()) < 4 / np.sqrt(n)
    assert abs(draws.std() - 1) < 4 * np.sqrt(0.5 / n)
    for k, p in ((1, 0.3173), (2, 0.0455)):
        assert abs(np.mean(np.abs(draws) > k) - p) < 5 * np.sqrt(p * (1 - p) / n)
    first, again = (fl._native.gaussian_noise_apply(_noise_spec(), image, 0, seed=3)[1] for _ in range(2))
    assert np.array_equal(first, again)
    assert not np.array_equal(first, fl._native.gaussian_noise_apply(_noise_spec(), image, 1, seed=3)[1])


def test_gaussian_noise_arguments_are_checked_as_torchvision_does() -> None:
    with pytest.raises(ValueError, match="sigma shouldn't be negative"):
        T.GaussianNoise(sigma=-0.1)
    with pytest.raises(ValueError, match="sigma shouldn't be negative"):
        fl._native.check_pipeline(json.dumps({"ops": [{"op": "CenterCrop", "size": 8}, {"op": "ToTensor"},
                                                      {"op": "GaussianNoise", "sigma": -1}]}))
    with pytest.raises(ValueError, match="Gaussian Noise is not implemented for PIL images"):
        T.from_torchvision([v2.CenterCrop(8), v2.GaussianNoise(), v2.ToImage()])
    with pytest.raises(ValueError, match="uint8 tensor here"):
        T.from_torchvision([v2.ToImage(), v2.CenterCrop(8), v2.GaussianNoise(), v2.ToDtype(torch.float32, scale=True)])
    with pytest.raises(ValueError, match="GaussianNoise write into the float32 tensor"):
        T.check(T.Compose([T.CenterCrop(8), T.ToTensor(), T.GaussianNoise()]), output="uint8")
    img = Image.new("RGB", (4, 4))
    with pytest.raises(ValueError, match="Gaussian Noise is not implemented for PIL images"):
        v2.GaussianNoise()(img)


def _noise_pipelines(before: bool, mean: float = 0.0, sigma: float = 0.1, clip: bool = True) -> Tuple[Any, Any]:
    """torchvision's pipeline with GaussianNoise before (or after) Normalize, and the same
    without it."""
    head = [v2.Resize(64), v2.CenterCrop(48), v2.RandomHorizontalFlip(), v2.ToImage(), v2.ToDtype(torch.float32, scale=True)]
    noise = [v2.GaussianNoise(mean, sigma, clip)]
    norm = [v2.Normalize(MEAN, STD)]
    return v2.Compose(head + (noise + norm if before else norm + noise)), v2.Compose(head + norm)


@pytest.mark.parametrize("before", [True, False], ids=["before-normalize", "after-normalize"])
def test_gaussian_noise_in_a_pipeline_runs_natively_with_torchvisions_statistics(folder: Path, before: bool) -> None:
    """The noise the loader adds (noisy minus clean samples, on the scale the noise is added
    at) has the distribution of what torchvision's own GaussianNoise adds to the same clean
    samples with torch's generator: the same mean, spread and share of clamped values."""
    noisy_tv, clean_tv = _noise_pipelines(before, mean=0.05, sigma=0.2)
    dataset = fl.ImageFolder(folder)
    noisy = _same_across_workers(dataset, noisy_tv)
    clean = _native_epoch(dataset, clean_tv)  # the same flips: the noise draws come after them
    std = torch.tensor(STD)[:, None, None]
    mean = torch.tensor(MEAN)[:, None, None]
    # Where the noise is added: the [0, 1] values before Normalize, or the normalized ones.
    x_noisy = noisy * std + mean if before else noisy
    x_clean = clean * std + mean if before else clean
    got = (x_noisy - x_clean).flatten()
    torch.manual_seed(0)
    reps = 4
    ref_noisy = torch.cat([v2.GaussianNoise(0.05, 0.2)(x_clean) for _ in range(reps)])
    want = (ref_noisy - x_clean.repeat(reps, 1, 1, 1)).flatten()
    n = got.numel()
    assert abs(float(got.mean() - want.mean())) < 6 * 0.2 / np.sqrt(n)
    assert abs(float(got.std() - want.std())) < 6 * 0.2 / np.sqrt(2 * n) + 1e-3
    clamped = lambda x: float(((x <= 1e-5) | (x >= 1 - 1e-5)).float().mean())  # noqa: E731
    p = clamped(ref_noisy)
    assert abs(clamped(x_noisy) - p) < 6 * np.sqrt(p * (1 - p) / n) + 1e-4
    assert float(x_noisy.min()) >= -1e-6 and float(x_noisy.max()) <= 1 + 1e-6
    # The converted pipeline: a GaussianNoise where torchvision has it.
    converted = T.from_torchvision(noisy_tv)
    names = [type(t).__name__ for t in converted.transforms]
    assert names[-2:] == (["GaussianNoise", "Normalize"] if before else ["Normalize", "GaussianNoise"])


def test_gaussian_noise_through_the_loader_is_a_standard_normal(folder: Path) -> None:
    """End to end through the loader, the noise added (sigma 1, no clamp, after ``Normalize``
    so nothing rescales it; 885k values) is a standard normal as torch's ``randn``: a
    Kolmogorov-Smirnov test against the normal CDF, its moments and tail shares, the tails
    stopping where 24-bit uniforms stop (5.77), and no correlation between neighbouring
    values or between the noise of neighbouring samples."""
    head = [v2.Resize(128), v2.CenterCrop(128), v2.ToImage(), v2.ToDtype(torch.float32, scale=True),
            v2.Normalize(MEAN, STD)]
    dataset = fl.ImageFolder(folder)
    noisy = _native_epoch(dataset, v2.Compose(head + [v2.GaussianNoise(0.0, 1.0, clip=False)]))
    clean = _native_epoch(dataset, v2.Compose(head))
    # float32's rounding of x + z and of the difference: below 1e-6, far inside every bound.
    z = (noisy - clean).double()
    flat = z.flatten()
    n = flat.numel()
    ordered, _ = torch.sort(flat)
    cdf = torch.special.ndtr(ordered)
    rank = torch.arange(n, dtype=torch.float64)
    d = max(float((cdf - rank / n).abs().max()), float(((rank + 1) / n - cdf).abs().max()))
    assert d < 1.63 / np.sqrt(n), d  # KS at 1%
    mean, var = float(flat.mean()), float(flat.var())
    assert abs(mean) < 5 / np.sqrt(n) and abs(var - 1) < 5 * np.sqrt(2 / n), (mean, var)
    kurtosis = float(((flat - mean) ** 4).mean()) / var**2 - 3
    assert abs(kurtosis) < 5 * np.sqrt(24 / n), kurtosis
    for k, p in ((3, 2.6998e-3), (4, 6.334e-5)):
        share = float((flat.abs() > k).double().mean())
        assert abs(share - p) < 5 * np.sqrt(p / n) + 1e-6, (k, share)
    assert float(flat.abs().max()) < 5.7683 + 1e-5

    def corr(a: torch.Tensor, b: torch.Tensor) -> float:
        return float(torch.corrcoef(torch.stack([a.flatten(), b.flatten()]))[0, 1])

    assert abs(corr(z[..., :-1], z[..., 1:])) < 5 / np.sqrt(n)
    assert abs(corr(z[:, :, :-1], z[:, :, 1:])) < 5 / np.sqrt(n)
    assert abs(corr(z[:-1], z[1:])) < 5 / np.sqrt(n)


def test_gaussian_noise_before_normalize_is_torchvisions_with_the_same_normals(folder: Path) -> None:
    """The whole sample, bit for bit: torchvision's pipeline on the same image with
    ``randn_like`` giving the normals the sample drew (no flip, so the noise is the only draw)."""
    tv = v2.Compose([v2.Resize(40), v2.CenterCrop(32), v2.ToImage(), v2.ToDtype(torch.float32, scale=True),
                     v2.GaussianNoise(0.02, 0.3), v2.Normalize(MEAN, STD)])
    plain = v2.Compose([v2.Resize(40), v2.CenterCrop(32), v2.ToImage(), v2.ToDtype(torch.float32, scale=True)])
    dataset = fl.ImageFolder(folder)
    got = _native_epoch(dataset, tv, workers=0)
    # The unnormalized, noise-free samples, as the native pipeline converts them.
    unnoised = _native_epoch(dataset, v2.Compose(list(plain.transforms)), workers=0)
    reference = torchvision.datasets.ImageFolder(str(folder))
    original = torch.randn_like
    try:
        for i in range(len(reference)):
            _, normals = fl._native.gaussian_noise_apply(_noise_spec(0.02, 0.3), unnoised[i].numpy(), i, seed=11)
            z = torch.from_numpy(normals)
            torch.randn_like = lambda t, **kw: z.clone()  # type: ignore[assignment]
            img = unnoised[i]
            assert torch.equal(img, plain(reference[i][0]).as_subclass(torch.Tensor)), i  # torchvision's ToDtype
            want = v2.Normalize(MEAN, STD)(v2.GaussianNoise(0.02, 0.3)(tv_tensors.Image(img)))
            assert torch.equal(got[i], want.as_subclass(torch.Tensor)), i
    finally:
        torch.randn_like = original  # type: ignore[assignment]


# RandomPhotometricDistort

F2 = v2.functional
DISTORT = dict(brightness=(1.21, 1.21), contrast=(0.62, 0.62), saturation=(1.45, 1.45), hue=(0.031, 0.031))


def _f32(v: float) -> float:
    """``v`` as torchvision's ``_generate_value`` gives it: a float32 uniform's value."""
    return float(torch.tensor(v, dtype=torch.float32))


def _distort_candidates(img: Any, perm_channels: int = 3) -> List[torch.Tensor]:
    """torchvision's kernels in both contrast places and under every permutation: the 12
    outputs ``RandomPhotometricDistort(**DISTORT, p=1)`` can give (index: 6 * after + perm)."""
    out = []
    b, c, s, h = (_f32(DISTORT[k][0]) for k in ("brightness", "contrast", "saturation", "hue"))
    for before in (True, False):
        x = F2.adjust_brightness(img, b)
        if before:
            x = F2.adjust_contrast(x, c)
        x = F2.adjust_hue(F2.adjust_saturation(x, s), h)
        if not before:
            x = F2.adjust_contrast(x, c)
        t = x if isinstance(x, torch.Tensor) else v2.functional.pil_to_tensor(x)
        for perm in permutations(range(perm_channels)):
            out.append(torch.as_tensor(t)[list(perm)].clone())
    return out


def _distort_head(tensor: bool) -> List[Any]:
    """The geometry on the PIL image (exact), then, for ``tensor``, the uint8 tensor."""
    return [v2.Resize(40), v2.CenterCrop(32), *([v2.ToImage()] if tensor else [])]


@pytest.mark.parametrize("tensor", [False, True], ids=["pil", "to-image"])
def test_photometric_distort_is_one_of_torchvisions_outputs_uniformly(folder: Path, tensor: bool) -> None:
    tv = v2.Compose([*_distort_head(tensor), v2.RandomPhotometricDistort(**DISTORT, p=1.0),
                     *([] if tensor else [v2.PILToTensor()])])
    head = v2.Compose(_distort_head(tensor))
    reference = torchvision.datasets.ImageFolder(str(folder))
    candidates = [_distort_candidates(head(reference[i][0])) for i in range(len(reference))]
    # torchvision's own outputs are among the candidates (so the candidates are right).
    torch.manual_seed(1)
    tv_seen: Counter[int] = Counter()
    for i in range(len(reference)):
        for _ in range(8):
            out = torch.as_tensor(tv(reference[i][0]))
            tv_seen.update(k for k, c in enumerate(candidates[i]) if torch.equal(out, c))
    assert sum(tv_seen.values()) >= 8 * len(reference)
    dataset = fl.ImageFolder(folder)
    got = _same_across_workers(dataset, tv, output="uint8")
    seen: Counter[int] = Counter()
    for seed in range(10):
        loader = fl.Loader(dataset, batch_size=9, transform=tv, output="uint8", python_tail="error", seed=seed)
        epoch = got if seed == 0 else torch.cat([x for x, _ in loader])
        for i, sample in enumerate(epoch):
            matches = [k for k, c in enumerate(candidates[i]) if torch.equal(sample, c)]
            assert matches, f"sample {i}: none of torchvision's outputs"
            seen[matches[0]] += 1
    # Uniform over the 12 (place of the contrast x permutation): chi-square at 11 degrees of
    # freedom, p ~ 0.001. (Candidates that coincide are counted at the first.)
    total = sum(seen.values())
    distinct = [k for k in range(12) if all(not torch.equal(candidates[0][k], candidates[0][j]) for j in range(k))]
    assert len(distinct) == 12
    chi2 = sum((seen[k] - total / 12) ** 2 / (total / 12) for k in range(12))
    assert chi2 < 31.3, (seen, chi2)


@pytest.mark.parametrize("tensor", [False, True], ids=["pil", "to-image"])
def test_photometric_distort_applies_each_step_as_often_as_torchvision(folder: Path, tensor: bool) -> None:
    """p = 0.3: the share of samples left as they are (every coin says no, or the only
    permutation drawn is the identity) is torchvision's, within sampling error."""
    p = 0.3
    distort = v2.RandomPhotometricDistort(**DISTORT, p=p)
    tv = v2.Compose([*_distort_head(tensor), distort, *([] if tensor else [v2.PILToTensor()])])
    head = v2.Compose([*_distort_head(tensor), *([] if tensor else [v2.PILToTensor()])])
    dataset = fl.ImageFolder(folder)
    plain = _native_epoch(dataset, head, output="uint8")
    unchanged = n = 0
    for seed in range(20):
        loader = fl.Loader(dataset, batch_size=9, transform=tv, output="uint8", python_tail="error", seed=seed)
        epoch = torch.cat([x for x, _ in loader])
        unchanged += sum(bool(torch.equal(a, b)) for a, b in zip(epoch, plain))
        n += len(epoch)
    want = (1 - p) ** 4 * ((1 - p) + p / 6)
    assert abs(unchanged / n - want) < 4 * np.sqrt(want * (1 - want) / n), (unchanged, n, want)
    # torchvision's own draws give the same share on these images.
    torch.manual_seed(2)
    reference = torchvision.datasets.ImageFolder(str(folder), transform=tv)
    tv_unchanged = sum(bool(torch.equal(torch.as_tensor(reference[i % len(plain)][0]), plain[i % len(plain)]))
                       for i in range(n))
    assert abs(unchanged - tv_unchanged) / n < 4 * np.sqrt(2 * want * (1 - want) / n)


def test_photometric_distort_factors_are_uniform_in_their_ranges(folder: Path) -> None:
    """Only brightness on, on one flat grey image: the output level is the factor times the
    level, rounded as Pillow rounds; its spread over many samples is torchvision's (a
    two-sample Kolmogorov-Smirnov test against torchvision's own draws)."""
    grey = np.full((4, 16, 16, 3), 100, np.uint8)
    tv = v2.Compose([v2.RandomPhotometricDistort(brightness=(0.5, 1.5), contrast=(1, 1), saturation=(1, 1),
                                                 hue=(0, 0), p=1.0), v2.PILToTensor()])
    dataset = fl.ImageArray(grey, [0] * 4)
    levels = []
    for seed in range(100):
        loader = fl.Loader(dataset, batch_size=4, transform=tv, output="uint8", python_tail="error", seed=seed)
        levels += [int(x[0, 0, 0]) for x, _ in [next(iter(loader))] for x in x]
    torch.manual_seed(3)
    tv_levels = [int(tv(Image.fromarray(grey[0]))[0, 0, 0]) for _ in range(len(levels))]
    a, b = np.sort(levels), np.sort(tv_levels)
    grid = np.arange(0, 256)
    ks = np.max(np.abs(np.searchsorted(a, grid, side="right") / len(a) - np.searchsorted(b, grid, side="right") / len(b)))
    assert ks < 1.95 * np.sqrt(2 / len(a)), ks  # p ~ 0.001
    assert 50 <= min(levels) and max(levels) <= 150 and len(set(levels)) > 60


def test_photometric_distort_converts_and_refuses_as_torchvision() -> None:
    converted = T.from_torchvision([v2.ToImage(), v2.RandomPhotometricDistort(), v2.ToDtype(torch.float32, scale=True)])
    assert converted.transforms[0] == T.ToImage(api="v2")
    assert converted.transforms[1] == T.RandomPhotometricDistort()
    with pytest.raises(ValueError, match="hue should be an ordered range within"):
        T.RandomPhotometricDistort(hue=(-0.6, 0.1))
    with pytest.raises(ValueError, match="`hue`: RandomPhotometricDistort"):
        fl._native.check_pipeline(json.dumps({"ops": [{"op": "CenterCrop", "size": 8},
                                                      {"op": "RandomPhotometricDistort", "hue": [0, 0.7]},
                                                      {"op": "ToTensor"}]}))
    with pytest.raises(ValueError, match="contrast"):
        T.RandomPhotometricDistort(contrast=(-1, 1))
