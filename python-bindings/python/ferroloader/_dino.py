"""DINO's own PIL augmentations (``utils.GaussianBlur`` and ``utils.Solarization`` of
facebookresearch/dino, copied verbatim by iBOT and many self-supervised repositories) as what
computes the same, for the converter: recognised by their ``__call__``'s bytecode, which must
be exactly DINO's (compiled here from DINO's source, so the same interpreter spells both), with
``random``, ``ImageFilter`` and ``ImageOps`` the modules DINO imports.

- ``GaussianBlur(p, radius_min=0.1, radius_max=2.0)``: ``random.random() <= p``, then
  ``img.filter(ImageFilter.GaussianBlur(radius=random.uniform(radius_min, radius_max)))``. That
  is timm's ``AugmentOp("GaussianBlurRand", prob=p, magnitude=10 * radius_max / 2)``, whose
  skip coin is ``random.random() > prob`` and whose radius is ``uniform(0.1, 2.0 * factor)``:
  converted so where ``radius_min`` is 0.1 and ``radius_max`` within ``(0, 2]``.
- ``Solarization(p)``: ``ImageOps.solarize(img)`` (threshold 128) when ``random.random() < p``:
  torchvision's ``RandomSolarize(128, p)``.

Must not call the objects; a class that differs in any step (another condition, another
radius draw) stays a Python tail.
"""

from __future__ import annotations

import random
import types
from typing import Any, Dict, List, Optional

from ferroloader._bytecode import Step, jump_steps

# DINO's source (utils.py), verbatim but for the docstrings.
_DINO_SOURCE = '''
class GaussianBlur(object):
    def __init__(self, p=0.5, radius_min=0.1, radius_max=2.):
        self.prob = p
        self.radius_min = radius_min
        self.radius_max = radius_max

    def __call__(self, img):
        do_it = random.random() <= self.prob
        if not do_it:
            return img

        return img.filter(
            ImageFilter.GaussianBlur(
                radius=random.uniform(self.radius_min, self.radius_max)
            )
        )


class Solarization(object):
    def __init__(self, p):
        self.p = p

    def __call__(self, img):
        if random.random() < self.p:
            return ImageOps.solarize(img)
        else:
            return img
'''

_REFERENCE: Optional[Dict[str, List[Step]]] = None


def _reference() -> Dict[str, List[Step]]:
    """The steps of DINO's two ``__call__``s, compiled on first use."""
    global _REFERENCE
    if _REFERENCE is None:
        namespace: Dict[str, Any] = {}
        exec(compile(_DINO_SOURCE, "<dino utils>", "exec"), namespace)  # noqa: S102 (our own text)
        _REFERENCE = {
            name: jump_steps(namespace[name].__call__.__code__) for name in ("GaussianBlur", "Solarization")
        }
    return _REFERENCE


def _is_dinos(t: Any, name: str) -> bool:
    cls = type(t)
    if cls.__name__ != name or cls.__module__.split(".")[0] in ("torchvision", "timm", "ferroloader"):
        return False
    call = getattr(cls, "__call__", None)
    if not isinstance(call, types.FunctionType):
        return False
    from PIL import ImageFilter, ImageOps

    modules = {"random": random, "ImageFilter": ImageFilter, "ImageOps": ImageOps}
    names = call.__code__.co_names
    if any(call.__globals__.get(k) is not m for k, m in modules.items() if k in names):
        return False
    return jump_steps(call.__code__) == _reference()[name]


def equivalent(t: Any) -> Optional[Any]:
    """What computes what DINO's ``t`` computes (a timm ``AutoAugment`` of one
    ``GaussianBlurRand`` op; torchvision's ``RandomSolarize``), or ``None``."""
    if _is_dinos(t, "Solarization"):
        p = getattr(t, "p", None)
        if isinstance(p, (int, float)) and 0 <= p <= 1:
            import torchvision.transforms as tv  # type: ignore[import-untyped]

            return tv.RandomSolarize(128, p=float(p))
        return None
    if _is_dinos(t, "GaussianBlur"):
        p, low, high = (getattr(t, k, None) for k in ("prob", "radius_min", "radius_max"))
        if not (isinstance(p, (int, float)) and isinstance(high, (int, float)) and low == 0.1):
            return None
        if not (0 < high <= 2.0 and 0 <= p <= 1):
            return None
        try:
            from timm.data.auto_augment import AugmentOp, AutoAugment
        except ImportError:
            return None
        op = AugmentOp("GaussianBlurRand", prob=float(p), magnitude=10 * float(high) / 2)  # type: ignore[no-untyped-call]
        return AutoAugment([[op]])  # type: ignore[no-untyped-call]
    return None
