"""timm's ``ImageDataset`` (what ``timm.data.create_dataset`` makes, as timm's train.py builds its
datasets) with the transform ``timm.data.create_transform`` set on it, read natively: over a
folder and over a Hugging Face dataset (``hfds/`` names). The reference is a DataLoader over
the same dataset object."""

from __future__ import annotations

from pathlib import Path
from typing import Any, List

import datasets
import pytest
import torch
import torchvision.transforms as tvT
from timm.data import create_dataset, create_transform
from torch.utils.data import DataLoader, Subset

import ferroloader as fl

from batches import assert_same  # noqa: E402

datasets.disable_progress_bars()

# timm's ImageDataset opens each file and leaves it to the garbage collector (the DataLoader
# references below).
pytestmark = [
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]


def _eval_transform() -> Any:
    return create_transform(32, is_training=False, crop_pct=0.8, interpolation="bilinear")


def _train_transform() -> Any:
    return create_transform(32, is_training=True, auto_augment="rand-m9-mstd0.5", re_prob=0.25)


def test_a_folder_dataset_equals_a_dataloader_over_it(folder: Path) -> None:
    dataset = create_dataset("", root=str(folder), split="train", is_training=False)
    assert type(dataset.reader).__name__ == "ReaderImageFolder"
    dataset.transform = _eval_transform()
    loader = fl.Loader(dataset, batch_size=5, num_workers=2, python_tail="error")
    assert_same(list(loader), list(DataLoader(dataset, batch_size=5)))
    subset = Subset(dataset, [3, 1, 17, 0])
    assert_same(list(fl.Loader(subset, batch_size=2)), list(DataLoader(subset, batch_size=2)))


def test_timms_training_recipe_gives_the_same_batches_whatever_the_workers(folder: Path) -> None:
    dataset = create_dataset("", root=str(folder), split="train", is_training=True)
    dataset.transform = _train_transform()
    runs = [
        list(fl.Loader(dataset, batch_size=4, shuffle=True, seed=7, num_workers=n, python_tail="error"))
        for n in (0, 2)
    ]
    assert_same(runs[0], runs[1])
    listed = [(p, y) for p, y in dataset.reader.samples]
    same_files = fl.Loader(listed, transform=_train_transform(), batch_size=4, shuffle=True, seed=7)
    assert_same(list(same_files), runs[0])


def test_a_hugging_face_dataset_read_through_timm(folder: Path, tmp_path: Path) -> None:
    dataset = create_dataset("hfds/" + str(folder), root=str(tmp_path), split="train", is_training=False)
    assert type(dataset.reader).__name__ == "ReaderHfds"
    dataset.transform = _eval_transform()
    loader = fl.Loader(dataset, batch_size=5, num_workers=2, python_tail="error")
    assert_same(list(loader), list(DataLoader(dataset, batch_size=5)))


def test_what_timm_would_hand_over_otherwise_is_not_read_natively(folder: Path) -> None:
    as_bytes = create_dataset("", root=str(folder), split="train", load_bytes=True)
    with pytest.raises(ValueError, match="load_bytes=True"):
        fl.Loader(as_bytes, transform=_eval_transform(), batch_size=2)
    gray = create_dataset("", root=str(folder), split="train", input_img_mode="L")
    gray.transform = tvT.Compose([tvT.Resize(40), tvT.CenterCrop(32), tvT.ToTensor()])
    with pytest.warns(UserWarning, match="input_img_mode='L'"):
        loader = fl.Loader(gray, batch_size=6, num_workers=0)
    assert_same(list(loader), list(DataLoader(gray, batch_size=6)))


def test_timms_hugging_face_reader_keeps_the_stored_orientation(tmp_path: Path) -> None:
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(1)
    classes = tmp_path / "photos"
    for k in range(2):
        (classes / f"c{k}").mkdir(parents=True)
        for i in range(4):
            exif = Image.Exif()
            exif[0x0112] = 2 + (i + k) % 7
            Image.fromarray(rng.integers(0, 256, (30, 50, 3), dtype=np.uint8)).save(
                classes / f"c{k}" / f"{i}.jpg", quality=90, exif=exif.tobytes()
            )
    dataset = create_dataset("hfds/" + str(classes), root=str(tmp_path / "cache"), split="train")
    dataset.transform = tvT.Compose([tvT.Resize(24), tvT.CenterCrop(20), tvT.ToTensor()])
    loader = fl.Loader(dataset, batch_size=4, python_tail="error")
    assert not loader.exif_transpose, "timm opens the bytes itself: no transposition"
    assert_same(list(loader), list(DataLoader(dataset, batch_size=4)))
