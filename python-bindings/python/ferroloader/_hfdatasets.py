"""A Hugging Face ``datasets.Dataset`` as the native loader's source.

Its ``Image()`` column is stored in Arrow as ``struct<bytes, path>``: each row's encoded bytes
(embedded, as the Hub's datasets are), or the path of a local file where it has none (a dataset
built from files). :func:`table_of` hands the workers the Arrow buffers themselves (memory-mapped
from the cache, or in memory) with each row's range in them, so images are read where they lie,
without the GIL and without a copy; the dataset's row selection (``select``, ``shuffle``,
``filter``, ``train_test_split``: its indices mapping) and a torch ``Subset``'s indices are
applied to the ranges.

Must not decode images, copy the table's data buffers, or import ``datasets`` (a dataset of its
kind comes with the module loaded), but in :func:`load_saved`, which opens a directory
``save_to_disk`` wrote.
"""

from __future__ import annotations

import importlib
import io
import os
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ferroloader._native import EncodedTable
from ferroloader._targets import TargetTable

__all__ = [
    "CollateRows",
    "TransformImages",
    "check_not_splits",
    "check_not_streaming",
    "dataloader_form",
    "image_column",
    "is_hugging_face",
    "label_column",
    "load_saved",
    "member_names",
    "saved_dataset",
    "table_of",
]

#: The buffer index of a null row, as ``EncodedTable`` reads it.
_NULL = np.uint32(0xFFFF_FFFF)

#: One column as ``EncodedTable`` takes it: the buffers, and per row the buffer's index, the
#: start and the length of its bytes.
_Column = Tuple[List[Any], np.ndarray, np.ndarray, np.ndarray]

#: How many images :func:`_grayscale` opens to tell the dataset's mode.
_MODE_PEEKS = 16

#: Label column names taken when no column is a ``ClassLabel``, as the Hub's datasets name them.
_LABEL_NAMES = ("label", "labels")


def is_hugging_face(dataset: Any) -> bool:
    """Whether ``dataset`` is a (map-style) Hugging Face ``datasets.Dataset``."""
    hf = sys.modules.get("datasets")
    return hf is not None and isinstance(dataset, hf.Dataset)


def check_not_splits(dataset: Any) -> None:
    """Refuses a ``datasets.DatasetDict`` (what ``load_dataset`` returns without ``split=``),
    naming its splits, as it is a dict of datasets, not one."""
    hf = sys.modules.get("datasets")
    if hf is not None and isinstance(dataset, (hf.DatasetDict, hf.IterableDatasetDict)):
        raise TypeError(
            f"dataset: a {type(dataset).__name__} of the splits {list(dataset)}; pass one of "
            f"them, e.g. dataset[{next(iter(dataset), 'train')!r}] (or load_dataset(..., "
            "split=...))"
        )


def check_not_streaming(dataset: Any) -> None:
    """Refuses a streaming ``datasets.IterableDataset`` where its images are to be read
    natively (``transform=`` given): it has no rows to index, only a stream."""
    hf = sys.modules.get("datasets")
    if hf is not None and isinstance(dataset, hf.IterableDataset):
        raise TypeError(
            "dataset: a streaming datasets.IterableDataset has no rows to read natively; load "
            "it without streaming=True (a Dataset), or pass no transform= and set its "
            "transform with dataset.map/with_format to run it in Python as DataLoader does"
        )


def table_of(
    dataset: Any,
    rows: Optional[Sequence[int]] = None,
    columns: Optional[Tuple[str, str]] = None,
    mode: Optional[str] = None,
    exif_transpose: bool = True,
    targets: bool = False,
) -> EncodedTable:
    """``dataset``'s images and labels as an ``EncodedTable``: row ``i`` is ``dataset[i]``, or
    ``dataset[rows[i]]`` where ``rows`` is given (a torch ``Subset``'s indices).

    ``columns``: ``(image column, label column)`` where the caller knows them (timm's reader
    names them), else chosen as below. ``mode``: ``"RGB"`` where the caller converts every
    image to RGB (timm's ``ImageDataset``), else judged from the images as below.
    ``exif_transpose``: whether images are turned upright per their EXIF orientation, as
    ``datasets``' ``Image.decode_example`` turns them (timm's reader, which opens the bytes
    itself, does not).

    The image column is the dataset's one ``Image()`` feature; the label column its one
    ``ClassLabel`` feature, else an integer column named ``label`` or ``labels``, else, with
    ``targets``, a column of any other type so named (a multi-label ``Sequence(ClassLabel)``,
    floats, strings): each row's label is then its table row, which :func:`targets_of` maps
    to the row's value. Images are
    decoded to RGB, as torchvision's ``ImageFolder`` decodes them, but for a dataset of
    grayscale images (:func:`_grayscale`), which comes out with one channel. Raises
    ``ValueError`` naming what cannot be read natively and why: no such column or several, a
    format transform set on the dataset (``set_transform``/``with_transform``: the loader's
    ``transform=`` replaces it), an ``Image(mode=...)`` other than RGB, null labels, rows
    stored as remote URLs.
    """
    import pyarrow as pa  # type: ignore[import-untyped]
    import pyarrow.compute  # type: ignore[import-untyped]  # noqa: F401  (pa.compute)

    hf = sys.modules["datasets"]
    origin = (table_of, (dataset, rows, columns, mode, exif_transpose))
    image_column, label_column = _columns(dataset, hf) if columns is None else columns
    for column in (image_column, label_column):
        if column not in dataset.features:
            raise ValueError(f"dataset: no column {column!r} among {list(dataset.features)}")
    if not isinstance(dataset.features[image_column], hf.Image):
        raise ValueError(
            f"dataset: column {image_column!r} is {dataset.features[image_column]}, not Image()"
        )
    kind = dataset.format.get("type")
    if kind == "custom":
        raise ValueError(
            "dataset: the Dataset has a transform set (set_transform/with_transform), but its "
            "images are decoded natively and transformed by Loader(transform=...); make the "
            "loader from the dataset without it (dataset.with_format(None)), or pass no "
            "transform= to run the dataset in Python as DataLoader does"
        )
    if mode is None:
        mode = dataset.features[image_column].mode
        if mode not in (None, "RGB"):
            raise ValueError(
                f"dataset: column {image_column!r} is Image(mode={mode!r}), which converts each "
                "image to that mode; ferroloader decodes images to RGB (as torchvision's "
                "ImageFolder does)"
            )
    arrow = dataset.data.table
    selected = _selected_rows(dataset, rows)
    images, paths, remote = _image_columns(arrow.column(image_column), image_column, pa)
    _check_local_paths(images, remote, selected, image_column)
    column = arrow.column(label_column)
    if targets and not pa.types.is_integer(column.type):
        labels = np.arange(len(column), dtype=np.int64)
    else:
        labels = _labels(column, label_column, pa)
    if selected is not None:
        images, paths, labels = _take(images, selected), _take(paths, selected), labels[selected]
    split = dataset.split
    name = "dataset" if split is None else str(split)
    table = EncodedTable(images, paths, labels, name, exif_transpose=exif_transpose, origin=origin)
    return table.with_mode("L") if mode is None and _grayscale(table) else table


#: Leading bytes that tell an image file's format, and the extension a file of it takes.
_MAGIC = (
    (b"\xff\xd8\xff", "jpg"),
    (b"\x89PNG\r\n\x1a\n", "png"),
    (b"GIF87a", "gif"),
    (b"GIF89a", "gif"),
    (b"BM", "bmp"),
    (b"II*\x00", "tif"),
    (b"MM\x00*", "tif"),
)


def _extension(head: bytes) -> Optional[str]:
    """The extension of the image format ``head`` (a file's first bytes) starts, if known."""
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "webp"
    return next((ext for magic, ext in _MAGIC if head.startswith(magic)), None)


def targets_of(dataset: Any) -> Optional[TargetTable]:
    """The values of ``dataset``'s label column by table row, where they are not class indices
    (:func:`table_of` with ``targets``); ``None`` where they are."""
    column = dataset.data.table.column(_columns(dataset, sys.modules["datasets"])[1])
    import pyarrow as pa

    if pa.types.is_integer(column.type):
        return None
    return TargetTable(column.to_pylist())


def image_column(dataset: Any) -> str:
    """The image column :func:`table_of` reads of ``dataset``."""
    return _columns(dataset, sys.modules["datasets"])[0]


def label_column(dataset: Any) -> str:
    """The label column :func:`table_of` reads of ``dataset``."""
    return _columns(dataset, sys.modules["datasets"])[1]


def split_name(dataset: Any) -> str:
    """What a row of ``dataset`` is named after: its split (``train[3]``), else ``dataset``."""
    return "dataset" if dataset.split is None else str(dataset.split)


def member_names(dataset: Any) -> List[str]:
    """A file name for each row of ``dataset`` (in :func:`table_of`'s order), naming the row, for
    writing the rows as shard members: ``NAME[ROW].EXT`` for a row of embedded bytes, EXT told
    by the bytes' own format (else the stored file name's extension, else ``bin``: the bytes
    are written as they are and fail when decoded, as any bad file does), and ``NAME[ROW] PATH``
    for a row read from the local file ``PATH``. Reads 16 bytes of each row, no image."""
    import pyarrow.compute as pc

    image_column, _ = _columns(dataset, sys.modules["datasets"])
    heads: List[Optional[bytes]] = []
    paths: List[Optional[str]] = []
    for chunk in dataset.data.table.column(image_column).chunks:
        heads += pc.binary_slice(chunk.field("bytes"), 0, 16).to_pylist()
        paths += chunk.field("path").to_pylist()
    selected = _selected_rows(dataset, None)
    rows = range(len(heads)) if selected is None else selected.tolist()
    name = split_name(dataset)
    names = []
    for position, row in enumerate(rows):
        head, path = heads[row], paths[row]
        if head is None:
            if path is None:
                raise ValueError(
                    f"src: {name}[{position}] has no image: both its bytes and its path are null"
                )
            names.append(f"{name}[{position}] {path}")
            continue
        stored = None if path is None else path.rpartition(".")[2].lower() if "." in path else None
        ext = _extension(head) or (stored if stored and stored.isalnum() else "bin")
        names.append(f"{name}[{position}].{ext}")
    return names


def _grayscale(table: EncodedTable) -> bool:
    """Whether ``table``'s images are grayscale (Pillow's ``L``), going by up to
    :data:`_MODE_PEEKS` of them spread over the table, headers only: ``datasets`` hands
    ``Image()`` values over in their own mode, so torchvision's ``ToTensor`` makes one channel of
    such a dataset (MNIST on the Hub). One image of another mode (a few grayscale photos among
    colour ones, as in ImageNet) keeps RGB, as a DataLoader could not collate the mix."""
    from PIL import Image

    count = len(table)
    rows = sorted({int(i) for i in np.linspace(0, count - 1, min(count, _MODE_PEEKS))}) if count else []
    for row in rows:
        try:
            with Image.open(io.BytesIO(table[row][0])) as image:
                if image.mode != "L":
                    return False
        except Exception:
            # A sample that does not read is its own error when the workers reach it.
            return False
    return bool(rows)


def _columns(dataset: Any, hf: Any) -> Tuple[str, str]:
    """``(image column, label column)`` of ``dataset``, as :func:`table_of` chooses them."""
    features = dataset.features
    images = [name for name, f in features.items() if isinstance(f, hf.Image)]
    if len(images) != 1:
        found = "no Image() column" if not images else f"several Image() columns {images}"
        raise ValueError(
            f"dataset: {found} among {list(features)}; ferroloader reads the one column of "
            "encoded images (cast one with dataset.cast_column(name, datasets.Image()), or "
            "keep one with dataset.select_columns([image, label]))"
        )
    classes = [name for name, f in features.items() if isinstance(f, hf.ClassLabel)]
    if len(classes) > 1:
        named = [name for name in classes if name in _LABEL_NAMES]
        classes = named[:1] if len(named) == 1 else classes
    if not classes:
        classes = [
            name
            for name in _LABEL_NAMES
            if isinstance(features.get(name), hf.Value) and "int" in features[name].dtype
        ][:1]
    if not classes:
        # Targets that are not class indices (table_of's `targets`).
        classes = [name for name in _LABEL_NAMES if name in features][:1]
    if len(classes) != 1:
        found = "no ClassLabel column" if not classes else f"several ClassLabel columns {classes}"
        raise ValueError(
            f"dataset: {found} (nor a 'label' or 'labels' column) among {list(features)}; "
            "ferroloader's samples are (image, target) (keep one with "
            "dataset.select_columns([image, label]))"
        )
    return images[0], classes[0]


def _selected_rows(dataset: Any, rows: Optional[Sequence[int]]) -> Optional[np.ndarray]:
    """The table rows ``dataset``'s indices (its indices mapping, then ``rows``) select, or
    ``None`` for all of them in order."""
    mapping = dataset._indices
    selected = None if mapping is None else mapping.column(0).to_numpy().astype(np.int64)
    if rows is None:
        return selected
    picked = np.asarray([int(i) for i in rows], dtype=np.int64)
    size = len(dataset)
    bad = (picked < -size) | (picked >= size)
    if bad.any():
        raise IndexError(
            f"dataset: index {int(picked[np.argmax(bad)])} is out of range for a Dataset of "
            f"{size} rows"
        )
    picked = np.where(picked < 0, picked + size, picked)
    return picked if selected is None else selected[picked]


def _image_columns(column: Any, name: str, pa: Any) -> Tuple[_Column, _Column, np.ndarray]:
    """The ``bytes`` and ``path`` fields of an ``Image()`` column, every row of the table, and
    which rows' paths are URLs."""
    kind = column.type
    fields = [kind.field(i).name for i in range(kind.num_fields)] if pa.types.is_struct(kind) else []
    if "bytes" not in fields or "path" not in fields:
        raise ValueError(f"dataset: column {name!r} is stored as {kind}, not struct<bytes, path>")
    chunks = [chunk.flatten() for chunk in column.chunks]
    index = {field: fields.index(field) for field in ("bytes", "path")}
    paths = [c[index["path"]] for c in chunks]
    remote = [
        pa.compute.match_substring(p, "://").fill_null(False).to_numpy(zero_copy_only=False)
        for p in paths
    ]
    return (
        _byte_ranges([c[index["bytes"]] for c in chunks], f"{name}.bytes", pa),
        _byte_ranges(paths, f"{name}.path", pa),
        np.concatenate(remote) if remote else np.zeros(0, dtype=bool),
    )


def _byte_ranges(arrays: List[Any], name: str, pa: Any) -> _Column:
    """Arrow binary or string arrays (one per chunk) as one column of ranges in their data
    buffers, which are handed on as they are."""
    buffers: List[Any] = []
    which: List[np.ndarray] = []
    starts: List[np.ndarray] = []
    lengths: List[np.ndarray] = []
    for k, array in enumerate(arrays):
        kind = array.type
        if pa.types.is_binary(kind) or pa.types.is_string(kind):
            width: Any = np.int32
        elif pa.types.is_large_binary(kind) or pa.types.is_large_string(kind):
            width = np.int64
        else:
            raise ValueError(f"dataset: {name} is stored as {kind}, not binary or string")
        n = len(array)
        _, offsets_buffer, data = array.buffers()[:3]
        buffers.append(b"" if data is None else data)
        if n == 0:
            continue
        offsets = np.frombuffer(offsets_buffer, dtype=width, count=array.offset + n + 1)
        offsets = offsets[array.offset :].astype(np.int64)
        valid = array.is_valid().to_numpy(zero_copy_only=False)
        which.append(np.where(valid, np.uint32(k), _NULL).astype(np.uint32))
        starts.append(offsets[:-1])
        lengths.append(np.diff(offsets))
    if not which:
        empty = np.zeros(0, dtype=np.uint64)
        return buffers, np.zeros(0, dtype=np.uint32), empty, empty
    return (
        buffers,
        np.concatenate(which),
        np.concatenate(starts).astype(np.uint64),
        np.concatenate(lengths).astype(np.uint64),
    )


def _check_local_paths(
    images: _Column, remote: np.ndarray, selected: Optional[np.ndarray], name: str
) -> None:
    """Rows without bytes are read from their path: refuse one that is a URL (the Hub's
    ``hf://``, ``https://``, an archive's ``zip://...::``), which ``datasets`` downloads as it
    reads it."""
    refused = remote & (images[1] == _NULL)
    if selected is not None:
        refused = refused[selected]
    if refused.any():
        row = int(np.argmax(refused))
        raise ValueError(
            f"dataset: row {row} of column {name!r} is a remote file, not bytes or a local "
            "path; ferroloader reads embedded bytes and local files (load the dataset without "
            "streaming, so that datasets downloads it)"
        )


def _labels(column: Any, name: str, pa: Any) -> np.ndarray:
    """The label column as int64, every row of the table."""
    if not pa.types.is_integer(column.type):
        raise ValueError(f"dataset: label column {name!r} is {column.type}, not integers")
    if column.null_count:
        raise ValueError(
            f"dataset: label column {name!r} has {column.null_count} null labels; ferroloader's "
            "samples are (image, class index)"
        )
    return np.asarray(column.to_numpy(), dtype=np.int64)


def _take(column: _Column, rows: np.ndarray) -> _Column:
    buffers, which, starts, lengths = column
    return buffers, which[rows], starts[rows], lengths[rows]


class TransformImages:
    """``with_transform``'s function as Hugging Face's image-classification examples write it:
    the torchvision transform on each decoded image of ``column``, converted to RGB (a class,
    so DataLoader's worker processes can pickle it)."""

    def __init__(self, transform: Any, column: str) -> None:
        self.transform = transform
        self.column = column

    def __call__(self, batch: Dict[str, List[Any]]) -> Dict[str, List[Any]]:
        batch[self.column] = [self.transform(image.convert("RGB")) for image in batch[self.column]]
        return batch


class CollateRows:
    """DataLoader's ``collate_fn`` for those rows: ``(images stacked, labels as int64)``, as
    the native loader's batches are."""

    def __init__(self, image_column: str, label_column: str) -> None:
        self.image_column = image_column
        self.label_column = label_column

    def __call__(self, rows: List[Dict[str, Any]]) -> Tuple[Any, Any]:
        import torch

        images = torch.stack([row[self.image_column] for row in rows])
        return images, torch.tensor([row[self.label_column] for row in rows], dtype=torch.int64)


def dataloader_form(dataset: Any, transform: Any) -> Tuple[Any, CollateRows]:
    """``(dataset with the transform set, collate_fn)``: how a DataLoader user runs a torchvision
    transform over a Hugging Face dataset, on the columns :func:`table_of` reads natively."""
    image_column, label_column = _columns(dataset, sys.modules["datasets"])
    return (
        dataset.with_transform(TransformImages(transform, image_column)),
        CollateRows(image_column, label_column),
    )


def saved_dataset(data: Path) -> bool:
    """Whether ``data`` is a directory a Hugging Face dataset's ``save_to_disk`` wrote (its
    ``state.json`` and ``dataset_info.json``): the tools (``compare``, ``profile``, ``advise``,
    ``shard``) then read that ``Dataset``."""
    return (data / "state.json").is_file() and (data / "dataset_info.json").is_file()


def load_saved(data: Path) -> Any:
    """The ``datasets.Dataset`` :func:`saved_dataset` found at ``data``."""
    try:
        datasets = importlib.import_module("datasets")
    except ImportError as e:
        raise ImportError(
            f"{data} is a saved Hugging Face dataset; reading it needs datasets (pip install "
            "datasets)"
        ) from e
    return datasets.load_from_disk(os.fspath(data))
