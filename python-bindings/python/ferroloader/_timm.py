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
  With a list (``interpolation='random'``: BILINEAR or BICUBIC, ``random.choice`` per call
  right after the crop): the arguments of ferroloader's ``RandomResizedCropAndInterpolation``
  (:class:`ResizedCropArgs`), which draws the crop the same way and the filter uniformly
  among the list's, from the sample's generator.
- ``RandomErasing`` (``timm.data.random_erasing``, ``create_transform(re_prob=, re_mode=,
  re_count=)``), every ``mode`` (``"const"``, ``"rand"``, ``"pixel"``) and any number of blocks:
  the arguments of ferroloader's ``TimmRandomErasing`` (:class:`RandomErasingArgs`), read from
  the object (``probability``, ``min_area``, ``max_area``, ``log_aspect_ratio``, ``mode``,
  ``min_count``, ``max_count``). It draws as timm's ``_erase`` does (the coin, the count, per
  block ten attempts of an area and a log-uniform aspect, the size rounded half to even, the
  strict fit test, the position, the fill), from the sample's generator. Its ``device`` must be
  ``'cpu'`` (what ``create_transform`` gives); its ``num_splits`` only matters for a batch, not
  per sample.
- ``RandAugment`` (``timm.data.auto_augment``, ``auto_augment="rand-..."``): the arguments of
  ferroloader's ``TimmRandAugment`` (:class:`RandAugmentArgs`), read from the object's attributes (its ``ops``, ``num_layers``,
  ``choice_weights``; each ``AugmentOp``'s ``name``, ``prob``, ``magnitude``,
  ``magnitude_std``, ``magnitude_max``, ``hparams`` and ``kwargs``), not from the config
  string, so a policy built by hand converts as well. Its ops draw as timm's do (the same
  distributions, from the sample's generator) and compute with Pillow's arithmetic.
- ``AutoAugment`` (``auto_augment="original"``, ``"originalr"``, ``"v0"``, ``"v0r"``): the
  arguments of ferroloader's ``TimmAutoAugment`` (:class:`AutoAugmentArgs`), its ``policy``
  read op by op as RandAugment's ``ops`` are; ``3a`` (DeiT III's 3-Augment: Solarize,
  Desaturate, GaussianBlurRand) converts too.
- The ``GaussianBlur`` and ``GaussianBlurRand`` ops (in any of these policies) run Pillow's
  ``ImageFilter.GaussianBlur`` (extended box blurs) natively, bit for bit;
  ``GaussianBlurRand``'s ``random.uniform(0.1, 2 * factor)`` radius is drawn from the sample's
  generator right after its level, where timm's op draws it.
- ``AugMixAugment`` (``auto_augment="augmix-m5-w4-d2"``, ``"augmix-m3-w3-b1"``): the arguments
  of ferroloader's ``TimmAugMix`` (:class:`AugMixArgs`): its ``ops``, ``alpha``, ``width``,
  ``depth`` and ``blended``. Its ops draw as timm's (uniform magnitudes with ``mstd`` unset);
  the mix is timm's float32 sum and Pillow's ``Image.blend``, bit-exact. (timm's config
  parser takes no negative number: ``d-1`` fails in timm itself; leave ``d`` out for a random
  depth.)

- ``ResizeKeepRatio`` (``train_crop_mode='rkrc'``/``'rkrr'``, ``crop_mode='border'``, a
  non-square eval size), every parameter: the arguments of ferroloader's ``ResizeKeepRatio``
  (:class:`KeepRatioArgs`; ``'random'`` interpolation, a tuple of modes in timm's object, as
  a list drawn from per sample). ``CenterCropOrPad`` and ``RandomCropOrPad`` (any ``fill``,
  every ``padding_mode``): :class:`CropOrPadArgs`. Their methods must be timm's own.

What does not convert raises ``ValueError`` naming the parameter (RandomErasing on another ``device`` than ``'cpu'``, or with
a ``__call__``/``_erase`` that is not timm's; a fill or filter Pillow's transform does not take, an op or policy whose class or functions
are not timm's own), and the converter leaves the op and what follows it to the Python tail.

The first two come back as the torchvision transforms they compute as; the converter
(``ferroloader.transforms``) converts those, and builds ``RandomResizedCropAndInterpolation``,
``TimmRandAugment``, ``TimmAutoAugment``, ``TimmAugMix`` and ``TimmRandomErasing`` from the arguments.

Must not import timm (the objects are recognised by their class and module names, so the
loader works where timm is not installed), nor ferroloader's transforms, which import this.
"""

from __future__ import annotations

import math
import sys
from typing import Any, List, NamedTuple, Optional, Tuple, Union

__all__ = [
    "AugMixArgs",
    "AugmentOpArgs",
    "AutoAugmentArgs",
    "RandAugmentArgs",
    "RandomErasingArgs",
    "CropOrPadArgs",
    "KeepRatioArgs",
    "ResizedCropArgs",
    "equivalent",
]


class ResizedCropArgs(NamedTuple):
    """The arguments of ferroloader's ``RandomResizedCropAndInterpolation`` for timm's with a
    list of interpolations (its ``InterpolationMode``s, or Pillow constants, as timm holds
    them)."""

    size: List[int]
    scale: Tuple[float, float]
    ratio: Tuple[float, float]
    interpolation: List[Any]


class KeepRatioArgs(NamedTuple):
    """The arguments of ferroloader's ``ResizeKeepRatio`` for timm's."""

    size: List[int]
    longest: float
    interpolation: Any
    random_scale_prob: float
    random_scale_range: Tuple[float, float]
    random_scale_area: bool
    random_aspect_prob: float
    random_aspect_range: Tuple[float, float]


class CropOrPadArgs(NamedTuple):
    """The arguments of ferroloader's ``CenterCropOrPad`` (``random`` false) or
    ``RandomCropOrPad`` for timm's."""

    random: bool
    size: List[int]
    fill: Any
    padding_mode: str


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


class AutoAugmentArgs(NamedTuple):
    """The arguments of ferroloader's ``TimmAutoAugment`` for timm's ``AutoAugment``."""

    policy: List[List[AugmentOpArgs]]


class AugMixArgs(NamedTuple):
    """The arguments of ferroloader's ``TimmAugMix`` for timm's ``AugMixAugment``."""

    ops: List[AugmentOpArgs]
    alpha: float
    width: int
    depth: int
    blended: bool


class RandomErasingArgs(NamedTuple):
    """The arguments of ferroloader's ``TimmRandomErasing`` for timm's ``RandomErasing``."""

    probability: float
    min_area: float
    max_area: float
    min_aspect: float
    max_aspect: float
    mode: str
    min_count: int
    max_count: int


def equivalent(
    t: Any,
) -> Union[
    None,
    Any,
    ResizedCropArgs,
    KeepRatioArgs,
    CropOrPadArgs,
    RandAugmentArgs,
    AutoAugmentArgs,
    AugMixArgs,
    RandomErasingArgs,
]:
    """What computes what timm's ``t`` computes: a torchvision transform (the converter takes
    it from there) or, for timm's ``RandomResizedCropAndInterpolation`` with a list of
    filters, ``RandAugment``, ``AutoAugment``, ``AugMixAugment`` and ``RandomErasing``,
    :class:`ResizedCropArgs`, :class:`RandAugmentArgs`, :class:`AutoAugmentArgs`,
    :class:`AugMixArgs` and :class:`RandomErasingArgs`; ``None`` for a timm transform with no
    equivalent. Raises ``ValueError`` naming a parameter that has none."""
    import torchvision.transforms as tv  # type: ignore[import-untyped]  # timm needs it: it is there

    name = type(t).__name__
    if name == "MaybeToTensor":
        return tv.ToTensor()
    if name == "MaybePILToTensor":
        return tv.PILToTensor()
    if name == "RandomResizedCropAndInterpolation":
        if isinstance(t.interpolation, (tuple, list)):
            return ResizedCropArgs(
                [int(v) for v in t.size],
                (float(t.scale[0]), float(t.scale[1])),
                (float(t.ratio[0]), float(t.ratio[1])),
                list(t.interpolation),
            )
        return tv.RandomResizedCrop(t.size, t.scale, t.ratio, t.interpolation, antialias=True)
    if name == "ResizeKeepRatio" and type(t).__module__ == _TRANSFORMS:
        _timms_methods(t, ("__call__", "get_params"))
        interpolation = t.interpolation
        return KeepRatioArgs(
            [int(v) for v in t.size],
            float(t.longest),
            list(interpolation) if isinstance(interpolation, (tuple, list)) else interpolation,
            float(t.random_scale_prob),
            (float(t.random_scale_range[0]), float(t.random_scale_range[1])),
            bool(t.random_scale_area),
            float(t.random_aspect_prob),
            (float(t.random_aspect_range[0]), float(t.random_aspect_range[1])),
        )
    if name in ("CenterCropOrPad", "RandomCropOrPad") and type(t).__module__ == _TRANSFORMS:
        random = name == "RandomCropOrPad"
        _timms_methods(t, ("forward", "get_params") if random else ("forward",))
        fill = t.fill
        return CropOrPadArgs(
            random,
            [int(v) for v in t.size],
            list(fill) if isinstance(fill, (tuple, list)) else fill,
            t.padding_mode,
        )
    if name == "RandomErasing" and type(t).__module__ == _RANDOM_ERASING:
        return _random_erasing(t)
    if name == "RandAugment" and type(t).__module__ == _AUTO_AUGMENT:
        return _rand_augment(t)
    if name == "AutoAugment" and type(t).__module__ == _AUTO_AUGMENT:
        return _auto_augment(t)
    if name == "AugMixAugment" and type(t).__module__ == _AUTO_AUGMENT:
        return _augmix(t)
    return None


_RANDOM_ERASING = "timm.data.random_erasing"
_TRANSFORMS = "timm.data.transforms"


def _timms_methods(t: Any, methods: Tuple[str, ...]) -> None:
    """Raises ``ValueError`` unless ``t``'s ``methods`` are those of timm's class of its name
    (a subclass that changes what it computes has no equivalent)."""
    cls = getattr(sys.modules[_TRANSFORMS], type(t).__name__, None)
    for method in methods:
        if getattr(type(t), method, None) is not getattr(cls, method, None):
            raise ValueError(f"its {method} is not timm's {type(t).__name__}'s")


def _random_erasing(t: Any) -> RandomErasingArgs:
    device = getattr(t, "device", "cpu")
    if str(device).split(":")[0] != "cpu":
        raise ValueError(
            f"device={device!r}: the loader erases each sample on the CPU, where timm's "
            "create_transform puts it (device='cpu')"
        )
    module = sys.modules[_RANDOM_ERASING]
    cls = getattr(module, "RandomErasing", None)
    if type(t).__call__ is not getattr(cls, "__call__", None) or type(t)._erase is not getattr(cls, "_erase", None):
        raise ValueError("its __call__ or _erase is not timm's RandomErasing's")
    # `_erase` reads these flags, which `__init__` sets from `mode`.
    mode = "pixel" if t.per_pixel else "rand" if t.rand_color else "const"
    low, high = t.log_aspect_ratio
    return RandomErasingArgs(
        float(t.probability),
        float(t.min_area),
        float(t.max_area),
        _aspect(low),
        _aspect(high),
        mode,
        int(t.min_count),
        int(t.max_count),
    )


def _aspect(log: float) -> float:
    """An aspect ratio whose ``math.log`` is ``log`` exactly (timm keeps only the logs; the
    native op takes the ratios and logs them with the same libm), else ``exp(log)``."""
    ratio = math.exp(log)
    for direction in (math.inf, -math.inf):
        candidate = ratio
        for _ in range(4):
            if math.log(candidate) == log:
                return candidate
            candidate = math.nextafter(candidate, direction)
    return ratio


_AUTO_AUGMENT = "timm.data.auto_augment"
_WARPS = ("Rotate", "ShearX", "ShearY", "TranslateX", "TranslateY", "TranslateXRel", "TranslateYRel")


def _augment_op(op: Any, where: str, module: Any) -> AugmentOpArgs:
    """One of timm's ``AugmentOp``s, read from its attributes; ``where`` names it in errors."""
    if type(op) is not getattr(module, "AugmentOp", None):
        raise ValueError(f"{where} is a {type(op).__qualname__}, not timm's AugmentOp")
    name = op.name
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
    return AugmentOpArgs(
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


def _rand_augment(t: Any) -> RandAugmentArgs:
    # timm's own module, already imported (``t`` is an instance of one of its classes): its
    # tables tell an AugmentOp that computes what its name says from one changed by hand.
    module = sys.modules[_AUTO_AUGMENT]
    ops = [_augment_op(op, f"ops[{i}]", module) for i, op in enumerate(t.ops)]
    if type(t).__call__ is not module.RandAugment.__call__:
        raise ValueError("its __call__ is not timm's RandAugment's")
    weights = t.choice_weights
    return RandAugmentArgs(ops, t.num_layers, None if weights is None else [float(w) for w in weights])


def _auto_augment(t: Any) -> AutoAugmentArgs:
    module = sys.modules[_AUTO_AUGMENT]
    policy = t.policy
    if not isinstance(policy, (list, tuple)) or not all(isinstance(sub, (list, tuple)) for sub in policy):
        raise ValueError(f"policy={policy!r}: give a list of sub-policies, each a list of AugmentOps")
    read = [[_augment_op(op, f"policy[{i}][{j}]", module) for j, op in enumerate(sub)] for i, sub in enumerate(policy)]
    if type(t).__call__ is not module.AutoAugment.__call__:
        raise ValueError("its __call__ is not timm's AutoAugment's")
    return AutoAugmentArgs(read)


def _augmix(t: Any) -> AugMixArgs:
    module = sys.modules[_AUTO_AUGMENT]
    ops = [_augment_op(op, f"ops[{i}]", module) for i, op in enumerate(t.ops)]
    cls = module.AugMixAugment
    for method in ("__call__", "_apply_basic", "_apply_blended", "_calc_blended_weights"):
        if getattr(type(t), method, None) is not getattr(cls, method):
            raise ValueError(f"its {method} is not timm's AugMixAugment's")
    return AugMixArgs(ops, float(t.alpha), t.width, t.depth, bool(t.blended))
