"""timm's own transforms, read into what computes the same natively: what
``timm.data.create_transform`` puts beside torchvision's in the ``Compose`` it returns, so a
training script's timm pipeline runs natively, not as a Python tail.

A timm transform converts where it computes what a torchvision one the loader already runs
computes, with the same distribution of draws:

- ``MaybeToTensor``, ``MaybePILToTensor``: on a PIL image, torchvision's ``ToTensor`` and
  ``PILToTensor``; on a tensor (after ``ToImage``), nothing (the converter drops them).
- ``RandomResizedCropAndInterpolation`` with one interpolation: torchvision's
  ``RandomResizedCrop`` (its ``get_params`` is torchvision's, with Python's ``random`` in place
  of torch's generator, and ``F.resized_crop`` on the PIL image: Pillow's antialiased resize).
- ``RandomErasing`` (``timm.data.random_erasing``) erasing one block, ``mode`` ``"const"`` or
  ``"pixel"``: torchvision's ``RandomErasing(p, scale=(min_area, max_area), ratio=(min_aspect,
  max_aspect), value=0 or "random")`` (the same draws: area, log-uniform aspect, the size rounded
  the same way, the strict fit test, ten attempts, the position).
- ``RandAugment`` (``timm.data.auto_augment``, ``auto_augment="rand-..."``): the arguments of
  ferroloader's ``TimmRandAugment`` (:class:`RandAugmentArgs`), read from the object's attributes (its ``ops``, ``num_layers``,
  ``choice_weights``; each ``AugmentOp``'s ``name``, ``prob``, ``magnitude``,
  ``magnitude_std``, ``magnitude_max``, ``hparams`` and ``kwargs``), not from the config
  string, so a policy built by hand converts as well. Its ops draw as timm's do (the same
  distributions, from the sample's generator) and compute with Pillow's arithmetic (the
  BICUBIC warps four pixels a step on AVX2, with Pillow's bits).

What does not convert raises ``ValueError`` naming the parameter (``interpolation='random'``, a
per-sample choice of resize filter; ``mode='rand'``, one random colour per block; several
blocks; RandAugment's ``GaussianBlur`` ops, whose Pillow filter has no exact native kernel,
a fill or filter Pillow's transform does not take, an op or policy whose class or functions
are not timm's own), and the converter leaves the op and what follows it to the Python tail.

The first three come back as the torchvision transforms they compute as; the converter
(``ferroloader.transforms``) converts those, and builds ``TimmRandAugment`` from the arguments.

Must not import timm (the objects are recognised by their class and module names, so the
loader works where timm is not installed), nor ferroloader's transforms, which import this.
"""

from __future__ import annotations

import math
import sys
from typing import Any, List, NamedTuple, Optional, Union

__all__ = ["AugmentOpArgs", "RandAugmentArgs", "equivalent"]


class AugmentOpArgs(NamedTuple):
    """The arguments of ferroloader's ``TimmAugmentOp`` for one of timm's ``AugmentOp``s."""

    name: str
    prob: float
    magnitude: float
    magnitude_std: float
    magnitude_max: Optional[float]
    translate_pct: float
    translate_const: float
    fill: Any
    interpolation: Any


class RandAugmentArgs(NamedTuple):
    """The arguments of ferroloader's ``TimmRandAugment`` for timm's ``RandAugment``."""

    ops: List[AugmentOpArgs]
    num_layers: int
    choice_weights: Optional[List[float]]


def equivalent(t: Any) -> Union[None, Any, RandAugmentArgs]:
    """What computes what timm's ``t`` computes: a torchvision transform (the converter takes
    it from there) or, for timm's ``RandAugment``, :class:`RandAugmentArgs`; ``None`` for a
    timm transform with no equivalent. Raises ``ValueError`` naming a parameter that has
    none."""
    import torchvision.transforms as tv  # type: ignore[import-untyped]  # timm needs it: it is there

    name = type(t).__name__
    if name == "MaybeToTensor":
        return tv.ToTensor()
    if name == "MaybePILToTensor":
        return tv.PILToTensor()
    if name == "RandomResizedCropAndInterpolation":
        if isinstance(t.interpolation, (tuple, list)):
            modes = ", ".join(str(m.value) for m in t.interpolation)
            raise ValueError(
                f"interpolation='random' (a choice among {modes} per sample) has no native "
                "equivalent; give one interpolation"
            )
        return tv.RandomResizedCrop(t.size, t.scale, t.ratio, t.interpolation, antialias=True)
    if name == "RandomErasing" and type(t).__module__ == "timm.data.random_erasing":
        return _random_erasing(t, tv)
    if name == "RandAugment" and type(t).__module__ == _AUTO_AUGMENT:
        return _rand_augment(t)
    return None


def _random_erasing(t: Any, tv: Any) -> Any:
    if (t.min_count, t.max_count) != (1, 1):
        raise ValueError(
            f"erases {t.min_count} to {t.max_count} blocks per image; torchvision's, which "
            "runs natively, erases one (max_count=1)"
        )
    if t.mode == "pixel":
        value: Any = "random"
    elif t.mode in ("const", ""):
        value = 0
    else:
        raise ValueError(
            f"mode={t.mode!r} (one random colour per block) has no native equivalent; "
            "'const' and 'pixel' have"
        )
    low, high = t.log_aspect_ratio
    return tv.RandomErasing(
        float(t.probability), (float(t.min_area), float(t.max_area)), (math.exp(low), math.exp(high)), value
    )


_AUTO_AUGMENT = "timm.data.auto_augment"
_WARPS = ("Rotate", "ShearX", "ShearY", "TranslateX", "TranslateY", "TranslateXRel", "TranslateYRel")


def _rand_augment(t: Any) -> RandAugmentArgs:
    # timm's own module, already imported (``t`` is an instance of one of its classes): its
    # tables tell an AugmentOp that computes what its name says from one changed by hand.
    module = sys.modules[_AUTO_AUGMENT]
    ops: List[AugmentOpArgs] = []
    for i, op in enumerate(t.ops):
        where = f"ops[{i}]"
        if type(op) is not getattr(module, "AugmentOp", None):
            raise ValueError(f"{where} is a {type(op).__qualname__}, not timm's AugmentOp")
        name = op.name
        if name in ("GaussianBlur", "GaussianBlurRand"):
            raise ValueError(
                f"{where} name={name!r}: Pillow's GaussianBlur filter (box blurs approximating "
                "a Gaussian) has no exact native kernel"
            )
        if op.aug_fn is not module.NAME_TO_OP.get(name) or op.level_fn is not module.LEVEL_TO_ARG.get(name):
            raise ValueError(f"{where} name={name!r}: its functions are not timm's NAME_TO_OP/LEVEL_TO_ARG entries")
        hparams = op.hparams
        kwargs = op.kwargs
        fill = kwargs.get("fillcolor")
        if not (isinstance(fill, (tuple, list)) and len(fill) == 3):
            raise ValueError(
                f"{where} fillcolor={fill!r} (hparams img_mean): give 3 levels, one per channel "
                "(Pillow reads a single int on an RGB image as a packed colour)"
            )
        resample = kwargs.get("resample")
        if name not in _WARPS:
            # Only the warps hand the filter to Pillow; the others never read it.
            resample = 3
        if name in ("TranslateX", "TranslateY") and "translate_const" not in hparams:
            raise ValueError(f"{where} ({name}): hparams has no translate_const (timm raises KeyError)")
        ops.append(
            AugmentOpArgs(
                name,
                op.prob,
                op.magnitude,
                op.magnitude_std,
                op.magnitude_max,
                hparams.get("translate_pct", 0.45),
                hparams.get("translate_const", 250),
                fill,
                list(resample) if isinstance(resample, (tuple, list)) else resample,
            )
        )
    if type(t).__call__ is not module.RandAugment.__call__:
        raise ValueError("its __call__ is not timm's RandAugment's")
    weights = t.choice_weights
    return RandAugmentArgs(ops, t.num_layers, None if weights is None else [float(w) for w in weights])
