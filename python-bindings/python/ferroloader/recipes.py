"""torchvision's reference classification presets, and the user's own transform, for the
head-to-head runs (``ferroloader compare``, ``scripts/bench_vs_torch.py``).

:func:`train_preset` and :func:`eval_preset` build the transforms that torchvision's
``references/classification/presets.py`` builds (``ClassificationPresetTrain`` and
``ClassificationPresetEval``), as real torchvision ``Compose`` objects: the v1 form is the
reference's PIL backend (``PILToTensor`` after the PIL ops, then
``ConvertImageDtype(torch.float)``); the v2 form is its ``tv_tensor`` backend with ``use_v2``
(``ToImage`` first, ``ToDtype(torch.float32, scale=True)``, and ``ToPureTensor`` last).
:func:`recipe` names the training presets the harness offers (:data:`RECIPES`);
:func:`load_transform` takes the user's own ``Compose`` from ``FILE.py:NAME`` (or, with
``views=True``, an object returning several views of each image, as self-supervised recipes
write them); :class:`RepeatedViews` makes several views of one transform.

Needs torchvision (the ``cli`` extra), imported only when a transform is built, so the command
line's ``--help`` works without it. The lean core package must not import this module. It
must not run a transform or print; refusing a pipeline is the loader's business, not this
module's.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple, Union

if TYPE_CHECKING:
    from ferroloader.loader import Output

__all__ = [
    "AUTO_AUGMENT",
    "RECIPES",
    "RepeatedViews",
    "describe",
    "eval_preset",
    "is_torchvision_compose",
    "load_object",
    "load_transform",
    "mixup_cutmix",
    "output_of",
    "recipe",
    "reference_collate",
    "train_preset",
    "view_transforms",
]

#: ImageNet's channel means and standard deviations, the reference presets' defaults.
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)

#: The ``auto_augment`` policies of :func:`train_preset` beyond ``AutoAugmentPolicy``'s values
#: (``imagenet``, ``cifar10``, ``svhn``), as the reference's ``--auto-augment`` spells them.
AUTO_AUGMENT = ("ta_wide", "ra", "augmix")

#: The random-erasing probability a ``+re`` recipe adds: the reference's ``--random-erase``
#: in torchvision's published training recipes (ResNet, ViT, ConvNeXt, ...).
RECIPE_RANDOM_ERASE = 0.25

_RECIPE_BASES = ("basic", "ta_wide", "ra", "augmix", "imagenet")
#: The names :func:`recipe` accepts: an augmentation policy (``basic``: none; ``imagenet``:
#: ``AutoAugment(IMAGENET)``), optionally with ``+re`` (``RandomErasing(p=0.25)`` at the end).
RECIPES = tuple(n for base in _RECIPE_BASES for n in (base, f"{base}+re"))

Interpolation = Union[str, Any]
"""An interpolation: its name (``"bilinear"``, ``"bicubic"``, ...) or an ``InterpolationMode``."""


def _transforms(use_v2: bool) -> Any:
    """``torchvision.transforms`` or ``.v2``, imported when a transform is built (torchvision
    ships no type information)."""
    return importlib.import_module(
        "torchvision.transforms.v2" if use_v2 else "torchvision.transforms"
    )


def _interpolation(value: Interpolation) -> Any:
    mode = importlib.import_module("torchvision.transforms").InterpolationMode
    try:
        return mode(value.lower() if isinstance(value, str) else value)
    except ValueError:
        names = ", ".join(m.value for m in mode)
        raise ValueError(f"interpolation: expected one of {names}, got {value!r}") from None


def _auto_augment(T: Any, policy: str, interpolation: Any, ra_magnitude: int,
                  augmix_severity: int) -> Any:
    """The reference's augmentation for ``--auto-augment policy``."""
    if policy == "ra":
        return T.RandAugment(interpolation=interpolation, magnitude=ra_magnitude)
    if policy == "ta_wide":
        return T.TrivialAugmentWide(interpolation=interpolation)
    if policy == "augmix":
        return T.AugMix(interpolation=interpolation, severity=augmix_severity)
    try:
        named = T.AutoAugmentPolicy(policy)
    except ValueError:
        known = [*AUTO_AUGMENT, *(p.value for p in T.AutoAugmentPolicy)]
        raise ValueError(
            f"auto_augment: expected None or one of {', '.join(known)}, got {policy!r}"
        ) from None
    return T.AutoAugment(policy=named, interpolation=interpolation)


def _to_float(T: Any, use_v2: bool) -> Any:
    import torch

    return T.ToDtype(torch.float32, scale=True) if use_v2 else T.ConvertImageDtype(torch.float)


def train_preset(
    crop_size: int = 224,
    auto_augment: Optional[str] = None,
    random_erase: float = 0.0,
    interpolation: Interpolation = "bilinear",
    hflip_prob: float = 0.5,
    ra_magnitude: int = 9,
    augmix_severity: int = 3,
    use_v2: bool = False,
    mean: Sequence[float] = IMAGENET_MEAN,
    std: Sequence[float] = IMAGENET_STD,
) -> Any:
    """torchvision's reference training transform (``ClassificationPresetTrain``).

    ``RandomResizedCrop(crop_size)``, ``RandomHorizontalFlip(hflip_prob)`` when
    ``hflip_prob > 0``, the ``auto_augment`` policy when given (``"ta_wide"``:
    ``TrivialAugmentWide``; ``"ra"``: ``RandAugment(magnitude=ra_magnitude)``; ``"augmix"``:
    ``AugMix(severity=augmix_severity)``; an ``AutoAugmentPolicy`` value such as
    ``"imagenet"``: ``AutoAugment``), each with ``interpolation``; the conversion to float,
    ``Normalize(mean, std)``, and ``RandomErasing(random_erase)`` when ``random_erase > 0``.
    ``use_v2``: from ``torchvision.transforms.v2``, ``ToImage()`` first and ``ToPureTensor()``
    last, as the reference's ``tv_tensor`` backend builds it.
    """
    T = _transforms(use_v2)
    mode = _interpolation(interpolation)
    ops: List[Any] = [T.ToImage()] if use_v2 else []
    ops.append(T.RandomResizedCrop(crop_size, interpolation=mode, antialias=True))
    if hflip_prob > 0:
        ops.append(T.RandomHorizontalFlip(hflip_prob))
    if auto_augment is not None:
        ops.append(_auto_augment(T, auto_augment, mode, ra_magnitude, augmix_severity))
    if not use_v2:
        ops.append(T.PILToTensor())
    ops += [_to_float(T, use_v2), T.Normalize(mean=list(mean), std=list(std))]
    if random_erase > 0:
        ops.append(T.RandomErasing(p=random_erase))
    if use_v2:
        ops.append(T.ToPureTensor())
    return T.Compose(ops)


def eval_preset(
    crop_size: int = 224,
    resize_size: int = 256,
    interpolation: Interpolation = "bilinear",
    use_v2: bool = False,
    mean: Sequence[float] = IMAGENET_MEAN,
    std: Sequence[float] = IMAGENET_STD,
) -> Any:
    """torchvision's reference evaluation transform (``ClassificationPresetEval``):
    ``Resize(resize_size, interpolation)``, ``CenterCrop(crop_size)``, the conversion to float
    and ``Normalize(mean, std)``; ``use_v2`` as in :func:`train_preset`. The published weights
    use ``resize_size`` 256 or 232 (the newer recipes), bilinear or bicubic."""
    T = _transforms(use_v2)
    ops: List[Any] = [T.ToImage()] if use_v2 else []
    ops += [
        T.Resize(resize_size, interpolation=_interpolation(interpolation), antialias=True),
        T.CenterCrop(crop_size),
    ]
    if not use_v2:
        ops.append(T.PILToTensor())
    ops += [_to_float(T, use_v2), T.Normalize(mean=list(mean), std=list(std))]
    if use_v2:
        ops.append(T.ToPureTensor())
    return T.Compose(ops)


def recipe(name: str, *, crop_size: int = 224, use_v2: bool = False) -> Any:
    """The training preset :data:`RECIPES` names: ``"basic"`` (crop, flip, normalize),
    ``"ta_wide"``, ``"ra"``, ``"augmix"`` or ``"imagenet"`` (the ``auto_augment`` policy),
    each optionally ``"+re"`` (random erasing with p=0.25), e.g. ``"ta_wide+re"``."""
    if name not in RECIPES:
        raise ValueError(f"recipe: expected one of {', '.join(RECIPES)}, got {name!r}")
    base, _, erase = name.partition("+")
    return train_preset(
        crop_size,
        auto_augment=None if base == "basic" else base,
        random_erase=RECIPE_RANDOM_ERASE if erase else 0.0,
        use_v2=use_v2,
    )


# -- the user's own transform ------------------------------------------------------------------


def is_torchvision_compose(obj: object) -> bool:
    """Whether ``obj`` is a ``Compose`` of ``torchvision.transforms`` or ``.v2``."""
    cls = type(obj)
    return cls.__name__ == "Compose" and cls.__module__.startswith("torchvision.transforms")


def _compose_in(obj: object) -> Optional[Any]:
    """``obj`` when it is a torchvision ``Compose``; the ``Compose`` it holds as
    ``.transforms`` when it is a preset object like the reference's
    ``ClassificationPresetTrain``; a ``Compose`` of a pretrained model's preset
    (``ImageClassification``); else None."""
    if is_torchvision_compose(obj):
        return obj
    if type(obj).__name__ == "ImageClassification" and type(obj).__module__.startswith("torchvision.transforms"):
        import torchvision.transforms as tv  # type: ignore[import-untyped]

        return tv.Compose([obj])  # a pretrained model's preset (weights.transforms()): a whole pipeline
    inner = getattr(obj, "transforms", None)
    if is_torchvision_compose(inner):
        return inner
    return None


def _split(spec: str) -> Tuple[Path, str]:
    path, sep, name = spec.rpartition(":")
    if not sep or not path or not name.isidentifier():
        raise ValueError(f"expected FILE.py:NAME (NAME a Compose in FILE.py), got {spec!r}")
    return Path(path), name


def _import(path: Path) -> Any:
    """Imports ``path`` as a module registered under a name of its own, so that classes
    defined there pickle into DataLoader worker processes by reference."""
    stem = re.sub(r"\W", "_", path.stem)
    module_name = f"ferroloader_user_transform_{stem}_{abs(hash(str(path.resolve())))}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"{path}: cannot be imported as a Python module (is it a .py file?)")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as e:
        del sys.modules[module_name]
        raise ImportError(f"{path}: importing it failed: {type(e).__name__}: {e}") from e
    return module


def _needs_arguments(fn: Any) -> List[str]:
    """The parameters ``fn`` cannot be called without (empty when it is not introspectable)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return []
    return [
        p.name for p in params
        if p.default is inspect.Parameter.empty
        and p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    ]


def load_object(spec: str) -> Any:
    """What ``"FILE.py:NAME"`` names, as it is: FILE imported (its classes pickle by
    reference) and NAME taken from it. Raises ``FileNotFoundError``, ``ImportError`` and
    ``ValueError`` as :func:`load_transform` does."""
    path, name = _split(spec)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file (from {spec!r})")
    module = _import(path)
    if not hasattr(module, name):
        defined = sorted(
            n for n, v in vars(module).items()
            if not n.startswith("_")
            and (_compose_in(v) is not None
                 or (inspect.isfunction(v) and v.__module__ == module.__name__))
        )
        hint = f"; it defines {', '.join(defined)}" if defined else ""
        raise ValueError(f"{path}: defines no {name!r}{hint}")
    return getattr(module, name)


def load_transform(spec: str, *, views: bool = False) -> Any:
    """The torchvision ``Compose`` named by ``spec``, ``"FILE.py:NAME"``: FILE is imported and
    NAME taken from it, a ``Compose`` (v1 or v2), a preset object holding one as
    ``.transforms`` (like the reference's ``ClassificationPresetTrain``), or a function or
    class called with no arguments that returns one of those. With ``views``, also an object
    that returns several views of each image (:func:`view_transforms`: MoCo's
    ``TwoCropsTransform``, DINO's multi-crop), or a function of no arguments returning one,
    given back as it is.

    Raises ``FileNotFoundError`` for a missing file, ``ImportError`` when importing it fails,
    ``ValueError`` for a malformed spec or a NAME the file does not define, and ``TypeError``
    when NAME is not a torchvision ``Compose`` nor returns one (nor, with ``views``, a views
    object).
    """
    path, name = _split(spec)
    obj = load_object(spec)
    compose = _compose_in(obj)
    if compose is not None:
        return compose
    what = f"{path}:{name}"
    found = view_transforms(obj)
    if found is not None:
        if views:
            return obj
        raise TypeError(
            f"{what} returns {len(found)} views of each image, not one tensor: give one "
            "view's Compose here"
        )
    wanted = (
        "a Compose, an object returning views of the image (each one of its transforms "
        "applied to the image itself), or a function of no arguments returning either"
        if views
        else "a Compose, or a function of no arguments that returns one"
    )
    if type(obj).__module__.split(".")[0] == "ferroloader":
        raise TypeError(
            f"{what} is a ferroloader transform: the head-to-head runs torchvision's Compose "
            "on both sides, so give that"
        )
    if not callable(obj):
        raise TypeError(
            f"{what} is a {type(obj).__name__}, not a torchvision Compose (nor a function "
            "returning one)"
        )
    if type(obj).__module__.startswith("torchvision.transforms"):
        raise TypeError(
            f"{what} is a single {type(obj).__name__}, not a Compose: wrap it in a Compose "
            "that ends with the conversion to a tensor"
        )
    missing = _needs_arguments(obj)
    if missing:
        raise TypeError(f"{what} needs arguments ({', '.join(missing)}): give {wanted}")
    made = obj()
    compose = _compose_in(made)
    if compose is not None:
        return compose
    if views and view_transforms(made) is not None:
        return made
    kind = "a torchvision Compose nor a views object" if views else "a torchvision Compose"
    raise TypeError(f"{what}() returned a {type(made).__name__}, not {kind}")


class RepeatedViews:
    """``n`` views of one transform, each one call of it: MoCo's ``TwoCropsTransform``
    (``n=2``) and SimCLR's view generator. What ``compare --views N`` and
    ``bench_vs_torch.py --views N`` hand both pipelines; defined here, in an importable
    module, so DataLoader's worker processes unpickle it."""

    def __init__(self, transform: Any, n: int) -> None:
        if n < 1:
            raise ValueError(f"n: expected at least 1 view, got {n}")
        self.transform = transform
        self.n = n

    def __call__(self, x: Any) -> List[Any]:
        return [self.transform(x) for _ in range(self.n)]

    def __repr__(self) -> str:
        return f"RepeatedViews({self.transform!r}, n={self.n})"


def view_transforms(obj: Any) -> Optional[List[Any]]:
    """The transform of each view ``obj`` returns, in order, when it returns several views
    of the image it is given, each one of its own transforms applied to that image (the form
    the loader runs view by view: ``ferroloader._views.trace_views``, traced here on a
    stand-in image); ``None`` for any other object (a ``Compose`` among them)."""
    if is_torchvision_compose(obj) or not callable(obj):
        return None
    from ferroloader._views import trace_views

    found = trace_views(obj, object())
    return None if found is None else list(found.transforms)


# -- what a transform yields and how to name it --------------------------------------------------


def output_of(compose: Any) -> "Output":
    """The loader ``output`` the torchvision ``compose`` yields: ``"float32"`` when it
    converts to float (``ToTensor``, ``ConvertImageDtype``/``ToDtype`` to a float type),
    ``"uint8"`` when it stops at ``PILToTensor``/``ToImage``. For an object returning views
    (:func:`view_transforms`), what its views yield: ``ValueError`` when they differ."""
    import torch

    views = view_transforms(compose)
    if views is not None:
        outputs = [output_of(v) for v in views]
        if len(set(outputs)) > 1:
            each = ", ".join(f"view{k} {o}" for k, o in enumerate(outputs))
            raise ValueError(f"its views yield different dtypes ({each}): one output is compared")
        return outputs[0]
    yields: "Output" = "float32"
    for t in _flat(compose):
        name = type(t).__name__
        if name == "ToTensor":
            yields = "float32"
        elif name in ("PILToTensor", "ToImage"):
            yields = "uint8"
        elif name in ("ConvertImageDtype", "ToDtype"):
            dtype = t.dtype
            if isinstance(dtype, dict):  # v2's per-type dtypes: the image's, or the default
                dtype = next(iter(dtype.values()), None)
            if isinstance(dtype, torch.dtype):
                yields = "float32" if dtype.is_floating_point else "uint8"
    return yields


def describe(compose: Any) -> str:
    """The transform's ops, one short form each, for reports and headers: ``ToImage,
    RandomResizedCrop(224, bilinear), RandomHorizontalFlip(0.5), TrivialAugmentWide, ...``.
    For an object returning views, each distinct view transform's, with the views it makes:
    ``10 views: view0: ...; view1: ...; view2-9: ...``."""
    views = view_transforms(compose)
    if views is not None:
        return _describe_views(views)
    parts = []
    for t in _flat(compose):
        name = type(t).__name__
        args: List[str] = []
        size = getattr(t, "size", None)
        if name in ("RandomResizedCrop", "Resize", "CenterCrop") and size is not None:
            sizes = list(size) if isinstance(size, (list, tuple)) else [size]
            args.append(str(sizes[0]) if len(set(sizes)) == 1 else "x".join(map(str, sizes)))
        mode = getattr(t, "interpolation", None)
        if name in ("RandomResizedCrop", "Resize") and mode is not None:
            args.append(str(getattr(mode, "value", mode)))
        if name in ("RandomHorizontalFlip", "RandomErasing", "TimmRandomErasing"):
            # timm's RandomErasing names its probability `probability`.
            p = getattr(t, "p", getattr(t, "probability", None))
            if p is not None:
                args.append(f"{float(p):g}")
        parts.append(f"{name}({', '.join(args)})" if args else name)
    return ", ".join(parts)


def _flat(compose: Any) -> List[Any]:
    """The ops of ``compose`` in order, those of a ``Compose`` nested in it (DINO's
    ``normalize``) in its place."""
    ops: List[Any] = []
    for t in getattr(compose, "transforms", [compose]):
        ops.extend(_flat(t) if is_torchvision_compose(t) else [t])
    return ops


def _describe_views(views: Sequence[Any]) -> str:
    made: Dict[int, List[int]] = {}
    for k, v in enumerate(views):
        made.setdefault(id(v), []).append(k)
    parts = []
    for ks in made.values():
        # A transform making a run of views (DINO's local crops): "view2-9", else each named.
        run = ks == list(range(ks[0], ks[-1] + 1)) and len(ks) > 1
        which = f"view{ks[0]}-{ks[-1]}" if run else ", ".join(f"view{k}" for k in ks)
        inner = views[ks[0]]
        parts.append(f"{which}: {describe(_compose_in(inner) or inner)}")
    return f"{len(views)} views: " + "; ".join(parts)


def mixup_cutmix(num_classes: int, mixup_alpha: float = 0.2, cutmix_alpha: float = 1.0) -> Any:
    """What the reference train.py builds for ``--mixup-alpha 0.2 --cutmix-alpha 1.0`` (its
    published recipes' values): ``v2.RandomChoice([MixUp(0.2), CutMix(1.0)])``."""
    import torchvision.transforms.v2 as v2  # type: ignore[import-untyped]

    return v2.RandomChoice(
        [v2.MixUp(alpha=mixup_alpha, num_classes=num_classes), v2.CutMix(alpha=cutmix_alpha, num_classes=num_classes)]
    )


def reference_collate(mixing: Any) -> Any:
    """The ``collate_fn`` the reference train.py writes around ``mixing``:
    ``mixing(*default_collate(batch))`` (the loader reads this form and mixes natively)."""
    from torch.utils.data import default_collate

    def collate_fn(batch: Any) -> Any:
        return mixing(*default_collate(batch))

    return collate_fn
