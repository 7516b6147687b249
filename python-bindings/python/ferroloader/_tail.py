"""The Python side of a Python tail: what the native worker calls around the tail's ops.

A transform with no native equivalent runs after the longest native prefix, on what
torchvision would hand it there. The native worker (``python-bindings/src/tail.rs``) holds the
GIL and a process-wide tail lock, then calls, for each sample: :meth:`TailRunner.enter` (seed
the global generators), :meth:`TailRunner.to_input`, each op in turn (each in its own profiler
span), :meth:`TailRunner.to_output`, and always :meth:`TailRunner.exit` (restore the
generators). This module must not run ops itself, nor keep state between samples: a sample's
result may depend only on its bytes and its ``(seed, epoch, index)`` key.
"""

from __future__ import annotations

import io
import random
from typing import Any, Callable, Optional, Tuple

import numpy as np

#: What the tail gets: the file's bytes decoded by Pillow (no native prefix), the native
#: prefix's RGB image as a PIL image, or its tensor (uint8 or float32, CHW).
INPUT_KINDS = ("bytes", "image", "uint8", "float32")

#: The global generators' states: torch's CPU one (``None`` without torch), ``random``'s, numpy's.
RngState = Tuple[Any, Any, Any]


def seed_generators(seed: int, torch: Optional[Any]) -> RngState:
    """Seeds torch's CPU generator (when ``torch``, the module, is given), ``random`` and numpy's
    global generator from ``seed`` (a sample's derived seed, < 2**63) and returns their previous
    states, so that the consumer's own draws are not moved by the loader's samples."""
    saved = save_generators(torch)
    reseed_generators(seed, torch)
    return saved


def save_generators(torch: Optional[Any]) -> RngState:
    """The global generators' states, for :func:`restore_generators`."""
    return (
        None if torch is None else torch.random.default_generator.get_state(),
        random.getstate(),
        np.random.get_state(),
    )


def reseed_generators(seed: int, torch: Optional[Any]) -> None:
    """:func:`seed_generators` without saving the states first, for a process whose generators
    serve the loader alone (a DataLoader worker): saving and restoring numpy's costs ~75 us."""
    if torch is not None:
        # The CPU generator only: torch.manual_seed would also reseed every CUDA device.
        torch.random.default_generator.manual_seed(seed)
    random.seed(seed)
    np.random.seed(seed % 2**32)


def restore_generators(saved: RngState, torch: Optional[Any]) -> None:
    """Restores the states :func:`seed_generators` returned."""
    torch_state, random_state, numpy_state = saved
    if torch_state is not None and torch is not None:
        torch.random.default_generator.set_state(torch_state)
    random.setstate(random_state)
    np.random.set_state(numpy_state)


class TailRunner:
    """Converts between the native prefix's buffers and Python objects, and scopes the seeding.

    ``input_kind`` is one of :data:`INPUT_KINDS`; ``output`` (``"float32"`` or ``"uint8"``)
    says how a PIL image left at the end of the tail becomes a tensor: as ``ToTensor`` or as
    ``PILToTensor`` would convert it; ``mode`` is the dataset's images' Pillow mode (``"RGB"``
    or ``"L"``), what a PIL image handed to the tail is in; ``exif_transpose`` transposes the
    image Pillow opens (kind ``"bytes"``) per its EXIF Orientation, under Hugging Face
    ``datasets``' condition (the tag present), as the native decode does with the option (a
    native prefix's pixels are transposed already).
    """

    def __init__(
        self, input_kind: str, output: str, mode: str = "RGB", exif_transpose: bool = False
    ) -> None:
        if input_kind not in INPUT_KINDS:
            raise ValueError(f"python tail: input kind must be one of {INPUT_KINDS}, got {input_kind!r}")
        self.input_kind = input_kind
        self.output = output
        self.mode = mode
        self.exif_transpose = exif_transpose
        try:
            import torch
        except ImportError:  # a tail of plain callables on numpy arrays still works
            self._torch: Optional[Any] = None
        else:
            self._torch = torch

    def enter(self, seed: int) -> RngState:
        """:func:`seed_generators` for one sample; returns what :meth:`exit` restores."""
        return seed_generators(seed, self._torch)

    def exit(self, saved: RngState) -> None:
        """Restores the states :meth:`enter` returned."""
        restore_generators(saved, self._torch)

    def to_input(self, data: Any) -> Any:
        """The tail's first argument: ``data`` is the file's bytes (kind ``"bytes"``), the
        prefix's ``[H, W, C]`` uint8 array (``"image"``) or its ``[C, H, W]`` array."""
        if self.input_kind == "bytes":
            from PIL import Image

            # torchvision's pil_loader: open, then convert("RGB") (MNIST's images are "L").
            with Image.open(io.BytesIO(data)) as img:
                if self.exif_transpose:
                    from PIL import ExifTags, ImageOps

                    # Hugging Face's Image.decode_example: load, then transpose where the tag is.
                    img.load()
                    if img.getexif().get(ExifTags.Base.Orientation) is not None:
                        return ImageOps.exif_transpose(img).convert(self.mode)
                return img.convert(self.mode)
        if self.input_kind == "image":
            from PIL import Image

            return Image.fromarray(data[:, :, 0], "L") if data.shape[2] == 1 else Image.fromarray(data, "RGB")
        if self._torch is not None:
            return self._torch.from_numpy(data)
        return data

    def to_output(self, result: Any) -> np.ndarray:
        """The tail's result as a C-contiguous float32 or uint8 array of any shape (batches stack
        it as DataLoader does: ``FiveCrop``'s ``(5, 3, H, W)`` makes ``(B, 5, 3, H, W)``): a tensor
        or array as it is, a PIL image as ``ToTensor`` (``output="float32"``) or
        ``PILToTensor`` (``"uint8"``) would convert it. Raises ``TypeError`` naming what was
        returned otherwise."""
        torch = self._torch
        if torch is not None and isinstance(result, torch.Tensor):
            array = result.detach().cpu().contiguous().numpy()
        elif isinstance(result, np.ndarray):
            array = result
        elif _is_pil_image(result):
            pixels = np.asarray(result)
            if pixels.dtype != np.uint8:
                raise TypeError(
                    f"returned a PIL image of mode {result.mode!r}; only 8-bit images convert "
                    "to a batch (add ToTensor to the transform)"
                )
            if pixels.ndim == 2:
                pixels = pixels[:, :, None]
            chw = pixels.transpose(2, 0, 1)
            array = chw.astype(np.float32) / np.float32(255) if self.output == "float32" else chw
        else:
            several = (
                " (a transform returning several views runs in worker processes or with "
                "num_workers=0, not in the native threads nor over shards)"
                if is_structured(result)
                else ""
            )
            raise TypeError(
                f"returned {type(result).__module__}.{type(result).__qualname__}; expected a "
                f"tensor, a numpy array or a PIL image{several}"
            )
        if array.dtype not in (np.float32, np.uint8):
            raise TypeError(f"returned {array.dtype} values; batches hold float32 or uint8")
        return np.ascontiguousarray(array)

    def to_views(self, result: Any) -> Any:
        """A list, tuple or dict result (several views of the image: MoCo's
        ``TwoCropsTransform``, SimCLR's view generator, DINO's multi-crop) with each image in
        it converted as :meth:`to_output` converts a single one, nested containers alike, and
        anything else (a number, a string) left for the collate to take, as DataLoader leaves
        it; any other result is :meth:`to_output`'s. Such samples cannot be written into a
        native batch slot: they are collated as DataLoader collates them (``TailSamples``)."""
        return map_views(lambda x: self.to_output(x) if self._is_image(x) else x, result)

    def _is_image(self, obj: Any) -> bool:
        torch = self._torch
        return (
            (torch is not None and isinstance(obj, torch.Tensor))
            or isinstance(obj, np.ndarray)
            or _is_pil_image(obj)
        )


def read_sample(source: Any, index: int) -> Tuple[str, bytes, int]:
    """``(where, encoded bytes, label)`` of sample ``index`` of a source Python can index (a
    list of ``(path, label)``, an ``ImageArray``, a dataset of ``(path or bytes, label)``): an
    array's image as binary PNM, which is how the native loader reads it too."""
    from ferroloader import _native

    if isinstance(source, _native.ImageArray):
        pixels, label = source[index]
        h, w = pixels.shape[:2]
        kind = b"P5" if pixels.ndim == 2 or pixels.shape[2] == 1 else b"P6"
        data = b"%s\n%d %d\n255\n" % (kind, w, h) + np.ascontiguousarray(pixels).tobytes()
        return f"{source.name}[{index}]", data, int(label)
    item, label = source[index]
    if isinstance(item, (bytes, bytearray)):
        return f"dataset[{index}]", bytes(item), int(label)
    with open(item, "rb") as f:
        return str(item), f.read(), int(label)


def map_views(fn: Callable[[Any], Any], sample: Any) -> Any:
    """``sample`` with ``fn`` applied to everything in it that is not a list, tuple or dict,
    those kept (a namedtuple rebuilt field by field)."""
    if isinstance(sample, dict):
        return {k: map_views(fn, v) for k, v in sample.items()}
    if isinstance(sample, (list, tuple)):
        items = [map_views(fn, v) for v in sample]
        if isinstance(sample, tuple) and hasattr(sample, "_fields"):
            return type(sample)(*items)
        return type(sample)(items)
    return fn(sample)


def is_structured(result: Any) -> bool:
    """Whether a tail's result is a container of samples (see :meth:`TailRunner.to_views`)."""
    return isinstance(result, (list, tuple, dict))


def _is_pil_image(obj: object) -> bool:
    try:
        from PIL import Image
    except ImportError:
        return False
    return isinstance(obj, Image.Image)
