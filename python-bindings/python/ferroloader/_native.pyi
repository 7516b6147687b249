"""Type stubs of the extension module ``ferroloader._native`` (python-bindings/src)."""

from __future__ import annotations

import os
from typing import Any, Callable, Dict, Iterator, List, Literal, Mapping, Optional, Sequence, Tuple, Union, final

import numpy as np
import numpy.typing as npt

__all__ = [
    "__version__",
    "DecodeError",
    "ImageFolder",
    "FileList",
    "PathList",
    "ImageArray",
    "EncodedTable",
    "WebDataset",
    "Loader",
    "EpochIter",
    "BatchMemory",
    "Profile",
    "Summary",
    "CounterGroup",
    "now_ns",
    "view_seed",
    "end_epochs_at_exit",
    "mix_batch",
    "fast_collate_mix",
    "random_resized_crop_params",
    "resize_keep_ratio_params",
    "resized_crop",
    "augmix_apply",
    "elastic_apply",
    "elastic_displacement",
    "timm_rand_augment_draws",
    "timm_rand_augment_apply",
    "pillow_gaussian_blur",
    "timm_auto_augment_draws",
    "timm_augmix_draws",
    "timm_random_erasing_apply",
    "gaussian_noise_apply",
    "check_pipeline",
    "prepare",
    "write_shards",
    "epoch_indices",
    "python_seed",
    "repeat_numbers",
    "ProfileBuilder",
    "Prefix",
    "PROFILE_SCHEMA",
    "PROFILE_SCHEMA_VERSION",
    "CONSUMER",
    "IO",
    "COUNTER_NAMES",
    "counters_unavailable",
]
__version__: str

_StrPath = Union[str, "os.PathLike[str]"]

class DecodeError(OSError):
    """An image could not be decoded (unknown format, truncated or corrupt data, an
    unsupported feature, too many pixels)."""

    path: str
    index: Optional[int]
    op: str
    reason: str

@final
class ImageFolder:
    """torchvision's ImageFolder: ``root/<class>/**/<image>``, labelled by sorted class."""

    def __new__(
        cls,
        root: _StrPath,
        extensions: Optional[Sequence[str]] = None,
        allow_empty: bool = False,
    ) -> ImageFolder: ...
    @property
    def root(self) -> str: ...
    @property
    def classes(self) -> List[str]: ...
    @property
    def class_to_idx(self) -> Dict[str, int]: ...
    @property
    def samples(self) -> List[Tuple[str, int]]: ...
    @property
    def targets(self) -> List[int]: ...
    def __getitem__(self, index: int, /) -> Tuple[str, int]: ...
    def __len__(self) -> int: ...
    def __reduce__(self) -> Tuple[type, Tuple[object, ...]]: ...

@final
class WebDataset:
    """Tar shards in the WebDataset layout (``KEY.jpg`` + ``KEY.cls`` per sample) from local paths,
    ``file://``, ``http(s)://``, ``s3://``, ``gs://`` or ``az://`` URLs; brace patterns
    (``shard-{000000..000099}.tar``) expand to lists. Samples are listed from the index
    (``index.json`` next to the first shard unless ``index`` names another) or, without one, by
    reading every shard once; ``num_samples`` is checked against that count. A loader's epochs
    read whole shards in order, shuffled per (seed, epoch), a contiguous equal share per rank,
    through a shuffle buffer of ``shuffle_buffer`` samples (it yields from ``shuffle_initial``
    samples on, at most ``shuffle_buffer``, and grows to full size as it goes, as WebDataset's
    ``shuffle(bufsize, initial)``, so an epoch's first batch waits for fewer); fetched up to
    ``read_ahead_shards`` shards ahead of the reads (a shard counts until its first sample is
    read) while the shards held, ahead or still read, stay within ``read_ahead_bytes``, with
    ``retries`` retries (backoff from ``retry_backoff`` seconds) and an optional disk cache of
    remote shards. A remote shard larger than ``range_bytes`` (0: never) is fetched as
    concurrent byte-range requests cut between samples, at most ``max_requests`` in flight over
    all shards; a sample is served as soon as its range has arrived, and a failed range fails
    only its samples. ``storage_options``: object_store configuration keys on top of the
    environment's (``aws_endpoint``, ``aws_access_key_id``, ...); for ``s3://`` the environment
    includes the AWS profile (``AWS_PROFILE``, ``~/.aws/credentials`` and ``~/.aws/config``:
    keys, region, ``endpoint_url``), below ``AWS_*`` variables. Fork-safe: in a forked child a
    loader over it gets a dataset rebuilt there from the inherited listing (``inherited``: true
    in a child until then)."""

    def __new__(
        cls,
        urls: Union[str, "os.PathLike[str]", Sequence[str]],
        index: Optional[str] = None,
        num_samples: Optional[int] = None,
        label_key: str = "cls",
        shuffle_buffer: int = 1000,
        read_ahead_shards: int = 4,
        read_ahead_bytes: int = 1 << 30,
        cache_dir: Optional[_StrPath] = None,
        cache_limit_bytes: Optional[int] = None,
        retries: int = 5,
        retry_backoff: float = 0.2,
        storage_options: Optional[Dict[str, str]] = None,
        range_bytes: int = 8 << 20,
        max_requests: int = 8,
        shuffle_initial: int = 100,
    ) -> WebDataset: ...
    @property
    def inherited(self) -> bool: ...
    @property
    def urls(self) -> List[str]: ...
    @property
    def shard_sizes(self) -> List[int]: ...
    @property
    def targets(self) -> List[int]: ...
    def key(self, index: int) -> str: ...
    @property
    def exif_transpose(self) -> bool: ...
    @property
    def mode(self) -> Literal["RGB", "L"]: ...
    def index_json(self) -> str: ...
    def __len__(self) -> int: ...
    def __reduce__(self) -> Tuple[type, Tuple[object, ...]]: ...

@final
class FileList:
    """Files listed in a CSV, TSV or JSON Lines file, relative to ``root`` (default: the
    list's folder). Columns by name or 0-based index; class-name labels map to sorted class
    indices (``classes``, ``class_to_idx``)."""

    def __new__(
        cls,
        path: _StrPath,
        root: Optional[_StrPath] = None,
        delimiter: Optional[str] = None,
        has_header: Optional[bool] = None,
        path_column: Union[str, int, None] = None,
        label_column: Union[str, int, None] = None,
        format: Optional[Literal["csv", "tsv", "jsonl", "json", "delimited"]] = None,
    ) -> FileList: ...
    @property
    def classes(self) -> List[str]: ...
    @property
    def class_to_idx(self) -> Dict[str, int]: ...
    @property
    def path(self) -> str: ...
    @property
    def root(self) -> str: ...
    @property
    def paths(self) -> List[str]: ...
    @property
    def targets(self) -> List[int]: ...
    @property
    def samples(self) -> List[Tuple[str, int]]: ...
    def __getitem__(self, index: int, /) -> Tuple[str, int]: ...
    def __len__(self) -> int: ...
    def __reduce__(self) -> Tuple[type, Tuple[object, ...]]: ...

@final
class PathList:
    """Files with labels, from lists: read natively, no GIL per sample."""

    def __new__(cls, paths: Sequence[_StrPath], labels: Sequence[int]) -> PathList: ...
    @property
    def paths(self) -> List[str]: ...
    @property
    def targets(self) -> List[int]: ...
    @property
    def samples(self) -> List[Tuple[str, int]]: ...
    def __getitem__(self, index: int, /) -> Tuple[str, int]: ...
    def __len__(self) -> int: ...
    def __reduce__(self) -> Tuple[type, Tuple[object, ...]]: ...

#: One column of an ``EncodedTable``: the buffers (``bytes`` or CPU ``pyarrow.Buffer``s), and per
#: row the buffer's index (``2**32 - 1``: null), the start and the length of its bytes.
_ByteColumn = Tuple[
    Sequence[Any], npt.NDArray[np.uint32], npt.NDArray[np.uint64], npt.NDArray[np.uint64]
]

@final
class EncodedTable:
    """Encoded images lying in shared buffers (a Hugging Face dataset's Arrow buffers), with a
    label each; a row without bytes is read from the file its path names. Read natively, where
    they lie, no GIL per sample."""

    def __new__(
        cls,
        images: _ByteColumn,
        paths: Optional[_ByteColumn],
        labels: npt.NDArray[np.int64],
        name: str = ...,
        mode: Literal["RGB", "L"] = ...,
        exif_transpose: bool = ...,
        origin: Optional[Tuple[Any, ...]] = ...,
    ) -> EncodedTable: ...
    @property
    def exif_transpose(self) -> bool: ...
    def with_mode(self, mode: Literal["RGB", "L"]) -> EncodedTable: ...
    @property
    def targets(self) -> List[int]: ...
    @property
    def mode(self) -> Literal["RGB", "L"]: ...
    def describe(self, index: int) -> str: ...
    def __getitem__(self, index: int, /) -> Tuple[bytes, int]: ...
    def __len__(self) -> int: ...
    def __reduce__(self) -> Tuple[Any, ...]: ...

@final
class ImageArray:
    """Decoded images in one ``uint8`` array, ``(N, H, W, 3)`` RGB or ``(N, H, W)`` grayscale
    (mode ``"L"``: one-channel samples, as torchvision gives for MNIST), with a label each:
    copied in once, read natively, no GIL per sample."""

    def __new__(cls, images: Any, labels: Sequence[int], name: str = ...) -> ImageArray: ...
    @property
    def images(self) -> npt.NDArray[np.uint8]: ...
    @property
    def targets(self) -> List[int]: ...
    @property
    def mode(self) -> Literal["RGB", "L"]: ...
    @property
    def name(self) -> str: ...
    def __getitem__(self, index: int, /) -> Tuple[npt.NDArray[np.uint8], int]: ...
    def __len__(self) -> int: ...
    def __reduce__(self) -> Tuple[type, Tuple[object, ...]]: ...

@final
class BatchMemory:
    """Owns a delivered batch while numpy arrays view it (their ``base``)."""

    @property
    def images_address(self) -> int: ...
    @property
    def index(self) -> int: ...
    @property
    def epoch(self) -> int: ...
    @property
    def wait(self) -> float: ...
    def __len__(self) -> int: ...

# The images: one array, or one `[B, elements]` array per view for a loader of views.
_BatchArrays = Tuple[
    Union[npt.NDArray[np.generic], List[npt.NDArray[np.generic]]], npt.NDArray[np.int64], npt.NDArray[np.uintp]
]

@final
class EpochIter(Iterator[_BatchArrays]):
    """One epoch: ``(images, labels, indices)`` numpy arrays viewing the batch buffer (for a
    loader of views, ``images`` is one ``[B, elements]`` array per view, each its block)."""

    def __iter__(self) -> EpochIter: ...
    def __next__(self) -> _BatchArrays: ...
    def __len__(self) -> int: ...
    @property
    def epoch(self) -> int: ...
    @property
    def skipped(self) -> List[Tuple[int, str, str]]: ...
    @property
    def resume_state(self) -> Tuple[int, int, List[int]]: ...
    def set_timeout(self, seconds: Optional[float]) -> None: ...
    def consumer_span(self, op: str, start_ns: int, end_ns: int) -> None: ...
    @property
    def planned_batches(self) -> List[Tuple[int, int]]: ...
    def plan_mix(
        self,
        number: int,
        name: str,
        *,
        lam: Optional[float] = None,
        box: Optional[Tuple[int, int, int, int]] = None,
        mixes: Optional[Sequence[Union[None, float, Tuple[int, int, int, int]]]] = None,
    ) -> bool: ...
    def discard_mix(self, number: int) -> None: ...
    @property
    def last_mixed(self) -> bool: ...

@final
class Loader:
    """The native loader; ``spec`` is the pipeline as JSON.

    With a Python tail, ``spec`` is the native prefix's (``None``: no prefix, the tail decodes
    with Pillow), ``tail`` the ``(callable, name)`` ops run after it in Python (each in a
    ``python:<name>`` profile span inside ``python_tail``), and ``tail_runner`` a
    ``ferroloader._tail.TailRunner`` (what the first op gets, and how the result becomes the
    sample). The whole pipeline runs on the first sample here, with the GIL released, to find
    the sample shape and dtype; the tail runs under the GIL, one sample at a time per process,
    with torch's CPU generator, ``random`` and numpy seeded from ``(seed, epoch, index)``.
    ``page_lock``: the path of the CUDA runtime library that page-locks every batch buffer as it
    is allocated (``pin_memory``). ``replace_retries``: with ``on_error="replace"``, the samples
    tried in turn after a failing one.
    """

    def __new__(
        cls,
        dataset: object,
        spec: Optional[str],
        *,
        batch_size: int,
        shuffle: bool,
        drop_last: bool,
        seed: int,
        num_workers: Optional[int],
        prefetch_batches: int,
        in_order: bool,
        on_error: str,
        rank: Optional[int] = None,
        world_size: Optional[int] = None,
        profile_mode: str = "off",
        scratch_limit: Optional[int] = None,
        tail: Optional[Sequence[Tuple[Callable[[Any], Any], str]]] = None,
        tail_runner: Optional[Any] = None,
        page_lock: Optional[str] = None,
        replace_retries: int = 10,
        sampler_rank: Optional[Tuple[int, int]] = None,
        views: Optional[List[str]] = None,
        shared_decode: bool = False,
    ) -> Loader: ...
    def profile(self) -> Profile: ...
    def take_profile(self) -> Profile: ...
    def iter(self) -> EpochIter: ...
    def iter_indices(self, indices: Sequence[int]) -> EpochIter: ...
    def iter_resume(
        self,
        epoch: int,
        position: int,
        batches: int,
        delivered: Sequence[int],
        indices: Optional[Sequence[int]] = None,
    ) -> EpochIter: ...
    def dataset_fingerprint(self) -> int: ...
    def set_epoch(self, epoch: int) -> None: ...
    def epoch_order(self, epoch: int) -> List[int]: ...
    @property
    def next_epoch(self) -> int: ...
    @property
    def num_batches(self) -> int: ...
    @property
    def num_samples(self) -> int: ...
    @property
    def sample_shape(self) -> List[int]: ...
    @property
    def held_shape(self) -> Tuple[int, int, int]: ...
    @property
    def view_shapes(self) -> Optional[List[Tuple[int, int, int]]]: ...
    @property
    def dtype(self) -> str: ...
    @property
    def deferred_normalize(self) -> Optional[Tuple[List[float], List[float]]]: ...
    @property
    def inherited(self) -> bool: ...

@final
class Profile:
    """A recorded profile (schema ``ferroloader.profile``)."""

    @staticmethod
    def loads(json: str) -> Profile: ...
    @staticmethod
    def load(path: _StrPath) -> Profile: ...
    def to_json(self) -> str: ...
    def save(self, path: _StrPath) -> None: ...
    def save_trace(self, path: _StrPath, *, align: bool = False) -> None: ...
    def summary(self) -> Summary: ...
    def merge(self, other: Profile) -> Profile: ...
    @property
    def labels(self) -> List[str]: ...
    def __len__(self) -> int: ...

@final
class Summary:
    """Per pipeline throughput, waits, per-op times and counters."""

    def table(self) -> str: ...
    def to_json(self) -> str: ...
    def to_csv(self) -> str: ...
    def save_json(self, path: _StrPath) -> None: ...
    def save_csv(self, path: _StrPath) -> None: ...

@final
class CounterGroup:
    """CPU counter groups counting the thread that made it."""

    def __new__(cls, *, hardware: bool = True, software: bool = True) -> CounterGroup: ...
    @property
    def names(self) -> List[str]: ...
    @property
    def availability(self) -> Dict[str, Any]: ...
    @property
    def availability_json(self) -> str: ...
    def read(self) -> Tuple[int, ...]: ...

# The profile schema's constants (profiler/src/schema.rs, recorder.rs, counters.rs).
PROFILE_SCHEMA: str
PROFILE_SCHEMA_VERSION: int
CONSUMER: int
IO: int
"""Worker number of I/O spans (shard requests, with the bytes they moved)."""
COUNTER_NAMES: List[str]

@final
class ProfileBuilder:
    """Builds one pipeline's profile from raw records (the profiler crate's ProfileBuilder)."""

    def __new__(
        cls,
        label: str,
        mode: str,
        *,
        pid: int,
        num_workers: int,
        batch_size: int,
        start_ns: int,
        end_ns: int,
        meta: Mapping[str, str],
        dropped_spans: int,
    ) -> ProfileBuilder: ...
    def process(
        self, worker: int, pid: int, tid: int, counters: Sequence[str], availability: Optional[str]
    ) -> int: ...
    def plan(
        self, epoch: int, planned_ns: int, samples: Optional[Sequence[Optional[int]]]
    ) -> None: ...
    def deliver(
        self,
        process: int,
        epoch: int,
        records: Sequence[Tuple[Any, ...]],
        completed_ns: int,
        requested_ns: int,
        delivered_ns: int,
        facts: Optional[Tuple[Sequence[Optional[int]], Optional[int]]],
    ) -> int: ...
    def failure(
        self,
        process: int,
        sample: object,
        t_ns: int,
        op: str,
        cause: str,
        records: Sequence[Tuple[Any, ...]],
    ) -> None: ...
    def finish(self) -> Profile: ...

@final
class Prefix:
    def __new__(cls, spec: str, image_size: Optional[Tuple[int, int]] = None) -> "Prefix": ...
    def run(
        self, data: bytes, seed: int, epoch: int, index: int, repeat: int = 0
    ) -> Tuple[npt.NDArray[Any], List[Tuple[str, int, int, int]]]: ...
    def decode_pnm(self, data: bytes) -> bytes: ...

def counters_unavailable(reason: str) -> str: ...

def now_ns() -> int: ...
def view_seed(seed: int, view: int) -> int: ...
def end_epochs_at_exit() -> None: ...
def mix_batch(
    images: npt.NDArray[Any],
    *,
    lam: Optional[float] = None,
    box: Optional[Tuple[int, int, int, int]] = None,
) -> None:
    """torchvision v2's MixUp (``lam``, float32) or CutMix (``box`` ``(x1, y1, x2, y2)``,
    float32 or uint8) on a C-contiguous ``[B, C, H, W]`` batch, in place."""
def fast_collate_mix(
    images: npt.NDArray[Any],
    mixes: Sequence[Union[None, float, Tuple[int, int, int, int]]],
) -> None:
    """timm's FastCollateMixup on a C-contiguous uint8 ``[B, C, H, W]`` batch, in place: sample
    ``i`` becomes ``mixes[i]`` of itself and sample ``B - 1 - i`` as they were (``None`` kept, a
    float ``lam`` blended and rounded half to even, a box ``(x1, y1, x2, y2)`` the mirror's);
    one mix per sample, or per sample of the first half (``half`` mode)."""
def random_resized_crop_params(
    width: int,
    height: int,
    indices: Sequence[int],
    *,
    seed: int = 0,
    epoch: int = 0,
    scale: Tuple[float, float] = ...,
    ratio: Tuple[float, float] = ...,
    flip_p: float = 0.0,
    interpolation: Optional[Sequence[str]] = None,
    repeats: Optional[Sequence[int]] = None,
) -> npt.NDArray[np.int64]: ...
def resize_keep_ratio_params(
    width: int,
    height: int,
    indices: Sequence[int],
    *,
    seed: int = 0,
    epoch: int = 0,
    resize: Optional[str] = None,
    crop_size: Optional[Tuple[int, int]] = None,
    flip_p: float = 0.0,
    repeats: Optional[Sequence[int]] = None,
) -> npt.NDArray[np.int64]: ...
def resized_crop(
    data: bytes,
    top: int,
    left: int,
    height: int,
    width: int,
    size: Tuple[int, int],
    *,
    flip: bool = False,
    mean: Optional[Sequence[float]] = None,
    std: Optional[Sequence[float]] = None,
    output: str = "float32",
    decoder: str = "turbo",
    roi: bool = True,
    interpolation: str = "bilinear",
    scaling: str = "divide",
) -> npt.NDArray[np.generic]: ...
def augmix_apply(
    image: npt.NDArray[np.uint8],
    original_weight: float,
    chains: Sequence[Tuple[float, Sequence[Tuple[str, float]]]],
    *,
    interpolation: str = "bilinear",
    fill: Optional[Sequence[float]] = None,
    api: str = "v1",
) -> npt.NDArray[np.uint8]: ...
def elastic_apply(
    image: npt.NDArray[np.uint8],
    displacement: npt.NDArray[np.float32],
    *,
    interpolation: str = "bilinear",
    fill: Optional[Sequence[float]] = None,
    api: str = "v2",
) -> npt.NDArray[np.uint8]: ...
def elastic_displacement(
    height: int,
    width: int,
    *,
    alpha: Tuple[float, float] = ...,
    sigma: Tuple[float, float] = ...,
    api: str = "v1",
    uniforms: Optional[npt.NDArray[np.float32]] = None,
    seed: int = 0,
    index: int = 0,
) -> npt.NDArray[np.float32]: ...
def timm_rand_augment_draws(
    spec: str,
    indices: Sequence[int],
    *,
    seed: int = 0,
    epoch: int = 0,
    repeats: Optional[Sequence[int]] = None,
) -> List[List[Tuple[str, bool, float, Optional[float], Optional[str]]]]: ...
def timm_rand_augment_apply(
    image: npt.NDArray[np.uint8],
    name: str,
    arg: Optional[float] = None,
    *,
    interpolation: str = "bicubic",
    fill: Tuple[int, int, int] = ...,
) -> npt.NDArray[np.uint8]: ...
def pillow_gaussian_blur(
    image: npt.NDArray[np.uint8], radius: float
) -> npt.NDArray[np.uint8]: ...
def timm_auto_augment_draws(
    spec: str,
    indices: Sequence[int],
    *,
    seed: int = 0,
    epoch: int = 0,
    repeats: Optional[Sequence[int]] = None,
) -> List[Tuple[int, List[Tuple[str, bool, float, Optional[float], Optional[str]]]]]: ...
def timm_augmix_draws(
    spec: str,
    indices: Sequence[int],
    *,
    seed: int = 0,
    epoch: int = 0,
    repeats: Optional[Sequence[int]] = None,
) -> List[Tuple[List[float], float, List[List[Tuple[str, bool, float, Optional[float], Optional[str]]]]]]: ...
def timm_random_erasing_apply(
    spec: str,
    sample: npt.NDArray[np.float32],
    index: int,
    *,
    seed: int = 0,
    epoch: int = 0,
    repeat: int = 0,
) -> Tuple[
    npt.NDArray[np.float32],
    List[float],
    List[Tuple[int, int]],
    List[Tuple[int, int, int, int, npt.NDArray[np.float32]]],
]: ...
def gaussian_noise_apply(
    spec: str,
    sample: npt.NDArray[np.float32],
    index: int,
    *,
    seed: int = 0,
    epoch: int = 0,
    repeat: int = 0,
) -> Tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]: ...
def check_pipeline(spec: str) -> Dict[str, object]: ...
def prepare(
    src: str,
    dst: str,
    shorter_side: int,
    *,
    quality: int = 90,
    num_workers: int = 0,
    progress: Optional[Callable[[int, int], None]] = None,
) -> Dict[str, Any]: ...
def write_shards(
    dataset: Union[ImageFolder, FileList, PathList, EncodedTable],
    dst: str,
    *,
    classes: Optional[Sequence[str]] = None,
    shard_size: int,
    max_samples_per_shard: Optional[int] = None,
    shuffle: bool = False,
    seed: int = 0,
    num_workers: int = 0,
    progress: Optional[Callable[[int, int], None]] = None,
    names: Optional[Sequence[str]] = None,
    exif_transpose: bool = False,
    grayscale: bool = False,
) -> Dict[str, Any]: ...
def epoch_indices(
    len: int,
    *,
    shuffle: bool,
    seed: int,
    epoch: int,
    rank: Optional[int] = None,
    world_size: Optional[int] = None,
) -> List[int]: ...
def python_seed(seed: int, epoch: int, index: int, repeat: int = 0) -> int: ...
def repeat_numbers(
    len: int,
    *,
    indices: Optional[Sequence[int]] = None,
    rank: Optional[int] = None,
    world_size: Optional[int] = None,
) -> List[int]: ...
