"""torchvision v2's ``MixUp`` and ``CutMix`` (and a ``RandomChoice`` of them) on each batch the
native loader delivers: the pixels mixed in place by ``_native.mix_batch`` (torchvision's
float32 arithmetic, bit for bit, with the GIL released), the labels mixed as torchvision mixes
them, the parameters drawn per batch.

They come as ``batch_transform=`` or inside the ``collate_fn`` torchvision's reference
``train.py`` writes (``return mixup_cutmix(*default_collate(batch))``), which DataLoader runs in
its worker processes: run as given here, they would take the consuming thread a stack copy and
several passes over the float batch, more than the workers take to make it.

The draws follow torchvision's distributions (``Beta(alpha, alpha)`` rounded to float32, the
box's centre uniform over the image, ``RandomChoice``'s probabilities), from a generator keyed
by ``(seed, epoch, batch)``, so a batch is mixed alike whatever ``num_workers`` and on resume;
they are not torch's global generator's draws. This module must not touch the images but
through ``mix_batch``.
"""

from __future__ import annotations

import hashlib
import math
import types
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Protocol, Sequence, Tuple

import numpy as np

from ferroloader import _bytecode, _native


def batch_entropy(purpose: str, key: Tuple[int, int, int]) -> bytes:
    """128 bits that seed the draws of batch ``key`` (``(seed, epoch, batch)``) for ``purpose``
    (each batch op its own stream): the same batch, the same draws, whatever ``num_workers``
    and on resume."""
    return hashlib.blake2b(repr((purpose, *key)).encode(), digest_size=16).digest()


class BatchOp(Protocol):
    """A batch mix as the loader runs it: draws made ahead per batch (:meth:`prepare`), handed
    to the workers (:meth:`native_plan`), finished on the delivered batch (:meth:`finish`), or
    all at once on it (:meth:`apply`)."""

    def prepare(self, key: Tuple[int, int, int], samples: int, height: int, width: int) -> Optional[Any]: ...

    def native_plan(self, prepared: Any) -> Tuple[str, Dict[str, Any]]: ...

    def finish(self, images: np.ndarray, labels: np.ndarray, prepared: Any, mixed: bool) -> Tuple[np.ndarray, Any, str]: ...

    def apply(self, images: np.ndarray, labels: np.ndarray, key: Tuple[int, int, int]) -> Tuple[np.ndarray, Any, str]: ...


@dataclass(frozen=True)
class Mixing:
    """One of the batch ops: ``"MixUp"`` or ``"CutMix"``, with its ``alpha``."""

    kind: str
    alpha: float


def _is_v2(t: Any, name: str) -> bool:
    return type(t).__name__ == name and type(t).__module__.startswith("torchvision.transforms.v2")


def _mixing(t: Any) -> Optional[Tuple[Mixing, int]]:
    """``(Mixing, num_classes)`` of a v2 ``MixUp``/``CutMix`` with index labels taken as
    given (the default ``labels_getter``), else ``None``."""
    for kind in ("MixUp", "CutMix"):
        if _is_v2(t, kind):
            getter = getattr(t, "_labels_getter", None)
            default = getattr(getter, "__name__", "") == "_find_labels_default_heuristic"
            if t.num_classes is None or not default:
                return None
            return Mixing(kind, float(t.alpha)), int(t.num_classes)
    return None


class BatchMix:
    """The batch op of a v2 ``MixUp``, ``CutMix`` or ``RandomChoice`` of them: chooses, draws
    and mixes a delivered batch (:meth:`apply`)."""

    def __init__(self, choices: Sequence[Mixing], probabilities: Sequence[float], num_classes: int) -> None:
        self.choices = list(choices)
        self.probabilities = np.asarray(probabilities, dtype=np.float64)
        self.num_classes = num_classes

    @staticmethod
    def of(transform: Any) -> Optional["BatchMix"]:
        """The batch op ``transform`` is, or ``None`` for anything else."""
        one = _mixing(transform)
        if one is not None:
            return BatchMix([one[0]], [1.0], one[1])
        if not _is_v2(transform, "RandomChoice"):
            return None
        found = [_mixing(t) for t in transform.transforms]
        if not found or any(f is None for f in found):
            return None
        mixings = [f for f in found if f is not None]
        classes = {n for _, n in mixings}
        if len(classes) != 1:
            return None
        return BatchMix([m for m, _ in mixings], list(transform.p), classes.pop())

    def draw(self, key: Tuple[int, int, int], height: int, width: int) -> "Draw":
        """The op and parameters of batch ``key`` (``(seed, epoch, batch)``) of images of
        ``height`` x ``width``, as torchvision's ``make_params`` computes them from its draws."""
        rng = np.random.default_rng(int.from_bytes(batch_entropy("batch_mix", key), "little"))
        choice = self.choices[int(rng.choice(len(self.choices), p=self.probabilities))]
        lam = float(np.float32(rng.beta(choice.alpha, choice.alpha)))
        if choice.kind == "MixUp":
            return Draw("MixUp", lam, None)
        x, y = int(rng.integers(width)), int(rng.integers(height))
        r = 0.5 * math.sqrt(1.0 - lam)
        half_w, half_h = int(r * width), int(r * height)
        x1, y1 = max(x - half_w, 0), max(y - half_h, 0)
        x2, y2 = min(x + half_w, width), min(y + half_h, height)
        return Draw("CutMix", float(1.0 - (x2 - x1) * (y2 - y1) / (width * height)), (x1, y1, x2, y2))

    def prepare(self, key: Tuple[int, int, int], samples: int, height: int, width: int) -> "Draw":
        """The draws of batch ``key`` of ``samples`` images of ``height`` x ``width``, made
        ahead of the batch (:meth:`finish` mixes with them)."""
        return self.draw(key, height, width)

    def native_plan(self, draw: "Draw") -> Tuple[str, Dict[str, Any]]:
        """The profile name and the ``EpochIter.plan_mix`` arguments that mix as ``draw``."""
        name = draw.kind if len(self.choices) == 1 else f"RandomChoice/{draw.kind}"
        return name, ({"lam": draw.lam} if draw.box is None else {"box": draw.box})

    def finish(self, images: np.ndarray, labels: np.ndarray, draw: "Draw", mixed: bool) -> Tuple[np.ndarray, Any, str]:
        """Mixes ``images`` (the ``[B, C, H, W]`` batch, in place) as ``draw`` says, unless a
        worker did (``mixed``); returns ``images``, the mixed labels (a float32 ``[B,
        num_classes]`` tensor) and the op's profile name (``"MixUp"``;
        ``"RandomChoice/CutMix"`` for one a ``RandomChoice`` chose)."""
        import torch

        name, args = self.native_plan(draw)
        if not mixed:
            _native.mix_batch(images, **args)
        # torchvision's _mixup_label: one-hot, rolled by one, weighted.
        one_hot = torch.nn.functional.one_hot(torch.from_numpy(labels), self.num_classes).float()
        return images, one_hot.roll(1, 0).mul_(1.0 - draw.lam).add_(one_hot.mul(draw.lam)), name

    def apply(self, images: np.ndarray, labels: np.ndarray, key: Tuple[int, int, int]) -> Tuple[np.ndarray, Any, str]:
        """:meth:`finish` with the draws of batch ``key``, mixing the images here."""
        draw = self.prepare(key, len(labels), images.shape[-2], images.shape[-1])
        return self.finish(images, labels, draw, mixed=False)


@dataclass(frozen=True)
class Draw:
    """One batch's op and parameters: ``lam`` (CutMix's adjusted to its box's area, as the
    labels take it) and CutMix's ``box`` ``(x1, y1, x2, y2)``."""

    kind: str
    lam: float
    box: Optional[Tuple[int, int, int, int]]


def collated_mixing(collate_fn: Any) -> Optional[Any]:
    """The transform a ``collate_fn`` applies to the default collation of its batch and does
    nothing else with, ``def collate_fn(batch): return t(*default_collate(batch))`` (torchvision's
    reference ``train.py`` with ``--mixup-alpha``/``--cutmix-alpha``), read from its bytecode;
    ``None`` for any other function."""
    if not isinstance(collate_fn, types.FunctionType):
        return None
    code = collate_fn.__code__
    if not _bytecode.plain_arguments(code, 1):
        return None
    steps = _bytecode.steps(code)
    if len(steps) != 6:
        return None
    load_t, load_collate, batch, call, (spread, _), ret = steps
    expected = [("LOAD_FAST", code.co_varnames[0]), ("CALL", 1)]
    if [batch, call] != expected or spread != "CALL_FUNCTION_EX" or ret != ("RETURN_VALUE", None):
        return None
    from torch.utils.data import default_collate

    if _loaded(collate_fn, *load_collate) is not default_collate:
        return None
    return _loaded(collate_fn, *load_t)


def _loaded(fn: types.FunctionType, op: str, name: Any) -> Any:
    """What ``fn``'s ``op`` (``LOAD_GLOBAL`` or ``LOAD_DEREF``) of ``name`` loads now, or
    ``None``."""
    code = fn.__code__
    if op == "LOAD_GLOBAL":
        return fn.__globals__.get(name)
    if op == "LOAD_DEREF" and fn.__closure__ is not None and name in code.co_freevars:
        try:
            return fn.__closure__[code.co_freevars.index(name)].cell_contents
        except ValueError:  # an empty cell
            return None
    return None
