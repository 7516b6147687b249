#!/usr/bin/env python3
"""Resize test corpus: photo-like RGB sources and Pillow's crop + resize of them, with the
three filters torchvision uses for PIL images (bilinear, bicubic, nearest).

Usage: fixtures_resize.py OUTDIR   (the Makefile runs it as `make fixtures`)

Writes OUTDIR/src_NAME.rgb (packed RGB sources), OUTDIR/case_NNN.rgb (Pillow's
`img.crop(box).resize((w, h), FILTER)` for each case, as torchvision's `F.resized_crop` and
`F.resize` run it on a PIL image) and OUTDIR/manifest.json:

    {"pillow": "13.0.0",
     "images": [{"name", "file", "width", "height"}],
     "cases":  [{"image", "box": [left, top, right, bottom], "out_w", "out_h", "filter",
                 "file", "why"}],
     "normalize": {"mean": [...], "std": [...], "bits": [[256 x u32] x 3]}}

`normalize.bits` holds float32 bit patterns of `(np.float32(v) / 255 - mean) / std` computed
by numpy in float32, an independent reference for the to-tensor + normalize arithmetic that
torch performs with the same IEEE float32 operations.

`filter` is "bilinear", "bicubic" or "nearest". Deterministic (fixed seeds, no timestamps)
and small: about 40 MB, a few seconds.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import PIL
from PIL import Image

IMAGENET_MEAN = [0.485, 0.456, 0.406]
IMAGENET_STD = [0.229, 0.224, 0.225]

FILTERS = {
    "bilinear": Image.Resampling.BILINEAR,
    "bicubic": Image.Resampling.BICUBIC,
    "nearest": Image.Resampling.NEAREST,
}


def photo_like(width: int, height: int, seed: int) -> np.ndarray:
    """Smooth gradients, hard-edged shapes, fine texture, saturated patches and a little noise."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float64)
    u = x / max(width - 1, 1)
    v = y / max(height - 1, 1)
    img = np.empty((height, width, 3), dtype=np.float64)
    img[..., 0] = 40 + 180 * u
    img[..., 1] = 30 + 160 * v + 30 * np.sin(6.0 * u + 2.0 * v)
    img[..., 2] = 120 + 90 * np.cos(3.0 * (u - v))
    # Texture a few pixels across, like foliage or fabric.
    img += 25 * np.sin(x * 0.9 + 0.3 * y)[..., None] * np.array([1.0, 0.6, -0.8])
    # Hard-edged shapes: discs and rectangles of flat colour, some saturated.
    for _ in range(8):
        cx, cy = rng.uniform(0, width), rng.uniform(0, height)
        r = rng.uniform(0.05, 0.3) * max(width, height)
        color = rng.choice([0.0, 255.0, 128.0, 200.0, 17.0], size=3)
        mask = (x - cx) ** 2 + (y - cy) ** 2 < r * r
        img[mask] = color
    for _ in range(4):
        x0, y0 = rng.integers(0, width), rng.integers(0, height)
        x1 = min(width, x0 + rng.integers(1, max(2, width // 3)))
        y1 = min(height, y0 + rng.integers(1, max(2, height // 3)))
        img[y0:y1, x0:x1] = rng.uniform(0, 255, size=3)
    # A checkerboard patch: every resize of it has to average sharp edges.
    cb = ((x // 2 + y // 2) % 2 == 0) & (x < width / 4) & (y > height / 2)
    img[cb] = 255.0
    img += rng.normal(0, 3.0, size=img.shape)
    return np.clip(np.rint(img), 0, 255).astype(np.uint8)


def rrc_box(rng: np.random.Generator, width: int, height: int) -> tuple[int, int, int, int]:
    """A RandomResizedCrop-like box (left, top, right, bottom) inside the image."""
    for _ in range(10):
        area = width * height * rng.uniform(0.08, 1.0)
        ar = math.exp(rng.uniform(math.log(3 / 4), math.log(4 / 3)))
        w = int(round(math.sqrt(area * ar)))
        h = int(round(math.sqrt(area / ar)))
        if 0 < w <= width and 0 < h <= height:
            left = int(rng.integers(0, width - w + 1))
            top = int(rng.integers(0, height - h + 1))
            return (left, top, left + w, top + h)
    return (0, 0, width, height)


def cases_for(width: int, height: int, seed: int, n_rrc: int, n_random: int) -> list[tuple]:
    """(box, out_w, out_h, why) for one source image: the fixed cases, `n_rrc` random
    RandomResizedCrop boxes to 224 and `n_random` random boxes to random sizes."""
    full = (0, 0, width, height)
    # Upscales of a corner at most 120 pixels across, to keep the corpus small.
    small = (0, 0, min(width, 120), min(height, 120))
    out: list[tuple] = [
        (full, 224, 224, "full image to 224"),
        (full, width, height, "identity: Pillow copies"),
        (full, 1, 1, "everything to one pixel"),
        (full, 3, 2, "large downscale to a tiny odd size"),
        (full, width, max(1, height // 2), "width unchanged: vertical pass only"),
        (full, max(1, width // 3), height, "height unchanged: horizontal pass only"),
        (small, 2 * (small[2] - small[0]), 2 * (small[3] - small[1]), "2x upscale"),
        (small, 2 * (small[2] - small[0]) + 1, max(1, small[3] - small[1] - 1), "mixed up/down"),
        ((width - 1, height - 1, width, height), 224, 224, "bottom-right pixel to 224"),
        ((0, 0, 1, 1), 1, 1, "1-pixel crop, identity"),
        ((0, 0, 1, 1), 5, 3, "1-pixel crop, upscaled"),
        ((0, height // 2, width, height // 2 + 1), 224, 224, "one-row crop to 224"),
        ((width // 2, 0, width // 2 + 1, height), 224, 224, "one-column crop to 224"),
        ((0, 0, width, height), 97, 131, "odd output size"),
    ]
    if width >= 400 and height >= 300:
        out += [
            ((100, 50, 400, 330), 224, 224, "typical RRC crop 300x280"),
            ((1, 2, width - 3, height - 1), 223, 225, "near-full crop, off-by-one outputs"),
            ((10, 10, 234, 234), 224, 224, "224 crop, identity size"),
            ((10, 10, 235, 233), 224, 224, "crop one bigger/smaller than the output"),
            ((37, 11, 37 + 113, 11 + 97), 224, 224, "small crop, upscale ~2x"),
            ((5, 5, 25, 20), 224, 224, "tiny crop, upscale >10x"),
            # Pillow 13 runs the vertical pass first when dy > 0 and dy > 2 * dx.
            ((20, 30, 320, 330), 250, 199, "dy = 2dx + 1: vertical pass first"),
            ((20, 30, 320, 330), 250, 200, "dy = 2dx: horizontal pass first"),
            ((20, 30, 320, 330), 340, 120, "width up, height down: vertical pass first"),
            ((0, 0, 300, 375), 299, 200, "dx = 1, large dy: vertical pass first"),
        ]
        rng = np.random.default_rng(seed)
        for i in range(n_rrc):
            out.append((rrc_box(rng, width, height), 224, 224, f"random RRC box {i}"))
        for i in range(n_random):
            box = rrc_box(rng, width, height)
            ow, oh = int(rng.integers(1, 300)), int(rng.integers(1, 300))
            out.append((box, ow, oh, f"random box {i} to random size"))
    return out


def pass_order(img: Image.Image, ow: int, oh: int, resample: int) -> str | None:
    """Which pass Pillow ran first ("H" or "V"), told apart by redoing the resize as two
    single-pass resizes in each order; None when both orders give the same pixels."""
    iw, ih = img.size
    full = img.resize((ow, oh), resample).tobytes()
    h_first = img.resize((ow, ih), resample).resize((ow, oh), resample).tobytes()
    v_first = img.resize((iw, oh), resample).resize((ow, oh), resample).tobytes()
    if h_first == v_first:
        return None
    return "H" if full == h_first else "V" if full == v_first else "?"


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    outdir = Path(sys.argv[1])
    outdir.mkdir(parents=True, exist_ok=True)

    sources = [
        ("photo_500x375", 500, 375, 1),
        ("photo_375x500", 375, 500, 2),
        ("small_64x48", 64, 48, 3),
        ("strip_3000x16", 3000, 16, 4),
        ("tall_9x700", 9, 700, 5),
        ("tiny_7x5", 7, 5, 6),
        ("dot_1x1", 1, 1, 7),
        ("column_1x40", 1, 40, 8),
        ("row_40x1", 40, 1, 9),
    ]
    manifest: dict = {"pillow": PIL.__version__, "images": [], "cases": []}
    n = 0
    for name, width, height, seed in sources:
        pixels = photo_like(width, height, seed)
        src_file = f"src_{name}.rgb"
        (outdir / src_file).write_bytes(pixels.tobytes())
        manifest["images"].append(
            {"name": name, "file": src_file, "width": width, "height": height}
        )
        img = Image.fromarray(pixels, "RGB")
        for filter_name, resample in FILTERS.items():
            # Bilinear keeps its full set; the others fewer random boxes (corpus size).
            n_rrc, n_random = (16, 12) if filter_name == "bilinear" else (8, 8)
            for box, ow, oh, why in cases_for(width, height, seed + 100, n_rrc, n_random):
                cropped = img.crop(box)
                ref = cropped.resize((ow, oh), resample)
                assert ref.mode == "RGB" and ref.size == (ow, oh)
                # The pass-order cases pin the rule the Rust resize reproduces (Pillow 13).
                # Nearest has no passes (one affine sampling).
                phrases = (("V", "vertical pass first"), ("H", "horizontal pass first"))
                for order, phrase in phrases:
                    if phrase in why and filter_name != "nearest":
                        got = pass_order(cropped, ow, oh, resample)
                        assert got == order, (
                            f"{why} ({filter_name}): Pillow {PIL.__version__} ran {got} first"
                        )
                case_file = f"case_{n:03d}.rgb"
                (outdir / case_file).write_bytes(ref.tobytes())
                manifest["cases"].append(
                    {
                        "image": name,
                        "box": list(box),
                        "out_w": ow,
                        "out_h": oh,
                        "filter": filter_name,
                        "file": case_file,
                        "why": why,
                    }
                )
                n += 1

    values = np.arange(256, dtype=np.float32) / np.float32(255)
    bits = []
    for m, s in zip(IMAGENET_MEAN, IMAGENET_STD):
        normed = (values - np.float32(m)) / np.float32(s)
        assert normed.dtype == np.float32
        bits.append([int(b) for b in normed.view(np.uint32)])
    manifest["normalize"] = {"mean": IMAGENET_MEAN, "std": IMAGENET_STD, "bits": bits}

    (outdir / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    print(f"fixtures_resize: {len(manifest['images'])} images, {n} cases in {outdir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
