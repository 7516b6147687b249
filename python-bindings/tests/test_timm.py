"""timm's transforms (``timm.data.create_transform``, what timm-based training scripts build):
they convert to the torchvision pipeline that computes the same thing, run natively, and what
does not convert is named and left to the Python tail."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torchvision
import torchvision.transforms as tv
from PIL import Image

import ferroloader as fl
from ferroloader import transforms as T

timm_data = pytest.importorskip("timm.data")
from timm.data.random_erasing import RandomErasing as TimmErasing  # noqa: E402
from timm.data.transforms import RandomResizedCropAndInterpolation  # noqa: E402

MEAN, STD = timm_data.IMAGENET_DEFAULT_MEAN, timm_data.IMAGENET_DEFAULT_STD


def same_spec(a: Any, b: Any) -> bool:
    """Two pipeline specs, floats compared to float32's precision: timm keeps log aspect ratios,
    and Normalize's mean and std as float32 tensors (torchvision's Normalize computes in
    float32 either way)."""
    if isinstance(a, float) or isinstance(b, float):
        return isinstance(a, (int, float)) and isinstance(b, (int, float)) and math.isclose(a, b, rel_tol=1e-7)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_spec(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_spec(x, y) for x, y in zip(a, b))
    return bool(a == b)


def spec(transform: Any) -> Any:
    return json.loads(T.pipeline_spec(T.from_torchvision(transform)))


def torchvision_train(mode: tv.InterpolationMode, *erasing: Any) -> tv.Compose:
    """What timm's default train transform computes, in torchvision's classes."""
    return tv.Compose(
        [
            tv.RandomResizedCrop(64, interpolation=mode),
            tv.RandomHorizontalFlip(),
            tv.ColorJitter(0.4, 0.4, 0.4),
            tv.ToTensor(),
            tv.Normalize(MEAN, STD),
            *erasing,
        ]
    )


@pytest.mark.parametrize("interpolation", ["bilinear", "bicubic"])
def test_create_transform_converts_to_the_torchvision_pipeline(interpolation: str) -> None:
    mode = tv.InterpolationMode(interpolation)
    train = timm_data.create_transform(64, is_training=True, interpolation=interpolation)
    assert same_spec(spec(train), spec(torchvision_train(mode)))
    erasing = timm_data.create_transform(
        64, is_training=True, interpolation=interpolation, re_prob=0.25, re_mode="pixel"
    )
    pixel = T.TimmRandomErasing(0.25, mode="pixel")
    want = spec(torchvision_train(mode))
    want["ops"].append(pixel.to_spec())
    assert same_spec(spec(erasing), want)
    evaluation = timm_data.create_transform(64, is_training=False, interpolation=interpolation)
    assert same_spec(
        spec(evaluation),
        spec(tv.Compose([tv.Resize(73, mode), tv.CenterCrop(64), tv.ToTensor(), tv.Normalize(MEAN, STD)])),
    )
    constant = TimmErasing(0.5, min_area=0.1, max_area=0.2, min_aspect=0.5, mode="const", device="cpu")
    assert same_spec(
        spec([tv.ToTensor(), constant]),
        json.loads(T.pipeline_spec(T.Compose([T.ToTensor(), T.TimmRandomErasing(0.5, 0.1, 0.2, 0.5, 2.0, "const")]))),
    )


def test_timm_pipelines_run_natively_and_evaluate_as_timm(folder: Path) -> None:
    evaluation = timm_data.create_transform(48, is_training=False, interpolation="bicubic")
    dataset = torchvision.datasets.ImageFolder(str(folder), transform=evaluation)
    ours = fl.Loader(dataset, 6, num_workers=2, python_tail="error")
    theirs = torch.utils.data.DataLoader(dataset, batch_size=6)
    batches = 0
    for (x, y), (u, v) in zip(ours, theirs):
        levels = (x - u).abs() * torch.tensor(STD).view(1, 3, 1, 1) * 255
        assert levels.max() <= 1.01 and torch.equal(y, v)
        batches += 1
    assert batches == len(theirs)
    train = timm_data.create_transform(48, is_training=True, re_prob=0.25, re_mode="pixel")
    loader = fl.Loader(torchvision.datasets.ImageFolder(str(folder), transform=train), 6, python_tail="error")
    shapes = {tuple(x.shape[1:]) for x, _ in loader}
    assert shapes == {(3, 48, 48)}


def test_timm_draws_follow_torchvisions() -> None:
    """The premise of the crop's conversion: timm's crop draws from torchvision's distribution
    (its algorithm on Python's ``random``), checked on many draws. (timm's erasing converts to
    its own op, with timm's draws: test_timm_erasing.py.)"""
    image = Image.new("RGB", (200, 150))
    draws = 4000
    torch.manual_seed(0)
    tv_crops = np.array([tv.RandomResizedCrop.get_params(image, [0.08, 1.0], [3 / 4, 4 / 3]) for _ in range(draws)])
    import random

    random.seed(0)
    timm_crops = np.array(
        [RandomResizedCropAndInterpolation.get_params(image, (0.08, 1.0), (3 / 4, 4 / 3)) for _ in range(draws)]
    )
    # (top, left, height, width): means within 4 standard errors.
    error = np.sqrt(tv_crops.var(axis=0) / draws + timm_crops.var(axis=0) / draws)
    assert (np.abs(tv_crops.mean(axis=0) - timm_crops.mean(axis=0)) < 4 * error).all()


def test_what_does_not_convert_is_named_and_left_to_the_tail(folder: Path) -> None:
    from timm.data.auto_augment import NAME_TO_OP, auto_augment_transform

    changed = auto_augment_transform("v0", {"img_mean": (124, 116, 104)})
    timms = NAME_TO_OP[changed.policy[2][0].name]
    # A wrapper of timm's own function: it runs in the tail, but is not timm's, so it stays there.
    changed.policy[2][0].aug_fn = lambda img, *args, **kwargs: timms(img, *args, **kwargs)
    with pytest.raises(ValueError, match=r"policy\[2\]\[0\] name='\w+': its functions are not timm's"):
        T.from_torchvision([tv.CenterCrop(32), changed, tv.ToTensor()])
    # In a loader, the native prefix runs and timm's op after it in Python.
    transform = tv.Compose([tv.CenterCrop(32), changed, tv.ToTensor()])
    with pytest.warns(UserWarning, match=r"AutoAugment, ToTensor run in Python"):
        ld = fl.Loader(fl.ImageFolder(folder), 4, transform=transform, num_workers=2)
    assert [type(t).__name__ for t in ld.transform.transforms] == ["CenterCrop"]
    assert ld.python_tail == [changed, transform.transforms[2]]
    with pytest.raises(ValueError, match=r"not timm's.*python_tail='error'"):
        fl.Loader(fl.ImageFolder(folder), 4, transform=transform, python_tail="error")


def test_a_random_filter_converts_to_the_native_op() -> None:
    """``interpolation='random'`` (timm's list of filters) converts to
    ``T.RandomResizedCropAndInterpolation``; one filter stays torchvision's RandomResizedCrop."""
    random_filter = RandomResizedCropAndInterpolation(32, interpolation="random")
    converted = T.from_torchvision([random_filter, tv.ToTensor()]).transforms[0]
    assert converted == T.RandomResizedCropAndInterpolation([32, 32], interpolation=["bilinear", "bicubic"])
    one = T.from_torchvision([RandomResizedCropAndInterpolation(32, interpolation="bicubic")]).transforms[0]
    assert one == T.RandomResizedCrop([32, 32], interpolation="bicubic")
