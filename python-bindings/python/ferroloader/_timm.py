"""timm's own transforms, as the torchvision transforms that compute the same: what
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

What does not convert raises ``ValueError`` naming the parameter (``interpolation='random'``, a
per-sample choice of resize filter; ``mode='rand'``, one random colour per block; several
blocks), and the converter leaves the op and what follows it to the Python tail.

Must not import timm (the objects are recognised by their class and module names, so the
loader works where timm is not installed), nor ferroloader's transforms, which import this.
"""

from __future__ import annotations

import math
from typing import Any, Optional

__all__ = ["torchvision_equivalent"]


def torchvision_equivalent(t: Any) -> Optional[Any]:
    """The torchvision transform computing what timm's ``t`` computes (the converter takes it
    from there); ``None`` for a timm transform with no equivalent; raises ``ValueError``
    naming a parameter that has none."""
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
