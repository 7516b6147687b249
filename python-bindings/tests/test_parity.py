"""ferroloader's pixels against torchvision's, and its random crops against torchvision's.

Parity needs the same crop on both sides. torch's generator cannot be reproduced, so crops are
injected: ``_native.resized_crop`` runs the loader's own decode and fused kernel on given bytes
with a given crop; the loader's crops for a sample are drawn by ``draw_params`` (the loader's
generator, tested to be what the loader used); and deterministic pipelines (Resize + CenterCrop,
a full-image RandomResizedCrop) are compared through the whole loader.
"""

from __future__ import annotations

from pathlib import Path
from typing import List

import numpy as np
import pytest
import torch
import torchvision
import torchvision.transforms as tvT
import torchvision.transforms.functional as F
import torchvision.transforms.v2 as v2
from PIL import Image

import ferroloader as fl
from ferroloader import _native
from ferroloader import transforms as T

from conftest import IMAGENET_MEAN, IMAGENET_STD

LEVEL = 1.0 / 255.0
EPS = 1e-6


def torchvision_crop(path: Path, top: int, left: int, h: int, w: int, size: List[int], flip: bool = False) -> torch.Tensor:
    """torchvision's training path with the crop injected: PIL open -> convert RGB ->
    resized_crop (antialiased bilinear) -> [hflip] -> to_tensor."""
    with Image.open(path) as img:
        rgb = img.convert("RGB")
    out = F.resized_crop(rgb, top, left, h, w, size, antialias=True)
    if flip:
        out = F.hflip(out)
    return F.to_tensor(out)


def test_injected_crops_match_torchvision_within_one_level(folder: Path) -> None:
    ds = fl.ImageFolder(folder)
    rng = np.random.default_rng(0)
    worst = 0.0
    checked = 0
    for path, _ in ds.samples:
        data = Path(path).read_bytes()
        with Image.open(path) as img:
            width, height = img.size
        for _ in range(3):
            h = int(rng.integers(1, height + 1))
            w = int(rng.integers(1, width + 1))
            top = int(rng.integers(0, height - h + 1))
            left = int(rng.integers(0, width - w + 1))
            size = [int(rng.integers(16, 96)), int(rng.integers(16, 96))]
            flip = bool(rng.integers(0, 2))
            ours = _native.resized_crop(data, top, left, h, w, tuple(size), flip=flip)
            ref = torchvision_crop(Path(path), top, left, h, w, size, flip).numpy()
            assert ours.shape == ref.shape == (3, size[0], size[1])
            assert ours.dtype == np.float32
            worst = max(worst, float(np.abs(ours - ref).max()))
            checked += 1
    assert checked == 3 * len(ds)
    assert worst <= LEVEL + EPS, f"max difference {worst * 255:.3f} levels"


def test_injected_crop_normalized_and_uint8(folder: Path) -> None:
    path = fl.ImageFolder(folder).samples[2][0]
    data = Path(path).read_bytes()
    top, left, h, w, size = 17, 31, 200, 150, (64, 48)
    ref = torchvision_crop(Path(path), top, left, h, w, list(size))
    normed = _native.resized_crop(data, top, left, h, w, size, mean=IMAGENET_MEAN, std=IMAGENET_STD)
    ref_normed = F.normalize(ref, IMAGENET_MEAN, IMAGENET_STD).numpy()
    assert np.abs(normed - ref_normed).max() <= LEVEL / min(IMAGENET_STD) + EPS
    pixels = _native.resized_crop(data, top, left, h, w, size, output="uint8")
    with Image.open(path) as img:
        ref_u8 = F.pil_to_tensor(F.resized_crop(img.convert("RGB"), top, left, h, w, list(size))).numpy()
    assert pixels.dtype == np.uint8
    assert np.abs(pixels.astype(int) - ref_u8.astype(int)).max() <= 1
    # The region-of-interest decode is exact: same output with the whole image decoded.
    full = _native.resized_crop(data, top, left, h, w, size, roi=False)
    assert np.array_equal(full, _native.resized_crop(data, top, left, h, w, size))


def test_loader_uses_the_crops_draw_params_reports(folder: Path) -> None:
    """The loader's random crops and flips are exactly the drawn ones, so injecting them into
    the single-sample path reproduces the loader's output; with the test above this ties the
    loader to torchvision."""
    rrc = T.RandomResizedCrop(48)
    loader = fl.Loader(
        fl.ImageFolder(folder),
        batch_size=5,
        shuffle=True,
        seed=11,
        num_workers=2,
        transform=T.Compose([rrc, T.RandomHorizontalFlip(), T.ToTensor()]),
        tensor_type="numpy",
    )
    loader.set_epoch(3)
    ds = loader.dataset
    it = iter(loader)
    flips = 0
    for images, _labels in it:
        assert it.indices is not None
        for slot, index in enumerate(it.indices.tolist()):
            path = ds.samples[index][0]
            with Image.open(path) as img:
                width, height = img.size
            (top, left, h, w, flipped), = rrc.draw_params(width, height, [index], seed=11, epoch=3, flip_p=0.5)
            flips += int(flipped)
            data = Path(path).read_bytes()
            expected = _native.resized_crop(data, int(top), int(left), int(h), int(w), (48, 48), flip=bool(flipped))
            assert np.array_equal(images[slot], expected), f"sample {index}"
    assert 0 < flips < len(ds)


def test_eval_pipeline_matches_torchvision(folder: Path) -> None:
    tv_transform = tvT.Compose(
        [tvT.Resize(256), tvT.CenterCrop(224), tvT.ToTensor(), tvT.Normalize(IMAGENET_MEAN, IMAGENET_STD)]
    )
    reference = torchvision.datasets.ImageFolder(str(folder), transform=tv_transform)
    loader = fl.Loader(
        fl.ImageFolder(folder),
        batch_size=7,
        num_workers=2,
        transform=T.from_torchvision(tv_transform),
    )
    worst = 0.0
    seen = 0
    for images, labels in loader:
        for k in range(images.shape[0]):
            ref, target = reference[seen]
            assert int(labels[k]) == target
            worst = max(worst, float((images[k] - ref).abs().max()))
            seen += 1
    assert seen == len(reference)
    assert worst <= LEVEL / min(IMAGENET_STD) + EPS, f"max difference {worst:.6f}"


def test_full_image_random_resized_crop_matches_torchvision_resize(tmp_path: Path) -> None:
    """A RandomResizedCrop that can only pick the whole image (scale 1, ratio = the image's)
    through the whole loader, against torchvision's Resize((h, w)) of the whole image."""
    from conftest import make_folder

    make_folder(tmp_path, ((300, 200), (300, 200)), seed=5)
    ds = fl.ImageFolder(tmp_path)
    transform = T.Compose([T.RandomResizedCrop((72, 100), scale=(1.0, 1.0), ratio=(1.5, 1.5)), T.ToTensor()])
    loader = fl.Loader(ds, batch_size=4, num_workers=1, transform=transform)
    batches = list(loader)
    images = torch.cat([b[0] for b in batches])
    for i, (path, _) in enumerate(ds.samples):
        with Image.open(path) as img:
            ref = F.to_tensor(F.resize(img.convert("RGB"), [72, 100], antialias=True))
        assert float((images[i] - ref).abs().max()) <= LEVEL + EPS


def test_random_crop_statistics_match_torchvision() -> None:
    """Area fraction and aspect ratio of many drawn crops against torchvision's get_params."""
    width, height, n = 500, 375, 4000
    scale, ratio = (0.08, 1.0), (3.0 / 4.0, 4.0 / 3.0)
    ours = T.RandomResizedCrop(224, scale, ratio).draw_params(width, height, range(n), seed=123)
    torch.manual_seed(0)
    img = torch.empty(3, height, width)
    theirs = np.array([tvT.RandomResizedCrop.get_params(img, list(scale), list(ratio)) for _ in range(n)])

    def stats(params: np.ndarray) -> np.ndarray:
        top, left, h, w = (params[:, k].astype(np.float64) for k in range(4))
        assert (top >= 0).all() and (left >= 0).all()
        assert (top + h <= height).all() and (left + w <= width).all()
        area = h * w / (width * height)
        log_ratio = np.log(w / h)
        q = [0.1, 0.25, 0.5, 0.75, 0.9]
        return np.concatenate([[area.mean(), log_ratio.mean()], np.quantile(area, q), np.quantile(log_ratio, q)])

    a, b = stats(ours[:, :4]), stats(theirs)
    # Sampling error of a mean/quantile over 4000 draws is ~0.01 (area) and ~0.005 (log ratio).
    assert np.abs(a - b).max() < 0.04, f"ours {np.round(a, 3)} vs torchvision {np.round(b, 3)}"
    # Top-left corners are uniform over the free range, as torch.randint draws them.
    free_rows = height - ours[:, 2]
    rel = ours[:, 0][free_rows > 0] / free_rows[free_rows > 0]
    assert abs(rel.mean() - 0.5) < 0.03


def test_draw_params_validates() -> None:
    with pytest.raises(ValueError, match="scale"):
        T.RandomResizedCrop(224, scale=(1.0, 0.5))
    with pytest.raises(ValueError, match="flip_p"):
        _native.random_resized_crop_params(10, 10, [0], flip_p=2.0)


_M = tvT.InterpolationMode
MODES = [_M.NEAREST, _M.BICUBIC, _M.BILINEAR, _M.LANCZOS, _M.BOX, _M.HAMMING]


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.value)
def test_injected_crops_match_torchvision_per_interpolation(folder: Path, mode: tvT.InterpolationMode) -> None:
    """RandomResizedCrop's resize with each mode, crops injected (downscales, upscales, odd
    sizes, flips), against torchvision v1 on the PIL image: F.resized_crop then F.hflip."""
    ds = fl.ImageFolder(folder)
    rng = np.random.default_rng(1)
    differing = 0
    for path, _ in ds.samples:
        data = Path(path).read_bytes()
        with Image.open(path) as img:
            rgb = img.convert("RGB")
        width, height = rgb.size
        for _ in range(3):
            h = int(rng.integers(1, height + 1))
            w = int(rng.integers(1, width + 1))
            top = int(rng.integers(0, height - h + 1))
            left = int(rng.integers(0, width - w + 1))
            size = [int(rng.integers(1, 160)), int(rng.integers(1, 160))]
            flip = bool(rng.integers(0, 2))
            ours = _native.resized_crop(
                data, top, left, h, w, tuple(size), flip=flip, output="uint8", interpolation=mode.value
            )
            ref_img = F.resized_crop(rgb, top, left, h, w, size, interpolation=mode, antialias=True)
            if flip:
                ref_img = F.hflip(ref_img)
            ref = F.pil_to_tensor(ref_img).numpy()
            assert ours.shape == ref.shape == (3, size[0], size[1])
            differing += int(not np.array_equal(ours, ref))
    # The decode and the resize are both Pillow's arithmetic: every crop is exact.
    assert differing == 0, f"{differing} crops differ from torchvision ({mode.value})"


@pytest.mark.parametrize("mode", [m for m in MODES if m != _M.BILINEAR], ids=lambda m: m.value)
def test_eval_pipeline_per_interpolation_matches_torchvision(folder: Path, mode: tvT.InterpolationMode) -> None:
    """Resize(int, mode) + CenterCrop through the whole loader (converted from torchvision),
    uint8 and normalized float, against torchvision's ImageFolder on PIL images."""
    for tail, exact in (([tvT.PILToTensor()], True), ([tvT.ToTensor(), tvT.Normalize(IMAGENET_MEAN, IMAGENET_STD)], False)):
        tv_transform = tvT.Compose([tvT.Resize(80, interpolation=mode), tvT.CenterCrop(64), *tail])
        ours = T.from_torchvision(tv_transform)
        assert ours.transforms[0].interpolation == mode.value  # type: ignore[attr-defined]
        reference = torchvision.datasets.ImageFolder(str(folder), transform=tv_transform)
        output = "uint8" if exact else "float32"
        loader = fl.Loader(fl.ImageFolder(folder), batch_size=5, num_workers=2, transform=ours, output=output)
        seen, worst = 0, 0.0
        for images, _ in loader:
            for k in range(images.shape[0]):
                ref, _target = reference[seen]
                if exact:
                    assert torch.equal(images[k], ref), f"sample {seen} ({mode.value})"
                else:
                    worst = max(worst, float((images[k] - ref).abs().max()))
                seen += 1
        assert seen == len(reference)
        # to_tensor + normalize: torch's float32 arithmetic, the same operations (exact).
        assert worst <= EPS, f"{mode.value}: max difference {worst:.6f}"


def _presets(crop: int, resize: int) -> dict:
    """torchvision's references/classification/presets.py, without auto-augment or erasing:
    ClassificationPresetTrain/Eval in their v1 (PIL) and v2 (tensor) forms."""
    mean, std = IMAGENET_MEAN, IMAGENET_STD
    bilinear = tvT.InterpolationMode.BILINEAR
    return {
        "train_v1": tvT.Compose([
            tvT.RandomResizedCrop(crop, interpolation=bilinear, antialias=True),
            tvT.RandomHorizontalFlip(0.5),
            tvT.PILToTensor(),
            tvT.ConvertImageDtype(torch.float),
            tvT.Normalize(mean, std),
        ]),
        "train_v2": v2.Compose([
            v2.ToImage(),
            v2.RandomResizedCrop(crop, interpolation=bilinear, antialias=True),
            v2.RandomHorizontalFlip(0.5),
            v2.ToDtype(torch.float, scale=True),
            v2.Normalize(mean, std),
            v2.ToPureTensor(),
        ]),
        "eval_v1": tvT.Compose([
            tvT.Resize(resize, interpolation=bilinear, antialias=True),
            tvT.CenterCrop(crop),
            tvT.PILToTensor(),
            tvT.ConvertImageDtype(torch.float),
            tvT.Normalize(mean, std),
        ]),
        "eval_v2": v2.Compose([
            v2.ToImage(),
            v2.Resize(resize, interpolation=bilinear, antialias=True),
            v2.CenterCrop(crop),
            v2.ToDtype(torch.float, scale=True),
            v2.Normalize(mean, std),
            v2.ToPureTensor(),
        ]),
    }


@pytest.mark.parametrize("resize", [232, 256])
def test_reference_presets_convert_in_both_forms_and_match_torchvision(folder: Path, resize: int) -> None:
    presets = _presets(96, resize)
    train = [T.from_torchvision(presets[k]) for k in ("train_v1", "train_v2")]
    # The same ops, but for the conversion's arithmetic (v1 divides by 255, v2's ToDtype
    # multiplies by float32(1 / 255)) and v2's resize of the tensor (the ToImage marker).
    for form, conversion, head in zip(train, (T.ToTensor(), T.ToDtype()), ([], [T.ToImage(api="v2")])):
        assert form == T.Compose(
            [*head, T.RandomResizedCrop([96, 96]), T.RandomHorizontalFlip(0.5), conversion,
             T.Normalize(IMAGENET_MEAN, IMAGENET_STD)]
        )
    evals = [T.from_torchvision(presets[k]) for k in ("eval_v1", "eval_v2")]
    assert evals[1].transforms[0] == T.ToImage(api="v2")
    assert evals[0].transforms[:-2] == evals[1].transforms[1:-2]
    assert evals[0].transforms[-1] == evals[1].transforms[-1]
    assert [type(t) for t in (evals[0].transforms[-2], evals[1].transforms[-2])] == [T.ToTensor, T.ToDtype]
    for form, limit_levels in (("eval_v1", 1), ("eval_v2", 0)):
        reference = torchvision.datasets.ImageFolder(str(folder), transform=presets[form])
        loader = fl.Loader(reference, batch_size=6, num_workers=2)
        worst = 0.0
        for b, (images, _) in enumerate(loader):
            for k in range(images.shape[0]):
                worst = max(worst, float((images[k] - reference[6 * b + k][0]).abs().max()))
        # v1 is Pillow's arithmetic, v2 torch's uint8 tensor resize: both ours, v2 to the bit.
        assert worst <= limit_levels * LEVEL / min(IMAGENET_STD) + EPS, f"{form}: {worst:.6f}"
    # The uint8 eval form: PILToTensor alone.
    u8 = T.from_torchvision(v2.Compose([v2.ToImage(), v2.Resize(resize), v2.CenterCrop(96), v2.ToDtype(torch.uint8)]))
    assert u8 == T.Compose([T.ToImage(api="v2"), T.Resize(resize), T.CenterCrop([96, 96]), T.PILToTensor()])


def test_refused_dtypes_name_the_dtype() -> None:
    with pytest.raises(ValueError, match=r"ToDtype\(dtype=torch.float16, scale=True\).*dtype=torch.float16"):
        T.from_torchvision(v2.Compose([v2.ToImage(), v2.CenterCrop(8), v2.ToDtype(torch.float16, scale=True)]))
    with pytest.raises(ValueError, match=r"ToDtype\(dtype=torch.float32, scale=False\)"):
        T.from_torchvision(v2.Compose([v2.CenterCrop(8), v2.ToImage(), v2.ToDtype(torch.float32)]))
    with pytest.raises(ValueError, match="normalizes a uint8 image tensor"):
        T.from_torchvision(v2.Compose([v2.ToImage(), v2.CenterCrop(8), v2.Normalize([0.5] * 3, [0.5] * 3)]))


@pytest.mark.parametrize("gray", [False, True], ids=["colour", "grayscale"])
def test_pixel_ops_match_torchvision_on_pil_exactly(folder: Path, gray: bool) -> None:
    """The pixel-op stage through the whole loader against torchvision v1 on PIL images, with
    every op certain (p=1) or with a degenerate range, so no draw decides anything: Pillow's
    integer arithmetic, so the uint8 pixels are equal, not within a level."""
    ops = [
        tvT.Resize(64),
        tvT.CenterCrop(48),
        *([tvT.Grayscale(3)] if gray else []),
        tvT.ColorJitter(brightness=(1.3, 1.3)),
        tvT.RandomAutocontrast(p=1.0),
        tvT.RandomSolarize(100, p=1.0),
        tvT.RandomPosterize(3, p=1.0),
        tvT.RandomAdjustSharpness(2.0, p=1.0),
        tvT.RandomEqualize(p=1.0),
        tvT.RandomInvert(p=1.0),
        tvT.RandomGrayscale(p=0.0),
        tvT.PILToTensor(),
    ]
    tv_transform = tvT.Compose(ops)
    reference = torchvision.datasets.ImageFolder(str(folder), transform=tv_transform)
    loader = fl.Loader(
        fl.ImageFolder(folder),
        batch_size=5,
        num_workers=2,
        transform=T.from_torchvision(tv_transform),
        output="uint8",
    )
    seen = 0
    for images, _ in loader:
        for k in range(images.shape[0]):
            ref, _ = reference[seen]
            diff = (images[k].to(torch.int16) - ref.to(torch.int16)).abs().max()
            assert int(diff) == 0, f"sample {seen}: {int(diff)} levels"
            seen += 1
    assert seen == len(reference)


def test_random_pixel_ops_are_identical_whatever_the_worker_count(folder: Path) -> None:
    """Per-sample draws: the same batches with one worker or two, pixel ops at p=0.5 included,
    and the draws do decide (some samples differ from the pipeline without the ops)."""
    ops = [
        T.RandomResizedCrop(40),
        T.RandomHorizontalFlip(),
        T.ColorJitter(0.4, 0.4, 0.4, 0.1),
        T.RandomSolarize(128),
        T.RandomHorizontalFlip(),
        T.RandomInvert(),
        T.ToTensor(),
    ]

    def run(transform: T.Compose, workers: int) -> torch.Tensor:
        loader = fl.Loader(fl.ImageFolder(folder), batch_size=3, num_workers=workers, transform=transform, seed=5)
        return torch.cat([images.clone() for images, _ in loader])

    one = run(T.Compose(ops), 1)
    assert torch.equal(one, run(T.Compose(ops), 2))
    plain = run(T.Compose([ops[0], ops[1], ops[-1]]), 1)
    assert not torch.equal(one, plain)
