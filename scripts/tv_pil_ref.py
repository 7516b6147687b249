"""torchvision's PIL path, reproduced with Pillow and numpy only, for the fixture scripts.

The colour and geometry fixtures (`fixtures_color.py`, `fixtures_geometry.py`) are the outputs
of torchvision's functional API on PIL images. On a PIL image almost every such function is a
thin wrapper in `torchvision/transforms/_functional_pil.py` around one Pillow call (or a few
numpy lines); the rest is plain Python arithmetic. Each function here makes the same Pillow
and numpy calls with the same arguments, in the same order, so the fixtures can be generated
without installing torch (`make test-rust` needs Pillow and numpy only).

Three pieces of torchvision run on torch tensors even for a PIL image; here is how each is
handled:

- `torch.linspace` (the augmentation policies' magnitude bins, the Gaussian kernel's positions):
  reproduced bit for bit in float32, including the fused multiply-add that torch's AVX2 and
  AVX-512 kernels compile `start + step * i` to (`linspace_f32`).
- `gaussian_blur` converts the image to a float32 tensor and convolves it with `conv2d`.
  The kernel repeats torch's float32 steps in torch's order (its `sum` included) except `exp`,
  which is correctly rounded here and within an ulp in torch (MKL's or SLEEF's); the
  convolution sums each pixel as torch's CPU backend (oneDNN) does, one fused multiply-add per
  tap in row-major order, so the pixels are torch's to the bit wherever the kernel is.
- `erase` and `to_tensor` + `normalize` are float32 tensor arithmetic, done here in numpy
  float32 with the same IEEE operations. `RandomErasing`'s normal draws come from torch's
  generator, which numpy cannot reproduce; the fixtures draw their own values with numpy
  (they are the erase's input, not something torchvision computes).

`python-bindings/tests/test_fixture_drift.py` regenerates both sets without torch and checks
every case against the installed torchvision, so a change in torchvision shows up there.

Must not import torch or torchvision, nor change what the fixtures mean: a function whose
torchvision counterpart changes behaviour gets changed to match, not the drift test.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Any, Optional, Union

import numpy as np
from PIL import Image, ImageEnhance, ImageOps

# The torchvision release these functions were read from (its `transforms/functional.py`,
# `_functional_pil.py`, `_functional_tensor.py`, `transforms.py` and `v2/_geometry.py`).
TORCHVISION_VERSION = "0.29.2"

Fill = Union[None, int, float, Sequence[int], Sequence[float]]
Padding = Union[int, Sequence[int]]

# torchvision's InterpolationMode -> Pillow resampling filter, for the modes the warps take.
PIL_FILTERS = {
    "nearest": Image.Resampling.NEAREST,
    "bilinear": Image.Resampling.BILINEAR,
    "bicubic": Image.Resampling.BICUBIC,
}


# --- torch arithmetic -----------------------------------------------------------------------


def fma_f32(a: Any, b: Any, c: Any) -> np.ndarray:
    """float32 `a * b + c` rounded once, as the FMA instruction computes it (elementwise).

    The product of two float32 values is exact in float64, and TwoSum gives the exact error of
    adding `c` to it; making that sum's last bit sticky (round to odd) when the error is not
    zero lets the final rounding to float32 be the only one: float64 carries more than the two
    extra bits that rounding to odd needs. Integer `b` up to 2**24 is exact in float32 too.
    """
    p = np.asarray(a, dtype=np.float32).astype(np.float64) * np.asarray(b, dtype=np.float32).astype(np.float64)
    c64 = np.asarray(c, dtype=np.float32).astype(np.float64)
    total = p + c64
    back = total - p
    error = (p - (total - back)) + (c64 - back)
    even = (total.view(np.uint64) & np.uint64(1)) == 0
    inexact_even = (error != 0) & even
    toward_error = np.nextafter(total, np.where(error > 0, np.inf, -np.inf))
    odd = np.where(inexact_even, toward_error, total)
    return odd.astype(np.float32)


def linspace_f32(start: float, end: float, steps: int) -> np.ndarray:
    """`torch.linspace(start, end, steps)` (float32, CPU), torch 2.x's `linspace_kernel`.

    `start` and `end` become float32 and `step = (end - start) / (steps - 1)` in float32;
    element `i` is `start + step * i` below `steps // 2` and `end - step * (steps - 1 - i)`
    from there on. torch's x86 builds compile their AVX2 and AVX-512 kernels with FMA, and both
    expressions become one fused multiply-add: each element is rounded once. (A CPU without
    FMA runs torch's baseline kernel, which rounds twice; the fixtures follow the FMA kernels.)
    """
    if steps < 1:
        raise ValueError(f"linspace needs at least one step, got {steps}")
    first, last = np.float32(start), np.float32(end)
    if steps == 1:
        return np.array([first], dtype=np.float32)
    step = np.float32((last - first) / np.float32(steps - 1))
    halfway = steps // 2
    index = np.arange(steps)
    from_start = fma_f32(step, index, first)
    from_end = fma_f32(-step, steps - 1 - index, last)
    return np.where(index < halfway, from_start, from_end).astype(np.float32)


def magnitude_bins(low: float, high: float, num_bins: int) -> list[float]:
    """The magnitudes `AutoAugment`, `RandAugment` and `TrivialAugmentWide` index
    (`_augmentation_space` in torchvision 0.29.2's `transforms/autoaugment.py`):
    `torch.linspace(low, high, num_bins)` in float32, each read back as a Python float.
    """
    return [float(v) for v in linspace_f32(low, high, num_bins)]


# --- colour ops (torchvision 0.29.2, transforms/_functional_pil.py) -------------------------


def adjust_brightness(img: Image.Image, factor: float) -> Image.Image:
    """`F.adjust_brightness` on a PIL image: `ImageEnhance.Brightness(img).enhance(factor)`."""
    return ImageEnhance.Brightness(img).enhance(factor)


def adjust_contrast(img: Image.Image, factor: float) -> Image.Image:
    """`F.adjust_contrast` on a PIL image: `ImageEnhance.Contrast(img).enhance(factor)`."""
    return ImageEnhance.Contrast(img).enhance(factor)


def adjust_saturation(img: Image.Image, factor: float) -> Image.Image:
    """`F.adjust_saturation` on a PIL image: `ImageEnhance.Color(img).enhance(factor)`."""
    return ImageEnhance.Color(img).enhance(factor)


def adjust_sharpness(img: Image.Image, factor: float) -> Image.Image:
    """`F.adjust_sharpness` on a PIL image: `ImageEnhance.Sharpness(img).enhance(factor)`."""
    return ImageEnhance.Sharpness(img).enhance(factor)


def adjust_hue(img: Image.Image, hue_factor: float) -> Image.Image:
    """`F.adjust_hue` on a PIL image: the hue band of `img.convert("HSV")` shifted by
    `np.int32(hue_factor * 255)` wrapped to uint8 (uint8 addition wraps, as torchvision wants),
    merged back and converted to the input mode.
    """
    if not -0.5 <= hue_factor <= 0.5:
        raise ValueError(f"hue_factor ({hue_factor}) is not in [-0.5, 0.5].")
    if img.mode in {"L", "1", "I", "F"}:
        return img
    h, s, v = img.convert("HSV").split()
    hue = np.array(h, dtype=np.uint8)
    hue += np.int32(hue_factor * 255).astype(np.uint8)
    shifted = Image.fromarray(hue)  # a 2-D uint8 array is an "L" image
    return Image.merge("HSV", (shifted, s, v)).convert(img.mode)


def rgb_to_grayscale(img: Image.Image, num_output_channels: int) -> Image.Image:
    """`F.rgb_to_grayscale` on a PIL image (`_functional_pil.to_grayscale`): `convert("L")`,
    stacked three times into an RGB image for `num_output_channels=3`.
    """
    gray = img.convert("L")
    if num_output_channels == 1:
        return gray
    if num_output_channels == 3:
        plane = np.array(gray, dtype=np.uint8)
        return Image.fromarray(np.dstack([plane, plane, plane]))
    raise ValueError("num_output_channels should be either 1 or 3")


def invert(img: Image.Image) -> Image.Image:
    """`F.invert` on a PIL image: `ImageOps.invert`."""
    return ImageOps.invert(img)


def posterize(img: Image.Image, bits: int) -> Image.Image:
    """`F.posterize` on a PIL image: `ImageOps.posterize` (bits checked in 0..=8 first)."""
    if not 0 <= bits <= 8:
        raise ValueError(f"The number if bits should be between 0 and 8. Got {bits}")
    return ImageOps.posterize(img, bits)


def solarize(img: Image.Image, threshold: float) -> Image.Image:
    """`F.solarize` on a PIL image: `ImageOps.solarize(img, threshold)` (float threshold)."""
    return ImageOps.solarize(img, threshold)  # type: ignore[arg-type]


def autocontrast(img: Image.Image) -> Image.Image:
    """`F.autocontrast` on a PIL image: `ImageOps.autocontrast` with its defaults."""
    return ImageOps.autocontrast(img)


def equalize(img: Image.Image) -> Image.Image:
    """`F.equalize` on a PIL image: `ImageOps.equalize`."""
    return ImageOps.equalize(img)


# --- geometry (torchvision 0.29.2, transforms/functional.py and _functional_pil.py) ---------


def parse_fill(fill: Fill, img: Image.Image, name: str = "fillcolor") -> dict[str, Any]:
    """`_functional_pil._parse_fill`: None -> 0, a number or 1-list repeated per band, a list
    of the band count kept; truncated to int for every mode but "F". Returns `{name: fill}`.
    """
    bands = len(img.getbands())
    value: Any = 0 if fill is None else fill
    if isinstance(value, (int, float)) and bands > 1:
        value = tuple([value] * bands)
    if isinstance(value, (list, tuple)):
        if len(value) == 1:
            value = value * bands
        elif len(value) != bands:
            raise ValueError(
                "The number of elements in 'fill' does not match the number of channels "
                f"of the image ({len(value)} != {bands})"
            )
        value = tuple(value)
    if img.mode != "F":
        value = tuple(int(x) for x in value) if isinstance(value, tuple) else int(value)
    return {name: value}


def inverse_affine_matrix(
    center: Sequence[float],
    angle: float,
    translate: Sequence[float],
    scale: float,
    shear: Sequence[float],
) -> list[float]:
    """`F._get_inverse_affine_matrix(center, angle, translate, scale, shear)` (inverted=True):
    the output-to-input matrix Pillow's AFFINE transform takes, in Python floats.

    The operations and their order are torchvision's, so every entry has the same bits:
    the rotation-scale-shear block, divided by `scale`, then the translations accumulated into
    entries that start at 0.0 (0.0 + -0.0 is 0.0, which a plain assignment would not give).
    """
    rot = math.radians(angle)
    sx = math.radians(shear[0])
    sy = math.radians(shear[1])
    cx, cy = center
    tx, ty = translate
    a = math.cos(rot - sy) / math.cos(sy)
    b = -math.cos(rot - sy) * math.tan(sx) / math.cos(sy) - math.sin(rot)
    c = math.sin(rot - sy) / math.cos(sy)
    d = -math.sin(rot - sy) * math.tan(sx) / math.cos(sy) + math.cos(rot)
    m = [x / scale for x in (d, -b, 0.0, -c, a, 0.0)]
    m[2] += m[0] * (-cx - tx) + m[1] * (-cy - ty)
    m[5] += m[3] * (-cx - tx) + m[4] * (-cy - ty)
    m[2] += cx
    m[5] += cy
    return m


def affine(
    img: Image.Image,
    angle: float,
    translate: Sequence[int],
    scale: float,
    shear: Union[float, Sequence[float]],
    interpolation: str = "nearest",
    fill: Fill = None,
    center: Optional[Sequence[float]] = None,
) -> Image.Image:
    """`F.affine` on a PIL image: shear normalised to two floats' worth (a number `s` is
    `[s, 0.0]`, a 1-list `[s, s]`), the centre defaulting to `[width * 0.5, height * 0.5]`,
    then `img.transform(img.size, Image.AFFINE, matrix, filter, fillcolor=...)`.
    """
    if scale <= 0.0:
        raise ValueError("Argument scale should be positive")
    if isinstance(angle, int):
        angle = float(angle)
    shears: list[float]
    if isinstance(shear, numbers.Number):
        shears = [shear, 0.0]  # type: ignore[list-item]
    else:
        shears = list(shear)  # type: ignore[arg-type]
    if len(shears) == 1:
        shears = [shears[0], shears[0]]
    if len(shears) != 2:
        raise ValueError(f"Shear should be a sequence containing two values. Got {shears}")
    width, height = img.size
    if center is None:
        center = [width * 0.5, height * 0.5]
    matrix = inverse_affine_matrix(center, angle, list(translate), scale, shears)
    return img.transform(
        img.size, Image.Transform.AFFINE, matrix, PIL_FILTERS[interpolation], **parse_fill(fill, img)
    )


def rotate(
    img: Image.Image,
    angle: float,
    interpolation: str = "nearest",
    expand: bool = False,
    center: Optional[Sequence[float]] = None,
    fill: Fill = None,
) -> Image.Image:
    """`F.rotate` on a PIL image: `img.rotate(angle, filter, expand, center, fillcolor=...)`."""
    return img.rotate(
        angle,
        PIL_FILTERS[interpolation],
        expand,
        None if center is None else tuple(center),  # type: ignore[arg-type]
        **parse_fill(fill, img),
    )


def perspective_coeffs(startpoints: Sequence[Sequence[int]], endpoints: Sequence[Sequence[int]]) -> list[float]:
    """`F._get_perspective_coeffs`: torchvision's 8x8 system, row for row, solved in float64 and
    rounded to float32 (read back as Python floats).

    torchvision solves it with `torch.linalg.lstsq(driver="gels")`, LAPACK's QR from MKL on x86
    wheels, which picks its kernels by CPU and cannot be repeated without torch. This is
    Gaussian elimination with partial pivoting (the first row of largest magnitude; an unknown
    with no non-zero pivot is 0), in plain float64 steps, the algorithm ferroloader's
    `perspective_coeffs` runs, so the fixtures do not depend on a LAPACK build. After the
    rounding to float32 both give torchvision's coefficients except those that are zero in exact
    arithmetic, where each leaves its own rounding noise (about 1e-16 from QR; 0 or about 1e-17
    from elimination). test_fixture_drift.py bounds that difference (coefficients and pixels)
    against torchvision itself.
    """
    if len(startpoints) != 4 or len(endpoints) != 4:
        raise ValueError(
            f"Please provide exactly four corners, got {len(startpoints)} startpoints and {len(endpoints)} endpoints."
        )
    a: list[list[float]] = []
    b: list[float] = []
    for p1, p2 in zip(endpoints, startpoints):
        a.append([float(v) for v in (p1[0], p1[1], 1, 0, 0, 0, -p2[0] * p1[0], -p2[0] * p1[1])])
        a.append([float(v) for v in (0, 0, 0, p1[0], p1[1], 1, -p2[1] * p1[0], -p2[1] * p1[1])])
        b += [float(p2[0]), float(p2[1])]
    n = 8
    pivoted = [False] * n
    for col in range(n):
        best = col
        for r in range(col + 1, n):
            if abs(a[r][col]) > abs(a[best][col]):
                best = r
        a[col], a[best] = a[best], a[col]
        b[col], b[best] = b[best], b[col]
        p = a[col][col]
        if p == 0.0:
            continue
        pivoted[col] = True
        for r in range(col + 1, n):
            f = a[r][col] / p
            if f == 0.0:
                continue
            for k in range(col, n):
                a[r][k] = a[r][k] - f * a[col][k]
            b[r] = b[r] - f * b[col]
    x = [0.0] * n
    for i in reversed(range(n)):
        if not pivoted[i]:
            continue
        s = b[i]
        for j in range(i + 1, n):
            s = s - a[i][j] * x[j]
        x[i] = s / a[i][i]
    return [float(np.float32(v)) for v in x]


def perspective(
    img: Image.Image,
    startpoints: Optional[Sequence[Sequence[int]]],
    endpoints: Optional[Sequence[Sequence[int]]],
    interpolation: str = "bilinear",
    fill: Fill = None,
    coefficients: Optional[Sequence[float]] = None,
) -> Image.Image:
    """`F.perspective` on a PIL image (v2's, which also takes the coefficients):
    `img.transform(img.size, Image.PERSPECTIVE, coeffs, filter, fillcolor=...)`."""
    if coefficients is None:
        if startpoints is None or endpoints is None:
            raise ValueError("Either the startpoints/endpoints or the coefficients must have non `None` values.")
        coefficients = perspective_coeffs(startpoints, endpoints)
    return img.transform(
        img.size, Image.Transform.PERSPECTIVE, list(coefficients), PIL_FILTERS[interpolation], **parse_fill(fill, img)
    )


def vflip(img: Image.Image) -> Image.Image:
    """`F.vflip` on a PIL image: `img.transpose(FLIP_TOP_BOTTOM)`."""
    return img.transpose(Image.Transpose.FLIP_TOP_BOTTOM)


def crop(img: Image.Image, top: int, left: int, height: int, width: int) -> Image.Image:
    """`F.crop` on a PIL image: `img.crop((left, top, left + width, top + height))`."""
    return img.crop((left, top, left + width, top + height))


def pad(img: Image.Image, padding: Padding, fill: Fill = 0, padding_mode: str = "constant") -> Image.Image:
    """`F.pad` on an RGB or L PIL image (`_functional_pil.pad`).

    `padding` is an int, or 1, 2 (left/right, top/bottom) or 4 (left, top, right, bottom)
    values. "constant" is `ImageOps.expand(img, border=padding, fill=...)`; the other modes crop
    away negative paddings, then `np.pad` the array with numpy's mode of the same name.
    """
    pads: Any = tuple(padding) if isinstance(padding, list) else padding
    if isinstance(pads, tuple) and len(pads) not in (1, 2, 4):
        raise ValueError(f"Padding must be an int or a 1, 2, or 4 element tuple, not a {len(pads)} element tuple")
    if isinstance(pads, tuple) and len(pads) == 1:
        pads = pads[0]
    if padding_mode not in ("constant", "edge", "reflect", "symmetric"):
        raise ValueError("Padding mode should be either constant, edge, reflect or symmetric")
    if img.mode == "P":
        raise ValueError("palette images are not mirrored (the fixtures pad RGB images)")
    if padding_mode == "constant":
        return ImageOps.expand(img, border=pads, **parse_fill(fill, img, name="fill"))
    if isinstance(pads, int):
        ltrb = [pads] * 4
    elif len(pads) == 2:
        ltrb = [pads[0], pads[1], pads[0], pads[1]]
    else:
        ltrb = list(pads)
    cropping = -np.minimum(ltrb, 0)
    if cropping.any():
        cl, ct, cr, cb = (int(v) for v in cropping)
        img = img.crop((cl, ct, img.width - cr, img.height - cb))
    left, top, right, bottom = (int(v) for v in np.maximum(ltrb, 0))
    pixels = np.asarray(img)
    widths: list[tuple[int, int]] = [(top, bottom), (left, right)]
    if pixels.ndim == 3:
        widths.append((0, 0))
    return Image.fromarray(np.pad(pixels, widths, padding_mode))  # type: ignore[call-overload]


def random_crop(
    img: Image.Image,
    size: Sequence[int],
    padding: Optional[Padding],
    pad_if_needed: bool,
    fill: Fill,
    padding_mode: str,
    top: int,
    left: int,
) -> Image.Image:
    """`transforms.RandomCrop(size, padding, pad_if_needed, fill, padding_mode)` on a PIL image
    with `get_params` answering (top, left): `F.pad` by `padding`, then (pad_if_needed) by
    `[size_w - width, 0]` and `[0, size_h - height]` as two more pads (sizes measured after the
    first pad), then `F.crop`. `size` is (height, width).
    """
    if padding is not None:
        img = pad(img, padding, fill, padding_mode)
    width, height = img.size
    if pad_if_needed and width < size[1]:
        img = pad(img, [size[1] - width, 0], fill, padding_mode)
    if pad_if_needed and height < size[0]:
        img = pad(img, [0, size[0] - height], fill, padding_mode)
    return crop(img, top, left, size[0], size[1])


def random_crop_v2(
    img: Image.Image,
    size: Sequence[int],
    padding: Optional[Padding],
    pad_if_needed: bool,
    fill: Fill,
    padding_mode: str,
    top: int,
    left: int,
) -> Image.Image:
    """`transforms.v2.RandomCrop(...)` on a PIL image with `make_params` answering (top, left):
    one pad by `padding` plus what pad_if_needed adds on both sides (`make_params`), then crop.
    A list fill becomes floats first (`_convert_fill_arg`), which `_parse_fill` truncates back.
    """
    width, height = img.size
    if padding:
        if isinstance(padding, int):
            pl = pr = pt = pb = padding
        elif len(padding) == 1:
            pl = pr = pt = pb = padding[0]
        elif len(padding) == 2:
            pl = pr = padding[0]
            pt = pb = padding[1]
        else:
            pl, pt, pr, pb = padding
    else:
        pl = pr = pt = pb = 0
    padded_h, padded_w = height + pt + pb, width + pl + pr
    if pad_if_needed:
        if padded_h < size[0]:
            diff = size[0] - padded_h
            pt, pb, padded_h = pt + diff, pb + diff, padded_h + 2 * diff
        if padded_w < size[1]:
            diff = size[1] - padded_w
            pl, pr, padded_w = pl + diff, pr + diff, padded_w + 2 * diff
    if padded_h < size[0] or padded_w < size[1]:
        raise ValueError(f"Required crop size {tuple(size)} is larger than input image size {(padded_h, padded_w)}.")
    ltrb = [pl, pt, pr, pb]
    if any(ltrb):
        v2_fill: Fill = fill if fill is None or isinstance(fill, (int, float)) else [float(v) for v in fill]
        img = pad(img, ltrb, v2_fill, padding_mode)
    return crop(img, top, left, size[0], size[1])


def sum_f32(values: np.ndarray) -> np.float32:
    """`tensor.sum()` of a contiguous 1-D float32 tensor of fewer than 512 elements, added in
    the order of torch 2.x's `cascade_sum` (`aten/src/ATen/native/cpu/SumKernel.cpp`) with
    8-lane vectors (the AVX2 kernel, which torch also runs on AVX-512 machines).

    Below 8 elements: four running sums over elements `4 * r + k`, the leftover elements added
    to the first, then the four added in order. From 8 on: the same over whole 8-lane vectors
    (lane by lane), then a scalar running sum of the elements past the last whole vector,
    to which the eight lanes are added in order. From 512 elements on, torch adds a level of
    chunked partial sums that is not reproduced here.
    """
    x = np.asarray(values, dtype=np.float32)
    n = len(x)
    if n >= 512:
        raise ValueError(f"sum_f32 reproduces torch's order below 512 elements, got {n}")
    lanes = 8
    if n < lanes:
        rows = n // 4
        partial = [np.float32(0)] * 4
        for r in range(rows):
            for k in range(4):
                partial[k] = np.float32(partial[k] + x[4 * r + k])
        for i in range(4 * rows, n):
            partial[0] = np.float32(partial[0] + x[i])
        total = partial[0]
        for k in range(1, 4):
            total = np.float32(total + partial[k])
        return total
    vectors = n // lanes
    rows = vectors // 4
    acc = [np.zeros(lanes, dtype=np.float32) for _ in range(4)]
    for r in range(rows):
        for k in range(4):
            acc[k] = acc[k] + x[(4 * r + k) * lanes : (4 * r + k + 1) * lanes]
    for v in range(4 * rows, vectors):
        acc[0] = acc[0] + x[v * lanes : (v + 1) * lanes]
    for k in range(1, 4):
        acc[0] = acc[0] + acc[k]
    total = np.float32(0)
    for i in range(vectors * lanes, n):
        total = np.float32(total + x[i])
    for lane in acc[0]:
        total = np.float32(total + lane)
    return total


def gaussian_kernel1d(kernel_size: int, sigma: float) -> np.ndarray:
    """`_functional_tensor._get_gaussian_kernel1d(kernel_size, sigma, torch.float32)`:
    `x = linspace(-(k-1)/2, (k-1)/2, k)`, `pdf = exp(-0.5 * (x / sigma) ** 2)`, `pdf / pdf.sum()`.

    Every step is torch's float32 operation in torch's order (`sum_f32`) except `exp`: torch's
    (MKL's or SLEEF's vectorised exp, by build and CPU) is within an ulp but not correctly
    rounded, and cannot be reproduced here; this one is correctly rounded. A tap can therefore
    differ from torch's by an ulp or two (an ulp of exp, and another when that moves the sum).
    """
    half = (kernel_size - 1) * 0.5
    x = linspace_f32(-half, half, kernel_size)
    scaled = x / np.float32(sigma)
    arg = np.float32(-0.5) * (scaled * scaled)
    pdf = np.exp(arg.astype(np.float64)).astype(np.float32)
    return (pdf / sum_f32(pdf)).astype(np.float32)


def gaussian_blur(img: Image.Image, kernel_size: Sequence[int], sigma: Sequence[float]) -> Image.Image:
    """`F.gaussian_blur(img, [kx, ky], [sx, sy])` on an RGB PIL image.

    torchvision runs it on a float32 tensor: kernel2d = ky[:, None] * kx[None, :] (one float32
    product each), reflect padding of kx // 2 columns and ky // 2 rows, a depthwise `conv2d`,
    then `round` (half to even) and a cast to uint8. torch's CPU convolution (oneDNN) sums each
    output from 0 over the kernel in row-major order, one fused multiply-add per tap; so does
    this. Another backend or summation order in torch would show up as a pixel one level off
    where the float sum lies next to a half (the drift test checks this on the fixtures).
    """
    kx, ky = kernel_size
    pad_x, pad_y = kx // 2, ky // 2
    width, height = img.size
    if pad_x >= width or pad_y >= height:
        raise ValueError(f"reflect padding of {pad_x}, {pad_y} needs an image larger than {width}x{height}")
    kernel2d = gaussian_kernel1d(ky, sigma[1])[:, None] * gaussian_kernel1d(kx, sigma[0])[None, :]
    pixels = np.asarray(img.convert("RGB"), dtype=np.float32)
    padded = np.pad(pixels, ((pad_y, pad_y), (pad_x, pad_x), (0, 0)), mode="reflect")
    acc = np.zeros_like(pixels)
    for i in range(ky):
        for j in range(kx):
            acc = fma_f32(kernel2d[i, j], padded[i : i + height, j : j + width], acc)
    return Image.fromarray(np.round(acc).astype(np.uint8))


# --- tensor ops (torchvision 0.29.2, transforms/functional.py and _functional_tensor.py) ----


def to_tensor(img: Image.Image) -> np.ndarray:
    """`F.to_tensor` of an RGB PIL image: CHW float32, each byte divided by 255 in float32."""
    chw = np.asarray(img.convert("RGB"), dtype=np.uint8).transpose(2, 0, 1)
    return chw.astype(np.float32) / np.float32(255)


def normalize(tensor: np.ndarray, mean: Sequence[float], std: Sequence[float]) -> np.ndarray:
    """`F.normalize(tensor, mean, std)`: mean and std as float32, `(tensor - mean) / std` in
    float32 per channel (torch's `sub_` then `div_`).
    """
    m = np.asarray(mean, dtype=np.float32)[:, None, None]
    s = np.asarray(std, dtype=np.float32)[:, None, None]
    if (s == 0).any():
        raise ValueError("std evaluated to zero after conversion to float32, leading to division by zero.")
    return ((tensor - m) / s).astype(np.float32)


def erase(tensor: np.ndarray, i: int, j: int, h: int, w: int, value: np.ndarray) -> np.ndarray:
    """`F.erase(tensor, i, j, h, w, v)` (not in place): a copy with
    `[..., i:i + h, j:j + w] = v`, `v` broadcast (a per-channel `[C, 1, 1]` or a full `[C, h, w]`).
    """
    out = tensor.copy()
    out[..., i : i + h, j : j + w] = value
    return out
