"""Pillow's ``ImageFilter.GaussianBlur`` (extended box blurs, ``BoxBlur.c``) run natively
(``augment::box_blur``, what timm's ``GaussianBlur`` ops use), compared with Pillow itself bit
for bit through ``_native.pillow_gaussian_blur``: many radii (0, tiny, fractional, integer,
larger than the image) on random images of edge-case sizes and on fixture photos.
"""

from __future__ import annotations

from pathlib import Path
from typing import List, Tuple

import numpy as np
import pytest
from PIL import Image, ImageFilter

from ferroloader import _native

RADII = [0.0, 1e-30, 0.01, 0.1, 0.25, 0.5, 0.77, 1.0, 1.3, 1.7, 1.99, 2.0, 2.5, 3.14159, 5.0, 7.3, 12.0, 50.0]
SIZES: List[Tuple[int, int]] = [(1, 1), (1, 9), (9, 1), (2, 2), (3, 5), (17, 13), (31, 40), (224, 224)]
PHOTOS = Path(__file__).resolve().parents[2] / "target" / "fixtures" / "folder"


def pillow(arr: np.ndarray, radius: float) -> np.ndarray:
    img = Image.fromarray(arr, "RGB").filter(ImageFilter.GaussianBlur(radius=radius))
    return np.asarray(img)


def check(arr: np.ndarray, radius: float) -> None:
    want = pillow(arr, radius)
    got = _native.pillow_gaussian_blur(np.ascontiguousarray(arr), radius)
    assert got.shape == want.shape
    if not np.array_equal(got, want):
        diff = np.argwhere(got != want)
        raise AssertionError(
            f"{arr.shape} radius {radius}: {len(diff)} values differ, first at {diff[0].tolist()}: "
            f"{got[tuple(diff[0])]} != Pillow's {want[tuple(diff[0])]}"
        )


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_random_images_equal_pillow(size: Tuple[int, int]) -> None:
    w, h = size
    rng = np.random.default_rng(w * 1000 + h)
    arr = rng.integers(0, 256, size=(h, w, 3), dtype=np.uint8)
    for radius in RADII:
        check(arr, radius)


def test_random_fractional_radii_equal_pillow() -> None:
    """timm's ``GaussianBlurRand`` draws ``uniform(0.1, 2.0 * factor)``: arbitrary floats."""
    rng = np.random.default_rng(7)
    arr = rng.integers(0, 256, size=(29, 23, 3), dtype=np.uint8)
    for radius in rng.uniform(0.0, 4.0, size=200):
        check(arr, float(radius))
    # Extremes: all black/white, where a wrong rounding constant shows at once.
    for value in (0, 255):
        flat = np.full((11, 7, 3), value, dtype=np.uint8)
        for radius in (0.3, 1.0, 2.0, 9.0):
            check(flat, radius)


def test_images_smaller_than_the_radius_equal_pillow() -> None:
    rng = np.random.default_rng(3)
    for w, h in [(1, 4), (4, 1), (3, 3), (5, 2), (6, 11)]:
        arr = rng.integers(0, 256, size=(h, w, 3), dtype=np.uint8)
        for radius in (3.0, 4.5, 10.0, 50.0, 1000.0):
            check(arr, radius)


def test_photos_equal_pillow() -> None:
    paths = sorted(PHOTOS.rglob("*.jpg"))[:4] if PHOTOS.is_dir() else []
    if not paths:
        pytest.skip(f"no fixture photos under {PHOTOS}")
    for path, size in zip(paths, [(224, 224), (47, 39), (36, 53), (160, 97)]):
        with Image.open(path) as img:
            arr = np.asarray(img.convert("RGB").resize(size, Image.Resampling.BILINEAR))
        for radius in (0.1, 0.5, 1.0, 1.7, 2.0, 5.0):
            check(arr, radius)


@pytest.mark.parametrize("radius", [-1.0, float("nan"), float("inf"), 1e7])
def test_bad_radius_is_refused(radius: float) -> None:
    with pytest.raises(ValueError, match="radius"):
        _native.pillow_gaussian_blur(np.zeros((2, 2, 3), dtype=np.uint8), radius)
