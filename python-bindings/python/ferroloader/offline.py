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
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable, List, Optional, Tuple, Union

from ferroloader import _native

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
    src: PathLike,
    dst: PathLike,
    *,
    shorter_side: int,
    quality: int = 90,
    num_workers: int = 0,
    progress: Optional[Callable[[int, int], None]] = None,
) -> PrepareReport:
    """Prepares the ImageFolder ``src`` into ``dst`` (created if missing); see the module doc.

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
    if os.path.abspath(src) == os.path.abspath(dst):
        raise ValueError("dst: must differ from src (sources are never changed)")
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
