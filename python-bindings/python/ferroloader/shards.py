"""Writing a dataset as tar shards in the WebDataset layout, for streaming from object storage.

>>> report = fl.shard("/data/train", "/data/train-shards", shard_size="1GB", shuffle=True, seed=0)
>>> # upload /data/train-shards/* to a bucket; every rank streams its part

``DST/shard-000000.tar``, ``shard-000001.tar``, ... are POSIX tar files. Each sample is two
adjacent members: ``KEY.EXT`` (the source file's bytes, copied unchanged: EXT is its extension,
lowercased) and ``KEY.cls`` (the label in ASCII decimal). KEY is the sample's position in the
written order and the file's stem, with no dot (``000123_n01440764_10026``). A shard closes
before the sample that would take it past ``shard_size`` bytes or ``max_samples_per_shard``
samples. ``DST/index.json`` lists every shard's samples with the offset and size of each image
inside its tar (one range request reads one sample), the sample count and, for an ImageFolder,
the class names; it is written once every shard is.

Order: the source's (an ImageFolder's is torchvision's, sorted by class) unless ``shuffle``:
then a permutation drawn from ``seed``. Shuffle when writing for streaming: a streaming reader
shuffles shards and then samples within a bounded buffer only, so shards written class by class
hand each rank long runs of one class.

Resumable: each shard is written as ``.partial`` and renamed when whole, and
``DST/shard-manifest.jsonl`` records the settings, a hash of the source list and each finished
shard. Running again with the same settings and source resumes after the last whole shard;
other settings, or a changed source list, are refused. Ctrl-C leaves a resumable destination.

A Hugging Face ``datasets.Dataset`` (or the directory ``save_to_disk`` wrote) is written the
same way from its ``Image()`` column and its label column (as ``fl.Loader`` reads them): each
row's encoded bytes as they are, EXT told by the bytes' format (``jpg``, ``png``, ...), KEY its
position and row (``000012_train_12_``; a row read from a local file: that file's bytes, KEY
ending in its stem), the classes from its ``ClassLabel``. Since ``datasets`` turns each image upright per its EXIF orientation
as it decodes it, the index records ``"exif_transpose": true`` and a ``WebDataset`` over the
shards (so ``fl.Loader``) turns them too; a grayscale dataset (which the loader gives one
channel) records ``"grayscale": true``, and the shards decode to one channel too: the same
batches as a loader over the dataset.

The bytes are not decoded: a file that is not a valid image goes into its shard as it is and
is reported by whoever decodes it. A file that cannot be read stops the run with an error
naming it (no index is written).
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, List, Optional, Union


from ferroloader import _hfdatasets, _native
from ferroloader._native import EncodedTable, FileList, ImageFolder, PathList
from ferroloader.datasets import TargetTable, as_source

__all__ = ["ShardReport", "parse_size", "shard"]

PathLike = Union[str, "os.PathLike[str]"]

_SIZE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([kmgtp]?)(i?)b?\s*$", re.IGNORECASE)


@dataclass(frozen=True)
class ShardReport:
    """What :func:`shard` did. ``reused_shards`` counts shards an earlier run had finished."""

    #: Finished shards in the destination, reused ones included.
    shards: int
    #: Samples in them.
    samples: int
    reused_shards: int
    #: Source bytes this run copied.
    bytes_read: int
    #: Bytes of the shards this run finished.
    bytes_written: int
    #: ``DST/index.json``, or ``None`` when the run was cancelled before the end.
    index: Optional[str]
    cancelled: bool


def parse_size(value: Union[int, str], name: str = "shard_size") -> int:
    """Bytes from an int or a size such as ``"1GB"``, ``"256MB"`` (decimal), ``"1GiB"``
    (binary), ``"1.5G"`` or ``"4096"``; at least 1."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise TypeError(f"{name}: expected bytes or a size like '1GB', got {value!r}")
    if isinstance(value, int):
        size = value
    else:
        m = _SIZE.match(value)
        if m is None:
            raise ValueError(f"{name}: expected a size like 1GB, 256MB or 1GiB, got {value!r}")
        number, prefix, binary = float(m.group(1)), m.group(2).lower(), bool(m.group(3))
        if binary and not prefix:
            raise ValueError(f"{name}: expected a size like 1GB, 256MB or 1GiB, got {value!r}")
        power = "kmgtp".find(prefix) + 1 if prefix else 0
        size = int(number * (1024 if binary else 1000) ** power)
    if size < 1:
        raise ValueError(f"{name}: must be at least 1 byte, got {value!r}")
    return size


def shard(
    src: Any,
    dst: PathLike,
    *,
    shard_size: Union[int, str] = "1GB",
    max_samples_per_shard: Optional[int] = None,
    shuffle: bool = False,
    seed: int = 0,
    root: Optional[PathLike] = None,
    num_workers: int = 0,
    progress: Optional[Callable[[int, int], None]] = None,
) -> ShardReport:
    """Writes ``src`` into ``dst`` (created if missing) as tar shards and ``index.json``; see the
    module doc.

    ``src``: a folder (read as :class:`ferroloader.ImageFolder`, or as the Hugging Face dataset
    ``save_to_disk`` wrote there), a CSV/TSV/JSON Lines list file (read as
    :class:`ferroloader.FileList`, its paths relative to ``root`` or to the list's folder), or
    a dataset: ferroloader's ``ImageFolder``/``FileList``/``PathList`` (for a list's parsing
    options, pass ``FileList(...)``), torchvision's ``ImageFolder``, a sequence of
    ``(path, label)``, or a Hugging Face ``datasets.Dataset`` with an ``Image()`` column.
    ``num_workers`` threads (0: every core) read files ahead of the writer while the calling
    thread calls ``progress(done, total)`` as samples are written. Ctrl-C (or
    an exception from ``progress``) stops after the sample in progress; running again resumes.
    """
    size = parse_size(shard_size)
    if max_samples_per_shard is not None and (
        isinstance(max_samples_per_shard, bool)
        or not isinstance(max_samples_per_shard, int)
        or max_samples_per_shard < 1
    ):
        raise ValueError(
            f"max_samples_per_shard: expected a positive int or None, got {max_samples_per_shard!r}"
        )
    if not isinstance(shuffle, bool):
        raise TypeError(f"shuffle: expected a bool, got {shuffle!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**64:
        raise ValueError(f"seed: expected an int from 0 to 2**64 - 1, got {seed!r}")
    if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 0:
        raise ValueError(f"num_workers: expected an int >= 0, got {num_workers!r}")
    if isinstance(src, (str, os.PathLike)) and os.path.abspath(src) == os.path.abspath(dst):
        raise ValueError("dst: must differ from src (sources are never changed)")
    if isinstance(src, (str, os.PathLike)) and _hfdatasets.saved_dataset(Path(src)):
        if root is not None:
            raise ValueError("root: only for a list file; a saved dataset has its own")
        src = _hfdatasets.load_saved(Path(src))
    dataset = _dataset(src, root)
    names, exif_transpose, grayscale = None, False, False
    if isinstance(dataset, EncodedTable):
        names = _hfdatasets.member_names(src)
        exif_transpose, grayscale = dataset.exif_transpose, dataset.mode == "L"
    out = _native.write_shards(
        dataset, os.fspath(dst), classes=_classes(src, dataset), shard_size=size,
        max_samples_per_shard=max_samples_per_shard, shuffle=shuffle, seed=seed,
        num_workers=num_workers, progress=progress, names=names, exif_transpose=exif_transpose,
        grayscale=grayscale,
    )
    index = out["index"]
    return ShardReport(
        shards=int(out["shards"]),
        samples=int(out["samples"]),
        reused_shards=int(out["reused_shards"]),
        bytes_read=int(out["bytes_read"]),
        bytes_written=int(out["bytes_written"]),
        index=None if index is None else str(index),
        cancelled=bool(out["cancelled"]),
    )


def _dataset(
    src: Any, root: Optional[PathLike]
) -> Union[ImageFolder, FileList, PathList, EncodedTable]:
    """The native dataset ``src`` names or is."""
    if isinstance(src, (str, os.PathLike)):
        if os.path.isdir(src):
            if root is not None:
                raise ValueError("root: only for a list file; the folder is the root itself")
            return ImageFolder(os.path.abspath(src))
        if not os.path.exists(src):
            raise FileNotFoundError(f"src: no such folder or list file: {os.fspath(src)!r}")
        return FileList(os.path.abspath(src), root=None if root is None else os.path.abspath(root))
    if root is not None:
        raise ValueError("root: only with a list file's path; a dataset has its own")
    source, _transform, target_transform = as_source(src)
    if isinstance(target_transform, TargetTable):
        raise ValueError(
            f"src: the targets of {type(src).__name__} are not class indices (its first: "
            f"{target_transform.first()!r:.60}); shards keep one class index per file"
        )
    if target_transform is not None:
        raise ValueError(
            f"src: {type(src).__name__}.target_transform is set; shards keep each file's class "
            "index, so give the dataset without it and map the labels when loading"
        )
    if isinstance(source, EncodedTable) and not _hfdatasets.is_hugging_face(src):
        # A Subset of a Dataset, or timm's reader: their rows are not the Dataset's own.
        raise TypeError(
            f"src: give the datasets.Dataset itself (dataset.select(indices) for some of its "
            f"rows), not a {type(src).__name__} of it"
        )
    if not isinstance(source, (ImageFolder, FileList, PathList, EncodedTable)):
        raise TypeError(
            "src: shards copy files, so the dataset must list paths (ferroloader's or "
            "torchvision's ImageFolder, a FileList, (path, label) pairs) or hold encoded "
            f"images (a Hugging Face datasets.Dataset), got {type(src).__name__}"
        )
    return source


def _classes(
    src: Any, dataset: Union[ImageFolder, FileList, PathList, EncodedTable]
) -> Optional[List[str]]:
    """Class names in label order, when the source has them: an ImageFolder's, a FileList's of
    class-name labels, a Hugging Face dataset's ``ClassLabel`` names, or a torchvision
    dataset's ``classes``."""
    if isinstance(dataset, (ImageFolder, FileList)):
        names = list(dataset.classes)
    elif isinstance(dataset, EncodedTable):
        hf = sys.modules["datasets"]
        feature = src.features[_hfdatasets.label_column(src)]
        names = list(feature.names) if isinstance(feature, hf.ClassLabel) else []
    else:
        found = getattr(src, "classes", None)
        if not isinstance(found, (list, tuple)) or not all(isinstance(c, str) for c in found):
            return None
        names = [str(c) for c in found]
    return names or None
