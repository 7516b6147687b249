"""timm's ``create_loader``, with ferroloader underneath: the one line a timm training script
(``train.py``, or any script built on ``timm.data``) changes to load natively.

>>> from ferroloader.timm import create_loader   # was: from timm.data import create_loader

:func:`create_loader` takes timm's arguments, in timm's order, and does what timm's does with
them: it sets ``dataset.transform`` to ``timm.data.create_transform(...)`` of the same arguments,
makes the same sampler (``DistributedSampler``, timm's ``RepeatAugSampler`` or
``OrderedDistributedSampler``), batches with ``drop_last`` and shuffling on for training, and,
with ``use_prefetcher=True`` (timm's default), hands out the batches through a
:class:`PrefetchLoader` as timm's does: uint8 batches copied to ``device`` on a side stream,
normalized there in ``img_dtype`` as ``(x - 255 * mean) / (255 * std)``, timm's
``RandomErasing`` applied there to the whole batch, and a ``FastCollateMixup`` given as
``collate_fn`` mixing each batch (natively: ``ferroloader._fastmix``; as timm's collate, bit
for bit, with draws keyed per batch; ``loader.mixup_enabled`` switches it, as timm's
``train.py`` does at ``--mixup-off-epoch``). Underneath, a :class:`ferroloader.Loader` decodes
and transforms in native worker threads; what differs from timm's loader:

- the augmentation draws (the same distributions) come from per-sample generators seeded from
  ``seed``, drawn from torch's default generator when the loader is made (so timm's ``--seed``
  decides them), not from each worker process's; so ``worker_seeding`` has nothing to seed and
  ``num_workers`` counts threads;
- ``loader.state_dict()``/``load_state_dict()`` resume an epoch mid-way, exactly;
- ``use_multi_epochs_loader`` and ``persistent_workers`` change nothing: the workers are
  threads, whose start per epoch costs nothing.

What it does not do natively (``tf_preprocessing``, scheduled input sizes, ``num_aug_splits``:
AugMix's split batches) it leaves to timm's own ``create_loader``, with a ``UserWarning`` naming
the argument. This module must not compute pixels itself: the native loader and timm's objects
do.
"""

from __future__ import annotations

import warnings
from contextlib import nullcontext
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterator, Optional, Sequence, Tuple, Union

from ferroloader._fastmix import is_fast_collate_mixup
from ferroloader.datasets import timm_read_natively
from ferroloader.loader import Loader, ProfileMode
from ferroloader.profiling import Profile

if TYPE_CHECKING:
    import torch

IMAGENET_DEFAULT_MEAN = (0.485, 0.456, 0.406)
IMAGENET_DEFAULT_STD = (0.229, 0.224, 0.225)


class PrefetchLoader:
    """timm's ``PrefetchLoader`` over a :class:`ferroloader.Loader` of uint8 batches: each batch
    copied to ``device`` on a side stream while the consumer works on the previous one (on
    CUDA; on another device, in line), converted to ``img_dtype``, normalized as
    ``(x - 255 * mean) / (255 * std)``, then erased by timm's ``RandomErasing`` when
    ``re_prob > 0``. Batches must be consumed on the stream current when the iterator advances,
    as with timm's.

    Invariant: ``state_dict()`` is where the consumer stands, the batch held ahead on the
    device not counted, so a resumed loader yields next the batch this one would have yielded
    next."""

    def __init__(
        self,
        loader: Loader,
        mean: Union[float, Sequence[float]] = IMAGENET_DEFAULT_MEAN,
        std: Union[float, Sequence[float]] = IMAGENET_DEFAULT_STD,
        channels: int = 3,
        device: Optional[Union[str, "torch.device"]] = None,
        img_dtype: Optional["torch.dtype"] = None,
        fp16: bool = False,
        re_prob: float = 0.0,
        re_mode: str = "const",
        re_count: int = 1,
        re_num_splits: int = 0,
    ) -> None:
        import torch

        self.loader = loader
        self.device = torch.device("cuda") if device is None else torch.device(device)
        # timm's deprecated fp16 flag still overrides img_dtype.
        self.img_dtype = torch.float16 if fp16 else (img_dtype or torch.float32)
        from timm.data import loader as timm_loader

        # timm's own adaptation of a model's statistics to the channels (a scalar repeated, a
        # sequence of another length averaged, with its warning).
        per_channel: Any = timm_loader.adapt_to_chs
        shape = (1, channels, 1, 1)
        self.mean = torch.tensor(
            [255 * v for v in per_channel(mean, channels)], device=self.device, dtype=self.img_dtype
        ).view(shape)
        self.std = torch.tensor(
            [255 * v for v in per_channel(std, channels)], device=self.device, dtype=self.img_dtype
        ).view(shape)
        self.random_erasing: Optional[Callable[[Any], Any]] = None
        if re_prob > 0:
            from timm.data import random_erasing

            erasing: Any = random_erasing.RandomErasing
            self.random_erasing = erasing(
                probability=re_prob,
                mode=re_mode,
                max_count=re_count,
                num_splits=re_num_splits,
                device=self.device,
            )
        self._is_cuda = self.device.type == "cuda" and torch.cuda.is_available()
        # One stream for the loader's life: the caching allocator pools blocks per stream.
        self._stream: Any = None
        # The inner loader's state right after it handed out the batch last yielded here.
        self._consumer_state: Optional[Dict[str, Any]] = None

    def __iter__(self) -> Iterator[Tuple["torch.Tensor", "torch.Tensor"]]:
        import torch

        consumer_stream: Any = None
        if self._is_cuda:
            if self._stream is None:
                stream: Any = torch.cuda.Stream
                self._stream = stream(device=self.device)
            consumer_stream = torch.cuda.current_stream(device=self.device)
        self._consumer_state = None
        ready: Optional[Tuple[Any, Any, Dict[str, Any]]] = None
        for cpu_images, cpu_targets in self.loader:
            state = self.loader.state_dict()
            if consumer_stream is not None:
                # The blocks the consumer freed may be reused below: wait for its queued work.
                self._stream.wait_stream(consumer_stream)
            with torch.cuda.stream(self._stream) if consumer_stream is not None else nullcontext():
                images = cpu_images.to(device=self.device, non_blocking=True)
                targets = cpu_targets.to(device=self.device, non_blocking=True)
                # Dropped here, so a pinned ring buffer waits for this stream's copy.
                del cpu_images, cpu_targets
                images = images.to(self.img_dtype).sub_(self.mean).div_(self.std)
                if self.random_erasing is not None:
                    images = self.random_erasing(images)
            if ready is not None:
                self._consumer_state = ready[2]
                yield ready[0], ready[1]
            if consumer_stream is not None:
                consumer_stream = torch.cuda.current_stream(device=self.device)
                consumer_stream.wait_stream(self._stream)
            ready = (images, targets, state)
        if ready is not None:
            self._consumer_state = ready[2]
            yield ready[0], ready[1]
        self._consumer_state = None

    def __len__(self) -> int:
        return len(self.loader)

    def state_dict(self) -> Dict[str, Any]:
        """Where the consumer stands (see the class's invariant); for ``load_state_dict``."""
        if self._consumer_state is not None:
            return dict(self._consumer_state)
        return self.loader.state_dict()

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """The next ``iter()`` continues where ``state`` was (``Loader.load_state_dict``)."""
        self._consumer_state = None
        self.loader.load_state_dict(state)

    def set_epoch(self, epoch: int) -> None:
        """The epoch the next ``iter()`` loads (``Loader.set_epoch``)."""
        self.loader.set_epoch(epoch)

    def profile(self) -> Profile:
        """The loader's profile (``Loader.profile``; empty unless made with ``profile=``)."""
        return self.loader.profile()

    @property
    def sampler(self) -> Any:
        return self.loader.sampler

    @property
    def batch_sampler(self) -> Any:
        return self.loader.batch_sampler

    @property
    def dataset(self) -> Any:
        return self.loader.dataset

    @property
    def mixup_enabled(self) -> bool:
        """Whether the ``FastCollateMixup`` given as ``collate_fn`` mixes (``False`` without
        one); setting it switches it, as timm's ``train.py`` does."""
        return bool(getattr(self.loader.collate_fn, "mixup_enabled", False))

    @mixup_enabled.setter
    def mixup_enabled(self, enabled: bool) -> None:
        if is_fast_collate_mixup(self.loader.collate_fn):
            self.loader.collate_fn.mixup_enabled = enabled  # type: ignore[union-attr]


def _is_fast_collate(fn: Any) -> bool:
    return getattr(fn, "__name__", None) == "fast_collate" and getattr(fn, "__module__", "").startswith("timm.data")


def _timm_only(
    tf_preprocessing: bool, input_size_choices: Optional[Sequence[Any]], num_aug_splits: int
) -> Optional[str]:
    """Which argument asks for what only timm's own loader does, or ``None``."""
    if tf_preprocessing:
        return "tf_preprocessing=True (TF 1.0 inference preprocessing)"
    if input_size_choices is not None:
        return "input_size_choices (per-batch scheduled input sizes)"
    if num_aug_splits > 0:
        return f"num_aug_splits={num_aug_splits} (AugMix's split batches)"
    return None


def _error_policy(dataset: Any) -> Dict[str, Any]:
    """What a failing sample does, as in timm's loader: timm's ``ImageDataset`` logs it and
    returns the next index's sample instead, up to its ``_ERROR_RETRY`` failures in a row, so
    batches keep their size (``on_error="replace"`` where the dataset is read natively; one
    run in Python retries in its own ``__getitem__``); any other dataset raises."""
    if not timm_read_natively(dataset):
        return {}
    from timm.data import dataset as timm_dataset

    return {"on_error": "replace", "replace_retries": max(0, int(getattr(timm_dataset, "_ERROR_RETRY", 10)) - 1)}


def create_loader(
    dataset: Any,
    input_size: Union[int, Tuple[int, int], Tuple[int, int, int]],
    batch_size: int,
    is_training: bool = False,
    no_aug: bool = False,
    re_prob: float = 0.0,
    re_mode: str = "const",
    re_count: int = 1,
    re_split: bool = False,
    train_crop_mode: Optional[str] = None,
    scale: Optional[Tuple[float, float]] = None,
    ratio: Optional[Tuple[float, float]] = None,
    hflip: float = 0.5,
    vflip: float = 0.0,
    color_jitter: float = 0.4,
    color_jitter_prob: Optional[float] = None,
    grayscale_prob: float = 0.0,
    gaussian_blur_prob: float = 0.0,
    auto_augment: Optional[str] = None,
    num_aug_repeats: int = 0,
    num_aug_splits: int = 0,
    interpolation: str = "bilinear",
    mean: Tuple[float, ...] = IMAGENET_DEFAULT_MEAN,
    std: Tuple[float, ...] = IMAGENET_DEFAULT_STD,
    num_workers: int = 1,
    distributed: bool = False,
    crop_pct: Optional[float] = None,
    crop_mode: Optional[str] = None,
    crop_border_pixels: Optional[int] = None,
    collate_fn: Optional[Callable[..., Any]] = None,
    pin_memory: bool = False,
    fp16: bool = False,
    img_dtype: Optional["torch.dtype"] = None,
    device: Optional[Union[str, "torch.device"]] = None,
    use_prefetcher: bool = True,
    use_multi_epochs_loader: bool = False,
    persistent_workers: bool = True,
    worker_seeding: Union[str, Callable[..., int]] = "all",
    tf_preprocessing: bool = False,
    input_size_choices: Optional[Sequence[Any]] = None,
    batch_size_choices: Optional[Sequence[int]] = None,
    batch_choice_weights: Optional[Sequence[float]] = None,
    batch_choice_seed: int = 0,
    batch_choice_schedule: str = "constant",
    batch_schedule_epochs: Optional[int] = None,
    batch_schedule_spread: float = 0.65,
    batch_schedule_random_mix: float = 0.1,
    num_batches: Optional[int] = None,
    *,
    seed: Optional[int] = None,
    profile: ProfileMode = "off",
) -> Union[PrefetchLoader, Loader, Any]:
    """timm's ``create_loader`` (``timm.data.create_loader``: the same arguments, order and
    defaults; ``device`` ``None`` is timm's ``cuda``), loading with a :class:`ferroloader.Loader`.
    Returns a :class:`PrefetchLoader` with ``use_prefetcher=True``, else the ``Loader`` itself
    (float32 batches, normalized and erased per sample by the transform, collated by
    ``collate_fn`` when one is given). ``seed``: the per-sample generators' seed (default:
    drawn from torch's default generator now). ``profile``: the ``Loader``'s (``"spans"`` to
    record, read with ``loader.profile()``). The scheduling arguments
    (``batch_size_choices``, ``batch_choice_*``, ``batch_schedule_*``, ``num_batches``) only
    matter with ``input_size_choices``, which timm's own loader runs. See the module's doc."""
    import torch
    from timm.data.transforms_factory import create_transform

    timm_reason = _timm_only(tf_preprocessing, input_size_choices, num_aug_splits)
    if timm_reason is not None:
        from timm.data import loader as timm_loader

        warnings.warn(
            f"create_loader: {timm_reason} is timm's own; this loader is timm's DataLoader "
            "(worker processes, nothing native)",
            UserWarning,
            stacklevel=2,
        )
        # Scheduling arguments only where given: a timm from before them takes the rest.
        schedule: Dict[str, Any] = {}
        if input_size_choices is not None:
            schedule = dict(
                input_size_choices=input_size_choices,
                batch_size_choices=batch_size_choices,
                batch_choice_weights=batch_choice_weights,
                batch_choice_seed=batch_choice_seed,
                batch_choice_schedule=batch_choice_schedule,
                batch_schedule_epochs=batch_schedule_epochs,
                batch_schedule_spread=batch_schedule_spread,
                batch_schedule_random_mix=batch_schedule_random_mix,
                num_batches=num_batches,
            )
        timm_create_loader: Any = timm_loader.create_loader
        return timm_create_loader(
            dataset, input_size, batch_size, is_training=is_training, no_aug=no_aug,
            re_prob=re_prob, re_mode=re_mode, re_count=re_count, re_split=re_split,
            train_crop_mode=train_crop_mode, scale=scale, ratio=ratio, hflip=hflip, vflip=vflip,
            color_jitter=color_jitter, color_jitter_prob=color_jitter_prob,
            grayscale_prob=grayscale_prob, gaussian_blur_prob=gaussian_blur_prob,
            auto_augment=auto_augment, num_aug_repeats=num_aug_repeats,
            num_aug_splits=num_aug_splits, interpolation=interpolation, mean=mean, std=std,
            num_workers=num_workers, distributed=distributed, crop_pct=crop_pct,
            crop_mode=crop_mode, crop_border_pixels=crop_border_pixels, collate_fn=collate_fn,
            pin_memory=pin_memory, fp16=fp16, img_dtype=img_dtype or torch.float32,
            device=torch.device("cuda") if device is None else device,
            use_prefetcher=use_prefetcher, use_multi_epochs_loader=use_multi_epochs_loader,
            persistent_workers=persistent_workers, worker_seeding=worker_seeding,
            tf_preprocessing=tf_preprocessing, **schedule,
        )

    # Random erasing of the second half of the batch (or of the aug splits), as timm's.
    re_num_splits = 2 if re_split else 0
    dataset.transform = create_transform(
        input_size,
        is_training=is_training,
        no_aug=no_aug,
        train_crop_mode=train_crop_mode,
        scale=scale,
        ratio=ratio,
        hflip=hflip,
        vflip=vflip,
        color_jitter=color_jitter,
        color_jitter_prob=color_jitter_prob,
        grayscale_prob=grayscale_prob,
        gaussian_blur_prob=gaussian_blur_prob,
        auto_augment=auto_augment,
        interpolation=interpolation,
        mean=mean,
        std=std,
        crop_pct=crop_pct,
        crop_mode=crop_mode,
        crop_border_pixels=crop_border_pixels,
        re_prob=re_prob,
        re_mode=re_mode,
        re_count=re_count,
        re_num_splits=re_num_splits,
        tf_preprocessing=tf_preprocessing,
        use_prefetcher=use_prefetcher,
        separate=False,
    )
    channels = (
        input_size[0] if isinstance(input_size, (tuple, list)) and len(input_size) == 3 else len(mean)
    )
    iterable = isinstance(dataset, torch.utils.data.IterableDataset)
    if iterable and hasattr(dataset, "set_loader_cfg"):
        # timm's iterable datasets estimate their length per worker before workers start.
        dataset.set_loader_cfg(num_workers=num_workers)

    sampler: Any = None
    if distributed and not iterable:
        from timm.data import distributed_sampler

        OrderedDistributedSampler: Any = distributed_sampler.OrderedDistributedSampler
        RepeatAugSampler: Any = distributed_sampler.RepeatAugSampler

        if not is_training:
            # Pads with repeats to an equal count per rank, as timm's evaluation does.
            sampler = OrderedDistributedSampler(dataset)
        elif num_aug_repeats:
            sampler = RepeatAugSampler(dataset, num_repeats=num_aug_repeats)
        else:
            sampler = torch.utils.data.distributed.DistributedSampler(dataset)
    elif num_aug_repeats:
        raise ValueError(
            "num_aug_repeats: RepeatAugment not currently supported in non-distributed or "
            "IterableDataset use"
        )

    if _is_fast_collate(collate_fn):
        collate_fn = None  # the native batches are what it makes: uint8 images, int64 targets
    if seed is None:
        seed = int(torch.empty((), dtype=torch.int64).random_().item())
    # Not distributed: every rank loads everything, as timm's DataLoader does, even where a
    # process group is up (the Loader would take its rank's share of it otherwise).
    whole = sampler is None and not iterable and not distributed
    loader = Loader(
        dataset,
        batch_size=batch_size,
        shuffle=not iterable and sampler is None and is_training,
        sampler=sampler,
        rank=0 if whole else None,
        world_size=1 if whole else None,
        num_workers=num_workers,
        collate_fn=collate_fn,
        pin_memory=pin_memory,
        drop_last=is_training,
        persistent_workers=persistent_workers and num_workers > 0,
        seed=seed,
        profile=profile,
        **_error_policy(dataset),
    )
    if not use_prefetcher:
        return loader
    return PrefetchLoader(
        loader,
        mean=mean,
        std=std,
        channels=channels,
        device=device,
        img_dtype=img_dtype,
        fp16=fp16,
        re_prob=re_prob if is_training and not no_aug else 0.0,
        re_mode=re_mode,
        re_count=re_count,
        re_num_splits=re_num_splits,
    )
