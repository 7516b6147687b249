"""``ferroloader.Loader``: a drop-in for ``torch.utils.data.DataLoader`` over image datasets.

The work happens in native worker threads (``ferroloader._native``); this module maps
DataLoader's arguments onto the native loader (``TypeError``/``ValueError`` naming the argument
where one cannot hold, with the reason), keeps the configuration (so a loader pickles by its
configuration and rebuilds itself in a forked child), turns each batch's numpy arrays into torch
tensors without a copy (``torch.from_numpy``), and saves and restores the position in an epoch
(``state_dict``/``load_state_dict``, torchdata's ``StatefulDataLoader`` names).
"""

from __future__ import annotations

import atexit
import collections
import io
import itertools
import json
import logging
import numbers
import os
import sys
import warnings
from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    Deque,
    Dict,
    Iterable,
    Iterator,
    List,
    Literal,
    Optional,
    Sequence,
    Tuple,
    Union,
    cast,
    get_args,
)

import numpy as np

from ferroloader import _native
from ferroloader._batchmix import BatchMix, BatchOp, collated_mixing
from ferroloader._collate import Collate
from ferroloader._fastmix import FastCollateMix
from ferroloader._getitem import Layout
from ferroloader.datasets import reading, sample_layout
from ferroloader.profiling import Profile
from ferroloader._pinning import DeviceReadHold, cuda_runtime_path
from ferroloader._tail import TailRunner, read_sample
from ferroloader._views import Views, trace_views
from ferroloader.transforms import (
    Compose,
    TailSplit,
    check_normalize_channels,
    split_python_tail,
    tail_op_name,
)

# Workers that run a Python tail or read `dataset[i]` must be done before the interpreter
# finalizes: a thread that wants the GIL after that point takes the process down with it.
atexit.register(_native.end_epochs_at_exit)

if TYPE_CHECKING:
    import torch

    # Imported when a dataset runs in Python: it imports torch.
    from ferroloader._pydataset import PythonDataset, PythonDatasetIterator, TailCosts, TailSamples

__all__ = ["Loader", "LoaderBatchSampler", "LoaderIterator", "LoaderSampler", "STATE_VERSION"]

Output = Literal["float32", "uint8"]
DecoderName = Literal["turbo", "zune"]
OnError = Literal["raise", "skip", "replace"]
ProfileMode = Literal["off", "spans", "counters"]
TensorType = Literal["torch", "numpy"]
PythonTail = Literal["warn", "allow", "error"]
TailWorkers = Literal["auto", "threads", "processes"]

_log = logging.getLogger("ferroloader")

#: Version of the dictionaries ``Loader.state_dict`` returns.
STATE_VERSION = 1

# The settings a saved state must agree with to describe the same epochs.
_STATE_KEYS = ("seed", "batch_size", "drop_last", "shuffle", "in_order", "world_size", "rank")


def _check_int(name: str, value: object, minimum: int, maximum: Optional[int] = None) -> int:
    if not isinstance(value, numbers.Integral) or isinstance(value, bool):
        raise TypeError(f"{name}: expected an int, got {type(value).__name__} {value!r}")
    value = int(value)
    if value < minimum:
        raise ValueError(f"{name}: must be at least {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name}: must be at most {maximum}, got {value}")
    return value


def _check_bool(name: str, value: object) -> bool:
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise TypeError(f"{name}: expected a bool, got {type(value).__name__} {value!r}")


def _check_choice(name: str, value: object, literal: Any) -> str:
    choices = get_args(literal)
    if not isinstance(value, str):
        raise TypeError(f"{name}: expected one of {choices}, got {type(value).__name__} {value!r}")
    if value not in choices:
        raise ValueError(f"{name}: expected one of {choices}, got {value!r}")
    return value


def _cores() -> int:
    """The cores this process may run on: the native default for ``num_workers``."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


#: Samples timed (after the probed first) to choose where a tail after native ops runs.
_COST_SAMPLES = 8

def _gil_bound(costs: TailCosts, workers: int) -> bool:
    """Whether a tail after native ops, timed at ``costs``, is better run in worker processes:
    where ``workers`` threads (at most one per core), each spending ``prefix + python`` on a
    sample with the ``python`` part one thread at a time, would keep the GIL busy all the time.

    The GIL's real cost is above the timed ``python`` (a waiting thread sleeps up to the switch
    interval; the consumer needs it too): a light tail timed at 0.17 ms under it capped 16
    threads at 1900-2100 img/s, 0.5 ms a sample, where processes gave 5300. Measured (one run,
    ``bench_tail_workers.py``) on both sides of this line: threads ahead at 2 workers (Zen 5)
    and 4 (16-core Xeon) with the light tail (``workers * python`` 0.29 and 0.70 of the
    sample), processes ahead from 8 workers (1.3) and with RandAugment in the tail at every
    count (1.2 at 2 workers)."""
    parallel = max(1, min(workers, _cores()))
    return parallel * costs.python > costs.prefix + costs.python


def _natively_viewed(views: List[TailSplit]) -> bool:
    """Whether the views can run in the native workers: each wholly native, all of one dtype,
    none leaving its ``Normalize`` to the consumer (uint8 output)."""
    if any(v.spec is None or v.tail for v in views) or len({v.output for v in views}) != 1:
        return False
    if views[0].output == "uint8":
        return not any(
            op.get("op") == "Normalize" for v in views for op in json.loads(cast(str, v.spec))["ops"]
        )
    return True


def _share_decode(views: List[TailSplit]) -> bool:
    """Whether the views read one decode of each file: three or more (two decoding their own
    crops cost what one whole decode and its copies cost, measured on 500x375 JPEGs) that
    decode alike."""
    return len(views) > 2 and _decode_alike(views)


def _decode_alike(views: List[TailSplit]) -> bool:
    """Whether the views with a native prefix decode a file alike (decoder, pixel limit, EXIF
    transposition; none scaling in the DCT domain, which a decoded image cannot), so that one
    decode can serve them all."""
    keys = ("decoder", "max_pixels", "exif_transpose")
    specs = [json.loads(v.spec) for v in views if v.spec is not None]
    if not specs or any(spec.get("dct_scaling") for spec in specs):
        return False
    return len({tuple(spec.get(k) for k in keys) for spec in specs}) == 1


def _first_image_size(source: Any, exif_transpose: bool = False) -> Optional[Tuple[int, int]]:
    """``(height, width)`` of the first sample whose header reads (of the first 16), to plan a
    native prefix that keeps each image's size with, as the native loader plans it (after the
    EXIF transposition with ``exif_transpose``: swapped for orientations 5 to 8); ``None``
    when none reads (the prefix then plans as it can, and the samples say what is wrong)."""
    if isinstance(source, _native.ImageArray):
        shape = source.images.shape
        return (int(shape[1]), int(shape[2])) if len(source) else None
    from PIL import Image

    for index in range(min(len(source), 16)):
        try:
            item = source[index][0]
            opened = Image.open(io.BytesIO(item) if isinstance(item, (bytes, bytearray)) else item)
            with opened as image:
                # The orientations whose transposition swaps the axes, as exif_transpose's
                # dict lookup matches them (6.0 and the rational 12/2 included). Pillow opens
                # a TIFF transposed already.
                swaps = image.format != "TIFF" and image.getexif().get(0x0112) in {5, 6, 7, 8}
                if exif_transpose and swaps:
                    return (image.width, image.height)
                return (image.height, image.width)
        except Exception:
            continue
    return None


def _wrapped_compose_hint(tail: List[Any], output: str, decoder: str, mode: str) -> str:
    """A hint for a transform that is one object holding a torchvision ``Compose`` in its
    ``transforms`` attribute, whose ops would run natively, but whose ``__call__`` does more
    than call it (one that does only that, as torchvision's reference
    ``ClassificationPresetTrain`` does, is unwrapped: ``transforms.delegated_compose``): only
    the user knows whether the rest matters. Empty where that is not the case."""
    if len(tail) != 1:
        return ""
    inner = getattr(tail[0], "transforms", None)
    if type(inner).__name__ != "Compose" or not type(inner).__module__.startswith("torchvision.transforms"):
        return ""
    try:
        native = split_python_tail(inner, output=output, decoder=decoder, mode=mode).spec is not None
    except (TypeError, ValueError):
        return ""
    if not native:
        return ""
    name = tail_op_name(tail[0])
    return (
        f" ({name}.transforms is a torchvision Compose that runs natively: if calling it is all "
        f"{name} does, pass that Compose as the transform instead)"
    )


def _distributed_cut(
    dataset: Any, sampler: Any, batch_sampler: Any
) -> Tuple[Optional[int], Optional[int]]:
    """``(rank, world_size)`` of the default ``torch.distributed`` process group when it is
    initialized with two processes or more, read when the loader is made, as
    ``DistributedSampler`` reads them; ``(None, None)`` otherwise, and where the loader has
    its order from elsewhere (a ``sampler`` or ``batch_sampler``: a ``DistributedSampler``
    among them already cuts) or an ``IterableDataset`` (it splits its stream itself, and the
    loader refuses ``rank`` for one).

    Why a loader shards where DataLoader does not: DataLoader leaves the cut to the
    ``DistributedSampler`` that ``torchrun`` scripts pass and that Lightning (and Accelerate)
    inject into a DataLoader, but inject into no other loader. Without this, every rank of a
    Lightning DDP run would train on the whole dataset, silently, ``world_size`` times per
    epoch. ``rank=0, world_size=1`` keeps every sample on every rank."""
    if sampler is not None or batch_sampler is not None:
        return None, None
    group = _process_group()
    if group is None:
        return None, None
    data = sys.modules.get("torch.utils.data")
    if data is not None and isinstance(dataset, data.IterableDataset):
        return None, None
    return group


def _process_group() -> Optional[Tuple[int, int]]:
    """``(rank, world_size)`` of the default ``torch.distributed`` process group when it is
    initialized with two processes or more, else ``None``."""
    # Not imported means not initialized: the loader imports no torch for this.
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None
    world_size = int(dist.get_world_size())
    if world_size < 2:
        return None
    return int(dist.get_rank()), world_size


def _sampler_rank(sampler: Any, batch_sampler: Any) -> Optional[Tuple[int, int]]:
    """:func:`_process_group` when the loader's order comes from a ``sampler`` or
    ``batch_sampler`` the user gave; else ``None``.

    Such a sampler (``DistributedSampler``, torchvision's ``RASampler``, timm's
    ``RepeatAugSampler``) may send copies of one index to several ranks, which must not draw
    the same augmentation: the native loader numbers each rank's copies apart
    (``SampleKey::repeat``), leaving rank 0's first copies with the keys of a run without
    ``torch.distributed``."""
    if sampler is None and batch_sampler is None:
        return None
    return _process_group()


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def _is_default_collate(fn: Any) -> bool:
    try:
        from torch.utils.data import default_collate
    except ImportError:
        return False
    return fn is default_collate


class Loader:
    """Loads batches of ``dataset`` through ``transform`` with native worker threads.

    Built as ``torch.utils.data.DataLoader`` is, with the same positional order; iterating
    yields ``(images, labels)``: ``torch.float32 [B, 3, H, W]`` (``torch.uint8`` where the
    transform ends in ``PILToTensor``, or with ``output="uint8"``) and ``torch.int64 [B]``,
    handed over without a copy. Each ``iter(loader)`` is one epoch, started (and counted) at
    its first ``next()``; epochs count up from 0 (``set_epoch`` sets the next one, as with
    torch's ``DistributedSampler``), and the epoch, ``seed`` and sample index alone decide the
    shuffle and every random draw, whatever ``num_workers``.

    ``dataset``: a ``ferroloader.ImageFolder``/``FileList``, torchvision's ``ImageFolder`` or
    ``DatasetFolder`` (its ``transform`` is used when ``transform`` is not given, its
    ``target_transform`` called on each label as the batch is handed out), a sequence of
    ``(path, label)`` or ``(bytes, label)``, a torch ``Subset``/``ConcatDataset`` of those, or
    any map-style dataset whose items are ``(path or bytes, label)`` (see
    ``ferroloader.datasets``). Given with no ``transform`` (here or on it), any other map-style
    dataset (your own class that opens and transforms its images and returns tensors, a dict,
    anything; a torchvision dataset with a custom ``loader`` or a joint ``transforms``) runs in
    Python as DataLoader runs it: ``dataset[i]`` in ``num_workers`` worker *processes*,
    ``collate_fn`` and ``pin_memory`` as there, ``worker_init_fn`` allowed, nothing native
    (``ferroloader._pydataset``); the order, the per-sample seeding of torch's, ``random``'s and
    numpy's generators, ``state_dict`` resume, ``on_error`` and ``profile`` (label
    ``"python"``) hold as below. An ``IterableDataset`` streams likewise, each worker seeded
    from ``(seed, epoch, worker)``, with DataLoader's rules for one (no shuffle, sampler or
    rank), resumed by replaying the epoch's delivered batches. ``python_dataset``: ``"warn"`` (default: one ``UserWarning``
    saying why), ``"allow"``, ``"error"`` (refuse).

    DataLoader's arguments, where they differ:

    - ``num_workers``: worker *threads*; ``None`` (default) uses every core, ``0`` decodes in
      one thread on demand (no read-ahead), with the same batches as any other count.
    - ``batch_sampler``: each batch's indices; every batch but the last must have the
      sampler's ``batch_size`` (batches are fixed-size buffers). Where none is given,
      ``loader.sampler`` and ``loader.batch_sampler`` are, as DataLoader's, views of the
      loader's own order (:class:`LoaderSampler`, :class:`LoaderBatchSampler`). An index a
      ``sampler`` or ``batch_sampler`` yields several times in an epoch (with replacement,
      repeated augmentation) draws its own augmentation for each copy, on every rank of a
      ``torch.distributed`` job too (docs/data.md, "Samplers that repeat an index").
    - ``collate_fn``: ``None`` or ``default_collate`` collate natively (no cost); any other
      callable gets each batch as the list of ``(image, label)`` samples, as DataLoader would
      give it (each image a view, so ``default_collate`` inside it copies once).
      ``batch_transform`` is the cheaper way to transform whole batches (MixUp/CutMix).
    - ``pin_memory``: with CUDA, the batch ring is page-locked, so batches come pinned without
      the copy DataLoader's pinning thread makes; a ring buffer is reused only after the CUDA
      work queued on the current stream when its images were freed has finished (copy with
      ``non_blocking=True`` on that stream: the default, or the side stream in force where the
      CPU batch is dropped). Without CUDA, a warning and plain memory (``pinning`` says which).
    - ``persistent_workers``, ``multiprocessing_context``: accepted; workers are threads of
      this process, started per epoch at no cost that persisting would save, and their scratch
      persists anyway.
    - ``worker_init_fn``: called in each worker *process*, as DataLoader calls it: those of a
      dataset run in Python and of a Python tail run in processes (below). Native worker
      threads do not call it, as DataLoader with ``num_workers=0`` does not: there is no
      process to set up, and every draw (a tail's too) is seeded per sample from ``(seed,
      epoch, index)``, so the usual seeding ``worker_init_fn`` has nothing to do.
    - ``generator``: the seed is drawn from it once, at construction (``seed`` otherwise;
      default 0, so runs repeat).
    - ``prefetch_factor``: batches ahead per worker (``prefetch_batches`` sets the total:
      by default 2, or 3 where the batches are mixed natively, since a batch a worker is
      mixing holds its place in the window while the other workers go on).

    And of its own: ``transform``, ``output`` (the batches' dtype: ``None``, the default, is
    the transform's, ``uint8`` where it converts with ``PILToTensor`` (or v2's ``ToImage()``
    with no ``ToDtype``, timm's ``MaybePILToTensor``), ``float32`` otherwise; ``"uint8"`` with
    a float transform stops before its ``Normalize``, left to the consumer as
    ``deferred_normalize`` says), ``decoder`` (``"turbo"``: libjpeg-turbo,
    Pillow-exact; ``"zune"``: pure Rust), ``on_error`` (``"raise"``, ``"skip"``: the failed
    sample left out, its batch filled from the next ones, or ``"replace"``: its slot filled
    with the dataset's next sample, index + 1, up to ``replace_retries`` (default 10) in turn,
    then raised, as timm's ``ImageDataset`` does; each failure is reported in
    ``LoaderIterator.skipped``), ``profile`` (``"off"``, ``"spans"``,
    ``"counters"``; read it with ``loader.profile()``), ``rank``/``world_size`` (``DistributedSampler``'s cut;
    where neither, nor a ``sampler``/``batch_sampler``, is given and ``torch.distributed`` is
    initialized with two processes or more, its rank and world size when the loader is made,
    as ``DistributedSampler`` reads them: Lightning injects its sampler into DataLoaders only;
    ``rank=0, world_size=1`` keeps every sample on every rank),
    ``tensor_type`` (``"torch"`` or ``"numpy"``), ``batch_transform`` (a callable on each
    ``(images, labels)`` batch, returning what the iterator yields), ``scratch_limit`` (bytes
    of decode scratch a worker keeps between samples, default 64 MiB: more, after an outlier
    image, is freed and regrown as needed), ``python_tail`` (below), ``exif_transpose``
    (``True``: each image transposed per its EXIF Orientation, 2 to 8, exactly as
    ``PIL.ImageOps.exif_transpose`` does, before any transform sees it, so crops and resizes
    see the upright size; a Python tail with no native op before it gets the image transposed
    too; ``False``: the pixels as stored; default ``None``: as the dataset reads its images,
    that is transposed for a Hugging Face ``datasets.Dataset``, whose ``Image()`` column
    decodes so, and as stored for the rest, as torchvision's ``ImageFolder`` loader and timm's
    readers give them).

    Transforms with no native equivalent (a ``Lambda``, your own callable, a third-party or
    not-yet-native torchvision transform) run in Python after the longest native prefix, on
    what torchvision would hand them there: a PIL RGB image when the prefix stops before
    ``ToTensor``, a CHW tensor after ``ToTensor``/``Normalize``/``PILToTensor``/``ToDtype``
    (with no native prefix at all, the image as Pillow opens it). The tail's result (a tensor,
    an array, or a PIL image converted as ``ToTensor``, or ``PILToTensor`` with
    ``output="uint8"``) is the sample, of any number of dimensions (``FiveCrop``'s
    ``(5, 3, H, W)`` batches as ``(B, 5, 3, H, W)``): its shape and dtype are the first
    sample's, found when the loader is built, and a later sample that differs is that sample's
    error (``on_error`` applies). The tail holds the GIL and runs one sample at a time across
    the process, in its own profile span (``python_tail``, each op ``python:<Name>``); before
    each sample, torch's CPU generator, ``random`` and numpy's global generator are seeded from
    ``(seed, epoch, index)`` and restored after, so batches stay the same whatever
    ``num_workers``.
    ``python_tail_workers``: where the tail runs. ``"threads"``: as above. ``"processes"``
    (with two workers or more): in ``num_workers`` worker processes as DataLoader runs a
    transform (``ferroloader._pydataset``), each running the native prefix, then the tail, in
    parallel; faster for a heavy tail (another library's RandAugment), slower for a light one
    (DataLoader's per-sample Python and batch transfer). ``"auto"`` (default): processes where
    no op is native (the native workers would only read files); after native ops, it times a
    few samples when the loader is built and takes processes where the tail, one sample at a
    time, would hold the GIL as long as the threads take to run everything in parallel
    (``workers * python > prefix + python``): a heavy tail, or a light one with many workers.
    ``python_tail_where`` says which it took, ``python_tail_costs`` what it timed. The same
    draws, errors and first-sample shape rule hold either way.
    ``python_tail``: ``"warn"`` (default: one ``UserWarning`` naming the ops run in Python),
    ``"allow"`` (silently), ``"error"`` (refuse, naming the first op without a native
    equivalent).
    """

    def __init__(
        self,
        dataset: Any,
        batch_size: Optional[int] = 1,
        shuffle: Optional[bool] = None,
        sampler: Optional[Iterable[int]] = None,
        batch_sampler: Optional[Iterable[Sequence[int]]] = None,
        num_workers: Optional[int] = None,
        collate_fn: Optional[Callable[[List[Any]], Any]] = None,
        pin_memory: bool = False,
        drop_last: bool = False,
        timeout: float = 0,
        worker_init_fn: Optional[Callable[[int], None]] = None,
        multiprocessing_context: Any = None,
        generator: Any = None,
        *,
        prefetch_factor: Optional[int] = None,
        persistent_workers: bool = False,
        pin_memory_device: str = "",
        in_order: bool = True,
        transform: Any = None,
        seed: Optional[int] = None,
        prefetch_batches: Optional[int] = None,
        output: Optional[Output] = None,
        decoder: DecoderName = "turbo",
        on_error: OnError = "raise",
        replace_retries: int = 10,
        profile: ProfileMode = "off",
        rank: Optional[int] = None,
        world_size: Optional[int] = None,
        tensor_type: TensorType = "torch",
        batch_transform: Optional[Callable[[Any, Any], Any]] = None,
        scratch_limit: int = 64 << 20,
        python_tail: PythonTail = "warn",
        python_dataset: PythonTail = "warn",
        python_tail_workers: TailWorkers = "auto",
        exif_transpose: Optional[bool] = None,
    ) -> None:
        self.dataset = dataset
        # As given: a transform taken from the dataset is not passed again when unpickling.
        self._transform_arg = transform
        #: Why the dataset runs in Python, as DataLoader runs it; ``None`` when read natively.
        read = reading(
            dataset,
            transform_given=transform is not None,
            worker_init_fn=worker_init_fn,
            collate_fn=None if collate_fn is None or _is_default_collate(collate_fn) else collate_fn,
            unbatched=batch_size is None,
        )
        self.python_dataset_reason: Optional[str] = read if isinstance(read, str) else None
        #: The dataset's ``target_transform``, called on each label (a class index) in the
        #: consumer's thread as each batch is handed out; ``None`` where it sets none.
        self.target_transform: Optional[Callable[[int], Any]] = None
        #: Where the image lies in the samples of the user's own dataset class read natively,
        #: when they are not ``(image, target)`` pairs (``_getitem.Layout``); else ``None``.
        self._layout: Optional[Layout] = None
        if not isinstance(read, str):
            self._source, dataset_transform, self.target_transform = read
            self._layout = sample_layout(self._source)
            if transform is None:
                if dataset_transform is None:
                    raise TypeError(
                        "transform: required (a ferroloader.transforms.Compose or a torchvision "
                        "Compose ending in ToTensor/PILToTensor), unless the dataset carries one"
                    )
                transform = dataset_transform
            elif dataset_transform is not None:
                raise ValueError(
                    "transform: given both here and on the dataset; ferroloader runs one pipeline"
                )
        else:
            self._source = dataset
        transform_given = transform
        self.unbatched = batch_size is None
        if self.unbatched and drop_last:
            raise ValueError(
                "batch_size: batch_size=None option disables auto-batching and is mutually "
                "exclusive with drop_last"
            )
        # The samplers given (None where not): `sampler`/`batch_sampler` show views otherwise.
        self._batch_sampler: Optional[Iterable[Sequence[int]]] = batch_sampler
        if batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise ValueError(
                    "batch_sampler: batch_sampler option is mutually exclusive with "
                    "batch_size, shuffle, sampler, and drop_last"
                )
            size = getattr(batch_sampler, "batch_size", None)
            if size is None:
                raise TypeError(
                    "batch_sampler: needs a batch_size attribute (as torch's BatchSampler "
                    "has): batches are fixed-size buffers, made before the first one is drawn"
                )
            batch_size = size
        self.batch_size = 1 if batch_size is None else _check_int("batch_size", batch_size, 1)
        self.shuffle = False if shuffle is None else _check_bool("shuffle", shuffle)
        self.drop_last = _check_bool("drop_last", drop_last)
        if generator is not None and seed is not None:
            raise ValueError("generator: give either a generator or a seed, not both")
        #: The ``generator`` given (DataLoader's attribute); the seed was drawn from it.
        self.generator = generator
        if generator is not None:
            import torch

            seed = int(torch.empty((), dtype=torch.int64).random_(generator=generator).item())
        self.seed = 0 if seed is None else _check_int("seed", seed, 0, 2**64 - 1)
        self.num_workers = None if num_workers is None else _check_int("num_workers", num_workers, 0)
        if self.num_workers == 0 and prefetch_factor is not None:
            raise ValueError(
                "prefetch_factor: prefetch_factor option could only be specified in "
                "multiprocessing; let num_workers > 0 to enable it, or set prefetch_factor to None"
            )
        if self.num_workers == 0 and persistent_workers:
            raise ValueError("persistent_workers: persistent_workers option needs num_workers > 0")
        self.persistent_workers = _check_bool("persistent_workers", persistent_workers)
        if prefetch_factor is not None and prefetch_batches is not None:
            raise ValueError("prefetch_factor: give prefetch_factor or prefetch_batches, not both")
        self._prefetch_given = prefetch_factor is not None or prefetch_batches is not None
        if prefetch_factor is not None:
            factor = _check_int("prefetch_factor", prefetch_factor, 1)
            prefetch_batches = factor * (self.num_workers or _cores())
        self.prefetch_batches = _check_int(
            "prefetch_batches", 2 if prefetch_batches is None else prefetch_batches, 1
        )
        self.in_order = _check_bool("in_order", in_order)
        self.scratch_limit = _check_int("scratch_limit", scratch_limit, 0, 2**64 - 1)
        if worker_init_fn is not None and not callable(worker_init_fn):
            raise TypeError(f"worker_init_fn: expected a callable, got {worker_init_fn!r}")
        # Called in worker processes only, as DataLoader calls it (never with num_workers=0):
        # a dataset or a Python tail run in processes; native threads need no set-up.
        self.worker_init_fn = worker_init_fn
        self.multiprocessing_context: Any = multiprocessing_context
        if isinstance(timeout, bool) or not isinstance(timeout, numbers.Real) or timeout < 0:
            raise ValueError(f"timeout: timeout option should be non-negative, got {timeout!r}")
        self.timeout: float = float(timeout)
        self.collate_fn: Optional[Callable[[List[Any]], Any]] = (
            None if collate_fn is None or _is_default_collate(collate_fn) else collate_fn
        )
        if self.collate_fn is not None and not callable(self.collate_fn):
            raise TypeError(f"collate_fn: expected a callable, got {collate_fn!r}")
        if batch_transform is not None and not callable(batch_transform):
            raise TypeError(f"batch_transform: expected a callable, got {batch_transform!r}")
        if batch_transform is not None and self._layout is not None:
            raise ValueError(
                f"batch_transform: takes (images, labels), but {type(dataset).__name__}'s samples "
                f"are {self._layout.describe()}; apply it in the loop or a collate_fn"
            )
        self.batch_transform: Optional[Callable[[Any, Any], Any]] = batch_transform
        if not self._prefetch_given and self._batch_mix_of_arguments() is not None:
            self.prefetch_batches = 3
        self.batch_mix: Optional[Union[BatchMix, FastCollateMix]] = None
        self.pin_memory: bool = _check_bool("pin_memory", pin_memory)
        if exif_transpose is None:
            # As the dataset's own reading turns its images: upright for a Hugging Face
            # Image() column (an EncodedTable says), as stored for the rest.
            native = self.python_dataset_reason is None
            exif_transpose = native and bool(getattr(self._source, "exif_transpose", False))
        self.exif_transpose: bool = _check_bool("exif_transpose", exif_transpose)
        self.pin_memory_device: str = pin_memory_device
        #: The batches' dtype, ``"float32"`` or ``"uint8"`` (``output``, or the transform's).
        self.output: str = "float32" if output is None else _check_choice("output", output, Output)
        self._output_given: bool = output is not None
        self.decoder: str = _check_choice("decoder", decoder, DecoderName)
        self.on_error: str = _check_choice("on_error", on_error, OnError)
        self.replace_retries: int = _check_int("replace_retries", replace_retries, 0, 2**32 - 1)
        # Python checks the type; the native loader parses the mode and names what it refuses.
        if not isinstance(profile, str):
            raise TypeError(f"profile: expected a str, got {type(profile).__name__} {profile!r}")
        self.profile_mode: str = profile
        self.tensor_type: str = _check_choice("tensor_type", tensor_type, TensorType)
        self.python_tail_mode: str = _check_choice("python_tail", python_tail, PythonTail)
        self.python_dataset_mode: str = _check_choice(
            "python_dataset", python_dataset, PythonTail
        )
        self.python_tail_workers: str = _check_choice(
            "python_tail_workers", python_tail_workers, TailWorkers
        )
        # Converted to ints here; the native sampler checks the pair (both given, rank below
        # world_size) and names the argument at fault.
        self.world_size: Optional[int] = (
            None if world_size is None else _check_int("world_size", world_size, 0)
        )
        self.rank: Optional[int] = None if rank is None else _check_int("rank", rank, 0)
        if self.rank is None and self.world_size is None:
            self.rank, self.world_size = _distributed_cut(dataset, sampler, batch_sampler)
        self._sampler_rank: Optional[Tuple[int, int]] = _sampler_rank(sampler, batch_sampler)
        if sampler is not None:
            if not hasattr(sampler, "__iter__"):
                raise TypeError(
                    f"sampler: expected an iterable of dataset indices, got {type(sampler).__name__}"
                )
            if self.shuffle:
                raise ValueError("sampler: sampler option is mutually exclusive with shuffle")
            if self.world_size is not None:
                raise ValueError("sampler: give either a sampler or rank/world_size, not both")
        self._sampler: Optional[Iterable[int]] = sampler
        self._resume: Optional[Dict[str, Any]] = None
        # Where the consumer stands in the epoch being iterated: (epoch, (position, batches,
        # delivered)) after each batch, None once it ended. The iterators write it; the loader
        # keeps no reference to them, so dropping one still ends its epoch.
        self._progress: Optional[Tuple[int, Tuple[int, int, List[int]]]] = None
        self._fingerprint: Optional[int] = None
        self._python: Optional["PythonDataset"] = None
        #: The views of a transform that returns several (``_views.trace_views``), each view's
        #: transform cut into its native prefix and Python tail; ``None`` for any other.
        self.views: Optional[List[TailSplit]] = None
        self._views: Optional[Views] = None
        #: Whether the views run in the native workers (every view native, one dtype, none
        #: leaving its Normalize to the consumer); else in worker processes (``ViewSamples``).
        self._native_views: bool = False
        if self.python_dataset_reason is not None:
            self._init_python_dataset(prefetch_factor, self.python_dataset_reason)
            return
        self._transform_given: Any = transform_given
        #: Pillow's mode of the dataset's images: ``"L"`` (one-channel samples) for a grayscale
        #: ``ImageArray`` (torchvision's MNIST) or ``EncodedTable`` (MNIST on the Hugging Face
        #: Hub) and for a ``WebDataset`` whose index says so (shards of such a dataset), else
        #: ``"RGB"``.
        self.image_mode: str = (
            self._source.mode
            if isinstance(
                self._source, (_native.ImageArray, _native.EncodedTable, _native.WebDataset)
            )
            else "RGB"
        )
        self._split: TailSplit = split_python_tail(
            transform_given,
            output=self.output if self._output_given else None,
            decoder=self.decoder,
            mode=self.image_mode,
        )
        self.output = self._split.output
        if self.exif_transpose and self._split.spec is not None:
            spec = json.loads(self._split.spec)
            spec["exif_transpose"] = True
            self._split = self._split._replace(spec=json.dumps(spec))
        #: The transforms run natively (the prefix, when some run in Python); ``None`` for a
        #: dataset run in Python.
        self.transform: Optional[Compose] = self._split.prefix
        #: The transforms run in Python after them, in order (empty when all are native).
        self.python_tail: List[Any] = self._split.tail
        #: Where the Python tail runs: ``"threads"`` (the native workers, under the GIL) or
        #: ``"processes"``; ``None`` without a tail.
        self.python_tail_where: Optional[str] = None
        #: What ``python_tail_workers="auto"`` measured to choose between them (``None`` where
        #: it measured nothing).
        self.python_tail_costs: Optional[TailCosts] = None
        self._views = self._trace_views()
        if self._views is not None:
            self.views = [self._split_view(t) for t in self._views.transforms]
            self.python_tail = [op for split in self.views for op in split.tail]
            self._native_views = _natively_viewed(self.views)
            if not self._native_views and self.tensor_type != "torch":
                raise ValueError(
                    "tensor_type: views with Python ops are made in DataLoader's worker "
                    "processes, as torch tensors; use tensor_type='torch'"
                )
        if self.python_tail:
            self._refuse_tail()
        tail_samples = self._tail_in_processes()
        if self.python_tail:
            self.python_tail_where = "threads" if tail_samples is None else "processes"
            self._warn_tail()
        if tail_samples is not None:
            workers = _cores() if self.num_workers is None else self.num_workers
            self._start_python_engine(tail_samples, workers, prefetch_factor, "a Python tail")
            return
        if self.tensor_type == "torch":
            try:
                import torch
            except ImportError as e:
                raise ImportError(
                    "tensor_type: 'torch' needs PyTorch (pip install torch), or use "
                    "tensor_type='numpy'"
                ) from e
            self._from_numpy: Any = torch.from_numpy
        else:
            self._from_numpy = None
        self._pin_device: Optional[str] = self._pinning() if self.pin_memory else None
        # The CUDA runtime that page-locks the ring, when pinning and one is found; otherwise a
        # pinned loader copies each batch into torch's pinned memory, as DataLoader does.
        self._page_lock: Optional[str] = None
        self._device_hold: Optional[DeviceReadHold] = None
        if self._pin_device is not None:
            self._page_lock = cuda_runtime_path()
            if self._page_lock is not None:
                self._device_hold = DeviceReadHold(self._pin_device)
        self.pinning: Optional[Literal["ring", "copy"]] = (
            None if self._pin_device is None else "ring" if self._page_lock else "copy"
        )
        """How batches are pinned: ``"ring"``, page-locked where the workers wrote them;
        ``"copy"``, copied into torch's pinned memory (no CUDA runtime library found to lock
        with); ``None``, not pinned."""
        self._native: _native.Loader = self._build()
        self._check_normalize()
        #: torchvision v2's MixUp/CutMix given as ``batch_transform`` (or applied by the
        #: ``collate_fn`` to the default collation), or timm's ``FastCollateMixup`` given as
        #: ``collate_fn``, run natively on each batch; ``None`` where they run as given.
        self.batch_mix = self._native_batch_mix()

    def _native_batch_mix(self) -> Optional[Union[BatchMix, FastCollateMix]]:
        """The batch op the ``batch_transform`` or ``collate_fn`` is, where the batches are
        what it would get from DataLoader: torch tensors of CHW samples, labels the class
        indices (no ``target_transform``), float32 where it may MixUp (torchvision's MixUp
        refuses integer images), uint8 for a ``FastCollateMixup`` (timm's collate makes uint8
        batches; it is given uint8 samples under its prefetcher)."""
        if self.tensor_type != "torch" or self.unbatched or self.target_transform is not None:
            return None
        if self.views is not None or self._layout is not None:
            return None  # each sample is several views, or not a pair: the op is run as given
        mix = self._batch_mix_of_arguments()
        if isinstance(mix, FastCollateMix):
            return mix if len(self.sample_shape) == 3 and self.dtype == "uint8" else None
        if mix is None or len(self.sample_shape) != 3:
            return None
        if self.dtype != "float32" and any(m.kind == "MixUp" for m in mix.choices):
            return None
        return mix

    def _batch_mix_of_arguments(self) -> Optional[Union[BatchMix, FastCollateMix]]:
        """The batch op the ``batch_transform`` or ``collate_fn`` is, whatever the batches."""
        if self.batch_transform is None:
            fast = FastCollateMix.of(self.collate_fn)
            if fast is not None:
                return fast
        given = self.batch_transform
        if given is None and self.collate_fn is not None:
            given = collated_mixing(self.collate_fn)
        return None if given is None else BatchMix.of(given)

    # -- a dataset run in Python ------------------------------------------------------------

    def _init_python_dataset(self, prefetch_factor: Optional[int], reason: str) -> None:
        """Runs the dataset as DataLoader runs it (``ferroloader._pydataset``), after
        ``python_dataset`` and the arguments that mean nothing there."""
        name = type(self.dataset).__name__
        if self.python_dataset_mode == "error":
            raise ValueError(
                f"dataset: {name} would run in Python ({reason}); python_dataset='error' "
                "refuses (give transform= and a dataset whose items are (path or bytes, label), "
                "or one of those docs/data.md lists)"
            )
        if self._output_given:
            raise ValueError(
                f"output: {self.output!r} has no effect on a dataset that makes its own "
                f"samples ({name} runs in Python: {reason})"
            )
        defaults = {
            "decoder": "turbo",
            "tensor_type": "torch",
            "exif_transpose": False,
        }
        for arg, default in defaults.items():
            if getattr(self, arg) != default:
                raise ValueError(
                    f"{arg}: {getattr(self, arg)!r} has no effect on a dataset that makes its own "
                    f"samples ({name} runs in Python: {reason})"
                )
        data = sys.modules.get("torch.utils.data")
        if data is not None and isinstance(self.dataset, data.IterableDataset):
            self._check_stream_arguments(name)
        workers = _cores() if self.num_workers is None else self.num_workers
        if self.python_dataset_mode == "warn":
            warnings.warn(
                f"dataset: {name} runs in Python, as DataLoader runs it ({reason}): in "
                f"{workers} worker processes, seeded per sample, nothing decoded natively; to "
                "decode natively, give transform= and items (path or bytes, label) "
                "(docs/data.md). python_dataset='allow' silences this, 'error' refuses",
                UserWarning,
                stacklevel=3,
            )
        self._transform_given = None
        self.image_mode = "RGB"
        self.transform = None
        self.python_tail = []
        self._start_python_engine(self.dataset, workers, prefetch_factor, reason)

    def _start_python_engine(
        self, dataset: Any, workers: int, prefetch_factor: Optional[int], reason: str
    ) -> None:
        """Runs ``dataset`` in DataLoader's worker processes (``ferroloader._pydataset``)."""
        self._from_numpy = None
        self._pin_device = None
        self._device_hold = None
        pinned = self.pin_memory and _cuda_available()
        self.pinning = "copy" if pinned else None
        try:
            from ferroloader._pydataset import PythonDataset
        except ImportError as e:
            raise ImportError(
                f"dataset: {type(self.dataset).__name__} runs in Python ({reason}), in torch's "
                "DataLoader workers, which needs PyTorch (pip install torch)"
            ) from e
        if prefetch_factor is None and self._prefetch_given and workers > 0:
            # The loader's total read-ahead, spread over DataLoader's per-worker count.
            prefetch_factor = max(1, -(-self.prefetch_batches // workers))
        self._python = PythonDataset(
            dataset,
            batch_size=self.batch_size,
            unbatched=self.unbatched,
            shuffle=self.shuffle,
            drop_last=self.drop_last,
            seed=self.seed,
            num_workers=workers,
            collate_fn=self.collate_fn,
            pin_memory=self.pin_memory,
            pin_memory_device=self.pin_memory_device,
            timeout=self.timeout,
            worker_init_fn=self.worker_init_fn,
            multiprocessing_context=self.multiprocessing_context,
            prefetch_factor=prefetch_factor,
            persistent_workers=self.persistent_workers,
            in_order=self.in_order,
            on_error=self.on_error,
            profile_mode=self.profile_mode,
            rank=self.rank,
            world_size=self.world_size,
            replace_retries=self.replace_retries,
            sampler_rank=self._sampler_rank,
        )

    def _check_stream_arguments(self, name: str) -> None:
        """What an ``IterableDataset``, which yields its samples in its own order, cannot do."""
        refused = {
            "shuffle": self.shuffle,
            "sampler": self._sampler is not None,
            "batch_sampler": self._batch_sampler is not None,
            "rank": self.rank is not None or self.world_size is not None,
        }
        for arg, given in refused.items():
            if given:
                raise ValueError(
                    f"{arg}: {name} is an IterableDataset, which yields its samples in its own "
                    "order (and splits them across ranks and workers itself, with "
                    "get_worker_info()); DataLoader refuses this too"
                )
        if self.on_error in ("skip", "replace"):
            instead = "skip to" if self.on_error == "skip" else "take instead"
            raise ValueError(
                f"on_error: {name} is an IterableDataset: an exception ends its iterator, so "
                f"there is no next sample to {instead}"
            )

    # -- native loader ------------------------------------------------------------------------

    def _tail_in_processes(self) -> "Optional[TailSamples]":
        """The samples of a transform with a Python tail, made in worker processes (probed: the
        first sample's shape and dtype set), or ``None`` where the tail runs under the GIL in
        the native worker threads.

        Under the GIL the tail runs one sample at a time across the process, whatever
        ``num_workers``, so its Python can cap the loader (a transform with no native op ran at
        half DataLoader's speed on two cores). In worker processes each runs the native prefix
        and then the tail, in parallel, as DataLoader's workers run a whole transform, at the
        cost of DataLoader's per-sample Python and batch transfer. ``"auto"`` takes processes
        where there is no native op (the native workers would only read files) and, after
        native ops, where a few samples timed here say the tail would hold the GIL too much of
        the time (:func:`_gil_bound`); ``"processes"`` always (two workers or more). Needs torch
        tensors out and a source Python can index (listed files, an in-memory array, a protocol
        dataset; not shards).

        A tail that returns a list, tuple or dict (several views of each image, as
        self-supervised recipes' transforms do) always runs here, with any ``num_workers``
        (0: in this process): a native slot holds one array per sample, so such samples are
        collated as DataLoader collates them. The first sample, probed, says which it is."""
        if self.views is not None:
            return None if self._native_views else self._view_samples()
        if not self.python_tail or self.tensor_type != "torch":
            return None
        workers = _cores() if self.num_workers is None else self.num_workers
        source = self._indexable_source()
        if source is None:
            return None
        from ferroloader._pydataset import TailSamples
        from ferroloader._pydataset import _describe as _describe_views

        split = self._split
        prefix = None
        if split.spec is not None:
            prefix = (split.spec, _first_image_size(source, self.exif_transpose))
        runner = TailRunner(split.input_kind, self.output, self.image_mode, self.exif_transpose)
        names = [tail_op_name(op) for op in self.python_tail]
        if split.spec is not None:
            self._check_normalize()
        samples = TailSamples(
            source, self.python_tail, names, runner, self.seed, prefix, self.target_transform
        )
        in_threads = self.python_tail_workers == "threads" or workers < 2
        try:
            samples.probe(skip=self.on_error == "skip")
        except Exception:
            if in_threads:
                return None  # the native workers report the sample's error where it comes
            raise
        if samples.views is not None:
            self._refuse_threads(_describe_views(samples.views))
            return samples
        if in_threads:
            return None
        if self.python_tail_workers == "auto" and split.spec is not None:
            self.python_tail_costs = samples.costs(_COST_SAMPLES)
            if self.python_tail_costs is None or not _gil_bound(self.python_tail_costs, workers):
                return None
        return samples

    def _indexable_source(self) -> Any:
        """The source as Python indexes it (a list of ``(path, label)`` for listed files), or
        ``None`` for shards."""
        source = self._source
        if isinstance(source, (_native.ImageFolder, _native.FileList, _native.PathList)):
            return list(source.samples)
        if isinstance(source, _native.WebDataset):
            return None
        return source

    def _trace_views(self) -> Optional[Views]:
        """The views of a transform that returns several, traced on the first image that
        opens (of the first 16), where the whole transform is one Python callable."""
        split = self._split
        if split.spec is not None or len(split.tail) != 1:
            return None
        source = self._indexable_source()
        if source is None:
            return None
        runner = TailRunner("bytes", self.output, self.image_mode, self.exif_transpose)
        for index in range(min(len(source), 16)):
            try:
                image = runner.to_input(read_sample(source, index)[1])
            except Exception:
                continue
            return trace_views(split.tail[0], image)
        return None

    def _split_view(self, transform: Any) -> TailSplit:
        """One view's transform cut as a whole transform is (EXIF transposition included)."""
        split = split_python_tail(
            transform,
            output=self.output if self._output_given else None,
            decoder=self.decoder,
            mode=self.image_mode,
        )
        if self.exif_transpose and split.spec is not None:
            spec = json.loads(split.spec)
            spec["exif_transpose"] = True
            split = split._replace(spec=json.dumps(spec))
        return split

    def _view_samples(self) -> "TailSamples":
        """The samples of a transform that returns several views, made in worker processes
        (in this process with ``num_workers=0``): each view's native prefix and Python tail on
        the bytes read once, collated as DataLoader collates the views (probed)."""
        from ferroloader._pydataset import TailSamples, ViewSamples

        assert self.views is not None and self._views is not None
        source = self._indexable_source()
        makers: List[TailSamples] = []
        order: List[int] = []
        seen: Dict[int, int] = {}
        for transform, split in zip(self._views.transforms, self.views):
            if id(transform) not in seen:
                seen[id(transform)] = len(makers)
                prefix = None
                if split.spec is not None:
                    prefix = (split.spec, _first_image_size(source, self.exif_transpose))
                runner = TailRunner(split.input_kind, split.output, self.image_mode, self.exif_transpose)
                names = [tail_op_name(op) for op in split.tail]
                makers.append(TailSamples(None, split.tail, names, runner, self.seed, prefix))
            order.append(seen[id(transform)])
        self._refuse_threads(f"{len(order)} views")
        samples = ViewSamples(
            source,
            makers,
            order,
            self._views.container,
            self.seed,
            self.target_transform,
            shared_decode=_share_decode(self.views),
        )
        samples.probe(skip=self.on_error == "skip")
        return samples

    def _refuse_threads(self, returned: str) -> None:
        """``python_tail_workers="threads"`` cannot make samples that are containers of views."""
        if self.python_tail_workers == "threads":
            raise ValueError(
                f"python_tail_workers: 'threads' cannot make these samples: the transform returns "
                f"{returned}, which DataLoader's collate batches (in worker processes, or in this "
                "process with num_workers=0); use 'auto' or 'processes'"
            )

    def _refuse_tail(self) -> None:
        """Applies ``python_tail="error"``, and refuses a tail op that cannot be called."""
        first = self.python_tail[0]
        if self.python_tail_mode == "error":
            # The converter's message names the op already; the planner's names the rule.
            split = next((v for v in self.views or [] if v.tail), self._split)
            why = split.reason
            if self.views is not None:
                why = f"view {self.views.index(split)} of {len(self.views)}: {why}"
            if not why.startswith("from_torchvision:"):
                why = f"transform: {tail_op_name(first)} ({first!r}) has no native equivalent here: {why}"
            hint = _wrapped_compose_hint(self.python_tail, self.output, self.decoder, self.image_mode)
            raise ValueError(f"{why} (python_tail='error' refuses to run it in Python){hint}")
        for op in self.python_tail:
            if not callable(op):
                raise TypeError(f"transform: {op!r} is neither a known transform nor callable")

    def _warn_tail(self) -> None:
        """Applies ``python_tail="warn"``: one warning naming the ops run in Python and where."""
        if self.python_tail_mode != "warn":
            return
        names = ", ".join(tail_op_name(op) for op in self.python_tail)
        if self.python_tail_where == "threads":
            where = (
                "after the native ops, holding the GIL (one sample at a time, whatever "
                "num_workers; python_tail_workers='processes' runs them in worker processes, "
                "faster for a heavy tail)"
            )
        elif self.views is not None:
            where = (
                f"after the native ops of their view (of {len(self.views)}), in worker processes"
            )
        elif self._split.spec is None:
            where = "with no native op before them: in worker processes, as DataLoader runs them"
        else:
            where = "after the native ops, in worker processes (each running the native ops first)"
        hint = _wrapped_compose_hint(self.python_tail, self.output, self.decoder, self.image_mode)
        warnings.warn(
            f"transform: {names} run in Python {where}{hint}; python_tail='allow' silences "
            "this, 'error' refuses",
            UserWarning,
            stacklevel=3,
        )

    def _check_normalize(self) -> None:
        """Refuses a native ``Normalize`` with more values than the samples have channels (which
        torchvision's would fail on), as the planner knows the channels only after planning."""
        split = self._split
        if not split.tail:
            check_normalize_channels(split.prefix, self._native.sample_shape[0])
        elif split.spec is not None and split.input_kind in ("float32", "uint8"):
            # The prefix hands the tail a CHW tensor.
            shape = _native.check_pipeline(split.spec)["shape"]
            check_normalize_channels(split.prefix, cast(Tuple[Optional[int], ...], shape)[0])

    def _build(self) -> _native.Loader:
        split = self._split
        views: Optional[List[str]] = None
        if self._native_views:
            assert self.views is not None
            views = [cast(str, v.spec) for v in self.views]
            split = split._replace(spec=None, tail=[])
        tail = [(op, tail_op_name(op)) for op in split.tail] if split.tail else None
        runner = (
            TailRunner(split.input_kind, self.output, self.image_mode, self.exif_transpose)
            if split.tail
            else None
        )
        return _native.Loader(
            self._source,
            split.spec,
            batch_size=self.batch_size,
            shuffle=self.shuffle,
            drop_last=self.drop_last,
            seed=self.seed,
            num_workers=self.num_workers,
            prefetch_batches=self.prefetch_batches,
            in_order=self.in_order,
            on_error=self.on_error,
            rank=self.rank,
            world_size=self.world_size,
            profile_mode=self.profile_mode,
            scratch_limit=self.scratch_limit,
            tail=tail,
            tail_runner=runner,
            page_lock=self._page_lock,
            replace_retries=self.replace_retries,
            sampler_rank=self._sampler_rank,
            views=views,
            shared_decode=views is not None and _share_decode(self.views or []),
        )

    def _loader(self) -> "_native.Loader | PythonDataset":
        """The native loader (rebuilt, same configuration and epoch, in a forked child, where
        the parent's one is unusable), or the engine of a dataset run in Python."""
        if self._python is not None:
            return self._python
        return self._native_loader()

    def _native_loader(self) -> _native.Loader:
        """The native loader; rebuilt (same configuration and epoch) in a forked child, where
        the parent's one is unusable."""
        if self._native.inherited:
            epoch = self._native.next_epoch
            self._native = self._build()
            self._native.set_epoch(epoch)
        return self._native

    def _pinning(self) -> Optional[str]:
        """The device to pin batches for, or ``None`` (with DataLoader's warning) when there is
        no accelerator."""
        if self.tensor_type != "torch":
            raise ValueError("pin_memory: pinning needs tensor_type='torch'")
        import torch

        device = self.pin_memory_device or "cuda"
        if device.startswith("cuda") and torch.cuda.is_available():
            torch.cuda.init()  # type: ignore[no-untyped-call]  # loads the runtime that locks the ring
            return device
        warnings.warn(
            "'pin_memory' argument is set as true but no accelerator is found, then device "
            "pinned memory won't be used.",
            stacklevel=3,
        )
        return None

    # -- iteration ----------------------------------------------------------------------------

    def _plan(self) -> Optional[List[int]]:
        """The epoch's indices when a sampler or batch sampler gives them; ``None`` for the
        loader's own order."""
        if self._batch_sampler is not None:
            batches = [list(b) for b in self._bounded("batch_sampler", self._batch_sampler)]
            for i, b in enumerate(batches[:-1]):
                if len(b) != self.batch_size:
                    raise ValueError(
                        f"batch_sampler: batch {i} has {len(b)} indices; every batch but the "
                        f"last must have batch_size={self.batch_size}"
                    )
            if batches and len(batches[-1]) > self.batch_size:
                raise ValueError(
                    f"batch_sampler: the last batch has {len(batches[-1])} indices, more than "
                    f"batch_size={self.batch_size}"
                )
            return [int(i) for b in batches for i in b]
        if self._sampler is not None:
            return [int(i) for i in self._bounded("sampler", self._sampler)]
        return None

    def _bounded(self, name: str, sampler: Any) -> List[Any]:
        """What ``sampler`` yields for one epoch, read before it starts: refused past
        :data:`_PLAN_BOUND` times its ``len()`` (else the dataset's), so that an endless sampler
        (iteration-based training's) is an error naming the way through, not a hang that eats
        memory."""
        stated = getattr(sampler, "__len__", None)
        count = int(stated()) if stated is not None else (self._dataset_len() or 0)
        if name == "batch_sampler" and stated is None:
            count = -(-count // self.batch_size)
        bound = _PLAN_BOUND * max(count, 1)
        drawn = list(itertools.islice(sampler, bound + 1))
        if len(drawn) > bound:
            said = f"its len() is {count}" if stated is not None else "it has no len()"
            raise ValueError(
                f"{name}: yielded more than {bound} items for one epoch ({said}): ferroloader "
                "reads an epoch's order before it starts (for its workers and for resuming), so "
                f"an endless {name} cannot be read; make its __iter__ end after an epoch and "
                "iterate the loader again for the next (itertools.chain.from_iterable(loader "
                "for _ in itertools.count()) streams epochs without end)"
            )
        return drawn

    def __iter__(self) -> "LoaderIterator | _PendingPythonEpoch":
        """One epoch, started at the iterator's first ``next()``: see :class:`LoaderIterator`."""
        # A new iterator supersedes the last one's progress: until it starts, the loader
        # stands at the start of the epoch it will run (or at a loaded state).
        self._progress = None
        if self._python is not None:
            return _PendingPythonEpoch(self, self._python)
        return LoaderIterator(self)

    def _start_native(self) -> _native.EpochIter:
        """Starts the epoch the loader stands at (a loaded state's point, if any): the first
        ``next()`` of a :class:`LoaderIterator`."""
        native = self._native_loader()
        if self._device_hold is not None:
            # Before the workers start: they refill what the device has finished reading.
            self._device_hold.release_finished()
        plan = self._plan()
        resume, self._resume = self._resume, None
        if resume is not None and resume["epoch"] == native.next_epoch:
            it = native.iter_resume(
                resume["epoch"], resume["position"], resume["batches"], resume["delivered"], plan
            )
        elif plan is None:
            it = native.iter()
        else:
            it = native.iter_indices(plan)
        if self.timeout:
            it.set_timeout(self.timeout)
        self._progress = (it.epoch, it.resume_state)
        return it

    def _iter_python(self, engine: "PythonDataset") -> "PythonDatasetIterator":
        plan = self._plan()
        resume, self._resume = self._resume, None
        epoch = engine.next_epoch
        point = None
        if resume is not None and resume["epoch"] == epoch:
            point = (resume["position"], resume["batches"], list(resume["delivered"]))
        it = engine.iter(epoch, plan, point, self)
        done = [] if point is None else point[2]
        self._progress = (epoch, (0 if point is None else point[0], len(done), list(done)))
        return it

    def __len__(self) -> int:
        """Batches per epoch (when no sample is skipped); samples with ``batch_size=None``."""
        if self._batch_sampler is not None:
            return len(self._batch_sampler)  # type: ignore[arg-type]
        if self._sampler is None:
            return self._loader().num_batches
        try:
            n = len(self._sampler)  # type: ignore[arg-type]
        except TypeError:
            raise TypeError("len(loader): the sampler has no len()") from None
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def set_epoch(self, epoch: int) -> None:
        """Sets the epoch the next ``iter(loader)`` runs (and the sampler's, if it has
        ``set_epoch``). A state loaded for another epoch is dropped."""
        epoch = _check_int("epoch", epoch, 0, 2**64 - 1)
        self._loader().set_epoch(epoch)
        if self._resume is not None and self._resume["epoch"] != epoch:
            self._resume = None
        for s in self._given_samplers():
            if hasattr(s, "set_epoch"):
                s.set_epoch(epoch)

    @property
    def epoch(self) -> int:
        """The epoch the next ``iter(loader)`` runs."""
        return self._loader().next_epoch

    @property
    def sampler(self) -> Optional[Iterable[int]]:
        """The sampler given; else, as DataLoader always has one, a :class:`LoaderSampler`:
        the loader's own order (``len()``, ``set_epoch``, the indices of the next epoch). With
        a ``batch_sampler``, its ``sampler`` attribute (torch's ``BatchSampler`` has one);
        ``None`` for an ``IterableDataset``, which has no indices."""
        if self._sampler is not None:
            return self._sampler
        if self._batch_sampler is not None:
            return cast(Optional[Iterable[int]], getattr(self._batch_sampler, "sampler", None))
        if self._python is not None and self._python.iterable:
            return None
        if not self.shuffle:
            return _in_order_sampler(self)
        return LoaderSampler(self)

    @property
    def batch_sampler(self) -> Optional[Iterable[Sequence[int]]]:
        """The batch sampler given; else, as DataLoader's, the :attr:`sampler`'s indices cut
        into batches (a :class:`LoaderBatchSampler`: ``batch_size``, ``drop_last``,
        ``len()``); ``None`` with ``batch_size=None`` or an ``IterableDataset``."""
        if self._batch_sampler is not None:
            return self._batch_sampler
        sampler = self.sampler
        if self.unbatched or sampler is None:
            return None
        return LoaderBatchSampler(sampler, self.batch_size, self.drop_last)

    def _given_samplers(self) -> List[Any]:
        """The samplers the user gave (and a given batch sampler's own): those told the epoch."""
        given = [self._sampler, self._batch_sampler, getattr(self._batch_sampler, "sampler", None)]
        return [s for s in given if s is not None]

    def _order(self, epoch: int) -> List[int]:
        """The dataset indices of ``epoch`` in the loader's own order (no sampler given)."""
        if self._python is not None:
            return self._python.order(epoch)
        return self._native_loader().epoch_order(epoch)

    @property
    def sample_shape(self) -> Tuple[int, ...]:
        """Shape of one sample, e.g. ``(3, 224, 224)``; a Python tail's may have any number of
        dimensions (``FiveCrop``'s ``(5, 3, 224, 224)``), as DataLoader would batch it.
        ``TypeError`` for a transform returning several views (each has its own)."""
        if self._native_views:
            shapes = self._native_loader().view_shapes or []
            views = ", ".join(f"{tuple(shape)} {self.dtype}" for shape in shapes)
            raise TypeError(f"sample_shape: each sample is {len(shapes)} views [{views}]")
        return tuple(self._loader().sample_shape)

    @property
    def dtype(self) -> str:
        """``"float32"`` or ``"uint8"``."""
        return self._loader().dtype

    @property
    def deferred_normalize(self) -> Optional[Tuple[List[float], List[float]]]:
        """With ``output="uint8"``, the transform's ``Normalize(mean, std)`` left for the
        consumer to apply as ``(x / 255 - mean) / std``; else ``None``. To reproduce torchvision
        to the bit, compute ``x / 255`` in float32 as the transform's conversion does: v1's
        ``ToTensor``/``ConvertImageDtype`` divide (``x.float().div(255)``), v2's
        ``ToDtype(torch.float32, scale=True)``/``ConvertImageDtype`` multiply
        (``x.float().mul(1.0 / 255)``, what ``v2.functional.to_dtype(x, torch.float32,
        scale=True)`` computes); then ``.sub(mean).div(std)``. The two differ by one ulp on
        half the levels."""
        return self._loader().deferred_normalize

    def profile(self) -> Profile:
        """Everything recorded since the loader was made (or since ``take_profile``), as one
        pipeline labelled ``"native"``: empty unless made with ``profile="spans"`` or
        ``"counters"``. An epoch still running is included up to its workers' last hand-off;
        finish or drop its iterator first for all of it."""
        return Profile(self._loader().profile())

    def take_profile(self) -> Profile:
        """Like ``profile()``, then forgets it (bounds memory over long runs)."""
        return Profile(self._loader().take_profile())

    # -- resuming -----------------------------------------------------------------------------

    def _dataset_fingerprint(self) -> int:
        if self._fingerprint is None:
            self._fingerprint = self._loader().dataset_fingerprint()
        return self._fingerprint

    def state_dict(self) -> Dict[str, Any]:
        """Where the loader stands: after the batches the current epoch's iterator has
        returned, or at the start of the next epoch. Small (a few numbers; in completion order
        the batches delivered), picklable and versioned; ``load_state_dict`` on a loader built
        the same way resumes exactly there, whatever its ``num_workers``."""
        if self._resume is not None:
            return dict(self._resume)
        if self._progress is not None:
            epoch, (position, batches, delivered) = self._progress
        else:
            position, batches, delivered, epoch = 0, 0, [], self.epoch
        state = self._state_at(epoch, position, batches, delivered)
        if self._python is not None and self._python.iterable:
            if batches and not self.in_order and (self.num_workers or _cores()) > 1:
                raise ValueError(
                    "state_dict: an IterableDataset's epoch resumes by replaying the batches "
                    "delivered; with in_order=False its workers' batches come in no set order"
                )
            # Each worker's share of the stream depends on how many there are.
            state["stream_workers"] = self.num_workers
        return state

    def _dataset_len(self) -> Optional[int]:
        try:
            return len(self._source)
        except TypeError:  # an IterableDataset without len()
            return None

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Makes the next ``iter(loader)`` continue where ``state`` (from ``state_dict``) was:
        the same batches, sample for sample and draw for draw. Refuses a state of another
        version, dataset, seed, batching or rank with a ``ValueError`` naming what differs."""
        if not isinstance(state, dict):
            raise TypeError(f"state: expected a dict from Loader.state_dict(), got {type(state).__name__}")
        if state.get("version") != STATE_VERSION:
            raise ValueError(
                f"state: version {state.get('version')!r} is not this loader's {STATE_VERSION}"
            )
        if state.get("dataset_len") != self._dataset_len() or state.get(
            "dataset_fingerprint"
        ) != self._dataset_fingerprint():
            raise ValueError(
                f"state: saved for another dataset ({state.get('dataset_len')} samples, "
                f"fingerprint {state.get('dataset_fingerprint')}; this one has "
                f"{self._dataset_len()}, fingerprint {self._dataset_fingerprint()})"
            )
        state = self._as_this_ranks(state)
        keys = list(_STATE_KEYS)
        if self._python is not None and self._python.iterable:
            keys.append("num_workers")
            state = {**state, "num_workers": state.get("stream_workers")}
        for key in keys:
            if state.get(key) != getattr(self, key):
                raise ValueError(
                    f"state: saved with {key}={state.get(key)!r}, this loader has "
                    f"{key}={getattr(self, key)!r}"
                )
        resume = {k: state[k] for k in ("epoch", "position", "batches", "delivered")}
        resume["epoch"] = _check_int("state epoch", resume["epoch"], 0, 2**64 - 1)
        self._loader().set_epoch(resume["epoch"])
        for s in self._given_samplers():
            if hasattr(s, "set_epoch"):
                s.set_epoch(resume["epoch"])
        self._resume = dict(state)

    def _state_after(self, epoch: int, batches: int) -> Dict[str, Any]:
        """The ``state_dict`` this loader gives once the first ``batches`` batches of epoch
        ``epoch`` were handed out, made from that count alone (as a trainer that counts its
        steps resumes: Hugging Face's ``Trainer`` skips that many batches); for
        ``load_state_dict``. ``ValueError`` naming why where a count does not say the point:
        with ``in_order=False`` (which batches came first is the completion order's) or
        ``on_error="skip"`` (a skipped sample moves every later batch), for a dataset streamed
        in Python, or past the epoch's last batch."""
        epoch = _check_int("epoch", epoch, 0, 2**64 - 1)
        batches = _check_int("batches", batches, 0)
        if not self.in_order:
            raise ValueError(
                "in_order: a batch count says where an epoch stands only in order (with "
                "in_order=False the first batches are those the workers finished first)"
            )
        if self.on_error == "skip":
            raise ValueError(
                "on_error: a batch count says where an epoch stands only when no sample is "
                "skipped (on_error='skip' moves every batch after a skipped sample)"
            )
        if self._python is not None and self._python.iterable:
            raise ValueError(
                "dataset: an IterableDataset's epoch resumes by replaying its batches, not "
                "from a batch count"
            )
        if batches >= len(self):
            raise ValueError(
                f"batches: {batches} batches handed out of an epoch of {len(self)}; an epoch's "
                "end is the next epoch's start (set_epoch)"
            )
        # In order, with no sample skipped, each batch but the epoch's last uses batch_size
        # places of the epoch's plan.
        return self._state_at(epoch, batches * self.batch_size, batches, [])

    def _state_at(self, epoch: int, position: int, batches: int, delivered: List[int]) -> Dict[str, Any]:
        """The state of this loader at that point of ``epoch`` (``state_dict``'s fields)."""
        state: Dict[str, Any] = {
            "version": STATE_VERSION,
            "epoch": epoch,
            "position": position,
            "batches": batches,
            "delivered": list(delivered),
            "dataset_len": self._dataset_len(),
            "dataset_fingerprint": self._dataset_fingerprint(),
        }
        for key in _STATE_KEYS:
            state[key] = getattr(self, key)
        return state

    def _as_this_ranks(self, state: Dict[str, Any]) -> Dict[str, Any]:
        """``state``, saved by another rank of the same world size, as this rank's own where
        it says the same thing for every rank; else ``state`` unchanged (the rank check then
        names the difference), or a ``ValueError`` saying why it cannot.

        A DDP checkpoint is written by rank 0 alone: Lightning saves rank 0's loader state and
        hands it to every rank on resume. The ranks step in lockstep, so each had delivered as
        many batches, and every rank's share has as many samples (``DistributedSampler``'s
        padding); in order and with no sample skipped, a batch count says the same point on
        every rank. Out of order (each rank's own completion order) or after a skip (each
        rank's own sample count), it does not."""
        saved = state.get("rank")
        if saved is None or self.rank is None or saved == self.rank:
            return state
        if state.get("world_size") != self.world_size:
            return state
        batches, position = state.get("batches"), state.get("position")
        share = self._loader().num_samples
        whole = isinstance(batches, int) and position == min(batches * self.batch_size, share)
        if not (self.in_order and self.on_error in ("raise", "replace") and whole):
            raise ValueError(
                f"state: saved by rank {saved}, this loader is rank {self.rank}: a state says "
                "the same point on every rank only for a loader with in_order=True and "
                "on_error='raise' (each rank's own completion order or skipped samples "
                "otherwise); load each rank's own state_dict"
            )
        return {**state, "rank": self.rank}

    # -- pickling: by configuration ----------------------------------------------------------

    def _config(self) -> Dict[str, Any]:
        return {
            "dataset": self.dataset,
            "batch_size": None if self.unbatched else self.batch_size,
            "shuffle": self.shuffle,
            "sampler": self._sampler,
            "batch_sampler": self._batch_sampler,
            "num_workers": self.num_workers,
            "collate_fn": self.collate_fn,
            "pin_memory": self.pin_memory,
            "drop_last": self.drop_last,
            "timeout": self.timeout,
            "multiprocessing_context": self.multiprocessing_context,
            "persistent_workers": self.persistent_workers,
            "pin_memory_device": self.pin_memory_device,
            "prefetch_batches": self.prefetch_batches if self._prefetch_given else None,
            "in_order": self.in_order,
            "transform": self._transform_arg,
            "seed": self.seed,
            "output": self.output if self._output_given else None,
            "decoder": self.decoder,
            "on_error": self.on_error,
            "replace_retries": self.replace_retries,
            "profile": self.profile_mode,
            "rank": self.rank,
            "world_size": self.world_size,
            "tensor_type": self.tensor_type,
            "batch_transform": self.batch_transform,
            "scratch_limit": self.scratch_limit,
            "python_tail": self.python_tail_mode,
            "python_dataset": self.python_dataset_mode,
            "python_tail_workers": self.python_tail_workers,
            "worker_init_fn": self.worker_init_fn,
            "exif_transpose": self.exif_transpose,
        }

    def __getstate__(self) -> Dict[str, Any]:
        engine = self._python if self._python is not None else self._native
        return {"config": self._config(), "epoch": engine.next_epoch}

    def __setstate__(self, state: Dict[str, Any]) -> None:
        config = dict(state["config"])
        dataset = config.pop("dataset")
        if config.get("batch_sampler") is not None:
            config["batch_size"] = 1
        self.__init__(dataset, **config)  # type: ignore[misc]
        engine = self._python if self._python is not None else self._native
        engine.set_epoch(state["epoch"])

    def __repr__(self) -> str:
        return (
            f"Loader(dataset={self.dataset!r}, batch_size={self.batch_size}, "
            f"shuffle={self.shuffle}, num_workers={self.num_workers}, "
            f"output={self.output!r}, transform={self._transform_given!r})"
        )


class LoaderSampler:
    """``Loader.sampler`` where none was given (DataLoader always has one): the loader's own
    order, as a sampler.

    Iterating it gives the dataset indices of the epoch the next ``iter(loader)`` runs (this
    rank's share; shuffled from ``(seed, epoch)``, or in order); reading it draws nothing and
    does not move the loader. ``set_epoch`` is the loader's, so a training loop written for a
    ``DistributedSampler`` (``loader.sampler.set_epoch(epoch)``) runs unchanged.
    """

    def __init__(self, loader: Loader) -> None:
        self.loader = loader

    def __iter__(self) -> Iterator[int]:
        return iter(self.loader._order(self.loader.epoch))

    def __len__(self) -> int:
        return self.loader._loader().num_samples

    def set_epoch(self, epoch: int) -> None:
        self.loader.set_epoch(epoch)

    def __repr__(self) -> str:
        return f"LoaderSampler(shuffle={self.loader.shuffle}, seed={self.loader.seed})"


_IN_ORDER_SAMPLER: Optional[type] = None


def _in_order_sampler(loader: Loader) -> LoaderSampler:
    """A :class:`LoaderSampler` of a loader that does not shuffle, which is also a torch
    ``SequentialSampler`` (made on first use, torch imported then): what frameworks test for to
    tell an unshuffled loader (Lightning's ``overfit_batches`` keeps such a loader as it is, where
    it would rebuild any other, which it can do for a DataLoader only)."""
    global _IN_ORDER_SAMPLER
    if _IN_ORDER_SAMPLER is None:
        from torch.utils.data import SequentialSampler

        def init(self: Any, of: Loader) -> None:
            LoaderSampler.__init__(self, of)
            self.data_source = of.dataset  # SequentialSampler's attribute

        _IN_ORDER_SAMPLER = type(
            "LoaderSampler", (LoaderSampler, SequentialSampler), {"__init__": init, "__module__": __name__}
        )
    return cast(LoaderSampler, _IN_ORDER_SAMPLER(loader))


class LoaderBatchSampler:
    """``Loader.batch_sampler`` where none was given: a sampler's indices cut into batches of
    ``batch_size`` (the last short, or dropped with ``drop_last``), as torch's
    ``BatchSampler``; what the loader's batches hold when no sample is skipped."""

    def __init__(self, sampler: Iterable[int], batch_size: int, drop_last: bool) -> None:
        self.sampler = sampler
        self.batch_size = batch_size
        self.drop_last = drop_last

    def __iter__(self) -> Iterator[List[int]]:
        indices = list(self.sampler)
        size = self.batch_size
        end = len(indices) - len(indices) % size if self.drop_last else len(indices)
        return (indices[k : k + size] for k in range(0, end, size))

    def __len__(self) -> int:
        n = len(self.sampler)  # type: ignore[arg-type]
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def set_epoch(self, epoch: int) -> None:
        if hasattr(self.sampler, "set_epoch"):
            self.sampler.set_epoch(epoch)


def _note_truncated_images_flag(error: BaseException) -> None:
    """Says, on the error of a truncated file, that Pillow's ``ImageFile.LOAD_TRUNCATED_IMAGES``
    (set by the script for DataLoader's sake) is not honoured: Pillow hands out such a file
    with its missing rows black, which libjpeg's recovery does not reproduce."""
    image_file = sys.modules.get("PIL.ImageFile")
    if getattr(error, "reason", None) != "truncated" or not getattr(image_file, "LOAD_TRUNCATED_IMAGES", False):
        return
    note = (
        "PIL.ImageFile.LOAD_TRUNCATED_IMAGES is set, which the native decoder does not honour "
        "(Pillow would hand out the file's decoded rows and black below); pass "
        "on_error='skip' or on_error='replace' to train past truncated files"
    )
    if hasattr(error, "add_note"):
        error.add_note(note)


def _note_dict_collate(error: TypeError) -> None:
    """Says, on a ``collate_fn`` that indexed a sample by a key, that samples are ``(image,
    target)`` tuples: Hugging Face's examples write their ``collate_fn`` for the dicts a
    ``with_transform`` dataset gives (``example["pixel_values"]``), which the loader, decoding
    the ``Image()`` column itself, does not make."""
    if "tuple indices must be integers or slices, not str" in str(error) and hasattr(error, "add_note"):
        error.add_note(
            "ferroloader: collate_fn gets DataLoader's list of (image, target) samples; one "
            "written for a Hugging Face with_transform dataset's dicts (example['pixel_values']) "
            "takes example[0] and example[1] here, or pass batch_transform=lambda images, "
            "labels: {'pixel_values': images, 'labels': labels} instead"
        )


#: How many times its ``len()`` (else the dataset's) a sampler may yield for one epoch before
#: it is taken for an endless one (:meth:`Loader._bounded`).
_PLAN_BOUND = 16


class LoaderIterator:
    """One epoch: yields ``(images, labels)`` until the epoch ends.

    The epoch starts at the first ``next()`` (or the first read of ``epoch``, ``len()`` or
    ``skipped``): it runs the epoch the loader stands at then (``set_epoch`` called after
    ``iter(loader)`` but before that applies, as a DataLoader with ``num_workers=0`` reads
    its ``DistributedSampler`` only when the first batch is asked for), from a state loaded by
    then, and only then are the workers started and the epoch counted. An iterator never
    advanced uses up nothing: Lightning calls ``iter()`` on a loader that is not a DataLoader
    once just to check that it can, and that must not cost the first epoch.

    Waiting for a batch releases the GIL and answers Ctrl-C (``KeyboardInterrupt``; the batch
    is not lost, the next ``next()`` returns it), and likewise past the loader's ``timeout``
    (``RuntimeError``). Dropping the iterator stops the epoch.
    """

    def __init__(self, loader: Loader) -> None:
        self._started: Optional[_native.EpochIter] = None
        self._loader = loader
        self._from_numpy = loader._from_numpy
        self._pin_device = loader._pin_device
        self._device_hold = loader._device_hold
        self._collate_fn = None if loader.collate_fn is None else Collate(loader.collate_fn)
        self._batch_transform = loader.batch_transform
        self._batch_mix = loader.batch_mix
        self._target_transform = loader.target_transform
        self._layout = loader._layout
        # The targets as DataLoader's collation gathers them before collating them (strings
        # stay so): a Hugging Face dataset's rows are dicts, each key's values a list; other
        # datasets' samples are (image, target) pairs, transposed into a tuple of targets.
        self._targets_batch: Callable[[List[Any]], Sequence[Any]] = (
            list if isinstance(loader._source, _native.EncodedTable) else tuple
        )
        self._unbatched = loader.unbatched
        native_loader = loader._native_loader()
        shape = tuple(native_loader.sample_shape)
        # A tail's result of another rank is held in three dimensions; each batch is viewed back.
        self._sample_shape = shape if shape != native_loader.held_shape else None
        # Views: each one's sample shape, and the container they come in.
        self._views: Optional[Tuple[List[Tuple[int, ...]], type]] = None
        if native_loader.view_shapes is not None and loader._views is not None:
            self._views = ([tuple(shape) for shape in native_loader.view_shapes], loader._views.container)
        # Batch mixing planned ahead for the workers: the batches not planned yet, each
        # batch's draws by its number, how far ahead (the batches the workers may have in
        # flight, and the one the consumer takes next).
        self._mix_image_size = (int(shape[-2]), int(shape[-1]))
        self._mix_unplanned: Deque[Tuple[int, int]] = collections.deque()
        self._mix_planned: Dict[int, Tuple[int, Any]] = {}
        self._mix_window = loader.prefetch_batches + 1
        self._logged_failures = 0
        self.finished = False
        """Whether the epoch has ended (``StopIteration`` or an error)."""

        self.indices: Optional[np.ndarray] = None
        """Dataset indices of the last batch's samples."""

    @property
    def _native_iter(self) -> _native.EpochIter:
        if self._started is None:
            self._started = self._loader._start_native()
            if self._batch_mix is not None:
                self._mix_unplanned.extend(self._started.planned_batches)
                self._plan_mixes(self._mix_window)
        return self._started

    def _plan_mixes(self, count: int) -> None:
        """Draws the mixes of the next ``count`` batches not planned yet and hands them to the
        workers, which mix each batch as they complete it (off this thread); stops planning for
        the epoch when the workers take none (``on_error="skip"``: batches are only known as
        they are delivered)."""
        mix: Optional[BatchOp] = self._batch_mix
        native = self._started
        if mix is None or native is None:
            return
        for _ in range(min(count, len(self._mix_unplanned))):
            number, samples = self._mix_unplanned.popleft()
            prepared = mix.prepare((self._loader.seed, self.epoch, number), samples, *self._mix_image_size)
            if prepared is None:
                continue
            name, args = mix.native_plan(prepared)
            if not native.plan_mix(number, name, **args):
                self._mix_unplanned.clear()
                return
            self._mix_planned[number] = (samples, prepared)

    def __iter__(self) -> "LoaderIterator":
        return self

    def __next__(self) -> Tuple["torch.Tensor", "torch.Tensor"]:
        images: Any
        labels: Any
        if self._device_hold is not None:
            self._device_hold.release_finished()
        try:
            images, labels, indices = next(self._native_iter)
        except StopIteration:
            self._end()
            raise
        except KeyboardInterrupt:
            raise  # the batch stays pending
        except RuntimeError as e:
            if "timed out" not in str(e):
                self._end()
            raise
        except _native.DecodeError as e:
            self._end()
            _note_truncated_images_flag(e)
            raise
        except BaseException:
            self._end()
            raise
        # Read once a batch: it copies the list of batches delivered so far.
        resume = None
        if self._loader._progress is not None and self._loader._progress[0] == self.epoch:
            resume = self._native_iter.resume_state
            self._loader._progress = (self.epoch, resume)
        self.indices = indices
        if self._loader.on_error == "replace":
            self._log_replaced()
        if self._batch_mix is not None:
            images, mixed = self._mix(images, labels, resume or self._native_iter.resume_state)
            # What is handed out (a view, in timm's half mode, whose base is the batch's).
            return self._torch_images(images), mixed.pin_memory() if self._pin_device is not None else mixed
        # What the dataset's __getitem__ would have returned as each target, before collation.
        targets = None
        if self._target_transform is not None:
            targets = [self._target_transform(label) for label in labels.tolist()]
        if self._sample_shape is not None:
            images = images.reshape((images.shape[0], *self._sample_shape))  # a view, no copy
        if self._views is not None:
            return self._deliver_views(images, labels, targets)  # type: ignore[no-any-return]
        if self._from_numpy is not None:
            images, labels = self._torch_images(images), self._from_numpy(labels)
            if self._pin_device is not None:
                labels = labels.pin_memory()
        return self._hand_out(images, lambda i: images[i], labels, targets)  # type: ignore[no-any-return]

    def _hand_out(self, images: Any, sample_image: Callable[[int], Any], labels: Any, targets: Optional[List[Any]]) -> Any:
        """The batch as DataLoader hands it out of ``images`` (a tensor, or a container of views)
        and the labels, or the ``targets`` the dataset gave: one sample with ``batch_size=None``
        (its image ``sample_image(0)``), the ``collate_fn``'s batch of the samples, the batch
        laid out as the user's dataset lays out its samples (``Layout``), the
        ``batch_transform``'s, or ``(images, labels)``."""
        layout = self._layout
        if self._unbatched:
            # DataLoader's batch_size=None hands each sample's label on as the dataset gave it:
            # a Python int, where numpy output keeps numpy's scalar.
            target = targets[0] if targets is not None else (
                int(labels[0]) if self._from_numpy is not None else labels[0]
            )
            return (sample_image(0), target) if layout is None else layout.sample(sample_image(0), target)
        if self._collate_fn is not None:
            if targets is None:
                targets = [int(label) for label in labels]
            views = [sample_image(i) for i in range(len(targets))]
            # A stack of these views in the collate_fn is the batch itself (`_collate`).
            torch = sys.modules.get("torch")
            whole = images if torch is not None and isinstance(images, torch.Tensor) else None
            if layout is not None:
                return self._collate_fn([layout.sample(v, t) for v, t in zip(views, targets)], views, whole)
            samples = list(zip(views, targets))
            try:
                return self._collate_fn(samples, views, whole)
            except TypeError as e:
                _note_dict_collate(e)
                raise
        if layout is not None:
            return layout.batch(images, targets or [0] * len(labels), self._collate_targets)
        if targets is not None:
            labels = self._collate_targets(self._targets_batch(targets))
        if self._batch_transform is not None:
            return self._batch_transform(images, labels)
        return images, labels

    def _deliver_views(self, images: List[np.ndarray], labels: np.ndarray, targets: Optional[List[Any]]) -> Any:
        """A batch of views as DataLoader delivers it: one contiguous tensor per view, each
        viewing the view's block of the batch buffer (``images``: one ``[B, elements]`` array
        per view; held until the device has read it from a page-locked ring, as any batch's
        images), in the transform's container; labels and the rest as for any batch."""
        assert self._views is not None
        shapes, container = self._views
        views: List[Any] = []
        for part, shape in zip(images, shapes):
            view = part.reshape(part.shape[0], *shape)  # a view of the block, no copy
            views.append(view if self._from_numpy is None else self._torch_images(view))
        out_labels: Any = labels
        if self._from_numpy is not None:
            out_labels = self._from_numpy(labels)
            if self._pin_device is not None:
                out_labels = out_labels.pin_memory()
        return self._hand_out(container(views), lambda i: container(v[i] for v in views), out_labels, targets)

    def _log_replaced(self) -> None:
        """Logs each sample replaced since the last batch, as timm's ``ImageDataset`` logs the
        samples it skips (``logging``'s ``ferroloader`` logger, level WARNING)."""
        failures = self._native_iter.skipped
        for index, path, why in failures[self._logged_failures :]:
            _log.warning("Replaced sample (index %d, file %s) with the next one: %s", index, path, why)
        self._logged_failures = len(failures)

    def _mix(self, images: np.ndarray, labels: np.ndarray, resume: Tuple[int, int, List[int]]) -> Tuple[np.ndarray, Any]:
        """The batch mixed (by the worker that completed it, or here with the same draws) and
        its mixed targets; plans the next batch's mix."""
        mix: Optional[BatchOp] = self._batch_mix
        native = self._native_iter
        assert mix is not None
        _, batches, delivered = resume
        number = batches - 1 if self._loader.in_order else delivered[-1]
        samples, prepared = self._mix_planned.pop(number, (None, None))
        mixed_by_worker = native.last_mixed
        if not mixed_by_worker:
            native.discard_mix(number)
        start = _native.now_ns()
        if prepared is None or samples != len(labels):
            assert not mixed_by_worker, f"batch {number} was mixed by a worker without a plan"
            images, targets, op = mix.apply(images, labels, (self._loader.seed, self.epoch, number))
        else:
            images, targets, op = mix.finish(images, labels, prepared, mixed_by_worker)
        if not mixed_by_worker:
            native.consumer_span(op, start, _native.now_ns())
        self._plan_mixes(1)
        return images, targets

    def _torch_images(self, images: np.ndarray) -> Any:
        """The batch's ``images`` as handed out: a torch tensor viewing them, held until the
        device has read them from a page-locked ring, or pinned by a copy without one."""
        if self._device_hold is not None:
            self._device_hold.watch(images)
        tensor = self._from_numpy(images)
        if self._pin_device is not None and self._device_hold is None:
            # No device argument: torch deprecates it (2.11); pinned memory serves any device.
            tensor = tensor.pin_memory()
        return tensor

    def _collate_targets(self, targets: Sequence[Any]) -> Any:
        """The targets as DataLoader's default collation batches them (ints into an int64
        tensor, tensors stacked, dicts and tuples field by field); a numpy array with
        ``tensor_type="numpy"``."""
        if self._from_numpy is None:
            return np.asarray(targets)
        from torch.utils.data import default_collate

        # A field of samples' tuples comes as a tuple (as DataLoader's zip makes it): strings
        # are handed on in it as they are.
        collated = default_collate(targets)  # type: ignore[arg-type]
        if self._pin_device is not None and hasattr(collated, "pin_memory"):
            collated = collated.pin_memory()
        return collated

    def _end(self) -> None:
        self.finished = True
        progress = self._loader._progress
        if progress is not None and progress[0] == self.epoch:
            self._loader._progress = None

    def __len__(self) -> int:
        return len(self._native_iter)

    @property
    def epoch(self) -> int:
        """The epoch being loaded."""
        return self._native_iter.epoch

    @property
    def skipped(self) -> List[Tuple[int, str, str]]:
        """Samples skipped so far (``on_error="skip"``), or replaced (``"replace"``): ``(index,
        path, why)``."""
        return self._native_iter.skipped


class _PendingPythonEpoch:
    """``iter(loader)`` for a dataset run in Python: a ``PythonDatasetIterator`` started at the
    first ``next()`` (or the first read of one of its attributes), as a
    :class:`LoaderIterator` starts, so that an iterator never advanced spawns no worker
    processes and uses up no epoch."""

    def __init__(self, loader: Loader, engine: "PythonDataset") -> None:
        self._loader = loader
        self._engine = engine
        self._started: "Optional[PythonDatasetIterator]" = None

    def _iterator(self) -> "PythonDatasetIterator":
        if self._started is None:
            self._started = self._loader._iter_python(self._engine)
        return self._started

    def __iter__(self) -> "_PendingPythonEpoch":
        return self

    def __next__(self) -> Any:
        return next(self._iterator())

    def __len__(self) -> int:
        return len(self._iterator())

    @property
    def finished(self) -> bool:
        """Whether the epoch has ended (``StopIteration`` or an error)."""
        return self._started is not None and self._started.finished

    @property
    def indices(self) -> Optional[Any]:
        """Dataset indices of the last batch's samples (a numpy array)."""
        return None if self._started is None else self._started.indices

    def __getattr__(self, name: str) -> Any:
        # Only what is not found above (epoch, skipped, ...): those of the started iterator.
        if name.startswith("__") or name in ("_started", "_loader", "_engine"):
            raise AttributeError(name)
        return getattr(self._iterator(), name)
