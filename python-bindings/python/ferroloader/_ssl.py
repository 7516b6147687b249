"""Self-supervised repositories' own PIL augmentations, as what computes the same, for the
converter: DINO's ``utils.GaussianBlur`` and ``utils.Solarization`` (facebookresearch/dino,
copied verbatim by iBOT and many others) and MoCo's ``moco.loader.GaussianBlur`` (v2 and v3,
after SimCLR) and ``moco.loader.Solarize`` (v3, after BYOL). Recognised by their ``__call__``'s
bytecode, which must be exactly the repository's (compiled here from its source, so the same
interpreter spells both) but for the names of its local variables and of the class (solo-learn's
``GaussianBlur`` and ``Solarization`` are MoCo's so renamed), with ``random``, ``ImageFilter``
and ``ImageOps`` the modules those repositories import:

- DINO's ``GaussianBlur(p, radius_min=0.1, radius_max=2.0)``: ``random.random() <= p``, then
  ``img.filter(ImageFilter.GaussianBlur(radius=random.uniform(radius_min, radius_max)))``. That
  is timm's ``AugmentOp("GaussianBlurRand", prob=p, magnitude=10 * radius_max / 2)``, whose
  skip coin is ``random.random() > prob`` and whose radius is ``uniform(0.1, 2.0 * factor)``:
  converted so where ``radius_min`` is 0.1 and ``radius_max`` within ``(0, 2]``.
- MoCo's ``GaussianBlur(sigma=[0.1, 2.0])``: the same blur, always (timm's op with ``prob=1``;
  MoCo wraps it in ``RandomApply``, which converts as it is); ``sigma[0]`` must be 0.1.
- DINO's ``Solarization(p)``: ``ImageOps.solarize(img)`` (threshold 128) when
  ``random.random() < p``: torchvision's ``RandomSolarize(128, p)``; MoCo's ``Solarize()``:
  the same with ``p = 1``.

Must not call the objects; a class that differs in any step (another condition, another
radius draw) stays a Python tail.
"""

from __future__ import annotations

import random
import types
from typing import Any, Dict, List, Optional

from ferroloader._bytecode import Step, jump_steps

# The repositories' sources, verbatim but for the docstrings; the classes renamed by origin.
_SOURCES = '''
class DinoGaussianBlur(object):
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


class DinoSolarization(object):
    def __init__(self, p):
        self.p = p

    def __call__(self, img):
        if random.random() < self.p:
            return ImageOps.solarize(img)
        else:
            return img


class MocoGaussianBlur(object):
    def __init__(self, sigma=[.1, 2.]):
        self.sigma = sigma

    def __call__(self, x):
        sigma = random.uniform(self.sigma[0], self.sigma[1])
        x = x.filter(ImageFilter.GaussianBlur(radius=sigma))
        return x


class MocoSolarize(object):
    def __call__(self, x):
        return ImageOps.solarize(x)
'''

#: The class name each reference goes by in its repository (copies may rename it: the code
#: is what is compared).
_NAMES = {
    "DinoGaussianBlur": "GaussianBlur",
    "DinoSolarization": "Solarization",
    "MocoGaussianBlur": "GaussianBlur",
    "MocoSolarize": "Solarize",
}

_REFERENCE: Optional[Dict[str, List[Step]]] = None


def _reference() -> Dict[str, List[Step]]:
    """The steps of each reference ``__call__``, compiled on first use."""
    global _REFERENCE
    if _REFERENCE is None:
        namespace: Dict[str, Any] = {}
        exec(compile(_SOURCES, "<ssl augmentations>", "exec"), namespace)  # noqa: S102 (our own text)
        _REFERENCE = {name: _renamed(jump_steps(namespace[name].__call__.__code__)) for name in _NAMES}
    return _REFERENCE


def _renamed(found: List[Step]) -> List[Step]:
    """``found`` with each local variable named by the order it first appears in, so that a
    copy renaming them (solo-learn's ``img`` for MoCo's ``x``) reads as the same code."""
    names: Dict[str, int] = {}

    def local(name: Any) -> Any:
        if isinstance(name, tuple):  # 3.13's LOAD_FAST_LOAD_FAST and its kin
            return tuple(local(n) for n in name)
        return names.setdefault(name, len(names))

    return [(op, local(arg) if "_FAST" in op else arg) for op, arg in found]


def _is_reference(t: Any, reference: str) -> bool:
    """Whether ``t``'s class computes what the repository's class ``reference`` stands for
    computes: its ``__call__`` the same steps, but for the local variables' names."""
    cls = type(t)
    if cls.__module__.split(".")[0] in ("torchvision", "timm", "ferroloader"):
        return False
    call = getattr(cls, "__call__", None)
    if not isinstance(call, types.FunctionType):
        return False
    from PIL import ImageFilter, ImageOps

    modules = {"random": random, "ImageFilter": ImageFilter, "ImageOps": ImageOps}
    names = call.__code__.co_names
    if any(call.__globals__.get(k) is not m for k, m in modules.items() if k in names):
        return False
    return _renamed(jump_steps(call.__code__)) == _reference()[reference]


def _probability(p: Any) -> Optional[float]:
    return float(p) if isinstance(p, (int, float)) and 0 <= p <= 1 else None


def _blur(prob: float, radius_min: Any, radius_max: Any) -> Optional[Any]:
    """timm's ``GaussianBlurRand`` op drawing its radius from ``uniform(0.1, radius_max)``,
    applied with ``prob``; ``None`` for other radii or without timm."""
    if radius_min != 0.1 or not isinstance(radius_max, (int, float)) or not 0 < radius_max <= 2.0:
        return None
    try:
        from timm.data.auto_augment import AugmentOp, AutoAugment
    except ImportError:
        return None
    op = AugmentOp("GaussianBlurRand", prob=prob, magnitude=10 * float(radius_max) / 2)  # type: ignore[no-untyped-call]
    return AutoAugment([[op]])  # type: ignore[no-untyped-call]


def equivalent(t: Any) -> Optional[Any]:
    """What computes what ``t`` (one of the repositories' classes above) computes: a timm
    ``AutoAugment`` of one ``GaussianBlurRand`` op, or torchvision's ``RandomSolarize``;
    ``None`` for anything else."""
    import torchvision.transforms as tv  # type: ignore[import-untyped]

    if _is_reference(t, "DinoGaussianBlur"):
        p = _probability(getattr(t, "prob", None))
        return None if p is None else _blur(p, getattr(t, "radius_min", None), getattr(t, "radius_max", None))
    if _is_reference(t, "MocoGaussianBlur"):
        sigma = getattr(t, "sigma", None)
        if not isinstance(sigma, (list, tuple)) or len(sigma) != 2:
            return None
        return _blur(1.0, sigma[0], sigma[1])
    if _is_reference(t, "DinoSolarization"):
        p = _probability(getattr(t, "p", None))
        return None if p is None else tv.RandomSolarize(128, p=p)
    if _is_reference(t, "MocoSolarize"):
        return tv.RandomSolarize(128, p=1.0)
    return None
