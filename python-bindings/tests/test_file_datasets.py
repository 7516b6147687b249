"""torchvision's file-based classification datasets (Food101, Flowers102, OxfordIIITPet, ...),
taken as they are: each object is made with the attributes its ``__init__`` sets from the
downloaded split files (which cannot be downloaded here), over the fixture folder's images, and
its own ``__getitem__`` gives the reference batches."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Dict, List, Tuple

import pytest
import torch
import torchvision
import torchvision.transforms as tvT
from torch.utils.data import DataLoader, Subset
from torchvision.datasets import folder as tv_folder

import ferroloader as fl

TRANSFORM = tvT.Compose([tvT.Resize(48), tvT.CenterCrop(40), tvT.PILToTensor()])


def _files(root: Path) -> List[Tuple[Path, int]]:
    """The fixture folder's images with a made-up label each."""
    files = sorted(p for p in root.rglob("*") if p.suffix in (".jpg", ".png"))
    return [(p, i % 5) for i, p in enumerate(files)]


def _made(name: str, root: Path, transform: Any = TRANSFORM, **attributes: Any) -> Any:
    cls = getattr(torchvision.datasets, name)
    ds = cls.__new__(cls)
    torchvision.datasets.VisionDataset.__init__(ds, str(root), transform=transform)
    for key, value in attributes.items():
        setattr(ds, key, value)
    return ds


def _image_files(name: str) -> Callable[[Path], Any]:
    def make(root: Path) -> Any:
        files = _files(root)
        return _made(
            name,
            root,
            _image_files=[p for p, _ in files],
            _labels=[y for _, y in files],
            loader=tv_folder.default_loader,
        )

    return make


def _samples(name: str, attribute: str = "_samples", **extra: Any) -> Callable[[Path], Any]:
    def make(root: Path) -> Any:
        return _made(name, root, **{attribute: [(str(p), y) for p, y in _files(root)]}, **extra)

    return make


def _pet(kind: str) -> Callable[[Path], Any]:
    def make(root: Path) -> Any:
        files = _files(root)
        return _made(
            "OxfordIIITPet",
            root,
            _images=[p for p, _ in files],
            _labels=[y for _, y in files],
            _bin_labels=[y % 2 for _, y in files],
            _target_types=[kind],
        )

    return make


DATASETS: Dict[str, Callable[[Path], Any]] = {
    **{name: _image_files(name) for name in ("Food101", "Flowers102", "DTD", "FGVCAircraft", "SUN397")},
    "OxfordIIITPet": _pet("category"),
    "OxfordIIITPet-binary": _pet("binary-category"),
    "StanfordCars": _samples("StanfordCars", loader=tv_folder.default_loader),
    "Imagenette": _samples("Imagenette", loader=tv_folder.default_loader),
    "GTSRB": _samples("GTSRB"),
    "Places365": _samples("Places365", "imgs", loader=tv_folder.default_loader),
}


def _same_epoch(loader: Any, reference: Any) -> None:
    want = list(DataLoader(reference, batch_size=loader.batch_size))
    got = list(loader)
    assert len(got) == len(want)
    for (x, y), (wx, wy) in zip(got, want):
        assert torch.equal(x, wx) and torch.equal(y, wy)


@pytest.mark.parametrize("name", sorted(DATASETS))
def test_torchvision_file_datasets_give_dataloaders_batches(name: str, folder: Path) -> None:
    dataset = DATASETS[name](folder)
    loader = fl.Loader(dataset, batch_size=5, num_workers=2, output="uint8", python_tail="error")
    _same_epoch(loader, dataset)
    subset = Subset(dataset, [7, 2, 2, 11])
    _same_epoch(fl.Loader(subset, batch_size=3, output="uint8", python_tail="error"), subset)


def test_what_the_file_datasets_cannot_honour_natively_runs_in_python(folder: Path) -> None:
    def refused(dataset: Any, message: str) -> None:
        with pytest.raises(ValueError, match=message):
            fl.Loader(dataset, batch_size=4, python_dataset="error")

    food = DATASETS["Food101"](folder)
    food.loader = lambda path: tv_folder.default_loader(path).rotate(90)
    refused(food, r"Food101 would run in Python \(Food101 has a custom loader")
    # Unless refused, the dataset's own code runs, as DataLoader runs it.
    with pytest.warns(UserWarning, match=r"Food101 runs in Python, as DataLoader runs it"):
        _same_epoch(fl.Loader(food, batch_size=5, num_workers=0), food)
    food = DATASETS["Food101"](folder)
    food.target_transform = lambda y: y + 1
    _same_epoch(fl.Loader(food, batch_size=5, output="uint8", python_dataset="error"), food)
    pets = DATASETS["OxfordIIITPet"](folder)
    pets._target_types = ["category", "segmentation"]
    refused(pets, r"OxfordIIITPet\(target_types=\['category', 'segmentation'\]\)")
    places = DATASETS["Places365"](folder)
    places.transforms = lambda image, target: (image, target)
    refused(places, r"Places365\(transforms=\.\.\.\) transforms the image and the target together")
    clevr = _made("CLEVRClassification", folder, _image_files=[p for p, _ in _files(folder)], _labels=None)
    refused(clevr, r"CLEVRClassification has no class label for each image")

    # A subclass that overrides __getitem__ does something of its own with each item.
    class WithIndex(torchvision.datasets.CIFAR10):
        def __getitem__(self, index: int) -> Any:
            image, label = super().__getitem__(index)
            return image, label, index

    class Renamed(torchvision.datasets.ImageFolder):
        def __getitem__(self, index: int) -> Any:
            return super().__getitem__(index)

    refused(WithIndex.__new__(WithIndex), r"WithIndex overrides __getitem__ of torchvision's CIFAR10")
    # An override that opens the image as torchvision's does (through super()) is traced and
    # read natively (test_own_dataset.py).
    renamed = Renamed(str(folder), transform=TRANSFORM)
    assert fl.Loader(renamed, batch_size=4, python_dataset="error").python_dataset_reason is None

    # A subclass that keeps torchvision's __getitem__ is read natively.
    class Plain(torchvision.datasets.ImageFolder):
        pass

    plain = Plain(str(folder), transform=TRANSFORM)
    _same_epoch(fl.Loader(plain, batch_size=5, output="uint8", python_tail="error"), plain)
