"""Runs the torchvision DataLoader pipeline and ferroloader's on the same data, profiled.

What ``ferroloader compare``, ``profile``, ``sweep`` and ``demo`` run; the command line
(``ferroloader.cli.commands``) only parses options and prints. Both pipelines read the same
ImageFolder (or the same saved Hugging Face dataset: :func:`saved_dataset`) through the same
torchvision ``Compose``: by default the ImageNet training transform (``RandomResizedCrop``,
``RandomHorizontalFlip``, ``ToTensor``, ``Normalize``), else the one in ``RunConfig.transform`` (a
reference recipe or the user's own, ``ferroloader.recipes``). torchvision's ``ImageFolder`` and
``DataLoader``, instrumented by ``ferroloader.torch.profile``, run it as is; ``ferroloader.Loader``
is handed the same object and converts it. The transform may return several views of each
image (``RunConfig.views``: the user's own SSL object, or ``recipes.RepeatedViews``): both
sides then run it as it is, each profile holding a ``view<k>`` span per view, and throughput
counts images, not views. A transform the Loader refuses is reported
(:class:`NativeRefusal`) before either pipeline runs. With ``RunConfig.timm`` both pipelines are
timm's train.py loaders instead (:func:`timm_loader`): timm's own ``create_loader`` (labelled
``timm``) and ``ferroloader.timm.create_loader``, measured below their prefetchers. Runs
alternate between the pipelines, round after round, so a machine that slows down or speeds up
during the measurement affects both alike.

A consumer step (``step_ms``) stands for the training step a GPU would run on each batch: the
consumer sleeps (or spins, with ``step_busy``) that long after each batch, and the time it then
spends blocked in ``next()`` is the time the GPU would idle waiting for data.

CPU seconds come from the OS (this process's threads, plus its child processes once they are
joined, which torch's worker processes are when the run ends: ``getrusage``), so they count
everything a pipeline costs, whatever the profiler saw.

This module must not print: it reports progress through a callback.
"""

from __future__ import annotations

import gc
import importlib
import os
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    Dict,
    Iterator,
    List,
    Literal,
    Optional,
    Sequence,
    Tuple,
)

from ferroloader._hfdatasets import dataloader_form, load_saved, saved_dataset
from ferroloader.loader import DecoderName, Output, ProfileMode

if TYPE_CHECKING:
    from ferroloader.profiling import Profile

__all__ = [
    "NativeRefusal",
    "PIPELINES",
    "RunConfig",
    "RunResult",
    "SweepResult",
    "check_native",
    "compare",
    "imagenet_train_transform",
    "mark_enough",
    "profile_native",
    "run_pipeline",
    "sweep",
]

#: The pipelines, as labelled in profiles.
PIPELINES = ("torchvision", "native")
#: A worker count "pays off" when it gains at least this much throughput over the previous one.
PAYS_OFF = 0.10

Progress = Callable[[str, int, int], None]
"""Called as ``progress(label, batches_done, batches_total)`` after each batch."""


def _default_workers() -> int:
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1))


@dataclass(frozen=True)
class RunConfig:
    """What to run: the data, the loader settings both pipelines share, and the consumer."""

    data: Path
    batch_size: int = 64
    workers: int = 0
    """Worker threads (native) or processes (torchvision); 0 means one per available CPU."""
    batches: int = 50
    """Batches per pipeline per round (epochs repeat when the data set is smaller)."""
    decoder: DecoderName = "turbo"
    output: Output = "float32"
    step_ms: float = 0.0
    step_busy: bool = False
    rounds: int = 1
    mode: ProfileMode = "spans"
    """Profile mode of both pipelines: ``"spans"`` or ``"counters"``."""
    seed: int = 0
    size: int = 224
    transform: Any = None
    """The torchvision ``Compose`` (v1 or v2) both pipelines run; None: the ImageNet training
    transform of ``size`` and ``output``. ``output`` must be what the transform yields
    (``ferroloader.recipes.output_of``)."""
    transform_name: Optional[str] = None
    """How ``transform`` was named (a recipe, ``FILE.py:NAME``), for reports and messages."""
    dataset: Any = None
    """A training script's own dataset object (DATA given as ``FILE.py:NAME``; ``data`` is then
    that name), holding its transform: both pipelines run it as it is (:func:`_dataset_run`);
    ``transform``, ``output``, ``mix`` and ``timm`` do not apply."""
    views: int = 0
    """How many views of each image ``transform`` returns (a list, tuple or dict of tensors:
    ``recipes.view_transforms``), each batch holding one tensor per view; 0 for a transform
    returning one tensor. Images, not views, are counted either way."""
    python_tail: Literal["error", "allow"] = "error"
    """The native Loader's ``python_tail``: ``"allow"`` for the user's own object returning
    views, run as it is (a view's ops ferroloader cannot convert, its own PIL classes or a
    lambda, then run in Python after the view's native ops, as on the DataLoader side);
    ``"error"`` otherwise, so a transform ferroloader cannot run whole is refused, not
    measured half in Python."""
    on_error: Literal["raise", "skip"] = "raise"
    """A sample that fails (a file that does not decode): stop the run with an error naming the
    file, or skip it in both pipelines (torchvision's by leaving it out of its batch)."""
    mix: bool = False
    """Both pipelines mix each batch as torchvision's reference train.py does with
    ``--mixup-alpha 0.2 --cutmix-alpha 1.0`` (``recipes.mixup_cutmix`` in its
    ``collate_fn``); with ``timm``, as timm's train.py does by default for ImageNet
    (``FastCollateMixup(mixup_alpha=0.8, cutmix_alpha=1.0, label_smoothing=0.1)``)."""
    timm: Optional[str] = None
    """timm's ``--aa`` policy (``rand-m9-mstd0.5-inc1``...): both pipelines are then timm's
    train.py loaders of ``data`` (:func:`timm_loader`), timm's own and
    ``ferroloader.timm.create_loader``'s, measured below their prefetchers; ``transform`` and
    ``output`` do not apply (timm's ``create_transform`` decides: uint8 batches)."""

    @property
    def num_workers(self) -> int:
        """The worker count actually used."""
        return self.workers if self.workers > 0 else _default_workers()

    def train_transform(self) -> Any:
        """The torchvision transform both pipelines run."""
        if self.transform is not None:
            return self.transform
        return imagenet_train_transform(self.size, self.output)

    @property
    def transform_label(self) -> str:
        """The transform, as messages name it."""
        if self.timm is not None:
            return f"timm's training transform (auto_augment {self.timm!r}, re_prob 0.25)"
        return self.transform_name or "the ImageNet training transform"

    def label(self, pipeline: str) -> str:
        """How ``pipeline`` is labelled in profiles: the DataLoader side is ``timm`` when both
        are timm's loaders."""
        return "timm" if pipeline == "torchvision" and self.timm is not None else pipeline


class SampleFailure(RuntimeError):
    """A sample failed in a pipeline run with ``on_error="raise"``: the message names the
    pipeline, the file and the cause (not the worker process's traceback)."""


_SKIPPING_FOLDER: Optional[type] = None


def _skipping_folder(torchvision: Any) -> type:
    """torchvision's ``ImageFolder`` whose ``__getitem__`` gives None for a sample that fails,
    left out of its batch by :func:`_collate_present`. A subclass, so profiling still sees a
    ``DatasetFolder`` and times its read, decode and transforms. Made once, on first use
    (torchvision is imported only then), and found by pickle as
    ``ferroloader.cli.compare.SkippingImageFolder`` (the module's ``__getattr__``), so spawned
    workers can load it."""
    global _SKIPPING_FOLDER
    if _SKIPPING_FOLDER is None:

        class SkippingImageFolder(torchvision.datasets.ImageFolder):  # type: ignore[misc]
            def __getitem__(self, index: int) -> Any:
                try:
                    return super().__getitem__(index)
                except Exception:
                    return None

        SkippingImageFolder.__qualname__ = "SkippingImageFolder"
        _SKIPPING_FOLDER = SkippingImageFolder
    return _SKIPPING_FOLDER


_SKIPPING_DATASET: Optional[type] = None


def _skipping_dataset() -> type:
    """``datasets.Dataset`` whose rows that fail (``datasets`` decodes the image, then the
    format transform runs: either can raise) come out as None, left out of their batch by
    :class:`PresentRows`: what ``--on-error skip`` does to a folder's DataLoader, for a saved
    Hugging Face dataset. A subclass, so profiling still instruments it as a ``Dataset`` (its
    ``decode`` and transform spans; ``cast_column``/``with_transform`` copy it whole, class
    included); found by pickle as ``ferroloader.cli.compare.SkippingDataset``. A batch fetch
    (``__getitems__``, DataLoader's) that fails is fetched again row by row, so the rows that
    read are kept."""
    global _SKIPPING_DATASET
    if _SKIPPING_DATASET is None:
        base: Any = importlib.import_module("datasets").Dataset

        class SkippingDataset(base):  # type: ignore[misc]
            def __getitem__(self, key: Any) -> Any:
                if not isinstance(key, int):
                    return super().__getitem__(key)
                try:
                    return super().__getitem__(key)
                except Exception:
                    return None

            def __getitems__(self, keys: List[int]) -> List[Any]:
                try:
                    rows: List[Any] = super().__getitems__(keys)
                    return rows
                except Exception:
                    return [self[int(k)] for k in keys]

        SkippingDataset.__qualname__ = "SkippingDataset"
        _SKIPPING_DATASET = SkippingDataset
    return _SKIPPING_DATASET


def skipping(dataset: Any) -> Any:
    """A copy of the Hugging Face ``dataset`` whose failing rows come out as None (see
    :func:`_skipping_dataset`)."""
    import copy

    out = copy.copy(dataset)
    out.__class__ = _skipping_dataset()
    return out


class PresentRows:
    """A ``collate_fn`` over the rows that did not fail (None: left out), as
    :func:`_collate_present` is for a folder's samples."""

    def __init__(self, collate: Callable[[List[Any]], Any]) -> None:
        self.collate = collate

    def __call__(self, rows: List[Any]) -> Any:
        kept = [r for r in rows if r is not None]
        if not kept:
            import torch

            return torch.empty(0, 3, 1, 1), torch.empty(0, dtype=torch.int64)
        return self.collate(kept)


def __getattr__(name: str) -> Any:
    if name == "SkippingImageFolder":
        return _skipping_folder(_torchvision())
    if name == "SkippingDataset":
        return _skipping_dataset()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _collate_present(samples: List[Any]) -> Any:
    """torch's default collate of the samples that did not fail."""
    import torch

    kept = [s for s in samples if s is not None]
    if not kept:
        return torch.empty(0, 3, 1, 1), torch.empty(0, dtype=torch.int64)
    return torch.utils.data.default_collate(kept)


class NativeRefusal(ValueError):
    """ferroloader's Loader refuses the transform: an op it has no kernel for (yet), or
    arguments it does not support. The message names the transform and the op, and why."""


@dataclass
class RunResult:
    """One run of one pipeline."""

    label: str
    pipeline: str
    workers: int
    images: int
    batches: int
    wall_s: float
    cpu_s: float
    """User + system CPU seconds of this process and its joined children during the run."""
    profile: "Profile"

    @property
    def images_per_s(self) -> float:
        return self.images / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def cpu_s_per_image(self) -> Optional[float]:
        return self.cpu_s / self.images if self.images else None


@dataclass
class SweepResult:
    """Throughput and CPU cost against worker count, per pipeline."""

    points: List[Dict[str, Any]]
    """One dict per (pipeline, workers): ``images_per_s``, ``cpu_s_per_image``, ``gain`` over
    the previous worker count, and ``enough`` on the count after which more stops paying."""
    runs: List[RunResult]
    profile: "Profile"


def _torchvision() -> Any:
    """torchvision, imported when a run needs it (it ships no type information)."""
    return importlib.import_module("torchvision")


def imagenet_train_transform(size: int = 224, output: str = "float32") -> Any:
    """torchvision's ImageNet training transform. For ``uint8`` output, the pixels as uint8
    (``PILToTensor``), normalization left to the GPU, on both sides."""
    tv = _torchvision().transforms

    if output == "uint8":
        return tv.Compose([tv.RandomResizedCrop(size), tv.RandomHorizontalFlip(), tv.PILToTensor()])
    return tv.Compose(
        [
            tv.RandomResizedCrop(size),
            tv.RandomHorizontalFlip(),
            tv.ToTensor(),
            tv.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]),
        ]
    )


def _step(ms: float, busy: bool) -> None:
    """The simulated training step."""
    if ms <= 0:
        return
    if not busy:
        time.sleep(ms / 1e3)
        return
    end = time.perf_counter() + ms / 1e3
    while time.perf_counter() < end:
        pass


def _cpu_seconds() -> float:
    """CPU seconds of this process (all threads, nanosecond clock) and of its waited-for
    children (microseconds). ``os.times`` would do, but counts in 10 ms ticks."""
    own = time.process_time()
    try:
        import resource
    except ImportError:  # not Unix: children as os.times counts them
        t = os.times()
        return own + t.children_user + t.children_system
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own + children.ru_utime + children.ru_stime


def _batches(make_epoch: Callable[[], Iterator[Any]], count: int) -> Iterator[Any]:
    """``count`` batches, over as many epochs as it takes. Each epoch's iterator is dropped as
    soon as it is left, so worker processes are joined before the CPU time is read."""
    done = 0
    while done < count:
        it = make_epoch()
        got = 0
        for batch in it:
            yield batch
            got += 1
            done += 1
            if done >= count:
                break
        del it
        if got == 0:
            raise ValueError("the data set yields no batch (is it empty?)")


def _relabel(profile: "Profile", label: str) -> "Profile":
    from ferroloader.profiling import Profile

    if profile.labels == [label]:
        return profile
    data = profile.to_dict()
    for p in data["pipelines"]:
        p["label"] = label
    return Profile.from_dict(data)


def run_pipeline(
    cfg: RunConfig,
    pipeline: str,
    *,
    label: Optional[str] = None,
    progress: Optional[Progress] = None,
) -> RunResult:
    """Runs ``cfg.batches`` batches of ``pipeline`` (``"torchvision"`` or ``"native"``)."""
    if pipeline not in PIPELINES:
        raise ValueError(f"pipeline: expected one of {PIPELINES}, got {pipeline!r}")
    label = label or cfg.label(pipeline)
    workers = cfg.num_workers
    gc.collect()  # garbage of the previous run is not this run's cost
    from ferroloader import recipes

    make_epoch: Callable[[], Iterator[Any]]
    join: Callable[[], None]
    collect: Callable[[], "Profile"]
    if cfg.dataset is not None:
        make_epoch, join, collect = _dataset_run(cfg, pipeline, label)
    elif cfg.timm is not None:
        make_epoch, join, collect = _timm_run(cfg, pipeline, label)
    elif pipeline == "native":
        transform = cfg.train_transform()
        mixing = _mixing(cfg)
        import ferroloader as fl

        loader = fl.Loader(
            native_source(cfg.data),
            batch_size=cfg.batch_size,
            shuffle=True,
            seed=cfg.seed,
            num_workers=workers,
            transform=transform,
            output=cfg.output,
            decoder=cfg.decoder,
            profile=cfg.mode,
            on_error=cfg.on_error,
            python_tail=cfg.python_tail,
            collate_fn=None if mixing is None else recipes.reference_collate(mixing),
        )
        make_epoch = lambda: iter(loader)
        join = lambda: None
        collect = loader.profile
    else:
        import torch
        import ferroloader.torch as fltorch

        torchvision = _torchvision()
        transform = cfg.train_transform()
        mixing = _mixing(cfg)

        skip = cfg.on_error == "skip"
        collate: Any = _collate_present if skip else None
        if saved_dataset(cfg.data):
            saved = load_saved(cfg.data)
            dataset, collate = dataloader_form(skipping(saved) if skip else saved, transform)
            collate = PresentRows(collate) if skip else collate
        else:
            folder = _skipping_folder(torchvision) if skip else torchvision.datasets.ImageFolder
            dataset = folder(os.fspath(cfg.data), transform=transform)
        if mixing is not None:
            collate = recipes.reference_collate(mixing) if collate is None else _MixedAfter(collate, mixing)
        generator = torch.Generator()
        generator.manual_seed(cfg.seed)
        dl = torch.utils.data.DataLoader(
            dataset,
            batch_size=cfg.batch_size,
            shuffle=True,
            num_workers=workers,
            generator=generator,
            # Workers live across epochs, as in real training: a small data set repeated
            # must not pay worker start-up once per pass.
            persistent_workers=workers > 0,
            collate_fn=collate,
        )
        profiled = fltorch.profile(dl, label=label, mode=cfg.mode)
        make_epoch = lambda: iter(profiled)
        join = profiled.close  # joins the worker processes, so their CPU time is counted
        collect = profiled.profile

    cpu0 = _cpu_seconds()
    t0 = time.monotonic()
    images = 0
    n = 0
    try:
        for batch in _batches(make_epoch, cfg.batches):
            images += _images_in(batch)
            n += 1
            if progress is not None:
                progress(label, n, cfg.batches)
            _step(cfg.step_ms, cfg.step_busy)
    except Exception as e:
        if pipeline == "native":
            raise  # the native loader's errors already name the file and the cause
        join()
        failures = [f for p in collect().pipelines for f in p.failures]
        cause = failures[0].cause if failures else f"{type(e).__name__}: {e}".splitlines()[0]
        raise SampleFailure(
            f"{label}: a sample failed: {cause} (--on-error skip leaves such files out)"
        ) from None
    wall = time.monotonic() - t0
    if n:
        del batch  # hand the last batch's buffer back before finishing
    join()
    cpu = _cpu_seconds() - cpu0
    profile = collect()
    return RunResult(
        label=label,
        pipeline=pipeline,
        workers=workers,
        images=images,
        batches=n,
        wall_s=wall,
        cpu_s=cpu,
        profile=_relabel(profile, label),
    )


def _images_in(batch: Any) -> int:
    """The images in a batch: its first dimension, or for a batch of views (one tensor per
    view, in a list, tuple or dict, as DataLoader collates them) the first view's, so that
    throughput counts images however many views each makes; likewise the first tensor of a
    batch laid out as a dataset of one's own lays out its samples (``[images, labels,
    paths]``, a dict)."""
    while isinstance(batch, (dict, list, tuple)):
        batch = next(iter(batch.values())) if isinstance(batch, dict) else batch[0]
    return int(batch.shape[0])


def _dataset_run(
    cfg: RunConfig, pipeline: str, label: str
) -> Tuple[Callable[[], Iterator[Any]], Callable[[], None], Callable[[], "Profile"]]:
    """``make_epoch``, ``join`` and ``collect`` of ``pipeline`` over ``cfg.dataset``, a
    training script's own dataset, as it is: torch's DataLoader of it, profiled
    (``fl.torch.profile`` splits a traceable ``__getitem__``'s read and decode), against
    ``ferroloader.Loader`` of it, which reads it natively where its ``__getitem__`` traces
    and else runs it in worker processes as the DataLoader does."""
    workers = cfg.num_workers
    if pipeline == "native":
        import ferroloader as fl

        loader = fl.Loader(
            cfg.dataset,
            batch_size=cfg.batch_size,
            shuffle=True,
            seed=cfg.seed,
            num_workers=workers,
            profile=cfg.mode,
            python_dataset="allow",
            python_tail="allow",
            decoder=cfg.decoder,
        )
        return (lambda: iter(loader)), (lambda: None), loader.profile
    import torch

    import ferroloader.torch as fltorch

    generator = torch.Generator()
    generator.manual_seed(cfg.seed)
    dl = torch.utils.data.DataLoader(
        cfg.dataset,
        batch_size=cfg.batch_size,
        shuffle=True,
        num_workers=workers,
        generator=generator,
        persistent_workers=workers > 0,
    )
    profiled = fltorch.profile(dl, label=label, mode=cfg.mode)
    return (lambda: iter(profiled)), profiled.close, profiled.profile


def timm_loader(cfg: RunConfig, pipeline: str) -> Any:
    """The loader of ``pipeline`` (``"torchvision"``: timm's own ``create_loader``; ``"native"``:
    ``ferroloader.timm.create_loader``) as timm's train.py builds it for training on
    ``cfg.data`` with ``--aa cfg.timm --reprob 0.25`` (and, with ``cfg.mix``, its default
    ImageNet mixing as ``collate_fn``), over its own ``timm.data.create_dataset("", root=data)``,
    on the CPU. Returns what the prefetcher iterates (the torch ``DataLoader``, the native
    ``Loader``): the uint8 batches a training run copies to the GPU. The prefetcher's
    normalize and random erasing are left out on both sides: on a GPU they run there, not in
    the input pipeline, and on the CPU they would add the same work to both."""
    import torch

    import ferroloader.timm

    timm_data: Any = importlib.import_module("timm.data")  # untyped

    args: Dict[str, Any] = dict(
        is_training=True,
        auto_augment=cfg.timm,
        re_prob=0.25,
        num_workers=cfg.num_workers,
        device=torch.device("cpu"),
    )
    if cfg.mix:
        args["collate_fn"] = timm_data.FastCollateMixup(
            mixup_alpha=0.8, cutmix_alpha=1.0, label_smoothing=0.1,
            num_classes=_num_classes(cfg.data),
        )
    size = (3, cfg.size, cfg.size)
    dataset = timm_data.create_dataset("", root=os.fspath(cfg.data))
    if pipeline == "native":
        native: Any = ferroloader.timm.create_loader(
            dataset, size, cfg.batch_size, seed=cfg.seed, profile=cfg.mode, **args
        )
        return native.loader
    torch.manual_seed(cfg.seed)  # timm's workers' seeds (and the shuffle) come from it
    stock: Any = timm_data.create_loader(dataset, size, cfg.batch_size, **args)
    return stock.loader


def _timm_run(
    cfg: RunConfig, pipeline: str, label: str
) -> Tuple[Callable[[], Iterator[Any]], Callable[[], None], Callable[[], "Profile"]]:
    """(epoch iterator, join, profile) of :func:`timm_loader`'s ``pipeline``: timm's own
    DataLoader profiled by ``ferroloader.torch.profile`` (its read, decode and each op of
    timm's transform apart), or the native loader's own profile."""
    loader = timm_loader(cfg, pipeline)
    if pipeline == "native":
        return (lambda: iter(loader)), (lambda: None), loader.profile
    import ferroloader.torch as fltorch

    profiled = fltorch.profile(loader, label=label, mode=cfg.mode)
    return (lambda: iter(profiled)), profiled.close, profiled.profile


def _mixing(cfg: RunConfig) -> Any:
    """The reference train.py's MixUp/CutMix for ``cfg.data``'s classes, or ``None`` without
    ``cfg.mix``."""
    if not cfg.mix:
        return None
    from ferroloader import recipes

    return recipes.mixup_cutmix(_num_classes(cfg.data))


def _num_classes(data: Path) -> int:
    """The classes of an ImageFolder, or of a saved Hugging Face dataset's labels (its
    ``ClassLabel``'s names, or the largest label plus one)."""
    if saved_dataset(data):
        from ferroloader._hfdatasets import label_column

        dataset = load_saved(data)
        column = label_column(dataset)
        names = getattr(dataset.features[column], "num_classes", None)
        return int(names) if names is not None else int(max(dataset[column])) + 1
    return len(_torchvision().datasets.folder.find_classes(os.fspath(data))[0])


class _MixedAfter:
    """A ``collate_fn`` that mixes what another one collated (``--on-error skip``'s collation
    of the present samples, or a Hugging Face dataset's)."""

    def __init__(self, collate: Callable[[Any], Any], mixing: Callable[..., Any]) -> None:
        self.collate = collate
        self.mixing = mixing

    def __call__(self, batch: Any) -> Any:
        return self.mixing(*self.collate(batch))


def native_source(data: Path) -> Any:
    """What ferroloader's Loader reads ``data`` as: the saved Hugging Face dataset, or the
    ImageFolder."""
    import ferroloader as fl

    return load_saved(data) if saved_dataset(data) else fl.ImageFolder(data)


def check_native(cfg: RunConfig) -> None:
    """Builds the native loader the runs would build, without running it, so that a transform
    ferroloader refuses stops the comparison before any pipeline spends time on it.

    Raises :class:`NativeRefusal` with the Loader's reason; errors of the data (a missing or
    empty folder) propagate as they are, since they are not the transform's.
    """
    import ferroloader as fl

    if cfg.dataset is not None:
        return  # the loader runs it either way: natively, or in Python as the DataLoader does
    if cfg.timm is not None:
        try:
            timm_loader(cfg, "native")
        except (TypeError, ValueError) as e:
            raise NativeRefusal(f"ferroloader cannot run {cfg.transform_label}: {e}") from e
        return
    dataset = native_source(cfg.data)
    try:
        fl.Loader(
            dataset,
            batch_size=cfg.batch_size,
            num_workers=cfg.num_workers,
            transform=cfg.train_transform(),
            output=cfg.output,
            decoder=cfg.decoder,
            python_tail=cfg.python_tail,
        )
    except (TypeError, ValueError) as e:
        raise NativeRefusal(
            f"ferroloader cannot run {cfg.transform_label} (output {cfg.output}): {e}"
        ) from e


def _merge(runs: Sequence[RunResult]) -> "Profile":
    merged = runs[0].profile
    for r in runs[1:]:
        merged = merged.merge(r.profile)
    return merged


def _ordered(runs: Sequence[RunResult]) -> List[RunResult]:
    """torchvision's runs first, then native's, each in run order: the report reads left to
    right as "before" and "after"."""
    return sorted(runs, key=lambda r: PIPELINES.index(r.pipeline) if r.pipeline in PIPELINES else 9)


def compare(
    cfg: RunConfig,
    *,
    pipelines: Sequence[str] = PIPELINES,
    progress: Optional[Progress] = None,
) -> Tuple["Profile", List[RunResult]]:
    """Runs every pipeline ``cfg.rounds`` times, alternating which goes first; returns the
    merged profile (``torchvision``, ``native``, then ``torchvision#2``... for later rounds)
    and the runs. Raises :class:`NativeRefusal`, before running anything, when the native
    pipeline is asked for and ferroloader refuses the transform."""
    if "native" in pipelines:
        check_native(cfg)
    runs: List[RunResult] = []
    for r in range(cfg.rounds):
        order = list(pipelines) if r % 2 == 0 else list(reversed(pipelines))
        for p in order:
            label = cfg.label(p) if r == 0 else f"{cfg.label(p)}#{r + 1}"
            runs.append(run_pipeline(cfg, p, label=label, progress=progress))
    runs = _ordered(runs)
    return _merge(runs), runs


def profile_native(cfg: RunConfig, *, progress: Optional[Progress] = None) -> Tuple["Profile", List[RunResult]]:
    """The native pipeline alone, ``cfg.rounds`` times."""
    return compare(cfg, pipelines=("native",), progress=progress)


def mark_enough(points: List[Dict[str, Any]]) -> None:
    """Sets each point's ``gain`` (throughput over the previous worker count's) and marks with
    ``enough`` the worker count after which the next gains less than ``PAYS_OFF``."""
    for fam in dict.fromkeys(str(p["pipeline"]) for p in points):
        pts = sorted((p for p in points if p["pipeline"] == fam), key=lambda p: int(p["workers"]))
        for prev, cur in zip([None, *pts], pts):
            cur["gain"] = (
                cur["images_per_s"] / prev["images_per_s"] - 1.0
                if prev is not None and prev["images_per_s"] > 0
                else None
            )
            cur["enough"] = False
        for cur, nxt in zip(pts, pts[1:]):
            if nxt["gain"] is not None and nxt["gain"] < PAYS_OFF:
                cur["enough"] = True
                break


def sweep(
    cfg: RunConfig,
    workers: Sequence[int],
    *,
    pipelines: Sequence[str] = PIPELINES,
    progress: Optional[Progress] = None,
) -> SweepResult:
    """Runs every pipeline at every worker count (alternating the order at each count),
    ``cfg.rounds`` times; throughput and CPU seconds per image are summed over rounds.
    Raises :class:`NativeRefusal` first, as :func:`compare` does."""
    if "native" in pipelines:
        check_native(cfg)
    runs: List[RunResult] = []
    points: List[Dict[str, Any]] = []
    for i, w in enumerate(workers):
        order = list(pipelines) if i % 2 == 0 else list(reversed(pipelines))
        at: Dict[str, List[RunResult]] = {p: [] for p in pipelines}
        for r in range(cfg.rounds):
            for p in order if r % 2 == 0 else reversed(order):
                label = f"{cfg.label(p)} w={w}" + (f"#{r + 1}" if r else "")
                run = run_pipeline(replace(cfg, workers=w), p, label=label, progress=progress)
                at[p].append(run)
                runs.append(run)
        for p in pipelines:
            rs = at[p]
            images = sum(r.images for r in rs)
            wall = sum(r.wall_s for r in rs)
            cpu = sum(r.cpu_s for r in rs)
            points.append(
                {
                    "pipeline": cfg.label(p),
                    "workers": w,
                    "images": images,
                    "wall_s": wall,
                    "cpu_s": cpu,
                    "images_per_s": images / wall if wall > 0 else 0.0,
                    "cpu_s_per_image": cpu / images if images else None,
                }
            )
    mark_enough(points)
    runs = _ordered(runs)
    return SweepResult(points=points, runs=runs, profile=_merge(runs))
