"""The torch-free fixture generator against the installed torchvision.

`make fixtures` writes the colour and geometry sets the Rust parity tests read
(transforms/tests/color_parity.rs, geometry_parity.rs) with Pillow and numpy only:
scripts/tv_pil_ref.py repeats the Pillow and numpy calls torchvision's PIL path makes, and the
few pieces of torch arithmetic involved (linspace, the Gaussian kernel's sum, conv2d's order of
summation). Here both sets are generated with torch made unimportable, and every case is
recomputed with torchvision itself, so a torchvision release that changes an op fails here
rather than leaving the Rust tests comparing against a stale mirror.

Exact everywhere (blurred pixels included: the generator sums as torch's CPU convolution does)
but in the Gaussian kernels' taps, allowed 2 ulps: torch's vectorised exp is not correctly
rounded and varies with the math library and CPU, so no mirror can promise its last bit (the
fixtures' kernels are torch's to the bit on the machines checked). The random erase values are
the generator's own numpy draws, handed to `F.erase`.

Perspective: Pillow's transform from the fixture's coefficients is exact; the coefficients are
torchvision's except where torch's least-squares QR (MKL, CPU-dependent) leaves rounding noise
(below 1e-12) in a coefficient that is zero in exact arithmetic. That noise moves BILINEAR
samples that sit on a pixel centre (the identity, distortion_scale=0) by about 1e-13, which
truncates some of them one level lower (BICUBIC likewise); the test allows exactly that: one
level, only where the coefficients differ by noise. torchvision refuses the singular system of
a 1x1 image.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from fractions import Fraction
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Tuple

import numpy as np
import pytest
import torch
import torchvision.transforms as tvT
import torchvision.transforms.functional as F
import torchvision.transforms.v2 as v2
from PIL import Image
from torchvision.transforms import _functional_tensor as F_t

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = REPO / "scripts"
sys.path.insert(0, str(SCRIPTS))
import tv_pil_ref  # noqa: E402

IMAGENET_MEAN = [0.485, 0.456, 0.406]
IMAGENET_STD = [0.229, 0.224, 0.225]
INTERP = {
    "nearest": tvT.InterpolationMode.NEAREST,
    "bilinear": tvT.InterpolationMode.BILINEAR,
    "bicubic": tvT.InterpolationMode.BICUBIC,
}

# Runs a fixture script as `python SCRIPT OUTDIR` with torch and torchvision unimportable.
WITHOUT_TORCH = """
import runpy, sys
sys.modules["torch"] = None
sys.modules["torchvision"] = None
script, outdir = sys.argv[1:]
sys.argv = [script, outdir]
runpy.run_path(script, run_name="__main__")
"""


def _generate(name: str, outdir: Path) -> Path:
    result = subprocess.run(
        [sys.executable, "-c", WITHOUT_TORCH, str(SCRIPTS / f"fixtures_{name}.py"), str(outdir)],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, f"fixtures_{name}.py without torch failed:\n{result.stderr}"
    return outdir


@pytest.fixture(scope="module")
def color_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _generate("color", tmp_path_factory.mktemp("fixtures") / "color")


@pytest.fixture(scope="module")
def geometry_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _generate("geometry", tmp_path_factory.mktemp("fixtures") / "geometry")


def _load(folder: Path) -> Tuple[Dict[str, Any], Dict[str, Image.Image]]:
    manifest = json.loads((folder / "manifest.json").read_text())
    images = {}
    for entry in manifest["images"]:
        pixels = np.fromfile(folder / entry["file"], dtype=np.uint8)
        pixels = pixels.reshape(entry["height"], entry["width"], 3)
        images[entry["name"]] = Image.fromarray(pixels)
    return manifest, images


def _bits(values: Any) -> np.ndarray:
    return np.asarray(values, dtype=np.float32).view(np.uint32)


def _f64(hex_bits: str) -> float:
    return float(np.frombuffer(bytes.fromhex(hex_bits)[::-1], dtype=np.float64)[0])


# --- the torch arithmetic the generator reproduces --------------------------------------------


def _policy_spaces(height: int, width: int) -> Iterator[Tuple[str, str, Tuple[float, float, int]]]:
    """(policy, op, (low, high, bins)) as the fixture scripts call `magnitude_bins`."""
    trivial = {"Shear": (0.0, 0.99), "Translate": (0.0, 32.0), "Rotate": (0.0, 135.0), "Enhance": (0.0, 0.99)}
    rand = {"Shear": (0.0, 0.3), "Rotate": (0.0, 30.0), "Enhance": (0.0, 0.9)}
    rand_translate = {"TranslateX": (0.0, 150.0 / 331.0 * width), "TranslateY": (0.0, 150.0 / 331.0 * height)}
    for op in ("ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate", "Brightness", "Color", "Contrast",
               "Sharpness", "Solarize"):
        kind = op[:-1] if op.startswith(("Shear", "Translate")) else op
        kind = "Enhance" if kind in ("Brightness", "Color", "Contrast", "Sharpness") else kind
        for policy, bins in (("TrivialAugmentWide", 31), ("RandAugment", 31), ("AutoAugment", 10)):
            if op == "Solarize":
                yield policy, op, (255.0, 0.0, bins)
            elif policy == "TrivialAugmentWide":
                yield policy, op, (*trivial[kind], bins)
            elif kind == "Translate":
                yield policy, op, (*rand_translate[op], bins)
            else:
                yield policy, op, (*rand[kind], bins)


@pytest.mark.parametrize("height, width", [(1, 1), (23, 37), (224, 224), (200, 300), (331, 500)])
def test_magnitude_bins_are_the_policies_linspace(height: int, width: int) -> None:
    spaces = {
        "TrivialAugmentWide": tvT.TrivialAugmentWide()._augmentation_space(31),
        "RandAugment": tvT.RandAugment()._augmentation_space(31, (height, width)),
        "AutoAugment": tvT.AutoAugment()._augmentation_space(10, (height, width)),
    }
    for policy, op, (low, high, bins) in _policy_spaces(height, width):
        theirs = [float(v.item()) for v in spaces[policy][op][0]]
        ours = tv_pil_ref.magnitude_bins(low, high, bins)
        assert ours == theirs, f"{policy} {op} on {width}x{height}: {ours} != {theirs}"


def test_linspace_is_torchs_to_the_bit() -> None:
    rng = np.random.default_rng(7)
    ranges = [(-(k - 1) * 0.5, (k - 1) * 0.5, k) for k in range(1, 100, 2)]
    ranges += [(float(a), float(b), int(n)) for a, b, n in
               zip(rng.uniform(-300, 300, 500), rng.uniform(-300, 300, 500), rng.integers(1, 70, 500))]
    for low, high, steps in ranges:
        theirs = torch.linspace(low, high, steps).numpy()
        ours = tv_pil_ref.linspace_f32(low, high, steps)
        assert np.array_equal(_bits(ours), _bits(theirs)), f"linspace({low}, {high}, {steps})"


def test_sum_is_torchs_to_the_bit() -> None:
    values = np.random.default_rng(8).random(511).astype(np.float32) ** 3
    for n in range(1, 512):
        theirs = torch.from_numpy(values[:n]).sum().item()
        assert tv_pil_ref.sum_f32(values[:n]) == np.float32(theirs), f"sum of {n}"


def _round_to_f32(x: Fraction) -> np.float32:
    """`x` rounded to the nearest float32, ties to even, by exact comparison."""
    guess = np.float32(float(x))
    candidates = [np.nextafter(guess, np.float32(-np.inf)), guess, np.nextafter(guess, np.float32(np.inf))]
    return min(candidates, key=lambda c: (abs(Fraction(float(c)) - x), int(np.float32(c).view(np.uint32)) & 1))


def test_fma_rounds_once() -> None:
    # (1 + 2**-12)**2 + 2**-60 lies just above a float32 midpoint: rounding through float64
    # lands on the midpoint and then rounds down to even, a single rounding goes up.
    a = np.float32(1 + 2**-12)
    c = np.float32(2**-60)
    assert tv_pil_ref.fma_f32(a, a, c) == np.float32(1 + 2**-11 + 2**-23)
    assert np.float32(a.astype(np.float64) ** 2 + np.float64(c)) == np.float32(1 + 2**-11)
    rng = np.random.default_rng(9)
    triples = (rng.standard_normal((3, 2000)) * 2.0 ** rng.integers(-40, 40, (3, 2000))).astype(np.float32)
    ours = tv_pil_ref.fma_f32(*triples)
    for k, (x, y, z) in enumerate(triples.T):
        exact = Fraction(float(x)) * Fraction(float(y)) + Fraction(float(z))
        assert ours[k] == _round_to_f32(exact), f"fma({x}, {y}, {z})"


# --- the colour set ---------------------------------------------------------------------------

COLOR_OPS: Dict[str, Callable[[Image.Image, float], Image.Image]] = {
    "equalize": lambda img, _: F.equalize(img),
    "autocontrast": lambda img, _: F.autocontrast(img),
    "invert": lambda img, _: F.invert(img),
    "grayscale1": lambda img, _: F.rgb_to_grayscale(img, num_output_channels=1),
    "grayscale3": lambda img, _: F.rgb_to_grayscale(img, num_output_channels=3),
    "posterize": lambda img, p: F.posterize(img, int(p)),
    "solarize": F.solarize,
    "brightness": F.adjust_brightness,
    "saturation": F.adjust_saturation,
    "contrast": F.adjust_contrast,
    "sharpness": F.adjust_sharpness,
    "hue": F.adjust_hue,
}


def test_color_fixtures_are_torchvisions(color_dir: Path) -> None:
    manifest, images = _load(color_dir)
    expected = (color_dir / "expected.bin").read_bytes()
    ops = set()
    failures = []
    for case in manifest["cases"]:
        ours = expected[case["offset"] : case["offset"] + case["len"]]
        theirs = COLOR_OPS[case["op"]](images[case["image"]], case["param"]).tobytes()
        ops.add(case["op"])
        if ours != theirs:
            failures.append(f"{case['op']} {case['param']!r} ({case['why']}) on {case['image']}")
    assert ops == set(COLOR_OPS), "an op has no cases"
    assert not failures, f"{len(failures)} cases differ from torchvision:\n" + "\n".join(failures[:20])


# --- the geometry set -------------------------------------------------------------------------


def _tv_geometry(img: Image.Image, c: Dict[str, Any]) -> Image.Image:
    out: Image.Image
    if c["op"] == "rotate":
        out = F.rotate(img, c["angle"], interpolation=INTERP[c["interp"]], expand=c.get("expand", False),
                       center=c["center"], fill=c["fill"])
    else:
        out = F.affine(img, angle=c["angle"], translate=c["translate"], scale=c["scale"], shear=c["shear"],
                       interpolation=INTERP[c["interp"]], fill=c["fill"], center=c["center"])
    return out


def _tv_random_crop(img: Image.Image, c: Dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> Image.Image:
    top, left, (h, w) = c["top"], c["left"], c["size"]
    monkeypatch.setattr(tvT.RandomCrop, "get_params", staticmethod(lambda _img, _size: (top, left, h, w)))
    crop = tvT.RandomCrop(c["size"], padding=c["padding"], pad_if_needed=c["pad_if_needed"], fill=c["fill"],
                          padding_mode=c["mode"])
    out: Image.Image = crop(img)
    return out


def _tv_random_crop_v2(img: Image.Image, c: Dict[str, Any]) -> Image.Image:
    crop = v2.RandomCrop(c["size"], padding=c["padding"], pad_if_needed=c["pad_if_needed"], fill=c["fill"],
                         padding_mode=c["mode"])
    make_params = crop.make_params

    def injected(flat_inputs: List[Any]) -> Dict[str, Any]:
        params: Dict[str, Any] = make_params(flat_inputs)
        params.update(top=c["top"], left=c["left"], needs_crop=True)
        return params

    crop.make_params = injected
    out: Image.Image = crop(img)
    return out


def _blur_difference(img: Image.Image, c: Dict[str, Any], ours: bytes) -> List[str]:
    """How a blur case differs from torchvision's output, if it does.

    Exact is expected: tv_pil_ref sums each pixel in the order torch's CPU convolution does.
    When only pixels whose torch float32 sum lies next to a half differ, by one level, the
    message says so: this torch build sums in another order, which is not a torchvision change.
    """
    theirs = np.asarray(F.gaussian_blur(img, c["kernel"], c["sigma"]), dtype=np.int16)
    mine = np.frombuffer(ours, dtype=np.uint8).reshape(theirs.shape).astype(np.int16)
    differ = mine != theirs
    if not differ.any():
        return []
    floats = F_t.gaussian_blur(F.pil_to_tensor(img).float(), c["kernel"], c["sigma"]).permute(1, 2, 0).numpy()
    near_half = np.abs(floats - np.floor(floats) - 0.5) < 2e-3
    order_only = bool((np.abs(mine - theirs)[differ] == 1).all() and near_half[differ].all())
    why = (
        "all one level apart where torch's float sum is next to a half: this torch build sums "
        "the convolution in another order than tv_pil_ref.gaussian_blur"
        if order_only
        else f"first at {tuple(int(v) for v in np.argwhere(differ)[0])}"
    )
    return [f"blur {c['why']} on {c['image']}: {int(differ.sum())} values differ ({why})"]


def _perspective_difference(img: Image.Image, c: Dict[str, Any], ours: bytes) -> List[str]:
    """How a perspective case differs from torchvision: the warp from the fixture's coefficients
    must be exact; the coefficients and the whole `F.perspective` within QR's noise (see the
    module doc)."""
    where = f"perspective {c['why']} on {c['image']}"
    coeffs = [_f64(h) for h in c["coeffs"]]
    interp = INTERP[c["interp"]]
    warped = v2.functional.perspective(img, None, None, interpolation=interp, fill=c["fill"], coefficients=coeffs)
    failures = [] if warped.tobytes() == ours else [f"{where}: Pillow's transform from the coefficients"]
    try:
        theirs = F._get_perspective_coeffs(c["startpoints"], c["endpoints"])
    except torch.linalg.LinAlgError:
        # Only the 1x1 image's corners are singular for torch; ferroloader takes the identity.
        if (img.width, img.height) != (1, 1):
            failures.append(f"{where}: torchvision finds the system singular")
        return failures
    noise = [a != b for a, b in zip(coeffs, theirs)]
    if any(n and not (abs(a) < 1e-12 and abs(b) < 1e-12) for n, a, b in zip(noise, coeffs, theirs)):
        failures.append(f"{where}: coefficients {coeffs} vs torchvision's {theirs}")
    full = np.asarray(F.perspective(img, c["startpoints"], c["endpoints"], interp, c["fill"]), dtype=np.int16)
    mine = np.frombuffer(ours, dtype=np.uint8).reshape(full.shape).astype(np.int16)
    diff = np.abs(full - mine)
    allowed = 1 if any(noise) and c["interp"] in ("bilinear", "bicubic") else 0
    if diff.max() > allowed:
        failures.append(f"{where}: F.perspective differs by up to {diff.max()} ({int((diff > 0).sum())} values)")
    return failures


def test_geometry_fixtures_are_torchvisions(geometry_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    manifest, images = _load(geometry_dir)
    tensors = {
        name: F.normalize(F.to_tensor(img), IMAGENET_MEAN, IMAGENET_STD) for name, img in images.items()
    }
    ops = set()
    failures: List[str] = []
    for c in manifest["cases"]:
        img = images[c["image"]]
        ours = (geometry_dir / c["file"]).read_bytes()
        ops.add(c["op"])
        if c["op"] in ("affine", "rotate"):
            theirs = _tv_geometry(img, c).tobytes()
            if c["op"] == "affine":
                center = c["center"] if c["center"] is not None else [img.width * 0.5, img.height * 0.5]
                matrix = F._get_inverse_affine_matrix(center, float(c["angle"]), c["translate"], c["scale"],
                                                      c["shear"])
                if [_f64(h) for h in c["matrix"]] != matrix or any(
                    math.copysign(1, _f64(h)) != math.copysign(1, m) for h, m in zip(c["matrix"], matrix)
                ):
                    failures.append(f"matrix of {c['why']} on {c['image']}")
        elif c["op"] == "vflip":
            theirs = F.vflip(img).tobytes()
        elif c["op"] == "pad":
            theirs = F.pad(img, c["padding"], fill=c["fill"], padding_mode=c["mode"]).tobytes()
        elif c["op"] == "random_crop":
            theirs = _tv_random_crop(img, c, monkeypatch).tobytes()
        elif c["op"] == "random_crop_v2":
            theirs = _tv_random_crop_v2(img, c).tobytes()
        elif c["op"] == "blur":
            failures += _blur_difference(img, c, ours)
            continue
        elif c["op"] == "perspective":
            failures += _perspective_difference(img, c, ours)
            continue
        elif c["op"] == "erase":
            i, j, h, w = c["rect"]
            if c["value"] == "random":
                source = np.fromfile(geometry_dir / c["source_file"], dtype=np.float32).reshape(3, h, w)
                value = torch.from_numpy(source)
            else:
                value = torch.tensor(c["value"])[:, None, None]
            theirs = F.erase(tensors[c["image"]], i, j, h, w, value).numpy().tobytes()
        else:
            raise AssertionError(f"unknown op {c['op']!r} in the geometry manifest")
        if ours != theirs:
            failures.append(f"{c['op']} {c['why']} on {c['image']}")
    assert ops == {"affine", "rotate", "perspective", "vflip", "pad", "random_crop", "random_crop_v2", "blur", "erase"}
    warps = {(c["op"], c["interp"]) for c in manifest["cases"] if "interp" in c}
    assert warps == {(op, i) for op in ("affine", "rotate", "perspective") for i in INTERP}, warps
    for name, tensor in tensors.items():
        path = geometry_dir / f"tensor_{name}.bin"
        if path.exists() and path.read_bytes() != tensor.numpy().tobytes():
            failures.append(f"to_tensor + normalize of {name}")
    assert not failures, f"{len(failures)} differ from torchvision:\n" + "\n".join(failures[:20])


def test_gaussian_kernels_are_torchs_within_two_ulps(geometry_dir: Path) -> None:
    manifest = json.loads((geometry_dir / "manifest.json").read_text())
    assert manifest["kernels"], "no kernels in the geometry manifest"
    for entry in manifest["kernels"]:
        sigma = _f64(entry["sigma"])
        theirs = F_t._get_gaussian_kernel1d(entry["size"], sigma, torch.float32, torch.device("cpu")).numpy()
        ours = np.asarray(entry["bits"], dtype=np.uint32).view(np.float32)
        ulps = np.abs(ours.view(np.int32).astype(np.int64) - theirs.view(np.int32).astype(np.int64))
        assert ulps.max() <= 2, f"kernel {entry['size']} sigma {sigma}: {ulps.tolist()} ulps"
