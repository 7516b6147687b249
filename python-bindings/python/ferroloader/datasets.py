"""The datasets a ``torch.utils.data.DataLoader`` user already has, as the loader's source.

``as_source(dataset)`` turns what it can list into a native ``PathList`` (paths and labels only,
read by the workers without the GIL): torchvision's ``ImageFolder``/``DatasetFolder``, a
sequence of ``(path, label)``, and ``Subset``/``random_split``/``ConcatDataset`` of those.
So do torchvision's file-based classification datasets (Food101, Flowers102, OxfordIIITPet,
StanfordCars, DTD, FGVCAircraft, SUN397, GTSRB, Places365, ...: :data:`_FILE_DATASETS`).
torchvision's datasets that hold decoded images in one array (CIFAR-10/100, SVHN, STL-10, and
the one-channel MNIST, FashionMNIST, KMNIST, EMNIST and QMNIST) and their ``Subset``s become a
native ``ImageArray`` (the pixels copied once). A Hugging Face ``datasets.Dataset`` with an
``Image()`` column (and a ``Subset`` of one) becomes a native ``EncodedTable``: its Arrow
buffers read where they lie (``ferroloader._hfdatasets``). A training script's own dataset
class given with no ``transform=`` whose ``__getitem__`` opens, converts and transforms one
image (``ferroloader._getitem``: traced, nothing decoded) is read through the protocol below
as its ``TracedItems``, as are its ``Subset``s and ``ConcatDataset``s. Anything else with
``__getitem__`` and ``__len__`` is used through the protocol, asked for each sample by the
worker that reads it. Must not read image files (the workers do), nor run a dataset's ``__getitem__`` where it
reads a dataset natively.

The protocol, for listings that come from a manifest or a database: ``dataset[i]`` returns
``(path, target)`` (a ``str`` or ``os.PathLike``) or ``(data, target)`` (``bytes`` or
``bytearray`` of an encoded image). Each call holds the GIL, which the training loop then waits
for; a path is read without it.

Targets are class indices (integers), carried natively as each sample's label, unless the first
item's is something else (a multi-hot tensor, a float, a tuple, a string): then every sample's
native label is its position and :class:`TargetTable` maps it back to the target the dataset
gave, collated as DataLoader collates it. What reads labels as classes (batch mixing, shards)
sees the table and does not take positions for classes.
"""

from __future__ import annotations

import numbers
import os
import sys
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple, Union, cast

import numpy as np

from ferroloader import _hfdatasets
from ferroloader._getitem import (
    GIL_BUDGET_S,
    Layout,
    TracedItems,
    from_library,
    item_name,
    loader_opens,
    sets_up_workers,
    steps_first,
    trace_getitem,
)
from ferroloader._hfformat import collate_reason, formatted_rows, unkept_column
from ferroloader._targets import TargetTable
from ferroloader._native import EncodedTable, FileList, ImageArray, ImageFolder, PathList, WebDataset

__all__ = ["Carried", "Source", "TargetTable", "as_source", "python_reason", "reading", "sample_layout"]

#: What the native loader takes.
Source = Union[ImageFolder, FileList, PathList, ImageArray, EncodedTable, WebDataset, Any]

_NATIVE = (ImageFolder, FileList, PathList)


class _Listing:
    """Paths and labels of a listable dataset, and the transforms it carries (if any).

    ``targets``: each sample's target as the dataset holds it, where they are not all class
    indices (``labels`` are then ignored); ``None`` where ``labels`` are the targets."""

    def __init__(
        self,
        paths: List[str],
        labels: List[int],
        transform: Any,
        target_transform: Any = None,
        targets: Optional[List[Any]] = None,
    ) -> None:
        self.paths = paths
        self.labels = labels
        self.transform = transform
        self.target_transform = target_transform
        self.targets = targets

    def target_objects(self) -> List[Any]:
        """Each sample's target: ``targets``, else the class indices."""
        return list(self.labels) if self.targets is None else self.targets


class RecordedTargets:
    """A protocol dataset whose first target is not a class index, as the native loader reads
    it: ``dataset[i]`` is ``(data, i)``, the target the dataset gave kept in :attr:`table`
    before the sample is read (so before the batch holding it is delivered)."""

    def __init__(self, dataset: Any) -> None:
        self.dataset = dataset
        self.table = TargetTable([None] * len(dataset))

    def __len__(self) -> int:
        return len(self.table.targets)

    def __getitem__(self, index: int) -> Tuple[Any, int]:
        data, target = _pair(self.dataset, index)
        self.table.targets[index] = target
        return data, index

    @property
    def exif_transpose(self) -> bool:
        """The dataset's (a traced one turns its images upright or not)."""
        return bool(getattr(self.dataset, "exif_transpose", False))

    def ferroloader_item_name(self, index: int) -> Optional[str]:
        """The dataset's name for its item ``index`` in the loader's errors, if it gives one."""
        return item_name(self.dataset, index)


class Carried(NamedTuple):
    """A dataset as the native loader takes it, with what torchvision's dataset would have
    applied to each sample: ``transform`` to the image (the loader converts it) and
    ``target_transform`` to the class index (the loader calls it on each label, as the
    dataset's ``__getitem__`` would); ``None`` where the dataset sets none."""

    source: Source
    transform: Any
    target_transform: Optional[Callable[[int], Any]]


def as_source(dataset: Any) -> Carried:
    """The dataset as the native loader takes it, and the transforms set on the dataset itself
    (torchvision's ``ImageFolder(root, transform=..., target_transform=...)``).

    Raises ``TypeError``/``ValueError`` naming what cannot be honoured and why.
    """
    if isinstance(dataset, (*_NATIVE, ImageArray, EncodedTable, WebDataset)):
        # Shards are read natively; a Subset of them cannot be listed as paths.
        return Carried(dataset, None, None)
    _hfdatasets.check_not_splits(dataset)
    _hfdatasets.check_not_streaming(dataset)
    if isinstance(dataset, (str, bytes, os.PathLike)):
        raise TypeError(
            f"dataset: got the path {dataset!r}; for a folder of class folders pass "
            "ferroloader.ImageFolder(path), for a listing ferroloader.FileList(path)"
        )
    arrays = _image_array(dataset)
    if arrays is not None:
        return arrays
    hugging_face = _hugging_face_rows(dataset)
    if hugging_face is not None:
        hf, rows = hugging_face
        return Carried(_hfdatasets.table_of(hf, rows, targets=True), None, _hfdatasets.targets_of(hf))
    timm_table = _timm_hugging_face(dataset)
    if timm_table is not None:
        return timm_table
    listing = _listing(dataset)
    if listing is not None:
        return _listed(listing)
    if hasattr(dataset, "__getitem__") and hasattr(dataset, "__len__"):
        _check_attached_transforms(dataset)
        return _protocol(dataset)
    data = sys.modules.get("torch.utils.data")
    if data is not None and isinstance(dataset, data.IterableDataset):
        raise TypeError(
            f"dataset: {type(dataset).__name__} is an IterableDataset, whose own iterator makes "
            "the samples: it runs in Python as DataLoader runs it when given with no transform= "
            "(its samples transformed by its own code); to decode natively, give the loader its "
            "(path or bytes, target) pairs as a list, or its tar shards as fl.WebDataset"
        )
    raise TypeError(
        "dataset: expected a ferroloader or torchvision dataset, a sequence of (path, label), "
        "or a map-style dataset whose items are (path or bytes, label); got "
        f"{type(dataset).__name__}"
    )


def python_reason(dataset: Any, collate_fn: Any = None) -> Optional[str]:
    """Why ``dataset``, given to the loader with no ``transform=`` (and ``collate_fn``, ``None``
    the default), runs in Python as DataLoader runs it (``ferroloader._pydataset``): its samples
    are its own code's. ``None`` where it is read natively (it carries its transform), and where
    it is not a map-style dataset at all (:func:`as_source` says what is wrong)."""
    return _judged(dataset, collate_fn=collate_fn)[0]


def reading(
    dataset: Any,
    transform_given: bool,
    worker_init_fn: Any = None,
    collate_fn: Any = None,
    unbatched: bool = False,
) -> Union[Carried, str]:
    """How the loader reads ``dataset``: natively, as :func:`as_source` gives it, or, given with
    no ``transform=``, in Python as DataLoader runs it (the reason, :func:`python_reason`). One
    pass: what judging the dataset read (a listing, an array's pixels, an Arrow table) is the
    source, not read again. ``collate_fn`` (``None``: the default) and ``unbatched``
    (``batch_size=None``): how the loader hands the samples out, which must not need what the
    native loader does not make of them.

    Raises as :func:`as_source` does."""
    if not transform_given:
        reason, carried = _judged(dataset, worker_init_fn, collate_fn, unbatched)
        if reason is not None:
            return reason
        if carried is not None:
            return carried
    return as_source(dataset)


def _judged(
    dataset: Any, worker_init_fn: Any = None, collate_fn: Any = None, unbatched: bool = False
) -> Tuple[Optional[str], Optional[Carried]]:
    """:func:`python_reason`'s answer, and the dataset as the native loader takes it where
    finding the answer made it (``None`` where it did not: :func:`as_source` makes it)."""
    if isinstance(dataset, (*_NATIVE, ImageArray, EncodedTable, WebDataset, str, bytes, os.PathLike)):
        return None, None
    try:
        _hfdatasets.check_not_splits(dataset)
    except TypeError:
        return None, None  # as_source says what is wrong
    hugging_face = _hugging_face_rows(dataset)
    if hugging_face is not None:
        return _formatted(*hugging_face, worker_init_fn, collate_fn, unbatched)
    data = sys.modules.get("torch.utils.data")  # an IterableDataset comes with torch loaded
    if data is not None and isinstance(dataset, data.IterableDataset):
        return f"{type(dataset).__name__} is an IterableDataset: its own iterator makes the samples", None
    if not (hasattr(dataset, "__getitem__") and hasattr(dataset, "__len__")):
        return None, None
    try:
        arrays = _image_array(dataset) or _timm_hugging_face(dataset)
        listing = None if arrays is not None else _listing(dataset)
    except (TypeError, ValueError) as e:
        # What the native reading refuses (a custom loader, a joint transforms=, items that are
        # not (path, label)...) is the dataset's own code to run, unless it traces.
        return _traced(dataset, str(e).removeprefix("dataset: "), worker_init_fn)
    if arrays is not None:
        if arrays.transform is None:
            return f"{type(dataset).__name__} has no transform", None
        return None, arrays
    if listing is None:
        return _traced(dataset, f"{type(dataset).__name__}.__getitem__ makes its samples", worker_init_fn)
    if listing.transform is None:
        return f"{type(dataset).__name__} has no transform", None
    return None, _listed(listing)


def _traced(dataset: Any, reason: str, worker_init_fn: Any) -> Tuple[Optional[str], Optional[Carried]]:
    """The user's own dataset class read natively where its ``__getitem__`` opens, converts to
    RGB and transforms one image (``_getitem.trace_getitem``), quickly; else ``reason``, and why
    not. A library's ``__getitem__`` is not traced (its reasons stand), nor a dataset that a
    ``worker_init_fn`` sets up in each worker process."""
    if sets_up_workers(worker_init_fn):
        return f"{reason}, and the worker_init_fn sets up each worker's copy (get_worker_info)", None
    found = _traced_items(dataset)
    if isinstance(found, str):
        return (reason if not found else f"{reason}: it {found}"), None
    items, transform = found
    return None, _carried_items(items, transform)


def _carried_items(items: TracedItems, transform: Any) -> Carried:
    """Traced items as the native loader takes them, their targets recorded as they are read
    where they are not class indices (:func:`_protocol`)."""
    source = _protocol(items).source
    table = source.table if isinstance(source, RecordedTargets) else None
    return Carried(source, transform, table)


def _formatted(
    hf: Any, rows: Optional[List[int]], worker_init_fn: Any, collate_fn: Any, unbatched: bool
) -> Tuple[Optional[str], Optional[Carried]]:
    """A Hugging Face Dataset given with no ``transform=`` (``hf``, its ``rows``), read natively
    where its format transform traces (``_hfformat``); else why it runs in Python."""
    made = formatted_rows(hf)
    if made == "":
        return (
            "a Hugging Face Dataset's items are its own (dicts of decoded images); pass "
            "transform= to the loader to decode its images natively"
        ), None
    reason = "the Hugging Face Dataset's with_transform function makes its samples"
    if isinstance(made, str):
        return f"{reason}: it {made}", None
    if sets_up_workers(worker_init_fn):
        return f"{reason}, and the worker_init_fn sets up each worker's copy (get_worker_info)", None
    found = _checked_trace(made)
    if isinstance(found, str):
        return f"{reason}: it {found}", None
    items, transform = found
    if rows is not None:
        items = items.subset(rows)
    image_key = items.traced.layout.slot
    try:
        first = items[0][1] if len(items) else None
    except TypeError as e:  # a Subset's first row, made otherwise than the dataset's
        return f"{reason}: {e}", None
    unkept = unkept_column(first) if isinstance(first, dict) else None
    if unkept is not None and isinstance(first, dict):
        if unbatched:
            return (
                f"{reason}, and its samples, handed out as they are (batch_size=None), keep the "
                f"{unkept!r} column's decoded images"
            ), None
        if collate_fn is None:
            return (
                f"{reason}, and its samples keep the {unkept!r} column's decoded images, which "
                "DataLoader's default collate_fn does not batch"
            ), None
        why = collate_reason(collate_fn, first, image_key, unkept)
        if why is not None:
            return f"{reason}, and {why}", None
    return None, _carried_items(items, transform)


def _traced_items(dataset: Any) -> Union[Tuple[TracedItems, Any], str]:
    """The traced items of ``dataset`` (a ``Subset`` of one too: ``random_split``'s) and the
    transform the loader runs for them, or why not (``""``: a library's ``__getitem__``, not
    traced)."""
    if _is_subset(dataset):
        inner = _traced_items(dataset.dataset)
        if isinstance(inner, str):
            return inner
        items, transform = inner
        return items.subset([int(i) for i in dataset.indices]), transform
    if _is_concat(dataset):
        parts = [_traced_items(part) for part in dataset.datasets]
        why = next((p for p in parts if isinstance(p, str)), None)
        if why is not None:
            return why
        each = [cast(Tuple[TracedItems, Any], p) for p in parts]
        joined = TracedItems.concat([items for items, _ in each])
        return joined if isinstance(joined, str) else (joined, each[0][1])
    if from_library(getattr(type(dataset), "__getitem__", None)):
        return ""
    return _checked_trace(dataset)


def _checked_trace(dataset: Any) -> Union[Tuple[TracedItems, Any], str]:
    """``dataset``'s traced items and the transform the loader runs for them, where its
    ``__getitem__`` traces, holds the GIL briefly enough and its steps convert; else why not."""
    traced = trace_getitem(dataset)
    if isinstance(traced, str):
        return traced
    transform = steps_first(traced.transform, traced.steps)
    if isinstance(transform, str):
        return transform
    if traced.seconds > GIL_BUDGET_S:
        return (
            f"takes {traced.seconds * 1e3:.1f} ms without decoding, which native worker threads "
            "would wait for in turn (holding the GIL)"
        )
    return TracedItems(dataset, traced), transform


def sample_layout(source: Any) -> Optional[Layout]:
    """Where the image lies in the samples of a traced dataset (``_getitem.Layout``), when they
    are not ``(image, target)`` pairs; ``None`` for any other source."""
    items = source.dataset if isinstance(source, RecordedTargets) else source
    if isinstance(items, TracedItems) and not items.traced.layout.plain:
        return items.traced.layout
    return None


def _listed(listing: _Listing) -> Carried:
    if listing.targets is not None:
        positions = list(range(len(listing.paths)))
        return Carried(PathList(listing.paths, positions), listing.transform, TargetTable(listing.targets))
    return Carried(PathList(listing.paths, listing.labels), listing.transform, listing.target_transform)


def _protocol(dataset: Any) -> Carried:
    """A map-style dataset read through the protocol; its targets recorded as it is read where
    the first is not a class index (:class:`RecordedTargets`). Asks for ``dataset[0]`` once to
    tell."""
    if len(dataset) == 0 or _class_index(_pair(dataset, 0)[1]) is not None:
        return Carried(dataset, None, None)
    recorded = RecordedTargets(dataset)
    return Carried(recorded, None, recorded.table)


def _hugging_face_rows(dataset: Any) -> Optional[Tuple[Any, Optional[List[int]]]]:
    """``(Hugging Face Dataset, its rows)`` of such a dataset or of a torch ``Subset`` of one
    (``None``: all rows in order); ``None`` for anything else."""
    if _hfdatasets.is_hugging_face(dataset):
        return dataset, None
    if _is_subset(dataset):
        inner = _hugging_face_rows(dataset.dataset)
        if inner is None:
            return None
        hf, rows = inner
        picked = [int(i) for i in dataset.indices]
        return hf, picked if rows is None else [rows[i] for i in picked]
    return None


def _listing(dataset: Any) -> Optional[_Listing]:
    """The listing of ``dataset`` when it can be had without calling its ``__getitem__``."""
    if isinstance(dataset, _NATIVE):
        paths = [os.fspath(p) for p, _ in dataset.samples]
        return _Listing(paths, [int(label) for _, label in dataset.samples], None)
    if _is_dataset_folder(dataset):
        return _folder_listing(dataset)
    files = _file_dataset_listing(dataset)
    if files is not None:
        return files
    timm = _timm_folder_listing(dataset)
    if timm is not None:
        return timm
    if _is_subset(dataset):
        inner = _listing(dataset.dataset)
        if inner is None:
            return None
        indices = [int(i) for i in dataset.indices]
        return _Listing(
            [inner.paths[i] for i in indices],
            [inner.labels[i] for i in indices],
            inner.transform,
            inner.target_transform,
            None if inner.targets is None else [inner.targets[i] for i in indices],
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
        targets = {id(p.target_transform): p.target_transform for p in listed}
        if len(targets) > 1:
            raise ValueError(
                "dataset: the ConcatDataset's parts carry different target_transforms; "
                "ferroloader calls one on every label"
            )
        target_transform = next(iter(targets.values()), None)
        objects = None
        if any(p.targets is not None for p in listed):
            if target_transform is not None:
                raise ValueError(
                    "dataset: a ConcatDataset part's targets are not class indices, and another "
                    "part carries a target_transform, which takes class indices"
                )
            objects = [t for part in listed for t in part.target_objects()]
        return _Listing(
            [p for part in listed for p in part.paths],
            [label for part in listed for label in part.labels],
            next(iter(transforms.values()), None),
            target_transform,
            objects,
        )
    if isinstance(dataset, (list, tuple)):
        return _sequence_listing(dataset)
    return None


#: torchvision's classification datasets that open each file with the default loader (or
#: ``Image.open(path).convert("RGB")``, the same pixels), by class name: the attribute holding
#: the files and the one holding the labels, or ``None`` where the first holds (path, label)
#: pairs.
_FILE_DATASETS: Dict[str, Tuple[str, Optional[str]]] = {
    "Food101": ("_image_files", "_labels"),
    "Flowers102": ("_image_files", "_labels"),
    "DTD": ("_image_files", "_labels"),
    "FGVCAircraft": ("_image_files", "_labels"),
    "SUN397": ("_image_files", "_labels"),
    "CLEVRClassification": ("_image_files", "_labels"),
    "OxfordIIITPet": ("_images", "_labels"),
    "StanfordCars": ("_samples", None),
    "Imagenette": ("_samples", None),
    "RenderedSST2": ("_samples", None),
    "GTSRB": ("_samples", None),
    "Places365": ("imgs", None),
}


def _file_dataset_listing(dataset: Any) -> Optional[_Listing]:
    """One of torchvision's :data:`_FILE_DATASETS` as its paths and labels; ``None`` for
    anything else."""
    cls = _torchvision_class(dataset, _FILE_DATASETS)
    if cls is None:
        return None
    name = type(dataset).__name__
    files, labels_attr = _FILE_DATASETS[cls.__name__]
    loader = getattr(dataset, "loader", None)
    if loader is not None and not _is_default_loader(loader):
        raise ValueError(
            f"dataset: {name} has a custom loader {loader!r}, which ferroloader would not run (it "
            "decodes natively); use torchvision's default loader"
        )
    _check_joint_transforms(dataset, name)
    if cls.__name__ == "OxfordIIITPet":
        kinds = list(dataset._target_types)
        if kinds not in (["category"], ["binary-category"]):
            raise ValueError(
                f"dataset: {name}(target_types={kinds!r}): ferroloader's labels are one class "
                "index per image; use target_types='category' or 'binary-category'"
            )
        labels_attr = "_labels" if kinds == ["category"] else "_bin_labels"
    if labels_attr is None:
        pairs = list(getattr(dataset, files))
        paths = [os.fspath(p) for p, _ in pairs]
        raw_labels: List[Any] = [label for _, label in pairs]
    else:
        paths = [os.fspath(p) for p in getattr(dataset, files)]
        raw_labels = getattr(dataset, labels_attr) or []
    if len(raw_labels) != len(paths):
        raise ValueError(
            f"dataset: {name} has no class label for each image (this split is unlabelled); "
            "ferroloader's samples are (image, class index)"
        )
    return _Listing(
        paths,
        [_label(i, label) for i, label in enumerate(raw_labels)],
        dataset.transform,
        dataset.target_transform,
    )


def _timm_image_dataset(dataset: Any, reader: str) -> bool:
    """Whether ``dataset`` is timm's ``ImageDataset`` (what ``timm.data.create_dataset`` makes)
    reading through timm's reader class ``reader``, with the settings under which its
    ``__getitem__`` gives ``(image.convert("RGB"), class index)`` as the native reading does;
    raises ``ValueError`` naming a setting that does not."""
    module = sys.modules.get("timm.data.dataset")
    if module is None or not isinstance(dataset, module.ImageDataset):
        return False
    if type(dataset.reader).__name__ != reader or not type(dataset.reader).__module__.startswith("timm."):
        return False
    name = type(dataset).__name__
    if type(dataset).__getitem__ is not module.ImageDataset.__getitem__:
        raise ValueError(
            f"dataset: {name} overrides __getitem__ of timm's ImageDataset, which ferroloader "
            "reads natively (it would not run the override)"
        )
    if dataset.load_bytes or dataset.input_img_mode != "RGB" or dataset.additional_features:
        raise ValueError(
            f"dataset: timm's {name}(load_bytes={dataset.load_bytes}, input_img_mode="
            f"{dataset.input_img_mode!r}, additional_features={dataset.additional_features!r}): "
            "ferroloader's samples are (RGB image, class index); use the defaults"
        )
    return True


def _timm_folder_listing(dataset: Any) -> Optional[_Listing]:
    """timm's ``ImageDataset`` over a folder (``ReaderImageFolder``) as its paths and labels."""
    if not _timm_image_dataset(dataset, "ReaderImageFolder"):
        return None
    samples = dataset.reader.samples
    return _Listing(
        [os.fspath(path) for path, _ in samples],
        [_label(i, label) for i, (_, label) in enumerate(samples)],
        dataset.transform,
        dataset.target_transform,
    )


def _timm_hfds(dataset: Any) -> bool:
    """Whether ``dataset`` is timm's ``ImageDataset`` over a Hugging Face dataset
    (``ReaderHfds``, the ``hfds/`` names) with settings the native reading takes; raises
    ``ValueError`` naming one it does not."""
    if not _timm_image_dataset(dataset, "ReaderHfds"):
        return False
    reader = dataset.reader
    if reader.target_keys or reader.remap_class or reader.additional_features:
        raise ValueError(
            f"dataset: timm's ReaderHfds with several target keys, a class_map or "
            "additional_features: ferroloader's samples are (image, the label column's class index)"
        )
    return True


def timm_read_natively(dataset: Any) -> bool:
    """Whether ``dataset`` is a timm ``ImageDataset`` the loader reads natively (over a folder,
    or a Hugging Face dataset), judged from its settings alone: its listing is not read."""
    try:
        return _timm_image_dataset(dataset, "ReaderImageFolder") or _timm_hfds(dataset)
    except ValueError:
        return False


def _timm_hugging_face(dataset: Any) -> Optional[Carried]:
    """timm's ``ImageDataset`` over a Hugging Face dataset as an ``EncodedTable`` of its
    reader's image and label columns, converted to RGB as timm converts them."""
    if not _timm_hfds(dataset):
        return None
    reader = dataset.reader
    table = _hfdatasets.table_of(
        reader.dataset,
        columns=(reader.image_key, reader.label_key),
        mode="RGB",
        exif_transpose=False,
    )
    return Carried(table, dataset.transform, dataset.target_transform)


def _torchvision_class(dataset: Any, names: Dict[str, Any]) -> Optional[type]:
    """The torchvision dataset class among ``names`` that ``dataset`` is an instance of, or
    ``None``. An instance of a subclass that overrides ``__getitem__`` is refused: what it does
    with each item is unknown, and reading it natively would skip it."""
    try:
        import torchvision.datasets as tvd  # type: ignore[import-untyped]
    except ImportError:
        return None
    for name in names:
        cls = getattr(tvd, name, None)
        if cls is None or not isinstance(dataset, cls):
            continue
        if type(dataset).__getitem__ is not cls.__getitem__:
            raise ValueError(
                f"dataset: {type(dataset).__name__} overrides __getitem__ of torchvision's "
                f"{name}, which ferroloader reads natively (it would not run the override); give "
                "a dataset whose items are (path or bytes, label), or torchvision's class itself"
            )
        return cast(type, cls)
    return None


def _is_default_loader(loader: Any) -> bool:
    from torchvision.datasets import folder

    accimage = getattr(folder, "accimage_loader", None)
    return loader in {folder.default_loader, folder.pil_loader} or (accimage is not None and loader is accimage)


def _check_joint_transforms(dataset: Any, name: str) -> None:
    """A joint ``transforms=`` (image and target together) cannot be honoured: the transform
    runs on the image alone, natively, and the target transform on the label."""
    joint = getattr(dataset, "transforms", None)
    if joint is not None and type(joint).__name__ != "StandardTransform":
        raise ValueError(
            f"dataset: {name}(transforms=...) transforms the image and the target together, "
            "which ferroloader cannot split; pass transform= for the image instead"
        )


def _image_array(dataset: Any) -> Optional[Carried]:
    """torchvision's in-memory datasets (or a ``Subset`` of one) as an ``ImageArray``, with the
    transforms they carry; ``None`` for anything else."""
    found = _array_samples(dataset)
    if found is None:
        return None
    images, labels, name, transforms = found
    return Carried(ImageArray(images, labels.tolist(), name), *transforms)


def _array_samples(dataset: Any) -> Optional[Tuple[np.ndarray, np.ndarray, str, Tuple[Any, Any]]]:
    """``(images, labels, name, (transform, target_transform))`` of an in-memory dataset, the
    images ``(N, H, W, C)`` or ``(N, H, W)`` as the dataset's ``__getitem__`` hands them to PIL
    (a view where it can be: a ``Subset`` copies only its own images, and ``ImageArray`` copies
    them once more)."""
    if _is_subset(dataset):
        inner = _array_samples(dataset.dataset)
        if inner is None:
            return None
        images, labels, name, transforms = inner
        indices = np.asarray([int(i) for i in dataset.indices], dtype=np.int64)
        return images[indices], labels[indices], name, transforms
    kind = _array_dataset_kind(dataset)
    if kind is None:
        return None
    name = type(dataset).__name__
    _check_joint_transforms(dataset, name)
    images = np.asarray(dataset.data)
    if kind == "chw":
        # SVHN and STL-10 keep (N, 3, H, W) and transpose each image as they hand it to PIL.
        images = images.transpose(0, 2, 3, 1)
    if kind == "gray":
        if getattr(dataset, "compat", True) is False:
            raise ValueError(
                f"dataset: {name}(compat=False) gives each target as a row of values; ferroloader's "
                "labels are class indices (compat=True)"
            )
        # A torch tensor; QMNIST's targets are rows whose first value is the class.
        targets = np.asarray(dataset.targets)
        labels = targets[:, 0] if targets.ndim == 2 else targets
    else:
        labels = np.asarray([int(label) for label in (dataset.targets if kind == "hwc" else dataset.labels)])
    return images, labels.astype(np.int64), name, (dataset.transform, dataset.target_transform)


#: torchvision's datasets holding decoded images in ``data``, by class name: ``"hwc"`` for
#: CIFAR-10/100 (``(N, H, W, 3)``, labels in ``targets``), ``"chw"`` for SVHN and STL-10
#: (``(N, 3, H, W)``, labels in ``labels``), ``"gray"`` for the MNIST family (``(N, H, W)``,
#: handed to PIL as mode ``"L"``, labels in ``targets``). Subclasses (CIFAR100, FashionMNIST,
#: KMNIST, EMNIST) are found through their base; QMNIST has its own ``__getitem__``.
_ARRAY_DATASETS: Dict[str, str] = {
    "CIFAR100": "hwc",
    "CIFAR10": "hwc",
    "SVHN": "chw",
    "STL10": "chw",
    "QMNIST": "gray",
    "FashionMNIST": "gray",
    "KMNIST": "gray",
    "EMNIST": "gray",
    "MNIST": "gray",
}


def _array_dataset_kind(dataset: Any) -> Optional[str]:
    """How ``dataset`` holds its images (see :data:`_ARRAY_DATASETS`), or ``None``."""
    cls = _torchvision_class(dataset, _ARRAY_DATASETS)
    return None if cls is None else _ARRAY_DATASETS[cls.__name__]


def _is_dataset_folder(dataset: Any) -> bool:
    return _torchvision_class(dataset, {"DatasetFolder": None}) is not None


def _is_subset(dataset: Any) -> bool:
    return type(dataset).__name__ == "Subset" and hasattr(dataset, "indices") and hasattr(
        dataset, "dataset"
    )


def _is_concat(dataset: Any) -> bool:
    return hasattr(dataset, "datasets") and hasattr(dataset, "cumulative_sizes")


def _folder_listing(dataset: Any) -> _Listing:
    """torchvision's ``DatasetFolder``: its ``samples``, when its loader is torchvision's own
    (decoding natively gives the same pixels)."""
    transform = getattr(dataset, "transform", None)
    if not _is_default_loader(dataset.loader):
        # A loader that opens the file and converts it to RGB (a copy of torchvision's
        # pil_loader, most often) gives the pixels the native decode gives; one converting to
        # L, those of a Grayscale(1) first.
        opened = loader_opens(dataset.loader)
        made = transform if isinstance(opened, str) or transform is None else steps_first(transform, opened.steps)
        why = opened if isinstance(opened, str) else made if isinstance(made, str) else None
        if why is not None:
            raise ValueError(
                f"dataset: {type(dataset).__name__} has a custom loader {dataset.loader!r}, which "
                f"ferroloader would not run (it decodes natively, and the loader {why}); give a "
                "dataset whose items are (path or bytes, label), or torchvision's default loader"
            )
        transform = made
    paths = [os.fspath(p) for p, _ in dataset.samples]
    labels = [int(label) for _, label in dataset.samples]
    return _Listing(paths, labels, transform, getattr(dataset, "target_transform", None))


def _sequence_listing(items: Sequence[Any]) -> Optional[_Listing]:
    """A sequence of ``(path, target)``; ``None`` for ``(bytes, target)`` (used through the
    protocol, without copying the bytes). Targets that are not all class indices are kept as
    they are (``_Listing.targets``)."""
    if len(items) and _is_bytes(_pair(items, 0)[0]):
        return None
    paths: List[str] = []
    targets: List[Any] = []
    for i in range(len(items)):
        data, target = _pair(items, i)
        if not isinstance(data, (str, os.PathLike)):
            raise TypeError(
                f"dataset[{i}]: expected (path, target) like the items before it, got "
                f"({type(data).__name__}, ...)"
            )
        paths.append(os.fspath(data))
        targets.append(target)
    labels = [_class_index(t) for t in targets]
    if all(label is not None for label in labels):
        return _Listing(paths, cast(List[int], labels), None)
    return _Listing(paths, [0] * len(paths), None, targets=targets)


def _pair(items: Any, i: int) -> Tuple[Any, Any]:
    item = items[i]
    if not isinstance(item, (tuple, list)) or len(item) != 2:
        raise TypeError(f"dataset[{i}]: expected a (path or bytes, target) pair, got {item!r:.80}")
    return item[0], item[1]


def _class_index(target: Any) -> Optional[int]:
    """``target`` as a class index: an integer, or what converts to one losslessly
    (``__index__``: numpy integers, a one-element integer tensor); ``None`` for anything else."""
    if isinstance(target, numbers.Integral) and not isinstance(target, bool):
        return int(target)
    index = getattr(target, "__index__", None)
    if index is None:
        return None
    try:
        return int(index())
    except TypeError:  # a tensor of several elements or of floats
        return None


def _label(i: int, label: Any) -> int:
    index = _class_index(label)
    if index is None:
        raise TypeError(f"dataset[{i}]: the label must be an integer, got {label!r:.80}")
    return index


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

