"""A training script's own ``Dataset`` class, read natively when its ``__getitem__`` does what
torchvision's ``ImageFolder`` does: open one image with Pillow (or ``torchvision.io``), convert
it to RGB (or L), apply a transform, and return the result beside values that do not come from
the pixels (a label from a CSV row, a path, an index).

The class is the user's: no name says what ``__getitem__`` does. :func:`trace_getitem` learns it
by calling it on a shallow copy of the dataset in which nothing is decoded: ``Image.open``
(``PIL.Image.open``, on a path, on the builtin ``open``'s file, on a ``BytesIO``) and
torchvision's ``default_loader``/``pil_loader`` return stand-ins that record the file,
``.convert(mode)`` and ``ImageOps.exif_transpose`` record what they would do (so do
``torchvision.io``'s reads, :data:`IO_NAMES`: a uint8 tensor of the file, whose transform then
runs after ``PILToTensor``, each file checked to decode as the native RGB decode does:
:func:`_decodes_as_rgb`), and each transform the code holds (an attribute, a module-level
name, a closure's) records being applied to that image instead of running (applied to anything
else, a label say, it runs). An ``import`` inside the traced code gets the stand-in modules. The
functions ``__getitem__`` reaches (its class's methods, ``super()``'s included, its module's
helper functions, a ``loader=`` function) are re-made with the stand-ins in their globals,
never the module's own: nothing is patched where another thread could see it. When the sample
returned holds exactly one transform applied to the recorded image, and nothing else made from
the image, and two calls under two seeds agree, the dataset is read natively
(:class:`TracedItems`): a worker asks the traced ``__getitem__`` for each sample's file and the
rest of its sample (cheap: nothing is decoded), decodes and transforms the image natively, and
the consumer puts the image back where ``__getitem__`` returned it (:class:`Layout`), as
DataLoader would have collated it. The same re-making with real, timed reads
(:func:`reading_copy`, a :class:`Reads` of the profiler's) splits such a dataset's
``__getitem__`` into read and decode when ``fl.torch.profile`` times DataLoader's run of it.

A transformers image processor called on the image stands for the torchvision pipeline it is
(:class:`_HeldProcessor`, ``ferroloader._imageprocessor``).

Anything else done with the image (its ``.size``, a crop by a box, ``np.array(img)``, another
mode, a second image, a read by OpenCV, a random target) makes the trace fail with what it saw,
and the dataset runs in Python as DataLoader runs it, that reason in the loader's warning.

What this module must not do: decode an image in a trace, run a transform on the traced image,
or change the user's dataset or any module's globals.
"""

from __future__ import annotations

import bisect
import builtins
import copy
import dis
import functools
import io
import os
import sys
import threading
import time
import types
from typing import Any, Callable, Dict, List, NamedTuple, NoReturn, Optional, Sequence, Tuple, Union

import numpy as np

from ferroloader._imageprocessor import is_image_processor, processor_transform

__all__ = [
    "GIL_BUDGET_S",
    "IO_NAMES",
    "Layout",
    "LiveGlobals",
    "ModuleWith",
    "Opened",
    "Reads",
    "TracedItems",
    "from_library",
    "global_names",
    "is_stand_in",
    "item_name",
    "nested_codes",
    "remade_function",
    "steps_first",
    "loader_opens",
    "reading_copy",
    "sets_up_workers",
    "trace_getitem",
]

#: Top-level packages whose functions are not re-run with the stand-ins: the libraries' code
#: reaches the image only through what the dataset holds (a ``loader``, a transform).
_LIBRARIES = frozenset(
    {"torch", "torchvision", "PIL", "numpy", "pandas", "timm", "datasets", "ferroloader",
     "transformers", "lightning", "pytorch_lightning", "builtins", "io", "os", "pathlib", "typing",
     "abc", "collections"}
)

#: How deep the stand-ins follow helper functions calling helper functions.
_DEPTH = 4

_trace = threading.local()


class Untraceable(BaseException):
    """What the traced code did that the native loader cannot do for it. A ``BaseException``:
    a user's ``except Exception`` around a read must not turn it into another path."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _refuse(reason: str) -> NoReturn:
    # Kept per thread as well: code that swallows even a BaseException still fails the trace.
    _trace.refused = reason
    raise Untraceable(reason)


Data = Union[str, bytes]


class _Stand:
    """A stand-in for something made from the image file: records where its data is."""

    __slots__ = ("source",)

    def __init__(self, source: Data) -> None:
        self.source = source

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    def close(self) -> None:
        return None

    def __repr__(self) -> str:
        return f"<traced {type(self).__name__.strip('_').lower()} of {_where(self.source)}>"


class _File(_Stand):
    """The builtin ``open(path, "rb")`` in the traced code: handed to ``Image.open``, or read
    whole (its bytes, then opened from a ``BytesIO``, are what the loader decodes)."""

    __slots__ = ()

    def read(self, size: int = -1) -> bytes:
        if size != -1 or not isinstance(self.source, str):
            _refuse(f"reads part of the file {_where(self.source)}")
        with builtins.open(self.source, "rb") as f:
            return f.read()

    def __getattr__(self, name: str) -> Any:
        _refuse(f"reads the file {_where(self.source)} itself (.{name})")


class _Opened(_Stand):
    """``Image.open``'s result: the file, not decoded yet; ``upright`` once
    ``ImageOps.exif_transpose`` has turned it; ``mode_read`` once the code has asked its
    ``.mode`` (answered with the mode the trace probes: :func:`trace_getitem`)."""

    __slots__ = ("upright", "mode_read")

    def __init__(self, source: Data, upright: bool = False) -> None:
        super().__init__(source)
        self.upright = upright
        self.mode_read = False

    @property
    def mode(self) -> str:
        probe: Optional[str] = getattr(_trace, "mode", None)
        if probe is None:
            _refuse("reads the opened image's .mode")
        self.mode_read = _trace.mode_read = True
        return probe

    def convert(self, mode: Any = None, *args: Any, **kwargs: Any) -> "_Decoded":
        if mode not in _GRAY or args or kwargs:
            _refuse(f"converts the image to {mode!r} (the native loader decodes to 'RGB' or 'L')")
        step = _GRAY[mode]
        return _Decoded(self.source, () if step is None else (step,), self.upright)

    def load(self) -> None:
        return None

    def __getattr__(self, name: str) -> Any:
        _refuse(
            f"uses the opened image's .{name} (the native loader reads the image as "
            ".convert('RGB') of the file; the image it is handed unconverted is the file's own mode)"
        )


#: What the image's own ops (``convert``, ``resize``) are natively: torchvision transforms run
#: first, each a step ``(name, *args)`` (comparable between traces). Pillow's ``convert("L")``
#: of any file equals its ``convert("RGB").convert("L")`` (every mode of the decode fixtures,
#: CMYK and palette ones included), which is ``Grayscale(1)`` of the RGB image; an L image's
#: ``convert("RGB")`` is ``Grayscale(3)``'s; ``resize((w, h), resample)`` is
#: ``Resize((h, w), resample)``'s, which calls it.
Step = Tuple[Any, ...]

#: The step of an image handed to the transform as opened, unconverted: read as RGB, which
#: it is only where the file opens in mode RGB (checked per file: :meth:`TracedItems.checked`).
_AS_OPENED: Step = ("as opened",)

#: ``convert``'s modes, as the step they add after the RGB decode (``None``: none).
_GRAY: Dict[str, Optional[Step]] = {"RGB": None, "L": ("Grayscale", 1)}

#: Pillow's resampling filters by number, as torchvision's ``InterpolationMode`` names them.
_RESAMPLE = {0: "nearest", 1: "lanczos", 2: "bilinear", 3: "bicubic", 4: "box", 5: "hamming"}


class _Decoded(_Stand):
    """The image as ``Image.open(...).convert(mode)`` makes it, then ``steps`` (see
    :data:`Step`): the RGB decode for none."""

    __slots__ = ("steps", "upright")

    def __init__(self, source: Data, steps: Tuple[Step, ...] = (), upright: bool = False) -> None:
        super().__init__(source)
        self.steps = steps
        self.upright = upright

    def _then(self, step: Step) -> "_Decoded":
        return _Decoded(self.source, (*self.steps, step), self.upright)

    def convert(self, mode: Any = None, *args: Any, **kwargs: Any) -> "_Decoded":
        if mode not in _GRAY or args or kwargs:
            _refuse(f"converts the image to {mode!r}")
        if mode == self.mode:
            return self
        return self._then(("Grayscale", 1 if mode == "L" else 3))

    def resize(self, size: Any, resample: Any = None, box: Any = None, reducing_gap: Any = None) -> "_Decoded":
        if box is not None or reducing_gap is not None:
            _refuse("resizes the image by a box or with a reducing gap")
        if not (isinstance(size, (tuple, list)) and len(size) == 2 and all(isinstance(v, int) for v in size)):
            _refuse(f"resizes the image to {size!r}")
        # Pillow's default for RGB and L images.
        filter_ = 3 if resample is None else int(resample)
        if filter_ not in _RESAMPLE:
            _refuse(f"resizes the image with filter {resample!r}")
        return self._then(("Resize", size[1], size[0], filter_))

    @property
    def mode(self) -> str:
        grays = [step[1] for step in self.steps if step[0] == "Grayscale"]
        return "L" if grays and grays[-1] == 1 else "RGB"

    def copy(self) -> "_Decoded":
        return self

    def load(self) -> None:
        return None

    def __getattr__(self, name: str) -> Any:
        _refuse(f"uses the image's .{name} (the native loader only decodes it and transforms it)")


class _Tensor(_Decoded):
    """``torchvision.io``'s decode of the file (``read_image``, ``decode_image``): a uint8 CHW
    tensor of the RGB decode where :meth:`TracedItems._file_check` finds each file decodes so
    (the step :data:`_AS_TENSOR`). Not a PIL image: no ``.convert`` or ``.resize``."""

    __slots__ = ()

    def convert(self, mode: Any = None, *args: Any, **kwargs: Any) -> "_Decoded":
        return self.__getattr__("convert")  # type: ignore[no-any-return]

    def resize(self, size: Any, resample: Any = None, box: Any = None, reducing_gap: Any = None) -> "_Decoded":
        return self.__getattr__("resize")  # type: ignore[no-any-return]

    @property
    def mode(self) -> str:
        return self.__getattr__("mode")  # type: ignore[no-any-return]

    def copy(self) -> "_Decoded":
        return self.__getattr__("copy")  # type: ignore[no-any-return]

    def __getattr__(self, name: str) -> Any:
        _refuse(f"uses the decoded image tensor's .{name} (the native loader only decodes it and transforms it)")


class _FileBytes(_Stand):
    """``torchvision.io.read_file``'s tensor of the file's bytes: only ``torchvision.io``'s
    decoders may take it."""

    __slots__ = ()

    def __getattr__(self, name: str) -> Any:
        _refuse(f"uses the bytes of {_where(self.source)} (.{name})")


#: The step of an image decoded by ``torchvision.io`` (:class:`_Tensor`): ``(_AS_TENSOR, mode,
#: format)``, ``mode`` ``"RGB"`` or ``"UNCHANGED"``, ``format`` the one format its decoder takes
#: (``"JPEG"`` for ``decode_jpeg``, ``"PNG"`` for ``decode_png``) or ``None`` for any; the
#: transform runs after ``PILToTensor``.
_AS_TENSOR = "as tensor"


def _tensor_read(source: Any, mode: Any, apply_exif_orientation: Any, only: Optional[str] = None) -> _Tensor:
    """``torchvision.io``'s decode of ``source`` (a path, or :class:`_FileBytes`) in ``mode``,
    of files in format ``only`` (``None``: any)."""
    if isinstance(source, (str, os.PathLike)) and only is None:
        source = os.fspath(source)
    elif isinstance(source, _FileBytes):
        source = source.source
    else:
        _refuse(f"decodes an image with torchvision.io from a {type(source).__name__}")
    name = mode.upper() if isinstance(mode, str) else getattr(mode, "name", mode)
    if name not in ("RGB", "UNCHANGED"):
        _refuse(
            f"decodes the image with torchvision.io in mode {name} (the native loader decodes to "
            "RGB: mode ImageReadMode.RGB, or UNCHANGED for RGB files)"
        )
    return _Tensor(source, ((_AS_TENSOR, name, only),), bool(apply_exif_orientation))


def _read_image(path: Any, mode: Any = "UNCHANGED", apply_exif_orientation: bool = False) -> _Tensor:
    """``torchvision.io.read_image`` in the traced code."""
    if not isinstance(path, (str, os.PathLike)):
        _refuse(f"calls torchvision.io.read_image on a {type(path).__name__}")
    return _tensor_read(path, mode, apply_exif_orientation)


def _decode_image(input: Any, mode: Any = "UNCHANGED", apply_exif_orientation: bool = False) -> _Tensor:
    """``torchvision.io.decode_image`` in the traced code: of a path or ``read_file``'s bytes."""
    return _tensor_read(input, mode, apply_exif_orientation)


def _decode_jpeg(
    input: Any, mode: Any = "UNCHANGED", device: Any = "cpu", apply_exif_orientation: bool = False
) -> _Tensor:
    """``torchvision.io.decode_jpeg`` in the traced code: of ``read_file``'s bytes, on the CPU."""
    if str(device) != "cpu":
        _refuse(f"decodes with torchvision.io.decode_jpeg on {device} (the native loader decodes on the CPU)")
    return _tensor_read(input, mode, apply_exif_orientation, "JPEG")


def _decode_png(input: Any, mode: Any = "UNCHANGED", apply_exif_orientation: bool = False) -> _Tensor:
    """``torchvision.io.decode_png`` in the traced code: of ``read_file``'s bytes."""
    return _tensor_read(input, mode, apply_exif_orientation, "PNG")


def _read_file(path: Any) -> _FileBytes:
    """``torchvision.io.read_file`` in the traced code."""
    if not isinstance(path, (str, os.PathLike)):
        _refuse(f"calls torchvision.io.read_file on a {type(path).__name__}")
    return _FileBytes(os.fspath(path))


#: ``torchvision.io``'s functions the trace stands in for, by name.
_IO_STAND_INS: Dict[str, Callable[..., Any]] = {
    "read_image": _read_image, "decode_image": _decode_image, "decode_jpeg": _decode_jpeg,
    "decode_png": _decode_png, "read_file": _read_file,
}

#: The names of ``torchvision.io``'s functions re-made code reads through :class:`Reads`.
IO_NAMES = tuple(_IO_STAND_INS)


class _Applied:
    """A recorded ``transform(image)``: what ``__getitem__`` returns in the transformed image's
    place."""

    __slots__ = ("transform", "image")

    def __init__(self, transform: Any, image: _Decoded) -> None:
        self.transform = transform
        self.image = image

    def __getattr__(self, name: str) -> Any:
        _refuse(f"uses the transformed image's .{name} (the native loader returns it as it is)")


def _where(source: Data) -> str:
    return repr(source) if isinstance(source, str) else f"{len(source)} bytes in memory"


def _from_image(value: Any) -> bool:
    return isinstance(value, (_Stand, _Applied))


def is_stand_in(value: Any) -> bool:
    """Whether ``value`` is the trace's stand-in for an image (opened, decoded, converted), not
    a transform's output."""
    return isinstance(value, _Stand)


def _image_open(fp: Any, mode: str = "r", formats: Any = None) -> _Opened:
    """``PIL.Image.open`` in the traced code."""
    if mode != "r":
        _refuse(f"opens the image with mode {mode!r}")
    if isinstance(fp, (str, os.PathLike)):
        return _Opened(os.fspath(fp))
    if isinstance(fp, _File):
        return _Opened(fp.source)
    if isinstance(fp, io.BytesIO):
        if fp.tell() != 0:
            _refuse("opens an image from the middle of a BytesIO")
        return _Opened(fp.getvalue())
    if _from_image(fp):
        _refuse(f"opens {fp!r} again")
    _refuse(f"opens an image from a {type(fp).__name__}")


def _known_loader(path: Any) -> _Decoded:
    """torchvision's ``default_loader``/``pil_loader``: the file's RGB image."""
    if not isinstance(path, (str, os.PathLike)):
        _refuse(f"calls torchvision's image loader on a {type(path).__name__}")
    return _Decoded(os.fspath(path))


def _open(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
    """The builtin ``open`` in the traced code: a file opened to be read in binary stands in
    (only ``Image.open`` may take it); any other use is the builtin's."""
    if mode in ("rb", "br") and not args and not kwargs and isinstance(file, (str, os.PathLike)):
        return _File(os.fspath(file))
    return builtins.open(file, mode, *args, **kwargs)


def _exif_transpose(image: Any, *, in_place: bool = False) -> Any:
    """``PIL.ImageOps.exif_transpose`` in the traced code: the image turned upright per its
    EXIF orientation, as the loader's ``exif_transpose=True`` turns it (before or after the
    conversion: Pillow's ``convert`` keeps the EXIF block); any other image is Pillow's."""
    if isinstance(image, _Tensor):
        _refuse("calls ImageOps.exif_transpose on a decoded image tensor")
    if not isinstance(image, (_Opened, _Decoded)):
        from PIL import ImageOps

        return ImageOps.exif_transpose(image, in_place=True) if in_place else ImageOps.exif_transpose(image)
    if in_place:
        image.upright = True
        return None
    if isinstance(image, _Opened):
        return _Opened(image.source, True)
    return _Decoded(image.source, image.steps, True)


class ModuleWith:
    """A module in re-made code (``PIL``, ``PIL.Image``, ``torchvision.io``...): the names in
    ``overrides`` stand in, the rest is the module's own."""

    def __init__(self, real: types.ModuleType, overrides: Dict[str, Any]) -> None:
        self._real = real
        self.__dict__.update(overrides)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


class LiveGlobals(dict):  # type: ignore[type-arg]
    """A function's globals in the trace: the stand-ins, then the module's own, read live (a
    global the module changes later is seen)."""

    def __init__(self, overrides: Dict[str, Any], live: Dict[str, Any]) -> None:
        super().__init__(overrides)
        self.live = live

    def __missing__(self, name: str) -> Any:
        return self.live[name]


def remade_function(fn: types.FunctionType, overrides: Dict[str, Any], cells: List[Any]) -> types.FunctionType:
    """``fn``'s code run with ``overrides`` before its module's globals (read live:
    :class:`LiveGlobals`) and ``cells`` for its closure's (where it has one)."""
    remade = types.FunctionType(
        fn.__code__,
        LiveGlobals(overrides, fn.__globals__),
        fn.__name__,
        fn.__defaults__,
        tuple(cells) if fn.__closure__ is not None else None,
    )
    remade.__kwdefaults__ = fn.__kwdefaults__
    return remade


class Reads(NamedTuple):
    """What re-made code calls where it reads an image: in place of ``PIL.Image.open``,
    torchvision's ``default_loader``/``pil_loader``, the builtin ``open``,
    ``ImageOps.exif_transpose`` and ``torchvision.io``'s functions by name (:data:`IO_NAMES`)
    (``None``: the real ones), and what a transform the code holds (an attribute, a global, a
    closure's) becomes (``None``: itself)."""

    image_open: Callable[..., Any]
    loader: Callable[[Any], Any]
    file_open: Optional[Callable[..., Any]]
    exif_transpose: Optional[Callable[..., Any]]
    hold: Optional[Callable[[Any], Any]]
    io: Optional[Dict[str, Callable[..., Any]]] = None


class _StandIns:
    """The stand-ins of one copy of a dataset (:class:`Reads`), and the functions re-made with
    them: ``functions`` maps the real functions to theirs, ``modules`` the real modules
    (``PIL``, ``PIL.Image``, ``PIL.ImageOps``, ``torchvision`` and ``torchvision.io`` where
    loaded) to the :class:`ModuleWith` holding them."""

    def __init__(self, reads: Reads) -> None:
        from PIL import Image, ImageOps

        self.reads = reads
        self.functions: Dict[Any, Callable[..., Any]] = {Image.open: reads.image_open}
        self.functions.update(dict.fromkeys(_torchvision_loaders(), reads.loader))
        if reads.exif_transpose is not None:
            self.functions[ImageOps.exif_transpose] = reads.exif_transpose
        image = ModuleWith(Image, {"open": reads.image_open})
        image_ops = ModuleWith(ImageOps, {"exif_transpose": reads.exif_transpose or ImageOps.exif_transpose})
        pil = sys.modules["PIL"]
        self.modules: Dict[Any, ModuleWith] = {
            Image: image, ImageOps: image_ops, pil: ModuleWith(pil, {"Image": image, "ImageOps": image_ops})
        }
        tvio = sys.modules.get("torchvision.io")
        if reads.io is not None and tvio is not None:
            self.functions.update({getattr(tvio, name): reads.io[name] for name in IO_NAMES})
            io_module = ModuleWith(tvio, reads.io)
            self.modules[tvio] = io_module
            self.modules[sys.modules["torchvision"]] = ModuleWith(sys.modules["torchvision"], {"io": io_module})
        # An import inside re-made code (`from torchvision.io import read_image` in a method)
        # gets the stand-in module too: the builtins it runs with import through them.
        self.builtins = dict(vars(builtins), __import__=self._import)
        self.made: Dict[Any, Any] = {}

    def _import(self, name: str, *args: Any, **kwargs: Any) -> Any:
        module = builtins.__import__(name, *args, **kwargs)
        return self.modules.get(module, module) if isinstance(module, types.ModuleType) else module

    def function(self, fn: types.FunctionType, depth: int = 0, owner: Optional[type] = None) -> Any:
        """``fn`` with the stand-ins in its globals (``fn`` itself where it cannot be, or need not
        be: a library's, one that writes a global, too deep); a method's ``super()`` finds
        ``owner``, its class's traced copy (:meth:`cls`)."""
        if fn in self.functions:
            return self.functions[fn]
        made = self.made.get((fn, owner))
        if made is not None:
            return made
        if depth > _DEPTH or from_library(fn) or _writes_globals(fn.__code__):
            return fn
        cells = list(fn.__closure__ or ())
        for i, name in enumerate(fn.__code__.co_freevars):
            if name == "__class__" and owner is not None:
                cells[i] = types.CellType(owner)
                continue
            try:
                value = cells[i].cell_contents
            except ValueError:
                continue  # not bound yet
            stand = self.stand_for(value, depth)
            if stand is not None:
                cells[i] = types.CellType(stand)
        overrides: Dict[str, Any] = {"__builtins__": self.builtins}
        remade = remade_function(fn, overrides, cells)
        self.made[(fn, owner)] = remade  # before its globals: a function may call itself
        for name in global_names(fn.__code__):
            if name in fn.__globals__:
                stand = self.stand_for(fn.__globals__[name], depth)
                if stand is not None:
                    overrides[name] = stand
            elif name == "open" and self.reads.file_open is not None:
                overrides[name] = self.reads.file_open
        dict.update(remade.__globals__, overrides)
        return remade

    def cls(self, cls: type) -> Optional[type]:
        """A copy of the dataset's class whose own methods (and those of the user's classes it
        derives from) run with the stand-ins, ``super()`` included; ``None`` where the user's
        classes are not one chain of single bases, or hold ``__slots__``."""
        chain: List[type] = []
        for c in cls.__mro__:
            if c is object or from_library(c):
                break
            chain.append(c)
        if not chain:
            return None
        if any(c.__bases__ != (after,) for c, after in zip(chain, chain[1:])):
            return None
        if any("__slots__" in vars(c) for c in chain):
            return None
        bases: Tuple[type, ...] = chain[-1].__bases__
        for c in reversed(chain):
            space = {k: v for k, v in vars(c).items() if k not in ("__dict__", "__weakref__")}
            traced = type(c)(c.__name__, bases, space)
            for name, value in space.items():
                if isinstance(value, types.FunctionType):
                    setattr(traced, name, self.function(value, owner=traced))
                elif isinstance(value, (staticmethod, classmethod)) and isinstance(value.__func__, types.FunctionType):
                    setattr(traced, name, type(value)(self.function(value.__func__, owner=traced)))
            bases = (traced,)
        return bases[0]

    def stand_for(self, value: Any, depth: int) -> Optional[Any]:
        """What ``value``, a global of traced code, is in the trace (``None``: itself)."""
        if isinstance(value, types.ModuleType):
            return self.modules.get(value)
        if isinstance(value, types.FunctionType):
            made = self.function(value, depth + 1)
            return None if made is value else made
        if self.reads.hold is not None and (_is_transform(value) or is_image_processor(value)):
            return self.reads.hold(value)
        return None

    def held(self, value: Any) -> Any:
        """What a callable the dataset holds is in the copy: the stand-ins of the functions they
        replace (torchvision's loaders...), the user's functions re-made with them, anything
        else as :attr:`Reads.hold` makes it."""
        if isinstance(value, types.FunctionType) and value in self.functions:
            return self.functions[value]
        if isinstance(value, types.FunctionType) and not from_library(value):
            return self.function(value)
        return value if self.reads.hold is None else self.reads.hold(value)


class _Held:
    """A callable the dataset holds (its transform), in the trace: applied to the RGB image
    alone it records itself; applied to values not made from the image, it runs."""

    __slots__ = ("original",)

    def __init__(self, original: Any) -> None:
        self.original = original

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not any(map(_from_image, (*args, *kwargs.values()))):
            return self.original(*args, **kwargs)
        if len(args) == 1 and not kwargs and isinstance(args[0], _Decoded):
            return _Applied(self.original, args[0])
        if len(args) == 1 and not kwargs and isinstance(args[0], _Opened):
            opened = args[0]
            if opened.mode_read and _trace.mode == "RGB":
                # The code looked: an RGB file's image, as opened, is its RGB decode.
                return _Applied(self.original, _Decoded(opened.source, (), opened.upright))
            if opened.mode_read:
                _refuse(f"applies {_name(self.original)} to a {_trace.mode} file's image as opened")
            # In each file's own mode: read as RGB, each file checked to open so (TracedItems).
            return _Applied(self.original, _Decoded(opened.source, (_AS_OPENED,), opened.upright))
        what = ", ".join([*map(_describe, args), *(f"{k}={_describe(v)}" for k, v in kwargs.items())])
        _refuse(f"calls {_name(self.original)}({what}) (the native loader applies one transform "
                "to the RGB image)")

    def __getattr__(self, name: str) -> Any:
        return getattr(self.original, name)


class _HeldProcessor(_Held):
    """An image processor of transformers (``ViTImageProcessor``) the traced code holds: called on
    the image alone (or a list of it alone, as a format function's batch of one hands it), with
    ``return_tensors`` ``"pt"`` or ``None``, it records the torchvision pipeline it is
    (:func:`ferroloader._imageprocessor.processor_transform`) as a held transform does, and
    answers its ``BatchFeature``'s place (:class:`_Processed`)."""

    __slots__ = ()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not any(map(_holds_image, (*args, *kwargs.values()))):
            return self.original(*args, **kwargs)
        images = args[0] if args else kwargs.pop("images", None)
        tensors = kwargs.pop("return_tensors", None)
        name = type(self.original).__name__
        if len(args) > 1 or kwargs or tensors not in (None, "pt"):
            _refuse(f"calls {name} with arguments besides the images and return_tensors='pt'")
        batched = isinstance(images, (list, tuple))
        if batched and len(images) != 1:
            _refuse(f"calls {name} on {len(images)} images (the native loader makes one a sample)")
        transform = processor_transform(self.original)
        if isinstance(transform, str):
            _refuse(transform)
        applied = _Held(transform)(images[0] if batched else images)
        return _Processed({"pixel_values": _PixelValues(applied, tensors == "pt")})


class _Processed(dict):  # type: ignore[type-arg]
    """An image processor's ``BatchFeature`` of the one image, in the trace: keys by item or
    attribute, more set as on a dict."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


class _PixelValues:
    """An image processor's ``pixel_values`` of the one image, in the trace: a batch of one
    (``tensor``: stacked, ``return_tensors="pt"``; else a list); its first item (``[0]``, and for
    the tensor ``.squeeze(0)``, ``.squeeze()``) is the transformed image."""

    __slots__ = ("applied", "tensor")

    def __init__(self, applied: Any, tensor: bool) -> None:
        self.applied = applied
        self.tensor = tensor

    def __getitem__(self, index: Any) -> Any:
        if index != 0:
            _refuse(f"takes [{index!r}] of the image processor's pixel_values (the native loader makes [0])")
        return self.applied

    def __len__(self) -> int:
        return 1

    def squeeze(self, dim: Any = None) -> Any:
        if not self.tensor or dim not in (None, 0):
            _refuse("squeezes the image processor's pixel_values otherwise than along its batch")
        return self.applied

    def __getattr__(self, name: str) -> Any:
        _refuse(f"uses the image processor's pixel_values' .{name} (the native loader makes [0] of it)")


def _hold(value: Any) -> _Held:
    """What the trace holds in place of a callable of the dataset's: :class:`_HeldProcessor` for a
    transformers image processor, else :class:`_Held`."""
    return _HeldProcessor(value) if is_image_processor(value) else _Held(value)


#: Where the transforms the loader converts come from: one of them held in a global or a
#: closure of the traced code (``train_tf`` at module level) is recorded as one the dataset holds.
_TRANSFORM_MODULES = ("torchvision.transforms.", "timm.data.", "ferroloader.transforms")


def _is_transform(value: Any) -> bool:
    module = type(value).__module__ or ""
    return callable(value) and not isinstance(value, type) and module.startswith(_TRANSFORM_MODULES)


def _describe(value: Any) -> str:
    if isinstance(value, _Applied):
        return "the transformed image"
    if isinstance(value, _Decoded):
        return "the image"
    if isinstance(value, _Stand):
        return "the opened file"
    return type(value).__name__


def _name(value: Any) -> str:
    return getattr(value, "__qualname__", None) or type(value).__name__


def _torchvision_loaders() -> Tuple[Any, ...]:
    folder = sys.modules.get("torchvision.datasets.folder")
    if folder is None:
        return ()
    try:
        from torchvision import get_image_backend  # type: ignore[import-untyped]
    except ImportError:
        return ()
    if get_image_backend() != "PIL":
        return (folder.pil_loader,)  # default_loader reads with accimage
    return (folder.default_loader, folder.pil_loader)


def from_library(fn: Any) -> bool:
    """Whether ``fn`` (a function or class) is one of :data:`_LIBRARIES`'."""
    module = getattr(fn, "__module__", None) or ""
    return module.partition(".")[0] in _LIBRARIES


def nested_codes(code: types.CodeType) -> List[types.CodeType]:
    """``code`` and the code objects nested in it (comprehensions, lambdas, inner functions)."""
    found = [code]
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            found.extend(nested_codes(const))
    return found


def global_names(code: types.CodeType) -> List[str]:
    return sorted({
        str(ins.argval)
        for c in nested_codes(code)
        for ins in dis.get_instructions(c)
        if ins.opname == "LOAD_GLOBAL"
    })


def _writes_globals(code: types.CodeType) -> bool:
    return any(
        ins.opname in ("STORE_GLOBAL", "DELETE_GLOBAL") for c in nested_codes(code) for ins in dis.get_instructions(c)
    )


class Opened(NamedTuple):
    """How a ``loader=`` function opens each file: the RGB decode, then ``steps`` (see
    :data:`Step`)."""

    steps: Tuple[Step, ...]


def loader_opens(loader: Any) -> Union[Opened, str]:
    """How ``loader`` (an ``ImageFolder``'s ``loader=`` function) opens a file, when it opens it
    with Pillow and converts it to RGB or L as torchvision's ``default_loader`` converts to RGB
    (traced on a path that is never opened), else what it does instead."""
    if not isinstance(loader, types.FunctionType):
        return "is not a Python function"
    probe = os.path.join("traced", "image.jpg")
    try:
        got = _call(_StandIns(_TRACE).held(loader), probe)
    except Untraceable as e:
        return e.reason
    except Exception as e:
        return f"raises {type(e).__name__}: {e}"
    if not isinstance(got, _Decoded) or got.source != probe:
        return f"returns {_describe(got)}, not the file's image"
    if isinstance(got, _Tensor):
        return (
            "decodes with torchvision.io (the loader checks its decodes file by file only for a "
            "dataset class's own __getitem__)"
        )
    if got.upright:
        return (
            "turns the image upright per its EXIF orientation (the listing is read as stored; a "
            "dataset class doing so, or Loader(exif_transpose=True), is read natively upright)"
        )
    return Opened(got.steps)


def steps_first(transform: Any, steps: Tuple[Step, ...]) -> Union[Any, str]:
    """``transform`` after the torchvision transforms that stand for the image's own ``steps``
    (a ``Compose`` of them), or why it cannot be: a transform that is not torchvision's (a
    multi-view object) is run as it is."""
    if any(step[0] == _AS_TENSOR for step in steps):
        return _after_tensor_read(transform)
    steps = tuple(step for step in steps if step != _AS_OPENED)
    if not steps:
        return transform
    module = type(transform).__module__ or ""
    if not module.startswith("torchvision."):
        return f"converts or resizes the image before {_name(transform)}, not a torchvision transform"
    import torchvision.transforms as tv  # type: ignore[import-untyped]

    ops: List[Any] = []
    for name, *args in steps:
        if name == "Grayscale":
            ops.append(tv.Grayscale(args[0]))
        else:
            height, width, filter_ = args
            mode = tv.InterpolationMode(_RESAMPLE[filter_])
            ops.append(tv.Resize((height, width), interpolation=mode))
    return tv.Compose([*ops, transform])


def _after_tensor_read(transform: Any) -> Union[Any, str]:
    """``transform`` of ``torchvision.io``'s uint8 tensor, as a pipeline of the RGB decode: after
    ``PILToTensor`` (of the transform's API, v1 or v2), or without its leading ``ToPILImage()``,
    which makes the RGB image again; or why not (a transform torchvision cannot apply to a
    tensor)."""
    if not (type(transform).__module__ or "").startswith("torchvision.transforms"):
        return f"applies {_name(transform)}, not a torchvision transform, to a torchvision.io tensor"
    import torchvision.transforms as tv
    import torchvision.transforms.v2 as v2  # type: ignore[import-untyped]

    from ferroloader.transforms import _flatten_torchvision_compose, _is_v2

    ops = _flatten_torchvision_compose([transform])
    if ops and type(ops[0]).__name__ == "ToPILImage" and ops[0].mode is None:
        return tv.Compose(ops[1:])
    # v2's ToTensor hands a tensor on as it is (its PILToTensor too: the marker below).
    ops = [op for op in ops if not (_is_v2(op) and type(op).__name__ == "ToTensor")]
    for op in ops:
        name = type(op).__name__
        if name in ("ToTensor", "PILToTensor") and not _is_v2(op):
            return (
                f"applies {name} to the tensor torchvision.io decodes, which torchvision refuses "
                "(ConvertImageDtype(torch.float) converts it)"
            )
        if name == "ToPILImage":
            return "applies ToPILImage to the tensor torchvision.io decodes after other transforms"
    return tv.Compose([v2.PILToTensor() if _is_v2(ops[0] if ops else transform) else tv.PILToTensor(), *ops])


Slot = Union[int, str, None]


class Layout(NamedTuple):
    """Where the transformed image lies in what ``__getitem__`` returns: ``slot`` ``None`` for
    the image alone, else its position in a tuple or list, or its key in a dict (``container``,
    in the order ``keys`` of a dict, or ``length`` items). The rest of the sample (its
    *target*) is carried per sample: the other item of a pair, ``0`` (a class index no one
    reads) for the image alone, else a tuple of the other items or a dict of the other keys."""

    container: type
    slot: Slot
    length: int
    keys: Tuple[Any, ...]

    @property
    def plain(self) -> bool:
        """Whether samples are ``(image, target)`` pairs: what the loader delivers anyway."""
        return self.container in (tuple, list) and self.length == 2 and self.slot == 0

    def describe(self) -> str:
        """The samples' layout, for messages."""
        if self.slot is None:
            return "images alone"
        if self.container is dict:
            return f"dicts with the image under {self.slot!r}"
        return f"{self.container.__name__}s of {self.length} items, the image at position {self.slot}"

    def split(self, out: Any) -> Optional[Tuple[_Applied, Any]]:
        """``(image, target)`` of a sample ``__getitem__`` returned; ``None`` where it is not laid
        out so."""
        if self.slot is None:
            return (out, 0) if isinstance(out, _Applied) else None
        sample: Any = out  # narrowed by the type check below to `object` otherwise
        if type(sample) is not self.container:
            return None
        out = sample
        if self.container is dict:
            if tuple(out) != self.keys:
                return None
            rest: Any = {k: v for k, v in out.items() if k != self.slot}
        else:
            if len(out) != self.length:
                return None
            rest = tuple(v for i, v in enumerate(out) if i != self.slot)
            if self.plain:
                rest = rest[0]
        image = out[self.slot]
        if not isinstance(image, _Applied) or _holds_image(rest):
            return None
        return image, rest

    def sample(self, image: Any, target: Any) -> Any:
        """The sample ``__getitem__`` returns, its image ``image``."""
        if self.slot is None:
            return image
        if self.container is dict:
            return {k: image if k == self.slot else target[k] for k in self.keys}
        if self.plain:
            return self.container((image, target))
        items = list(target)
        items.insert(cast_int(self.slot), image)
        return self.container(items)

    def batch(self, images: Any, targets: List[Any], collate: Callable[[Sequence[Any]], Any]) -> Any:
        """The batch DataLoader collates of the samples: ``images`` in the image's place, each
        other item collated by ``collate`` (a list for a tuple or list, a dict for a dict, as
        ``default_collate`` makes them)."""
        if self.slot is None:
            return images
        if self.container is dict:
            return {k: images if k == self.slot else collate([t[k] for t in targets]) for k in self.keys}
        if self.plain:
            return [images, collate(targets)]
        # default_collate collates a sequence's fields as tuples (zip's), a dict's as lists.
        fields = [collate(tuple(t[j] for t in targets)) for j in range(self.length - 1)]
        fields.insert(cast_int(self.slot), images)
        return fields


def cast_int(slot: Slot) -> int:
    assert isinstance(slot, int)
    return slot


def _holds_image(value: Any) -> bool:
    if _from_image(value):
        return True
    if isinstance(value, dict):
        return any(_holds_image(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_holds_image(v) for v in value)
    return False


def _layout_of(out: Any) -> Union[Layout, str]:
    """The :class:`Layout` of the first sample ``__getitem__`` returned, or what is wrong."""
    if isinstance(out, _Applied):
        return Layout(type(out), None, 1, ())
    if type(out) in (tuple, list):
        slots: List[Slot] = [i for i, v in enumerate(out) if isinstance(v, _Applied)]
        layout = Layout(type(out), slots[0] if len(slots) == 1 else None, len(out), ())
    elif type(out) is dict:
        slots = [k for k, v in out.items() if isinstance(v, _Applied)]
        layout = Layout(dict, slots[0] if len(slots) == 1 else None, len(out), tuple(out))
    else:
        return f"returns a {type(out).__name__}" + (
            " made from the image" if _from_image(out) else ", not a tuple, a list or a dict"
        )
    if len(slots) != 1:
        return f"returns {len(slots)} transformed images in one sample"
    if layout.split(out) is None:
        return "returns something made from the image beside the transformed image"
    return layout


class Traced(NamedTuple):
    """What :func:`trace_getitem` found: the transform applied to each image, where the image
    lies in a sample, the first sample's file, and how long the traced ``__getitem__`` took
    (the faster of two calls: what each sample will hold the GIL for, without the decode)."""

    transform: Any
    layout: Layout
    first: Data
    seconds: float
    steps: Tuple[Step, ...]
    upright: bool


#: The longest a traced ``__getitem__`` may hold the GIL per sample for the dataset to be read
#: natively: every worker thread waits for it in turn, so it bounds the loader at
#: ``1 / seconds`` samples a second (2000 here, a few cores' worth of decoding) where worker
#: processes would run it side by side.
GIL_BUDGET_S = 0.5e-3


def sets_up_workers(worker_init_fn: Any) -> bool:
    """Whether ``worker_init_fn`` reads ``get_worker_info()`` (to set up each worker's copy of
    the dataset: open a file, tag it): such a dataset is meant to run in worker processes."""
    code = getattr(worker_init_fn, "__code__", None)
    return isinstance(code, types.CodeType) and any("get_worker_info" in c.co_names for c in nested_codes(code))


def trace_getitem(dataset: Any) -> Union[Traced, str]:
    """How ``dataset[0]`` makes its sample, learnt without decoding it (see the module's doc), or
    what keeps it from being read natively."""
    getitem = getattr(type(dataset), "__getitem__", None)
    if not isinstance(getitem, types.FunctionType):
        return "is not a Python function"
    getitems = getattr(type(dataset), "__getitems__", None)
    if getitems is not None and not from_library(getitems):
        return "is not what DataLoader calls: the class defines __getitems__"
    try:
        if len(dataset) == 0:
            return "cannot be traced: the dataset is empty"
    except Exception as e:
        return f"cannot be traced: len(dataset) raises {type(e).__name__}: {e}"
    _trace.mode, _trace.mode_read = "RGB", False
    try:
        found = []
        for seed in (0, 1):
            # The second seed's time is the fastest of a few calls: the first ones warm what
            # the code reaches (pandas' indexing), which the budget must not count.
            traced = _run_first(dataset, seed, calls=1 + 2 * seed)
            if isinstance(traced, str):
                return traced
            found.append(traced)
        (first, first_target), (second, second_target) = found
        if not _alike(first, second):
            return "makes dataset[0] differently from one call to the next"
        if not _same(first_target, second_target):
            return "draws dataset[0]'s target at random (per-sample seeding runs it in worker processes)"
        if _trace.mode_read:
            # It looked at the file's mode: every mode a file opens in must come out as an RGB
            # file does (`if img.mode != "RGB": img = img.convert("RGB")`).
            for mode in _FILE_MODES:
                _trace.mode = mode
                other = _run_first(dataset, 0)
                if isinstance(other, str) or not _alike(first, other[0]) or not _same(first_target, other[1]):
                    why = other if isinstance(other, str) else "makes its sample otherwise"
                    return f"reads the image's .mode, and for a {mode} file {why}"
    finally:
        _trace.mode = None
    return first._replace(seconds=min(first.seconds, second.seconds))


#: The modes Pillow opens image files in, besides RGB: what a ``__getitem__`` that reads the
#: opened image's ``.mode`` is traced with.
_FILE_MODES = ("L", "LA", "P", "RGBA", "CMYK", "1", "I;16")


def _alike(a: Traced, b: Traced) -> bool:
    """Whether two traces read and transform the image alike."""
    return a.transform is b.transform and (a.layout, a.first, a.steps, a.upright) == (
        b.layout, b.first, b.steps, b.upright
    )


def _run_first(dataset: Any, seed: int, calls: int = 1) -> Union[Tuple[Traced, Any], str]:
    """``dataset[0]`` traced under ``seed``, timed over ``calls`` calls (the fastest), and its
    target; or why it cannot be traced."""
    items = _traced_copy(dataset)
    if isinstance(items, str):
        return items
    run, traced_getitem = items
    torch = sys.modules.get("torch")
    from ferroloader._tail import restore_generators, seed_generators

    saved = seed_generators(seed, torch)
    try:
        seconds = float("inf")
        for _ in range(calls):
            start = time.perf_counter()
            out = _call(traced_getitem, run, 0)
            seconds = min(seconds, time.perf_counter() - start)
    except Untraceable as e:
        return e.reason
    except Exception as e:
        # A refusal the code caught comes first: what it raised next comes of it.
        refused = getattr(_trace, "refused", None)
        return str(refused) if refused is not None else f"raises {type(e).__name__} when traced: {e}"
    finally:
        restore_generators(saved, torch)
    layout = _layout_of(out)
    if isinstance(layout, str):
        return layout
    split = layout.split(out)
    assert split is not None
    image, target = split
    decoded = image.image
    return Traced(image.transform, layout, decoded.source, seconds, decoded.steps, decoded.upright), target


def _call(fn: Any, *args: Any) -> Any:
    """``fn(*args)`` of traced code; :class:`Untraceable` where it refused anything, even a
    refusal the code caught."""
    _trace.refused = None
    out = fn(*args)
    if _trace.refused is not None:
        raise Untraceable(str(_trace.refused))
    return out


#: The trace's stand-ins: nothing is read or decoded, transforms are recorded.
_TRACE = Reads(_image_open, _known_loader, _open, _exif_transpose, _hold, _IO_STAND_INS)


def _traced_copy(dataset: Any, reads: Reads = _TRACE) -> Union[Tuple[Any, Any], str]:
    """A shallow copy of ``dataset`` whose callables are ``reads``' (:meth:`_StandIns.held`)
    and whose class's methods run with them (:meth:`_StandIns.cls`; where the class cannot be
    copied, its own methods are set on the instance, ``super()`` left as it is), and its
    ``__getitem__`` so re-made."""
    try:
        made = copy.copy(dataset)
    except Exception as e:
        return f"cannot be traced: copying the dataset raises {type(e).__name__}: {e}"
    space = getattr(made, "__dict__", None)
    if space is None or space is getattr(dataset, "__dict__", None):
        return "cannot be traced: the dataset has no attributes of its own"
    stand_ins = _StandIns(reads)
    for name, value in list(space.items()):
        if callable(value) and not isinstance(value, type):
            space[name] = stand_ins.held(value)
    traced = stand_ins.cls(type(dataset))
    if traced is not None:
        try:
            made.__class__ = traced
        except TypeError:
            traced = None
    if traced is None:
        for klass in type(dataset).__mro__:
            if from_library(klass) or klass is object:
                continue
            for name, value in vars(klass).items():
                if isinstance(value, types.FunctionType) and not name.startswith("__") and name not in space:
                    space[name] = types.MethodType(stand_ins.function(value), made)
    getitem = type(made).__getitem__ if traced is not None else stand_ins.function(type(dataset).__getitem__)
    return made, getitem


def reading_copy(
    dataset: Any, image_open: Callable[..., Any], loader: Callable[[Any], Any], io: Dict[str, Callable[..., Any]]
) -> Optional[Any]:
    """A shallow copy of ``dataset`` (a traceable one: :func:`trace_getitem`) whose
    ``__getitem__`` opens its images with ``image_open`` in place of ``PIL.Image.open``,
    ``loader`` in place of torchvision's loaders and ``io``'s functions in place of
    ``torchvision.io``'s (:data:`IO_NAMES`), the rest as it is (a profiler's timed reads);
    ``None`` where its class cannot be copied so. Not picklable: make it again in each process."""
    made = _traced_copy(dataset, Reads(image_open, loader, None, None, None, io))
    if isinstance(made, str) or type(made[0]) is type(dataset):
        return None
    return made[0]


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(map(_same, a, b))
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.shape == b.shape and bool(torch.equal(a, b))
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return bool(np.array_equal(a, b))
    try:
        return bool(a == b)
    except Exception:
        return False


#: Pillow's mode of a PNG by its colour type (IHDR), for 8-bit samples.
_PNG_MODES = {0: "L", 2: "RGB", 3: "P", 4: "LA", 6: "RGBA"}

#: Pillow's mode of a JPEG by its number of components.
_JPEG_MODES = {1: "L", 3: "RGB", 4: "CMYK"}


def _header(source: Data) -> Tuple[str, str, int]:
    """The format ``source`` is in, the mode Pillow opens it in and its bits per sample, read
    from its first bytes for a JPEG (its frame header) or a PNG (its IHDR chunk), else from
    Pillow's open (which decodes nothing, but costs tens of microseconds); raises what Pillow
    raises on a file it cannot open."""
    head = source[:4096] if isinstance(source, bytes) else b""
    if isinstance(source, str):
        # os's calls: a third of the builtin open's cost, which wraps the file in two objects.
        fd = os.open(source, os.O_RDONLY)
        try:
            head = os.read(fd, 4096)
            # The frame header lies past the APP segments (EXIF, ICC, XMP: tens of KB at most).
            while head.startswith(b"\xff\xd8") and _jpeg_frame(head) is None and len(head) < _JPEG_HEAD_MAX:
                more = os.read(fd, 1 << 16)
                if not more:
                    break
                head += more
        finally:
            os.close(fd)
    if head.startswith(b"\x89PNG\r\n\x1a\n") and len(head) >= 26 and head[12:16] == b"IHDR":
        depth, colour = head[24], head[25]
        # Pillow's names for a few depths of their own (16-bit gray and alpha among them).
        mode = {(0, 1): "1", (0, 16): "I;16", (4, 16): "RGBA"}.get((colour, depth), _PNG_MODES.get(colour))
        if mode is not None:
            return "PNG", mode, depth
    frame = _jpeg_frame(head) if head.startswith(b"\xff\xd8") else None
    if frame is not None and frame[1] in _JPEG_MODES:
        return "JPEG", _JPEG_MODES[frame[1]], frame[0]
    from PIL import Image

    with Image.open(source if isinstance(source, str) else io.BytesIO(source)) as opened:
        return str(opened.format), opened.mode, 8


#: How far into a JPEG its frame header is looked for before Pillow is asked.
_JPEG_HEAD_MAX = 1 << 20


def _jpeg_frame(data: bytes) -> Optional[Tuple[int, int]]:
    """The bits per sample and the number of components of the JPEG ``data`` begins, from its
    frame header (SOFn); ``None`` where ``data`` ends before it; ``(0, 0)`` where its segments
    break off before it (a file Pillow is left to judge)."""
    at = 2
    while at + 10 <= len(data):
        if data[at] != 0xFF:
            return 0, 0
        marker = data[at + 1]
        if marker == 0xFF:  # a fill byte
            at += 1
            continue
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            return data[at + 4], data[at + 9]
        at += 2 + int.from_bytes(data[at + 2:at + 4], "big")
    return None


def _opens_rgb(source: Data) -> Optional[str]:
    """Why ``source``, handed to the transform as Pillow opens it, is not the RGB image the
    native loader decodes (``None``: it is; a file Pillow cannot open is left to the decode's
    own error)."""
    try:
        mode = _header(source)[1]
    except Exception:
        return None
    if mode == "RGB":
        return None
    return (
        f"hands its transform the image as opened, and {_where(source)} opens in mode {mode}, not "
        "RGB (the loader reads images handed over unconverted only where they are RGB): convert "
        "it with .convert('RGB') in __getitem__"
    )


def _decodes_as_rgb(source: Data, mode: str, only: Optional[str] = None) -> Optional[str]:
    """Why ``torchvision.io``'s decode of ``source`` in ``mode`` (``"RGB"`` or ``"UNCHANGED"``),
    by a decoder of format ``only`` (``decode_jpeg``'s ``"JPEG"``; ``None``: any), is not the
    uint8 RGB image the native loader decodes, as Pillow's ``convert("RGB")`` would (``None``:
    it is). Both decode JPEG (any colour space), PNG of 8 bits or fewer and WebP
    alike in mode RGB: the same libjpeg-turbo, libpng and libwebp conversions, on the decode
    fixtures. torchvision decodes 16-bit PNGs to uint16, GIFs otherwise (transparency, frames),
    and refuses the other formats; in mode UNCHANGED it keeps the file's channels (one for a
    gray JPEG, a palette's indices, alpha)."""
    try:
        kind, opened, depth = _header(source)
    except Exception:
        return None
    why = None
    if only is not None and kind != only:
        why = f"is {kind}, which torchvision.io.decode_{only.lower()} refuses"
    elif kind not in ("JPEG", "PNG", "WEBP"):
        why = f"is {kind}, which torchvision.io decodes otherwise than Pillow, or not at all"
    elif depth > 8:
        why = f"is a {depth}-bit {kind}, which torchvision.io decodes to a {depth}-bit tensor"
    elif mode == "UNCHANGED" and opened != "RGB":
        why = (
            f"opens in mode {opened}, whose channels torchvision.io's mode UNCHANGED keeps (pass "
            "mode=ImageReadMode.RGB)"
        )
    if why is None:
        return None
    return (
        f"decodes {_where(source)} with torchvision.io, and it {why}: the native loader decodes "
        "JPEG, PNG (8-bit) and WebP images to RGB as torchvision.io's mode RGB does"
    )


def item_name(dataset: Any, index: int) -> Optional[str]:
    """``dataset.ferroloader_item_name(index)``, where the dataset names its items for the
    loader's errors (the native loader asks its protocol dataset so, for an item of bytes: a
    Hugging Face row's split and file); ``None`` where it does not, or fails to."""
    namer = getattr(dataset, "ferroloader_item_name", None)
    if namer is None:
        return None
    try:
        name = namer(index)
    except Exception:  # an error path: the loader's own name stands
        return None
    return name if isinstance(name, str) else None


class TracedItems:
    """The user's dataset through the loader's ``(path or bytes, target)`` protocol:
    ``items[i]`` calls the traced ``__getitem__(i)`` (its stand-ins decode nothing) and gives
    the image's file (or bytes) and the rest of the sample (:meth:`Layout.split`). The traced
    copy is made again when an attribute of the dataset is set anew (a ``set_epoch`` that sets a
    field, a label table replaced), so each sample sees the dataset as DataLoader's workers
    would after the change. ``indices``: the dataset's samples these items are, in order (a
    torch ``Subset``'s, composed for nested ones); ``None``: all. Picklable (worker processes
    trace the dataset again)."""

    def __init__(self, dataset: Any, traced: Traced, indices: Optional[List[int]] = None) -> None:
        self.dataset = dataset
        self.traced = traced
        self.indices = indices
        self.name = type(dataset).__name__
        self._run: Optional[Tuple[Any, Any]] = None
        self._seen: List[Tuple[str, Any]] = []

    @staticmethod
    def concat(parts: List["TracedItems"]) -> Union["TracedItems", str]:
        """The items of a ``ConcatDataset`` of traced datasets, one after the other; why not
        where the parts differ in transform, layout, mode or turning (one pipeline runs all)."""
        first = parts[0].traced
        for part in parts[1:]:
            t = part.traced
            if t.transform is not first.transform:
                return "holds parts with different transforms (one native pipeline runs them all)"
            if (t.layout, t.steps, t.upright) != (first.layout, first.steps, first.upright):
                return "holds parts whose samples are made differently"
        return _ConcatItems(parts)

    def subset(self, indices: List[int]) -> "TracedItems":
        """These items' ``indices``-th ones (a ``Subset`` of the dataset they are)."""
        mine = self.indices
        return TracedItems(self.dataset, self.traced, indices if mine is None else [mine[i] for i in indices])

    def _runner(self) -> Tuple[Any, Any]:
        now = vars(self.dataset)
        if self._run is None or len(now) != len(self._seen) or any(now.get(k, self) is not v for k, v in self._seen):
            made = _traced_copy(self.dataset)
            if isinstance(made, str):
                raise TypeError(f"dataset: {self.name}.__getitem__ {made}")
            self._run, self._seen = made, list(now.items())
        return self._run

    def __len__(self) -> int:
        return len(self.dataset) if self.indices is None else len(self.indices)

    @property
    def exif_transpose(self) -> bool:
        """Whether ``__getitem__`` turns each image upright (``ImageOps.exif_transpose``): the
        loader's ``exif_transpose`` default."""
        return self.traced.upright

    def __getitem__(self, position: int) -> Tuple[Data, Any]:
        index = position if self.indices is None else self.indices[position]
        run, getitem = self._runner()
        # A .mode read answers RGB: the trace found every mode read alike.
        _trace.mode = "RGB"
        try:
            out = _call(getitem, run, index)
        except Untraceable as e:
            raise TypeError(
                f"{self.name}.__getitem__ {e.reason}, unlike dataset[0] (read "
                "natively as it opens, converts to RGB and transforms the image)"
            ) from None
        split = self.traced.layout.split(out)
        if split is None:
            raise TypeError(
                f"{self.name}.__getitem__ returned a sample laid out otherwise "
                f"than dataset[0]'s ({self.traced.layout.describe()}), which the loader reads so"
            )
        image, target = split
        if (image.image.steps, image.image.upright) != (self.traced.steps, self.traced.upright):
            raise TypeError(
                f"{self.name}.__getitem__ converted or turned the image "
                "otherwise than dataset[0]'s, which the loader reads so"
            )
        if image.transform is not self.traced.transform:
            raise TypeError(
                f"{self.name}.__getitem__ applied {_name(image.transform)}, not "
                "the transform the loader converted when it was made (set another since?): make "
                "the loader again to run the new one"
            )
        # The loader names the sample: `dataset[i]: TypeError: ...`.
        why = None if self._file_check is None else self._file_check(image.image.source)
        if why is not None:
            raise TypeError(f"{self.name}.__getitem__ {why}")
        return image.image.source, target

    def ferroloader_item_name(self, position: int) -> Optional[str]:
        """The dataset's name for the item in the loader's errors, if it gives one
        (:func:`item_name`)."""
        return item_name(self.dataset, position if self.indices is None else self.indices[position])

    @functools.cached_property
    def _file_check(self) -> Optional[Callable[[Data], Optional[str]]]:
        """What each file must be for the native RGB decode to be what ``__getitem__`` makes
        of it (a function saying why not, ``None`` where it is fine): ``torchvision.io``'s decode
        (:func:`_decodes_as_rgb`), or an image handed to the transform as opened, unless the
        transform starts by making it gray (as ``Grayscale`` makes any mode)
        (:func:`_opens_rgb`); ``None``: every file is."""
        tensor = next((step for step in self.traced.steps if step[0] == _AS_TENSOR), None)
        if tensor is not None:
            return functools.partial(_decodes_as_rgb, mode=tensor[1], only=tensor[2])
        if _AS_OPENED not in self.traced.steps:
            return None
        first = getattr(self.traced.transform, "transforms", [self.traced.transform])[:1]
        return None if first and type(first[0]).__name__ == "Grayscale" else _opens_rgb

    def __getstate__(self) -> Dict[str, Any]:
        return {"dataset": self.dataset, "indices": self.indices, "name": self.name, "_run": None, "_seen": []}

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.__dict__.update(state)
        traced = trace_getitem(self.dataset)
        if isinstance(traced, str):
            raise TypeError(f"dataset: {self.name}.__getitem__ {traced}")
        self.traced = traced


class _ConcatItems(TracedItems):
    """:meth:`TracedItems.concat`'s: sample ``i`` is the part's it falls in, as
    ``ConcatDataset`` finds it."""

    def __init__(self, parts: List[TracedItems]) -> None:
        super().__init__(parts[0].dataset, parts[0].traced)
        self.parts = parts
        self.ends: List[int] = []
        for part in parts:
            self.ends.append((self.ends[-1] if self.ends else 0) + len(part))
        self.name = "ConcatDataset"

    def __len__(self) -> int:
        return self.ends[-1]

    def __getitem__(self, position: int) -> Tuple[Data, Any]:
        k = bisect.bisect_right(self.ends, position)
        return self.parts[k][position - (self.ends[k - 1] if k else 0)]

    def ferroloader_item_name(self, position: int) -> Optional[str]:
        k = bisect.bisect_right(self.ends, position)
        return self.parts[k].ferroloader_item_name(position - (self.ends[k - 1] if k else 0))

    def subset(self, indices: List[int]) -> "TracedItems":
        return _SubsetItems(self, indices)

    def __getstate__(self) -> Dict[str, Any]:
        return {"parts": self.parts}

    def __setstate__(self, state: Dict[str, Any]) -> None:
        _ConcatItems.__init__(self, state["parts"])


class _SubsetItems(TracedItems):
    """A ``Subset`` of :class:`_ConcatItems`: its ``indices``-th items."""

    def __init__(self, items: TracedItems, indices: List[int]) -> None:
        super().__init__(items.dataset, items.traced, indices)
        self.items = items

    def __getitem__(self, position: int) -> Tuple[Data, Any]:
        assert self.indices is not None
        return self.items[self.indices[position]]

    def subset(self, indices: List[int]) -> "TracedItems":
        assert self.indices is not None
        return _SubsetItems(self.items, [self.indices[i] for i in indices])

    def __getstate__(self) -> Dict[str, Any]:
        return {"items": self.items, "indices": self.indices}

    def __setstate__(self, state: Dict[str, Any]) -> None:
        _SubsetItems.__init__(self, state["items"], state["indices"])

