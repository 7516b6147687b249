"""timm's ``RandomResizedCropAndInterpolation`` with a choice of filters
(``interpolation='random'``, timm's training default), natively: the loader's samples against
timm's own object with the loader's draws injected (its ``get_params`` and ``random.choice``
patched to return them), the filter's distribution against timm's own draws, the conversion of
``create_transform``'s pipelines, and determinism across workers."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any, Dict, List, Tuple
from unittest import mock

import numpy as np
import pytest
import torch
import torchvision
import torchvision.transforms as tv
import torchvision.transforms.functional as F
from PIL import Image

import ferroloader as fl
from ferroloader import transforms as T

from conftest import epoch_samples, rgb_of

timm_data = pytest.importorskip("timm.data")
timm_transforms = pytest.importorskip("timm.data.transforms")
TimmRRC = timm_transforms.RandomResizedCropAndInterpolation

SEED = 5
MODES = {m.value: m for m in tv.InterpolationMode}


def timm_sample(
    timm_op: Any, rgb: Image.Image, crop: Tuple[int, int, int, int], filter_name: str
) -> Image.Image:
    """timm's ``__call__`` on ``rgb`` with the crop and the filter choice injected."""
    chosen = MODES[filter_name]
    assert chosen in timm_op.interpolation
    with mock.patch.object(timm_op, "get_params", lambda img, scale, ratio: crop), mock.patch.object(
        timm_transforms.random, "choice", lambda seq: chosen
    ):
        out: Image.Image = timm_op(rgb)
    return out


def run_loader(
    folder: Path, transform: T.Compose, num_workers: int = 2, batch_size: int = 5, output: str = "float32"
) -> Tuple[List[np.ndarray], List[int]]:
    """Every sample of one shuffled epoch (epoch 2) and the dataset indices they came from."""
    return epoch_samples(
        folder, transform, seed=SEED, epoch=2, num_workers=num_workers, batch_size=batch_size,
        output=output,
    )



# Where the crop stands: (ops before it, a pixel op after the flip, how the image it crops is
# made from the decoded one).
PLACEMENTS: Dict[str, Any] = {
    "first, fused": ([], [], lambda img: img),
    "first, staged": ([], [T.Grayscale(3)], lambda img: img),
    "after Resize": ([T.Resize(60)], [], lambda img: F.resize(img, 60, antialias=True)),
    "stage op": ([T.CenterCrop(50)], [], lambda img: F.center_crop(img, [50, 50])),
}


@pytest.mark.parametrize("placement", list(PLACEMENTS))
@pytest.mark.parametrize("interpolation", ["random", ["lanczos", "nearest", "box"]], ids=["random", "three"])
def test_samples_equal_timms_with_the_draws_injected(folder: Path, placement: str, interpolation: Any) -> None:
    """uint8 samples through the whole loader, each against timm's object with the loader's
    crop and filter injected, then the flip (and Grayscale) as torchvision computes them:
    bit-exact for every filter drawn."""
    size = 32
    before, pixel_ops, source_of = PLACEMENTS[placement]
    ours = T.RandomResizedCropAndInterpolation(size, interpolation=interpolation)
    transform = T.Compose([*before, ours, T.RandomHorizontalFlip(), *pixel_ops, T.PILToTensor()])
    timm_op = TimmRRC(size, interpolation=interpolation if isinstance(interpolation, str) else "bilinear")
    if not isinstance(interpolation, str):
        timm_op.interpolation = [MODES[name] for name in interpolation]
    ds = fl.ImageFolder(folder)
    drawn = {name: 0 for name in ours.filters}
    samples, indices = run_loader(folder, transform, output="uint8")
    assert len(samples) == len(ds)
    for sample, index in zip(samples, indices):
        source = source_of(rgb_of(ds.samples[index][0]))
        width, height = source.size
        ((top, left, h, w, filter_index, flipped),) = ours.draw_params(
            width, height, [index], seed=SEED, epoch=2, flip_p=0.5
        )
        name = ours.filters[int(filter_index)]
        drawn[name] += 1
        want = timm_sample(timm_op, source, (int(top), int(left), int(h), int(w)), name)
        if flipped:
            want = F.hflip(want)
        if pixel_ops:
            want = F.rgb_to_grayscale(want, 3)
        assert np.array_equal(sample, F.pil_to_tensor(want).numpy()), f"sample {index} ({name})"
    assert sum(drawn.values()) == len(ds)
    assert sum(n > 0 for n in drawn.values()) >= 2, drawn


def test_the_filter_is_uniform_as_timms_choice() -> None:
    """The filter's share over many draws against timm's own (its ``__call__`` on an image,
    the resize recorded), and the crop's moments against timm's ``get_params``."""
    n = 4000
    ours = T.RandomResizedCropAndInterpolation(224, interpolation="random")
    params = ours.draw_params(500, 375, range(n), seed=3)
    share = float((params[:, 4] == ours.filters.index("bicubic")).mean())
    timm_op = TimmRRC(224, interpolation="random")
    chosen: List[str] = []

    def record(img: Any, i: int, j: int, h: int, w: int, size: Any, interpolation: Any) -> None:
        chosen.append(interpolation.value)

    random.seed(0)
    image = Image.new("RGB", (500, 375))
    with mock.patch.object(timm_transforms.F, "resized_crop", record):
        for _ in range(n):
            timm_op(image)
    theirs = chosen.count("bicubic") / n
    # Two Bernoulli(1/2) shares of 4000: a difference's standard deviation is ~0.011.
    assert abs(share - 0.5) < 0.032 and abs(theirs - 0.5) < 0.032 and abs(share - theirs) < 0.045
    assert set(chosen) == {"bilinear", "bicubic"}
    # A list of three (one twice): random.choice's weights.
    three = T.RandomResizedCropAndInterpolation(224, interpolation=["box", "lanczos", "box"])
    counts = np.bincount(three.draw_params(500, 375, range(n), seed=4)[:, 4], minlength=3)
    assert abs(counts[1] / n - 1 / 3) < 0.03 and abs(counts[0] / n - 1 / 3) < 0.03
    # The crops: timm's get_params (Python's random) draws what ours do.
    random.seed(1)
    timm_crops = np.array([TimmRRC.get_params(image, (0.08, 1.0), (3 / 4, 4 / 3)) for _ in range(n)])
    error = np.sqrt(params[:, :4].var(axis=0) / n + timm_crops.var(axis=0) / n)
    assert (np.abs(params[:, :4].mean(axis=0) - timm_crops.mean(axis=0)) < 4 * error).all()
    # One filter draws nothing: the flip coin is the one RandomResizedCrop's sample draws.
    one = T.RandomResizedCropAndInterpolation(224, interpolation="bicubic").draw_params(
        500, 375, range(50), seed=3, flip_p=0.5
    )
    torchvision_like = T.RandomResizedCrop(224).draw_params(500, 375, range(50), seed=3, flip_p=0.5)
    assert (one[:, 4] == 0).all()
    assert np.array_equal(one[:, [0, 1, 2, 3, 5]], torchvision_like)


def test_create_transform_converts_with_the_crop_native(folder: Path) -> None:
    """timm's training transform with its default filter choice, alone and with RandAugment and
    RandomErasing, converts whole (no Python tail) and runs."""
    train = timm_data.create_transform(48, is_training=True, interpolation="random")
    converted = T.from_torchvision(train)
    first = converted.transforms[0]
    assert isinstance(first, T.RandomResizedCropAndInterpolation)
    assert first.filters == ["bilinear", "bicubic"] and first.size == [48, 48]
    assert json.loads(T.pipeline_spec(converted))["ops"][0] == {
        "op": "RandomResizedCropAndInterpolation",
        "size": [48, 48],
        "scale": [0.08, 1.0],
        "ratio": [3 / 4, 4 / 3],
        "interpolation": ["bilinear", "bicubic"],
    }
    assert first == T.RandomResizedCropAndInterpolation([48, 48], interpolation="random")
    full = timm_data.create_transform(
        48, is_training=True, interpolation="random", auto_augment="rand-m9-mstd0.5-inc1", re_prob=0.25
    )
    names = [type(t).__name__ for t in T.from_torchvision(full).transforms]
    assert names == [
        "RandomResizedCropAndInterpolation",
        "RandomHorizontalFlip",
        "TimmRandAugment",
        "ToTensor",
        "Normalize",
        "TimmRandomErasing",
    ]
    for transform in (train, full):
        dataset = torchvision.datasets.ImageFolder(str(folder), transform=transform)
        loader = fl.Loader(dataset, 6, num_workers=2, python_tail="error")
        assert loader.python_tail == []
        shapes = {tuple(x.shape[1:]) for x, _ in loader}
        assert shapes == {(3, 48, 48)}


def test_samples_are_the_same_whatever_the_workers(folder: Path) -> None:
    transform = T.Compose(
        [
            T.RandomResizedCropAndInterpolation(40, interpolation="random"),
            T.RandomHorizontalFlip(),
            T.ColorJitter(0.3, 0.3),
            T.ToTensor(),
            T.Normalize([0.5, 0.5, 0.5], [0.25, 0.25, 0.25]),
        ]
    )
    runs = [run_loader(folder, transform, num_workers=w, batch_size=4) for w in (0, 1, 3)]
    for samples, indices in runs[1:]:
        assert indices == runs[0][1]
        assert all(np.array_equal(a, b) for a, b in zip(samples, runs[0][0]))


def test_arguments_are_checked_and_after_to_image_pil_only_filters_refused() -> None:
    op = "RandomResizedCropAndInterpolation"
    assert T.RandomResizedCropAndInterpolation(8).interpolation == "bilinear"
    assert T.RandomResizedCropAndInterpolation(8, interpolation=tv.InterpolationMode.BICUBIC).filters == ["bicubic"]
    assert T.RandomResizedCropAndInterpolation(8, interpolation=(2, 3)).filters == ["bilinear", "bicubic"]
    with pytest.raises(ValueError, match=rf"{op}: interpolation 'cubic'"):
        T.RandomResizedCropAndInterpolation(8, interpolation=["bilinear", "cubic"])
    with pytest.raises(ValueError, match=rf"{op}: interpolation must be one filter, 'random', or a list of 1 to 8"):
        T.RandomResizedCropAndInterpolation(8, interpolation=[])
    with pytest.raises(ValueError, match=rf"{op}: scale"):
        T.RandomResizedCropAndInterpolation(8, scale=(1.0, 0.5))
    T.check(T.Compose([T.RandomResizedCropAndInterpolation(8, interpolation=["box"] * 8), T.ToTensor()]))
    # timm's object on a tensor (after ToImage) resizes with torchvision's tensor kernels, which
    # have no box, hamming or lanczos.
    lanczos = TimmRRC(8, interpolation="bilinear")
    lanczos.interpolation = [MODES["bilinear"], MODES["lanczos"]]
    with pytest.raises(ValueError, match=r"resizes an image tensor with \['bilinear', 'lanczos'\]"):
        T.from_torchvision([tv.PILToTensor(), lanczos, tv.ConvertImageDtype(torch.float)])
