#!/usr/bin/env python3
"""Geometry test corpus: photo-like RGB sources and torchvision's outputs of the geometric ops.

Usage: fixtures_geometry.py OUTDIR   (the Makefile runs it as `make fixtures`)

Writes OUTDIR/src_NAME.rgb (packed RGB sources), OUTDIR/case_NNN.bin (each case's reference
output) and OUTDIR/manifest.json:

    {"pillow": "13.0.0", "torchvision": "0.29.2" (the release tv_pil_ref.py mirrors),
     "images": [{"name", "file", "width", "height"}],
     "cases":  [{"op", "image", "file", "why", ...op parameters}],
     "kernels": [{"size", "sigma", "bits": [u32 ...]}]}

Ops, all through torchvision's PIL path (v1 functional API) unless said otherwise; the warps
(`interp`) with NEAREST, BILINEAR and BICUBIC (Pillow's three transform filters):
- "affine": F.affine(img, angle, translate, scale, shear, interpolation, fill, center), plus the
  matrix `_get_inverse_affine_matrix` computed (`matrix`, as float64 bit patterns in hex);
- "rotate": F.rotate(img, angle, interpolation, expand, center, fill) (Pillow's
  Image.rotate, fast paths included; `expand` absent means False);
- "perspective": F.perspective(img, startpoints, endpoints, interpolation, fill) (Pillow's
  perspective transform), plus `coeffs`, the float32 coefficients `tv_pil_ref.perspective_coeffs`
  solved (float64 bit patterns in hex) and the reference used; endpoints drawn as
  `RandomPerspective.get_params` draws them for `distortion_scale`, or given;
- "vflip": F.vflip(img);
- "pad": F.pad(img, padding, fill, padding_mode);
- "random_crop": RandomCrop(size, padding, pad_if_needed, fill, padding_mode) with get_params
  replaced by the injected (top, left);
- "random_crop_v2": the same with torchvision.transforms.v2.RandomCrop (one padding: the sum);
- "blur": F.gaussian_blur(img, kernel_size, sigma), which torchvision computes on a float32
  tensor (tv_pil_ref.gaussian_blur sums each pixel as torch's CPU convolution does);
- "erase": F.erase on a CHW float32 tensor (to_tensor + ImageNet normalize of the source);
  `value` is a per-channel list or "random" (normal draws from numpy's generator, seeded per
  case, written to `source_file`: torch's own draws need torch); outputs are float32 bytes.

`kernels` are `_get_gaussian_kernel1d(size, sigma, torch.float32)` as tv_pil_ref computes it:
torch's float32 steps in torch's order, but a correctly rounded exp, so a tap can be an ulp or
two from torch's (none is, for these sizes and sigmas, with torch 2.15 on x86).

Needs Pillow and numpy only: `tv_pil_ref.py` makes the Pillow and numpy calls torchvision's PIL
path makes; python-bindings/tests/test_fixture_drift.py checks it against torchvision itself.

Float parameters are also written as float64 bit patterns under `hex` (kernels' `sigma` only
so), which the tests read: JSON readers need not round-trip floats exactly.
`fill` is written as torchvision received it (null, a number or a list); `fill_rgb` is the
triple it becomes (torchvision's `_parse_fill`: None -> 0, numbers truncated to int).

Deterministic (fixed seeds, no timestamps) and small: about 14 MB, a few seconds.
"""

from __future__ import annotations

import json
import math
import struct
import sys
from pathlib import Path
from typing import Optional

import numpy as np
import PIL
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tv_pil_ref as F  # noqa: E402
from fixtures_resize import photo_like  # noqa: E402

IMAGENET_MEAN = [0.485, 0.456, 0.406]
IMAGENET_STD = [0.229, 0.224, 0.225]

FILLS = [None, 0, 128, [10, 200, 30]]


def fill_rgb(fill) -> list[int]:
    if fill is None:
        return [0, 0, 0]
    if isinstance(fill, (int, float)):
        return [int(fill)] * 3
    return [int(v) for v in fill]


def hex64(x: float) -> str:
    return struct.pack(">d", x).hex()


def exact(case: dict, keys: tuple[str, ...]) -> dict:
    """Float parameters as float64 bit patterns (hex): JSON readers need not round-trip floats."""
    out = {}
    for k in keys:
        v = case.get(k)
        if v is None:
            continue
        out[k] = [hex64(float(x)) for x in v] if isinstance(v, (list, tuple)) else hex64(float(v))
    return out


def bins(lo: float, hi: float, num_bins: int) -> list[float]:
    """The magnitudes torchvision's policies index: torch.linspace in float32, read as Python floats."""
    return F.magnitude_bins(lo, hi, num_bins)


def policy_cases(width: int, height: int, interp: str = "nearest") -> list[dict]:
    """Rotate / Shear / Translate as TrivialAugmentWide and RandAugment call them (_apply_op)."""
    ta = {
        "Shear": bins(0.0, 0.99, 31),
        "TranslateX": bins(0.0, 32.0, 31),
        "TranslateY": bins(0.0, 32.0, 31),
        "Rotate": bins(0.0, 135.0, 31),
    }
    ra = {
        "Shear": bins(0.0, 0.3, 31),
        "TranslateX": bins(0.0, 150.0 / 331.0 * width, 31),
        "TranslateY": bins(0.0, 150.0 / 331.0 * height, 31),
        "Rotate": bins(0.0, 30.0, 31),
    }
    out = []
    k = 0
    for policy, space, picks in (("ta_wide", ta, (1, 9, 20, 30)), ("ra", ra, (3, 30))):
        for b in picks:
            for sign in (1.0, -1.0):
                for op in ("ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate"):
                    mag = space["Shear" if op.startswith("Shear") else op][b] * sign
                    fill = FILLS[k % len(FILLS)]
                    k += 1
                    why = f"{policy} {op} bin {b} sign {sign:+.0f} fill {fill}"
                    if interp != "nearest":
                        why += f" {interp}"
                    if op == "Rotate":
                        out.append(dict(op="rotate", angle=mag, center=None, interp=interp, fill=fill, why=why))
                    elif op.startswith("Shear"):
                        deg = math.degrees(math.atan(mag))
                        shear = [deg, 0.0] if op == "ShearX" else [0.0, deg]
                        out.append(
                            dict(op="affine", angle=0.0, translate=[0, 0], scale=1.0, shear=shear,
                                 center=[0, 0], interp=interp, fill=fill, why=why)
                        )
                    else:
                        t = [int(mag), 0] if op == "TranslateX" else [0, int(mag)]
                        out.append(
                            dict(op="affine", angle=0.0, translate=t, scale=1.0, shear=[0.0, 0.0],
                                 center=None, interp=interp, fill=fill, why=why)
                        )
    return out


def random_geometry_cases(rng: np.random.Generator, interps: tuple[str, ...] = ("nearest", "bilinear")) -> list[dict]:
    """RandomRotation / RandomAffine with arbitrary drawn parameters, with each of `interps`."""
    out = []
    fixed = [
        dict(op="rotate", angle=17.3, center=None, why="RandomRotation 17.3"),
        dict(op="rotate", angle=-63.8, center=[10.5, 3.0], why="RandomRotation center"),
        dict(op="rotate", angle=180.0, center=None, why="rotate 180 fast path"),
        dict(op="rotate", angle=-90.0, center=None, why="rotate -90 (270 fast path if square)"),
        dict(op="rotate", angle=450.0, center=None, why="rotate 450 (mod 360)"),
        dict(op="rotate", angle=0.0, center=None, why="rotate 0 copy"),
        dict(op="rotate", angle=17.3, center=None, expand=True, why="RandomRotation expand"),
        dict(op="rotate", angle=-90.0, center=None, expand=True, why="rotate -90 expand (fast path)"),
        dict(op="rotate", angle=131.0, center=[4.0, 30.5], expand=True, why="rotate expand with center"),
        dict(op="affine", angle=12.0, translate=[3, -2], scale=1.1, shear=[5.0, -7.5], center=None,
             why="RandomAffine all params"),
        dict(op="affine", angle=-170.0, translate=[0, 0], scale=0.7, shear=[0.0, 0.0], center=None,
             why="RandomAffine rotate+scale"),
        dict(op="affine", angle=0.0, translate=[-5, 4], scale=1.3, shear=[0.0, 0.0], center=None,
             why="RandomAffine scale+translate (Pillow's scale path)"),
        dict(op="affine", angle=0.0, translate=[40000, 0], scale=1.0, shear=[0.0, 0.0], center=None,
             why="huge translate (Pillow's float path)"),
        dict(op="affine", angle=33.0, translate=[0, 0], scale=0.002, shear=[0.0, 0.0], center=None,
             why="tiny scale (Pillow's float path)"),
    ]
    for i in range(4):
        fixed.append(
            dict(op="affine", angle=float(rng.uniform(-180, 180)),
                 translate=[int(round(rng.uniform(-8, 8))), int(round(rng.uniform(-8, 8)))],
                 scale=float(rng.uniform(0.75, 1.25)),
                 shear=[float(rng.uniform(-20, 20)), float(rng.uniform(-20, 20))], center=None,
                 why=f"RandomAffine draw {i}")
        )
    k = 0
    for case in fixed:
        for interp in interps:
            c = dict(case)
            c["interp"] = interp
            c["fill"] = FILLS[k % len(FILLS)]
            c["why"] = f"{case['why']} {interp} fill {c['fill']}"
            k += 1
            out.append(c)
    return out


def perspective_endpoints(rng: np.random.Generator, width: int, height: int, scale: float) -> list[list[int]]:
    """`RandomPerspective.get_params(width, height, scale)`'s ranges, drawn with numpy."""
    bw = int(scale * (width // 2)) + 1
    bh = int(scale * (height // 2)) + 1

    def near(bound: int) -> int:
        return int(rng.integers(0, bound))

    def far(side: int, bound: int) -> int:
        return int(rng.integers(side - bound, side))

    return [[near(bw), near(bh)], [far(width, bw), near(bh)], [far(width, bw), far(height, bh)],
            [near(bw), far(height, bh)]]


def perspective_cases(
    rng: np.random.Generator, width: int, height: int, interps: tuple[str, ...] = ("nearest", "bilinear")
) -> list[dict]:
    """RandomPerspective: the identity (distortion_scale=0), mild, default and strong draws,
    and hand-made corners (one side pulled in only: many positions on pixel centres)."""
    start = [[0, 0], [width - 1, 0], [width - 1, height - 1], [0, height - 1]]
    fixed: list[tuple[Optional[float], list[list[int]], str]] = [
        (0.0, start, "identity (distortion_scale 0)"),
        (None, [[0, 0], [width - 1, 0], [width - 1, height - 1], [width // 4, height - 1]],
         "bottom-left pulled in"),
    ]
    for drawn, label in ((0.1, "mild"), (0.5, "default"), (0.5, "default"), (1.0, "strong"), (1.0, "strong")):
        fixed.append((drawn, perspective_endpoints(rng, width, height, drawn), f"{label} draw {drawn}"))
    out = []
    k = 0
    for scale, end, why in fixed:
        for interp in interps:
            fill = FILLS[k % len(FILLS)]
            k += 1
            out.append(dict(op="perspective", startpoints=start, endpoints=end, distortion_scale=scale,
                            interp=interp, fill=fill, why=f"perspective {why} {end} {interp} fill {fill}"))
    return out


def bicubic_cases(rng: np.random.Generator, width: int, height: int) -> list[dict]:
    """BICUBIC warps (Pillow's generic transform with its a = -1 cubic): the policies' shears,
    translations and rotations at two bins of each policy, and the RandomRotation /
    RandomAffine cases (rotation with and without a centre or expand, shear, translate,
    scale, the fast paths, fresh draws from `rng`), each with a fill."""
    policy = [
        c for c in policy_cases(width, height, "bicubic")
        if " bin 9 " in c["why"] or " bin 30 " in c["why"]
    ]
    return policy + random_geometry_cases(rng, ("bicubic",))


def run_geometry(img: Image.Image, c: dict) -> Image.Image:
    if c["op"] == "rotate":
        return F.rotate(img, c["angle"], interpolation=c["interp"], expand=c.get("expand", False),
                        center=c["center"], fill=c["fill"])
    return F.affine(img, angle=c["angle"], translate=c["translate"], scale=c["scale"], shear=c["shear"],
                    interpolation=c["interp"], fill=c["fill"], center=c["center"])


def pad_cases() -> list[dict]:
    out = []
    paddings = [3, [5, 2], [1, 7, 40, 3], [0, 0, 0, 2], [60, 1, 2, 75]]
    k = 0
    for mode in ("constant", "edge", "reflect", "symmetric"):
        for p in paddings:
            fill = FILLS[k % len(FILLS)] if mode == "constant" else 0
            k += 1
            out.append(dict(op="pad", padding=p, mode=mode, fill=fill, why=f"pad {p} {mode} fill {fill}"))
    return out


def crop_cases(width: int, height: int, rng: np.random.Generator) -> list[dict]:
    out = []
    specs = [
        ([min(width, 32), min(height, 32)], 4, False, "reflect"),
        ([width + 10, height + 3], None, True, "constant"),
        ([width + 50, height + 40], [2, 1], True, "reflect"),
        ([width, height + 9], [3, 0, 1, 2], True, "symmetric"),
        ([max(1, width - 3), height + 1], 2, True, "edge"),
    ]
    for k, (size_wh, padding, pad_if_needed, mode) in enumerate(specs):
        fill = FILLS[k % len(FILLS)] if mode == "constant" else 0
        size = [size_wh[1], size_wh[0]]  # torchvision's (h, w)
        # The padded size torchvision reaches, to draw an in-bounds (top, left).
        pw, ph = width, height
        if padding is not None:
            p = [padding] * 4 if isinstance(padding, int) else (
                [padding[0], padding[1]] * 2 if len(padding) == 2 else padding)
            pw += p[0] + p[2]
            ph += p[1] + p[3]
        if pad_if_needed and pw < size[1]:
            pw += 2 * (size[1] - pw)
        if pad_if_needed and ph < size[0]:
            ph += 2 * (size[0] - ph)
        top = int(rng.integers(0, ph - size[0] + 1))
        left = int(rng.integers(0, pw - size[1] + 1))
        out.append(dict(op="random_crop", size=size, padding=padding, pad_if_needed=pad_if_needed,
                        mode=mode, fill=fill, top=top, left=left,
                        why=f"RandomCrop {size} padding {padding} pad_if_needed {pad_if_needed} {mode} "
                            f"at ({top}, {left})"))
    return out


def run_random_crop(img: Image.Image, c: dict) -> Image.Image:
    """torchvision.transforms.RandomCrop with get_params answering the case's (top, left)."""
    return F.random_crop(img, c["size"], c["padding"], c["pad_if_needed"], c["fill"], c["mode"], c["top"],
                         c["left"])


def run_random_crop_v2(img: Image.Image, c: dict) -> Image.Image:
    """torchvision.transforms.v2.RandomCrop: pads once by `padding` + what pad_if_needed adds."""
    return F.random_crop_v2(img, c["size"], c["padding"], c["pad_if_needed"], c["fill"], c["mode"], c["top"],
                            c["left"])


BLUR = [
    (3, 3, 0.1, 0.1), (3, 3, 0.8, 0.8), (5, 5, 1.1, 1.1), (9, 9, 2.0, 2.0), (23, 23, 5.0, 5.0),
    (23, 23, 0.3, 0.3), (9, 3, 1.7, 0.5), (5, 23, 3.3, 7.9), (9, 9, 1.5666, 1.5666),
]


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    outdir = Path(sys.argv[1])
    outdir.mkdir(parents=True, exist_ok=True)

    sources = [
        ("dot_1x1", 1, 1, 11),
        ("odd_37x23", 37, 23, 12),
        ("sq_224x224", 224, 224, 13),
        ("wide_300x200", 300, 200, 14),
    ]
    manifest: dict = {
        "pillow": PIL.__version__,
        "torchvision": F.TORCHVISION_VERSION,
        "images": [],
        "cases": [],
        "kernels": [],
    }
    n = 0

    def emit(case: dict, data: bytes) -> None:
        nonlocal n
        case_file = f"case_{n:03d}.bin"
        (outdir / case_file).write_bytes(data)
        case["file"] = case_file
        manifest["cases"].append(case)
        n += 1

    rng = np.random.default_rng(20)
    # Its own generator: the other cases' draws stay as they were.
    persp_rng = np.random.default_rng(30)
    # BICUBIC's cases came later, with generators of their own for the same reason.
    bicubic_rng = np.random.default_rng(40)
    bicubic_persp_rng = np.random.default_rng(50)
    for name, width, height, seed in sources:
        pixels = photo_like(width, height, seed)
        src_file = f"src_{name}.rgb"
        (outdir / src_file).write_bytes(pixels.tobytes())
        manifest["images"].append({"name": name, "file": src_file, "width": width, "height": height})
        img = Image.fromarray(pixels, "RGB")
        big = width * height > 10000

        geo = policy_cases(width, height) + random_geometry_cases(rng)
        if big:
            # Keep the corpus small: a spread of the cases on the large images.
            geo = [
                c for i, c in enumerate(geo)
                if i % 16 == 0
                or "Rotate bin 20" in c["why"]
                # BILINEAR on large images too (the policy cases above are all NEAREST).
                or ("bilinear" in c["why"] and ("RandomAffine draw 0" in c["why"] or "17.3" in c["why"]))
                # Fast paths ignore the filter: one interpolation is enough.
                or ("fast path" in c["why"] and c["interp"] == "nearest")
            ]
        bicubic = bicubic_cases(bicubic_rng, width, height)
        if big:
            # Rotation, shear, translation, scale, a whole draw and the expand, BICUBIC.
            bicubic = [
                c for c in bicubic
                if any(k in c["why"] for k in ("17.3", "all params", "scale+translate", "draw 0",
                                               "ShearY bin 30 sign +1", "TranslateX bin 9 sign -1"))
            ]
        geo += bicubic
        for c in geo:
            ref = run_geometry(img, c)
            assert ref.mode == "RGB" and (c.get("expand") or ref.size == img.size)
            c = dict(c, image=name, fill_rgb=fill_rgb(c["fill"]), out_w=ref.width, out_h=ref.height)
            c["hex"] = exact(c, ("angle", "translate", "scale", "shear", "center"))
            if c["op"] == "affine":
                center = c["center"] if c["center"] is not None else [width * 0.5, height * 0.5]
                m = F.inverse_affine_matrix(center, float(c["angle"]), c["translate"], c["scale"],
                                                 c["shear"])
                c["matrix"] = [hex64(v) for v in m]
            emit(c, ref.tobytes())

        persp = perspective_cases(persp_rng, width, height)
        persp_bicubic = perspective_cases(bicubic_persp_rng, width, height, ("bicubic",))
        if big:
            # Identity, mild, default (both filters) and strong, BILINEAR where one filter;
            # BICUBIC: the pulled-in corner, a default and a strong draw.
            persp = [persp[i] for i in (1, 5, 6, 7, 11)]
            persp_bicubic = [persp_bicubic[i] for i in (1, 3, 6)]
        persp += persp_bicubic
        for c in persp:
            coeffs = F.perspective_coeffs(c["startpoints"], c["endpoints"])
            ref = F.perspective(img, None, None, interpolation=c["interp"], fill=c["fill"], coefficients=coeffs)
            assert ref.mode == "RGB" and ref.size == img.size
            emit(dict(c, image=name, fill_rgb=fill_rgb(c["fill"]), coeffs=[hex64(v) for v in coeffs]),
                 ref.tobytes())

        emit(dict(op="vflip", image=name, why="vflip"), F.vflip(img).tobytes())

        for c in pad_cases() if not big else pad_cases()[2::9]:
            ref = F.pad(img, c["padding"], fill=c["fill"], padding_mode=c["mode"])
            ref = ref.convert("RGB") if ref.mode != "RGB" else ref
            emit(dict(c, image=name, fill_rgb=fill_rgb(c["fill"]), out_w=ref.width, out_h=ref.height),
                 ref.tobytes())

        for c in crop_cases(width, height, rng) if not big else crop_cases(width, height, rng)[2:3]:
            ref = run_random_crop(img, c)
            assert ref.size == (c["size"][1], c["size"][0])
            emit(dict(c, image=name, fill_rgb=fill_rgb(c["fill"])), ref.tobytes())
            if not big:
                ref = run_random_crop_v2(img, c)
                emit(dict(c, op="random_crop_v2", image=name, fill_rgb=fill_rgb(c["fill"]),
                          why=f"v2 {c['why']}"), ref.tobytes())

        for kx, ky, sx, sy in BLUR if not big else BLUR[1::4]:
            if kx // 2 >= width or ky // 2 >= height:
                continue  # torch's reflect padding refuses pads as large as the image
            ref = F.gaussian_blur(img, [kx, ky], [sx, sy])
            emit(dict(op="blur", image=name, kernel=[kx, ky], sigma=[sx, sy], hex=exact({"sigma": [sx, sy]}, ("sigma",)),
                      why=f"gaussian_blur kernel {[kx, ky]} sigma {[sx, sy]}"), ref.tobytes())

        if not big:
            t = F.normalize(F.to_tensor(img), IMAGENET_MEAN, IMAGENET_STD)
            erase_specs = [
                ((0, 0, height, width), [0.0], "whole, value 0"),
                ((min(2, height - 1), min(3, width - 1), max(1, height // 2), max(1, width // 3)),
                 [0.5, -1.25, 2.0], "per channel"),
                ((height // 3, width // 4, max(1, height // 3), max(1, width // 2)), "random", "random"),
                ((height - 1, width - 1, 1, 1), "random", "corner random"),
            ]
            for k, ((i, j, h, w), value, why) in enumerate(erase_specs):
                c = dict(op="erase", image=name, rect=[i, j, h, w], value=value, why=f"erase {why} {[i, j, h, w]}")
                if value == "random":
                    v = np.random.default_rng(100 + k).standard_normal((3, h, w), dtype=np.float32)
                    (outdir / f"erase_src_{n:03d}.bin").write_bytes(v.tobytes())
                    c["source_file"] = f"erase_src_{n:03d}.bin"
                else:
                    v = np.asarray(value, dtype=np.float32)[:, None, None]
                erased = F.erase(t, i, j, h, w, v)
                emit(c, erased.astype(np.float32).tobytes())
            (outdir / f"tensor_{name}.bin").write_bytes(t.astype(np.float32).tobytes())

    for size, sigma in sorted({(k, s) for kx, ky, sx, sy in BLUR for k, s in ((kx, sx), (ky, sy))}):
        kern = F.gaussian_kernel1d(size, sigma)
        bits = [int(b) for b in kern.view(np.uint32)]
        manifest["kernels"].append({"size": size, "sigma": hex64(sigma), "bits": bits})

    (outdir / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    print(f"fixtures_geometry: {len(manifest['images'])} images, {n} cases in {outdir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
