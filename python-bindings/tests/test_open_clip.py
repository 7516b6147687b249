"""open_clip's preprocessing (``open_clip.image_transform``, what ``create_model_and_transforms``
returns) runs natively: its own classes (``MaybeConvertMode``, ``MaybeToTensor``,
``ResizeKeepRatio``, ``CenterCropOrPad``, ``color_jitter``, ``gray_scale``) convert to what
computes the same, and the eval preprocessing equals open_clip's bit for bit; what computes
something else stays a Python tail."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, List, Tuple

import pytest
import torch
import torchvision.transforms as tv
from PIL import Image

import ferroloader as fl
from ferroloader import transforms as T

open_clip = pytest.importorskip("open_clip")
oct = pytest.importorskip("open_clip.transform")


def items(folder: Path) -> List[Tuple[str, int]]:
    return [(str(p), i) for i, p in enumerate(sorted(folder.rglob("*.jpg")))]


@pytest.mark.parametrize(
    "kw",
    [{}, {"resize_mode": "longest"}, {"resize_mode": "squash"}, {"image_size": (224, 192)}],
    ids=["shortest", "longest", "squash", "not-square"],
)
def test_eval_preprocessing_equals_open_clips(folder: Path, kw: Any) -> None:
    size = kw.pop("image_size", 224)
    transform = oct.image_transform(size, is_train=False, **kw)
    listed = items(folder)
    loader = fl.Loader(listed, transform=transform, batch_size=6, num_workers=2, python_tail="error")
    seen = 0
    for images, _ in loader:
        for image in images:
            with Image.open(listed[seen][0]) as opened:
                assert torch.equal(image, transform(opened.convert("RGB"))), listed[seen][0]
            seen += 1
    assert seen == len(listed)


def test_training_preprocessing_converts_with_its_augmentations(folder: Path) -> None:
    transform = oct.image_transform(224, is_train=True)
    names = [type(op).__name__ for op in T.from_torchvision(transform).transforms]
    assert names == ["RandomResizedCrop", "RGB", "ToTensor", "Normalize"], names
    jitter = tv.Compose(
        [
            tv.RandomResizedCrop(32, scale=(0.9, 1.0)),
            oct.MaybeConvertMode(),
            oct.color_jitter(0.4, 0.4, 0.4, 0.1, p=0.8),
            oct.gray_scale(p=0.2),
            oct.MaybeToTensor(),
        ]
    )
    converted = T.from_torchvision(jitter).transforms
    assert [type(op).__name__ for op in converted] == [
        "RandomResizedCrop", "RGB", "RandomApply", "RandomGrayscale", "ToTensor"
    ]
    assert converted[2].p == 0.8 and converted[3].p == 0.2  # type: ignore[attr-defined]
    images, _ = next(iter(fl.Loader(items(folder), transform=jitter, batch_size=6, python_tail="error")))
    assert images.shape == (6, 3, 32, 32)


def test_after_to_image_maybe_convert_mode_does_nothing() -> None:
    import torchvision.transforms.v2 as v2

    with_it = [v2.ToImage(), oct.MaybeConvertMode(), v2.ToDtype(torch.float32, scale=True)]
    without = [v2.ToImage(), v2.ToDtype(torch.float32, scale=True)]
    assert repr(T.from_torchvision(with_it)) == repr(T.from_torchvision(without))


class Converting(oct.MaybeConvertMode):  # type: ignore[misc,name-defined]
    """A subclass: what it does is its own."""


@pytest.mark.parametrize(
    "op",
    [
        Converting(),
        oct.MaybeConvertMode("L"),
        oct.ResizeKeepRatio(32, random_aspect_prob=0.5),  # open_clip draws the aspect uniformly
    ],
    ids=["subclass", "other-mode", "random-aspect"],
)
def test_what_computes_something_else_stays_a_tail(folder: Path, op: Any) -> None:
    transform = tv.Compose([tv.Resize(40), op, tv.CenterCrop(32), tv.ToTensor()])
    with pytest.raises(ValueError, match="not a torchvision transform"):
        T.from_torchvision(transform)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fl.Loader(items(folder), transform=transform, batch_size=2)
    assert any("run in Python" in str(w.message) for w in caught)
