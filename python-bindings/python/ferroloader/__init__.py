"""ferroloader: a native image-classification data loader for PyTorch.

>>> import ferroloader as fl
>>> from ferroloader import transforms as T
>>> loader = fl.Loader(
...     fl.ImageFolder("/data/train"), batch_size=256, shuffle=True, num_workers=8,
...     transform=T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(),
...                          T.ToTensor(), T.Normalize([0.485, 0.456, 0.406],
...                                                    [0.229, 0.224, 0.225])]))
>>> for epoch in range(epochs):
...     loader.set_epoch(epoch)
...     for images, labels in loader:   # torch.float32 [B,3,224,224], torch.int64 [B]
...         ...
>>> prof = loader.profile()     # with profile="spans": summary(), save_trace(path), to_html(path)
>>> fl.advise("/data/train", step_ms=120, out="advice")  # what to do: advice/report.html

Errors: missing files raise ``FileNotFoundError``; bad arguments ``TypeError``/``ValueError``
naming the argument; images that cannot be decoded :class:`DecodeError` (an ``OSError``)
naming the file and the cause.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ferroloader import datasets, transforms
from ferroloader.advisor import Advice, advise
from ferroloader._native import (
    DecodeError,
    FileList,
    ImageFolder,
    PathList,
    WebDataset,
    __version__,
)
from ferroloader.loader import STATE_VERSION, Loader, LoaderIterator
from ferroloader.offline import PrepareReport, prepare
from ferroloader.profiling import Profile, Summary

__all__ = [
    "Advice",
    "DecodeError",
    "FileList",
    "ImageFolder",
    "Loader",
    "LoaderIterator",
    "PathList",
    "PrepareReport",
    "STATE_VERSION",
    "Profile",
    "Summary",
    "WebDataset",
    "datasets",
    "prepare",
    "report",
    "torch",
    "transforms",
    "advise",
    "__version__",
]

if TYPE_CHECKING:
    from ferroloader import report, torch

# Imported on first use: `ferroloader.torch` imports PyTorch, `report` matplotlib,
# which `import ferroloader` alone must not pay for.
_LAZY = ("report", "torch")


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return importlib.import_module(f"ferroloader.{name}")
    raise AttributeError(f"module 'ferroloader' has no attribute {name!r}")
