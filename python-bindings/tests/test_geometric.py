"""The geometric ops (RandomVerticalFlip, RandomRotation, RandomAffine, GaussianBlur, Pad,
RandomCrop) through the whole loader against torchvision on PIL images.

Randomness is neutralised on torchvision's side by certain coins (p=1) and degenerate ranges
(``degrees=(30, 30)``, a crop as large as the padded image, which draws nothing), so the
pixels must be equal: Pillow's transform and padding are reproduced exactly. GaussianBlur is
within one level (a separable float32 convolution rounds differently from torch's 2-D one). A
random ``RandomCrop(32, padding=4)`` is checked window by window: every sample must be one of
torchvision's 81 crops of the padded image. Random draws are per sample: the same batches
whatever the worker count.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, List

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


@pytest.mark.parametrize("tv", [tvT, v2], ids=["v1", "v2"])
def test_certain_geometric_ops_match_torchvision_on_pil_exactly(folder: Path, tv: Any) -> None:
    tv_transform = tv.Compose(_certain_ops(tv))
    reference = torchvision.datasets.ImageFolder(str(folder), transform=tv_transform)
    seen = 0
    for images, _ in _uint8_loader(folder, T.from_torchvision(tv_transform)):
        assert images.shape[1:] == (3, 60, 58)
        for k in range(images.shape[0]):
            ref, _ = reference[seen]
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
    with pytest.raises(ValueError, match="expand=True"):
        T.from_torchvision(tvT.Compose([tvT.CenterCrop(8), tvT.RandomRotation(10, expand=True)]))
    with pytest.raises(ValueError, match="v2 RandomCrop"):
        T.from_torchvision(v2.RandomCrop(8, padding=1, pad_if_needed=True, padding_mode="reflect"))
    with pytest.raises(ValueError, match="interpolation"):
        T.RandomAffine(10, interpolation="bicubic")
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
