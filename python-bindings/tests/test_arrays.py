"""Datasets that hold decoded images in one array: torchvision's CIFAR-10/100, SVHN, STL-10 and
the MNIST family (one-channel samples), taken as they are (their own ``__init__`` reading files
written here in their formats), and ``fl.ImageArray`` for a user's own array."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any, Callable, Dict

import numpy as np
import pytest
import torch
import torchvision
import torchvision.transforms as tvT
from PIL import Image
import torchvision.transforms.v2 as v2
from torch.utils.data import DataLoader, Subset, random_split

import ferroloader as fl

MEAN, STD = (0.4914, 0.4822, 0.4465), (0.247, 0.243, 0.261)


def _rgb(rng: np.random.Generator, n: int, size: int) -> np.ndarray:
    """Smooth colour fields with noise, (n, size, size, 3): crops and resizes see structure."""
    y, x = np.mgrid[0:size, 0:size].astype(np.float32)
    phase = rng.uniform(0, 6, (n, 1, 1, 3))
    field = 127 + 100 * np.sin((x[None, ..., None] + 2 * y[None, ..., None]) / size * 3 + phase)
    return np.clip(field + rng.normal(0, 20, field.shape), 0, 255).astype(np.uint8)


def _cifar(root: Path, monkeypatch: pytest.MonkeyPatch, hundred: bool, train: bool, transform: Any) -> Any:
    """A CIFAR-10 or CIFAR-100 made by torchvision's own ``__init__`` from pickles written in
    the downloaded layout (the integrity checks, md5s of the real files, patched out)."""
    import torchvision.datasets.cifar as cifar

    cls = torchvision.datasets.CIFAR100 if hundred else torchvision.datasets.CIFAR10
    folder = root / cls.base_folder
    if not folder.exists():
        folder.mkdir(parents=True)
        rng = np.random.default_rng(7 if hundred else 5)
        label_key = "fine_labels" if hundred else "labels"
        for name, _ in cls.train_list + cls.test_list:
            pixels = _rgb(rng, 20, 32).transpose(0, 3, 1, 2).reshape(20, -1)
            batch = {"data": pixels, label_key: rng.integers(0, 100 if hundred else 10, 20).tolist()}
            (folder / name).write_bytes(pickle.dumps(batch))
        classes = [f"class{i}" for i in range(100 if hundred else 10)]
        (folder / cls.meta["filename"]).write_bytes(pickle.dumps({cls.meta["key"]: classes}))
    monkeypatch.setattr(cls, "_check_integrity", lambda self: True)
    monkeypatch.setattr(cifar, "check_integrity", lambda *args, **kwargs: True)
    return cls(str(root), train=train, transform=transform)


def _stl10(root: Path, monkeypatch: pytest.MonkeyPatch, transform: Any) -> Any:
    """An STL-10 train split by torchvision's ``__init__`` from the binary layout (column-major
    images, labels 1-10)."""
    cls = torchvision.datasets.STL10
    folder = root / cls.base_folder
    if not folder.exists():
        folder.mkdir(parents=True)
        rng = np.random.default_rng(9)
        images = _rgb(rng, 12, 96).transpose(0, 3, 2, 1)  # (N, C, W, H) as the file stores it
        (folder / "train_X.bin").write_bytes(np.ascontiguousarray(images).tobytes())
        (folder / "train_y.bin").write_bytes(rng.integers(1, 11, 12, dtype=np.uint8).tobytes())
    monkeypatch.setattr(cls, "_check_integrity", lambda self: True)
    return cls(str(root), split="train", transform=transform)


def _svhn(transform: Any) -> Any:
    """An SVHN with the attributes its ``__init__`` sets from the .mat file (reading that needs
    scipy, which the test venv does not carry): ``data`` (N, 3, H, W), ``labels``."""
    ds = torchvision.datasets.SVHN.__new__(torchvision.datasets.SVHN)
    torchvision.datasets.VisionDataset.__init__(ds, "unused", transform=transform)
    rng = np.random.default_rng(11)
    ds.data = np.ascontiguousarray(_rgb(rng, 24, 32).transpose(0, 3, 1, 2))
    ds.labels = rng.integers(0, 10, 24).astype(np.int64)
    ds.split = "train"
    return ds


def _mnist(root: Path, fashion: bool, transform: Any) -> Any:
    """An MNIST or FashionMNIST train split by torchvision's ``__init__`` from idx files."""
    cls = torchvision.datasets.FashionMNIST if fashion else torchvision.datasets.MNIST
    raw = root / cls.__name__ / "raw"
    if not raw.exists():
        raw.mkdir(parents=True)
        rng = np.random.default_rng(13)
        n = 30
        images = _rgb(rng, n, 28)[..., 1]
        header = lambda magic, *dims: np.array([magic, *dims], dtype=">i4").tobytes()  # noqa: E731
        (raw / "train-images-idx3-ubyte").write_bytes(header(0x803, n, 28, 28) + images.tobytes())
        labels = rng.integers(0, 10, n, dtype=np.uint8)
        (raw / "train-labels-idx1-ubyte").write_bytes(header(0x801, n) + labels.tobytes())
        for url, _ in cls.resources:  # the test split's files only need to exist
            name = Path(url).stem if url.endswith(".gz") else Path(url).name
            (raw / name).touch(exist_ok=True)
    return cls(str(root), train=True, transform=transform)


@pytest.fixture
def make(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Dict[str, Callable[[Any], Any]]:
    return {
        "CIFAR10": lambda t: _cifar(tmp_path / "c10", monkeypatch, False, True, t),
        "CIFAR100": lambda t: _cifar(tmp_path / "c100", monkeypatch, True, False, t),
        "STL10": lambda t: _stl10(tmp_path / "stl", monkeypatch, t),
        "SVHN": _svhn,
        "MNIST": lambda t: _mnist(tmp_path / "mnist", False, t),
        "FashionMNIST": lambda t: _mnist(tmp_path / "fashion", True, t),
    }


def _same_epoch(loader: Any, reference: Any, atol: float = 0.0) -> None:
    """Every batch of ``loader`` equals DataLoader's over ``reference``, unshuffled."""
    want = list(DataLoader(reference, batch_size=loader.batch_size))
    got = list(loader)
    assert len(got) == len(want)
    for (x, y), (wx, wy) in zip(got, want):
        assert x.dtype == wx.dtype and x.shape == wx.shape
        assert torch.allclose(x.float(), wx.float(), atol=atol, rtol=0)
        assert torch.equal(y, wy)


@pytest.mark.parametrize("name", ["CIFAR10", "CIFAR100", "STL10", "SVHN", "MNIST", "FashionMNIST"])
def test_torchvision_array_datasets_give_dataloaders_batches(name: str, make: Dict[str, Any]) -> None:
    """With a deterministic transform every sample equals torchvision's: the arrays are read
    in the dataset's own layout and label order, MNIST's as one channel."""
    mean, std = ((0.1307,), (0.3081,)) if "MNIST" in name else (MEAN, STD)
    transform = tvT.Compose([tvT.ToTensor(), tvT.Normalize(mean, std)])
    dataset = make[name](transform)
    loader = fl.Loader(dataset, batch_size=8, num_workers=2, python_tail="error")
    assert loader.sample_shape == tuple(dataset[0][0].shape)
    _same_epoch(loader, dataset, atol=1e-6)
    # Geometry is exact on the uint8 pixels too (v2, a resize and a centre crop).
    resized = v2.Compose([v2.PILToTensor(), v2.Resize(40, antialias=True), v2.CenterCrop(36)])
    dataset = make[name](resized)
    loader = fl.Loader(dataset, batch_size=8, num_workers=2, output="uint8", python_tail="error")
    _same_epoch(loader, dataset)


def test_the_cifar_training_recipe_runs_natively_and_deterministically(make: Dict[str, Any]) -> None:
    """RandomCrop with padding and a flip: native (no Python tail), the same batches whatever
    the number of workers, and the draws vary from sample to sample."""
    transform = tvT.Compose(
        [tvT.RandomCrop(32, padding=4), tvT.RandomHorizontalFlip(), tvT.ToTensor(), tvT.Normalize(MEAN, STD)]
    )
    dataset = make["CIFAR10"](transform)
    epochs = [
        torch.cat([x for x, _ in fl.Loader(dataset, batch_size=16, shuffle=True, num_workers=n, seed=3, python_tail="error")])
        for n in (0, 1, 2)
    ]
    assert torch.equal(epochs[0], epochs[1]) and torch.equal(epochs[0], epochs[2])
    assert epochs[0].shape == (len(dataset), 3, 32, 32)
    # Padding shows as zero borders (before Normalize) in some samples, not all.
    zero = torch.tensor(MEAN).view(3, 1) * -1 / torch.tensor(STD).view(3, 1)
    padded_rows = [bool(torch.allclose(x[:, 0, :], zero.expand(3, 32))) for x in epochs[0]]
    assert 0 < sum(padded_rows) < len(padded_rows)


def test_subsets_and_splits_of_array_datasets_keep_their_samples(make: Dict[str, Any]) -> None:
    transform = tvT.Compose([tvT.PILToTensor()])
    dataset = make["CIFAR10"](transform)
    for subset in (
        Subset(dataset, [5, 0, 99, 5]),
        random_split(dataset, [60, 40], generator=torch.Generator().manual_seed(0))[1],
    ):
        loader = fl.Loader(subset, batch_size=7, num_workers=2, output="uint8", python_tail="error")
        _same_epoch(loader, subset)


def _epoch(dataset: Any, **kw: Any) -> torch.Tensor:
    return torch.cat([x for x, _ in fl.Loader(dataset, batch_size=8, num_workers=2, **kw)])


def _torchvisions(dataset: Any) -> torch.Tensor:
    return torch.stack([dataset[i][0] for i in range(len(dataset))])


@pytest.mark.parametrize(
    "ops",
    [
        [tvT.Pad(2), tvT.RandomRotation((17, 17)), tvT.CenterCrop(24)],
        [tvT.RandomAffine(degrees=(-8, -8), translate=None, shear=(5, 5, 0, 0)), tvT.RandomHorizontalFlip(1.0)],
        [tvT.Resize(36), tvT.ColorJitter(contrast=(0.6, 0.6)), tvT.RandomInvert(1.0)],
        [tvT.ColorJitter(brightness=(1.4, 1.4)), tvT.RandomAutocontrast(1.0), tvT.RandomEqualize(1.0)],
        [tvT.ColorJitter(saturation=(0.5, 0.5), hue=(0.2, 0.2)), tvT.RandomSolarize(100, 1.0)],
    ],
    ids=["pad-rotate-crop", "affine-flip", "resize-contrast-invert", "brightness-autocontrast-equalize", "saturation-hue-solarize"],
)
def test_mnist_augmentations_act_on_the_one_channel_image_as_torchvision(ops: Any, make: Dict[str, Any]) -> None:
    """Pillow's ops on the ``L`` image, with parameters that leave nothing to chance; the colour
    ops that mix channels (saturation, hue) leave it as it is, as torchvision does."""
    dataset = make["MNIST"](tvT.Compose([*ops, tvT.PILToTensor()]))
    got = _epoch(dataset, output="uint8", python_tail="error")
    assert got.shape == (len(dataset), 1, *_torchvisions(dataset).shape[2:])
    assert torch.equal(got, _torchvisions(dataset))


def test_channel_counts_follow_grayscale_and_the_mode(make: Dict[str, Any]) -> None:
    """``Grayscale(3)`` makes MNIST three-channel; ``Grayscale(1)`` makes CIFAR one-channel; the
    deferred Normalize of uint8 output has a value per channel."""
    for name, ops, channels in (
        ("MNIST", [tvT.Grayscale(num_output_channels=3)], 3),
        ("CIFAR10", [tvT.Grayscale()], 1),
        ("CIFAR10", [tvT.RandomGrayscale(p=1.0)], 3),
        ("MNIST", [tvT.RandomGrayscale(p=1.0)], 1),
    ):
        dataset = make[name](tvT.Compose([*ops, tvT.PILToTensor()]))
        got = _epoch(dataset, output="uint8", python_tail="error")
        assert got.shape[1] == channels
        assert torch.equal(got, _torchvisions(dataset)), (name, ops)
    mnist = make["MNIST"](tvT.Compose([tvT.ToTensor(), tvT.Normalize((0.1307,), (0.3081,))]))
    loader = fl.Loader(mnist, batch_size=4, output="uint8")
    assert loader.sample_shape == (1, 28, 28)
    mean, std = loader.deferred_normalize  # type: ignore[misc]
    assert np.allclose(mean, [0.1307]) and np.allclose(std, [0.3081])
    # Three values for one channel: torchvision's Normalize fails, and so does the loader, when
    # it is built (not with a silently wrong tensor); one value on three channels broadcasts.
    three = make["MNIST"](tvT.Compose([tvT.ToTensor(), tvT.Normalize(MEAN, STD)]))
    with pytest.raises(RuntimeError):
        next(iter(DataLoader(three, batch_size=4)))
    for output in ("float32", "uint8"):
        with pytest.raises(ValueError, match=r"Normalize: mean .* have 3 values, the samples one channel"):
            fl.Loader(three, batch_size=4, output=output)
    # Natively before a Python tail too.
    tailed = make["MNIST"](
        tvT.Compose([tvT.CenterCrop(20), tvT.ToTensor(), tvT.Normalize(MEAN, STD), tvT.Lambda(lambda x: x)])
    )
    with pytest.raises(ValueError, match=r"Normalize: mean .* have 3 values, the samples one channel"):
        fl.Loader(tailed, batch_size=4, python_tail="allow")
    one = make["CIFAR10"](tvT.Compose([tvT.ToTensor(), tvT.Normalize((0.5,), (0.25,))]))
    assert torch.equal(_epoch(one, python_tail="error"), _torchvisions(one))
    # Some samples one-channel and others three: refused, as torch's collate would fail.
    cifar = make["CIFAR10"](tvT.Compose([tvT.RandomApply([tvT.Grayscale()], p=0.5), tvT.ToTensor()]))
    with pytest.raises(ValueError, match=r"Grayscale\(1\) inside RandomApply would make some samples 1-channel and others 3-channel"):
        fl.Loader(cifar, batch_size=4, python_tail="error")


def mirror(img: Any) -> Any:
    return img.transpose(Image.Transpose.FLIP_LEFT_RIGHT)


def test_a_python_tail_on_mnist_gets_the_l_image(make: Dict[str, Any]) -> None:
    def invert(img: Any) -> Any:
        assert img.mode == "L"
        return img.point(lambda v: 255 - v)

    for ops in ([tvT.CenterCrop(20), tvT.Lambda(invert)], [tvT.Lambda(invert)]):
        dataset = make["MNIST"](tvT.Compose([*ops, tvT.ToTensor()]))
        # Under the GIL, and in worker processes (the native prefix reading the array's
        # image as the native workers do, as PNM).
        for where in ("threads", "processes"):
            with pytest.warns(UserWarning, match="run in Python"):
                got = _epoch(dataset, python_tail_workers=where)
            assert torch.equal(got, _torchvisions(dataset)), (ops, where)
    # An RGB array likewise (read as P6).
    cifar = make["CIFAR10"](tvT.Compose([tvT.CenterCrop(24), tvT.Lambda(mirror), tvT.ToTensor()]))
    with pytest.warns(UserWarning, match="run in Python"):
        got = _epoch(cifar, python_tail_workers="processes")
    assert torch.equal(got, _torchvisions(cifar))


def test_what_cannot_be_honoured_natively_runs_in_python(make: Dict[str, Any]) -> None:
    dataset = make["CIFAR10"](tvT.ToTensor())
    dataset.target_transform = lambda y: y + 1
    # A target_transform is called on each label, natively read images or not.
    x, y = next(iter(fl.Loader(dataset, batch_size=4, python_dataset="error")))
    wx, wy = next(iter(DataLoader(dataset, batch_size=4)))
    assert torch.equal(x, wx) and torch.equal(y, wy)
    dataset.transforms = lambda image, target: (image, target)
    with pytest.raises(ValueError, match=r"CIFAR10\(transforms=\.\.\.\) transforms the image and the target"):
        fl.Loader(dataset, batch_size=4, python_dataset="error")
    # As DataLoader runs it: the dataset's own __getitem__.
    x, y = next(iter(fl.Loader(dataset, batch_size=4, num_workers=0, python_dataset="allow")))
    assert torch.equal(x, wx) and torch.equal(y, wy)
    qmnist = torchvision.datasets.QMNIST.__new__(torchvision.datasets.QMNIST)
    torchvision.datasets.VisionDataset.__init__(qmnist, "unused", transform=tvT.ToTensor())
    qmnist.data = torch.zeros((4, 28, 28), dtype=torch.uint8)
    qmnist.targets = torch.tensor([[k, 0, 0, 0, 0, 0, 0, 0] for k in (3, 1, 4, 1)])
    qmnist.compat = True
    assert [int(y) for _, y in fl.Loader(qmnist, batch_size=1)] == [3, 1, 4, 1]
    qmnist.compat = False
    with pytest.raises(ValueError, match=r"QMNIST\(compat=False\) gives each target as a row"):
        fl.Loader(qmnist, batch_size=4, python_dataset="error")


def test_image_array_takes_arrays_and_tensors_and_names_its_samples() -> None:
    rng = np.random.default_rng(0)
    rgb = _rgb(rng, 6, 16)
    labels = [3, 1, 4, 1, 5, 9]
    for images in (rgb, torch.from_numpy(rgb), rgb[:, ::-1]):
        array = fl.ImageArray(images, labels, "mine")
        assert len(array) == 6 and array.targets == labels and array.name == "mine"
        image, label = array[-1]
        assert np.array_equal(image, np.asarray(images)[5]) and label == 9
        assert np.array_equal(array.images, np.asarray(images))
    again = pickle.loads(pickle.dumps(array))
    assert np.array_equal(again.images, array.images) and again.targets == labels
    assert "mine" in repr(again) and "(16, 16, 3)" in repr(again)
    assert array.mode == "RGB"
    # Grayscale: (N, H, W) or (N, H, W, 1), mode "L": one-channel samples, as torchvision's
    # ToTensor gives for Image.fromarray(gray).
    gray = rgb[..., 0]
    for images in (gray, gray[..., None]):
        array = fl.ImageArray(images, labels)
        assert array.mode == "L" and array[0][0].shape == (16, 16)
        loader = fl.Loader(array, batch_size=6, output="uint8", transform=tvT.PILToTensor())
        x, y = next(iter(loader))
        assert torch.equal(x, torch.from_numpy(gray)[:, None])
        assert y.tolist() == labels


@pytest.mark.parametrize(
    "images, labels, message",
    [
        (np.zeros((2, 4, 4, 3), np.float32), [0, 1], r"expected uint8 pixels \(0-255\), got float32"),
        (np.zeros((2, 4, 4, 2), np.uint8), [0, 1], r"2 channels per pixel"),
        (np.zeros((2, 4), np.uint8), [0, 1], r"shape \(N, H, W, 3\) or \(N, H, W\), got \[2, 4\]"),
        (np.zeros((2, 4, 4, 3), np.uint8), [0], r"for 1 labels"),
        (np.zeros((2, 0, 4, 3), np.uint8), [0, 1], r"0x4 pixels"),
    ],
)
def test_image_array_refuses_what_it_cannot_read(images: Any, labels: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        fl.ImageArray(images, labels)


def test_three_fill_values_on_a_one_channel_image_fail_as_with_torchvision() -> None:
    """torchvision raises on an `L` image given a fill per RGB channel; natively the gray level
    is replicated into three channels, where channel 0's value would have filled silently."""
    import torchvision.transforms as tv

    images = np.random.default_rng(0).integers(0, 256, (8, 28, 28), dtype=np.uint8)
    gray = fl.ImageArray(images, list(range(8)))
    for op in (tv.RandomRotation(30, fill=(1, 2, 3)), tv.RandomCrop(28, padding=2, fill=[1, 2, 3])):
        transform = tv.Compose([op, tv.ToTensor()])
        with pytest.raises(ValueError, match=r"fill.*\(3 != 1\)"):
            fl.Loader(gray, transform=transform, batch_size=4, python_tail="error")
        # Left to Python, torchvision's own error names the sample.
        with pytest.raises(RuntimeError, match=r"does not match the number of channels of the image \(3 != 1\)"):
            loader = fl.Loader(gray, transform=transform, batch_size=4, python_tail="allow")
            next(iter(loader))
    one = tv.Compose([tv.RandomRotation(30, fill=(7,)), tv.ToTensor()])
    assert fl.Loader(gray, transform=one, batch_size=4, python_tail="error").python_tail == []
