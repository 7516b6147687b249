"""A transformers image processor (``ViTImageProcessor``, what ``AutoImageProcessor`` gives for
ViT, Swin, ...) as the torchvision transform the native loader runs for it.

Hugging Face's fine-tuning examples often preprocess with the model's processor rather than a
torchvision transform: ``processor([x for x in batch["image"]], return_tensors="pt")`` in a
``with_transform`` function, or ``processor(image, return_tensors="pt")["pixel_values"][0]`` in
a dataset class. transformers 5's processors run on torchvision (``TorchvisionBackend``): the
PIL image as a uint8 tensor, ``resize`` (antialiased), ``center_crop``, then rescale and
normalize fused into one float op. Where a processor's class runs that pipeline as the base
class writes it, its settings are a ``torchvision.transforms.v2`` pipeline: ``ToImage()``,
``Resize(size, interpolation, antialias=True)``, ``CenterCrop`` (see below),
``ToDtype(torch.float32, scale=True)``, ``Normalize(mean, std)``: the same pixels, the floats
within a few units in the last place (the processor divides by ``std * 255`` after
subtracting ``mean * 255``; torchvision scales first).

Not converted, with the reason: a class overriding any step (ConvNext's ``crop_pct``...), a
center crop of images of their own sizes (the processor places it at ``int((h - crop) / 2)``,
torchvision at ``round``: a pixel apart for some sizes; after a resize to a fixed height and
width, DeiT's, the offsets are known, and converted where they agree), padding, resampling
other than bilinear and bicubic, a rescale other than 1/255 or without it, sizes by longest
edge or maximum, ``do_convert_rgb`` (CLIP's, BiT's: it composites alpha, and a transparent
colour, onto white, even of an image ``.convert("RGB")`` made, whose transparent colour Pillow
keeps; the loader's RGB decode leaves the colours).

What this module must not do: run or change the processor.
"""

from __future__ import annotations

import copy
import sys
from typing import Any, Dict, List, Tuple, Union

__all__ = ["is_image_processor", "processor_transform"]

#: The base class's methods the conversion stands for: a class overriding one runs otherwise.
_BASE_STEPS = (
    "__call__", "preprocess", "_preprocess_image_like_inputs", "_prepare_image_like_inputs",
    "process_image", "_standardize_kwargs", "_further_process_kwargs", "_preprocess", "resize",
    "center_crop", "rescale_and_normalize", "normalize", "rescale",
)

#: Each processor converted, by ``id``: the processor (kept, so the id is not reused), its
#: settings' values when converted and the transform (one object while the settings hold: the
#: trace compares transforms by identity, once per sample).
_CONVERTED: Dict[int, Tuple[Any, Tuple[Any, ...], Any]] = {}


def is_image_processor(value: Any) -> bool:
    """Whether ``value`` is a transformers image processor (any backend)."""
    utils = sys.modules.get("transformers.image_processing_utils")
    base = getattr(utils, "BaseImageProcessor", None)
    return base is not None and isinstance(value, base)


def processor_transform(processor: Any) -> Union[Any, str]:
    """The ``torchvision.transforms.v2`` pipeline ``processor`` is (the same object while its
    settings stay), or why it is not one."""
    names = processor._valid_kwargs_names
    # Copies: a setting changed in place (processor.size["height"] = 32) is a change too.
    values = tuple(copy.copy(getattr(processor, name, None)) for name in names)
    held = _CONVERTED.get(id(processor))
    if held is not None and held[0] is processor and held[1] == values:
        return held[2]
    # The settings as the processor's ``preprocess`` resolves them with no overrides given
    # (on copies again: the stored values stay as read).
    settings = dict(processor._standardize_kwargs(**{name: copy.copy(v) for name, v in zip(names, values)}))
    made = _convert(processor, settings)
    if not isinstance(made, str):
        _CONVERTED[id(processor)] = (processor, values, made)
    return made


def _center_crop(name: str, s: Dict[str, Any]) -> Union[Tuple[int, int], str]:
    """The processor's center crop as torchvision's ``CenterCrop`` size, where it places it as
    torchvision does: the processor at ``int((size - crop) / 2)``, torchvision at ``round``,
    which differ by a pixel where that is ``k + 0.5`` for an odd ``k``. Only a resize to a fixed
    height and width (DeiT's 256 x 256 before its 224 crop) tells the offsets for every image."""
    crop = s["crop_size"]
    size = s["size"]
    if not (crop.height and crop.width):
        return f"uses {name} with crop_size={dict(crop)!r} (height and width are converted)"
    if not (s.get("do_resize") and size.height and size.width and not size.shortest_edge):
        return (f"uses {name} with a center crop of images of their own sizes, which it places at "
                "int((size - crop) / 2), torchvision's CenterCrop at round(): a pixel apart for some")
    for outer, inner in ((size.height, crop.height), (size.width, crop.width)):
        if inner > outer:
            return f"uses {name} with a center crop larger than the image (padded)"
        if int((outer - inner) / 2.0) != int(round((outer - inner) / 2.0)):
            return (f"uses {name} with a center crop of {inner} from {outer}, which it places at "
                    "int((size - crop) / 2), torchvision's CenterCrop at round(): a pixel apart")
    return crop.height, crop.width


def _convert(processor: Any, settings: Dict[str, Any]) -> Union[Any, str]:
    backends = sys.modules.get("transformers.image_processing_backends")
    base = getattr(backends, "TorchvisionBackend", None)
    name = type(processor).__name__
    if base is None or not isinstance(processor, base):
        return f"uses {name}, not a transformers 5 image processor on torchvision"
    overridden = [step for step in _BASE_STEPS if getattr(type(processor), step, None) is not getattr(base, step, None)]
    if overridden:
        return f"uses {name}, whose class preprocesses its own way ({', '.join(overridden)})"
    import torch
    import torchvision.transforms.v2 as v2  # type: ignore[import-untyped]
    from transformers.image_utils import pil_torch_interpolation_mapping

    s = settings
    if s.get("do_convert_rgb"):
        return (f"uses {name} with do_convert_rgb=True, which composites alpha and a transparent "
                "colour onto white (the loader's RGB decode leaves the colours)")
    if s.get("do_pad"):
        return f"uses {name} with do_pad=True"
    ops: List[Any] = [v2.ToImage()]
    if s.get("do_resize"):
        size = s["size"]
        resample = s.get("resample")
        mode = pil_torch_interpolation_mapping.get(resample, resample)  # type: ignore[arg-type]
        if mode not in (v2.InterpolationMode.BILINEAR, v2.InterpolationMode.BICUBIC):
            return f"uses {name} with resample={resample!r} (bilinear and bicubic are converted)"
        if size.height and size.width and not (size.shortest_edge or size.longest_edge):
            target: Any = (size.height, size.width)
        elif size.shortest_edge and not (size.longest_edge or size.height or size.width):
            target = size.shortest_edge
        else:
            return f"uses {name} with size={dict(size)!r} (height and width, or shortest_edge, are converted)"
        ops.append(v2.Resize(target, interpolation=mode, antialias=True))
    if s.get("do_center_crop"):
        crop = _center_crop(name, s)
        if isinstance(crop, str):
            return crop
        ops.append(v2.CenterCrop(crop))
    if not s.get("do_rescale") or abs(float(s.get("rescale_factor") or 0) * 255 - 1) > 1e-12:
        return f"uses {name} with do_rescale={s.get('do_rescale')}, rescale_factor={s.get('rescale_factor')} (1/255 is converted)"
    ops.append(v2.ToDtype(torch.float32, scale=True))
    if s.get("do_normalize"):
        mean, std = s["image_mean"], s["image_std"]
        ops.append(v2.Normalize(
            [float(mean)] * 3 if isinstance(mean, (int, float)) else [float(v) for v in mean],
            [float(std)] * 3 if isinstance(std, (int, float)) else [float(v) for v in std],
        ))
    return v2.Compose(ops)
