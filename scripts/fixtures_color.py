#!/usr/bin/env python3
"""Colour-op test corpus: RGB sources and what torchvision's PIL functional makes of them.

Usage: fixtures_color.py OUTDIR   (the Makefile runs it as `make fixtures`)

Writes OUTDIR/src_NAME.rgb (packed RGB sources), OUTDIR/expected.bin (the outputs of every
case, one after another: each what one `torchvision.transforms.functional` call makes of the
PIL RGB image, packed RGB, or one byte per pixel for `rgb_to_grayscale(img, 1)`) and
OUTDIR/manifest.json:

    {"pillow": "13.0.0", "torchvision": "0.29.2" (the release tv_pil_ref.py mirrors),
     "images": [{"name", "file", "width", "height"}],
     "cases":  [{"image", "op", "param", "param_bits", "offset", "len", "why"}]}

`param` is the parameter as Python passed it (readable); `param_bits` is its IEEE float64
bit pattern, so the Rust side gets exactly the double torchvision computed (a decimal float in
JSON might not parse back to the same bits). Integer parameters are stored the same way.

Parameters are drawn the way torchvision's policies compute them: magnitude bins from
`torch.linspace(...)` read back with `float(t[i].item())`, negated with `*= -1.0`, and passed
as `1.0 + magnitude`; solarize thresholds are the float32 bins; posterize bits `int(...)`.

Needs Pillow and numpy only: `tv_pil_ref.py` makes the Pillow and numpy calls torchvision's PIL
path makes (and reproduces `torch.linspace`); python-bindings/tests/test_fixture_drift.py checks
it against torchvision itself.

Deterministic (fixed seeds, no timestamps) and small: about 3 MB, a few seconds.
"""

from __future__ import annotations

import json
import struct
import sys
from pathlib import Path

import numpy as np
import PIL
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tv_pil_ref as F  # noqa: E402
from fixtures_resize import photo_like  # noqa: E402


def bits_of(x: float) -> int:
    return struct.unpack("<Q", struct.pack("<d", float(x)))[0]


def bins(lo: float, hi: float, n: int) -> list[float]:
    """torchvision's magnitude bins: a float32 linspace read back as Python floats."""
    return F.magnitude_bins(lo, hi, n)


def enhance_factors() -> list[tuple[float, str]]:
    """(factor, why) for Brightness/Color/Contrast/Sharpness, as the policies pass them."""
    out: list[tuple[float, str]] = []
    policies = [
        ("TrivialAugmentWide", bins(0.0, 0.99, 31)),
        ("RandAugment", bins(0.0, 0.9, 31)),
        ("AutoAugment", bins(0.0, 0.9, 10)),
    ]
    for name, mags in policies:
        for i, m in enumerate(mags):
            out.append((1.0 + m, f"{name} bin {i} +"))
            neg = m
            neg *= -1.0
            out.append((1.0 + neg, f"{name} bin {i} -"))
    for f in (0.0, 0.3, 1.0, 1.7, 2.5, 0.5, 1e-9, 1.0 + 1e-9, 3.9):
        out.append((f, "ColorJitter-like factor"))
    return unique_by_bits(out)


def unique_by_bits(params: list[tuple[float, str]]) -> list[tuple[float, str]]:
    """Drops repeated doubles, keeping the first reason: the same double gives the same output."""
    seen: set[int] = set()
    unique = []
    for p, why in params:
        if bits_of(p) not in seen:
            seen.add(bits_of(p))
            unique.append((p, why))
    return unique


def solarize_thresholds() -> list[tuple[float, str]]:
    out = [
        (t, f"TrivialAugmentWide/RandAugment bin {i}")
        for i, t in enumerate(bins(255.0, 0.0, 31))
    ]
    out += [(t, f"AutoAugment bin {i}") for i, t in enumerate(bins(255.0, 0.0, 10))]
    edges = (0.0, 1.0, 127.5, 128.0, 128.25, 254.999, 255.0, 256.0, 300.0, -1.0)
    out += [(t, "edge threshold") for t in edges]
    return unique_by_bits(out)


HUES = [-0.5, -0.21, 0.0, 0.13, 0.5, -0.0039, 0.004, 0.25, -0.37]


def sources() -> list[tuple[str, np.ndarray, bool]]:
    """(name, HxWx3 uint8, full parameter sweep?)."""
    rng = np.random.default_rng(20)
    const = np.full((16, 16, 3), (77, 140, 201), dtype=np.uint8)
    noise = rng.integers(0, 256, size=(20, 24, 3), dtype=np.uint8)
    base = rng.integers(90, 170, size=(30, 40, 1))
    near_gray = np.clip(base + rng.integers(-2, 3, size=(30, 40, 3)), 0, 255).astype(np.uint8)
    gray = np.repeat(rng.integers(0, 256, size=(12, 20, 1), dtype=np.uint8), 3, axis=2)
    # Few distinct levels per channel: equalize's and autocontrast's degenerate histograms.
    two_level = np.where(rng.random((9, 11, 3)) < 0.3, 40, 200).astype(np.uint8)
    # Many distinct colours for the HSV round trip (every rgb2hsv/hsv2rgb branch).
    colours = rng.integers(0, 256, size=(96, 96, 3), dtype=np.uint8)
    return [
        ("photo_37x23", photo_like(37, 23, 12), True),
        ("noise_24x20", noise, True),
        ("photo_64x48", photo_like(64, 48, 11), False),
        ("const_16x16", const, False),
        ("dot_1x1", photo_like(1, 1, 13), False),
        ("row_9x1", photo_like(9, 1, 14), False),
        ("col_1x9", photo_like(1, 9, 15), False),
        ("tiny_2x2", photo_like(2, 2, 16), False),
        ("small_3x3", photo_like(3, 3, 17), False),
        ("near_gray_40x30", near_gray, False),
        ("gray_20x12", gray, False),
        ("two_level_11x9", two_level, False),
        ("colours_96x96", colours, False),
    ]


def cases_for(full: bool, name: str) -> list[tuple[str, float, str]]:
    """(op, param, why). Parameterless ops carry 0."""
    out: list[tuple[str, float, str]] = []
    for op in ("equalize", "autocontrast", "invert", "grayscale1", "grayscale3"):
        out.append((op, 0.0, "no parameter"))
    for bits in range(1, 9):
        out.append(("posterize", float(bits), f"bits {bits}"))
    if name == "colours_96x96":
        return [("hue", h, "many colours") for h in HUES]
    factors = enhance_factors()
    if not full:
        keep = ("ColorJitter", "bin 30", "bin 7 ")
        factors = [(f, why) for f, why in factors if any(k in why for k in keep)]
    for op in ("brightness", "saturation", "contrast", "sharpness"):
        for f, why in factors:
            out.append((op, f, why))
    thresholds = solarize_thresholds()
    if not full:
        thresholds = [(t, why) for t, why in thresholds if "edge" in why or "bin 3" in why]
    for t, why in thresholds:
        out.append(("solarize", t, why))
    for h in HUES:
        out.append(("hue", h, "hue factor"))
    return out


def run(op: str, img: Image.Image, p: float) -> Image.Image:
    if op == "equalize":
        return F.equalize(img)
    if op == "autocontrast":
        return F.autocontrast(img)
    if op == "invert":
        return F.invert(img)
    if op == "grayscale1":
        return F.rgb_to_grayscale(img, 1)
    if op == "grayscale3":
        return F.rgb_to_grayscale(img, 3)
    if op == "posterize":
        return F.posterize(img, int(p))
    if op == "solarize":
        return F.solarize(img, p)
    if op == "brightness":
        return F.adjust_brightness(img, p)
    if op == "saturation":
        return F.adjust_saturation(img, p)
    if op == "contrast":
        return F.adjust_contrast(img, p)
    if op == "sharpness":
        return F.adjust_sharpness(img, p)
    if op == "hue":
        return F.adjust_hue(img, p)
    raise ValueError(op)


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    outdir = Path(sys.argv[1])
    outdir.mkdir(parents=True, exist_ok=True)
    manifest: dict = {
        "pillow": PIL.__version__,
        "torchvision": F.TORCHVISION_VERSION,
        "images": [],
        "cases": [],
    }
    n = 0
    expected = bytearray()
    for name, pixels, full in sources():
        h, w, _ = pixels.shape
        src_file = f"src_{name}.rgb"
        (outdir / src_file).write_bytes(pixels.tobytes())
        manifest["images"].append({"name": name, "file": src_file, "width": w, "height": h})
        img = Image.fromarray(pixels, "RGB")
        for op, p, why in cases_for(full, name):
            out = run(op, img, p)
            want_mode = "L" if op == "grayscale1" else "RGB"
            assert out.mode == want_mode and out.size == img.size, (op, out.mode, out.size)
            data = out.tobytes()
            offset = len(expected)
            expected += data
            manifest["cases"].append(
                {
                    "image": name,
                    "op": op,
                    "param": p,
                    "param_bits": bits_of(p),
                    "offset": offset,
                    "len": len(data),
                    "why": why,
                }
            )
            n += 1
    (outdir / "expected.bin").write_bytes(bytes(expected))
    (outdir / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    print(
        f"fixtures_color: {len(manifest['images'])} images, {n} cases, "
        f"{len(expected)} bytes in {outdir}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
