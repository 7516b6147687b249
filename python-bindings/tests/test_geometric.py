"""The geometric ops (RandomVerticalFlip, RandomRotation, RandomAffine, RandomPerspective,
GaussianBlur, Pad, RandomCrop) through the whole loader against torchvision on PIL images.

Randomness is neutralised on torchvision's side by certain coins (p=1) and degenerate ranges
(``degrees=(30, 30)``, a crop as large as the padded image, which draws nothing), so the
pixels must be equal: Pillow's transform and padding are reproduced exactly. GaussianBlur is
within one level (a separable float32 convolution rounds differently from torch's 2-D one). A
random ``RandomCrop(32, padding=4)`` is checked window by window: every sample must be one of
torchvision's 81 crops of the padded image. Random draws are per sample: the same batches
whatever the worker count.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, List

import numpy as np
import pytest
import torch
import torchvision
import torchvision.transforms as tvT
import torchvision.transforms.functional as F
import torchvision.transforms.v2 as v2
from PIL import Image

import ferroloader as fl
from ferroloader import transforms as T

from conftest import make_folder

NEAREST = tvT.InterpolationMode.NEAREST
BILINEAR = tvT.InterpolationMode.BILINEAR
BICUBIC = tvT.InterpolationMode.BICUBIC


def _certain_ops(tv: Any) -> List[Any]:
    """Every geometric op with nothing left to chance, for ``tv`` (v1 or v2 transforms)."""
    return [
        tv.Resize(64),
        tv.CenterCrop(48),
        tv.RandomVerticalFlip(p=1.0),
        tv.RandomRotation((30, 30), fill=[10, 20, 300]),
        tv.RandomRotation((-45, -45), interpolation=BILINEAR, center=[10, 20.5]),
        tv.RandomAffine(degrees=(10, 10), scale=(1.1, 1.1), shear=(5, 5, -3, -3), interpolation=BILINEAR, fill=7),
        tv.RandomAffine(degrees=0, shear=(12, 12), fill=[0, 255, 0], center=[5, 5]),
        tv.Pad(3, fill=(1, 2, 3)),
        tv.Pad([1, 2], padding_mode="reflect"),
        tv.Pad([0, 1, 2, 3], padding_mode="symmetric"),
        # (w, h) = 48 + (6, 6) + (2, 4) + (2, 4) = (58, 62), padded by 2: the crop's own size.
        tv.RandomCrop((66, 62), padding=2, padding_mode="edge"),
        tv.CenterCrop((60, 58)),
        tv.PILToTensor(),
    ]


def _uint8_loader(folder: Path, transform: Any, workers: int = 2) -> fl.Loader:
    return fl.Loader(fl.ImageFolder(folder), batch_size=5, num_workers=workers, transform=transform, output="uint8")


def _certain_bicubic_ops(tv: Any) -> List[Any]:
    """The warps with BICUBIC and nothing left to chance: rotations (with a fill, about a
    centre), an affine with rotation, scale and both shears, a pure shear about a corner, and
    the policies' translation (``RandomAffine`` with degrees 0 and no draw but a zero one)."""
    return [
        tv.Resize(64),
        tv.CenterCrop(48),
        tv.RandomRotation((30, 30), interpolation=BICUBIC, fill=[10, 20, 300]),
        tv.RandomRotation((-45, -45), interpolation=BICUBIC, center=[10, 20.5]),
        tv.RandomAffine(degrees=(10, 10), scale=(1.1, 1.1), shear=(5, 5, -3, -3), interpolation=BICUBIC, fill=7),
        tv.RandomAffine(degrees=0, shear=(12, 12), fill=[0, 255, 0], center=[5, 5], interpolation=BICUBIC),
        tv.RandomAffine(degrees=(-100, -100), scale=(0.6, 0.6), interpolation=BICUBIC, fill=128),
        tv.PILToTensor(),
    ]


@pytest.mark.parametrize("ops", [_certain_ops, _certain_bicubic_ops], ids=["ops", "bicubic"])
@pytest.mark.parametrize("tv", [tvT, v2], ids=["v1", "v2"])
def test_certain_geometric_ops_match_torchvision_on_pil_exactly(folder: Path, tv: Any, ops: Any) -> None:
    tv_transform = tv.Compose(ops(tv))
    reference = torchvision.datasets.ImageFolder(str(folder), transform=tv_transform)
    seen = 0
    loader = fl.Loader(
        fl.ImageFolder(folder), batch_size=5, num_workers=2, transform=tv_transform, output="uint8",
        python_tail="error",
    )
    for images, _ in loader:
        for k in range(images.shape[0]):
            ref, _ = reference[seen]
            assert images[k].shape == ref.shape
            diff = (images[k].to(torch.int16) - ref.to(torch.int16)).abs().max()
            assert int(diff) == 0, f"sample {seen}: {int(diff)} levels"
            seen += 1
    assert seen == len(reference)


def test_gaussian_blur_is_within_one_level_of_torchvision(folder: Path) -> None:
    tv_transform = tvT.Compose(
        [tvT.Resize(64), tvT.CenterCrop(48), tvT.GaussianBlur((5, 3), sigma=(1.3, 1.3)), tvT.PILToTensor()]
    )
    reference = torchvision.datasets.ImageFolder(str(folder), transform=tv_transform)
    worst, exact, seen = 0, 0, 0
    for images, _ in _uint8_loader(folder, T.from_torchvision(tv_transform)):
        for k in range(images.shape[0]):
            ref, _ = reference[seen]
            diff = (images[k].to(torch.int16) - ref.to(torch.int16)).abs()
            worst = max(worst, int(diff.max()))
            exact += int((diff == 0).sum())
            seen += 1
    assert seen == len(reference)
    assert worst <= 1, f"{worst} levels"
    # Almost every pixel is exact: a wrong kernel would be off by more, and more often.
    assert exact >= 0.99 * seen * 3 * 48 * 48


@pytest.fixture(scope="module")
def cifar_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("cifar")
    make_folder(root, ((32, 32),) * 4, seed=3)
    return root


def _rgb(path: str) -> Image.Image:
    with Image.open(path) as img:
        return img.convert("RGB")


def test_cifar_random_crop_is_one_of_torchvisions_windows(cifar_folder: Path) -> None:
    """``RandomCrop(32, padding=4)`` first, then a flip: each sample is one of the 81 windows
    of torchvision's padded image (or its mirror), and the windows vary."""
    ds = fl.ImageFolder(cifar_folder)
    transform = T.Compose([T.RandomCrop(32, padding=4, fill=(9, 99, 199)), T.RandomHorizontalFlip(), T.PILToTensor()])
    loader = fl.Loader(ds, batch_size=4, num_workers=2, transform=transform, output="uint8", seed=11)
    found = set()
    seen = 0
    for images, _ in loader:
        for k in range(images.shape[0]):
            padded = F.pad(_rgb(ds.samples[seen][0]), 4, fill=(9, 99, 199))
            windows = {
                (i, j, flip)
                for i in range(9)
                for j in range(9)
                for flip in (False, True)
                if torch.equal(
                    F.pil_to_tensor(F.hflip(F.crop(padded, i, j, 32, 32)) if flip else F.crop(padded, i, j, 32, 32)),
                    images[k],
                )
            }
            assert windows, f"sample {seen} is none of torchvision's windows"
            found |= windows
            seen += 1
    assert seen == len(ds)
    assert len({(i, j) for i, j, _ in found}) > 1


def test_random_crop_as_large_as_the_padded_image_is_torchvisions_pad(cifar_folder: Path) -> None:
    tv_transform = tvT.Compose([tvT.RandomCrop(40, padding=4, padding_mode="reflect"), tvT.PILToTensor()])
    reference = torchvision.datasets.ImageFolder(str(cifar_folder), transform=tv_transform)
    seen = 0
    for images, _ in _uint8_loader(cifar_folder, T.from_torchvision(tv_transform)):
        for k in range(images.shape[0]):
            assert torch.equal(images[k], reference[seen][0]), f"sample {seen}"
            seen += 1
    assert seen == len(reference)


def test_random_crop_larger_than_an_image_names_the_sizes(folder: Path) -> None:
    loader = fl.Loader(
        fl.ImageFolder(folder), batch_size=2, num_workers=0, transform=T.Compose([T.RandomCrop(3000), T.ToTensor()])
    )
    with pytest.raises(ValueError, match=r"RandomCrop: the crop of 3000x3000 .* is larger than the"):
        next(iter(loader))


def _center_crops_that_pad(tv: Any) -> List[List[Any]]:
    """CenterCrops larger than their input, where a pipeline can put one: first, after a
    Resize, and later in the staged ops; odd and even shortfalls, one axis or both."""
    return [
        [tv.CenterCrop((700, 333))],  # taller than every image, as wide as some: one axis or both
        [tv.Resize(40), tv.CenterCrop(64)],
        [tv.Resize((30, 50)), tv.CenterCrop((41, 44))],  # pads the height only
        [tv.Resize(48), tv.CenterCrop(40), tv.RandomVerticalFlip(p=1.0), tv.CenterCrop((51, 39))],
    ]


@pytest.mark.parametrize("tv", [tvT, v2], ids=["v1", "v2"])
@pytest.mark.parametrize("output", ["uint8", "float32"])
def test_center_crop_larger_than_the_image_pads_with_zeros_as_torchvision(
    folder: Path, tv: Any, output: str
) -> None:
    for ops in _center_crops_that_pad(tv):
        reference = torchvision.datasets.ImageFolder(str(folder), transform=tv.Compose([*ops, tv.PILToTensor()]))
        # float32: the fused pass (crop to ToTensor in one), whose values are the levels / 255.
        to_tensor = tv.PILToTensor() if output == "uint8" else tvT.ToTensor()
        native = T.from_torchvision(tv.Compose([*ops, to_tensor]))
        loader = fl.Loader(fl.ImageFolder(folder), batch_size=6, num_workers=2, transform=native, output=output)
        seen = 0
        for images, _ in loader:
            for k in range(images.shape[0]):
                ref, _ = reference[seen]
                got = images[k] if output == "uint8" else (images[k] * 255).round()
                diff = (got.to(torch.int16) - ref.to(torch.int16)).abs().max()
                assert int(diff) == 0, f"{ops}, sample {seen}: {int(diff)} levels"
                seen += 1
        assert seen == len(reference)


def test_random_geometric_ops_are_identical_whatever_the_worker_count(folder: Path) -> None:
    ops = [
        T.Resize(56),
        T.RandomCrop(48, padding=2, padding_mode="symmetric"),
        T.RandomVerticalFlip(),
        T.RandomRotation(20, interpolation="bilinear", fill=[0, 128, 255]),
        T.RandomHorizontalFlip(),
        T.RandomAffine(10, translate=(0.1, 0.1), scale=(0.9, 1.1), shear=5),
        T.GaussianBlur(3),
        T.Pad([1, 2]),
        T.RandomCrop(44),
        T.ToTensor(),
    ]

    def run(transform: T.Compose, workers: int) -> torch.Tensor:
        loader = fl.Loader(fl.ImageFolder(folder), batch_size=4, num_workers=workers, transform=transform, seed=5)
        return torch.cat([images.clone() for images, _ in loader])

    zero = run(T.Compose(ops), 0)
    assert zero.shape[1:] == (3, 44, 44)
    assert torch.equal(zero, run(T.Compose(ops), 1))
    assert torch.equal(zero, run(T.Compose(ops), 2))
    # The draws decide: another seed gives other samples.
    loader = fl.Loader(fl.ImageFolder(folder), batch_size=4, num_workers=1, transform=T.Compose(ops), seed=6)
    assert not torch.equal(zero, torch.cat([images.clone() for images, _ in loader]))


def test_from_torchvision_converts_v1_and_v2_alike() -> None:
    for tv in (tvT, v2):
        got = T.from_torchvision(
            tv.Compose(
                [
                    tv.RandomCrop(32, padding=4),
                    tv.RandomVerticalFlip(0.3),
                    tv.RandomRotation(15),
                    tv.RandomAffine(5, translate=(0.1, 0.2), scale=(0.9, 1.0), shear=3),
                    tv.GaussianBlur(3, sigma=0.5),
                    tv.Pad([1, 2, 3, 4], fill=5, padding_mode="edge"),
                    tv.ToTensor() if tv is tvT else tv.PILToTensor(),
                ]
            )
        )
        spec = got.to_spec()
        assert spec[0] == {
            "op": "RandomCrop",
            "size": [32, 32],
            "padding": 4 if tv is tvT else [4, 4, 4, 4],
            "pad_if_needed": False,
            "fill": 0.0,
            "padding_mode": "constant",
        }
        assert spec[1] == {"op": "RandomVerticalFlip", "p": 0.3}
        assert spec[2]["degrees"] == [-15.0, 15.0] and spec[2]["interpolation"] == "nearest"
        assert spec[3]["translate"] == [0.1, 0.2] and spec[3]["shear"] == [-3.0, 3.0]
        assert spec[4] == {"op": "GaussianBlur", "kernel_size": [3, 3], "sigma": [0.5, 0.5]}
        assert spec[5] == {"op": "Pad", "padding": [1, 2, 3, 4], "fill": 5.0, "padding_mode": "edge"}
        T.check(got, output="float32" if tv is tvT else "uint8")


def test_unsupported_geometric_arguments_are_refused_by_name() -> None:
    # expand=True converts; with no op after it that fixes the size the plan refuses it.
    expanded = T.from_torchvision(tvT.Compose([tvT.CenterCrop(8), tvT.RandomRotation(10, expand=True), tvT.ToTensor()]))
    with pytest.raises(ValueError, match=r"RandomRotation\(expand=True\): its size follows each angle"):
        T.check(expanded)
    with pytest.raises(ValueError, match="v2 RandomCrop"):
        T.from_torchvision(v2.RandomCrop(8, padding=1, pad_if_needed=True, padding_mode="reflect"))
    # Pillow's transform has three filters: the others are refused, naming the parameter.
    assert T.RandomAffine(10, interpolation="bicubic").interpolation == "bicubic"
    with pytest.raises(ValueError, match="RandomAffine: interpolation 'lanczos'"):
        T.RandomAffine(10, interpolation="lanczos")
    with pytest.raises(ValueError, match="negative padding"):
        T.Pad(-1)
    with pytest.raises(ValueError, match="odd and positive"):
        T.GaussianBlur(4)
    with pytest.raises(ValueError, match="padding_mode"):
        T.RandomCrop(8, padding=1, padding_mode="wrap")
    # Planning checks what needs the stage's size: a crop larger than the 48x48 sample.
    with pytest.raises(ValueError, match="RandomCrop"):
        T.check(T.Compose([T.CenterCrop(48), T.RandomCrop(49), T.ToTensor()]))
    with pytest.raises(ValueError, match="GaussianBlur"):
        T.check(T.Compose([T.CenterCrop(8), T.GaussianBlur(17), T.ToTensor()]))
    assert T.check(T.Compose([T.CenterCrop(8), T.Pad([1, 2]), T.ToTensor()]))["shape"] == (3, 12, 10)


def test_vertical_flip_through_the_loader_is_pillows(folder: Path) -> None:
    ds = fl.ImageFolder(folder)
    transform = T.Compose([T.CenterCrop(40), T.RandomVerticalFlip(1.0), T.PILToTensor()])
    seen = 0
    for images, _ in _uint8_loader(folder, transform):
        for k in range(images.shape[0]):
            want = F.pil_to_tensor(F.vflip(F.center_crop(_rgb(ds.samples[seen][0]), [40, 40])))
            assert torch.equal(images[k], want), f"sample {seen}"
            seen += 1
    assert seen == len(ds)


def test_flips_after_to_tensor_run_natively_as_torchvision_flips_the_tensor(folder: Path) -> None:
    """``ToTensor(), RandomHorizontalFlip()`` (a common v1 order) converts to a native plan that
    flips before the conversion: mirroring commutes with ToTensor and Normalize exactly."""
    tv_transform = tvT.Compose(
        [
            tvT.Resize(40),
            tvT.CenterCrop(32),
            tvT.ToTensor(),
            tvT.RandomHorizontalFlip(p=1.0),
            tvT.Normalize([0.5, 0.4, 0.3], [0.2, 0.3, 0.4]),
            tvT.RandomVerticalFlip(p=1.0),
        ]
    )
    native = T.from_torchvision(tv_transform)
    names = [type(t).__name__ for t in native.transforms]
    assert names == ["Resize", "CenterCrop", "RandomHorizontalFlip", "RandomVerticalFlip", "ToTensor", "Normalize"]
    reference = torchvision.datasets.ImageFolder(str(folder), transform=tv_transform)
    loader = fl.Loader(fl.ImageFolder(folder), batch_size=6, num_workers=2, transform=tv_transform, python_tail="error")
    seen = 0
    for images, _ in loader:
        for k in range(images.shape[0]):
            ref, _ = reference[seen]
            assert torch.allclose(images[k], ref, atol=1e-6, rtol=0), f"sample {seen}"
            seen += 1
    assert seen == len(reference)


def _assert_epoch_is_torchvisions(folder: Path, tv_transform: Any, loader: fl.Loader, what: str = "") -> None:
    """One epoch of ``loader`` (unshuffled, uint8) equals torchvision's ImageFolder with
    ``tv_transform``, sample for sample."""
    reference = torchvision.datasets.ImageFolder(str(folder), transform=tv_transform)
    seen = 0
    for images, _ in loader:
        for k in range(images.shape[0]):
            ref, _ = reference[seen]
            assert torch.equal(images[k], ref), f"{what} sample {seen}"
            seen += 1
    assert seen == len(reference)


@pytest.mark.parametrize("tv", [tvT, v2], ids=["v1", "v2"])
def test_pixel_ops_before_the_crop_run_natively_on_images_of_any_size(folder: Path, tv: Any) -> None:
    """``ColorJitter`` then ``RandomResizedCrop``: planned on the first image's size, but the
    crop makes every sample one size, so the folder's images of six sizes all batch, each
    jittered whole and then cropped as torchvision does (scale=(1, 1), ratio=(4, 4): the
    centred fallback, nothing left to chance)."""
    tv_transform = tv.Compose(
        [
            tv.ColorJitter(brightness=(1.3, 1.3)),
            tv.RandomResizedCrop(24, scale=(1.0, 1.0), ratio=(4.0, 4.0)),
            tv.PILToTensor(),
        ]
    )
    loader = fl.Loader(
        fl.ImageFolder(folder), batch_size=5, num_workers=2, transform=tv_transform, output="uint8", python_tail="error"
    )
    _assert_epoch_is_torchvisions(folder, tv_transform, loader)


@pytest.mark.parametrize("tv", [tvT, v2], ids=["v1", "v2"])
def test_resize_then_random_resized_crop_runs_natively_as_torchvision(folder: Path, tv: Any) -> None:
    """``Resize(int)`` then ``RandomResizedCrop`` (a fine-tuning order), each with its own
    interpolation. scale=(1, 1), ratio=(4, 4) leaves nothing to chance: it never fits an image
    of aspect below 4, so the centred fallback is taken."""
    tv_transform = tv.Compose(
        [
            tv.Resize(40, interpolation=tvT.InterpolationMode.BICUBIC),
            tv.RandomResizedCrop(24, scale=(1.0, 1.0), ratio=(4.0, 4.0)),
            tv.PILToTensor(),
        ]
    )
    native = T.from_torchvision(tv_transform)
    loader = fl.Loader(fl.ImageFolder(folder), batch_size=5, num_workers=2, transform=native, output="uint8")
    _assert_epoch_is_torchvisions(folder, tv_transform, loader)


@pytest.mark.parametrize("tv", [tvT, v2], ids=["v1", "v2"])
def test_a_resize_after_the_crop_runs_natively_as_torchvision(folder: Path, tv: Any) -> None:
    """``CenterCrop`` then ``Resize``, and ``RandomResizedCrop`` then ``Resize`` (each with
    its own interpolation), with the crop's draw left to nothing: bit-exact. (scale=(1, 1),
    ratio=(4, 4) never fits an image of aspect below 4, so the centred fallback is taken; on a
    square image ratio=(1, 1) fits at (0, 0) at once.)"""
    lanczos, bicubic = tvT.InterpolationMode.LANCZOS, tvT.InterpolationMode.BICUBIC
    for ops in (
        [tv.CenterCrop(200), tv.Resize(64, interpolation=lanczos)],
        [tv.RandomResizedCrop(96, scale=(1.0, 1.0), ratio=(4.0, 4.0)), tv.Resize(48, interpolation=bicubic)],
        [tv.Resize(40), tv.CenterCrop(32), tv.RandomResizedCrop(20, scale=(1.0, 1.0), ratio=(1.0, 1.0))],
    ):
        tv_transform = tv.Compose([*ops, tv.PILToTensor()])
        loader = fl.Loader(
            fl.ImageFolder(folder), batch_size=6, num_workers=2, transform=tv_transform, output="uint8", python_tail="error"
        )
        _assert_epoch_is_torchvisions(folder, tv_transform, loader, f"{ops}:")


# --- RandomPerspective ------------------------------------------------------------------------
#
# Its corners are drawn natively (same distributions as torchvision, not the same values), so a
# sample is checked against torchvision's F.perspective at the corners the sample used, which
# are read back from the output: on an image whose pixels encode their own coordinates, a
# NEAREST warp tells where each output pixel came from, a homography fitted to that gives the
# corners (integers), and torchvision's output at those corners must be ours.

PERSPECTIVE_SIZE = 48
PERSPECTIVE_FILL = [0, 0, 255]
PERSPECTIVE_START = [[0, 0], [PERSPECTIVE_SIZE - 1, 0], [PERSPECTIVE_SIZE - 1, PERSPECTIVE_SIZE - 1], [0, PERSPECTIVE_SIZE - 1]]


def _coordinate_images(n: int) -> np.ndarray:
    """``n`` copies of an image whose red is 5x its column, green 5x its row, blue 128."""
    yy, xx = np.mgrid[0:PERSPECTIVE_SIZE, 0:PERSPECTIVE_SIZE]
    one = np.stack([xx * 5, yy * 5, np.full_like(xx, 128)], -1).astype(np.uint8)
    return np.repeat(one[None], n, 0)


def _perspective_outputs(images: np.ndarray, transform: Any, seed: int) -> np.ndarray:
    dataset = fl.ImageArray(images, [0] * len(images))
    loader = fl.Loader(dataset, batch_size=16, num_workers=2, transform=transform, output="uint8", seed=seed,
                       python_tail="error")
    return torch.cat([x for x, _ in loader]).permute(0, 2, 3, 1).numpy()


def _corner_candidates(out: np.ndarray) -> List[List[List[int]]]:
    """The endpoints a NEAREST warp of the coordinate image used: a homography fitted to where
    each output pixel came from, the image's corners mapped through its inverse, then rounded
    (both neighbours of a coordinate the fit leaves ambiguous)."""
    v, u = np.nonzero(out[..., 2] == 128)
    sx, sy = out[v, u, 0] / 5 + 0.5, out[v, u, 1] / 5 + 0.5
    ox, oy, one, zero = u + 0.5, v + 0.5, np.ones(len(u)), np.zeros(len(u))
    a = np.empty((2 * len(u), 8))
    a[0::2] = np.stack([ox, oy, one, zero, zero, zero, -sx * ox, -sx * oy], 1)
    a[1::2] = np.stack([zero, zero, zero, ox, oy, one, -sy * ox, -sy * oy], 1)
    h = np.linalg.lstsq(a, np.stack([sx, sy], 1).ravel(), rcond=None)[0]
    inverse = np.linalg.inv(np.append(h, 1.0).reshape(3, 3))
    options: List[List[int]] = []
    for x, y in PERSPECTIVE_START:
        p = inverse @ np.array([x, y, 1.0])
        for value in (p[0] / p[2], p[1] / p[2]):
            near = int(round(value))
            other = int(np.floor(value)) if near > value else int(np.ceil(value))
            options.append([near, other] if abs(value - near) > 0.15 else [near])
    found = [[]]  # type: List[List[int]]
    for choices in options:
        found = [f + [c] for f in found for c in choices]
    return [[f[i : i + 2] for i in range(0, 8, 2)] for f in found]


def _recover_endpoints(out: np.ndarray, src: Image.Image) -> List[List[int]]:
    for ends in _corner_candidates(out):
        ref = F.perspective(src, PERSPECTIVE_START, ends, NEAREST, PERSPECTIVE_FILL)
        if np.array_equal(np.asarray(ref), out):
            return ends
    raise AssertionError("no corners in reach give torchvision's F.perspective of this sample")


@pytest.mark.parametrize("tv", [tvT, v2], ids=["v1", "v2"])
def test_random_perspective_is_torchvisions_at_the_corners_drawn(tv: Any) -> None:
    n, scale = 96, 0.6
    fill = PERSPECTIVE_FILL

    def compose(interpolation: Any) -> Any:
        return tv.Compose(
            [tv.RandomPerspective(distortion_scale=scale, p=1.0, interpolation=interpolation, fill=fill), tv.PILToTensor()]
        )

    nearest = _perspective_outputs(_coordinate_images(n), compose(NEAREST), seed=4)
    src = Image.fromarray(_coordinate_images(1)[0])
    ends = [_recover_endpoints(out, src) for out in nearest]
    # The same draws (they depend on the sample, not the pixels or the filter): BILINEAR on
    # textured images, against torchvision at the same corners.
    rng = np.random.default_rng(8)
    textured = rng.integers(0, 256, (n, PERSPECTIVE_SIZE, PERSPECTIVE_SIZE, 3), dtype=np.uint8)
    bilinear = _perspective_outputs(textured, compose(BILINEAR), seed=4)
    worst, differ = 0, 0
    for k in range(n):
        ref = np.asarray(F.perspective(Image.fromarray(textured[k]), PERSPECTIVE_START, ends[k], BILINEAR, fill))
        diff = np.abs(ref.astype(np.int16) - bilinear[k].astype(np.int16))
        worst, differ = max(worst, int(diff.max())), differ + int((diff > 0).sum())
    # Exact but where torch's least-squares noise (a coefficient of 1e-16 that is 0 here) moves
    # a sample sitting on a pixel centre: one level, rarely.
    assert worst <= 1, f"{worst} levels"
    assert differ <= 0.001 * bilinear.size, f"{differ} values differ"
    # BICUBIC likewise, at the same corners.
    bicubic = _perspective_outputs(textured, compose(BICUBIC), seed=4)
    worst, differ = 0, 0
    for k in range(n):
        ref = np.asarray(F.perspective(Image.fromarray(textured[k]), PERSPECTIVE_START, ends[k], BICUBIC, fill))
        diff = np.abs(ref.astype(np.int16) - bicubic[k].astype(np.int16))
        worst, differ = max(worst, int(diff.max())), differ + int((diff > 0).sum())
    assert worst <= 1, f"bicubic: {worst} levels"
    assert differ <= 0.001 * bicubic.size, f"bicubic: {differ} values differ"

    # The corners' distribution: each coordinate within int(0.6 * 24) + 1 = 15 pixels of its
    # corner, uniform there (mean offset 7, standard deviation 4.3 over 8 * 96 values).
    bound = int(scale * (PERSPECTIVE_SIZE // 2)) + 1
    last = PERSPECTIVE_SIZE - 1
    offsets = np.array(
        [[tl[0], tl[1], last - tr[0], tr[1], last - br[0], last - br[1], bl[0], last - bl[1]] for tl, tr, br, bl in ends]
    )
    assert offsets.min() == 0 and offsets.max() == bound - 1
    assert abs(offsets.mean() - (bound - 1) / 2) < 0.6, offsets.mean()


@pytest.mark.parametrize("tv", [tvT, v2], ids=["v1", "v2"])
def test_random_perspective_applies_with_probability_p(tv: Any) -> None:
    n = 256
    images = _coordinate_images(n)
    transform = tv.Compose([tv.RandomPerspective(distortion_scale=0.8, p=0.3, interpolation=NEAREST), tv.PILToTensor()])
    out = _perspective_outputs(images, transform, seed=9)
    applied = int((out != images).any(axis=(1, 2, 3)).sum())
    # Binomial(256, 0.3): mean 76.8, standard deviation 7.3.
    assert abs(applied - 0.3 * n) < 5 * 7.3, applied


@pytest.mark.parametrize("tv", [tvT, v2], ids=["v1", "v2"])
def test_random_perspective_at_scale_zero_matches_torchvision_in_a_pipeline(folder: Path, tv: Any) -> None:
    """``distortion_scale=0`` draws every corner onto itself: with NEAREST, torchvision's output
    is its input whatever its least-squares noise, and so is ours, in a whole pipeline."""
    tv_transform = tv.Compose(
        [tv.Resize(64), tv.CenterCrop(48), tv.RandomPerspective(distortion_scale=0.0, p=1.0, interpolation=NEAREST),
         tv.RandomVerticalFlip(p=1.0), tv.PILToTensor()]
    )
    reference = torchvision.datasets.ImageFolder(str(folder), transform=tv_transform)
    loader = fl.Loader(fl.ImageFolder(folder), batch_size=5, num_workers=2, transform=tv_transform, output="uint8",
                       python_tail="error")
    seen = 0
    for images, _ in loader:
        for k in range(images.shape[0]):
            assert torch.equal(images[k], reference[seen][0]), f"sample {seen}"
            seen += 1
    assert seen == len(reference)


def test_random_perspective_converts_v1_and_v2_and_refuses_by_name() -> None:
    for tv in (tvT, v2):
        got = T.from_torchvision(
            tv.Compose([tv.CenterCrop(32), tv.RandomPerspective(), tv.RandomPerspective(0.3, 1.0, NEAREST, fill=[1, 2, 3])])
        ).to_spec()
        assert got[1] == {"op": "RandomPerspective", "distortion_scale": 0.5, "p": 0.5, "interpolation": "bilinear",
                          "fill": 0.0}
        assert got[2] == {"op": "RandomPerspective", "distortion_scale": 0.3, "p": 1.0, "interpolation": "nearest",
                          "fill": [1.0, 2.0, 3.0]}
        got = T.from_torchvision([tv.CenterCrop(8), tv.RandomPerspective(interpolation=BICUBIC)]).to_spec()
        assert got[1]["interpolation"] == "bicubic"
        with pytest.raises(ValueError, match=r"RandomPerspective.*interpolation.*LANCZOS"):
            T.from_torchvision([tv.CenterCrop(8), tv.RandomPerspective(interpolation=tvT.InterpolationMode.LANCZOS)])
    assert [T.RandomPerspective().to_spec()] == T.from_torchvision(tvT.RandomPerspective()).to_spec()
    with pytest.raises(ValueError, match="distortion_scale"):
        T.RandomPerspective(distortion_scale=1.5)
    with pytest.raises(ValueError, match="distortion_scale"):
        T.from_torchvision(tvT.RandomPerspective(distortion_scale=-0.5))
    with pytest.raises(ValueError, match="p must be"):
        T.RandomPerspective(p=2)
    with pytest.raises(ValueError, match="fill"):
        T.RandomPerspective(fill=[1, 2])
    assert T.check(T.Compose([T.CenterCrop(20), T.RandomPerspective(), T.ToTensor()]))["shape"] == (3, 20, 20)


def test_random_perspective_runs_natively_not_as_a_python_tail(folder: Path) -> None:
    transform = tvT.Compose([tvT.RandomResizedCrop(32), tvT.RandomPerspective(), tvT.ToTensor()])
    split = T.split_python_tail(transform)
    assert split.tail == [] and split.spec is not None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loader = fl.Loader(fl.ImageFolder(folder), batch_size=4, num_workers=1, transform=transform)
        images, _ = next(iter(loader))
    assert images.shape[1:] == (3, 32, 32)


# --- BICUBIC on a tensor --------------------------------------------------------------------------
#
# torchvision warps a PIL image with Pillow's bicubic filter, but its tensor kernels (v1 and v2
# rotate, affine and perspective, after ToImage/PILToTensor) refuse BICUBIC. ferroloader converts
# the first and refuses the second with torchvision's own message, so such a warp stays in the
# Python tail, where torchvision raises as it would without ferroloader.

TENSOR_REFUSAL = "Interpolation mode 'bicubic' is unsupported with Tensor input"


def _bicubic_warps(tv: Any) -> List[Any]:
    return [
        tv.RandomRotation(30, interpolation=BICUBIC),
        tv.RandomAffine(10, translate=(0.1, 0.1), interpolation=BICUBIC),
        tv.RandomPerspective(p=1.0, interpolation=BICUBIC),
    ]


@pytest.mark.parametrize("tv", [tvT, v2], ids=["v1", "v2"])
def test_bicubic_warps_after_the_tensor_conversion_are_refused_as_torchvision_refuses(tv: Any) -> None:
    head = [tv.ToImage()] if tv is v2 else [tv.PILToTensor()]
    image = torch.randint(0, 256, (3, 20, 24), dtype=torch.uint8)
    for warp in _bicubic_warps(tv):
        with pytest.raises(ValueError, match=TENSOR_REFUSAL):
            warp(image)  # torchvision itself
        name = type(warp).__name__
        with pytest.raises(ValueError, match=rf"{name}.*warps an image tensor with bicubic: {TENSOR_REFUSAL}"):
            T.from_torchvision(tv.Compose([*head, tv.CenterCrop(16), warp]))
        split = T.split_python_tail(tv.Compose([*head, tv.CenterCrop(16), warp]))
        assert split.tail == [warp] and TENSOR_REFUSAL in split.reason
        # Before the conversion torchvision warps the PIL image: native.
        native = T.from_torchvision(tv.Compose([tv.CenterCrop(16), warp, *head]))
        assert native.to_spec()[1]["interpolation"] == "bicubic"
    # Nested in a random composition, too.
    nested = tv.Compose([*head, tv.CenterCrop(16), tv.RandomApply([tv.RandomRotation(5, interpolation=BICUBIC)])])
    with pytest.raises(ValueError, match=TENSOR_REFUSAL):
        T.from_torchvision(nested)


def test_random_bicubic_warps_run_natively_and_whatever_the_worker_count(folder: Path) -> None:
    transform = tvT.Compose(
        [
            tvT.RandomResizedCrop(40),
            tvT.RandomRotation(25, interpolation=BICUBIC, fill=[0, 128, 255]),
            tvT.RandomAffine(10, translate=(0.1, 0.1), scale=(0.9, 1.1), shear=5, interpolation=BICUBIC),
            tvT.RandomPerspective(interpolation=BICUBIC),
            tvT.ToTensor(),
        ]
    )
    assert T.split_python_tail(transform).tail == []

    def run(workers: int, seed: int = 5) -> torch.Tensor:
        loader = fl.Loader(fl.ImageFolder(folder), batch_size=4, num_workers=workers, transform=transform, seed=seed,
                           python_tail="error")
        return torch.cat([images.clone() for images, _ in loader])

    zero = run(0)
    assert zero.shape[1:] == (3, 40, 40)
    assert torch.equal(zero, run(2))
    assert not torch.equal(zero, run(2, seed=6))


def _expanding(tv: Any) -> List[List[Any]]:
    """``RandomRotation(expand=True)`` with fixed angles (the general matrix path, Pillow's
    quarter-turn transposes, a centre, every filter), each followed by an op that fixes the
    size: a centre crop larger and smaller than the expanded image, a resize to a pair, timm's
    crop-or-pad."""
    timm_transforms = pytest.importorskip("timm.data.transforms")
    return [
        [tv.CenterCrop(48), tv.RandomRotation((30, 30), expand=True, fill=[10, 20, 300]), tv.CenterCrop(60),
         tv.PILToTensor()],
        [tv.CenterCrop(48), tv.RandomRotation((-45, -45), interpolation=BILINEAR, expand=True, center=[10, 20.5]),
         tv.RandomRotation((90, 90), expand=True), tv.CenterCrop(40), tv.PILToTensor()],
        [tv.CenterCrop(50), tv.RandomRotation((100, 100), interpolation=BICUBIC, expand=True, fill=99),
         tv.Resize((40, 52)), tv.PILToTensor()],
        [tv.CenterCrop(40), tv.RandomRotation((-170, -170), interpolation=BILINEAR, expand=True),
         timm_transforms.CenterCropOrPad(64, padding_mode="reflect"), tv.PILToTensor()],
    ]


@pytest.mark.parametrize("case", range(4))
@pytest.mark.parametrize("tv", [tvT, v2], ids=["v1", "v2"])
def test_rotation_with_expand_matches_torchvision_on_pil_exactly(folder: Path, tv: Any, case: int) -> None:
    tv_transform = tv.Compose(_expanding(tv)[case])
    loader = fl.Loader(
        fl.ImageFolder(folder), batch_size=5, num_workers=0, transform=tv_transform, output="uint8",
        python_tail="error",
    )
    _assert_epoch_is_torchvisions(folder, tv_transform, loader)


def test_rotation_with_expand_is_worker_independent_and_refused_where_it_cannot_run(folder: Path) -> None:
    transform = T.Compose([T.CenterCrop(48), T.RandomRotation(40, expand=True, interpolation="bilinear"),
                           T.CenterCrop(50), T.ToTensor()])
    runs = [[x for x, _ in fl.Loader(fl.ImageFolder(folder), batch_size=4, num_workers=w, transform=transform,
                                     tensor_type="torch")] for w in (0, 2)]
    assert all(torch.equal(a, b) for a, b in zip(*runs))
    # Inside a random composition, with a size-checking op before the crop, or on a tensor.
    for ops in (
        [T.CenterCrop(48), T.RandomApply([T.RandomRotation(10, expand=True)]), T.CenterCrop(40), T.ToTensor()],
        [T.CenterCrop(48), T.RandomRotation(10, expand=True), T.GaussianBlur(3), T.CenterCrop(40), T.ToTensor()],
        [T.CenterCrop(48), T.ToImage(), T.RandomRotation(10, expand=True), T.CenterCrop(40), T.ToTensor()],
    ):
        with pytest.raises(ValueError, match="expand"):
            T.check(T.Compose(ops))
