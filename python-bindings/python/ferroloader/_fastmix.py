"""timm's ``FastCollateMixup`` on each batch the native loader delivers: the uint8 pixels mixed
in place by ``_native.fast_collate_mix`` (timm's float32 arithmetic and rounding, bit for bit,
with the GIL released), the targets timm's own ``mixup_target`` of the same lambdas.

timm runs it as the ``collate_fn`` of its worker processes (``train.py`` with ``--mixup`` or
``--cutmix`` and the prefetcher); run as given on the native batches, it would take the
consuming thread per-sample Python and torch ops (~13 ms a batch of 64 at 224 px).

The draws are timm's (``_params_per_batch``/``_params_per_elem``, ``cutmix_bbox_and_lam``,
replayed here call for call, reading the object's attributes, ``mixup_enabled`` included, when
each batch is mixed) from a ``RandomState`` keyed by ``(seed, epoch, batch)`` instead of numpy's
global one, so a batch is mixed alike whatever ``num_workers`` and on resume. Given numpy's
global generator's state, :func:`plan` makes the draws timm's ``__call__`` would make.
This module must not touch the images but through ``fast_collate_mix``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple, Union

import numpy as np

from ferroloader import _native
from ferroloader._batchmix import batch_entropy

#: One sample's mix: ``None`` kept, a float ``lam`` blended, a box ``(x1, y1, x2, y2)`` cut in.
Mix = Union[None, float, Tuple[int, int, int, int]]

#: The modes timm's ``__call__`` mixes (any other without ``half`` mixes as ``batch``).
_MODES = ("batch", "pair", "elem", "half")


def is_fast_collate_mixup(fn: Any) -> bool:
    """Whether ``fn`` is a timm ``FastCollateMixup``."""
    return type(fn).__name__ == "FastCollateMixup" and type(fn).__module__.startswith("timm.data")


def _mode(mixup: Any) -> Optional[str]:
    """The mode ``mixup`` mixes in natively now, or ``None`` where timm's own call must run
    (multi-label targets, a ``*half`` mode timm fails on, no alpha: timm's assertion)."""
    if getattr(mixup, "multi_label", False):
        return None
    if not (mixup.mixup_alpha > 0.0 or mixup.cutmix_alpha > 0.0):
        return None
    mode = str(mixup.mode)
    if mode in _MODES:
        return mode
    return None if "half" in mode else "batch"


@dataclass(frozen=True)
class Plan:
    """One batch's draws: each output sample's mix and the lambdas ``mixup_target`` takes (a
    float for ``batch`` mode, else timm's float32 ``[B, 1]`` tensor)."""

    mode: str
    mixes: List[Mix]
    lam: Any


def _rand_bbox(rng: Any, img_shape: Tuple[int, ...], lam: Any) -> Tuple[Any, Any, Any, Any]:
    """timm's ``rand_bbox`` (no margin), drawing from ``rng``."""
    ratio = np.sqrt(1 - lam)
    img_h, img_w = img_shape[-2:]
    cut_h, cut_w = int(img_h * ratio), int(img_w * ratio)
    cy = rng.randint(0, img_h)
    cx = rng.randint(0, img_w)
    # timm's np.clip of these Python ints, without its cost per call: the same values.
    yl = min(max(cy - cut_h // 2, 0), img_h)
    yh = min(max(cy + (cut_h + 1) // 2, 0), img_h)
    xl = min(max(cx - cut_w // 2, 0), img_w)
    xh = min(max(cx + (cut_w + 1) // 2, 0), img_w)
    return yl, yh, xl, xh


def _rand_bbox_minmax(rng: Any, img_shape: Tuple[int, ...], minmax: Any) -> Tuple[Any, Any, Any, Any]:
    """timm's ``rand_bbox_minmax``, drawing from ``rng``."""
    img_h, img_w = img_shape[-2:]
    cut_h = rng.randint(int(img_h * minmax[0]), int(img_h * minmax[1]))
    cut_w = rng.randint(int(img_w * minmax[0]), int(img_w * minmax[1]))
    yl = rng.randint(0, img_h - cut_h + 1)
    xl = rng.randint(0, img_w - cut_w + 1)
    return yl, yl + cut_h, xl, xl + cut_w


def _cut(rng: Any, mixup: Any, img_shape: Tuple[int, ...], lam: Any) -> Tuple[Tuple[int, int, int, int], Any]:
    """timm's ``cutmix_bbox_and_lam``: the box ``(x1, y1, x2, y2)`` and the lambda."""
    if mixup.cutmix_minmax is not None:
        yl, yu, xl, xu = _rand_bbox_minmax(rng, img_shape, mixup.cutmix_minmax)
    else:
        yl, yu, xl, xu = _rand_bbox(rng, img_shape, lam)
    if mixup.correct_lam or mixup.cutmix_minmax is not None:
        bbox_area = (yu - yl) * (xu - xl)
        lam = 1.0 - bbox_area / float(img_shape[-2] * img_shape[-1])
    return (int(xl), int(yl), int(xu), int(yu)), lam


def _params_per_elem(rng: Any, mixup: Any, batch_size: int) -> Tuple[np.ndarray, np.ndarray]:
    """timm's ``Mixup._params_per_elem``, drawing from ``rng`` in the same order."""
    lam = np.ones(batch_size, dtype=np.float32)
    use_cutmix = np.zeros(batch_size, dtype=bool)
    if mixup.mixup_enabled:
        if mixup.mixup_alpha > 0.0 and mixup.cutmix_alpha > 0.0:
            use_cutmix = rng.rand(batch_size) < mixup.switch_prob
            lam_mix = np.where(
                use_cutmix,
                rng.beta(mixup.cutmix_alpha, mixup.cutmix_alpha, size=batch_size),
                rng.beta(mixup.mixup_alpha, mixup.mixup_alpha, size=batch_size),
            )
        elif mixup.mixup_alpha > 0.0:
            lam_mix = rng.beta(mixup.mixup_alpha, mixup.mixup_alpha, size=batch_size)
        else:
            use_cutmix = np.ones(batch_size, dtype=bool)
            lam_mix = rng.beta(mixup.cutmix_alpha, mixup.cutmix_alpha, size=batch_size)
        lam = np.where(rng.rand(batch_size) < mixup.mix_prob, lam_mix.astype(np.float32), lam)
    return lam, use_cutmix


def _params_per_batch(rng: Any, mixup: Any) -> Tuple[float, bool]:
    """timm's ``Mixup._params_per_batch``, drawing from ``rng`` in the same order."""
    lam = 1.0
    use_cutmix = False
    if mixup.mixup_enabled and rng.rand() < mixup.mix_prob:
        if mixup.mixup_alpha > 0.0 and mixup.cutmix_alpha > 0.0:
            use_cutmix = rng.rand() < mixup.switch_prob
            lam_mix = (
                rng.beta(mixup.cutmix_alpha, mixup.cutmix_alpha)
                if use_cutmix
                else rng.beta(mixup.mixup_alpha, mixup.mixup_alpha)
            )
        elif mixup.mixup_alpha > 0.0:
            lam_mix = rng.beta(mixup.mixup_alpha, mixup.mixup_alpha)
        else:
            use_cutmix = True
            lam_mix = rng.beta(mixup.cutmix_alpha, mixup.cutmix_alpha)
        lam = float(lam_mix)
    return lam, bool(use_cutmix)


def plan(mixup: Any, rng: Any, batch_size: int, height: int, width: int) -> Optional[Plan]:
    """The draws timm's ``mixup(batch)`` makes for a batch of ``batch_size`` samples of
    ``height`` x ``width``, from ``rng`` (a ``RandomState``, or ``np.random`` itself: then
    exactly timm's), and what each output sample becomes; ``None`` where timm's own call must
    run (see ``_mode``; an odd batch, which timm refuses)."""
    mode = _mode(mixup)
    if mode is None or batch_size % 2:
        return None
    half = mode == "half"
    out_shape = (batch_size // 2 if half else batch_size, 1, height, width)
    import torch

    if mode == "batch":
        lam, batch_cutmix = _params_per_batch(rng, mixup)
        box: Optional[Tuple[int, int, int, int]] = None
        if batch_cutmix:
            box, lam = _cut(rng, mixup, out_shape, lam)
        mix: Mix = None if lam == 1.0 else box if box is not None else float(lam)
        return Plan(mode, [mix] * batch_size, lam)
    count = out_shape[0] if mode != "pair" else batch_size // 2
    lam_batch, use_cutmix = _params_per_elem(rng, mixup, count)
    mixes: List[Mix] = []
    for i in range(count):
        lam = lam_batch[i]
        if mode == "pair" and not 0 <= lam <= 1.0:
            raise AssertionError(f"FastCollateMixup: lam {lam} is not in [0, 1]")  # timm's assert
        if lam == 1.0:
            mixes.append(None)
        elif use_cutmix[i]:
            box, lam = _cut(rng, mixup, out_shape, lam)
            lam_batch[i] = lam
            mixes.append(box)
        else:
            mixes.append(float(lam))
    if mode == "pair":
        mixes += mixes[::-1]
        lam_batch = np.concatenate((lam_batch, lam_batch[::-1]))
    elif half:
        lam_batch = np.concatenate((lam_batch, np.ones(count, dtype=lam_batch.dtype)))
    return Plan(mode, mixes, torch.tensor(lam_batch).unsqueeze(1))


def batch_rng(key: Tuple[int, int, int]) -> np.random.RandomState:
    """The generator of batch ``key`` (``(seed, epoch, batch)``): timm's draws are
    ``RandomState`` methods, so a ``RandomState`` makes them as numpy's global one does."""
    return np.random.RandomState(np.frombuffer(batch_entropy("fast_collate_mixup", key), dtype=np.uint32))


class FastCollateMix:
    """A timm ``FastCollateMixup`` run on the native uint8 batches (:meth:`apply`); the object
    is read each batch, so setting its ``mixup_enabled`` (timm's ``--mixup-off-epoch``) or any
    other attribute takes effect from the next batch."""

    def __init__(self, mixup: Any) -> None:
        self.mixup = mixup

    @staticmethod
    def of(collate_fn: Any) -> Optional["FastCollateMix"]:
        """The batch op ``collate_fn`` is, or ``None`` for anything but a ``FastCollateMixup``."""
        return FastCollateMix(collate_fn) if is_fast_collate_mixup(collate_fn) else None

    def prepare(self, key: Tuple[int, int, int], samples: int, height: int, width: int) -> Optional[Plan]:
        """The draws of batch ``key`` of ``samples`` images of ``height`` x ``width``, made
        ahead of the batch (``mixup_enabled`` is read now); ``None`` where timm's own call must
        run (see :func:`plan`)."""
        return plan(self.mixup, batch_rng(key), samples, height, width)

    @staticmethod
    def native_plan(drawn: Plan) -> Tuple[str, Dict[str, Any]]:
        """The profile name and the ``EpochIter.plan_mix`` arguments that mix as ``drawn``."""
        return f"FastCollateMixup/{drawn.mode}", {"mixes": drawn.mixes}

    def finish(self, images: np.ndarray, labels: np.ndarray, drawn: Plan, mixed: bool) -> Tuple[np.ndarray, Any, str]:
        """Mixes ``images`` (the uint8 ``[B, C, H, W]`` batch, in place) as ``drawn`` says,
        unless a worker did (``mixed``); returns timm's output (``images``, or in ``half`` mode
        a view of its first half), the targets (timm's ``mixup_target``) and the profile name
        (``"FastCollateMixup/<mode>"``)."""
        import torch
        from timm.data import mixup as timm_mixup

        mixup_target: Any = timm_mixup.mixup_target
        mixup = self.mixup
        if not mixed:
            _native.fast_collate_mix(images, drawn.mixes)
        # Not multi-label here (see `_mode`); older timm (1.0.29) takes no `multi_label`.
        target = mixup_target(torch.from_numpy(labels), mixup.num_classes, drawn.lam, mixup.label_smoothing)
        name = self.native_plan(drawn)[0]
        if drawn.mode == "half":
            half = len(labels) // 2
            return images[:half], target[:half], name
        return images, target, name

    def apply(self, images: np.ndarray, labels: np.ndarray, key: Tuple[int, int, int]) -> Tuple[np.ndarray, Any, str]:
        """:meth:`finish` with the draws of batch ``key``, mixing the images here. Where timm's
        own call must run (see :func:`plan`), runs it on the samples (it then raises where
        timm's does) and returns its output."""
        import torch

        drawn = self.prepare(key, len(labels), images.shape[-2], images.shape[-1])
        if drawn is None:
            mixup = self.mixup
            output, target = mixup([(torch.from_numpy(images[i]), int(label)) for i, label in enumerate(labels)])
            return output.numpy(), target, "FastCollateMixup"
        return self.finish(images, labels, drawn, mixed=False)
