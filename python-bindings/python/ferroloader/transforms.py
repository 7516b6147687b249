"""torchvision's image-classification transforms, by the same names and arguments.

These objects only *describe* a pipeline: the loader runs them natively (decode, crop, resize,
flip, to-tensor and normalize fused into one pass per sample). Supported shapes of a pipeline::

    RandomResizedCrop | Resize [CenterCrop] | CenterCrop      (fixes the output size)
    RandomHorizontalFlip and pixel ops, any number, any order
    ToTensor [Normalize]  |  PILToTensor                      (float32 / uint8 output)

The pixel ops (``ColorJitter``, ``Grayscale(num_output_channels=3)``, ``RandomGrayscale``,
``RandomPosterize``, ``RandomSolarize``, ``RandomEqualize``, ``RandomAutocontrast``,
``RandomAdjustSharpness``, ``RandomInvert``) run on the 8-bit image of the output size, with
Pillow's arithmetic (what torchvision computes on a PIL image), each drawing its parameters from
the sample's generator in pipeline order. With none of them the single fused pass runs.

``from_torchvision(compose)`` converts a torchvision ``Compose`` (v1 or v2) of these transforms,
naming any transform it cannot convert. Arguments are checked here (``TypeError`` or
``ValueError`` naming the transform and the argument); the order of the ops is checked when the
pipeline is planned (by :class:`ferroloader.Loader` or :func:`check`).
"""

from __future__ import annotations

import json
import math
import numbers
import operator
from typing import Any, Dict, Iterable, List, Optional, Sequence, SupportsIndex, Tuple, Union, cast

import numpy as np

from ferroloader import _native

__all__ = [
    "Transform",
    "Compose",
    "RandomResizedCrop",
    "Resize",
    "CenterCrop",
    "RandomHorizontalFlip",
    "ToTensor",
    "PILToTensor",
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
    "from_torchvision",
    "check",
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
# (``_interpolation_modes_from_int``); only the first three are implemented.
_PIL_FILTERS = {0: "nearest", 2: "bilinear", 3: "bicubic", 4: "box", 5: "hamming", 1: "lanczos"}
_INTERPOLATIONS = ("nearest", "bilinear", "bicubic")


def _interpolation(op: str, value: object) -> str:
    """The interpolation's name: a string, torchvision's ``InterpolationMode`` or a Pillow
    constant (an int, as torchvision accepts them). Nearest, bilinear and bicubic are
    implemented, as Pillow computes them for PIL images (bilinear and bicubic antialiased)."""
    if isinstance(value, int) and not isinstance(value, bool):
        name: object = _PIL_FILTERS.get(int(value), value)
    else:
        name = getattr(value, "value", value)  # torchvision's InterpolationMode is a str enum
    if isinstance(name, str) and name.lower() in _INTERPOLATIONS:
        return name.lower()
    raise ValueError(
        f"{op}: interpolation {value!r} ({name}) is not supported; only nearest, bilinear "
        "and bicubic are implemented"
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


class RandomResizedCrop(Transform):
    """``RandomResizedCrop(size, scale=(0.08, 1.0), ratio=(3/4, 4/3))``: a random crop of random
    area and aspect ratio, resized to ``size``; parameters drawn exactly as torchvision's
    ``get_params`` does, from a per-sample generator seeded by (seed, epoch, index).
    ``interpolation``: nearest, bilinear (default) or bicubic, as Pillow resizes a PIL image."""

    def __init__(
        self,
        size: SizeArg,
        scale: Tuple[float, float] = (0.08, 1.0),
        ratio: Tuple[float, float] = (3.0 / 4.0, 4.0 / 3.0),
        interpolation: Any = "bilinear",
        antialias: Optional[bool] = True,
    ) -> None:
        op = "RandomResizedCrop"
        self.size = _size(op, "size", size)
        self.scale = _pair(op, "scale", scale)
        if self.scale[0] < 0:
            raise ValueError(f"{op}: scale must be non-negative, got {scale!r}")
        self.ratio = _pair(op, "ratio", ratio)
        if self.ratio[0] <= 0:
            raise ValueError(f"{op}: ratio must be positive, got {ratio!r}")
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
    ) -> np.ndarray:
        """The crops the loader draws for samples ``indices`` of ``epoch`` (loader seed
        ``seed``) of a ``width`` x ``height`` image: an int64 array ``[n, 5]`` of
        ``(top, left, height, width, flipped)`` (``flipped`` drawn after the crop when a
        ``RandomHorizontalFlip(flip_p)`` follows, else 0)."""
        return _native.random_resized_crop_params(
            width,
            height,
            list(indices),
            seed=seed,
            epoch=epoch,
            scale=self.scale,
            ratio=self.ratio,
            flip_p=flip_p,
        )


class Resize(Transform):
    """``Resize(size, max_size=None)``: an int (or 1-sequence) resizes the shorter side to it,
    keeping the aspect ratio (then a ``CenterCrop`` must follow, so samples batch); a
    ``(height, width)`` pair resizes to exactly that. ``interpolation``: nearest, bilinear
    (default) or bicubic, as Pillow resizes a PIL image."""

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
    """``CenterCrop(size)``: the centered ``size`` crop (an int is square). Unlike torchvision,
    a crop larger than the image is an error rather than zero padding."""

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
    """``ToTensor()``: uint8 HWC pixels to float32 CHW in [0, 1]."""

    def to_spec(self) -> Spec:
        return {"op": "ToTensor"}


class PILToTensor(Transform):
    """``PILToTensor()``: uint8 HWC pixels to uint8 CHW (use with ``output="uint8"``)."""

    def to_spec(self) -> Spec:
        return {"op": "PILToTensor"}


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
    """``Grayscale(num_output_channels=1)``: only ``num_output_channels=3`` is supported (the
    gray level in all three channels), since every sample is 3-channel; torchvision's default 1
    is refused rather than silently changed."""

    def __init__(self, num_output_channels: int = 1) -> None:
        if not _is_int(num_output_channels):
            raise TypeError(f"Grayscale: num_output_channels must be an int, got {num_output_channels!r}")
        if num_output_channels != 3:
            raise ValueError(
                f"Grayscale: num_output_channels={num_output_channels} is not supported: samples "
                "are 3-channel; use num_output_channels=3"
            )
        self.num_output_channels = 3

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


class Compose:
    """``Compose(transforms)``: the ops in order."""

    def __init__(self, transforms: Sequence[Transform]) -> None:
        if isinstance(transforms, Transform) or not isinstance(transforms, (list, tuple)):
            raise TypeError(
                f"Compose: transforms must be a list of ferroloader transforms, got {transforms!r}"
            )
        for i, t in enumerate(transforms):
            if not isinstance(t, Transform):
                raise TypeError(
                    f"Compose: transforms[{i}] is {t!r}, not a ferroloader transform "
                    "(use ferroloader.transforms.from_torchvision for torchvision ones)"
                )
        self.transforms: List[Transform] = list(transforms)

    def to_spec(self) -> List[Spec]:
        """The ops of the native pipeline spec, in order."""
        return [t.to_spec() for t in self.transforms]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Compose) and self.transforms == other.transforms

    def __hash__(self) -> int:
        return hash(tuple(self.transforms))

    def __len__(self) -> int:
        return len(self.transforms)

    def __getitem__(self, index: int) -> Transform:
        return self.transforms[index]

    def __repr__(self) -> str:
        body = "".join(f"\n    {t!r}" for t in self.transforms)
        return f"Compose({body}\n)"


def pipeline_spec(transform: Any, *, output: str = "float32", decoder: str = "turbo") -> str:
    """The native pipeline spec (JSON) for ``transform`` (a :class:`Compose`, one transform, a
    list of them, or a torchvision ``Compose``), with the output dtype and JPEG decoder."""
    compose = as_compose(transform)
    return json.dumps({"ops": compose.to_spec(), "output": output, "decoder": decoder})


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


def check(transform: Any, *, output: str = "float32", decoder: str = "turbo") -> Dict[str, Any]:
    """Plans the pipeline as the loader would, raising what the loader would raise, and returns
    ``{"shape": (C, H, W), "dtype": ..., "deferred_normalize": (mean, std) or None}``."""
    return _native.check_pipeline(pipeline_spec(transform, output=output, decoder=decoder))


def _is_torchvision(obj: object) -> bool:
    return type(obj).__module__.startswith("torchvision.transforms")


_SUPPORTED = (
    "RandomResizedCrop, Resize, CenterCrop, RandomHorizontalFlip, ToTensor, PILToTensor, "
    "Normalize, ColorJitter, Grayscale(num_output_channels=3), RandomGrayscale, "
    "RandomPosterize, RandomSolarize, RandomEqualize, RandomAutocontrast, RandomAdjustSharpness, "
    "RandomInvert, ConvertImageDtype(torch.float) (and, from transforms.v2, ToImage, "
    "ToDtype(torch.float32, scale=True), ToPureTensor)"
)


def from_torchvision(compose: Any) -> Compose:
    """Converts a torchvision ``Compose`` (``torchvision.transforms`` or ``.v2``), a list of
    torchvision transforms, or a single one. Raises ``ValueError`` naming the first transform
    that has no ferroloader equivalent (or whose arguments are not supported).

    torchvision's reference recipes convert in both forms: v1's ``PILToTensor`` then
    ``ConvertImageDtype(torch.float)`` is ``ToTensor``; v2's ``ToImage()`` first (the image
    becomes a tensor before the crop) is the same pipeline with the conversion where
    ``ToDtype(torch.float32, scale=True)`` stands. On a tensor torchvision resizes with its own
    antialiasing, which can differ from Pillow's (what ferroloader computes) by a level; likewise
    the pixel ops (``ColorJitter``, ``RandomEqualize``, ...) after ``ToImage()`` run torchvision's
    tensor kernels there, while ferroloader always computes them as Pillow does (the v1 PIL path).
    Random draws follow v1's comparisons; v2's differ only for a draw equal to ``p``.
    """
    if isinstance(compose, (list, tuple)):
        items = list(compose)
    elif type(compose).__name__ == "Compose" and hasattr(compose, "transforms"):
        items = list(compose.transforms)
    else:
        items = [compose]
    out: List[Transform] = []
    # A ToImage/PILToTensor met before the geometric ops: the conversion happens after them.
    pending_tensor = False
    for i, t in enumerate(items):
        name = type(t).__name__
        where = f"from_torchvision: transform #{i} {_describe(t)}"
        if isinstance(t, (Transform, Compose)):
            raise TypeError(f"{where} is already a ferroloader transform; pass it directly")
        if not _is_torchvision(t):
            raise ValueError(f"{where} is not a torchvision transform; supported: {_SUPPORTED}")
        if name in ("ToImage", "PILToTensor") and not any(isinstance(o, (ToTensor, PILToTensor)) for o in out):
            pending_tensor = True
            continue
        if pending_tensor and name in ("ToDtype", "ConvertImageDtype"):
            out.append(PILToTensor())
            pending_tensor = False
        try:
            converted = _convert_one(name, t, out)
        except (TypeError, ValueError) as e:
            raise ValueError(f"{where} cannot be converted: {e}") from e
        if converted is None:
            raise ValueError(f"{where} has no ferroloader equivalent; supported: {_SUPPORTED}")
        if converted is not _SKIP:
            if pending_tensor and isinstance(converted, Normalize):
                raise ValueError(
                    f"{where} normalizes a uint8 image tensor: convert it first with "
                    "ToDtype(torch.float32, scale=True)"
                )
            out.append(converted)  # type: ignore[arg-type]
    if pending_tensor:
        out.append(PILToTensor())
    return Compose(out)


def _describe(t: Any) -> str:
    """``repr(t)``, with the arguments torchvision's repr leaves out (ToDtype's dtype)."""
    name = type(t).__name__
    if name in ("ToDtype", "ConvertImageDtype"):
        return f"{name}(dtype={t.dtype}, scale={getattr(t, 'scale', True)})"
    return repr(t)


_SKIP = object()


def _convert_one(name: str, t: Any, done: List[Transform]) -> object:
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
    if name == "ToPureTensor":
        return _SKIP
    if name in ("ToDtype", "ConvertImageDtype"):
        import torch  # only reachable with torchvision installed

        dtype = t.dtype
        scale = getattr(t, "scale", True)  # ConvertImageDtype always scales
        if isinstance(dtype, dict):
            raise ValueError(f"per-type dtypes are not supported: {dtype}")
        after_tensor = bool(done) and isinstance(done[-1], PILToTensor)
        if dtype == torch.float32 and scale and after_tensor:
            done[-1] = ToTensor()
            return _SKIP
        if dtype == torch.uint8 and after_tensor:
            return _SKIP
        raise ValueError(
            f"dtype={dtype}, scale={scale}: only torch.float32 with scale=True, or torch.uint8, "
            "right after ToImage/PILToTensor is supported"
        )
    return None
