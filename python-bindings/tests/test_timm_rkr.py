"""timm's ``ResizeKeepRatio``, ``CenterCropOrPad`` and ``RandomCropOrPad`` natively: the
loader's samples against timm's own objects with the loader's draws injected (``get_params``
and ``random.choice`` patched to return them), every parameter, both crop-or-pad classes and
every padding mode, images smaller and larger than the target; the draws' distributions
against timm's own; ``create_transform``'s pipelines converting whole, the same at 0 and 3
workers; and the refusals."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple
from unittest import mock

import numpy as np
import pytest
import torch
import torchvision
import torchvision.transforms as tv
import torchvision.transforms.functional as F
from PIL import Image

import ferroloader as fl
from ferroloader import transforms as T

from conftest import epoch_samples, rgb_of

timm_data = pytest.importorskip("timm.data")
timm_transforms = pytest.importorskip("timm.data.transforms")

SEED = 11
MODES = {m.value: m for m in tv.InterpolationMode}
TARGET = (64, 80)


def run_loader(
    folder: Path, transform: T.Compose, num_workers: int = 0, batch_size: int = 6
) -> Tuple[List[np.ndarray], List[int]]:
    """Every uint8 sample of one shuffled epoch (epoch 1) and the dataset indices they came from."""
    return epoch_samples(
        folder, transform, seed=SEED, epoch=1, num_workers=num_workers, batch_size=batch_size,
        output="uint8",
    )



# ResizeKeepRatio's arguments, as timm takes them (``interpolation`` a list: set on the object).
KEEP_RATIO: Dict[str, Dict[str, Any]] = {
    "defaults": {},
    "border": {"longest": 1.0, "interpolation": "bicubic"},
    "scale": {
        "longest": 0.5,
        "random_scale_prob": 0.7,
        "random_scale_range": (0.4, 1.9),
        "interpolation": ["lanczos", "nearest", "box"],
    },
    "rkr train": {
        "interpolation": "random",
        "random_scale_prob": 0.5,
        "random_scale_range": (0.3, 1.0),
        "random_scale_area": True,
        "random_aspect_prob": 0.5,
        "random_aspect_range": (0.6, 1 / 0.6),
    },
}

# (class, fill, padding_mode); None: torchvision's CenterCrop.
CROPS: Dict[str, Optional[Tuple[str, Any, str]]] = {
    **{
        f"{cls} {mode}": (cls, (10, 200, 30) if mode == "constant" else 0, mode)
        for cls in ("CenterCropOrPad", "RandomCropOrPad")
        for mode in ("constant", "edge", "reflect", "symmetric")
    },
    "CenterCrop": None,
}


def timm_keep_ratio(kwargs: Dict[str, Any]) -> Tuple[Any, T.ResizeKeepRatio]:
    interpolation = kwargs.get("interpolation", "bilinear")
    listed = isinstance(interpolation, list)
    timm_op = timm_transforms.ResizeKeepRatio(
        TARGET, **{**kwargs, "interpolation": "bilinear" if listed else interpolation}
    )
    if listed:
        timm_op.interpolation = [MODES[name] for name in interpolation]
    return timm_op, T.ResizeKeepRatio(TARGET, **kwargs)


def timm_crop(crop: Optional[Tuple[str, Any, str]]) -> Tuple[Any, T.Transform]:
    if crop is None:
        return tv.CenterCrop(TARGET), T.CenterCrop(list(TARGET))
    cls, fill, mode = crop
    ours = (T.RandomCropOrPad if cls == "RandomCropOrPad" else T.CenterCropOrPad)(TARGET, fill, mode)
    return getattr(timm_transforms, cls)(TARGET, fill=fill, padding_mode=mode), ours


def replay(
    timm_resize: Any,
    timm_crop_op: Any,
    rgb: Image.Image,
    size: Optional[Tuple[int, int]],
    filter_name: str,
    offsets: Tuple[int, int],
) -> Image.Image:
    """timm's objects on ``rgb`` with the loader's draws injected: the resized size, the filter
    (``random.choice``) and the crop's offsets."""
    img = rgb
    if timm_resize is not None:
        chosen = MODES[filter_name]
        with mock.patch.object(timm_resize, "get_params", lambda *a, **k: list(size or ())), mock.patch.object(
            timm_transforms.random, "choice", lambda seq: chosen
        ):
            img = timm_resize(img)
    with mock.patch.object(timm_crop_op, "get_params", lambda *a, **k: offsets, create=True):
        out: Image.Image = timm_crop_op(img)
    return out


@pytest.mark.parametrize("crop", list(CROPS))
@pytest.mark.parametrize("keep", list(KEEP_RATIO))
def test_samples_equal_timms_with_the_draws_injected(folder: Path, keep: str, crop: str) -> None:
    """uint8 samples through the whole loader (then a flip), each against timm's objects with
    the loader's draws injected, and torchvision's flip: bit-exact; the crops both pad and
    crop across the fixture photos."""
    timm_resize, ours = timm_keep_ratio(KEEP_RATIO[keep])
    timm_crop_op, our_crop = timm_crop(CROPS[crop])
    transform = T.Compose([ours, our_crop, T.RandomHorizontalFlip(), T.PILToTensor()])
    ds = fl.ImageFolder(folder)
    samples, indices = run_loader(folder, transform)
    assert len(samples) == len(ds)
    random_crop = isinstance(our_crop, T.RandomCropOrPad)
    padded = cropped = 0
    for sample, index in zip(samples, indices):
        source = rgb_of(ds.samples[index][0])
        width, height = source.size
        ((h, w, filter_index, top, left, flipped),) = ours.draw_params(
            width, height, [index], seed=SEED, epoch=1, crop=our_crop if random_crop else None, flip_p=0.5
        )
        padded += int(h < TARGET[0] or w < TARGET[1])
        cropped += int(h > TARGET[0] or w > TARGET[1])
        want = replay(timm_resize, timm_crop_op, source, (int(h), int(w)), ours.filters[int(filter_index)], (int(top), int(left)))
        if flipped:
            want = F.hflip(want)
        assert np.array_equal(sample, F.pil_to_tensor(want).numpy()), f"sample {index} ({h}x{w})"
    # The border mode fits each image inside the target; the random factors go either way.
    assert padded > 0 if keep == "border" else cropped > 0
    if keep in ("rkr train", "scale"):
        assert padded > 0, (padded, cropped)


@pytest.mark.parametrize("crop", [c for c in CROPS if c != "CenterCrop"])
@pytest.mark.parametrize("placement", ["first", "stage"])
def test_crop_or_pad_alone_smaller_and_larger(folder: Path, crop: str, placement: str) -> None:
    """CenterCropOrPad and RandomCropOrPad with no resize before them: first (the geometry),
    and as a stage op (after a Grayscale), to a size some photos exceed and others fall short
    of on each axis; bit-exact with timm's given the offsets."""
    size = (250, 300)
    cls, fill, mode = CROPS[crop] or ("", 0, "")
    timm_op = getattr(timm_transforms, cls)(size, fill=fill, padding_mode=mode)
    ours = (T.RandomCropOrPad if cls == "RandomCropOrPad" else T.CenterCropOrPad)(list(size), fill, mode)
    before = [T.Grayscale(3)] if placement == "stage" else []
    transform = T.Compose([*before, ours, T.PILToTensor()])
    if placement == "stage":
        transform.transforms.insert(0, T.Resize([240, 320]))
    ds = fl.ImageFolder(folder)
    samples, indices = run_loader(folder, transform)
    for sample, index in zip(samples, indices):
        source = rgb_of(ds.samples[index][0])
        if placement == "stage":
            source = F.rgb_to_grayscale(F.resize(source, [240, 320]), 3)
        width, height = source.size
        top, left = 0, 0
        if cls == "RandomCropOrPad":
            ((_, _, _, top, left, _),) = fl._native.resize_keep_ratio_params(
                width, height, [index], seed=SEED, epoch=1, crop_size=size
            )
        with mock.patch.object(timm_op, "get_params", lambda *a, **k: (int(top), int(left)), create=True):
            want = timm_op(source)
        assert np.array_equal(sample, F.pil_to_tensor(want).numpy()), f"sample {index}"


def test_keep_ratio_draws_follow_timms_distribution() -> None:
    """Over many samples: the sizes ResizeKeepRatio draws (the scale and aspect coins, the
    uniform scale, its area form, the log-uniform aspect) against timm's ``get_params`` on
    Python's ``random``, by the share of each branch and the moments; the filter's share
    against ``random.choice``; RandomCropOrPad's offsets against its ``get_params``."""
    n = 6000
    kwargs = KEEP_RATIO["rkr train"]
    timm_op, ours = timm_keep_ratio(kwargs)
    width, height = 500, 375
    params = ours.draw_params(width, height, range(n), seed=3)
    image = Image.new("RGB", (width, height))
    random.seed(0)
    theirs = np.array(
        [
            timm_op.get_params(
                image, timm_op.size, timm_op.longest, timm_op.random_scale_prob, timm_op.random_scale_range,
                timm_op.random_scale_area, timm_op.random_aspect_prob, timm_op.random_aspect_range,
            )
            for _ in range(n)
        ]
    )
    mine = params[:, :2].astype(np.float64)
    base = timm_op.get_params(image, timm_op.size, timm_op.longest)
    # Unchanged sizes: both coins said no (1/4).
    for sizes in (mine, theirs):
        unchanged = float((sizes == base).all(axis=1).mean())
        assert abs(unchanged - 0.25) < 0.025, unchanged
    error = np.sqrt(mine.var(axis=0) / n + theirs.var(axis=0) / n)
    assert (np.abs(mine.mean(axis=0) - theirs.mean(axis=0)) < 4 * error).all()
    assert (np.abs(mine.std(axis=0) / theirs.std(axis=0) - 1) < 0.06).all()
    assert mine.min(axis=0).tolist() >= (theirs.min(axis=0) - 2).tolist()
    assert mine.max(axis=0).tolist() <= (theirs.max(axis=0) + 2).tolist()
    # The aspect alone: w / h is log-uniform over the range (sqrt each side), scale alone: the
    # sides scale together by 1 / sqrt(uniform).
    aspect_only = T.ResizeKeepRatio(TARGET, random_aspect_prob=1.0, random_aspect_range=(0.5, 2.0))
    sizes = aspect_only.draw_params(4000, 3000, range(n), seed=4)[:, :2].astype(np.float64)
    log_aspect = np.log((sizes[:, 1] / sizes[:, 0]) / (4000 / 3000))
    assert abs(log_aspect.mean()) < 0.02 and abs(log_aspect.std() - 2 * np.log(2) / np.sqrt(12)) < 0.02
    # The scale alone, not an area: both sides scale by one uniform factor, at the coin's rate.
    scale_only = T.ResizeKeepRatio([300, 400], random_scale_prob=0.3, random_scale_range=(0.5, 2.0))
    sizes = scale_only.draw_params(4000, 3000, range(n), seed=6)[:, :2].astype(np.float64)
    factor = sizes / [300, 400]
    assert np.allclose(factor[:, 0], factor[:, 1], atol=3e-3)  # each side rounded
    scaled = factor[:, 0][np.abs(factor[:, 0] - 1) > 2e-3]
    assert abs(len(scaled) / n - 0.3) < 0.025
    assert abs(scaled.mean() - 1.25) < 0.03 and abs(scaled.std() - 1.5 / np.sqrt(12)) < 0.02
    assert scaled.min() >= 0.5 - 2e-3 and scaled.max() <= 2.0 + 2e-3
    # The filter: timm's random.choice between two.
    share = float((params[:, 2] == ours.filters.index("bicubic")).mean())
    assert abs(share - 0.5) < 0.025
    # RandomCropOrPad's offsets: uniform on 0..|delta| with delta's sign, each axis.
    crop = T.RandomCropOrPad([100, 700])
    offsets = fl._native.resize_keep_ratio_params(500, 375, range(n), seed=5, crop_size=(100, 700))[:, 3:5]
    random.seed(1)
    timm_offsets = np.array([timm_transforms.RandomCropOrPad.get_params(image, crop.hw) for _ in range(n)])
    assert offsets[:, 0].min() == 0 and offsets[:, 0].max() == 275 and offsets[:, 1].max() == 0
    assert offsets[:, 1].min() == -200
    error = np.sqrt(offsets.var(axis=0) / n + timm_offsets.var(axis=0) / n)
    assert (np.abs(offsets.mean(axis=0) - timm_offsets.mean(axis=0)) < 4 * error).all()


def test_keep_ratio_sizes_equal_timms_get_params_without_random_factors() -> None:
    """With no random factor the size is a function of the image's: timm's ``get_params``
    (the blend by ``longest``, Python's half-to-even ``round``) on a grid of sizes, ties
    included (an image of 2.5x the target's side, 1x5 and 5x1 strips)."""
    sizes = [(w, h) for w in (1, 2, 5, 37, 100, 160, 161, 333, 500) for h in (1, 3, 5, 64, 120, 161, 375)]
    for target in ((64, 80), (2, 2), (10, 3)):
        for longest in (0.0, 0.3, 0.5, 1.0):
            ours = T.ResizeKeepRatio(list(target), longest=longest)
            timm_op = timm_transforms.ResizeKeepRatio(target, longest=longest)
            for w, h in sizes:
                ((rh, rw, *_),) = ours.draw_params(w, h, [0])
                want = timm_op.get_params(Image.new("RGB", (w, h)), timm_op.size, timm_op.longest)
                assert [rh, rw] == want, (target, longest, w, h)


PROBES = {
    "rkrc": dict(input_size=48, is_training=True, train_crop_mode="rkrc"),
    "rkrr": dict(input_size=48, is_training=True, train_crop_mode="rkrr"),
    "border": dict(input_size=48, is_training=False, crop_mode="border"),
    "non-square eval": dict(input_size=(3, 40, 56), is_training=False),
}


@pytest.mark.parametrize("probe", list(PROBES))
def test_create_transform_converts_whole_and_is_worker_independent(folder: Path, probe: str) -> None:
    """create_transform's rkr, border and non-square eval pipelines convert with no Python tail
    and give the same batches at 0 and 3 workers."""
    transform = timm_data.create_transform(**PROBES[probe])
    names = [type(t).__name__ for t in T.from_torchvision(transform).transforms]
    assert names[0] == "ResizeKeepRatio"
    assert names[1] in ("CenterCropOrPad", "RandomCropOrPad", "CenterCrop")
    runs = []
    for workers in (0, 3):
        dataset = torchvision.datasets.ImageFolder(str(folder), transform=transform)
        loader = fl.Loader(dataset, 5, num_workers=workers, python_tail="error", shuffle=True, seed=2)
        assert loader.python_tail == []
        runs.append([x for x, _ in loader])
    size = PROBES[probe]["input_size"]
    hw = (size, size) if isinstance(size, int) else size[1:]
    assert {tuple(x.shape[1:]) for x in runs[0]} == {(3, *hw)}
    assert all(torch.equal(a, b) for a, b in zip(*runs))


def test_eval_border_matches_timm_end_to_end(folder: Path) -> None:
    """No draws in the border eval pipeline: the loader's float samples equal timm's transform
    applied in Python, bit for bit."""
    transform = timm_data.create_transform(48, is_training=False, crop_mode="border", interpolation="bicubic")
    dataset = torchvision.datasets.ImageFolder(str(folder), transform=transform)
    loader = fl.Loader(dataset, 6, num_workers=0, python_tail="error")
    got = torch.cat([x for x, _ in loader])
    want = torch.stack([dataset[i][0] for i in range(len(dataset))])
    assert torch.equal(got, want)


def test_refusals_name_the_parameter(tmp_path: Path) -> None:
    op = "ResizeKeepRatio"
    with pytest.raises(ValueError, match=rf"{op}: longest"):
        T.ResizeKeepRatio(8, longest=1.5)
    with pytest.raises(ValueError, match=rf"{op}: random_scale_prob"):
        T.ResizeKeepRatio(8, random_scale_prob=-0.1)
    with pytest.raises(ValueError, match=rf"{op}: random_aspect_range"):
        T.ResizeKeepRatio(8, random_aspect_range=(0.0, 1.0))
    with pytest.raises(ValueError, match=rf"{op}: random_scale_range"):
        T.ResizeKeepRatio(8, random_scale_range=(2.0, 1.0))
    with pytest.raises(ValueError, match="CenterCropOrPad: padding_mode"):
        T.CenterCropOrPad(8, padding_mode="wrap")
    T.check(T.Compose([T.ResizeKeepRatio(8), T.RandomCropOrPad(8), T.ToTensor()]))
    with pytest.raises(ValueError, match="ResizeKeepRatio's size follows each image"):
        T.check(T.Compose([T.ResizeKeepRatio(8), T.ToTensor()]))
    # A subclass that changes what it computes has no equivalent: it goes to the tail.
    class Mine(timm_transforms.RandomCropOrPad):  # type: ignore[misc]
        def forward(self, img: Any) -> Any:
            return img

    Mine.__module__ = timm_transforms.__name__
    Mine.__name__ = "RandomCropOrPad"
    with pytest.raises(ValueError, match="forward is not timm's RandomCropOrPad's"):
        T.from_torchvision([timm_transforms.ResizeKeepRatio(8), Mine(8), tv.ToTensor()])


def test_thin_and_tiny_images_are_samples_errors_not_panics(tmp_path: Path) -> None:
    """A 1-pixel-wide image: ResizeKeepRatio(longest=1) rounds its width to 0 (Pillow refuses
    to resize to it: timm fails too), an error naming the op; longest=0 resizes it far taller,
    then the crop fixes the size. 1x1 and 2x1 images pad in every mode."""
    (tmp_path / "a").mkdir()
    Image.new("RGB", (1, 200), (9, 99, 199)).save(tmp_path / "a" / "thin.png")
    Image.new("RGB", (1, 1), (5, 6, 7)).save(tmp_path / "a" / "dot.png")
    Image.new("RGB", (2, 1), (50, 60, 70)).save(tmp_path / "a" / "pair.png")
    thin = fl.ImageFolder(tmp_path)
    for mode in ("constant", "edge", "reflect", "symmetric"):
        ok = T.Compose([T.ResizeKeepRatio(TARGET), T.RandomCropOrPad(list(TARGET), padding_mode=mode), T.PILToTensor()])
        samples, _ = run_loader(tmp_path, ok, batch_size=1)
        assert len(samples) == len(thin) and all(s.shape == (3, *TARGET) for s in samples)
        tiny = T.Compose([T.CenterCropOrPad([5, 7], padding_mode=mode), T.PILToTensor()])
        samples, _ = run_loader(tmp_path, tiny, batch_size=1)
        assert all(s.shape == (3, 5, 7) for s in samples)
    border = T.Compose([T.ResizeKeepRatio(TARGET, longest=1.0), T.CenterCropOrPad(list(TARGET)), T.PILToTensor()])
    with pytest.raises(Exception, match="ResizeKeepRatio: the 1x200 image resizes to 0x64"):
        run_loader(tmp_path, border, batch_size=1)
