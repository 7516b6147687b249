"""Shared fixtures: small image folders of real JPEGs (and a PNG, a grayscale JPEG) made with
Pillow, so the tests need no external data."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Tuple

import numpy as np
import pytest
from PIL import Image

CLASSES = ("ant", "bee", "cat")
# (width, height) of the images of each class, in file-name order: odd sizes, both
# orientations, one smaller than the usual 224 crop.
SIZES: Tuple[Tuple[int, int], ...] = (
    (320, 240),
    (241, 333),
    (500, 375),
    (160, 120),
    (300, 301),
    (407, 229),
)


def natural_image(rng: np.random.Generator, width: int, height: int) -> np.ndarray:
    """Smooth gradients, a few shapes and some noise: resizes and JPEG behave as on photos."""
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    fx, fy = rng.uniform(0.01, 0.05, size=2)
    base = np.stack(
        [
            127 + 100 * np.sin(x * fx + rng.uniform(0, 6)),
            127 + 100 * np.cos(y * fy + rng.uniform(0, 6)),
            127 + 100 * np.sin((x + y) * (fx + fy) / 2),
        ],
        axis=-1,
    )
    for _ in range(4):
        cx, cy = rng.uniform(0, width), rng.uniform(0, height)
        r = rng.uniform(5, min(width, height) / 3)
        mask = (x - cx) ** 2 + (y - cy) ** 2 < r * r
        base[mask] = rng.uniform(0, 255, size=3)
    base += rng.normal(0, 12, size=base.shape)
    return np.clip(base, 0, 255).astype(np.uint8)


def make_folder(root: Path, sizes: Tuple[Tuple[int, int], ...], seed: int) -> List[Path]:
    rng = np.random.default_rng(seed)
    files = []
    for c, name in enumerate(CLASSES):
        (root / name).mkdir(parents=True, exist_ok=True)
        for i, (w, h) in enumerate(sizes):
            pixels = natural_image(rng, w, h)
            path = root / name / f"img_{i:02d}.jpg"
            if c == 1 and i == 2:
                # Grayscale JPEG: converted to RGB as Pillow's convert("RGB") does.
                Image.fromarray(pixels[..., 0]).save(path, quality=90)
            elif c == 2 and i == 3:
                path = path.with_suffix(".png")
                Image.fromarray(pixels).save(path)
            else:
                Image.fromarray(pixels).save(path, quality=85 + i, subsampling=i % 3)
            files.append(path)
    return files


@pytest.fixture(scope="session")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """3 classes x 6 images (18 samples) of assorted sizes."""
    root = tmp_path_factory.mktemp("folder")
    make_folder(root, SIZES, seed=1)
    return root


@pytest.fixture(scope="session")
def big_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One class of two large JPEGs: slow enough per sample to test waiting."""
    root = tmp_path_factory.mktemp("big")
    (root / "only").mkdir()
    rng = np.random.default_rng(7)
    for i in range(2):
        Image.fromarray(natural_image(rng, 2400, 1800)).save(root / "only" / f"{i}.jpg", quality=92)
    return root


@pytest.fixture()
def corrupt_folder(tmp_path: Path) -> Iterator[Path]:
    """2 classes; one JPEG truncated to half, one file that is not an image at all."""
    rng = np.random.default_rng(3)
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        for i in range(3):
            Image.fromarray(natural_image(rng, 96, 80)).save(tmp_path / name / f"{i}.jpg")
    data = (tmp_path / "a" / "1.jpg").read_bytes()
    (tmp_path / "a" / "1.jpg").write_bytes(data[: len(data) // 2])
    (tmp_path / "b" / "2.jpg").write_bytes(b"<html>not found</html>")
    yield tmp_path


IMAGENET_MEAN = [0.485, 0.456, 0.406]
IMAGENET_STD = [0.229, 0.224, 0.225]


def oriented_photos(folder: Path) -> List[str]:
    """``1.jpg`` ... ``8.jpg`` in ``folder``: noise photos of 50 x (30 + k) pixels whose EXIF
    orientation is k (a rotated image's shape shows it), their names."""
    rng = np.random.default_rng(5)
    for k in range(1, 9):
        exif = Image.Exif()
        exif[0x0112] = k
        pixels = (rng.random((30 + k, 50, 3)) * 255).astype(np.uint8)
        Image.fromarray(pixels).save(folder / f"{k}.jpg", quality=90, exif=exif.tobytes())
    return [f"{k}.jpg" for k in range(1, 9)]


def labelled_by_index(folder: Path, count: int) -> List[Tuple[str, int]]:
    """The folder's first ``count`` JPEGs (sorted by path), each labelled with its own index."""
    paths = sorted(str(p) for p in folder.rglob("*.jpg"))[:count]
    assert len(paths) == count
    return [(p, i) for i, p in enumerate(paths)]


def epoch_samples(
    folder: Path,
    transform: Any,
    *,
    seed: int,
    epoch: int,
    num_workers: int,
    batch_size: int,
    output: str,
) -> Tuple[List[np.ndarray], List[int]]:
    """Every sample (numpy) of one shuffled epoch of ``folder`` and the dataset indices they
    came from, in delivery order."""
    import ferroloader as fl

    loader = fl.Loader(
        fl.ImageFolder(folder),
        batch_size=batch_size,
        shuffle=True,
        seed=seed,
        num_workers=num_workers,
        transform=transform,
        tensor_type="numpy",
        output=output,
    )
    loader.set_epoch(epoch)
    samples: List[np.ndarray] = []
    indices: List[int] = []
    it = iter(loader)
    for images, _labels in it:
        assert it.indices is not None
        samples.extend(images)
        indices.extend(it.indices.tolist())
    return samples, indices


def rgb_of(path: str) -> Image.Image:
    """The file as torchvision's loader opens it."""
    with Image.open(path) as img:
        return img.convert("RGB")


def start_method() -> str:
    """How the multi-process tests start their ranks: forked (a spawned rank spends seconds
    importing torch again), unless an earlier test in this process initialized CUDA (on a GPU
    machine), which a forked child cannot use and which Lightning refuses to fork after."""
    import torch

    return "spawn" if torch.cuda.is_initialized() else "fork"


def ddp_strategy() -> str:
    """Lightning's DDP strategy of :func:`start_method`."""
    return f"ddp_{start_method()}"


def run_ranks(fn: Callable[..., None], args: Tuple[Any, ...], out: Path, world: int = 2) -> List[Dict[str, Any]]:
    """Runs ``fn(rank, *args)`` in ``world`` processes started by :func:`start_method` and
    returns what each wrote to ``out / f"rank{rank}.json"``."""
    import json
    import warnings

    import torch.multiprocessing as mp

    with warnings.catch_warnings():
        # Forked: Python 3.12 warns that the parent has threads (torch's, any loader's), which
        # the children do not use: each makes its own loaders.
        warnings.simplefilter("ignore", DeprecationWarning)
        mp.start_processes(  # type: ignore[attr-defined,no-untyped-call]
            _run_and_exit, args=(fn, *args), nprocs=world, start_method=start_method()
        )
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(world)]


def _run_and_exit(rank: int, fn: Callable[..., None], *args: Any) -> None:
    """``fn(rank, *args)``, then the rank leaves as a forked one does (``os._exit``): a spawned
    rank exiting normally runs torch's C++ static destructors, which now and then abort on a
    thread still joinable ("terminate called without an active exception", SIGABRT). An
    exception from ``fn`` propagates, to be reported as the rank's failure."""
    import os
    import sys

    fn(rank, *args)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
