"""Hostile sizes and names: a clear exception instead of an abort, every row and class kept,
paths that reach Python exactly as the OS names them."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import torchvision
from PIL import Image

import ferroloader as fl
from ferroloader import transforms as T

from conftest import natural_image

import numpy as np


def small() -> T.Compose:
    return T.Compose([T.Resize(16), T.CenterCrop(16), T.ToTensor()])


@pytest.mark.parametrize("batch_size", [50_000, 10**9, 2**40])
def test_batch_sizes_beyond_the_dataset_give_one_batch_of_everything(folder: Path, batch_size: int) -> None:
    loader = fl.Loader(fl.ImageFolder(folder), batch_size=batch_size, num_workers=2, transform=small())
    batches = [y for _, y in loader]
    assert len(loader) == 1 and len(batches) == 1 and len(batches[0]) == 18


def test_memory_no_machine_has_is_a_memory_error_naming_the_argument(folder: Path) -> None:
    # 13000x13000 is under the pixel limit: 2 GB per float32 sample, 2 TB for a batch of 1000
    # (the listing need not exist: nothing is read before the first batch).
    huge = T.Compose([T.Resize([13_000, 13_000]), T.ToTensor()])
    listing = [(str(folder / "missing.jpg"), 0)] * 1000
    with pytest.raises(MemoryError, match=r"^batch_size: cannot allocate \d+ bytes for a batch buffer of 1000 samples"):
        fl.Loader(listing, batch_size=1000, transform=huge)
    tall = T.Compose([T.Resize([8192, 8192]), T.ToTensor()])
    with pytest.raises(MemoryError, match=r"^prefetch_batches: cannot allocate"):
        fl.Loader(fl.ImageFolder(folder), batch_size=4, prefetch_batches=1000, transform=tall)


def _non_utf8_folder(root: Path) -> Path:
    rng = np.random.default_rng(0)
    broot = os.fsencode(root)
    for cls in (b"cl\xe9", b"cl\xea", b"plain"):
        os.makedirs(os.path.join(broot, cls))
        for name in (b"a.jpg", b"b\xff.jpg"):
            Image.fromarray(natural_image(rng, 40, 30)).save(os.fsdecode(os.path.join(broot, cls, name)))
    bad = os.path.join(broot, b"cl\xea", b"z\xfe.jpg")
    with open(bad, "wb") as f:
        f.write(b"\xff\xd8\xff not really a jpeg")
    return root


def test_names_that_are_not_utf8_stay_distinct_and_exact(tmp_path: Path) -> None:
    root = _non_utf8_folder(tmp_path / "data")
    ours = fl.ImageFolder(root)
    theirs = torchvision.datasets.ImageFolder(str(root))
    assert ours.classes == theirs.classes == ["cl\udce9", "cl\udcea", "plain"]
    assert ours.class_to_idx == theirs.class_to_idx and len(ours.class_to_idx) == 3
    assert ours.samples == theirs.samples
    assert all(os.path.exists(p) for p, _ in ours.samples)
    loader = fl.Loader(ours, batch_size=4, num_workers=2, transform=small())
    with pytest.raises(fl.DecodeError) as info:
        list(loader)
    assert info.value.path == os.fsdecode(os.path.join(os.fsencode(root), b"cl\xea", b"z\xfe.jpg"))
    assert os.path.exists(info.value.path)
    assert info.value.path in str(info.value)
    skipping = fl.Loader(ours, batch_size=4, num_workers=2, on_error="skip", transform=small())
    it = iter(skipping)
    assert sum(len(y) for _, y in it) == 6
    [(index, path, why)] = it.skipped
    assert path == info.value.path and os.path.exists(path) and path in why


def test_a_missing_non_utf8_file_names_itself_exactly(tmp_path: Path) -> None:
    root = _non_utf8_folder(tmp_path / "data")
    gone = os.fsdecode(os.path.join(os.fsencode(root), b"cl\xe9", b"b\xff.jpg"))
    listing = fl.Loader([(gone, 0)], batch_size=1, num_workers=1, transform=small())
    os.remove(gone)
    with pytest.raises(FileNotFoundError) as info:
        list(listing)
    assert info.value.filename == gone
    empty = tmp_path / "empty"
    shutil.copytree(root, empty)
    for name in os.listdir(os.fsencode(empty / "plain")):
        os.remove(os.path.join(os.fsencode(empty / "plain"), name))
    os.makedirs(os.path.join(os.fsencode(empty), b"nothing\xe9"))
    with pytest.raises(FileNotFoundError, match="classes nothing\udce9, plain"):
        fl.ImageFolder(empty)


def test_an_op_that_does_not_fit_the_image_is_a_value_error_naming_the_file(folder: Path) -> None:
    too_big = T.Compose([T.RandomCrop(4000), T.ToTensor()])  # torchvision raises too
    loader = fl.Loader(fl.ImageFolder(folder), batch_size=2, num_workers=1, transform=too_big)
    with pytest.raises(ValueError, match=r"img_00\.jpg \(sample 0\): .* failed: ") as info:
        list(loader)
    assert str(folder) in str(info.value)
