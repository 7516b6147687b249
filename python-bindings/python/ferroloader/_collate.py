"""A ``collate_fn`` given to the loader, run on the consumer's thread over the samples the loader
makes of each batch, each image a view of the batch's tensor.

The usual one stacks the images again (``torch.stack([e["pixel_values"] for e in examples])``,
Hugging Face's scripts): a copy of the whole batch on the consumer's thread, where DataLoader's
workers make theirs beside the decoding (64 float images of 224x224: 38 MB, 55 ms on a 2-core
Zen 3, which halved the loader's throughput). :class:`Collate` runs the user's function with a
``torch.stack`` that answers a stack of exactly the batch's views, in order, along the first
dimension, with the batch tensor they are views of: the same values, without the copy, handed
out as the loader hands out every batch (its buffer refilled once the batch is dropped, pinned
where the loader pins). Every other call is torch's own. The one difference a function could
see: the stacked tensor shares memory with the samples' views, so changing it in place changes
them (DataLoader's stack is a copy); the views are the loader's, dropped once collated.

Only a Python function of the user's is re-made so (``torch`` or ``torch.stack`` among its
globals or closure cells, ``import torch`` in it, or the user's functions it calls that do;
its other globals read live), and transformers' default collators (``DefaultDataCollator``,
``default_data_collator``: Hugging Face's image-classification tutorial's), whose only stack is
of each key's values; another library's function, a class instance, one that reaches neither
runs as given.

What this module must not do: change the user's function, its module or torch; answer any stack
but the whole batch's views in order.
"""

from __future__ import annotations

import builtins
import dis
import sys
import threading
import types
from typing import Any, Callable, Dict, List, Optional, Sequence

from ferroloader._getitem import ModuleWith, from_library, global_names, nested_codes, remade_function

__all__ = ["Collate"]

_batch = threading.local()


def _stack(tensors: Any, dim: int = 0, *, out: Any = None) -> Any:
    """``torch.stack`` in a re-made ``collate_fn``: the batch tensor for its own views."""
    import torch

    views: Optional[Sequence[Any]] = getattr(_batch, "views", None)
    if (
        views is not None
        and out is None
        and dim == 0
        and isinstance(tensors, (list, tuple))
        and len(tensors) == len(views)
        and all(a is b for a, b in zip(tensors, views))
    ):
        return _batch.tensor
    return torch.stack(tensors, dim, out=out)


def _torch_with_stack() -> ModuleWith:
    import torch

    return ModuleWith(torch, {"stack": _stack})


def _import(name: str, *args: Any, **kwargs: Any) -> Any:
    """``__import__`` in re-made code: ``torch`` (``import torch``, ``from torch import
    stack``) is :func:`_torch_with_stack`'s."""
    module = builtins.__import__(name, *args, **kwargs)
    return _torch_with_stack() if module is sys.modules.get("torch") else module


def _imports_torch(code: types.CodeType) -> bool:
    return any(
        ins.opname == "IMPORT_NAME" and str(ins.argval).partition(".")[0] == "torch"
        for c in nested_codes(code)
        for ins in dis.get_instructions(c)
    )


#: How deep :func:`_remade` follows the user's functions calling each other.
_DEPTH = 4


def _remade(
    fn: Any, depth: int = 0, made: Optional[Dict[Any, Any]] = None, library: bool = False
) -> Optional[Callable[..., Any]]:
    """``fn`` with :func:`_stack` for ``torch.stack``, and so the user's functions it reaches
    (``made``: those re-made so far); ``None`` where it is not re-made. ``library``: ``fn`` is
    a library's known to stack only what it collates (transformers' default collator)."""
    import torch

    if not isinstance(fn, types.FunctionType) or (from_library(fn) and not library) or depth > _DEPTH:
        return None
    made = {} if made is None else made
    if fn in made:
        return made[fn]  # type: ignore[no-any-return]
    made[fn] = None  # a function calling itself is re-made once

    def stand_in(value: Any) -> Any:
        if value is torch:
            return _torch_with_stack()
        if value is torch.stack:
            return _stack
        return _remade(value, depth + 1, made)

    overrides: Dict[str, Any] = {}
    for name in global_names(fn.__code__):
        if name in fn.__globals__:
            stand = stand_in(fn.__globals__[name])
            if stand is not None:
                overrides[name] = stand
    cells = list(fn.__closure__ or ())
    for i, cell in enumerate(cells):
        try:
            stand = stand_in(cell.cell_contents)
        except ValueError:
            continue  # not bound yet
        if stand is not None:
            cells[i] = types.CellType(stand)
    imports = _imports_torch(fn.__code__)
    if not overrides and not imports and all(a is b for a, b in zip(cells, fn.__closure__ or ())):
        return None
    if imports:
        overrides["__builtins__"] = dict(vars(builtins), __import__=_import)
    remade = remade_function(fn, overrides, cells)
    made[fn] = remade
    return remade


def _transformers_default(fn: Any) -> Optional[Callable[..., Any]]:
    """transformers' torch default collator, re-made, where ``fn`` is one that runs it."""
    collators = sys.modules.get("transformers.data.data_collator")
    if collators is None:
        return None
    default = getattr(collators, "torch_default_data_collator", None)
    kind = getattr(collators, "DefaultDataCollator", None)
    if fn is getattr(collators, "default_data_collator", None) or (
        kind is not None and isinstance(fn, kind) and getattr(fn, "return_tensors", None) == "pt"
    ):
        return _remade(default, library=True)
    return None


class Collate:
    """The user's ``collate_fn``, called on each batch's samples; ``views`` (each sample's image,
    in order) and ``tensor`` (the batch they are views of) given, a stack of exactly those views
    is ``tensor``."""

    def __init__(self, fn: Callable[[List[Any]], Any]) -> None:
        self.fn = fn
        self._remade = _transformers_default(fn) or _remade(fn)

    def __call__(self, samples: List[Any], views: Optional[Sequence[Any]] = None, tensor: Any = None) -> Any:
        if self._remade is None or views is None or tensor is None:
            return self.fn(samples)
        _batch.views, _batch.tensor = views, tensor
        try:
            return self._remade(samples)
        finally:
            _batch.views = _batch.tensor = None
