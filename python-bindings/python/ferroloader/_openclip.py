"""open_clip's own transform classes (``open_clip.transform``: what ``image_transform`` and
``create_model_and_transforms`` build) as what computes the same, for the converter: the timm
classes they were copied from (open_clip depends on timm), torchvision's, or
:data:`CONVERTS_TO_RGB`. Must not call them: an object whose class is not open_clip's own (a
subclass elsewhere), or whose parameters compute something else, has no equivalent and stays a
Python tail.
"""

from __future__ import annotations

from typing import Any, Optional

_MODULE = "open_clip.transform"


class _ConvertsToRgb:
    """``MaybeConvertMode("RGB")``: ``image.convert("RGB")`` on a PIL image, nothing on a
    tensor or an array."""

    def __repr__(self) -> str:
        return "MaybeConvertMode()"


CONVERTS_TO_RGB = _ConvertsToRgb()


def _is_open_clip(t: object) -> bool:
    return type(t).__module__ == _MODULE


def equivalent(t: Any) -> Optional[Any]:
    """What computes what open_clip's ``t`` computes, or ``None`` (also for anything but
    open_clip's own classes: a subclass defined elsewhere has another module)."""
    if not _is_open_clip(t):
        return None
    name = type(t).__name__
    if name == "MaybeConvertMode":
        return CONVERTS_TO_RGB if t.mode == "RGB" else None
    if name == "MaybeToTensor":
        from timm.data.transforms import MaybeToTensor

        return MaybeToTensor()
    if name == "ResizeKeepRatio":
        if t.random_aspect_prob > 0:
            return None  # open_clip draws the aspect uniformly, timm log-uniformly
        from timm.data.transforms import ResizeKeepRatio

        mode = t.interpolation
        return ResizeKeepRatio(  # type: ignore[no-untyped-call]
            t.size,
            longest=t.longest,
            interpolation=getattr(mode, "value", mode),  # timm takes the mode's name
            random_scale_prob=t.random_scale_prob,
            random_scale_range=t.random_scale_range,
        )
    if name == "CenterCropOrPad":
        from timm.data.transforms import CenterCropOrPad

        return CenterCropOrPad(list(t.size), fill=t.fill)
    import torchvision.transforms as tv  # type: ignore[import-untyped]

    if name == "color_jitter":
        return tv.RandomApply([t.transf], p=t.p)  # `random.random() < p`: the same Bernoulli(p)
    if name == "gray_scale":
        return tv.RandomGrayscale(p=t.p)
    return None
