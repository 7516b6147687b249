"""The datasets a ``torch.utils.data.DataLoader`` user already has, as the loader's source.

``as_source(dataset)`` turns what it can list into a native ``PathList`` (paths and labels only,
read by the workers without the GIL): torchvision's ``ImageFolder``/``DatasetFolder``, a
sequence of ``(path, label)``, and ``Subset``/``random_split``/``ConcatDataset`` of those.
Anything else with ``__getitem__`` and ``__len__`` is used through the protocol below, asked for
each sample by the worker that reads it. Must not read or copy the images themselves.

The protocol, for listings that come from a manifest or a database: ``dataset[i]`` returns
``(path, label)`` (a ``str`` or ``os.PathLike``) or ``(data, label)`` (``bytes`` or
``bytearray`` of an encoded image), with an integer label. Each call holds the GIL, which the
training loop then waits for; a path is read without it.
"""

from __future__ import annotations

import numbers
import os
from typing import Any, List, Optional, Sequence, Tuple, Union

from ferroloader._native import FileList, ImageFolder, PathList, WebDataset

__all__ = ["Source", "as_source"]

#: What the native loader takes.
Source = Union[ImageFolder, FileList, PathList, WebDataset, Any]

_NATIVE = (ImageFolder, FileList, PathList)


class _Listing:
    """Paths and labels of a listable dataset, and the transform it carries (if any)."""

    def __init__(self, paths: List[str], labels: List[int], transform: Any) -> None:
        self.paths = paths
        self.labels = labels
        self.transform = transform


def as_source(dataset: Any) -> Tuple[Source, Any]:
    """``(source, transform)``: the dataset as the native loader takes it, and the transform
    set on the dataset itself (torchvision's ``ImageFolder(root, transform=...)``), or ``None``.

    Raises ``TypeError``/``ValueError`` naming what cannot be honoured and why.
    """
    if isinstance(dataset, (*_NATIVE, WebDataset)):
        # Shards are read natively; a Subset of them cannot be listed as paths.
        return dataset, None
    if isinstance(dataset, (str, bytes, os.PathLike)):
        raise TypeError(
            f"dataset: got the path {dataset!r}; for a folder of class folders pass "
            "ferroloader.ImageFolder(path), for a listing ferroloader.FileList(path)"
        )
    listing = _listing(dataset)
    if listing is not None:
        return PathList(listing.paths, listing.labels), listing.transform
    if hasattr(dataset, "__getitem__") and hasattr(dataset, "__len__"):
        _check_attached_transforms(dataset)
        return dataset, None
    raise TypeError(
        "dataset: expected a ferroloader or torchvision dataset, a sequence of (path, label), "
        "or a map-style dataset whose items are (path or bytes, label); got "
        f"{type(dataset).__name__}"
    )


def _listing(dataset: Any) -> Optional[_Listing]:
    """The listing of ``dataset`` when it can be had without calling its ``__getitem__``."""
    if isinstance(dataset, _NATIVE):
        paths = [os.fspath(p) for p, _ in dataset.samples]
        return _Listing(paths, [int(label) for _, label in dataset.samples], None)
    if _is_dataset_folder(dataset):
        return _folder_listing(dataset)
    if _is_subset(dataset):
        inner = _listing(dataset.dataset)
        if inner is None:
            return None
        indices = [int(i) for i in dataset.indices]
        return _Listing(
            [inner.paths[i] for i in indices], [inner.labels[i] for i in indices], inner.transform
        )
    if _is_concat(dataset):
        parts = [_listing(d) for d in dataset.datasets]
        if any(p is None for p in parts):
            return None
        listed = [p for p in parts if p is not None]
        transforms = {id(p.transform): p.transform for p in listed}
        if len(transforms) > 1:
            raise ValueError(
                "dataset: the ConcatDataset's parts carry different transforms; ferroloader "
                "runs one pipeline: pass it as Loader(transform=...) and none on the parts"
            )
        transform = next(iter(transforms.values()), None)
        return _Listing(
            [p for part in listed for p in part.paths],
            [label for part in listed for label in part.labels],
            transform,
        )
    if isinstance(dataset, (list, tuple)):
        return _sequence_listing(dataset)
    return None


def _is_dataset_folder(dataset: Any) -> bool:
    try:
        from torchvision.datasets import DatasetFolder  # type: ignore[import-untyped]
    except ImportError:
        return False
    return isinstance(dataset, DatasetFolder)


def _is_subset(dataset: Any) -> bool:
    return type(dataset).__name__ == "Subset" and hasattr(dataset, "indices") and hasattr(
        dataset, "dataset"
    )


def _is_concat(dataset: Any) -> bool:
    return hasattr(dataset, "datasets") and hasattr(dataset, "cumulative_sizes")


def _folder_listing(dataset: Any) -> _Listing:
    """torchvision's ``DatasetFolder``: its ``samples``, when its loader is torchvision's own
    (decoding natively gives the same pixels)."""
    from torchvision.datasets import folder

    default_loaders = {folder.default_loader, folder.pil_loader}
    accimage = getattr(folder, "accimage_loader", None)
    if accimage is not None:
        default_loaders.add(accimage)
    if dataset.loader not in default_loaders:
        raise ValueError(
            f"dataset: {type(dataset).__name__} has a custom loader {dataset.loader!r}, which "
            "ferroloader would not run (it decodes natively); give a dataset whose items are "
            "(path or bytes, label), or torchvision's default loader"
        )
    if getattr(dataset, "target_transform", None) is not None:
        raise ValueError(
            f"dataset: {type(dataset).__name__}.target_transform is not supported (labels are "
            "the class indices); map the labels after loading instead"
        )
    paths = [os.fspath(p) for p, _ in dataset.samples]
    labels = [int(label) for _, label in dataset.samples]
    return _Listing(paths, labels, getattr(dataset, "transform", None))


def _sequence_listing(items: Sequence[Any]) -> Optional[_Listing]:
    """A sequence of ``(path, label)``; ``None`` for ``(bytes, label)`` (used through the
    protocol, without copying the bytes)."""
    if len(items) and _is_bytes(_pair(items, 0)[0]):
        return None
    paths: List[str] = []
    labels: List[int] = []
    for i in range(len(items)):
        data, label = _pair(items, i)
        if not isinstance(data, (str, os.PathLike)):
            raise TypeError(
                f"dataset[{i}]: expected (path, label) like the items before it, got "
                f"({type(data).__name__}, ...)"
            )
        paths.append(os.fspath(data))
        labels.append(_label(i, label))
    return _Listing(paths, labels, None)


def _pair(items: Sequence[Any], i: int) -> Tuple[Any, Any]:
    item = items[i]
    if not isinstance(item, (tuple, list)) or len(item) != 2:
        raise TypeError(f"dataset[{i}]: expected a (path or bytes, label) pair, got {item!r:.80}")
    return item[0], item[1]


def _label(i: int, label: Any) -> int:
    if isinstance(label, bool) or not isinstance(label, numbers.Integral):
        index = getattr(label, "__index__", None)
        if index is None:
            raise TypeError(f"dataset[{i}]: the label must be an integer, got {label!r:.80}")
        return int(index())
    return int(label)


def _is_bytes(data: Any) -> bool:
    return isinstance(data, (bytes, bytearray))


def _check_attached_transforms(dataset: Any) -> None:
    """A protocol dataset with a transform of its own would expect it to run: refuse."""
    for name in ("transform", "target_transform"):
        if getattr(dataset, name, None) is not None:
            raise ValueError(
                f"dataset: {type(dataset).__name__}.{name} is set, but items are read as "
                "(path or bytes, label) and decoded natively; pass the transform to "
                "Loader(transform=...) instead"
            )

