"""The training transforms timm-based scripts build, for the head-to-head:

    python scripts/bench_vs_torch.py --workers 2 --transform scripts/timm_train_transform.py:train

``train`` is the DeiT/ViT recipe (below); ``train_py`` what timm's own train.py builds with its
defaults (``--train-interpolation random``, colour jitter 0.4); ``augmix`` and ``autoaugment``
the DeiT recipe with timm's AugMix (``augmix-m5-w4-d2``) or AutoAugment (``original``) in place
of its RandAugment.

``create_transform(224, is_training=True, auto_augment="rand-m9-mstd0.5-inc1", re_prob=0.25,
re_mode="pixel", interpolation="bicubic")``: timm's RandomResizedCropAndInterpolation (bicubic),
RandomHorizontalFlip, RandAugment (timm's own), MaybeToTensor, Normalize, RandomErasing. Every
op of it runs natively in ferroloader (``TimmRandAugment`` for timm's RandAugment).

On Pillow 13 timm's stock pipeline fails about one sample in 650 (PosterizeIncreasing chosen,
applied, and its noisy magnitude clamped to 10: it keeps 0 bits, for which ``ImageOps.posterize``
now raises), which stops a DataLoader epoch of the 512-image corpus more often than not. So
that the torchvision DataLoader can finish its rounds, importing this file gives
``ImageOps.posterize`` Pillow 12's answer for 0 bits (a black image), which is also what
ferroloader computes; every other call is Pillow's.
"""

from __future__ import annotations

from typing import Any

from PIL import Image, ImageOps

_posterize = ImageOps.posterize


def _posterize_pillow12(image: Image.Image, bits: int) -> Image.Image:
    if bits <= 0:
        return image.point([0] * 256 * len(image.getbands()))
    return _posterize(image, bits)


ImageOps.posterize = _posterize_pillow12


def train() -> Any:
    """timm's train transform of the DeiT recipe (a torchvision ``Compose``)."""
    from timm.data import create_transform

    return create_transform(
        224,
        is_training=True,
        auto_augment="rand-m9-mstd0.5-inc1",
        re_prob=0.25,
        re_mode="pixel",
        interpolation="bicubic",
    )


def train_py() -> Any:
    """What timm's train.py builds with its defaults: RandomResizedCropAndInterpolation with
    ``interpolation="random"`` (BILINEAR or BICUBIC per sample), flip, ColorJitter(0.4)."""
    from timm.data import create_transform

    return create_transform(224, is_training=True, color_jitter=0.4, interpolation="random")


def augmix() -> Any:
    """The DeiT recipe with timm's AugMix (``augmix-m5-w4-d2``) for its RandAugment."""
    from timm.data import create_transform

    return create_transform(
        224, is_training=True, auto_augment="augmix-m5-w4-d2", re_prob=0.25, re_mode="pixel", interpolation="bicubic"
    )


def autoaugment() -> Any:
    """The DeiT recipe with timm's AutoAugment (``original``) for its RandAugment."""
    from timm.data import create_transform

    return create_transform(
        224, is_training=True, auto_augment="original", re_prob=0.25, re_mode="pixel", interpolation="bicubic"
    )
