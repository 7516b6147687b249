"""What fine-tuning and evaluation scripts hand the loader besides a Compose of torchvision's
classes: a pretrained model's preset (``ResNet50_Weights.DEFAULT.transforms()``, torchvision's
``ImageClassification``) and a function that converts the PIL image to RGB (open_clip's
``_convert_to_rgb``, Hugging Face's ``lambda img: img.convert("RGB")``). Both run natively and
compute torchvision's pixels on the decode fixtures' variety (JPEG samplings, progressive,
grayscale, CMYK, restart markers, PNG, odd sizes)."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, List, Tuple

import pytest
import torch
import torchvision
import torchvision.transforms as tv
import torchvision.transforms.v2 as v2
from PIL import Image

import ferroloader as fl
from ferroloader import transforms as T

FIXTURES = Path(__file__).resolve().parents[2] / "target" / "fixtures" / "decode"
LEVEL = 1.0 / 255.0
CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)


def photos() -> List[Tuple[str, int]]:
    """The decode fixtures Pillow reads whole (not the broken ones, not the 6000x4000 one)."""
    items = []
    for path in sorted(FIXTURES.iterdir()):
        if path.suffix == ".rgb" or path.name.startswith("bad_") or "huge" in path.name:
            continue
        try:
            with Image.open(path) as image:
                image.convert("RGB")
        except Exception:
            continue
        items.append((str(path), len(items)))
    assert len(items) > 20, "the decode fixtures are missing: make fixtures"
    return items


def worst_difference(transform: Any, items: List[Tuple[str, int]], mode: str = "RGB") -> float:
    """The largest difference, in units of the output, between the loader's samples (run with
    no Python tail) and torchvision's over ``items`` opened as its ``ImageFolder`` opens them."""
    loader = fl.Loader(items, transform=transform, batch_size=1, num_workers=2, python_tail="error")
    worst = 0.0
    for (path, _), (image, _) in zip(items, loader):
        with Image.open(path) as opened:
            reference = transform(opened.convert(mode))
        assert image.shape[1:] == reference.shape, path
        worst = max(worst, float((image[0] - reference).abs().max()))
    return worst


@pytest.mark.parametrize(
    "weights",
    [
        torchvision.models.ResNet50_Weights.IMAGENET1K_V1,  # resize 256, crop 224
        torchvision.models.ResNet50_Weights.IMAGENET1K_V2,  # resize 232, crop 224
        torchvision.models.ViT_B_16_Weights.IMAGENET1K_SWAG_E2E_V1,  # 384, bicubic
        torchvision.models.EfficientNet_B3_Weights.IMAGENET1K_V1,  # 320, crop 300, bicubic
    ],
    ids=str,
)
def test_a_pretrained_models_preset_runs_natively_with_torchvisions_pixels(weights: Any) -> None:
    preset = weights.transforms()
    assert type(preset).__name__ == "ImageClassification"
    items = photos()
    # Normalized: one 8-bit level is 1/255/std.
    assert worst_difference(preset, items) <= LEVEL / min(preset.std) + 1e-6
    converted = T.from_torchvision(preset)
    names = [type(op).__name__ for op in converted.transforms]
    assert names[:2] == ["Resize", "CenterCrop"] and names[-1] == "Normalize", names


def test_a_preset_after_to_image_resizes_the_tensor() -> None:
    """After ``ToImage`` the preset resizes a uint8 tensor with torchvision's own antialiasing
    (a level from Pillow's at most) and skips ``pil_to_tensor``, as its ``isinstance`` check
    does."""
    preset = torchvision.models.ResNet50_Weights.IMAGENET1K_V2.transforms()
    transform = v2.Compose([v2.ToImage(), preset])
    assert worst_difference(transform, photos()[:12]) <= 2 * LEVEL / min(preset.std) + 1e-6


def _convert_to_rgb(image: Image.Image) -> Image.Image:  # open_clip's, word for word
    return image.convert("RGB")


def clip_eval(to_rgb: Any) -> Any:
    return tv.Compose(
        [
            tv.Resize(224, interpolation=tv.InterpolationMode.BICUBIC),
            tv.CenterCrop(224),
            to_rgb,
            tv.ToTensor(),
            tv.Normalize(CLIP_MEAN, CLIP_STD),
        ]
    )


@pytest.mark.parametrize("to_rgb", [_convert_to_rgb, lambda img: img.convert("RGB")], ids=["def", "lambda"])
def test_a_function_converting_to_rgb_runs_natively(to_rgb: Any) -> None:
    """open_clip's preprocess, and the same over images opened as ``L`` (a one-channel
    dataset: MNIST's arrays), which the conversion makes three channels."""
    transform = clip_eval(to_rgb)
    assert [type(op).__name__ for op in T.from_torchvision(transform).transforms][2] == "RGB"
    assert worst_difference(transform, photos()) <= LEVEL / min(CLIP_STD) + 1e-6
    digits = torchvision.datasets.FakeData(size=6, image_size=(1, 28, 28), num_classes=2)
    arrays = fl.ImageArray(
        torch.stack([tv.functional.pil_to_tensor(digits[i][0].convert("L"))[0] for i in range(6)]).numpy(),
        [0] * 6,
    )
    small = tv.Compose([tv.Resize(20, interpolation=tv.InterpolationMode.BICUBIC), tv.CenterCrop(16), to_rgb, tv.ToTensor()])
    images, _ = next(iter(fl.Loader(arrays, transform=small, batch_size=6, python_tail="error")))
    reference = torch.stack([small(Image.fromarray(arrays[i][0], "L")) for i in range(6)])
    assert images.shape == (6, 3, 16, 16) and torch.allclose(images, reference, atol=LEVEL + 1e-6)


@pytest.mark.parametrize(
    "function",
    [
        lambda img: img.convert("L"),
        lambda img: img.convert("RGB").rotate(1),
        lambda img, mode="RGB": img.convert(mode),
    ],
    ids=["other-mode", "more", "default-argument"],
)
def test_other_functions_stay_python_tails(function: Any) -> None:
    transform = tv.Compose([tv.Resize(16), tv.CenterCrop(16), function, tv.ToTensor()])
    with pytest.raises(ValueError, match="is not a torchvision transform"):
        T.from_torchvision(transform)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fl.Loader(photos()[:4], transform=transform, batch_size=2)
    assert any("run in Python" in str(w.message) for w in caught)


def test_converting_a_tensor_to_rgb_is_left_to_the_tail() -> None:
    """After ``ToImage`` the image is a tensor, which has no ``.convert``: the function is the
    tail's, to fail there as it does in torchvision."""
    transform = v2.Compose([v2.ToImage(), _convert_to_rgb, v2.ToDtype(torch.float32, scale=True)])
    with pytest.raises(ValueError, match="is not a torchvision transform"):
        T.from_torchvision(transform)
