#!/usr/bin/env python3
"""Writes a deterministic corpus of ImageNet-like JPEGs for the benches.

Photo-like content (smooth gradients, blurred shapes, fine texture), sizes around 500x375 in both
orientations, quality 75-95, mostly 4:2:0 like ImageNet, so decode and resize cost what they cost
on real photos. Usage: make_bench_corpus.py OUTDIR [COUNT] [--classes N]; with --classes the
files go into N class folders (an ImageFolder).
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFilter

SIZES = [(500, 375), (375, 500), (500, 333), (640, 480), (500, 400), (450, 500), (800, 600), (333, 500)]


def photo_like(rng: random.Random, width: int, height: int) -> Image.Image:
    """A smooth background, soft shapes and sensor-like noise: compresses like a photo."""
    nprng = np.random.default_rng(rng.randrange(1 << 32))
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
    base = np.empty((height, width, 3), np.float32)
    for c in range(3):
        fx, fy = rng.uniform(0.5, 3.0), rng.uniform(0.5, 3.0)
        phase = rng.uniform(0, 6.28)
        base[..., c] = 128 + 90 * np.sin(xx / width * fx * 3.14 + phase) * np.cos(yy / height * fy * 3.14)
    img = Image.fromarray(np.clip(base, 0, 255).astype(np.uint8), "RGB")
    draw = ImageDraw.Draw(img)
    for _ in range(rng.randint(6, 16)):
        x0, y0 = rng.randrange(width), rng.randrange(height)
        x1, y1 = x0 + rng.randint(10, width // 2), y0 + rng.randint(10, height // 2)
        color = tuple(rng.randrange(256) for _ in range(3))
        if rng.random() < 0.5:
            draw.ellipse((x0, y0, x1, y1), fill=color)
        else:
            draw.polygon([(x0, y0), (x1, y0 + rng.randint(-40, 40)), (x0 + rng.randint(-40, 40), y1)], fill=color)
    img = img.filter(ImageFilter.GaussianBlur(rng.uniform(1.0, 4.0)))
    # Multi-scale texture (foliage, fabric, fur): what makes real photos expensive to entropy-code.
    texture = np.zeros((height, width), np.float32)
    for cell, amp in ((2, 6.0), (4, 8.0), (12, 10.0), (40, 12.0)):
        small = nprng.normal(0, 1, (height // cell + 1, width // cell + 1)).astype(np.float32)
        texture += amp * np.asarray(Image.fromarray(small, "F").resize((width, height), Image.BICUBIC))
    noisy = np.asarray(img, np.float32) + texture[..., None] * rng.uniform(0.5, 1.5)
    noisy += nprng.normal(0, rng.uniform(2, 5), (height, width, 3))
    return Image.fromarray(np.clip(noisy, 0, 255).astype(np.uint8), "RGB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out", type=Path)
    parser.add_argument("count", type=int, nargs="?", default=48)
    parser.add_argument("--classes", type=int, default=0, help="write an ImageFolder of N classes")
    args = parser.parse_args()
    rng = random.Random(20261121)
    for i in range(args.count):
        width, height = SIZES[i % len(SIZES)]
        quality = rng.choice([75, 80, 85, 90, 95])
        subsampling = 2 if i % 8 else 0  # 4:2:0 mostly, some 4:4:4
        folder = args.out / f"class{i % args.classes:02d}" if args.classes else args.out
        folder.mkdir(parents=True, exist_ok=True)
        photo_like(rng, width, height).save(folder / f"img{i:04d}.jpg", quality=quality, subsampling=subsampling)


if __name__ == "__main__":
    main()
