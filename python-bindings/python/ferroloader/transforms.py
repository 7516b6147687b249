"""torchvision's image-classification transforms, by the same names and arguments.

These objects only *describe* a pipeline: the loader runs them natively (decode, crop, resize,
flip, to-tensor and normalize fused into one pass per sample). Supported shapes of a pipeline::

    RandomResizedCrop | Resize [CenterCrop | RandomCrop | RandomResizedCrop] | CenterCrop
      | RandomCrop                                            (fixes the output size;
      RandomResizedCropAndInterpolation wherever RandomResizedCrop)
      | ResizeKeepRatio (CenterCropOrPad | RandomCropOrPad | CenterCrop | RandomCrop)
      | CenterCropOrPad | RandomCropOrPad                    (timm's)
    RandomHorizontalFlip, pixel ops, policies and geometric ops, any number, any order,
      also inside RandomApply / RandomChoice / RandomOrder (nested at will)
    ToTensor [Normalize]  |  PILToTensor                      (float32 / uint8 output)
      with RandomErasing (or timm's, TimmRandomErasing) after ToTensor, before or after
      Normalize (float32 output only); ToDtype wherever ToTensor (v2's
      ToDtype(torch.float32, scale=True): x * float32(1/255), where ToTensor divides by 255)

A nested ``Compose`` stands for its ops where it stands (inside ``RandomChoice`` and
``RandomOrder`` it is one choice, one item).

The geometric ops (``RandomVerticalFlip``, ``RandomRotation``, ``RandomAffine``, ``RandomPerspective``,
``GaussianBlur``, ``Pad``, ``RandomCrop``, ``CenterCrop``) run on that 8-bit image as torchvision
does on a PIL image (Pillow's transforms, NEAREST, BILINEAR or BICUBIC, and padding, exactly;
``GaussianBlur`` within one level); ``Pad`` and the crops change the sample's size, which is
planned once. ``ElasticTransform`` runs torch's tensor kernel (``grid_sample``) on either side of
``ToImage``, as torchvision does.

The pixel ops (``ColorJitter``, ``Grayscale``, ``RandomGrayscale``,
``RandomPosterize``, ``RandomSolarize``, ``RandomEqualize``, ``RandomAutocontrast``,
``RandomAdjustSharpness``, ``RandomInvert``, and v2's ``JPEG``) run on the 8-bit image of the
output size, with Pillow's arithmetic (what torchvision computes on a PIL image), each drawing its
parameters from the sample's generator in pipeline order. With none of them the single fused pass runs.
So do torchvision's augmentation policies ``TrivialAugmentWide``, ``RandAugment`` and
``AutoAugment`` (v1 or v2 draws, NEAREST, BILINEAR or BICUBIC warps, any ``fill``), and
``AugMix``, which runs as torchvision runs it on a PIL image: its chains with torch's *tensor*
kernels on the uint8 image (NEAREST or BILINEAR warps: those kernels refuse BICUBIC), mixed in
float32 and truncated back. timm's ``RandAugment`` (``TimmRandAugment``, what
``timm.data.create_transform(auto_augment="rand-...")`` builds), ``AutoAugment``
(``TimmAutoAugment``: ``auto_augment="original"``, ``"originalr"``, ``"v0"``, ``"v0r"``) and
``AugMixAugment`` (``TimmAugMix``: ``auto_augment="augmix-..."``) run natively too, with timm's
draws and Pillow's arithmetic, and so do timm's ``RandomResizedCropAndInterpolation`` with a
filter drawn per sample (``interpolation='random'``) and its ``RandomErasing`` (``TimmRandomErasing``,
``create_transform(re_prob=, re_mode=, re_count=)``) in every mode, with timm's draws.

After a :class:`ToImage` (where torchvision's ``ToImage()``/``PILToTensor()`` stands before
other ops: torchvision then holds a uint8 tensor) the colour ops, the warps and the policies
compute what torchvision's *tensor* kernels compute instead (v1's or v2's: truncating float32
blends and gray levels, float HSV, ``grid_sample`` warps with a mask-channel fill, BICUBIC
refused); see docs/transforms.md.

``from_torchvision(compose)`` converts a torchvision ``Compose`` (v1 or v2) of these transforms,
naming any transform it cannot convert. ``split_python_tail`` cuts a pipeline with transforms
that have no native equivalent into the longest native prefix and a Python tail (what
:class:`ferroloader.Loader` runs). Arguments are checked here (``TypeError`` or
``ValueError`` naming the transform and the argument); the order of the ops is checked when the
pipeline is planned (by :class:`ferroloader.Loader` or :func:`check`).
"""

from __future__ import annotations

import collections.abc
import copy
import inspect
import json
import math
import numbers
import operator
import types
from typing import (
    Any,
    Callable,
    Dict,
    Iterable,
    List,
    NamedTuple,
    Optional,
    Sequence,
    SupportsIndex,
    Tuple,
    Union,
    cast,
)

import numpy as np

from ferroloader import _bytecode, _native, _openclip, _ssl

__all__ = [
    "Transform",
    "Compose",
    "RandomResizedCrop",
    "RandomResizedCropAndInterpolation",
    "Resize",
    "CenterCrop",
    "RandomHorizontalFlip",
    "ToTensor",
    "ToDtype",
    "PILToTensor",
    "ToImage",
    "Normalize",
    "ColorJitter",
    "Grayscale",
    "RandomGrayscale",
    "RandomPosterize",
    "RandomSolarize",
    "RandomEqualize",
    "RandomAutocontrast",
    "RandomAdjustSharpness",
    "RandomInvert",
    "JPEG",
    "Identity",
    "RGB",
    "RandomChannelPermutation",
    "RandomPhotometricDistort",
    "TrivialAugmentWide",
    "RandAugment",
    "AutoAugment",
    "AugMix",
    "TimmRandAugment",
    "TimmAutoAugment",
    "TimmAugMix",
    "TimmAugmentOp",
    "TIMM_AUGMENT_OPS",
    "RandomApply",
    "RandomChoice",
    "RandomOrder",
    "RandomErasing",
    "GaussianNoise",
    "TimmRandomErasing",
    "RandomVerticalFlip",
    "RandomRotation",
    "RandomAffine",
    "RandomPerspective",
    "ElasticTransform",
    "GaussianBlur",
    "Pad",
    "RandomCrop",
    "ResizeKeepRatio",
    "CenterCropOrPad",
    "RandomCropOrPad",
    "from_torchvision",
    "check",
    "TailSplit",
    "split_python_tail",
]

SizeArg = Union[int, Sequence[int]]
Spec = Dict[str, Any]


def _is_int(value: object) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _size(op: str, name: str, value: object) -> Union[int, List[int]]:
    """An ``int`` or a ``[height, width]`` pair (a 1-sequence counts as its int), checked."""
    if _is_int(value):
        size = operator.index(cast(SupportsIndex, value))
        if size < 1:
            raise ValueError(f"{op}: {name} must be at least 1, got {size}")
        return size
    if isinstance(value, (list, tuple)) and len(value) in (1, 2) and all(_is_int(v) for v in value):
        sides = [int(v) for v in value]
        if min(sides) < 1:
            raise ValueError(f"{op}: {name} must be positive, got {value!r}")
        return sides[0] if len(sides) == 1 else sides
    raise TypeError(
        f"{op}: {name} must be an int or a (height, width) sequence of ints, got {value!r}"
    )


def _pair(op: str, name: str, value: object) -> Tuple[float, float]:
    """A ``(min, max)`` pair of finite floats."""
    try:
        lo, hi = (float(v) for v in cast(Iterable[Any], value))
    except (TypeError, ValueError):
        raise TypeError(f"{op}: {name} must be a (min, max) pair of numbers, got {value!r}") from None
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise ValueError(f"{op}: {name} must be finite, got {value!r}")
    if lo > hi:
        raise ValueError(f"{op}: {name} should be of kind (min, max), got {value!r}")
    return lo, hi


# Pillow's resampling constants, as torchvision maps them to its modes
# (``_interpolation_modes_from_int``).
_PIL_FILTERS = {0: "nearest", 2: "bilinear", 3: "bicubic", 4: "box", 5: "hamming", 1: "lanczos"}
_INTERPOLATIONS = ("nearest", "bilinear", "bicubic", "box", "hamming", "lanczos")
# Modes torchvision resizes only PIL images with (a tensor raises there).
_PIL_ONLY_INTERPOLATIONS = ("box", "hamming", "lanczos")


def _interpolation(op: str, value: object) -> str:
    """The interpolation's name: a string, torchvision's ``InterpolationMode`` or a Pillow
    constant (an int, as torchvision accepts them). Every mode torchvision has for PIL images
    is implemented, as Pillow computes it (the convolutions antialiased); ``nearest-exact``
    (tensors only) is not."""
    if isinstance(value, int) and not isinstance(value, bool):
        name: object = _PIL_FILTERS.get(int(value), value)
    else:
        name = getattr(value, "value", value)  # torchvision's InterpolationMode is a str enum
    if isinstance(name, str) and name.lower() in _INTERPOLATIONS:
        return name.lower()
    raise ValueError(
        f"{op}: interpolation {value!r} ({name}) is not supported; only Pillow's modes are "
        "implemented (nearest, bilinear, bicubic, box, hamming, lanczos)"
    )


def _with_interpolation(spec: Spec, interpolation: str) -> Spec:
    """``spec`` with its interpolation, left out when it is the default (bilinear), so that
    specs written before the other modes existed stay equal."""
    if interpolation != "bilinear":
        spec["interpolation"] = interpolation
    return spec


def _antialias(op: str, value: object) -> bool:
    if value is None or value is True or value == "warn":
        return True
    if value is False:
        raise ValueError(
            f"{op}: antialias=False is not supported (PIL images are always resized with "
            "antialias, and so does ferroloader)"
        )
    raise TypeError(f"{op}: antialias must be a bool, got {value!r}")


def _triple(op: str, name: str, value: object) -> List[float]:
    """One float per channel (a single value applies to all three)."""
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        values = [float(value)]
    else:
        try:
            values = [float(v) for v in cast(Iterable[Any], value)]
        except (TypeError, ValueError):
            raise TypeError(
                f"{op}: {name} must be a sequence of 3 numbers (one per channel), got {value!r}"
            ) from None
    if len(values) == 1:
        values = values * 3
    if len(values) != 3:
        raise ValueError(
            f"{op}: {name} must have 3 values (one per RGB channel), got {len(values)}"
        )
    if not all(math.isfinite(v) for v in values):
        raise ValueError(f"{op}: {name} must be finite, got {value!r}")
    return values


def _values_given(value: object) -> int:
    """How many values a number or a sequence of them is (checked by :func:`_triple`)."""
    if isinstance(value, numbers.Real):
        return 1
    return len(list(cast(Iterable[Any], value)))


def _number(op: str, name: str, value: object) -> float:
    """A finite real number (not a bool)."""
    if not isinstance(value, numbers.Real) or isinstance(value, bool):
        raise TypeError(f"{op}: {name} must be a number, got {value!r}")
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"{op}: {name} must be finite, got {value!r}")
    return number


def _probability(op: str, value: object) -> float:
    """``p`` in [0, 1], as torchvision v2 checks it (v1 does not)."""
    p = _number(op, "p", value)
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"{op}: p must be a probability in [0, 1], got {value!r}")
    return p


def _jitter(
    op: str, name: str, value: object, center: float, bound: Tuple[float, float]
) -> Union[float, List[float]]:
    """One ``ColorJitter`` argument, checked as torchvision's ``_check_input``: a non-negative
    number (``[max(0, center - v), center + v]``; hue ``[-v, v]``), or a ``(min, max)`` pair
    within ``bound``. Kept in the form given: the native planner resolves it the same way."""
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        v = _number(op, name, value)
        if v < 0:
            raise ValueError(f"{op}: if {name} is a single number, it must be non negative, got {value!r}")
        lo, hi = (max(center - v, 0.0) if center else -v), center + v
        if not bound[0] <= lo <= hi <= bound[1]:
            raise ValueError(f"{op}: {name} values should be between {bound}, got {value!r}")
        return v
    if isinstance(value, (list, tuple)) and len(value) == 2:
        lo, hi = (_number(op, name, v) for v in value)
        if not bound[0] <= lo <= hi <= bound[1]:
            raise ValueError(f"{op}: {name} values should be between {bound}, got {value!r}")
        return [lo, hi]
    raise TypeError(f"{op}: {name} should be a single number or a (min, max) pair, got {value!r}")


class Transform:
    """Base of the ops: each describes itself as one op of the native pipeline spec."""

    def to_spec(self) -> Spec:
        """The op as the native pipeline spec names it (torchvision's name and arguments)."""
        raise NotImplementedError

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Transform) and type(self) is type(other) and self.to_spec() == other.to_spec()

    def __hash__(self) -> int:
        return hash(json.dumps(self.to_spec(), sort_keys=True))

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.to_spec().items() if k != "op")
        return f"{type(self).__name__}({args})"


def _resized_crop_args(
    op: str, size: SizeArg, scale: Tuple[float, float], ratio: Tuple[float, float]
) -> Tuple[Union[int, List[int]], Tuple[float, float], Tuple[float, float]]:
    """A random resized crop's ``size``, ``scale`` and ``ratio``, checked as torchvision checks
    them."""
    checked_size = _size(op, "size", size)
    checked_scale = _pair(op, "scale", scale)
    if checked_scale[0] < 0:
        raise ValueError(f"{op}: scale must be non-negative, got {scale!r}")
    checked_ratio = _pair(op, "ratio", ratio)
    if checked_ratio[0] <= 0:
        raise ValueError(f"{op}: ratio must be positive, got {ratio!r}")
    return checked_size, checked_scale, checked_ratio


class RandomResizedCrop(Transform):
    """``RandomResizedCrop(size, scale=(0.08, 1.0), ratio=(3/4, 4/3))``: a random crop of random
    area and aspect ratio, resized to ``size``; parameters drawn exactly as torchvision's
    ``get_params`` does, from a per-sample generator seeded by (seed, epoch, index).
    ``interpolation``: nearest, bilinear (default), bicubic, box, hamming or lanczos, as Pillow
    resizes a PIL image."""

    def __init__(
        self,
        size: SizeArg,
        scale: Tuple[float, float] = (0.08, 1.0),
        ratio: Tuple[float, float] = (3.0 / 4.0, 4.0 / 3.0),
        interpolation: Any = "bilinear",
        antialias: Optional[bool] = True,
    ) -> None:
        op = "RandomResizedCrop"
        self.size, self.scale, self.ratio = _resized_crop_args(op, size, scale, ratio)
        self.interpolation = _interpolation(op, interpolation)
        self.antialias = _antialias(op, antialias)

    def to_spec(self) -> Spec:
        spec: Spec = {
            "op": "RandomResizedCrop",
            "size": self.size,
            "scale": list(self.scale),
            "ratio": list(self.ratio),
        }
        return _with_interpolation(spec, self.interpolation)

    def draw_params(
        self,
        width: int,
        height: int,
        indices: Iterable[int],
        *,
        seed: int = 0,
        epoch: int = 0,
        flip_p: float = 0.0,
        repeats: Optional[Sequence[int]] = None,
    ) -> np.ndarray:
        """The crops the loader draws for samples ``indices`` of ``epoch`` (loader seed
        ``seed``) of a ``width`` x ``height`` image: an int64 array ``[n, 5]`` of
        ``(top, left, height, width, flipped)`` (``flipped`` drawn after the crop when a
        ``RandomHorizontalFlip(flip_p)`` follows, else 0). ``repeats``: each sample's copy
        number in its epoch (0, the default, for an index's first visit; see the loader's
        ``SampleKey``: a sampler that repeats an index gives its k-th copy other draws)."""
        return _native.random_resized_crop_params(
            width,
            height,
            list(indices),
            seed=seed,
            epoch=epoch,
            scale=self.scale,
            ratio=self.ratio,
            flip_p=flip_p,
            repeats=None if repeats is None else [int(r) for r in repeats],
        )


#: timm's ``_RANDOM_INTERPOLATION``: what ``interpolation='random'`` chooses among.
_RANDOM_INTERPOLATION = ["bilinear", "bicubic"]
_MAX_FILTER_CHOICES = 8


def _filter_choice(interpolation: Union[str, Sequence[str]]) -> List[str]:
    """The filters a timm resize chooses among per sample, in draw order: one filter (no
    choice), or timm's ``'random'`` list."""
    if isinstance(interpolation, str):
        return [interpolation]
    return list(interpolation)


def _timm_resize_filters(op: str, interpolation: Any) -> Union[str, List[str]]:
    """timm's resize ``interpolation``: one filter, ``'random'`` (BILINEAR or BICUBIC per sample) or
    a list of 1 to 8 filters to draw from."""
    if isinstance(interpolation, str) and interpolation == "random":
        return list(_RANDOM_INTERPOLATION)
    if isinstance(interpolation, (list, tuple)):
        if not 1 <= len(interpolation) <= _MAX_FILTER_CHOICES:
            raise ValueError(
                f"{op}: interpolation must be one filter, 'random', or a list of 1 to "
                f"{_MAX_FILTER_CHOICES} filters, got {interpolation!r}"
            )
        return [_interpolation(op, v) for v in interpolation]
    return _interpolation(op, interpolation)


class RandomResizedCropAndInterpolation(Transform):
    """timm's ``RandomResizedCropAndInterpolation(size, scale=(0.08, 1.0), ratio=(3/4, 4/3),
    interpolation='bilinear')`` (``timm.data.transforms``; what
    ``timm.data.create_transform(is_training=True)`` builds): :class:`RandomResizedCrop`'s crop
    (timm's ``get_params`` is torchvision's algorithm), resized with Pillow's antialiased
    filter. ``interpolation``: one filter (a name, an ``InterpolationMode`` or a Pillow
    constant: the six :class:`RandomResizedCrop` takes), ``'random'`` (timm's default in
    ``transforms_imagenet_train``: BILINEAR or BICUBIC), or a list of up to 8 filters; with
    several, each sample draws one uniformly (``random.choice``) right after its crop, from the
    sample's generator (timm's distribution, not Python's global stream). A sample resized with
    a given filter is :class:`RandomResizedCrop`'s with that filter, bit for bit.

    ``from_torchvision`` converts timm's object with a list of filters into this (with one
    filter, into :class:`RandomResizedCrop`, which computes the same)."""

    def __init__(
        self,
        size: SizeArg,
        scale: Tuple[float, float] = (0.08, 1.0),
        ratio: Tuple[float, float] = (3.0 / 4.0, 4.0 / 3.0),
        interpolation: Any = "bilinear",
    ) -> None:
        op = "RandomResizedCropAndInterpolation"
        self.size, self.scale, self.ratio = _resized_crop_args(op, size, scale, ratio)
        self.interpolation = _timm_resize_filters(op, interpolation)

    @property
    def filters(self) -> List[str]:
        """The filters a sample's resize chooses among (one: no choice), in draw order."""
        return _filter_choice(self.interpolation)

    def to_spec(self) -> Spec:
        return {
            "op": "RandomResizedCropAndInterpolation",
            "size": self.size,
            "scale": list(self.scale),
            "ratio": list(self.ratio),
            "interpolation": self.interpolation,
        }

    def draw_params(
        self,
        width: int,
        height: int,
        indices: Iterable[int],
        *,
        seed: int = 0,
        epoch: int = 0,
        flip_p: float = 0.0,
        repeats: Optional[Sequence[int]] = None,
    ) -> np.ndarray:
        """What the loader draws for samples ``indices`` of ``epoch`` (loader seed ``seed``) of
        a ``width`` x ``height`` image: an int64 array ``[n, 6]`` of ``(top, left, height,
        width, filter, flipped)``, ``filter`` an index into :attr:`filters` (0 with one filter,
        which draws nothing), ``flipped`` drawn after them when a
        ``RandomHorizontalFlip(flip_p)`` follows (else 0). ``repeats`` as
        :meth:`RandomResizedCrop.draw_params`'s."""
        return _native.random_resized_crop_params(
            width,
            height,
            list(indices),
            seed=seed,
            epoch=epoch,
            scale=self.scale,
            ratio=self.ratio,
            flip_p=flip_p,
            interpolation=self.filters,
            repeats=None if repeats is None else [int(r) for r in repeats],
        )


class Resize(Transform):
    """``Resize(size, max_size=None)``: an int (or 1-sequence) resizes the shorter side to it,
    keeping the aspect ratio (then a ``CenterCrop`` must follow, so samples batch); a
    ``(height, width)`` pair resizes to exactly that. ``interpolation``: nearest, bilinear
    (default), bicubic, box, hamming or lanczos, as Pillow resizes a PIL image."""

    def __init__(
        self,
        size: SizeArg,
        interpolation: Any = "bilinear",
        max_size: Optional[int] = None,
        antialias: Optional[bool] = True,
    ) -> None:
        op = "Resize"
        self.size = _size(op, "size", size)
        if max_size is not None:
            if not _is_int(max_size):
                raise TypeError(f"{op}: max_size must be an int or None, got {max_size!r}")
            if not isinstance(self.size, int):
                raise ValueError(f"{op}: max_size is only allowed when size is an int")
            if int(max_size) <= self.size:
                raise ValueError(
                    f"{op}: max_size = {max_size} must be strictly greater than size = {self.size}"
                )
        self.max_size = None if max_size is None else int(max_size)
        self.interpolation = _interpolation(op, interpolation)
        self.antialias = _antialias(op, antialias)

    def to_spec(self) -> Spec:
        spec: Spec = {"op": "Resize", "size": self.size, "max_size": self.max_size}
        return _with_interpolation(spec, self.interpolation)


class CenterCrop(Transform):
    """``CenterCrop(size)``: the centered ``size`` crop (an int is square). Where the crop is
    larger than the image, the image is first padded with zeros, as torchvision does."""

    def __init__(self, size: SizeArg) -> None:
        self.size = _size("CenterCrop", "size", size)

    def to_spec(self) -> Spec:
        return {"op": "CenterCrop", "size": self.size}


class RandomHorizontalFlip(Transform):
    """``RandomHorizontalFlip(p=0.5)``: mirror left to right with probability ``p``."""

    def __init__(self, p: float = 0.5) -> None:
        if not isinstance(p, numbers.Real) or isinstance(p, bool):
            raise TypeError(f"RandomHorizontalFlip: p must be a number, got {p!r}")
        if not 0.0 <= float(p) <= 1.0:
            raise ValueError(f"RandomHorizontalFlip: p must be a probability in [0, 1], got {p!r}")
        self.p: float = float(p)

    def to_spec(self) -> Spec:
        return {"op": "RandomHorizontalFlip", "p": self.p}


class ToTensor(Transform):
    """``ToTensor()``: uint8 HWC pixels to float32 CHW in [0, 1], ``x / 255`` as torchvision
    v1 computes it (``x.float().div(255)``; also v1's ``ConvertImageDtype(torch.float32)``)."""

    def to_spec(self) -> Spec:
        return {"op": "ToTensor"}


class ToDtype(ToTensor):
    """v2's ``ToDtype(torch.float32, scale=True)`` (and v2's
    ``ConvertImageDtype(torch.float32)``): :class:`ToTensor` with torchvision v2's arithmetic,
    ``x * float32(1 / 255)`` (``image.to(float32).mul_(1.0 / 255)``), which differs from
    ``ToTensor``'s division by one ulp on 126 of the 256 levels. It stands where ``ToTensor``
    may; ``from_torchvision`` converts v2's ToDtype/ConvertImageDtype to it."""

    def to_spec(self) -> Spec:
        return {"op": "ToDtype"}


class PILToTensor(Transform):
    """``PILToTensor()``: uint8 HWC pixels to uint8 CHW (use with ``output="uint8"``)."""

    def to_spec(self) -> Spec:
        return {"op": "PILToTensor"}


class ToImage(Transform):
    """``ToImage()`` standing before other ops (torchvision v2's recipes put it first): from
    here on torchvision holds a uint8 tensor, so the colour ops, the warps and the policies
    after it run torch's *tensor* kernels natively (truncating float32 blends and gray levels,
    float HSV for the hue, ``grid_sample`` warps, which refuse BICUBIC), not Pillow's
    arithmetic. It converts nothing itself: the conversion stays where ``ToTensor`` (or
    ``PILToTensor`` for uint8 output) stands, and a ``ToImage`` right before it changes nothing.

    ``api``: whose tensor kernels the single ops after it follow, ``"v2"`` (default,
    ``torchvision.transforms.v2.functional``) or ``"v1"`` (``torchvision.transforms.functional``,
    what v1's ``PILToTensor`` leads to); the policies and ``AugMix`` keep their own ``api``. Not
    allowed inside ``RandomApply``/``RandomChoice``/``RandomOrder``."""

    def __init__(self, *, api: str = "v2") -> None:
        self.api = _api("ToImage", api)

    def to_spec(self) -> Spec:
        return {"op": "ToImage", "api": self.api}


class Normalize(Transform):
    """``Normalize(mean, std)``: ``(x - mean) / std`` per channel, after ``ToTensor``. With
    ``output="uint8"`` it is left to the consumer (``Loader.deferred_normalize``)."""

    def __init__(
        self,
        mean: Union[float, Sequence[float]],
        std: Union[float, Sequence[float]],
        inplace: bool = False,
    ) -> None:
        self.mean = _triple("Normalize", "mean", mean)
        self.std = _triple("Normalize", "std", std)
        if any(s == 0.0 for s in self.std):
            raise ValueError(f"Normalize: std evaluated to zero, leading to division by zero: {std!r}")
        self.inplace = bool(inplace)
        #: How many values were given (1 or 3): three do not fit a one-channel sample.
        self.channels_given = 1 if _values_given(mean) == _values_given(std) == 1 else 3

    def check_channels(self, channels: int) -> None:
        """Raises where torchvision's ``Normalize`` would fail on a ``channels``-channel tensor:
        three values for one channel (one value fits any count, broadcast)."""
        if channels == 1 and self.channels_given == 3:
            raise ValueError(
                f"Normalize: mean {self.mean} and std {self.std} have 3 values, the samples one "
                "channel (torchvision's Normalize fails on them too); give one value each"
            )

    def to_spec(self) -> Spec:
        return {"op": "Normalize", "mean": self.mean, "std": self.std}


class ColorJitter(Transform):
    """``ColorJitter(brightness=0, contrast=0, saturation=0, hue=0)``: each a number or a
    ``(min, max)`` pair; the four adjustments in a random order with random factors."""

    def __init__(
        self,
        brightness: Union[float, Sequence[float]] = 0,
        contrast: Union[float, Sequence[float]] = 0,
        saturation: Union[float, Sequence[float]] = 0,
        hue: Union[float, Sequence[float]] = 0,
    ) -> None:
        inf = float("inf")
        self.brightness = _jitter("ColorJitter", "brightness", brightness, 1.0, (0.0, inf))
        self.contrast = _jitter("ColorJitter", "contrast", contrast, 1.0, (0.0, inf))
        self.saturation = _jitter("ColorJitter", "saturation", saturation, 1.0, (0.0, inf))
        self.hue = _jitter("ColorJitter", "hue", hue, 0.0, (-0.5, 0.5))

    def to_spec(self) -> Spec:
        return {
            "op": "ColorJitter",
            "brightness": self.brightness,
            "contrast": self.contrast,
            "saturation": self.saturation,
            "hue": self.hue,
        }


class Grayscale(Transform):
    """``Grayscale(num_output_channels=1)``: Pillow's ``convert("L")``; samples come out with
    one channel, or with the gray level in all three for ``num_output_channels=3``."""

    def __init__(self, num_output_channels: int = 1) -> None:
        if not _is_int(num_output_channels):
            raise TypeError(f"Grayscale: num_output_channels must be an int, got {num_output_channels!r}")
        if num_output_channels not in (1, 3):
            raise ValueError(f"Grayscale: num_output_channels={num_output_channels} is not 1 or 3")
        self.num_output_channels = int(num_output_channels)

    def to_spec(self) -> Spec:
        return {"op": "Grayscale", "num_output_channels": self.num_output_channels}


class RandomGrayscale(Transform):
    """``RandomGrayscale(p=0.1)``: grayscale (in all three channels) with probability ``p``."""

    def __init__(self, p: float = 0.1) -> None:
        self.p = _probability("RandomGrayscale", p)

    def to_spec(self) -> Spec:
        return {"op": "RandomGrayscale", "p": self.p}


class RandomPosterize(Transform):
    """``RandomPosterize(bits, p=0.5)``: keep the top ``bits`` (1 to 8) bits of each channel."""

    def __init__(self, bits: int, p: float = 0.5) -> None:
        if not _is_int(bits):
            raise TypeError(f"RandomPosterize: bits must be an int, got {bits!r}")
        if not 1 <= int(bits) <= 8:
            raise ValueError(f"RandomPosterize: bits must be between 1 and 8, got {bits!r}")
        self.bits = int(bits)
        self.p = _probability("RandomPosterize", p)

    def to_spec(self) -> Spec:
        return {"op": "RandomPosterize", "bits": self.bits, "p": self.p}


class RandomSolarize(Transform):
    """``RandomSolarize(threshold, p=0.5)``: invert every level at or above ``threshold``."""

    def __init__(self, threshold: float, p: float = 0.5) -> None:
        self.threshold = _number("RandomSolarize", "threshold", threshold)
        self.p = _probability("RandomSolarize", p)

    def to_spec(self) -> Spec:
        return {"op": "RandomSolarize", "threshold": self.threshold, "p": self.p}


class RandomEqualize(Transform):
    """``RandomEqualize(p=0.5)``: Pillow's histogram equalization with probability ``p``."""

    def __init__(self, p: float = 0.5) -> None:
        self.p = _probability("RandomEqualize", p)

    def to_spec(self) -> Spec:
        return {"op": "RandomEqualize", "p": self.p}


class RandomAutocontrast(Transform):
    """``RandomAutocontrast(p=0.5)``: stretch each channel to 0..255 with probability ``p``."""

    def __init__(self, p: float = 0.5) -> None:
        self.p = _probability("RandomAutocontrast", p)

    def to_spec(self) -> Spec:
        return {"op": "RandomAutocontrast", "p": self.p}


class RandomAdjustSharpness(Transform):
    """``RandomAdjustSharpness(sharpness_factor, p=0.5)``: 0 blurs, 1 keeps, 2 sharpens."""

    def __init__(self, sharpness_factor: float, p: float = 0.5) -> None:
        factor = _number("RandomAdjustSharpness", "sharpness_factor", sharpness_factor)
        if factor < 0:
            raise ValueError(
                f"RandomAdjustSharpness: sharpness_factor must be non negative, got {sharpness_factor!r}"
            )
        self.sharpness_factor = factor
        self.p = _probability("RandomAdjustSharpness", p)

    def to_spec(self) -> Spec:
        return {"op": "RandomAdjustSharpness", "sharpness_factor": self.sharpness_factor, "p": self.p}


class RandomInvert(Transform):
    """``RandomInvert(p=0.5)``: ``255 - v`` with probability ``p``."""

    def __init__(self, p: float = 0.5) -> None:
        self.p = _probability("RandomInvert", p)

    def to_spec(self) -> Spec:
        return {"op": "RandomInvert", "p": self.p}


class JPEG(Transform):
    """torchvision v2's ``JPEG(quality)``: the image compressed to JPEG and decompressed again,
    at ``quality`` or, for a ``(min, max)`` pair, at a quality drawn uniformly from it (both
    ends included, ``torch.randint(min, max + 1)``) per sample. libjpeg-turbo set as Pillow's
    ``save(format="JPEG", quality=q)`` sets it (4:2:0, accurate DCT, baseline), which is also
    how torchvision's ``encode_jpeg`` sets it: the same pixels on a PIL image and after
    ``ToImage``. Arguments checked as torchvision checks them (with its errors)."""

    def __init__(self, quality: Union[int, Sequence[int]]) -> None:
        if isinstance(quality, bool):
            raise TypeError("JPEG: quality can't be bool")
        if _is_int(quality):
            pair: List[Any] = [quality, quality]
        elif isinstance(quality, collections.abc.Sequence) and not isinstance(quality, str):
            if len(quality) != 2:
                raise ValueError("JPEG: If quality is a sequence its length should be one of (2,).")
            pair = list(quality)
        else:
            raise TypeError("JPEG: quality should be a sequence of length 2.")
        if not (all(_is_int(q) for q in pair) and 1 <= pair[0] <= pair[1] <= 100):
            raise ValueError(f"JPEG: quality must be an integer from 1 to 100, got quality ={quality!r}")
        self.quality = [int(q) for q in pair]

    def to_spec(self) -> Spec:
        return {"op": "JPEG", "quality": list(self.quality)}


class Identity(Transform):
    """v2's ``Identity()`` (and ``torch.nn.Identity()``): nothing. In a pipeline it is no op at
    all (an empty ``Compose``, which the planner flattens away, so the single fused pass and the
    crop's region decode stay); inside ``RandomChoice``/``RandomOrder`` it is still one choice."""

    def to_spec(self) -> Spec:
        return {"op": "Compose", "transforms": []}

    def __repr__(self) -> str:
        return "Identity()"


class RGB(Transform):
    """v2's ``RGB()``: three channels. Nothing on an RGB image; on a one-channel (``L``) image
    the gray level in all three, as ``Grayscale(num_output_channels=3)`` gives (samples come
    out ``[B, 3, H, W]``). Costs nothing per sample."""

    def to_spec(self) -> Spec:
        return {"op": "RGB"}


class RandomPhotometricDistort(Transform):
    """v2's ``RandomPhotometricDistort(brightness=(0.875, 1.125), contrast=(0.5, 1.5),
    saturation=(0.5, 1.5), hue=(-0.05, 0.05), p=0.5)``: each adjustment with probability
    ``p`` (factor uniform in its range), contrast before or after saturation and hue by a coin,
    then with probability ``p`` a random channel permutation; torchvision's draws in order,
    ``ColorJitter``'s kernels (Pillow's on the PIL image, v2's tensor kernels after
    ``ToImage``), one profiler span."""

    def __init__(
        self,
        brightness: Sequence[float] = (0.875, 1.125),
        contrast: Sequence[float] = (0.5, 1.5),
        saturation: Sequence[float] = (0.5, 1.5),
        hue: Sequence[float] = (-0.05, 0.05),
        p: float = 0.5,
    ) -> None:
        op = "RandomPhotometricDistort"
        self.brightness = _pair(op, "brightness", brightness)
        self.contrast = _pair(op, "contrast", contrast)
        self.saturation = _pair(op, "saturation", saturation)
        self.hue = _pair(op, "hue", hue)
        for name, (lo, hi), low, high in (
            ("brightness", self.brightness, 0.0, math.inf),
            ("contrast", self.contrast, 0.0, math.inf),
            ("saturation", self.saturation, 0.0, math.inf),
            ("hue", self.hue, -0.5, 0.5),
        ):
            if not low <= lo <= hi <= high:
                raise ValueError(f"{op}: {name} should be an ordered range within [{low}, {high}], got {(lo, hi)!r}")
        self.p = _probability(op, p)

    def to_spec(self) -> Spec:
        return {
            "op": "RandomPhotometricDistort",
            "brightness": list(self.brightness),
            "contrast": list(self.contrast),
            "saturation": list(self.saturation),
            "hue": list(self.hue),
            "p": self.p,
        }


class RandomChannelPermutation(Transform):
    """v2's ``RandomChannelPermutation()``: the channels in a uniformly random order per sample
    (``torch.randperm``), on the PIL image or the uint8 tensor alike; nothing on one channel."""

    def to_spec(self) -> Spec:
        return {"op": "RandomChannelPermutation"}


def _warp_interpolation(op: str, value: object) -> str:
    """The warps' filter: ``NEAREST``, ``BILINEAR`` or ``BICUBIC`` (an ``InterpolationMode``,
    its name, or PIL's code 0, 2 or 3, as torchvision v2 also takes): Pillow's three transform
    filters, which torchvision's PIL path hands to ``Image.transform``."""
    name = getattr(value, "value", value)
    if _is_int(name):
        name = {0: "nearest", 2: "bilinear", 3: "bicubic"}.get(int(cast(SupportsIndex, name)), name)
    if isinstance(name, str) and name.lower() in ("nearest", "bilinear", "bicubic"):
        return name.lower()
    raise ValueError(
        f"{op}: interpolation {value!r} is not supported; only NEAREST, BILINEAR and BICUBIC are"
    )


#: torchvision's error where its tensor kernels (``rotate``, ``affine``, ``perspective`` on a
#: tensor, v1 and v2; AugMix, which warps a uint8 tensor) meet BICUBIC.
_BICUBIC_ON_TENSORS = "Interpolation mode 'bicubic' is unsupported with Tensor input"


def _tensor_warp_interpolation(op: str, value: object) -> str:
    """:func:`_warp_interpolation` for an op torchvision runs with its tensor kernels, which
    refuse ``BICUBIC`` (torchvision raises on the first warp drawn; ferroloader when the op is
    built)."""
    name = _warp_interpolation(op, value)
    if name == "bicubic":
        raise ValueError(f"{op}: interpolation {value!r}: {_BICUBIC_ON_TENSORS} (torchvision's tensor kernels)")
    return name


def _warps_bicubic(t: object) -> bool:
    """Whether ``t`` (or a transform nested in it) warps with ``BICUBIC``."""
    if isinstance(t, (RandomRotation, RandomAffine, RandomPerspective, _Policy)):
        return t.interpolation == "bicubic"
    return any(_warps_bicubic(n) for n in getattr(t, "transforms", ()))


# ---------------------------------------------------------------- geometric ops
#
# Stage ops between the size-fixing op and the conversion, on the 8-bit image with torchvision's
# PIL arithmetic (Pillow's transform and padding, bit-exact; GaussianBlur within one level).
# RandomCrop may also stand first (or right after Resize), where it fixes the output size.


def _fill(op: str, value: object) -> Union[float, List[float]]:
    """torchvision's ``fill`` for a PIL image: None (black), a number, or 1 or 3 numbers."""
    if value is None:
        return 0.0
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return _number(op, "fill", value)
    if isinstance(value, dict):
        raise ValueError(f"{op}: a per-type fill {value!r} is not supported; give one fill")
    if isinstance(value, (list, tuple)):
        if len(value) not in (1, 3):
            raise ValueError(f"{op}: fill must have 1 or 3 values (one per channel), got {value!r}")
        return [_number(op, "fill", v) for v in value]
    raise TypeError(f"{op}: fill must be None, a number or a sequence of numbers, got {value!r}")


def _degrees(op: str, name: str, value: object) -> Union[float, List[float]]:
    """torchvision's ``_setup_angle``: a non-negative number ``d`` (``[-d, d]``) or a pair."""
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        d = _number(op, name, value)
        if d < 0:
            raise ValueError(f"{op}: if {name} is a single number, it must be positive, got {value!r}")
        return d
    return list(_pair(op, name, value))


def _center(op: str, value: object) -> Optional[List[float]]:
    if value is None:
        return None
    if isinstance(value, (list, tuple)) and len(value) == 2:
        return [_number(op, "center", v) for v in value]
    raise TypeError(f"{op}: center must be None or an (x, y) pair, got {value!r}")


def _padding(op: str, value: object) -> Union[int, List[int]]:
    """An int (every side) or 1, 2 (left/right, top/bottom) or 4 (left, top, right, bottom)
    non-negative ints. torchvision crops for negative values; ferroloader refuses them."""
    sides = [value] if _is_int(value) else value
    if not (isinstance(sides, (list, tuple)) and len(sides) in (1, 2, 4) and all(_is_int(v) for v in sides)):
        raise TypeError(f"{op}: padding must be an int or a sequence of 1, 2 or 4 ints, got {value!r}")
    ints = [int(v) for v in sides]
    if min(ints) < 0:
        raise ValueError(f"{op}: negative padding is not supported, got {value!r}")
    return ints[0] if _is_int(value) else ints


def _padding_mode(op: str, value: object) -> str:
    if isinstance(value, str) and value in ("constant", "edge", "reflect", "symmetric"):
        return value
    raise ValueError(f"{op}: padding_mode should be constant, edge, reflect or symmetric, got {value!r}")


class RandomVerticalFlip(Transform):
    """``RandomVerticalFlip(p=0.5)``: mirror top to bottom with probability ``p``."""

    def __init__(self, p: float = 0.5) -> None:
        self.p = _probability("RandomVerticalFlip", p)

    def to_spec(self) -> Spec:
        return {"op": "RandomVerticalFlip", "p": self.p}


class RandomRotation(Transform):
    """``RandomRotation(degrees, interpolation=NEAREST, expand=False, center=None, fill=0)``:
    Pillow's ``rotate`` by an angle drawn from ``degrees`` (NEAREST, BILINEAR or BICUBIC, each
    Pillow's to the bit). ``expand=True``: Pillow's ``rotate(expand=True)``, the output holding
    the whole rotated image, its size following each angle; a crop or a resize to a fixed size
    (``CenterCrop``, ``RandomCrop``, ``Resize((h, w))``, ``RandomResizedCrop``, timm's
    ``CenterCropOrPad``/``RandomCropOrPad``) must follow it (checked when planned), not inside a
    random composition; on the PIL image only (before ``ToImage``)."""

    def __init__(
        self,
        degrees: Union[float, Sequence[float]],
        interpolation: Any = "nearest",
        expand: bool = False,
        center: Optional[Sequence[float]] = None,
        fill: Any = 0,
    ) -> None:
        op = "RandomRotation"
        self.degrees = _degrees(op, "degrees", degrees)
        self.interpolation = _warp_interpolation(op, interpolation)
        self.expand = bool(expand)
        self.center = _center(op, center)
        self.fill = _fill(op, fill)

    def to_spec(self) -> Spec:
        return {
            "op": "RandomRotation",
            "degrees": self.degrees,
            "interpolation": self.interpolation,
            "expand": self.expand,
            "center": self.center,
            "fill": self.fill,
        }


class RandomAffine(Transform):
    """``RandomAffine(degrees, translate=None, scale=None, shear=None, interpolation=NEAREST,
    fill=0, center=None)``: torchvision's ``F.affine`` on a PIL image with drawn parameters
    (NEAREST, BILINEAR or BICUBIC, each Pillow's to the bit)."""

    def __init__(
        self,
        degrees: Union[float, Sequence[float]],
        translate: Optional[Sequence[float]] = None,
        scale: Optional[Sequence[float]] = None,
        shear: Union[None, float, Sequence[float]] = None,
        interpolation: Any = "nearest",
        fill: Any = 0,
        center: Optional[Sequence[float]] = None,
    ) -> None:
        op = "RandomAffine"
        self.degrees = _degrees(op, "degrees", degrees)
        self.translate: Optional[List[float]] = None
        if translate is not None:
            if not (isinstance(translate, (list, tuple)) and len(translate) == 2):
                raise TypeError(f"{op}: translate should be a sequence of 2 numbers, got {translate!r}")
            fractions = [_number(op, "translate", v) for v in translate]
            if not all(0.0 <= v <= 1.0 for v in fractions):
                raise ValueError(f"{op}: translation values should be between 0 and 1, got {translate!r}")
            self.translate = fractions
        self.scale: Optional[List[float]] = None
        if scale is not None:
            lo, hi = _pair(op, "scale", scale)
            if lo <= 0:
                raise ValueError(f"{op}: scale values should be positive, got {scale!r}")
            self.scale = [lo, hi]
        self.shear: Union[None, float, List[float]] = None
        if shear is not None:
            if isinstance(shear, (list, tuple)) and len(shear) == 4:
                x = _pair(op, "shear", shear[:2])
                y = _pair(op, "shear", shear[2:])
                self.shear = [*x, *y]
            else:
                self.shear = _degrees(op, "shear", shear)
        self.interpolation = _warp_interpolation(op, interpolation)
        self.fill = _fill(op, fill)
        self.center = _center(op, center)

    def to_spec(self) -> Spec:
        return {
            "op": "RandomAffine",
            "degrees": self.degrees,
            "translate": self.translate,
            "scale": self.scale,
            "shear": self.shear,
            "interpolation": self.interpolation,
            "fill": self.fill,
            "center": self.center,
        }


class RandomPerspective(Transform):
    """``RandomPerspective(distortion_scale=0.5, p=0.5, interpolation=BILINEAR, fill=0)``:
    torchvision's ``F.perspective`` on a PIL image with drawn corners, with probability ``p``.
    NEAREST, BILINEAR and BICUBIC (Pillow's perspective transform, exact given the
    coefficients; the coefficients are solved as torchvision solves them up to its
    least-squares rounding noise, which can move a BILINEAR or BICUBIC pixel by one level)."""

    def __init__(
        self,
        distortion_scale: float = 0.5,
        p: float = 0.5,
        interpolation: Any = "bilinear",
        fill: Any = 0,
    ) -> None:
        op = "RandomPerspective"
        scale = _number(op, "distortion_scale", distortion_scale)
        if not 0.0 <= scale <= 1.0:
            raise ValueError(f"{op}: distortion_scale should be between 0 and 1, got {distortion_scale!r}")
        self.distortion_scale = scale
        self.p = _probability(op, p)
        self.interpolation = _warp_interpolation(op, interpolation)
        self.fill = _fill(op, fill)

    def to_spec(self) -> Spec:
        return {
            "op": "RandomPerspective",
            "distortion_scale": self.distortion_scale,
            "p": self.p,
            "interpolation": self.interpolation,
            "fill": self.fill,
        }


#: Why ``ElasticTransform`` with BICUBIC stays in Python.
_ELASTIC_BICUBIC = (
    "torch's grid_sample bicubic mode (which torchvision's elastic kernel runs, on PIL images "
    "and tensors alike) is not implemented natively; NEAREST and BILINEAR are"
)


def _elastic_pair(op: str, name: str, value: object) -> List[float]:
    """torchvision v2's ``_setup_number_or_seq`` (v1 takes the same values as floats): a
    number ``a`` (``[a, a]``) or a sequence of 1 or 2 numbers, each finite here."""
    if isinstance(value, bool) or not isinstance(value, (numbers.Real, Sequence)) or isinstance(value, str):
        raise TypeError(f"{op}: {name} should be a number or a sequence of numbers. Got {type(value)}")
    if isinstance(value, Sequence):
        if len(value) not in (1, 2):
            raise ValueError(f"{op}: If {name} is a sequence its length should be 1 or 2. Got {len(value)}")
        for element in value:
            if isinstance(element, bool) or not isinstance(element, numbers.Real):
                raise ValueError(f"{op}: {name} should be a sequence of numbers. Got {type(element)}")
        values = [float(v) for v in value] * (2 if len(value) == 1 else 1)
    else:
        values = [float(value)] * 2
    if not all(math.isfinite(v) for v in values):
        raise ValueError(f"{op}: {name} must be finite, got {value!r}")
    return values


class ElasticTransform(Transform):
    """``ElasticTransform(alpha=50.0, sigma=5.0, interpolation=BILINEAR, fill=0)``: per sample
    two uniform displacement fields (``torch.rand(h, w) * 2 - 1``), each blurred with a
    Gaussian of ``int(8 * sigma + 1)`` taps (made odd; when its sigma is positive) and scaled by
    ``alpha`` over the width or height, added to the identity grid and sampled with torch's
    ``grid_sample`` (NEAREST or BILINEAR, a mask-channel ``fill``), as torchvision does on a PIL
    image and on a tensor alike (its PIL path converts to a tensor). BICUBIC, which torchvision
    hands to ``grid_sample``'s bicubic mode, is refused (not implemented natively: a pipeline
    with it keeps the op in its Python tail). ``alpha`` and ``sigma`` are a number or ``[x, y]``; the two sigmas must
    be both positive or both not (torchvision's blur raises otherwise). ``fill=None`` (v2 only)
    samples without a fill channel. ``api="v2"`` follows ``torchvision.transforms.v2`` (its
    Gaussian kernel formula and fill blend)."""

    def __init__(
        self,
        alpha: Union[float, Sequence[float]] = 50.0,
        sigma: Union[float, Sequence[float]] = 5.0,
        interpolation: object = "bilinear",
        fill: object = 0,
        *,
        api: str = "v1",
    ) -> None:
        op = "ElasticTransform"
        self.alpha = _elastic_pair(op, "alpha", alpha)
        self.sigma = _elastic_pair(op, "sigma", sigma)
        if (self.sigma[0] > 0) != (self.sigma[1] > 0):
            raise ValueError(
                f"{op}: sigma {sigma!r}: torchvision blurs both displacements with both sigmas once "
                "either is positive, and its gaussian_blur raises 'sigma should have positive "
                "values'; give two positive sigmas or none"
            )
        self.interpolation = _warp_interpolation(op, interpolation)
        if self.interpolation == "bicubic":
            # Unlike rotate/affine/perspective, torchvision's elastic kernel hands BICUBIC on
            # to grid_sample, whose bicubic mode ferroloader does not implement.
            raise ValueError(f"{op}: interpolation {interpolation!r}: {_ELASTIC_BICUBIC}")
        self.api = _api(op, api)
        if fill is None and self.api == "v1":
            raise TypeError(f"{op}: fill should be int or float or a list or tuple of them. Got {type(fill)}")
        self.fill = _tensor_fill(op, fill)

    def to_spec(self) -> Spec:
        return {
            "op": "ElasticTransform",
            "alpha": self.alpha,
            "sigma": self.sigma,
            "interpolation": self.interpolation,
            "fill": self.fill,
            "api": self.api,
        }


class GaussianBlur(Transform):
    """``GaussianBlur(kernel_size, sigma=(0.1, 2.0))``: one sigma drawn per sample, for both
    axes. Within one level of torchvision (a separable float32 convolution, rounded)."""

    def __init__(self, kernel_size: Union[int, Sequence[int]], sigma: Union[float, Sequence[float]] = (0.1, 2.0)) -> None:
        op = "GaussianBlur"
        sizes: List[object] = (
            [kernel_size] if _is_int(kernel_size) else list(kernel_size) if isinstance(kernel_size, (list, tuple)) else []
        )
        if not (len(sizes) in (1, 2) and all(_is_int(k) for k in sizes)):
            raise TypeError(f"{op}: kernel_size must be an int or an (x, y) pair of ints, got {kernel_size!r}")
        ks = [operator.index(cast(SupportsIndex, k)) for k in sizes] * (2 if len(sizes) == 1 else 1)
        if any(k <= 0 or k % 2 == 0 for k in ks):
            raise ValueError(f"{op}: kernel size value should be an odd and positive number, got {kernel_size!r}")
        self.kernel_size = ks
        if isinstance(sigma, numbers.Real) and not isinstance(sigma, bool):
            s = _number(op, "sigma", sigma)
            if s <= 0:
                raise ValueError(f"{op}: if sigma is a single number, it must be positive, got {sigma!r}")
            self.sigma = [s, s]
        else:
            lo, hi = _pair(op, "sigma", sigma)
            if lo <= 0:
                raise ValueError(f"{op}: sigma values should be positive and of the form (min, max), got {sigma!r}")
            self.sigma = [lo, hi]

    def to_spec(self) -> Spec:
        return {"op": "GaussianBlur", "kernel_size": self.kernel_size, "sigma": self.sigma}


class Pad(Transform):
    """``Pad(padding, fill=0, padding_mode="constant")``: changes the sample's size."""

    def __init__(self, padding: Union[int, Sequence[int]], fill: Any = 0, padding_mode: str = "constant") -> None:
        self.padding = _padding("Pad", padding)
        self.fill = _fill("Pad", fill)
        self.padding_mode = _padding_mode("Pad", padding_mode)

    def to_spec(self) -> Spec:
        return {"op": "Pad", "padding": self.padding, "fill": self.fill, "padding_mode": self.padding_mode}


class RandomCrop(Transform):
    """``RandomCrop(size, padding=None, pad_if_needed=False, fill=0, padding_mode="constant")``:
    first (any image size; e.g. CIFAR's ``RandomCrop(32, padding=4)``), after ``Resize``, or
    among the stage ops. A crop larger than the padded image is an error for that sample. v1's
    padding: ``padding``, then ``pad_if_needed``'s, the second reflecting the first's result."""

    def __init__(
        self,
        size: SizeArg,
        padding: Union[None, int, Sequence[int]] = None,
        pad_if_needed: bool = False,
        fill: Any = 0,
        padding_mode: str = "constant",
    ) -> None:
        op = "RandomCrop"
        self.size = _size(op, "size", size)
        self.padding = None if padding is None else _padding(op, padding)
        self.pad_if_needed = bool(pad_if_needed)
        self.fill = _fill(op, fill)
        self.padding_mode = _padding_mode(op, padding_mode)

    def to_spec(self) -> Spec:
        return {
            "op": "RandomCrop",
            "size": self.size,
            "padding": self.padding,
            "pad_if_needed": self.pad_if_needed,
            "fill": self.fill,
            "padding_mode": self.padding_mode,
        }



class ResizeKeepRatio(Transform):
    """timm's ``ResizeKeepRatio(size, longest=0.0, interpolation='bilinear',
    random_scale_prob=0.0, random_scale_range=(0.85, 1.05), random_scale_area=False,
    random_aspect_prob=0.0, random_aspect_range=(0.9, 1.11))`` (``timm.data.transforms``; what
    ``create_transform`` builds for ``train_crop_mode='rkrc'``/``'rkrr'``, ``crop_mode='border'``
    and a non-square eval size): the whole image resized, keeping its aspect ratio, so that
    its sides relate to ``size`` as ``longest`` says (0: the shorter ratio, the image covers
    ``size``; 1: the longer, it fits inside), with timm's random scale (uniform, or an area
    with ``random_scale_area``) and aspect (log-uniform) factors drawn per sample as its
    ``get_params`` draws them (Python's ``random``, from the sample's generator), then
    ``interpolation``'s filter (``'random'`` or a list: one drawn per sample after the
    factors) with Pillow's antialiased resize. Its size follows each image and draw, so it
    stands first and a :class:`CenterCropOrPad`, :class:`RandomCropOrPad`,
    :class:`CenterCrop` or :class:`RandomCrop` follows it."""

    def __init__(
        self,
        size: SizeArg,
        longest: float = 0.0,
        interpolation: Any = "bilinear",
        random_scale_prob: float = 0.0,
        random_scale_range: Tuple[float, float] = (0.85, 1.05),
        random_scale_area: bool = False,
        random_aspect_prob: float = 0.0,
        random_aspect_range: Tuple[float, float] = (0.9, 1.11),
    ) -> None:
        op = "ResizeKeepRatio"
        self.size = _size(op, "size", size)
        self.longest = _number(op, "longest", longest)
        if not 0.0 <= self.longest <= 1.0:
            raise ValueError(f"{op}: longest must lie in [0, 1], got {longest!r}")
        self.interpolation = _timm_resize_filters(op, interpolation)
        self.random_scale_prob = _unit(op, "random_scale_prob", random_scale_prob)
        self.random_scale_range = _pair(op, "random_scale_range", random_scale_range)
        self.random_scale_area = bool(random_scale_area)
        if self.random_scale_area and self.random_scale_range[0] <= 0:
            raise ValueError(
                f"{op}: random_scale_range must be positive with random_scale_area (its 1 / sqrt), "
                f"got {random_scale_range!r}"
            )
        self.random_aspect_prob = _unit(op, "random_aspect_prob", random_aspect_prob)
        self.random_aspect_range = _pair(op, "random_aspect_range", random_aspect_range)
        if self.random_aspect_range[0] <= 0:
            raise ValueError(
                f"{op}: random_aspect_range must be positive (its logs), got {random_aspect_range!r}"
            )

    @property
    def filters(self) -> List[str]:
        """The filters a sample's resize chooses among (one: no choice), in draw order."""
        return _filter_choice(self.interpolation)

    def to_spec(self) -> Spec:
        return {
            "op": "ResizeKeepRatio",
            "size": self.size,
            "longest": self.longest,
            "interpolation": self.interpolation,
            "random_scale_prob": self.random_scale_prob,
            "random_scale_range": list(self.random_scale_range),
            "random_scale_area": self.random_scale_area,
            "random_aspect_prob": self.random_aspect_prob,
            "random_aspect_range": list(self.random_aspect_range),
        }

    def draw_params(
        self,
        width: int,
        height: int,
        indices: Iterable[int],
        *,
        seed: int = 0,
        epoch: int = 0,
        crop: Optional["RandomCropOrPad"] = None,
        flip_p: float = 0.0,
        repeats: Optional[Sequence[int]] = None,
    ) -> np.ndarray:
        """What the loader draws for samples ``indices`` of ``epoch`` (loader seed ``seed``) of
        a ``width`` x ``height`` image: an int64 array ``[n, 6]`` of ``(height, width, filter,
        top, left, flipped)``: the resized size, ``filter`` an index into :attr:`filters`,
        ``top``/``left`` the offsets of a ``crop`` following it (timm's signed
        ``RandomCropOrPad.get_params``; 0 without one), ``flipped`` drawn after them when a
        ``RandomHorizontalFlip(flip_p)`` follows (else 0). ``repeats`` as
        :meth:`RandomResizedCrop.draw_params`'s."""
        return _native.resize_keep_ratio_params(
            width,
            height,
            list(indices),
            seed=seed,
            epoch=epoch,
            resize=json.dumps(self.to_spec()),
            crop_size=None if crop is None else crop.hw,
            flip_p=flip_p,
            repeats=None if repeats is None else [int(r) for r in repeats],
        )


def _unit(op: str, name: str, value: object) -> float:
    number = _number(op, name, value)
    if not 0.0 <= number <= 1.0:
        raise ValueError(f"{op}: {name} must be a probability in [0, 1], got {value!r}")
    return number


class CenterCropOrPad(Transform):
    """timm's ``CenterCropOrPad(size, fill=0, padding_mode='constant')``: torchvision's
    ``CenterCrop`` (pad where the image is smaller, ``(d // 2, (d + 1) // 2)``, then the
    centred window), padding with ``fill`` or in ``padding_mode`` (``edge``, ``reflect``,
    ``symmetric``) as torchvision's ``F.pad`` on a PIL image. Fixes the output size: first,
    after :class:`ResizeKeepRatio`, or among the stage ops."""

    _name = "CenterCropOrPad"

    def __init__(self, size: SizeArg, fill: Any = 0, padding_mode: str = "constant") -> None:
        self.size = _size(self._name, "size", size)
        self.fill = _fill(self._name, fill)
        self.padding_mode = _padding_mode(self._name, padding_mode)

    @property
    def hw(self) -> Tuple[int, int]:
        """``(height, width)``."""
        if isinstance(self.size, int):
            return self.size, self.size
        return self.size[0], self.size[1]

    def to_spec(self) -> Spec:
        return {"op": self._name, "size": self.size, "fill": self.fill, "padding_mode": self.padding_mode}


class RandomCropOrPad(CenterCropOrPad):
    """timm's ``RandomCropOrPad(size, fill=0, padding_mode='constant')``: per axis (rows
    first) ``randint(0, |delta|)`` with the sign of ``delta = side - size`` (Python's
    ``random``, from the sample's generator): a window at that offset of a longer side, or a
    shorter side padded by it before and the rest after (``fill``/``padding_mode`` as
    :class:`CenterCropOrPad`'s)."""

    _name = "RandomCropOrPad"


def _api(op: str, value: object) -> str:
    if isinstance(value, str) and value in ("v1", "v2"):
        return value
    raise ValueError(f"{op}: api must be 'v1' (torchvision.transforms) or 'v2', got {value!r}")


def _count(op: str, name: str, value: object, low: int, high: int) -> int:
    if not _is_int(value):
        raise TypeError(f"{op}: {name} must be an int, got {value!r}")
    count = operator.index(cast(SupportsIndex, value))
    if not low <= count <= high:
        raise ValueError(f"{op}: {name} must be between {low} and {high}, got {count}")
    return count


class _Policy(Transform):
    """What the three policies share: the warps' ``interpolation`` (NEAREST, BILINEAR or
    BICUBIC, Pillow's filters) and ``fill``, and ``api``,
    whose draws to follow (``"v1"``: ``torchvision.transforms``, ``"v2"``: ``.v2``, which draws
    the sign as a float and places Solarize's thresholds a hair higher). The op each draws runs
    natively, with Pillow's arithmetic on a PIL image, or after :class:`ToImage` with torch's
    tensor kernels of ``api`` (BICUBIC refused there, ``fill=None`` no fill channel), in a
    profiler span named by both (``RandAugment/Rotate``)."""

    _name = ""

    def __init__(self, interpolation: object, fill: object, api: str) -> None:
        self.interpolation = _warp_interpolation(self._name, interpolation)
        # None stays None: black on a PIL image, but no fill channel on a tensor (after
        # ToImage), which differs from 0 under BILINEAR.
        self.fill: Union[None, float, List[float]] = None if fill is None else _fill(self._name, fill)
        self.api = _api(self._name, api)

    def _common(self) -> Spec:
        return {"interpolation": self.interpolation, "fill": self.fill, "api": self.api}


class TrivialAugmentWide(_Policy):
    """``TrivialAugmentWide(num_magnitude_bins=31, interpolation=NEAREST, fill=None)``: one op
    of the wide augmentation space, at a random magnitude bin and sign."""

    _name = "TrivialAugmentWide"

    def __init__(
        self,
        num_magnitude_bins: int = 31,
        interpolation: object = "nearest",
        fill: object = None,
        *,
        api: str = "v1",
    ) -> None:
        self.num_magnitude_bins = _count(self._name, "num_magnitude_bins", num_magnitude_bins, 2, 1 << 24)
        super().__init__(interpolation, fill, api)

    def to_spec(self) -> Spec:
        return {"op": self._name, "num_magnitude_bins": self.num_magnitude_bins, **self._common()}


class RandAugment(_Policy):
    """``RandAugment(num_ops=2, magnitude=9, num_magnitude_bins=31, interpolation=NEAREST,
    fill=None)``: ``num_ops`` (at most 16) random ops, each at bin ``magnitude``."""

    _name = "RandAugment"

    def __init__(
        self,
        num_ops: int = 2,
        magnitude: int = 9,
        num_magnitude_bins: int = 31,
        interpolation: object = "nearest",
        fill: object = None,
        *,
        api: str = "v1",
    ) -> None:
        self.num_ops = _count(self._name, "num_ops", num_ops, 0, 16)
        self.num_magnitude_bins = _count(self._name, "num_magnitude_bins", num_magnitude_bins, 2, 1 << 24)
        self.magnitude = _count(self._name, "magnitude", magnitude, 0, self.num_magnitude_bins - 1)
        super().__init__(interpolation, fill, api)

    def to_spec(self) -> Spec:
        return {
            "op": self._name,
            "num_ops": self.num_ops,
            "magnitude": self.magnitude,
            "num_magnitude_bins": self.num_magnitude_bins,
            **self._common(),
        }


class AutoAugment(_Policy):
    """``AutoAugment(policy=AutoAugmentPolicy.IMAGENET, interpolation=NEAREST, fill=None)``:
    one of the policy's 25 two-step sub-policies (``imagenet``, ``cifar10`` or ``svhn``, or
    torchvision's ``AutoAugmentPolicy``)."""

    _name = "AutoAugment"

    def __init__(
        self,
        policy: object = "imagenet",
        interpolation: object = "nearest",
        fill: object = None,
        *,
        api: str = "v1",
    ) -> None:
        name = getattr(policy, "value", policy)
        if not (isinstance(name, str) and name.lower() in ("imagenet", "cifar10", "svhn")):
            raise ValueError(f"AutoAugment: policy {policy!r} is not IMAGENET, CIFAR10 or SVHN")
        self.policy = name.lower()
        super().__init__(interpolation, fill, api)

    def to_spec(self) -> Spec:
        return {"op": self._name, "policy": self.policy, **self._common()}


def _tensor_fill(op: str, value: object) -> Union[None, float, List[float]]:
    """torchvision's ``fill`` as its tensor kernels take it: None (no fill channel, which
    differs from 0 under BILINEAR), a number, or 1 or 3 numbers, each within [0, 255] (torch
    would wrap a value outside it when it casts back to uint8)."""
    if value is None:
        return None
    if isinstance(value, dict):
        raise ValueError(f"{op}: a per-type fill {value!r} is not supported; give one fill")
    values = list(value) if isinstance(value, (list, tuple)) else [value]
    if len(values) not in (1, 3):
        raise ValueError(f"{op}: fill must have 1 or 3 values (one per channel), got {value!r}")
    numbers_ = [_number(op, "fill", v) for v in values]
    if any(not 0.0 <= v <= 255.0 for v in numbers_):
        raise ValueError(f"{op}: fill values must be within [0, 255], got {value!r}")
    return numbers_ if isinstance(value, (list, tuple)) else numbers_[0]


class AugMix(Transform):
    """``AugMix(severity=3, mixture_width=3, chain_depth=-1, alpha=1.0, all_ops=True,
    interpolation=BILINEAR, fill=None)``: ``mixture_width`` (at most 8) chains of
    ``chain_depth`` ops (at most 8; 0 or below: a random depth from 1 to 3) of the AugMix space
    at bins below ``severity``, mixed with Dirichlet(``alpha``) weights and a Beta(``alpha``,
    ``alpha``) share of the original. As torchvision runs it on a PIL image: the uint8 tensor
    kernels (truncating float32 blends, ``grid_sample`` warps) and a float32 mix; so BICUBIC is
    refused, as torchvision's tensor kernels refuse it. Each chain op
    has a profiler span named ``AugMix/<Op>``. ``api="v2"`` follows ``torchvision.transforms.v2``
    (its sign draw, Solarize table and tensor kernels)."""

    _name = "AugMix"

    def __init__(
        self,
        severity: int = 3,
        mixture_width: int = 3,
        chain_depth: int = -1,
        alpha: float = 1.0,
        all_ops: bool = True,
        interpolation: object = "bilinear",
        fill: object = None,
        *,
        api: str = "v1",
    ) -> None:
        op = self._name
        self.severity = _count(op, "severity", severity, 1, 10)
        self.mixture_width = _count(op, "mixture_width", mixture_width, 1, 8)
        self.chain_depth = _count(op, "chain_depth", chain_depth, -(1 << 31), 8)
        self.alpha = _number(op, "alpha", alpha)
        if not self.alpha > 0.0:
            raise ValueError(f"{op}: alpha must be positive, got {alpha!r}")
        if not isinstance(all_ops, bool):
            raise TypeError(f"{op}: all_ops must be a bool, got {all_ops!r}")
        self.all_ops = all_ops
        self.interpolation = _tensor_warp_interpolation(op, interpolation)
        self.fill = _tensor_fill(op, fill)
        self.api = _api(op, api)

    def to_spec(self) -> Spec:
        return {
            "op": self._name,
            "severity": self.severity,
            "mixture_width": self.mixture_width,
            "chain_depth": self.chain_depth,
            "alpha": self.alpha,
            "all_ops": self.all_ops,
            "interpolation": self.interpolation,
            "fill": self.fill,
            "api": self.api,
        }


# timm's RandAugment: what ``timm.data.create_transform(auto_augment="rand-...")`` builds.

#: The ops of timm's ``NAME_TO_OP``, all of which run natively (the two GaussianBlurs as
#: Pillow's ``ImageFilter.GaussianBlur``, extended box blurs, bit for bit).
TIMM_AUGMENT_OPS = (
    "AutoContrast",
    "Equalize",
    "Invert",
    "Rotate",
    "Posterize",
    "PosterizeIncreasing",
    "PosterizeOriginal",
    "Solarize",
    "SolarizeIncreasing",
    "SolarizeAdd",
    "Color",
    "ColorIncreasing",
    "Contrast",
    "ContrastIncreasing",
    "Brightness",
    "BrightnessIncreasing",
    "Sharpness",
    "SharpnessIncreasing",
    "ShearX",
    "ShearY",
    "TranslateX",
    "TranslateY",
    "TranslateXRel",
    "TranslateYRel",
    "Desaturate",
    "GaussianBlur",
    "GaussianBlurRand",
)


def _timm_filters(op: str, value: object) -> Union[str, List[str]]:
    """timm's ``interpolation`` hparam: one of Pillow's transform filters, or a sequence of
    them (one drawn per op call; timm's default is ``(BILINEAR, BICUBIC)``)."""
    if isinstance(value, (list, tuple)):
        if not 1 <= len(value) <= 3:
            raise ValueError(f"{op}: interpolation must be one filter or a choice of 2 or 3, got {value!r}")
        return [_warp_interpolation(op, v) for v in value]
    return _warp_interpolation(op, value)


class TimmAugmentOp:
    """One of timm's ``AugmentOp``s (``timm.data.auto_augment``), by what the object holds:
    ``name`` (a key of timm's ``NAME_TO_OP``, see :data:`TIMM_AUGMENT_OPS`), ``prob``,
    ``magnitude`` (timm's 0..10 scale), ``magnitude_std`` (0: none; ``math.inf``: uniform in
    ``[0, magnitude]``; else Gaussian noise), ``magnitude_max`` (None or 0: 10), and the
    hparams its level function and warp read: ``translate_pct``, ``translate_const``, ``fill``
    (timm's ``img_mean``, three levels 0..255) and ``interpolation`` (NEAREST, BILINEAR or
    BICUBIC, or a sequence of them drawn per call). Defaults are timm's ``_HPARAMS_DEFAULT``."""

    def __init__(
        self,
        name: str,
        prob: float = 0.5,
        magnitude: float = 10,
        *,
        magnitude_std: float = 0.0,
        magnitude_max: Optional[float] = None,
        translate_pct: float = 0.45,
        translate_const: float = 250,
        fill: Sequence[int] = (128, 128, 128),
        interpolation: object = ("bilinear", "bicubic"),
    ) -> None:
        op = "TimmAugmentOp"
        if name not in TIMM_AUGMENT_OPS:
            raise ValueError(f"{op}: name {name!r} is not one of timm's ops {TIMM_AUGMENT_OPS}")
        self.name = name
        self.prob = _number(op, "prob", prob)
        if not 0.0 <= self.prob <= 1.0:
            raise ValueError(f"{op}: prob must be a probability in [0, 1], got {prob!r}")
        self.magnitude = _number(op, "magnitude", magnitude)
        # math.inf: uniform sampling (timm's mstd > 100); any other value finite.
        self.magnitude_std: float = (
            math.inf if magnitude_std == math.inf else _number(op, "magnitude_std", magnitude_std)
        )
        self.magnitude_max: Optional[float] = (
            None if magnitude_max is None else _number(op, "magnitude_max", magnitude_max)
        )
        self.translate_pct = _number(op, "translate_pct", translate_pct)
        self.translate_const = _number(op, "translate_const", translate_const)
        if not (isinstance(fill, (list, tuple)) and len(fill) == 3 and all(_is_int(v) and 0 <= v <= 255 for v in fill)):
            raise ValueError(f"{op}: fill must be 3 ints in 0..255 (timm's img_mean), got {fill!r}")
        self.fill = [int(v) for v in fill]
        self.interpolation = _timm_filters(op, interpolation)

    def to_spec(self) -> Spec:
        """The op as the native spec's ``ops`` list holds it."""
        return {
            "name": self.name,
            "prob": self.prob,
            "magnitude": self.magnitude,
            "magnitude_std": "inf" if self.magnitude_std == math.inf else self.magnitude_std,
            "magnitude_max": self.magnitude_max,
            "translate_pct": self.translate_pct,
            "translate_const": self.translate_const,
            "fill": self.fill,
            "interpolation": self.interpolation,
        }

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TimmAugmentOp) and self.to_spec() == other.to_spec()

    def __hash__(self) -> int:
        return hash(json.dumps(self.to_spec(), sort_keys=True))

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.to_spec().items())
        return f"TimmAugmentOp({args})"


class TimmRandAugment(Transform):
    """timm's ``RandAugment(ops, num_layers=2, choice_weights=None)``: per sample,
    ``num_layers`` (at most 16) of ``ops`` (:class:`TimmAugmentOp`), uniformly with
    replacement, or without replacement by ``choice_weights`` (numpy's
    ``choice(replace=False, p=...)``); each applied as timm's ``AugmentOp`` applies it (skip
    with probability ``1 - prob``, magnitude noise, clamp, level with a random sign, a filter
    drawn per call) with Pillow's arithmetic, bit-exact, in a profiler span named
    ``TimmRandAugment/<Op>``. The draws come from the sample's generator (the same
    distributions as timm's, not Python's global stream). One deliberate difference: a
    Posterize level of 0 bits makes a black image (Pillow 12), where Pillow 13 raises.

    ``from_torchvision`` converts timm's object (``timm.data.auto_augment.RandAugment``) into
    this, reading its ops' attributes."""

    _name = "TimmRandAugment"

    def __init__(
        self,
        ops: Sequence[TimmAugmentOp],
        num_layers: int = 2,
        choice_weights: Optional[Sequence[float]] = None,
    ) -> None:
        op = self._name
        if not isinstance(ops, (list, tuple)) or not all(isinstance(o, TimmAugmentOp) for o in ops):
            raise TypeError(f"{op}: ops must be a sequence of TimmAugmentOp, got {ops!r}")
        if not 1 <= len(ops) <= 64:
            raise ValueError(f"{op}: ops must hold 1 to 64 ops, got {len(ops)}")
        self.ops = list(ops)
        self.num_layers = _count(op, "num_layers", num_layers, 0, 16)
        self.choice_weights: Optional[List[float]] = None
        if choice_weights is not None:
            weights = [_number(op, "choice_weights", w) for w in choice_weights]
            if len(weights) != len(self.ops) or min(weights) < 0.0:
                raise ValueError(
                    f"{op}: choice_weights must be one non-negative weight per op, got {choice_weights!r}"
                )
            if sum(w > 0.0 for w in weights) < self.num_layers:
                raise ValueError(
                    f"{op}: choice_weights has fewer positive weights than num_layers "
                    f"({self.num_layers}, drawn without replacement)"
                )
            self.choice_weights = weights

    def to_spec(self) -> Spec:
        return {
            "op": self._name,
            "ops": [o.to_spec() for o in self.ops],
            "num_layers": self.num_layers,
            "choice_weights": self.choice_weights,
        }


class TimmAutoAugment(Transform):
    """timm's ``AutoAugment(policy)``: per sample one sub-policy of ``policy`` (1 to 256 lists
    of at most 16 :class:`TimmAugmentOp` each), uniformly (timm's ``random.choice``), whose ops
    then run in order, each as timm's ``AugmentOp`` applies it (skip with probability
    ``1 - prob``, magnitude, level with a random sign, a filter drawn per call) with Pillow's
    arithmetic, bit-exact, in a profiler span named ``TimmAutoAugment/<Op>``. The draws come
    from the sample's generator (the same distributions as timm's).

    ``from_torchvision`` converts timm's object (``timm.data.auto_augment.AutoAugment``, what
    ``create_transform(auto_augment="original")``, ``"originalr"``, ``"v0"`` and ``"v0r"``
    build) into this, reading its ``policy``."""

    _name = "TimmAutoAugment"

    def __init__(self, policy: Sequence[Sequence[TimmAugmentOp]]) -> None:
        op = self._name
        if not isinstance(policy, (list, tuple)) or not all(
            isinstance(sub, (list, tuple)) and all(isinstance(o, TimmAugmentOp) for o in sub) for sub in policy
        ):
            raise TypeError(f"{op}: policy must be a sequence of sequences of TimmAugmentOp, got {policy!r}")
        if not 1 <= len(policy) <= 256:
            raise ValueError(f"{op}: policy must hold 1 to 256 sub-policies, got {len(policy)}")
        for i, sub in enumerate(policy):
            if len(sub) > 16:
                raise ValueError(f"{op}: policy[{i}] must hold at most 16 ops, got {len(sub)}")
        self.policy = [list(sub) for sub in policy]

    def to_spec(self) -> Spec:
        return {"op": self._name, "policy": [[o.to_spec() for o in sub] for sub in self.policy]}


class TimmAugMix(Transform):
    """timm's ``AugMixAugment(ops, alpha=1.0, width=3, depth=-1, blended=False)``: per sample
    ``width`` (1 to 16) chains of ``depth`` ops (at most 16; 0 or below: 1 to 3 per chain,
    uniformly) of ``ops`` (:class:`TimmAugmentOp`, chosen uniformly with replacement), each
    applied as timm's ``AugmentOp`` applies it, in profiler spans ``TimmAugMix/<Op>``. The
    chains are mixed as timm mixes them, bit-exact: with Dirichlet(``alpha``) weights in
    float32, truncated to uint8 and blended with the image by a Beta(``alpha``, ``alpha``)
    draw through Pillow's ``Image.blend``; ``blended=True`` blends each chain into the image in
    turn with timm's ``_calc_blended_weights``. The draws come from the sample's generator
    (the same distributions as timm's; ``alpha`` is drawn with in float32).

    ``from_torchvision`` converts timm's object (``timm.data.auto_augment.AugMixAugment``,
    what ``create_transform(auto_augment="augmix-m5-w4-d2")`` builds) into this."""

    _name = "TimmAugMix"

    def __init__(
        self,
        ops: Sequence[TimmAugmentOp],
        alpha: float = 1.0,
        width: int = 3,
        depth: int = -1,
        blended: bool = False,
    ) -> None:
        op = self._name
        if not isinstance(ops, (list, tuple)) or not all(isinstance(o, TimmAugmentOp) for o in ops):
            raise TypeError(f"{op}: ops must be a sequence of TimmAugmentOp, got {ops!r}")
        if not 1 <= len(ops) <= 64:
            raise ValueError(f"{op}: ops must hold 1 to 64 ops, got {len(ops)}")
        self.ops = list(ops)
        self.alpha = _number(op, "alpha", alpha)
        if not self.alpha > 0.0:
            raise ValueError(f"{op}: alpha must be a positive concentration, got {alpha!r}")
        self.width = _count(op, "width", width, 1, 16)
        if not _is_int(depth):
            raise TypeError(f"{op}: depth must be an int, got {depth!r}")
        if int(depth) > 16:
            raise ValueError(f"{op}: depth must be at most 16 (0 or below: random 1 to 3), got {depth!r}")
        self.depth = int(depth)
        if not isinstance(blended, bool):
            raise TypeError(f"{op}: blended must be a bool, got {blended!r}")
        self.blended = blended

    def to_spec(self) -> Spec:
        return {
            "op": self._name,
            "ops": [o.to_spec() for o in self.ops],
            "alpha": self.alpha,
            "width": self.width,
            "depth": self.depth,
            "blended": self.blended,
        }


_TIMM_POLICIES = (TimmRandAugment, TimmAutoAugment, TimmAugMix)


# Random compositions and RandomErasing: nested stage ops, and the one tensor op.


def _nested(op: str, transforms: object, *, allow_empty: bool = False) -> List[Union[Transform, "Compose"]]:
    """``transforms`` of a random composition: a list of ferroloader transforms or Composes."""
    if isinstance(transforms, (Transform, Compose)) or not isinstance(transforms, (list, tuple)):
        raise TypeError(f"{op}: transforms must be a list of ferroloader transforms, got {transforms!r}")
    if not transforms and not allow_empty:
        raise ValueError(f"{op}: pass at least one transform")
    for i, t in enumerate(transforms):
        if not isinstance(t, (Transform, Compose)):
            raise TypeError(
                f"{op}: transforms[{i}] is {t!r}, not a ferroloader transform "
                "(use ferroloader.transforms.from_torchvision for torchvision ones)"
            )
    return list(transforms)


def _nested_spec(t: Union[Transform, "Compose"]) -> Spec:
    """One element of a composition's ``transforms``: a ``Compose`` stays one unit (one choice
    of ``RandomChoice``, one item of ``RandomOrder``)."""
    if isinstance(t, Compose):
        return {"op": "Compose", "transforms": [_nested_spec(u) for u in t.transforms]}
    return t.to_spec()


class RandomApply(Transform):
    """``RandomApply(transforms, p=0.5)``: all of ``transforms`` or none, one coin per sample
    (v1's comparison: a draw equal to ``p`` applies). Holds ops that stand between the geometry
    and ``ToTensor`` (flips, pixel ops, other random compositions); they must keep the size."""

    def __init__(self, transforms: Sequence[Union[Transform, "Compose"]], p: float = 0.5) -> None:
        self.transforms = _nested("RandomApply", transforms, allow_empty=True)
        self.p = _probability("RandomApply", p)

    def to_spec(self) -> Spec:
        return {"op": "RandomApply", "transforms": [_nested_spec(t) for t in self.transforms], "p": self.p}


class RandomChoice(Transform):
    """``RandomChoice(transforms, p=None)``: one of ``transforms`` per sample, weighted by ``p``
    (non-negative, need not sum to 1; ``None`` is uniform). Every choice must leave the same
    size."""

    def __init__(self, transforms: Sequence[Union[Transform, "Compose"]], p: Optional[Sequence[float]] = None) -> None:
        self.transforms = _nested("RandomChoice", transforms)
        if p is None:
            self.p: Optional[List[float]] = None
        else:
            if not isinstance(p, (list, tuple)):
                raise TypeError(f"RandomChoice: p must be a list of weights or None, got {p!r}")
            weights = [_number("RandomChoice", "p", w) for w in p]
            if len(weights) != len(self.transforms):
                raise ValueError(
                    f"RandomChoice: length of p doesn't match the number of transforms: "
                    f"{len(weights)} != {len(self.transforms)}"
                )
            if any(w < 0 for w in weights) or sum(weights) <= 0:
                raise ValueError(f"RandomChoice: p must be non-negative weights with a positive sum, got {p!r}")
            self.p = weights

    def to_spec(self) -> Spec:
        return {"op": "RandomChoice", "transforms": [_nested_spec(t) for t in self.transforms], "p": self.p}


class RandomOrder(Transform):
    """``RandomOrder(transforms)``: all of ``transforms`` in a random order per sample (a
    ``Compose`` among them moves as one). Every order must leave the same size."""

    def __init__(self, transforms: Sequence[Union[Transform, "Compose"]]) -> None:
        self.transforms = _nested("RandomOrder", transforms)

    def to_spec(self) -> Spec:
        return {"op": "RandomOrder", "transforms": [_nested_spec(t) for t in self.transforms]}


class RandomErasing(Transform):
    """``RandomErasing(p=0.5, scale=(0.02, 0.33), ratio=(0.3, 3.3), value=0, inplace=False)``:
    erases a random rectangle of the float32 tensor with ``value`` (a number, one per channel, or
    ``"random"`` for standard normals). A tensor op: it stands after ``ToTensor``, before or
    after ``Normalize`` (torchvision's recipes put it after); refused with ``output="uint8"``.
    ``inplace`` is accepted and changes nothing (the batch slot is always erased in place)."""

    def __init__(
        self,
        p: float = 0.5,
        scale: Sequence[float] = (0.02, 0.33),
        ratio: Sequence[float] = (0.3, 3.3),
        value: Union[float, Sequence[float], str] = 0,
        inplace: bool = False,
    ) -> None:
        self.p = _probability("RandomErasing", p)
        self.scale = _pair("RandomErasing", "scale", scale)
        self.ratio = _pair("RandomErasing", "ratio", ratio)
        if not 0.0 <= self.scale[0] <= self.scale[1] <= 1.0:
            raise ValueError(f"RandomErasing: scale should be an ordered range within [0, 1], got {scale!r}")
        if not 0.0 < self.ratio[0] <= self.ratio[1]:
            raise ValueError(f"RandomErasing: ratio should be a positive ordered range, got {ratio!r}")
        if isinstance(value, str):
            if value != "random":
                raise ValueError(f"RandomErasing: if value is str, it should be 'random', got {value!r}")
            self.value: Union[float, List[float], str] = value
        elif isinstance(value, (list, tuple)):
            if len(value) not in (1, 3):
                raise ValueError(f"RandomErasing: value needs 1 or 3 numbers (one per channel), got {value!r}")
            self.value = [_number("RandomErasing", "value", v) for v in value]
        else:
            self.value = _number("RandomErasing", "value", value)
        if not isinstance(inplace, bool):
            raise TypeError(f"RandomErasing: inplace must be a bool, got {inplace!r}")
        self.inplace = inplace

    def to_spec(self) -> Spec:
        return {
            "op": "RandomErasing",
            "p": self.p,
            "scale": list(self.scale),
            "ratio": list(self.ratio),
            "value": self.value,
            "inplace": self.inplace,
        }


class GaussianNoise(Transform):
    """v2's ``GaussianNoise(mean=0.0, sigma=0.1, clip=True)``: ``image + (mean + N(0, 1) *
    sigma)`` per element of the float32 tensor, then clamped to ``[0, 1]`` when ``clip``, as
    torchvision's float kernel computes it; the normals from the sample's generator (the same
    distribution as torch's ``randn_like``, not its stream). A tensor op like
    :class:`RandomErasing`: after ``ToTensor``/``ToDtype(torch.float32, scale=True)``, before
    or after ``Normalize``, in a profiler span named ``GaussianNoise``; refused with
    ``output="uint8"``. torchvision refuses it on a PIL image."""

    def __init__(self, mean: float = 0.0, sigma: float = 0.1, clip: bool = True) -> None:
        self.mean = _number("GaussianNoise", "mean", mean)
        self.sigma = _number("GaussianNoise", "sigma", sigma)
        if self.sigma < 0:
            raise ValueError(f"GaussianNoise: sigma shouldn't be negative. Got {sigma}")
        if not isinstance(clip, bool):
            raise TypeError(f"GaussianNoise: clip must be a bool, got {clip!r}")
        self.clip = clip

    def to_spec(self) -> Spec:
        return {"op": "GaussianNoise", "mean": self.mean, "sigma": self.sigma, "clip": self.clip}


class TimmRandomErasing(Transform):
    """timm's ``RandomErasing(probability=0.5, min_area=0.02, max_area=1/3, min_aspect=0.3,
    max_aspect=None, mode='const', min_count=1, max_count=None, num_splits=0, device='cpu')``
    (``timm.data.random_erasing``): with probability ``probability``, ``min_count`` to
    ``max_count`` blocks (at most 64), each up to ten attempts at ``uniform(min_area,
    max_area) / count`` of the area with a log-uniform aspect in ``(min_aspect, max_aspect)``
    (``None``: ``1 / min_aspect``), filled with zeros (``'const'``), one standard normal per
    channel (``'rand'``) or per pixel (``'pixel'``). timm's draws in kind, order and
    arithmetic, from the sample's generator (the same distributions as timm's, not Python's
    global stream). A tensor op like :class:`RandomErasing`: after ``ToTensor``, before or after
    ``Normalize`` (timm puts it after), in a profiler span named ``TimmRandomErasing``; refused
    with ``output="uint8"``. ``num_splits`` only matters for a batch (timm leaves the first
    split clean) and changes nothing per sample; ``device`` must be ``'cpu'``.

    ``from_torchvision`` converts timm's object into this."""

    _name = "TimmRandomErasing"

    def __init__(
        self,
        probability: float = 0.5,
        min_area: float = 0.02,
        max_area: float = 1 / 3,
        min_aspect: float = 0.3,
        max_aspect: Optional[float] = None,
        mode: str = "const",
        min_count: int = 1,
        max_count: Optional[int] = None,
        num_splits: int = 0,
        device: str = "cpu",
    ) -> None:
        op = self._name
        self.probability = _number(op, "probability", probability)
        if not 0.0 <= self.probability <= 1.0:
            raise ValueError(f"{op}: probability must be in [0, 1], got {probability!r}")
        self.min_area = _number(op, "min_area", min_area)
        self.max_area = _number(op, "max_area", max_area)
        if min(self.min_area, self.max_area) < 0.0:
            raise ValueError(f"{op}: min_area and max_area must be non-negative, got {min_area!r}, {max_area!r}")
        self.min_aspect = _number(op, "min_aspect", min_aspect)
        if self.min_aspect <= 0.0:
            raise ValueError(f"{op}: min_aspect must be positive, got {min_aspect!r}")
        # timm's `max_aspect or 1 / min_aspect`.
        self.max_aspect = _number(op, "max_aspect", max_aspect) if max_aspect else 1 / self.min_aspect
        if not (self.max_aspect > 0.0 and math.isfinite(self.max_aspect)):
            raise ValueError(f"{op}: max_aspect must be positive and finite, got {self.max_aspect!r}")
        if not isinstance(mode, str) or mode.lower() not in ("", "const", "rand", "pixel"):
            raise ValueError(f"{op}: mode must be 'const', 'rand' or 'pixel', got {mode!r}")
        self.mode = mode.lower() or "const"
        self.min_count = _count(op, "min_count", min_count, 0, 64)
        # timm's `max_count or min_count`.
        self.max_count = _count(op, "max_count", max_count, 0, 64) if max_count else self.min_count
        if self.min_count > self.max_count:
            raise ValueError(f"{op}: min_count must not exceed max_count, got {self.min_count} > {self.max_count}")
        self.num_splits = _count(op, "num_splits", num_splits, 0, 2**31)
        if str(device).split(":")[0] != "cpu":
            raise ValueError(f"{op}: device must be 'cpu' (the loader erases each sample on the CPU), got {device!r}")
        self.device = "cpu"

    def to_spec(self) -> Spec:
        return {
            "op": self._name,
            "probability": self.probability,
            "min_area": self.min_area,
            "max_area": self.max_area,
            "min_aspect": self.min_aspect,
            "max_aspect": self.max_aspect,
            "mode": self.mode,
            "min_count": self.min_count,
            "max_count": self.max_count,
        }


class Compose:
    """``Compose(transforms)``: the ops in order; a nested ``Compose`` stands for its ops."""

    def __init__(self, transforms: Sequence[Union[Transform, "Compose"]]) -> None:
        if isinstance(transforms, Transform) or not isinstance(transforms, (list, tuple)):
            raise TypeError(
                f"Compose: transforms must be a list of ferroloader transforms, got {transforms!r}"
            )
        for i, t in enumerate(transforms):
            if not isinstance(t, (Transform, Compose)):
                raise TypeError(
                    f"Compose: transforms[{i}] is {t!r}, not a ferroloader transform "
                    "(use ferroloader.transforms.from_torchvision for torchvision ones)"
                )
        self.transforms: List[Union[Transform, Compose]] = list(transforms)

    def to_spec(self) -> List[Spec]:
        """The ops of the native pipeline spec, in order, nested Composes flattened."""
        specs: List[Spec] = []
        for t in self.transforms:
            if isinstance(t, Compose):
                specs.extend(t.to_spec())
            else:
                specs.append(t.to_spec())
        return specs

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Compose) and self.transforms == other.transforms

    def __hash__(self) -> int:
        return hash(tuple(self.transforms))

    def __len__(self) -> int:
        return len(self.transforms)

    def __getitem__(self, index: int) -> Union[Transform, "Compose"]:
        return self.transforms[index]

    def __repr__(self) -> str:
        body = "".join(f"\n    {t!r}" for t in self.transforms)
        return f"Compose({body}\n)"


def pipeline_spec(transform: Any, *, output: str = "float32", decoder: str = "turbo", mode: str = "RGB") -> str:
    """The native pipeline spec (JSON) for ``transform`` (a :class:`Compose`, one transform, a
    list of them, or a torchvision ``Compose``), with the output dtype, the JPEG decoder and the
    images' mode (``"L"``: one-channel samples, as from torchvision's MNIST)."""
    compose = as_compose(transform)
    return _spec_json(compose, output, decoder, "chw", mode)


def _spec_json(compose: Compose, output: str, decoder: str, layout: str, mode: str) -> str:
    spec: Dict[str, Any] = {"ops": compose.to_spec(), "output": output, "decoder": decoder, "layout": layout}
    if mode != "RGB":
        spec["mode"] = mode
    return json.dumps(spec)


def as_compose(transform: Any) -> Compose:
    """``transform`` as a :class:`Compose` (converting torchvision transforms)."""
    if isinstance(transform, Compose):
        return transform
    if isinstance(transform, Transform):
        return Compose([transform])
    if isinstance(transform, (list, tuple)) and all(isinstance(t, Transform) for t in transform):
        return Compose(list(transform))
    if _is_torchvision(transform) or (
        isinstance(transform, (list, tuple)) and any(_is_torchvision(t) for t in transform)
    ):
        return from_torchvision(transform)
    raise TypeError(
        "transform: expected a ferroloader.transforms.Compose (or a torchvision Compose to "
        f"convert), got {transform!r}"
    )


def check_normalize_channels(compose: Compose, channels: Optional[int]) -> None:
    """Raises where a ``Normalize`` of ``compose`` has more values than the samples' channels."""
    if channels is None:
        return
    for op in compose.transforms:
        if isinstance(op, Normalize):
            op.check_channels(channels)


def check(transform: Any, *, output: str = "float32", decoder: str = "turbo") -> Dict[str, Any]:
    """Plans the pipeline as the loader would, raising what the loader would raise, and returns
    ``{"shape": (C, H, W), "dtype": ..., "deferred_normalize": (mean, std) or None}``. A
    pipeline with no crop or resize first keeps each image's own size (the loader takes it from
    the first sample): ``H`` and ``W`` are then ``None`` unless a later op fixes them."""
    checked = _native.check_pipeline(pipeline_spec(transform, output=output, decoder=decoder))
    check_normalize_channels(as_compose(transform), cast(Tuple[Optional[int], ...], checked["shape"])[0])
    return checked


def _is_torchvision(obj: object) -> bool:
    return type(obj).__module__.startswith("torchvision.transforms")


#: What a subclass may define and still compute what its torchvision base computes: its
#: constructor (which only decides the base's arguments) and the class's bookkeeping.
_INERT_CLASS_ATTRIBUTES = frozenset(
    {
        "__init__", "__module__", "__qualname__", "__doc__", "__dict__", "__weakref__",
        "__annotations__", "__orig_bases__", "__parameters__", "__firstlineno__",
        "__static_attributes__", "__slotnames__",
    }
)


def _as_torchvision(t: Any) -> Any:
    """A subclass of a torchvision transform, defined elsewhere, that overrides nothing but
    ``__init__`` (DINOv2's ``GaussianBlur(transforms.RandomApply)``, which only picks the
    ``GaussianBlur`` and the probability it applies) computes exactly what its torchvision base
    computes with the attributes it set: a shallow copy of it as that base class, for the
    converter. Anything else (a subclass overriding ``forward`` or ``__call__``) as it is."""
    cls = type(t)
    if isinstance(t, type) or _is_torchvision(t):
        return t
    for klass in cls.__mro__:
        if klass.__module__.startswith("torchvision.transforms"):
            try:
                proxy = copy.copy(t)
                proxy.__class__ = klass
            except (TypeError, AttributeError):
                return t
            return proxy
        if set(vars(klass)) - _INERT_CLASS_ATTRIBUTES:
            return t
    return t


def _is_timm(obj: object) -> bool:
    """One of timm's data transforms (``ferroloader._timm`` converts those it can)."""
    return type(obj).__module__.startswith("timm.data")


#: timm's conversions that leave a tensor as it is.
_TIMM_MAYBE_TO_TENSOR = ("MaybeToTensor", "MaybePILToTensor")


_SUPPORTED = (
    "RandomResizedCrop, Resize, CenterCrop, RandomHorizontalFlip, ToTensor, PILToTensor, "
    "Normalize, ColorJitter, Grayscale(num_output_channels=3), RandomGrayscale, "
    "RandomPosterize, RandomSolarize, RandomEqualize, RandomAutocontrast, RandomAdjustSharpness, "
    "RandomInvert, JPEG, TrivialAugmentWide, RandAugment, AutoAugment, AugMix, RandomVerticalFlip, "
    "RandomRotation, RandomAffine, RandomPerspective (NEAREST, BILINEAR, BICUBIC; "
    "NEAREST, BILINEAR after ToImage/PILToTensor), ElasticTransform (NEAREST, BILINEAR), "
    "GaussianBlur, Pad, RandomCrop, RandomApply, "
    "timm's ResizeKeepRatio, CenterCropOrPad and RandomCropOrPad, "
    "RandomChoice, RandomOrder and Compose of those, RandomErasing, "
    "ConvertImageDtype(torch.float) (and, from transforms.v2, ToImage, "
    "ToDtype(torch.float32, scale=True) (also per type, {tv_tensors.Image: torch.float32, ...}), "
    "ToPureTensor, Identity, RGB, RandomChannelPermutation, RandomPhotometricDistort, "
    "GaussianNoise on the float tensor); "
    "torch.nn.Identity; a ToDtype or "
    "ConvertImageDtype to torch.float32 after the conversion to float (a no-op)"
)

# The ops whose pixels depend on whether torchvision holds a PIL image or a tensor.
_DOMAIN_OPS = (
    ColorJitter, Grayscale, RandomGrayscale, RandomPosterize, RandomSolarize, RandomEqualize,
    RandomAutocontrast, RandomAdjustSharpness, RandomInvert, RandomRotation, RandomAffine,
    RandomPerspective, _Policy, RandomPhotometricDistort, Resize, RandomResizedCrop,
)

# The ops whose tensor kernels follow torchvision's API (v1 `functional` or `v2.functional`):
# after ToImage each runs the kernels of its own module, so the converter states the API
# (a ToImage marker) wherever it changes. Policies and AugMix carry their own `api`.
_TENSOR_API_OPS = (
    "ColorJitter", "Grayscale", "RandomGrayscale", "RandomAutocontrast", "RandomAdjustSharpness",
    "RandomRotation", "RandomAffine", "RandomPerspective", "RandomApply", "RandomChoice", "RandomOrder",
    "RandomPhotometricDistort", "Resize", "RandomResizedCrop",
)


def from_torchvision(compose: Any) -> Compose:
    """Converts a torchvision ``Compose`` (``torchvision.transforms`` or ``.v2``), a list of
    torchvision transforms, or a single one. Raises ``ValueError`` naming the first transform
    that has no ferroloader equivalent (or whose arguments are not supported).

    torchvision's reference recipes convert in both forms: v1's ``PILToTensor`` then
    ``ConvertImageDtype(torch.float)`` is ``ToTensor``; v2's ``ToImage()`` first (the image
    becomes a tensor before the crop) is the same pipeline with the conversion where
    ``ToDtype(torch.float32, scale=True)`` stands (or, without one, ``PILToTensor`` at the end).

    Where ``ToImage()``/``PILToTensor()`` stands before other ops, the converted pipeline holds
    a :class:`ToImage` marker there (of the API of the ops after it), and the native planner
    computes what torchvision computes on a uint8 tensor: the colour ops (``ColorJitter``,
    ``Grayscale``, ``RandomGrayscale``, ``RandomPosterize``, ``RandomSolarize``,
    ``RandomEqualize``, ``RandomAutocontrast``, ``RandomAdjustSharpness``, ``RandomInvert``),
    the warps (``RandomRotation``, ``RandomAffine``, ``RandomPerspective``) and the policies'
    ops with torch's tensor kernels (v1's ``_functional_tensor`` or ``v2.functional``, as the
    op's module says), the same pixels as torchvision's up to the rounding noise of the
    perspective's least-squares solve. Before it, they compute what Pillow computes on the PIL
    image. Flips, crops, padding, ``GaussianBlur`` and ``JPEG`` (Pillow's save and torchvision's
    ``encode_jpeg`` set libjpeg alike) are the same either way. On a tensor
    torchvision resizes (``Resize``, ``RandomResizedCrop``) with its own antialiasing, which
    can differ from Pillow's (what ferroloader computes) by a level.

    Random draws follow v1's comparisons; v2's differ only for a draw equal to ``p``. The
    geometric ops convert from v1 and v2 alike (v2's ``RandomCrop`` with both ``padding`` and
    ``pad_if_needed`` in a reflect or symmetric mode pads differently and is refused). A warp
    (``RandomRotation``, ``RandomAffine``, ``RandomPerspective``, the policies) with BICUBIC
    converts before ``ToImage()``/``PILToTensor()``, where torchvision warps the PIL image with
    Pillow's bicubic filter; after it, and in ``AugMix`` (which warps a uint8 tensor), it is
    refused with torchvision's own error, since torchvision's tensor kernels refuse it. So is a
    v2 warp with ``fill=None`` and BILINEAR after it (torchvision samples it without a fill
    channel, which these ops do not implement; ``fill=0``, the default, converts).
    """
    compose = _as_torchvision(compose)
    if isinstance(compose, (list, tuple)):
        items = list(compose)
    elif _is_torchvision(compose) and type(compose).__name__ == "Compose":
        items = list(compose.transforms)
    else:
        items = [compose]
    items = _flatten_torchvision_compose(items)
    out: List[Transform] = []
    # A ToImage/PILToTensor met before the other ops: the ops after it see a uint8 tensor (a
    # ToImage marker of `tensor_api`), the conversion to the output happens where ToDtype
    # stands, or at the end.
    pending_tensor = False
    tensor_api = "v2"
    # Whether torchvision holds a tv_tensors.Image (after v2's ToImage, through v2's ops), which
    # a ToDtype with a per-type dtype looks up by type.
    image_typed = False
    for i, t in enumerate(items):
        name = type(t).__name__
        where = f"from_torchvision: transform #{i} {_describe(t)}"
        if isinstance(t, (Transform, Compose)):
            raise TypeError(f"{where} is already a ferroloader transform; pass it directly")
        if _is_identity(t):
            continue  # no op at all: the plan stays as if it were not written
        if name in ("ToDtype", "ConvertImageDtype") and _is_torchvision(t):
            try:
                target = _dtype_target(t, image_typed)
            except ValueError as e:
                raise ValueError(f"{where} cannot be converted: {e}") from e
            if target is None:
                continue  # torchvision hands the image on as it is
        if _is_torchvision(t) and name not in ("ToDtype", "ConvertImageDtype") and (
            not _is_v2(t) or name in ("ToTensor", "PILToTensor", "ToPureTensor")
        ):
            image_typed = False  # v1's kernels return plain tensors, even from a tv_tensors.Image
        if converts_to_rgb(t) and not pending_tensor:
            out.append(RGB())  # a tensor has no .convert: after ToImage it is the tail's
            continue
        if t is _openclip.CONVERTS_TO_RGB:
            if not pending_tensor:
                out.append(RGB())
            continue  # on a tensor open_clip's MaybeConvertMode does nothing
        if not (_is_torchvision(t) or _is_timm(t)):
            raise ValueError(f"{where} is not a torchvision transform; supported: {_SUPPORTED}")
        if name in _TIMM_MAYBE_TO_TENSOR and _is_timm(t) and (
            pending_tensor or any(isinstance(o, (ToTensor, PILToTensor)) for o in out)
        ):
            continue  # timm's Maybe*ToTensor hands a tensor on as it is
        if name in ("ToImage", "PILToTensor") and not any(isinstance(o, (ToTensor, PILToTensor)) for o in out):
            if not pending_tensor:
                tensor_api = "v2" if _is_v2(t) else "v1"
                out.append(ToImage(api=tensor_api))
            pending_tensor = True
            image_typed = name == "ToImage"
            continue
        if pending_tensor and name in ("ToDtype", "ConvertImageDtype"):
            _append_conversion(out)
            pending_tensor = False
        try:
            converted = _convert_one(name, t, out, image_typed)
        except (TypeError, ValueError) as e:
            raise ValueError(f"{where} cannot be converted: {e}") from e
        if converted is None:
            raise ValueError(f"{where} has no ferroloader equivalent; supported: {_SUPPORTED}")
        if converted is not _SKIP:
            mode = getattr(converted, "interpolation", None)
            modes = mode if isinstance(mode, list) else [mode]
            resizes = (Resize, RandomResizedCrop, RandomResizedCropAndInterpolation, ResizeKeepRatio)
            if pending_tensor and isinstance(converted, resizes) and any(m in _PIL_ONLY_INTERPOLATIONS for m in modes):
                raise ValueError(
                    f"{where} resizes an image tensor with {mode}: torchvision has that mode for PIL "
                    "images only (move it before ToImage/PILToTensor)"
                )
            if pending_tensor and _warps_bicubic(converted):
                raise ValueError(
                    f"{where} warps an image tensor with bicubic: {_BICUBIC_ON_TENSORS}, as torchvision's "
                    "tensor kernels say (move it before ToImage/PILToTensor to warp the PIL image)"
                )
            if (
                pending_tensor
                and _is_v2(t)
                and name in ("RandomRotation", "RandomAffine", "RandomPerspective")
                and t.fill is None
                and mode != "nearest"
            ):
                raise ValueError(
                    f"{where}: fill=None on an image tensor samples without a fill channel in "
                    "torchvision v2, which ferroloader does not reproduce; give fill=0 (the default)"
                )
            if pending_tensor and isinstance(converted, _TIMM_POLICIES):
                raise ValueError(
                    f"{where} follows ToImage/PILToTensor: timm's ops work on PIL images only "
                    "(move it before the conversion)"
                )
            if pending_tensor and isinstance(converted, Normalize):
                raise ValueError(
                    f"{where} normalizes a uint8 image tensor: convert it first with "
                    "ToDtype(torch.float32, scale=True)"
                )
            if pending_tensor and name in _TENSOR_API_OPS:
                api = "v2" if _is_v2(t) else "v1"
                if api != tensor_api:
                    tensor_api = api
                    out.append(ToImage(api=api))
            if isinstance(converted, (RandomHorizontalFlip, RandomVerticalFlip)):
                _insert_flip(out, converted)
            else:
                out.append(converted)  # type: ignore[arg-type]
    if pending_tensor:
        _append_conversion(out)
    return Compose(_drop_idle_markers(out))


def _computes_by_domain(t: object) -> bool:
    """Whether ``t`` (or a transform nested in it) computes other pixels on a tensor than on a
    PIL image: the colour ops, the warps and the policies (AugMix always runs on a tensor)."""
    if isinstance(t, _DOMAIN_OPS):
        return True
    return any(_computes_by_domain(n) for n in getattr(t, "transforms", ()))


def _drop_idle_markers(out: List[Transform]) -> List[Transform]:
    """``out`` without the ``ToImage`` markers that no op computing by domain follows before
    the next marker or the conversion: they change nothing, and without them a v2 pipeline of
    crops and flips converts to the same transforms as its v1 form."""
    kept: List[Transform] = []
    for i, t in enumerate(out):
        if isinstance(t, ToImage):
            ahead = []
            for n in out[i + 1:]:
                if isinstance(n, (ToImage, ToTensor, PILToTensor)):
                    break
                ahead.append(n)
            if not any(_computes_by_domain(n) for n in ahead):
                continue
        kept.append(t)
    return kept


def _append_conversion(out: List[Transform]) -> None:
    """Appends the uint8 conversion (``PILToTensor``; a ``ToDtype`` after it makes it
    ``ToTensor``), dropping the ``ToImage`` markers right before it: nothing runs between them."""
    while out and isinstance(out[-1], ToImage):
        out.pop()
    out.append(PILToTensor())


def _insert_flip(out: List[Transform], flip: Transform) -> None:
    """Appends ``flip``, moved before the tensor conversion and normalization it follows
    (``ToTensor(), RandomHorizontalFlip()`` is a common v1 order): mirroring commutes exactly
    with those per-pixel, per-channel steps, and the native plan flips before them."""
    at = len(out)
    while at > 0 and isinstance(out[at - 1], (ToTensor, PILToTensor, Normalize)):
        at -= 1
    out.insert(at, flip)


def _flatten_torchvision_compose(items: List[Any]) -> List[Any]:
    """A torchvision ``Compose`` nested in the list stands for its transforms, where it stands,
    and so does a pretrained model's preset (:func:`_preset_steps`); open_clip's classes and
    DINO's blur and solarization stand for their equivalents (``ferroloader._openclip``,
    ``ferroloader._ssl``)."""
    flat: List[Any] = []
    for t in map(_standing_for, items):
        if _is_torchvision(t) and type(t).__name__ == "Compose":
            flat.extend(_flatten_torchvision_compose(list(t.transforms)))
        elif _is_torchvision(t) and type(t).__name__ == "ImageClassification":
            flat.extend(_preset_steps(t))
        else:
            flat.append(t)
    return flat


def _standing_for(t: Any) -> Any:
    """What the converter takes ``t`` as: a subclass changing only ``__init__`` as its
    torchvision base (:func:`_as_torchvision`), open_clip's classes and the self-supervised
    repositories' own blurs and solarizations as their equivalents (``ferroloader._openclip``,
    ``ferroloader._ssl``, each ``None`` for anything else), anything else as it is."""
    t = _as_torchvision(t)
    same = _openclip.equivalent(t)
    if same is None:
        same = _ssl.equivalent(t)
    return t if same is None else same


def _preset_steps(preset: Any) -> List[Any]:
    """torchvision's ``ImageClassification`` preset (``ResNet50_Weights.DEFAULT.transforms()``,
    what fine-tuning scripts evaluate with) as the v1 transforms its ``forward`` calls the
    functionals of: resize, centre crop, ``pil_to_tensor`` where the image is a PIL image (a
    ``PILToTensor`` after ``ToImage`` is the no-op the preset's ``isinstance`` check makes it),
    ``convert_image_dtype`` to float, normalize."""
    import torch
    import torchvision.transforms as tv  # type: ignore[import-untyped]

    return [
        tv.Resize(list(preset.resize_size), interpolation=preset.interpolation, antialias=preset.antialias),
        tv.CenterCrop(list(preset.crop_size)),
        tv.PILToTensor(),
        tv.ConvertImageDtype(torch.float),
        tv.Normalize(list(preset.mean), list(preset.std)),
    ]


def converts_to_rgb(function: Any) -> bool:
    """Whether ``function`` is exactly ``return image.convert("RGB")`` of its one argument
    (open_clip's ``_convert_to_rgb``, the ``lambda img: img.convert("RGB")`` of Hugging Face's
    examples): on a PIL image, what v2's ``RGB()`` does. Read from its bytecode; not called."""
    code = getattr(function, "__code__", None)
    if not isinstance(function, types.FunctionType) or not isinstance(code, types.CodeType):
        return False
    if not _bytecode.plain_arguments(code, 1):
        return False
    image = code.co_varnames[0]
    converts = [("LOAD_FAST", image), ("LOAD_ATTR", "convert"), ("LOAD_CONST", "RGB"), ("CALL", 1), ("RETURN_VALUE", None)]
    return _bytecode.returned_directly(_bytecode.steps(code)) == converts


def _convert_nested(transforms: Iterable[Any]) -> List[Union[Transform, Compose]]:
    """The ``transforms`` of a torchvision random composition, converted: stage ops, nested
    random compositions, and ``Compose`` kept as one unit."""
    out: List[Union[Transform, Compose]] = []
    for i, t in enumerate(map(_standing_for, transforms)):
        name = type(t).__name__
        if _is_identity(t):
            out.append(Identity())  # still one choice of RandomChoice, one item of RandomOrder
            continue
        if not (_is_torchvision(t) or _is_timm(t)):
            raise ValueError(f"transforms[{i}] {t!r} is not a torchvision transform")
        if name == "Compose":
            out.append(Compose(_convert_nested(t.transforms)))
            continue
        converted = _convert_one(name, t, [])
        if not isinstance(converted, Transform):
            raise ValueError(f"transforms[{i}] {_describe(t)} has no ferroloader equivalent inside it")
        out.append(converted)
    return out


def _describe(t: Any) -> str:
    """``repr(t)``, with the arguments torchvision's repr leaves out (ToDtype's dtype)."""
    name = type(t).__name__
    if name in ("ToDtype", "ConvertImageDtype"):
        return f"{name}(dtype={t.dtype}, scale={getattr(t, 'scale', True)})"
    return repr(t)


_SKIP = object()


def _is_identity(t: object) -> bool:
    """torchvision v2's ``Identity`` or ``torch.nn.Identity`` (a Compose's "off" branch)."""
    module = type(t).__module__
    return type(t).__name__ == "Identity" and (
        module.startswith("torchvision.transforms") or module.startswith("torch.nn")
    )


def _dtype_target(t: Any, image_typed: bool) -> Any:
    """The dtype a ``ToDtype``/``ConvertImageDtype`` converts the image to, or ``None`` where it
    hands it on as it is: v2's per-type dict looks the image's type up (``tv_tensors.Image``
    after v2's ``ToImage``, else a plain tensor), then ``"others"``, as torchvision's
    ``ToDtype.transform`` does (which raises without either)."""
    dtype = t.dtype
    if not isinstance(dtype, dict):
        return dtype
    import torch  # only reachable with torchvision installed

    def is_kind(key: object) -> bool:
        # torchvision looks the input's exact type up: tv_tensors.Image, or torch.Tensor.
        if not image_typed:
            return key is torch.Tensor
        return isinstance(key, type) and key.__name__ == "Image" and key.__module__.startswith("torchvision.tv_tensors")

    for key, value in dtype.items():
        if is_kind(key):
            return value
    if "others" in dtype:
        return dtype["others"]
    kind = "tv_tensors.Image" if image_typed else "torch.Tensor"
    raise ValueError(f"dtype={dtype}: no dtype for {kind} and no \"others\" (torchvision raises too)")


def _convert_one(name: str, t: Any, done: List[Transform], image_typed: bool = False) -> object:
    if _is_timm(t):
        from ferroloader._timm import (
            AugMixArgs,
            AugmentOpArgs,
            AutoAugmentArgs,
            CropOrPadArgs,
            KeepRatioArgs,
            RandAugmentArgs,
            RandomErasingArgs,
            ResizedCropArgs,
            equivalent,
        )

        def augment_ops(args: Sequence[AugmentOpArgs], where: Callable[[int], str]) -> List[TimmAugmentOp]:
            ops = []
            for i, a in enumerate(args):
                try:
                    ops.append(TimmAugmentOp(**a._asdict()))
                except (TypeError, ValueError) as e:
                    raise ValueError(f"{where(i)} ({a.name}): {e}") from None
            return ops

        same = equivalent(t)
        if isinstance(same, KeepRatioArgs):
            return ResizeKeepRatio(**same._asdict())
        if isinstance(same, CropOrPadArgs):
            kind = RandomCropOrPad if same.random else CenterCropOrPad
            return kind(same.size, same.fill, same.padding_mode)
        if isinstance(same, ResizedCropArgs):
            return RandomResizedCropAndInterpolation(**same._asdict())
        if isinstance(same, RandomErasingArgs):
            return TimmRandomErasing(**same._asdict())
        if isinstance(same, RandAugmentArgs):
            ops = augment_ops(same.ops, lambda i: f"ops[{i}]")
            return TimmRandAugment(ops, same.num_layers, same.choice_weights)
        if isinstance(same, AutoAugmentArgs):
            policy = []
            for i, sub in enumerate(same.policy):
                prefix = f"policy[{i}]"
                policy.append(augment_ops(sub, lambda j: f"{prefix}[{j}]"))
            return TimmAutoAugment(policy)
        if isinstance(same, AugMixArgs):
            ops = augment_ops(same.ops, lambda i: f"ops[{i}]")
            return TimmAugMix(ops, same.alpha, same.width, same.depth, same.blended)
        return None if same is None else _convert_one(type(same).__name__, same, done)
    if name == "RandomResizedCrop":
        return RandomResizedCrop(
            list(t.size), tuple(t.scale), tuple(t.ratio), t.interpolation, t.antialias
        )
    if name == "Resize":
        size = t.size if _is_int(t.size) else list(t.size)
        return Resize(size, t.interpolation, t.max_size, t.antialias)
    if name == "CenterCrop":
        return CenterCrop(list(t.size) if not _is_int(t.size) else t.size)
    if name == "RandomHorizontalFlip":
        return RandomHorizontalFlip(float(t.p))
    if name == "ToTensor":
        return ToTensor()
    if name in ("PILToTensor", "ToImage"):
        return PILToTensor()
    if name == "Normalize":
        return Normalize(list(map(float, t.mean)), list(map(float, t.std)))
    if name == "ColorJitter":
        # torchvision keeps each argument resolved by _check_input: None (off) or (min, max).
        def jitter(value: Any) -> Union[float, List[float]]:
            return 0 if value is None else [float(v) for v in value]

        return ColorJitter(jitter(t.brightness), jitter(t.contrast), jitter(t.saturation), jitter(t.hue))
    if name == "Grayscale":
        return Grayscale(t.num_output_channels)
    if name == "RandomGrayscale":
        return RandomGrayscale(float(t.p))
    if name == "RandomPosterize":
        return RandomPosterize(t.bits, float(t.p))
    if name == "RandomSolarize":
        return RandomSolarize(t.threshold, float(t.p))
    if name == "RandomEqualize":
        return RandomEqualize(float(t.p))
    if name == "RandomAutocontrast":
        return RandomAutocontrast(float(t.p))
    if name == "RandomAdjustSharpness":
        return RandomAdjustSharpness(t.sharpness_factor, float(t.p))
    if name == "RandomInvert":
        return RandomInvert(float(t.p))
    if name == "JPEG":
        return JPEG(list(t.quality))
    if name == "Identity":
        return Identity()
    if name == "RGB":
        return RGB()
    if name == "RandomChannelPermutation":
        return RandomChannelPermutation()
    if name == "RandomPhotometricDistort":
        return RandomPhotometricDistort(
            [float(v) for v in t.brightness], [float(v) for v in t.contrast],
            [float(v) for v in t.saturation], [float(v) for v in t.hue], float(t.p),
        )
    if name in ("TrivialAugmentWide", "RandAugment", "AutoAugment"):
        api = "v2" if type(t).__module__.startswith("torchvision.transforms.v2") else "v1"
        if name == "TrivialAugmentWide":
            return TrivialAugmentWide(t.num_magnitude_bins, t.interpolation, t.fill, api=api)
        if name == "RandAugment":
            return RandAugment(t.num_ops, t.magnitude, t.num_magnitude_bins, t.interpolation, t.fill, api=api)
        return AutoAugment(t.policy, t.interpolation, t.fill, api=api)
    if name == "AugMix":
        api = "v2" if type(t).__module__.startswith("torchvision.transforms.v2") else "v1"
        return AugMix(
            t.severity, t.mixture_width, t.chain_depth, t.alpha, t.all_ops, t.interpolation, t.fill, api=api
        )
    if name == "RandomApply":
        return RandomApply(_convert_nested(t.transforms), float(t.p))
    if name == "RandomChoice":
        return RandomChoice(_convert_nested(t.transforms), None if t.p is None else [float(w) for w in t.p])
    if name == "RandomOrder":
        return RandomOrder(_convert_nested(t.transforms))
    if name == "GaussianNoise":
        if not any(isinstance(o, ToTensor) for o in done):
            if done and isinstance(done[-1], PILToTensor) or any(isinstance(o, ToImage) for o in done):
                raise ValueError(
                    "the image is a uint8 tensor here: ferroloader adds noise to the float32 "
                    "tensor only; put it after ToDtype(torch.float32, scale=True)"
                )
            # torchvision's own error (its PIL kernel).
            raise ValueError("Gaussian Noise is not implemented for PIL images.")
        return GaussianNoise(t.mean, t.sigma, t.clip)
    if name == "RandomErasing":
        # v2 keeps value as a list of floats, or None for "random".
        value = "random" if t.value is None else t.value
        return RandomErasing(float(t.p), tuple(t.scale), tuple(t.ratio), value, bool(t.inplace))
    if name in _GEOMETRIC:
        return _GEOMETRIC[name](t)
    if name == "ToPureTensor":
        return _SKIP
    if name in ("ToDtype", "ConvertImageDtype"):
        import torch  # only reachable with torchvision installed

        dtype = _dtype_target(t, image_typed)
        scale = getattr(t, "scale", True)  # ConvertImageDtype always scales
        if any(isinstance(o, ToTensor) for o in done):
            # The image is float32 already: torchvision converts float32 to float32 as it is
            # (with or without scale); another dtype would change the output's.
            if dtype == torch.float32:
                return _SKIP
            raise ValueError(
                f"dtype={dtype}: the image is float32 here (after ToTensor/ToDtype(torch.float32, "
                "scale=True)); only torch.float32, which changes nothing, is supported"
            )
        after_tensor = bool(done) and isinstance(done[-1], PILToTensor)
        if dtype == torch.float32 and scale and after_tensor:
            # v1's ConvertImageDtype divides by 255; v2's ToDtype and ConvertImageDtype multiply
            # by float32(1 / 255) (to_dtype_image): one ulp apart on half the levels.
            done[-1] = ToDtype() if _is_v2(t) else ToTensor()
            return _SKIP
        if dtype == torch.uint8 and after_tensor:
            return _SKIP
        raise ValueError(
            f"dtype={dtype}, scale={scale}: only torch.float32 with scale=True, or torch.uint8, "
            "right after ToImage/PILToTensor is supported"
        )
    return None


class TailSplit(NamedTuple):
    """A transform cut into the native prefix and the Python tail after it."""

    #: The prefix's pipeline spec (JSON), or ``None``: no native prefix, the tail gets the
    #: image as Pillow opens it (``Image.open(f).convert("RGB")``, torchvision's loader; ``"L"``
    #: for a one-channel dataset).
    spec: Optional[str]
    #: The prefix, as ferroloader transforms (empty without one).
    prefix: Compose
    #: The transforms (or callables) run in Python after it, in order: the original objects.
    tail: List[Any]
    #: What the tail's first op gets: ``"bytes"`` (decoded by Pillow first: no prefix),
    #: ``"image"`` (a PIL image, RGB or L: the prefix stops before ``ToTensor``), ``"uint8"`` or
    #: ``"float32"`` (a CHW tensor: it ended with a conversion).
    input_kind: str
    #: Why the first tail op is not native (the converter's or the planner's message).
    reason: str
    #: The batches' dtype, ``"float32"`` or ``"uint8"``: the ``output`` asked for, or, asked
    #: for none, the one the transform yields (:func:`output_of`).
    output: str = "float32"


def delegated_compose(transform: Any) -> Optional[Any]:
    """The torchvision ``Compose`` that calling ``transform`` runs and nothing else, or
    ``None``: for an object whose class's ``__call__`` is exactly ``return
    self.transforms(x)`` and whose ``transforms`` is an instance attribute holding a
    ``Compose``, as torchvision's reference ``ClassificationPresetTrain``/``Eval`` (and the
    copies of them in training scripts) are. Decided from ``__call__``'s bytecode, so an
    object whose call does anything more (a second step, a condition, a logging line) is not
    unwrapped."""
    inner = vars(transform).get("transforms") if hasattr(transform, "__dict__") else None
    if type(inner).__name__ != "Compose" or not hasattr(inner, "transforms"):
        return None
    call = inspect.getattr_static(type(transform), "__call__", None)
    code = getattr(call, "__code__", None)
    if not isinstance(call, types.FunctionType) or not isinstance(code, types.CodeType):
        return None
    if "transforms" in {name for klass in type(transform).__mro__ for name in vars(klass)}:
        return None  # a property or class attribute could differ from the instance's
    if not _bytecode.plain_arguments(code, 2):
        return None
    this, arg = code.co_varnames[:2]
    delegates = [("LOAD_FAST", this), ("LOAD_ATTR", "transforms"), ("LOAD_FAST", arg), ("CALL", 1), ("RETURN_VALUE", None)]
    return inner if _bytecode.returned_directly(_bytecode.steps(code)) == delegates else None


def _tail_items(transform: Any) -> Optional[List[Any]]:
    """The ops of a transform that may have a Python tail (a torchvision ``Compose``, a list,
    a torchvision transform, an object that only calls the ``Compose`` it holds
    (:func:`delegated_compose`) or any callable); ``None`` for ferroloader's own transforms,
    which are native by construction."""
    if isinstance(transform, (Compose, Transform)):
        return None
    _refuse_named_argument_transforms(transform)
    inner = delegated_compose(transform)
    if inner is not None:
        transform = inner
    transform = _as_torchvision(transform)
    if isinstance(transform, (list, tuple)):
        return None if all(isinstance(t, Transform) for t in transform) else list(transform)
    if _is_torchvision(transform) and type(transform).__name__ == "Compose":
        return list(transform.transforms)
    return [transform] if callable(transform) else None


def _refuse_named_argument_transforms(transform: Any) -> None:
    """Refuses albumentations' transforms, which take the image as a named numpy array
    (``transform(image=array)["image"]``) where the loader (as a torchvision dataset) calls a
    transform with the image: each sample would fail in the tail, far from the cause."""
    if type(transform).__module__.split(".")[0] == "albumentations":
        raise TypeError(
            f"transform: {type(transform).__name__} is albumentations', which takes the image "
            "as a named array (transform(image=array)['image']), not the PIL image the loader "
            "hands a transform: pass transform=lambda image: "
            f"{type(transform).__name__.lower()}(image=np.asarray(image))['image'] (a Python "
            "tail), or a torchvision transform to run it natively"
        )


def _planned(
    compose: Compose, output: str, decoder: str, mode: str, layout: str = "chw", *, before_tail: bool = False
) -> str:
    """``compose``'s spec, planned (raises what the planner raises). ``before_tail``: the prefix
    of a Python tail, which must give every sample one size. Its output goes through one buffer
    whatever the image, and only the tail, which may crop, makes the batch's size; so a prefix
    whose size follows each image's (no crop first, or a ``Resize(int)`` alone) is refused,
    though the same ops with nothing after them run natively on images of one size."""
    spec = _spec_json(compose, output, decoder, layout, mode)
    shape = _native.check_pipeline(spec)["shape"]
    if before_tail and None in cast(Tuple[Optional[int], ...], shape):
        raise ValueError(
            "transform: the native ops before a Python tail must give every image one size (a "
            "crop, or a resize to (height, width)); these keep each image's own size"
        )
    return spec


def output_of(compose: Compose) -> str:
    """The dtype of the batches ``compose`` makes, as torchvision's would: ``"uint8"`` where it
    converts to a tensor without scaling to float (``PILToTensor``, v2's ``ToImage()`` with no
    ``ToDtype`` after it, timm's ``MaybePILToTensor``: what a GPU-side normalization, such as
    timm's prefetcher, wants), ``"float32"`` otherwise."""
    ops = compose.transforms
    converts_to_uint8 = any(isinstance(t, PILToTensor) for t in ops)
    return "uint8" if converts_to_uint8 and not any(isinstance(t, ToTensor) for t in ops) else "float32"


def split_python_tail(
    transform: Any, *, output: Optional[str] = "float32", decoder: str = "turbo", mode: str = "RGB"
) -> TailSplit:
    """Cuts ``transform`` into the longest prefix the native planner accepts and the rest, the
    Python tail (empty when everything is native). The planner decides, not a list kept here, so
    ops made native later move into the prefix on their own. ``output=None``: the dtype the
    transform yields (:func:`output_of`; ``"float32"`` when a Python tail makes the samples).

    The prefix ends before ``ToTensor`` (the tail gets a PIL RGB image with the pixels
    torchvision would have there) or after ``ToTensor``/``Normalize``/``PILToTensor``/
    ``ToImage``/``ToDtype`` (a CHW float32 or uint8 tensor). ferroloader's own transforms are
    never cut: they convert or raise as :func:`as_compose` does.
    """
    items = _tail_items(transform)
    if items is None:
        compose = as_compose(transform)
        out = output or output_of(compose)
        spec = pipeline_spec(compose, output=out, decoder=decoder, mode=mode)
        return TailSplit(spec, compose, [], out, "", out)
    reason = ""
    try:
        compose = from_torchvision(items)
        out = output or output_of(compose)
        return TailSplit(_planned(compose, out, decoder, mode), compose, [], out, "", out)
    except (TypeError, ValueError) as e:
        reason = str(e)
    output = output or "float32"
    for k in range(len(items) - 1, 0, -1):
        head = items[:k]
        try:
            compose = (
                Compose(list(head)) if all(isinstance(t, Transform) for t in head) else from_torchvision(head)
            )
            last = compose.transforms[-1] if compose.transforms else None
            if isinstance(last, (ToTensor, Normalize)):
                spec, kind = _planned(compose, "float32", decoder, mode, before_tail=True), "float32"
            elif isinstance(last, PILToTensor):
                spec, kind = _planned(compose, "uint8", decoder, mode, before_tail=True), "uint8"
            else:
                spec, kind = _planned(compose, "uint8", decoder, mode, "hwc", before_tail=True), "image"
        except (TypeError, ValueError) as e:
            reason = str(e)
            continue
        return TailSplit(spec, compose, items[k:], kind, reason, output)
    return TailSplit(None, Compose([]), items, "bytes", reason, output)


def tail_op_name(op: Any) -> str:
    """How profiles and errors name a tail op: its class, or a plain function's name."""
    if isinstance(op, (types.FunctionType, types.BuiltinFunctionType, types.MethodType)):
        return str(op.__name__)
    return type(op).__name__


def _is_v2(t: Any) -> bool:
    return type(t).__module__.startswith("torchvision.transforms.v2")


def _tv_size(size: Any) -> SizeArg:
    return cast(int, size) if _is_int(size) else list(size)


def _tv_padding(padding: Any) -> Any:
    return None if padding is None else (cast(int, padding) if _is_int(padding) else list(padding))


def _tv_random_crop(t: Any) -> RandomCrop:
    padding = _tv_padding(t.padding)
    if _is_v2(t) and padding is not None and t.pad_if_needed and t.padding_mode in ("reflect", "symmetric"):
        # v2 pads once by the sum; v1 (what ferroloader runs) reflects its own first padding.
        raise ValueError(
            "v2 RandomCrop with padding, pad_if_needed=True and a reflect/symmetric padding_mode "
            "pads differently from v1 (once, not twice); not supported"
        )
    return RandomCrop(_tv_size(t.size), padding, t.pad_if_needed, t.fill, t.padding_mode)


# The geometric ops from torchvision (v1 and v2 keep the same attribute names). v2's draws are
# v1's up to the order in the sample's stream (v2's RandomCrop draws no offset on an axis the
# crop fills); the distributions are the same.
_GEOMETRIC: Dict[str, Any] = {
    "RandomVerticalFlip": lambda t: RandomVerticalFlip(float(t.p)),
    "RandomRotation": lambda t: RandomRotation(list(t.degrees), t.interpolation, t.expand, t.center, t.fill),
    "RandomAffine": lambda t: RandomAffine(
        list(t.degrees), t.translate, t.scale, None if t.shear is None else list(t.shear), t.interpolation, t.fill, t.center
    ),
    "RandomPerspective": lambda t: RandomPerspective(float(t.distortion_scale), float(t.p), t.interpolation, t.fill),
    "ElasticTransform": lambda t: ElasticTransform(
        list(t.alpha), list(t.sigma), t.interpolation, t.fill, api="v2" if _is_v2(t) else "v1"
    ),
    "GaussianBlur": lambda t: GaussianBlur(list(t.kernel_size), list(t.sigma)),
    "Pad": lambda t: Pad(_tv_padding(t.padding), t.fill, t.padding_mode),
    "RandomCrop": _tv_random_crop,
}
