"""Transforms that return several views of one image, as self-supervised recipes write them.

MoCo's ``TwoCropsTransform`` (``[self.base_transform(x), self.base_transform(x)]``), SimCLR's
view generator (``[self.base_transform(x) for i in range(self.n_views)]``) and DINO's multi-crop
(two global transforms, then ``local_crops_number`` calls of a local one) are the user's own
classes: no name says what they do. :func:`trace_views` learns it by running the object once
on the image with each of its callable attributes replaced by a recorder: when every view
it returns is one attribute applied to that very image, the views are those attributes, in
that order, and each can be converted (and run natively) on its own. Anything else the object
does (looking at the image first, chaining two attributes, stacking the views, a random
number of views) makes the trace fail, and the object runs in Python as it is.

What this module must not do: change the user's object (the trace runs on a shallow copy),
run any real transform, or keep anything of the trace.
"""

from __future__ import annotations

import copy
import random
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Tuple

import numpy as np

from ferroloader import _native

__all__ = ["Views", "trace_views", "view_seed", "with_views_replaced"]

class Views(NamedTuple):
    """What :func:`trace_views` found: the transform of each view, in output order (an object
    may appear several times: MoCo's two views are one ``Compose`` called twice), and the
    container the views come in (``list`` or ``tuple``)."""

    transforms: List[Any]
    container: type


class _NotViews(Exception):
    """The traced object did something other than return attributes applied to the image."""


class _Mark:
    """What a recorder returns in place of a view: which call made it."""

    __slots__ = ("call",)

    def __init__(self, call: int) -> None:
        self.call = call


class _Recorder:
    """Stands in for one callable attribute: checks it is applied to the image itself and
    records the call."""

    def __init__(self, original: Any, image: Any, calls: List[Any]) -> None:
        self.original = original
        self.image = image
        self.calls = calls

    def __call__(self, *args: Any, **kwargs: Any) -> _Mark:
        if kwargs or len(args) != 1 or args[0] is not self.image:
            raise _NotViews
        self.calls.append(self.original)
        return _Mark(len(self.calls) - 1)


def _is_transform(value: Any) -> bool:
    return callable(value) and not isinstance(value, type)


def _own_copy(obj: Any) -> Optional[Any]:
    """A shallow copy of ``obj`` whose attribute namespaces are its own (a ``Module``'s
    submodules too), so that replacing its attributes leaves ``obj`` alone; ``None`` where it
    cannot be made."""
    try:
        made = copy.copy(obj)
    except Exception:
        return None
    if vars(made) is vars(obj):
        return None
    modules = vars(made).get("_modules")
    if isinstance(modules, dict):
        vars(made)["_modules"] = dict(modules)  # copy.copy shares a Module's submodules
    return made


def _replace_callables(obj: Any, replace: Callable[[Any], Any]) -> int:
    """Replaces each callable attribute ``obj`` holds by ``replace(it)``: its ``__dict__``
    entries and, for a ``torch.nn.Module``, its submodules (kept in ``_modules``); in a list or
    tuple of callables (lightly's ``MultiViewTransform(transforms=[...])``) each item, in a new
    one. Returns how many it met. ``obj``'s namespaces must be its own (:func:`_own_copy`)."""
    spaces = [vars(obj)]
    modules = vars(obj).get("_modules")
    if isinstance(modules, dict):
        spaces.append(modules)
    met = 0
    for space in spaces:
        for name, value in list(space.items()):
            if _is_transform(value):
                space[name] = replace(value)
                met += 1
            elif isinstance(value, (list, tuple)) and value and all(map(_is_transform, value)):
                space[name] = type(value)(replace(v) for v in value)
                met += len(value)
    return met


def _trace_once(transform: Any, image: Any, seed: int) -> Optional[Tuple[List[Any], type]]:
    traced = _own_copy(transform)
    if traced is None:
        return None
    calls: List[Any] = []
    try:
        if not _replace_callables(traced, lambda value: _Recorder(value, image, calls)):
            return None
    except Exception:
        return None  # a namedtuple of transforms, say: not rebuilt from an iterable
    saved = random.getstate(), np.random.get_state()
    random.seed(seed)
    np.random.seed(seed)
    try:
        result = traced(image)
    except Exception:
        return None
    finally:
        random.setstate(saved[0])
        np.random.set_state(saved[1])
    if type(result) not in (list, tuple) or not result:
        return None
    if not all(isinstance(r, _Mark) for r in result):
        return None
    marks = [r.call for r in result]
    if sorted(marks) != list(range(len(calls))):
        return None  # a call whose view was dropped, or one view returned twice
    return [calls[m] for m in marks], type(result)


def trace_views(transform: Any, image: Any) -> Optional[Views]:
    """The views ``transform`` makes of ``image`` (a PIL image as the dataset would hand it),
    or ``None`` where it is not a container of its attributes applied to the image. Traced
    twice under different seeds of ``random`` and numpy (the recorders draw nothing, but the
    object might choose its views at random): both traces must agree."""
    if not hasattr(transform, "__dict__") or isinstance(transform, type):
        return None
    traces = [_trace_once(transform, image, seed) for seed in (0, 1)]
    first, second = traces
    if first is None or second is None:
        return None
    if first[1] is not second[1] or len(first[0]) != len(second[0]):
        return None
    if any(a is not b for a, b in zip(first[0], second[0])):
        return None
    return Views(first[0], first[1])


def with_views_replaced(transform: Any, replace: Callable[[Any], Any]) -> Optional[Any]:
    """A shallow copy of ``transform``, when it returns views (:func:`trace_views`, traced on
    a stand-in image: such an object only hands the image on), with each view's transform
    replaced by ``replace(it)`` wherever the object holds it (one replacement per transform,
    however many views it makes); ``None`` for any other transform."""
    found = trace_views(transform, object())
    made = None if found is None else _own_copy(transform)
    if found is None or made is None:
        return None
    views = {id(t): t for t in found.transforms}
    replaced: Dict[int, Any] = {}

    def swap(value: Any) -> Any:
        if id(value) not in views:
            return value
        if id(value) not in replaced:
            replaced[id(value)] = replace(value)
        return replaced[id(value)]

    try:
        _replace_callables(made, swap)
    except Exception:
        return None
    return made


def view_seed(seed: int, view: int) -> int:
    """The native seed of view ``view`` of a loader seeded ``seed``: the seed itself for view
    0 (one view draws as the transform alone would), else SplitMix64's finalizer of ``seed +
    view * golden ratio``, so each view's draws are unrelated to the others' and to other
    seeds' views (``_native.view_seed``, which the native workers use)."""
    return _native.view_seed(seed, view)
