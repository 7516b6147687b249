"""A training script's own Dataset class, given to the loader as it is: where its __getitem__
opens an image with Pillow, converts it to RGB and applies the transform it holds, the loader
learns that by tracing it (nothing decoded) and reads it natively; the batches are
DataLoader's, laid out as __getitem__ lays out its samples. Anything else it does with the image
keeps it in Python (worker processes), the reason named."""

from __future__ import annotations

import builtins
import io
import os
import pickle
import random
import time
from pathlib import Path
from typing import Any, Dict, List, Tuple

import numpy as np
import pandas as pd
import PIL
import PIL.ImageOps
import pytest
import torch
import torchvision
import torchvision.transforms as tv
from PIL import Image, ImageOps
from torch.utils.data import DataLoader, Dataset
from torchvision.datasets.folder import default_loader

import ferroloader as fl
from conftest import oriented_photos
from ferroloader._getitem import Opened, loader_opens, trace_getitem

DECODE = Path(__file__).resolve().parents[2] / "target" / "fixtures" / "decode"
EVAL = tv.Compose([tv.Resize(40), tv.CenterCrop(32), tv.ToTensor(), tv.Normalize([0.5] * 3, [0.25] * 3)])
TRAIN = tv.Compose(
    [tv.RandomResizedCrop(32), tv.RandomHorizontalFlip(), tv.TrivialAugmentWide(), tv.ToTensor()]
)


def variety() -> List[str]:
    """The decode fixtures' JPEGs Pillow reads whole (samplings, progressive, grayscale, CMYK,
    restart markers, tiny and odd sizes; not the 6000x4000 one)."""
    found = []
    for path in sorted(DECODE.glob("*.jpg")):
        if path.name.startswith("bad_") or "huge" in path.name:
            continue
        with Image.open(path) as image:
            image.convert("RGB")
        found.append(str(path))
    assert len(found) > 20, "the decode fixtures are missing: make fixtures"
    return found


def table(folder: Path) -> pd.DataFrame:
    """The folder as a CSV would list it: a file column relative to the root, a label column."""
    files = sorted(folder.rglob("*.jpg"))
    return pd.DataFrame(
        {"file": [str(p.relative_to(folder)) for p in files], "label": [i % 3 for i in range(len(files))]}
    )


class CsvDataset(Dataset):  # type: ignore[type-arg]
    """The Kaggle-style dataset: a DataFrame row per sample."""

    def __init__(self, frame: pd.DataFrame, root: Any, transform: Any = None) -> None:
        self.frame = frame
        self.root = root
        self.transform = transform

    def __len__(self) -> int:
        return len(self.frame)

    def __getitem__(self, idx: int) -> Any:
        row = self.frame.iloc[idx]
        image = Image.open(os.path.join(self.root, row["file"])).convert("RGB")
        if self.transform:
            image = self.transform(image)
        return image, row["label"]


class WithPath(CsvDataset):
    """A helper method opening the file with the builtin open; the path returned too."""

    def load(self, path: str) -> Any:
        with open(path, "rb") as f:
            img = Image.open(f)
            return img.convert("RGB")

    def __getitem__(self, idx: int) -> Any:
        row = self.frame.iloc[idx]
        return self.transform(self.load(os.path.join(self.root, row["file"]))), int(row["label"]), row["file"]


class AsDict(CsvDataset):
    """Hugging Face style dicts, built on the parent's sample through super()."""

    def __getitem__(self, idx: int) -> Any:
        image, label = super().__getitem__(idx)
        return {"pixel_values": image, "labels": torch.tensor(label), "index": idx}


def read_rgb(path: str) -> Any:
    with Image.open(path) as im:
        return im.convert("RGB")


class LabelFirst(CsvDataset):
    """A module-level helper reading the image; the image second, a float target third."""

    def __getitem__(self, idx: int) -> Any:
        row = self.frame.iloc[idx]
        image = read_rgb(os.path.join(self.root, row["file"]))
        return int(row["label"]), self.transform(image), float(row["label"]) / 2


class ImportsInside(CsvDataset):
    """Pillow imported in the method."""

    def __getitem__(self, idx: int) -> Any:
        from PIL import Image as PILImage

        image = PILImage.open(os.path.join(self.root, self.frame.iloc[idx]["file"]))
        return self.transform(image.convert("RGB")), int(self.frame.iloc[idx]["label"])


class Unlabelled(Dataset):  # type: ignore[type-arg]
    """A self-supervised dataset: paths only, torchvision's default_loader, the image alone."""

    def __init__(self, paths: List[str], transform: Any) -> None:
        self.paths = paths
        self.transform = transform

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int) -> Any:
        return self.transform(default_loader(self.paths[i]))


class ReadFirst(CsvDataset):
    """The file read whole, then opened from memory."""

    def __getitem__(self, idx: int) -> Any:
        with open(os.path.join(self.root, self.frame.iloc[idx]["file"]), "rb") as f:
            data = f.read()
        return self.transform(Image.open(io.BytesIO(data)).convert("RGB")), int(self.frame.iloc[idx]["label"])


class InMemory(Dataset):  # type: ignore[type-arg]
    """Encoded images held in memory, opened through BytesIO."""

    def __init__(self, blobs: List[bytes], transform: Any) -> None:
        self.blobs = blobs
        self.transform = transform

    def __len__(self) -> int:
        return len(self.blobs)

    def __getitem__(self, i: int) -> Any:
        image = Image.open(io.BytesIO(self.blobs[i])).convert("RGB")
        return self.transform(image), i % 2


def same(a: Any, b: Any, top: bool = True) -> None:
    """``a`` (the loader's) is ``b`` (DataLoader's): the same containers (a top-level pair may
    be a tuple where DataLoader gives a list), keys, tensors bit for bit, other values equal."""
    if isinstance(b, torch.Tensor):
        assert isinstance(a, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    elif isinstance(b, dict):
        assert type(a) is dict and list(a) == list(b)
        for k in b:
            same(a[k], b[k], False)
    elif isinstance(b, (list, tuple)):
        assert isinstance(a, (list, tuple)) and len(a) == len(b)
        if not (top and len(b) == 2):
            assert type(a) is type(b), (type(a), type(b))
        for x, y in zip(a, b):
            same(x, y, False)
    else:
        assert a == b and type(a) is type(b), (a, b)


def native(dataset: Any, **kwargs: Any) -> fl.Loader:
    """The loader over ``dataset``, which must be read natively (no warning: -W error)."""
    loader = fl.Loader(dataset, **kwargs)
    assert loader.python_dataset_reason is None
    return loader


def test_a_csv_dataset_class_is_read_natively_as_dataloader_reads_it(folder: Path) -> None:
    paths = variety()
    frame = pd.DataFrame({"file": paths, "label": range(len(paths))})
    dataset = CsvDataset(frame, "/", EVAL)
    ours = list(native(dataset, batch_size=5, num_workers=2))
    theirs = list(DataLoader(dataset, batch_size=5))
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        same(a, b)


@pytest.mark.parametrize("cls", [WithPath, AsDict, LabelFirst, ReadFirst, ImportsInside])
def test_samples_keep_the_layout_getitem_gives_them(folder: Path, cls: type) -> None:
    dataset = cls(table(folder), folder, EVAL)
    for a, b in zip(native(dataset, batch_size=4, num_workers=2), DataLoader(dataset, batch_size=4)):
        same(a, b)
    one = native(dataset, batch_size=None, num_workers=1)
    for i, sample in enumerate(one):
        same(sample, dataset[i], top=False)
    seen: List[Any] = []
    collated = native(dataset, batch_size=3, collate_fn=lambda samples: seen.extend(samples) or len(samples))
    assert sum(collated) == len(dataset)
    for i, sample in enumerate(seen):
        same(sample, dataset[i], top=False)


def test_the_image_alone_and_images_in_memory(folder: Path) -> None:
    paths = sorted(str(p) for p in folder.rglob("*.jpg"))
    unlabelled = Unlabelled(paths, EVAL)
    for a, b in zip(native(unlabelled, batch_size=4), DataLoader(unlabelled, batch_size=4)):
        same(a, b)
    blobs = InMemory([Path(p).read_bytes() for p in paths], EVAL)
    for a, b in zip(native(blobs, batch_size=4, num_workers=2), DataLoader(blobs, batch_size=4)):
        same(a, b)


GLOBAL_TRANSFORM = EVAL


class GlobalTransform(CsvDataset):
    """The transform a module-level name, not an attribute."""

    def __getitem__(self, idx: int) -> Any:
        row = self.frame.iloc[idx]
        return GLOBAL_TRANSFORM(Image.open(os.path.join(self.root, row["file"])).convert("RGB")), 1


def closed_over(paths: List[str], tf: Any) -> Dataset:  # type: ignore[type-arg]
    """A dataset class made in a function: the paths and the transform in its closure."""

    class Closed(Dataset):  # type: ignore[type-arg]
        def __len__(self) -> int:
            return len(paths)

        def __getitem__(self, i: int) -> Any:
            return tf(Image.open(paths[i]).convert("RGB")), 0

    return Closed()


def test_a_target_transform_and_string_targets_collate_as_dataloaders(folder: Path) -> None:
    """PyTorch's data tutorial's class: positional iloc, a target_transform naming the class."""

    class Tutorial(CsvDataset):
        def __init__(self, frame: pd.DataFrame, root: Any, transform: Any, target_transform: Any) -> None:
            super().__init__(frame, root, transform)
            self.target_transform = target_transform

        def __getitem__(self, idx: int) -> Any:
            if torch.is_tensor(idx):
                idx = idx.tolist()
            image = Image.open(os.path.join(self.root, self.frame.iloc[idx, 0])).convert("RGB")
            label = self.frame.iloc[idx, 1]
            if self.transform:
                image = self.transform(image)
            if self.target_transform:
                label = self.target_transform(label)
            return image, label

    dataset = Tutorial(table(folder), folder, EVAL, lambda label: ["cat", "dog", "eel"][label])
    for a, b in zip(native(dataset, batch_size=4), DataLoader(dataset, batch_size=4)):
        same(a, b)
    assert isinstance(a[1], tuple)


def test_a_transform_held_in_a_global_or_a_closure(folder: Path) -> None:
    paths = sorted(str(p) for p in folder.rglob("*.jpg"))
    for dataset in (GlobalTransform(table(folder), folder), closed_over(paths, EVAL)):
        for a, b in zip(native(dataset, batch_size=4), DataLoader(dataset, batch_size=4)):
            same(a, b)
    assert GLOBAL_TRANSFORM is EVAL


class Upright(CsvDataset):
    """Turns each photo upright per its EXIF orientation, as phone photos need."""

    def __getitem__(self, idx: int) -> Any:
        row = self.frame.iloc[idx]
        image = ImageOps.exif_transpose(Image.open(os.path.join(self.root, row["file"])))
        return self.transform(image.convert("RGB")), 0


class UprightInPlace(CsvDataset):
    def __getitem__(self, idx: int) -> Any:
        image = PIL.Image.open(os.path.join(self.root, self.frame.iloc[idx]["file"])).convert("RGB")
        PIL.ImageOps.exif_transpose(image, in_place=True)
        return self.transform(image), 0


def test_images_turned_upright_by_their_exif_orientation(tmp_path: Path) -> None:
    frame = pd.DataFrame({"file": oriented_photos(tmp_path), "label": range(8)})
    keep = tv.Compose([tv.Resize((24, 40)), tv.ToTensor()])  # a rotated image's shape shows
    for cls in (Upright, UprightInPlace):
        dataset = cls(frame, tmp_path, keep)
        loader = native(dataset, batch_size=4)
        assert loader.exif_transpose
        for a, b in zip(loader, DataLoader(dataset, batch_size=4)):
            same(a, b)
    not_turned = CsvDataset(frame, tmp_path, keep)
    assert not native(not_turned, batch_size=4).exif_transpose
    assert not all(torch.equal(a[0], b[0]) for a, b in zip(native(not_turned, batch_size=4), DataLoader(dataset, batch_size=4)))


def test_a_random_split_of_ones_own_dataset(folder: Path) -> None:
    """random_split's Subsets (and a Subset of one) are read natively, each its own samples."""
    dataset = AsDict(table(folder), folder, EVAL)
    train, val = torch.utils.data.random_split(dataset, [0.7, 0.3], generator=torch.Generator().manual_seed(0))
    inner = torch.utils.data.Subset(train, [5, 0, 3])
    for part in (train, val, inner):
        got = list(native(part, batch_size=4, num_workers=2))
        want = list(DataLoader(part, batch_size=4))
        assert len(got) == len(want)
        for a, b in zip(got, want):
            same(a, b)

    # train + extra data, as ConcatDataset joins them (and a random_split of that).
    frame = table(folder)
    joined = torch.utils.data.ConcatDataset(
        [AsDict(frame.iloc[:7], folder, EVAL), AsDict(frame.iloc[7:].reset_index(drop=True), folder, EVAL)]
    )
    for part in (joined, torch.utils.data.Subset(joined, [9, 1, 8, 2])):
        loader = native(part, batch_size=4, num_workers=2)
        for a, b in zip(pickle.loads(pickle.dumps(loader)), DataLoader(part, batch_size=4)):
            same(a, b)
    apart = torch.utils.data.ConcatDataset([AsDict(frame, folder, EVAL), AsDict(frame, folder, TRAIN)])
    with pytest.warns(UserWarning, match="parts with different transforms"):
        fl.Loader(apart, batch_size=4)

    class Batched(CsvDataset):
        def __getitems__(self, indices: List[int]) -> List[Any]:
            return [self[i] for i in indices]

    with pytest.warns(UserWarning, match="defines __getitems__"):
        fl.Loader(Batched(table(folder), folder, EVAL), batch_size=4)


def listed(folder: Path) -> List[Tuple[str, int]]:
    frame = table(folder)
    return [(str(folder / f), int(label)) for f, label in zip(frame["file"], frame["label"])]


@pytest.mark.parametrize("workers", [0, 2])
def test_random_transforms_draw_as_for_the_same_files_listed(folder: Path, workers: int) -> None:
    """Per-sample seeding holds: the traced dataset's batches are those of its (path, label)
    list with the same transform, whatever num_workers."""
    dataset = CsvDataset(table(folder), folder, TRAIN)
    ours = native(dataset, batch_size=4, shuffle=True, seed=7, num_workers=workers)
    reference = fl.Loader(listed(folder), transform=TRAIN, batch_size=4, shuffle=True, seed=7, num_workers=2)
    for epoch in range(2):
        for (a, la), (b, lb) in zip(ours, reference):
            assert torch.equal(a, b) and torch.equal(la, lb)


def test_views_tails_and_resume(folder: Path) -> None:
    """A two-view transform in the dataset runs natively; a Lambda after the native ops still
    runs; a saved state resumes the epoch."""

    views = TwoViews(TRAIN)
    ours = native(CsvDataset(table(folder), folder, views), batch_size=4, seed=3)
    reference = fl.Loader(listed(folder), transform=views, batch_size=4, seed=3)
    for (a, la), (b, lb) in zip(ours, reference):
        assert len(a) == 2 and all(torch.equal(x, y) for x, y in zip(a, b)) and torch.equal(la, lb)

    tail = tv.Compose([*TRAIN.transforms, tv.Lambda(lambda x: x * 2 - 1)])
    ours = native(CsvDataset(table(folder), folder, tail), batch_size=4, seed=3, python_tail="allow")
    reference = fl.Loader(listed(folder), transform=tail, batch_size=4, seed=3, python_tail="allow")
    for (a, _), (b, _) in zip(ours, reference):
        assert torch.equal(a, b)

    loader = native(AsDict(table(folder), folder, TRAIN), batch_size=4, shuffle=True, seed=5)
    it = iter(loader)
    next(it)
    state = pickle.loads(pickle.dumps(loader.state_dict()))
    rest = list(it)
    again = pickle.loads(pickle.dumps(loader))  # a spawned process's copy traces again
    again.load_state_dict(state)
    resumed = list(again)
    assert len(resumed) == len(rest)
    for a, b in zip(resumed, rest):
        same(a, b)


def test_an_imagefolder_loader_that_opens_rgb_is_read_natively(folder: Path) -> None:
    def pil_loader(path: str) -> Any:  # as repositories copy torchvision's
        with open(path, "rb") as f:
            img = Image.open(f)
            return img.convert("RGB")

    for loader in (pil_loader, lambda p: Image.open(p).convert("RGB")):
        dataset = torchvision.datasets.ImageFolder(str(folder), EVAL, loader=loader)
        for a, b in zip(native(dataset, batch_size=4), DataLoader(dataset, batch_size=4)):
            same(a, b)
    assert loader_opens(pil_loader) == Opened(())
    assert loader_opens(lambda p: Image.open(p).convert("L")) == Opened((("Grayscale", 1),))
    assert "converts the image to 'RGBA'" in str(loader_opens(lambda p: Image.open(p).convert("RGBA")))
    # One converting to L: the samples have one channel, as torchvision's Grayscale makes them.
    gray = torchvision.datasets.ImageFolder(str(folder), EVAL_L, loader=lambda p: Image.open(p).convert("L"))
    for a, b in zip(native(gray, batch_size=4), DataLoader(gray, batch_size=4)):
        same(a, b)
    assert a[0].shape[1] == 1


EVAL_L = tv.Compose([tv.Resize(40), tv.CenterCrop(32), tv.ToTensor(), tv.Normalize([0.5], [0.25])])


class Gray(CsvDataset):
    def __getitem__(self, idx: int) -> Any:
        row = self.frame.iloc[idx]
        return self.transform(Image.open(os.path.join(self.root, row["file"])).convert("L")), 0


class GrayAsRgb(CsvDataset):
    def __getitem__(self, idx: int) -> Any:
        with Image.open(os.path.join(self.root, self.frame.iloc[idx]["file"])) as im:
            return self.transform(im.convert("L").convert("RGB")), 1


class TwoViews:
    def __init__(self, base: Any) -> None:
        self.base = base

    def __call__(self, x: Any) -> List[Any]:
        return [self.base(x), self.base(x)]


class ConvertedIfNeeded(CsvDataset):
    """The common guard: converted only where the file is not RGB already."""

    def __getitem__(self, idx: int) -> Any:
        image = Image.open(os.path.join(self.root, self.frame.iloc[idx]["file"]))
        if image.mode != "RGB":
            image = image.convert("RGB")
        return self.transform(image), idx


class CmykOnly(CsvDataset):
    def __getitem__(self, idx: int) -> Any:
        image = Image.open(os.path.join(self.root, self.frame.iloc[idx]["file"]))
        if image.mode == "CMYK":
            image = image.convert("RGB")
        return self.transform(image), idx


class GrayUnlessRgb(CsvDataset):
    def __getitem__(self, idx: int) -> Any:
        image = Image.open(os.path.join(self.root, self.frame.iloc[idx]["file"]))
        return self.transform(image if image.mode == "RGB" else image.convert("L")), idx


def test_an_image_handed_over_as_opened_must_be_rgb(folder: Path) -> None:
    """Unconverted, each file must open in mode RGB (DataLoader would hand over another mode,
    and fail to collate it): read as RGB where it does, an error naming the file where it
    does not; a transform that starts by making it gray takes any mode."""
    def mode(path: str) -> str:
        with Image.open(path) as image:
            return str(image.mode)

    rgb = [p for p in variety() if mode(p) == "RGB"]
    frame = pd.DataFrame({"file": rgb, "label": range(len(rgb))})
    dataset = Unconverted(frame, "/", EVAL)
    for a, b in zip(native(dataset, batch_size=8, num_workers=2), DataLoader(dataset, batch_size=8)):
        same(a, b)
    paths = variety()
    frame = pd.DataFrame({"file": paths, "label": range(len(paths))})
    first = next(p for p in paths if mode(p) != "RGB")
    with pytest.raises(OSError, match=rf"{Path(first).name}' opens in mode {mode(first)}, not RGB"):
        list(native(Unconverted(frame, "/", EVAL), batch_size=8))
    made_gray = Unconverted(frame, "/", tv.Compose([tv.Grayscale(), EVAL_L]))
    for a, b in zip(native(made_gray, batch_size=8, num_workers=2), DataLoader(made_gray, batch_size=8)):
        same(a, b)


class Resized(CsvDataset):
    """Resized with Pillow before the transform (Pillow's default filter, then a given one)."""

    def __getitem__(self, idx: int) -> Any:
        image = Image.open(os.path.join(self.root, self.frame.iloc[idx]["file"])).convert("RGB")
        image = image.resize((40, 36)).convert("L").resize((30, 28), Image.Resampling.BILINEAR)
        return self.transform(image), idx


def test_an_image_resized_with_pillow_first() -> None:
    paths = variety()
    frame = pd.DataFrame({"file": paths, "label": range(len(paths))})
    dataset = Resized(frame, "/", tv.Compose([tv.ToTensor(), tv.Normalize([0.5], [0.25])]))
    for a, b in zip(native(dataset, batch_size=8, num_workers=2), DataLoader(dataset, batch_size=8)):
        same(a, b)
    assert a[0].shape[1:] == (1, 28, 30)


def test_an_image_converted_where_its_mode_is_not_rgb() -> None:
    """Code that reads the opened image's .mode is traced for every mode a file opens in: where
    each comes out as an RGB file does, it is read natively (over the JPEG variety: grayscale
    and CMYK files converted, RGB ones as opened)."""
    paths = variety()
    frame = pd.DataFrame({"file": paths, "label": range(len(paths))})
    dataset = ConvertedIfNeeded(frame, "/", EVAL)
    for a, b in zip(native(dataset, batch_size=8, num_workers=2), DataLoader(dataset, batch_size=8)):
        same(a, b)
    for cls, mode in ((CmykOnly, "L"), (GrayUnlessRgb, "L")):
        with pytest.warns(UserWarning, match=f"reads the image's .mode, and for a {mode} file"):
            fl.Loader(cls(frame, "/", EVAL), batch_size=4)


def test_images_converted_to_l_are_read_natively() -> None:
    """Pillow's convert("L") of every JPEG of the variety, as its own dataset reads it (one
    channel), and converted back to RGB (three equal channels): DataLoader's batches."""
    paths = variety()
    frame = pd.DataFrame({"file": paths, "label": range(len(paths))})
    for dataset in (Gray(frame, "/", EVAL_L), GrayAsRgb(frame, "/", EVAL)):
        for a, b in zip(native(dataset, batch_size=8, num_workers=2), DataLoader(dataset, batch_size=8)):
            same(a, b)
    assert a[0].shape[1] == 3
    views = Gray(frame, "/", TwoViews(EVAL_L))
    with pytest.warns(UserWarning, match=r"converts or resizes the image before TwoViews, not a torchvision transform"):
        fl.Loader(views, batch_size=4)


class Cmyk(CsvDataset):
    def __getitem__(self, idx: int) -> Any:
        row = self.frame.iloc[idx]
        return self.transform(Image.open(os.path.join(self.root, row["file"])).convert("CMYK")), 0


class Unconverted(CsvDataset):
    def __getitem__(self, idx: int) -> Any:
        row = self.frame.iloc[idx]
        return self.transform(Image.open(os.path.join(self.root, row["file"]))), 0


class Sized(CsvDataset):
    def __getitem__(self, idx: int) -> Any:
        image, label = super().__getitem__(idx)
        return image, label

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        inner = self.transform
        # The image's size read first: caught by the user's own except, still refused.
        def sized(img: Any) -> Any:
            try:
                img.size
            except BaseException:
                pass
            return inner(img)

        self.transform = sized


class TwoImages(CsvDataset):
    def __getitem__(self, idx: int) -> Any:
        row = self.frame.iloc[idx]
        first = Image.open(os.path.join(self.root, row["file"])).convert("RGB")
        second = Image.open(os.path.join(self.root, self.frame.iloc[0]["file"])).convert("RGB")
        return self.transform(first), self.transform(second)


class RandomTarget(CsvDataset):
    def __getitem__(self, idx: int) -> Any:
        image, label = super().__getitem__(idx)
        return image, float(label) + random.random()


class AsArray(CsvDataset):
    def __getitem__(self, idx: int) -> Any:
        row = self.frame.iloc[idx]
        image = Image.open(os.path.join(self.root, row["file"])).convert("RGB")
        return torch.from_numpy(np.array(image)[:8, :8]).permute(2, 0, 1).float(), 0


@pytest.mark.parametrize(
    "cls,why",
    [
        (Cmyk, "converts the image to 'CMYK'"),
        (Sized, "uses the image's .size"),
        (TwoImages, "2 transformed images"),
        (RandomTarget, "target at random"),
        (AsArray, "uses the image's"),
    ],
)
def test_anything_else_done_with_the_image_runs_in_python(folder: Path, cls: type, why: str) -> None:
    transform = tv.Compose([tv.Lambda(lambda im: im.convert("RGB")), EVAL]) if cls is Cmyk else EVAL
    dataset = cls(table(folder).iloc[:6], folder, transform)
    with pytest.warns(UserWarning, match="runs in Python"):
        loader = fl.Loader(dataset, batch_size=3, num_workers=0)
    assert why in str(loader.python_dataset_reason)
    batches = list(loader)
    assert len(batches) == 2
    if cls is not RandomTarget:
        for a, b in zip(batches, DataLoader(dataset, batch_size=3)):
            same(a, b)


def test_the_users_dataset_and_modules_are_left_alone(folder: Path) -> None:
    dataset = WithPath(table(folder), folder, EVAL)
    before = dict(vars(dataset))
    assert not isinstance(trace_getitem(dataset), str)
    list(native(dataset, batch_size=4, num_workers=2))
    assert type(dataset) is WithPath and vars(dataset) == before and dataset.transform is EVAL
    assert Image.open is PIL.Image.open and globals()["Image"] is PIL.Image
    assert builtins.open is io.open and "open" not in globals()
    assert WithPath.load.__globals__ is globals()


def test_a_bad_file_is_named_and_skipped(folder: Path, tmp_path: Path) -> None:
    frame = table(folder).iloc[:6].copy()
    bad = tmp_path / "bad.jpg"
    bad.write_bytes((folder / frame["file"].iloc[0]).read_bytes()[:300])
    frame.iloc[2, 0] = str(bad)
    with pytest.raises(fl.DecodeError, match=r"dataset\[2\] \(.*bad\.jpg\)"):
        list(native(CsvDataset(frame, folder, EVAL), batch_size=3))
    it = iter(native(CsvDataset(frame, folder, EVAL), batch_size=3, on_error="skip"))
    assert sum(len(labels) for _, labels in it) == 5
    assert [(i, Path(p.split(" ", 1)[1].strip("()")).name) for i, p, _ in it.skipped] == [(2, "bad.jpg")]


def test_batch_transform_needs_pairs(folder: Path) -> None:
    with pytest.raises(ValueError, match=r"batch_transform: .*dicts with the image under 'pixel_values'"):
        fl.Loader(AsDict(table(folder), folder, EVAL), batch_size=4, batch_transform=lambda x, y: (x, y))


def _tag_worker(worker_id: int) -> None:
    info = torch.utils.data.get_worker_info()
    assert info is not None
    info.dataset.tag = worker_id


class Slow(CsvDataset):
    def __getitem__(self, idx: int) -> Any:
        time.sleep(0.002)  # a remote label lookup, say: native workers would wait in turn
        return super().__getitem__(idx)


def test_what_holds_the_dataset_in_worker_processes(folder: Path) -> None:
    """A worker_init_fn that sets up each worker's dataset, and a __getitem__ slow without
    decoding, keep DataLoader's worker processes; a worker_init_fn that only seeds does not."""
    dataset = CsvDataset(table(folder), folder, EVAL)
    with pytest.warns(UserWarning, match=r"worker_init_fn sets up each worker's copy"):
        fl.Loader(dataset, batch_size=4, num_workers=2, worker_init_fn=_tag_worker)
    native(dataset, batch_size=4, num_workers=2, worker_init_fn=lambda worker_id: np.random.seed(worker_id))
    with pytest.warns(UserWarning, match=r"it takes [0-9.]+ ms without decoding"):
        fl.Loader(Slow(table(folder), folder, EVAL), batch_size=4)


def test_attributes_set_anew_are_seen_and_a_new_transform_is_refused(folder: Path) -> None:
    dataset = CsvDataset(table(folder), folder, EVAL)
    loader = native(dataset, batch_size=6)
    assert [labels.tolist() for _, labels in loader][0] == [0, 1, 2, 0, 1, 2]
    relabelled = table(folder)
    relabelled["label"] = 7
    dataset.frame = relabelled  # between epochs, as a curriculum would
    assert {label for _, labels in loader for label in labels.tolist()} == {7}
    dataset.transform = TRAIN
    with pytest.raises(OSError, match=r"applied Compose, not the transform the loader converted"):
        list(loader)
