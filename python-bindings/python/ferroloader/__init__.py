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
>>> prof = loader.profile()     # with profile="spans": summary(), save_trace(path), save(path)
>>> fl.report.write_html(prof, "report.html")  # the HTML report (the cli extra)
>>> fl.advise("/data/train", step_ms=120, out="advice")  # what to do: advice/report.html

Errors: missing files raise ``FileNotFoundError``; bad arguments ``TypeError``/``ValueError``
naming the argument; images that cannot be decoded :class:`DecodeError` (an ``OSError``)
naming the file and the cause.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ferroloader import datasets, transforms
from ferroloader._native import (
    DecodeError,
    FileList,
    ImageArray,
    ImageFolder,
    PathList,
    WebDataset,
    __version__,
)
from ferroloader.loader import STATE_VERSION, Loader, LoaderIterator
from ferroloader.offline import PrepareReport, prepare
from ferroloader.profiling import Profile, Summary
from ferroloader.shards import ShardReport, shard

# Only what `import ferroloader` itself provides: `from ferroloader import *` must work without
# torch or the cli extra, and must not bind `torch` to ferroloader.torch. The lazy names below
# (torch, timm, report, compare, sample_data, advise, Advice) are imported by name.
__all__ = [
    "DecodeError",
    "FileList",
    "ImageArray",
    "ImageFolder",
    "Loader",
    "LoaderIterator",
    "PathList",
    "PrepareReport",
    "ShardReport",
    "STATE_VERSION",
    "Profile",
    "Summary",
    "WebDataset",
    "datasets",
    "prepare",
    "shard",
    "transforms",
    "__version__",
]

if TYPE_CHECKING:
    from ferroloader import timm, torch
    from ferroloader.cli import compare, report, sample_data
    from ferroloader.cli.advisor import Advice, advise

# Imported on first use: `ferroloader.torch` imports PyTorch (`ferroloader.timm`, timm), and the tools in
# `ferroloader.cli` need the `cli` extra (importing one without it raises the ImportError that
# says what to install), neither of which `import ferroloader` alone may need.
# Name -> (module, attribute of that module, or None for the module itself).
_LAZY = {
    "torch": ("ferroloader.torch", None),
    "timm": ("ferroloader.timm", None),
    "report": ("ferroloader.cli.report", None),
    "compare": ("ferroloader.cli.compare", None),
    "sample_data": ("ferroloader.cli.sample_data", None),
    "advise": ("ferroloader.cli.advisor", "advise"),
    "Advice": ("ferroloader.cli.advisor", "Advice"),
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'ferroloader' has no attribute {name!r}")
    module_name, attribute = _LAZY[name]
    module = importlib.import_module(module_name)
    value = module if attribute is None else getattr(module, attribute)
    globals()[name] = value
    return value
