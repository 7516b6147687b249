"""Offline preparation: an ImageFolder re-encoded once at a shorter side, so every epoch decodes
and resizes fewer pixels (PRESTO's "offline" step).

>>> report = fl.prepare("/data/train", "/data/train-320", shorter_side=320)
>>> loader = fl.Loader(fl.ImageFolder("/data/train-320"), ...)

The destination is an ImageFolder with the same classes and files: images whose shorter side is
larger are resized as ``Resize(shorter_side)`` does (Pillow's antialiased bilinear) and encoded as
JPEG at ``quality`` (4:2:0, Pillow's settings); smaller images, and files that do not decode, are
copied byte for byte (so the loader reports those as it would on the source). A re-encoded PNG
keeps its name with ``.jpg`` appended. ``DST/prepare-manifest.jsonl`` records the settings and each
source's BLAKE3 hash: running again resumes, redoing only sources that changed or whose output is
missing; other settings are refused. The prepared images differ from the online pipeline's by
the JPEG re-encoding and the extra resize: measure the difference before training on them.

A Hugging Face ``datasets.Dataset`` (or the directory ``save_to_disk`` wrote) is prepared into
a copy of itself, saved with ``save_to_disk`` at ``dst`` (load it with
``datasets.load_from_disk``): the same rows, columns and features, each row of the ``Image()``
column fl.Loader reads resized and re-encoded by the same rule, with Pillow, after turning it
upright per its EXIF orientation as ``datasets`` decodes it (the JPEG keeps no orientation);
smaller rows and those that do not decode keep their bytes (a row stored as a local file's path
gets that file's bytes embedded). It is not resumable: a second run writes the copy again.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
import io
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

from ferroloader import _hfdatasets, _native

__all__ = ["PrepareReport", "prepare"]

PathLike = Union[str, "os.PathLike[str]"]


@dataclass(frozen=True)
class PrepareReport:
    """What :func:`prepare` did. ``reused`` counts files an earlier run had finished."""

    resized: int
    copied: int
    reused: int
    #: ``(path, reason)`` of the source files that do not decode (copied as they are).
    unreadable: List[Tuple[str, str]]
    bytes_in: int
    bytes_out: int
    cancelled: bool


def prepare(
    src: Any,
    dst: PathLike,
    *,
    shorter_side: int,
    quality: int = 90,
    num_workers: int = 0,
    progress: Optional[Callable[[int, int], None]] = None,
) -> PrepareReport:
    """Prepares the ImageFolder ``src`` (or a Hugging Face dataset, or its saved directory) into
    ``dst`` (created if missing); see the module doc.

    ``num_workers`` threads (0: every core) do the work while the calling thread calls
    ``progress(done, total)`` as files finish. Ctrl-C (or an exception from ``progress``) stops
    after the files in progress; running again resumes.
    """
    if isinstance(shorter_side, bool) or not isinstance(shorter_side, int) or shorter_side < 1:
        raise ValueError(f"shorter_side: expected a positive int, got {shorter_side!r}")
    if isinstance(quality, bool) or not isinstance(quality, int) or not 1 <= quality <= 100:
        raise ValueError(f"quality: expected an int from 1 to 100, got {quality!r}")
    if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 0:
        raise ValueError(f"num_workers: expected an int >= 0, got {num_workers!r}")
    is_path = isinstance(src, (str, os.PathLike))
    if is_path and os.path.abspath(src) == os.path.abspath(dst):
        raise ValueError("dst: must differ from src (sources are never changed)")
    if is_path and _hfdatasets.saved_dataset(Path(src)):
        src = _hfdatasets.load_saved(Path(src))
    if _hfdatasets.is_hugging_face(src):
        return _prepare_dataset(src, Path(dst), shorter_side, quality, num_workers, progress)
    if not is_path:
        raise TypeError(
            "src: expected an ImageFolder's path, a saved Hugging Face dataset's directory or a "
            f"datasets.Dataset, got {type(src).__name__}"
        )
    out = _native.prepare(
        os.fspath(src), os.fspath(dst), shorter_side,
        quality=quality, num_workers=num_workers, progress=progress,
    )
    return PrepareReport(
        resized=int(out["resized"]),
        copied=int(out["copied"]),
        reused=int(out["reused"]),
        unreadable=[(str(p), str(r)) for p, r in out["unreadable"]],
        bytes_in=int(out["bytes_in"]),
        bytes_out=int(out["bytes_out"]),
        cancelled=bool(out["cancelled"]),
    )


#: The columns :class:`_Reencode` adds to each row for the report, removed before saving.
_ACTION, _REASON, _BYTES_IN = "__ferroloader_action", "__ferroloader_reason", "__ferroloader_in"


class _Reencode:
    """``Dataset.map``'s function: one row's image (``{"bytes", "path"}``, undecoded) resized to
    ``shorter_side`` and re-encoded as JPEG where its shorter side is longer, as ``prepare``
    does a file (a class, so ``map``'s worker processes can pickle it)."""

    def __init__(self, column: str, shorter_side: int, quality: int) -> None:
        self.column = column
        self.shorter_side = shorter_side
        self.quality = quality

    def __call__(self, row: Dict[str, Any]) -> Dict[str, Any]:
        from PIL import Image, ImageOps

        value = row[self.column]
        data, path = value["bytes"], value["path"]
        if data is None:
            with open(path, "rb") as f:
                data = f.read()
        action, reason, out = "copied", "", data
        try:
            with Image.open(io.BytesIO(data)) as image:
                if min(image.size) > self.shorter_side:
                    # Upright first, as datasets decodes the row: the JPEG keeps no orientation.
                    upright = ImageOps.exif_transpose(image)
                    if upright.mode not in ("RGB", "L"):
                        upright = upright.convert("RGB")
                    w, h = upright.size
                    # torchvision's Resize(int): the shorter side to it, the longer truncated.
                    side = self.shorter_side
                    size = (side, int(side * h / w)) if w <= h else (int(side * w / h), side)
                    buf = io.BytesIO()
                    upright.resize(size, Image.Resampling.BILINEAR).save(
                        buf, "JPEG", quality=self.quality
                    )
                    action, out = "resized", buf.getvalue()
        except Exception as e:
            action, reason, out = "unreadable", f"{type(e).__name__}: {e}", data
        return {
            self.column: {"bytes": out, "path": path},
            _ACTION: action,
            _REASON: reason,
            _BYTES_IN: len(data),
        }


def _prepare_dataset(dataset: Any, dst: Path, shorter_side: int, quality: int,
                     num_workers: int, progress: Optional[Callable[[int, int], None]]
                     ) -> PrepareReport:
    """:func:`prepare` of a Hugging Face dataset: its re-encoded copy saved at ``dst``."""
    hf = sys.modules["datasets"]
    # Refuses, with the reason, what the loader could not read (a format transform is not
    # the data: the copy keeps none).
    dataset = dataset.with_format(None)
    _hfdatasets.table_of(dataset)
    column = _hfdatasets.image_column(dataset)
    feature = dataset.features[column]
    plain = dataset.cast_column(column, hf.Image(decode=False))
    procs = num_workers or (os.cpu_count() or 1)
    dst.parent.mkdir(parents=True, exist_ok=True)
    # map's own output goes to a temporary folder beside dst, not (its default) the source's
    # cache folder: a saved dataset's directory is never written to.
    with tempfile.TemporaryDirectory(prefix=".ferroloader-prepare-", dir=dst.parent) as tmp:
        done = plain.map(
            _Reencode(column, shorter_side, quality),
            num_proc=procs if procs > 1 and len(plain) >= 64 * procs else None,
            load_from_cache_file=False,
            cache_file_name=os.path.join(tmp, "prepared.arrow"),
            desc="preparing",
        )
        actions: List[str] = list(done[_ACTION])
        reasons: List[str] = list(done[_REASON])
        sizes: List[int] = list(done[_BYTES_IN])
        out = done.remove_columns([_ACTION, _REASON, _BYTES_IN]).cast_column(column, feature)
        out.save_to_disk(os.fspath(dst))
        bytes_out = _bytes_of(out.data.table.column(column))
        del done, out  # their memory maps of the temporary files, before those are removed
    name = "dataset" if dataset.split is None else str(dataset.split)
    if progress is not None:
        progress(len(actions), len(actions))
    return PrepareReport(
        resized=actions.count("resized"),
        copied=actions.count("copied") + actions.count("unreadable"),
        reused=0,
        unreadable=[
            (f"{name}[{i}]", reason)
            for i, (action, reason) in enumerate(zip(actions, reasons))
            if action == "unreadable"
        ],
        bytes_in=int(sum(sizes)),
        bytes_out=bytes_out,
        cancelled=False,
    )


def _bytes_of(column: Any) -> int:
    """The bytes of an ``Image()`` column's images (its ``bytes`` fields), without reading them."""
    import pyarrow.compute as pc  # type: ignore[import-untyped]

    total = 0
    for chunk in column.chunks:
        total += pc.sum(pc.binary_length(chunk.field("bytes"))).as_py() or 0
    return int(total)
