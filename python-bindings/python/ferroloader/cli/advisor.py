"""``fl.advise`` and ``ferroloader advise``: measure where the input pipeline's time goes and
say what to do about it.

On a random sample of an ImageFolder (same classes), or of a Hugging Face dataset's rows (read
natively, as :class:`Loader` reads them: one code path, through :class:`_Sample`), all with the
native :class:`Loader`:

- **The cache ladder** (the caching method for finding a bottleneck): the pipeline's throughput
  with its output cached after each stage: ``files`` (read as is, from disk or the page cache),
  ``bytes`` (the encoded files in memory), ``decoded`` (decoded pixels in memory, stored as
  uncompressed 24-bit BMP: the native decoder has no raw-pixel input and no PPM reader, and BMP
  decoding is a header parse and a row copy), ``geometric`` (each sample's crop at the output
  size, stored as BMP, then only the remaining ops run behind a ``CenterCrop`` of that size; one
  epoch's random draws are frozen, as any cache of augmented samples freezes them) and
  ``batches`` (whole batches replayed from memory: the consumer loop's own ceiling, the
  headspace). The stage whose caching lifts throughput most over the stage before it is the
  bottleneck.
- **Strategies** (PRESTO's offline/online split): ``online``, ``resized-256``/``resized-320``
  (:func:`ferroloader.prepare`), ``decoded-uint8`` (decoded at shorter side 256, stored as BMP:
  :func:`prepare_decoded`), ``uint8-output`` (``output="uint8"``, Normalize on the GPU). Each
  with its storage extrapolated to the whole dataset, its preparation time, throughput, and its
  largest difference from the exact pipeline in 8-bit levels, measured on an evaluation-style
  pipeline (``Resize``, ``CenterCrop`` to the output size, uint8).
- **Workers**: throughput against worker threads; ``recommended`` is the count past which the
  next gains less than 10%.
- **The verdict**: the share of the consumer's time spent waiting for data, as TensorFlow's
  input-pipeline analyzer grades it: measured on the user's own training loop when given its
  profile (``training``: ``fl.torch.profile``), else with a simulated step (``step_ms``).

Throughputs are medians of ``rounds`` runs, alternating the order each round, so drift on a
shared machine affects every stage alike. The ladder holds the sample in memory several times
over (encoded, decoded, cropped, as batches): about 1.5 MB per ImageNet-sized image. This module must not print; it reports progress
through a callback. It never changes the source folder: everything it writes goes to a
temporary folder (removed) and to ``out``.
"""

from __future__ import annotations

import io
import json
import os
import platform
import random
import re
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np

from ferroloader import transforms as T
from ferroloader._hfdatasets import is_hugging_face, load_saved, saved_dataset, table_of
from ferroloader._native import EncodedTable, ImageFolder, PathList
from ferroloader.cli.compare import PAYS_OFF, mark_enough
from ferroloader.loader import Loader, Output
from ferroloader.offline import prepare

__all__ = [
    "ADVICE_VERSION",
    "Advice",
    "advise",
    "parse_size",
    "prepare_decoded",
]

#: Version of ``advice.json``.
ADVICE_VERSION = 1

#: Consumer wait shares that grade the verdict (TensorFlow's input-pipeline analyzer's).
MODERATE_WAIT = 0.05
HIGH_WAIT = 0.20

#: The stages of the cache ladder, in pipeline order.
LADDER = ("files", "bytes", "decoded", "geometric", "batches")

#: A strategy must lift throughput at least this much to be worth an action.
WORTH = 1.05

Progress = Callable[[str, int, int], None]
"""Called as ``progress(phase, done, total)`` as runs finish."""

PathLike = Union[str, "os.PathLike[str]"]

_GEOMETRIC = (T.RandomResizedCrop, T.Resize, T.CenterCrop, T.RandomHorizontalFlip)


@dataclass(frozen=True)
class Advice:
    """What :func:`advise` found: ``advice`` is the content of ``advice.json``."""

    advice: Dict[str, Any]
    json_path: Path
    html_path: Path

    @property
    def input_bound(self) -> str:
        """``"none"``, ``"moderate"`` or ``"high"``."""
        return str(self.advice["verdict"]["input_bound"])

    @property
    def actions(self) -> List[Dict[str, Any]]:
        """The actions, best measured gain first."""
        return list(self.advice["actions"])


_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([kmgtp]?)(i?)b?\s*$", re.IGNORECASE)


def parse_size(text: Union[str, int]) -> int:
    """Bytes from ``"50GB"`` (decimal), ``"40GiB"`` (binary), ``"1.5T"`` or a plain number."""
    if isinstance(text, int) and not isinstance(text, bool):
        if text < 0:
            raise ValueError(f"storage_budget: must be at least 0, got {text}")
        return text
    if not isinstance(text, str):
        raise TypeError(f"storage_budget: expected a size like '50GB' or bytes, got {text!r}")
    m = _SIZE.match(text)
    if m is None:
        raise ValueError(f"storage_budget: expected a size like 50GB, 40GiB or 1.5T, got {text!r}")
    number, prefix, binary = float(m.group(1)), m.group(2).lower(), bool(m.group(3))
    power = "kmgtp".find(prefix) + 1 if prefix else 0
    return int(number * (1024 if binary else 1000) ** power)


# -- data ---------------------------------------------------------------------------------------


@dataclass
class _Sample:
    """The sampled images and their labels: files of an ImageFolder (absolute ``paths``, and
    ``relative`` to its root), or rows of a Hugging Face dataset (``table``, read natively).
    Every measurement reads the sample through :meth:`source` and :meth:`encoded`, whichever
    it is."""

    labels: List[int]
    dataset_images: int
    paths: Optional[List[str]] = None
    relative: Optional[List[str]] = None
    table: Optional[EncodedTable] = None
    #: The sampled rows as a ``datasets.Dataset`` (``dataset.select``), what ``prepare`` takes.
    rows: Any = None

    def __len__(self) -> int:
        return len(self.labels)

    @property
    def scale(self) -> float:
        """Dataset images per sampled image: bytes of the sample times this estimate the
        whole dataset's."""
        return self.dataset_images / len(self)

    @property
    def exif_transpose(self) -> bool:
        """Whether the source's own reading turns images upright (a Hugging Face ``Image()``
        column does): every run of the sample, from any cache, turns them alike."""
        return self.table is not None and self.table.exif_transpose

    def source(self) -> Any:
        """The sample as the native loader reads it from the dataset."""
        return self.table if self.table is not None else PathList(self.paths or [], self.labels)

    def encoded(self) -> List[bytes]:
        """Each sampled image's encoded bytes."""
        if self.table is not None:
            return [self.table[i][0] for i in range(len(self.table))]
        return [Path(p).read_bytes() for p in self.paths or []]


def is_hugging_face_data(data: Any) -> bool:
    """Whether ``data`` is a Hugging Face ``datasets.Dataset`` or the directory its
    ``save_to_disk`` wrote."""
    if isinstance(data, (str, os.PathLike)):
        return saved_dataset(Path(data))
    return is_hugging_face(data)


def _draw_sample(data: Any, count: int, seed: int) -> _Sample:
    if is_hugging_face_data(data):
        dataset = load_saved(Path(data)) if isinstance(data, (str, os.PathLike)) else data
        n = len(dataset)
        if n == 0:
            raise ValueError(f"{_describe(data)}: the dataset has no rows")
        # In memory, so that no indices file goes into the dataset's folder.
        picked = dataset.select(sorted(random.Random(seed).sample(range(n), min(count, n))),
                                keep_in_memory=True)
        # A grayscale dataset (one channel from the loader) is measured in RGB: the cached
        # stages store RGB BMPs, and the stages must do the same work.
        table = table_of(picked).with_mode("RGB")
        return _Sample(labels=[int(y) for y in table.targets], dataset_images=n, table=table,
                       rows=picked)
    folder = ImageFolder(data)
    n = len(folder)
    if n == 0:
        raise ValueError(f"{data}: the ImageFolder has no images")
    chosen = sorted(random.Random(seed).sample(range(n), min(count, n)))
    samples = folder.samples
    root = folder.root
    paths = [os.path.abspath(samples[i][0]) for i in chosen]
    return _Sample(
        paths=paths,
        labels=[int(samples[i][1]) for i in chosen],
        relative=[os.path.relpath(p, os.path.abspath(root)) for p in paths],
        dataset_images=n,
    )


def _describe(data: Any) -> str:
    """``data`` as advice names it: its path, or a Dataset's split and size."""
    if isinstance(data, (str, os.PathLike)):
        return os.fspath(data)
    split = getattr(data, "split", None)
    return f"datasets.Dataset{'' if split is None else f' {split!s}'} ({len(data)} rows)"


def _link_folder(sample: _Sample, dst: Path) -> None:
    """The sample as an ImageFolder of symbolic links, for tools that take a folder."""
    for path, rel in zip(sample.paths or [], sample.relative or []):
        target = dst / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(path, target)


def _bmp(pixels: Any) -> bytes:
    """Uncompressed 24-bit BMP of an ``HxWx3`` uint8 array (lossless)."""
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(pixels), "RGB").save(buf, "BMP")
    return buf.getvalue()


def _decode(image: Union[str, bytes], shorter_side: Optional[int],
            exif_transpose: bool = False) -> Any:
    """The image (a path, or encoded bytes) as RGB pixels, as the loader decodes it (Pillow's
    ``convert("RGB")``, turned upright first with ``exif_transpose``), shrunk as
    ``Resize(shorter_side)`` does when its shorter side is longer."""
    from PIL import Image, ImageOps

    with Image.open(io.BytesIO(image) if isinstance(image, bytes) else image) as im:
        rgb = (ImageOps.exif_transpose(im) if exif_transpose else im).convert("RGB")
    w, h = rgb.size
    if shorter_side is not None and min(w, h) > shorter_side:
        # torchvision's Resize(int): the shorter side to `shorter_side`, the longer truncated.
        if w <= h:
            size = (shorter_side, int(shorter_side * h / w))
        else:
            size = (int(shorter_side * w / h), shorter_side)
        rgb = rgb.resize(size, Image.Resampling.BILINEAR)
    return np.asarray(rgb)


def prepare_decoded(
    src: PathLike, dst: PathLike, *, shorter_side: int = 256, num_workers: int = 0
) -> int:
    """Writes the ImageFolder ``src`` to ``dst`` decoded, as uncompressed BMP (``NAME.bmp``
    beside each source's name), shrunk to ``shorter_side`` when larger (as ``Resize`` does).
    Loading ``dst`` then parses and copies pixels instead of decoding. Returns the bytes
    written. Decoding uses Pillow (the native decoder's pixels, by construction of both)."""
    from ferroloader._extras import require

    require(("PIL",), "prepare_decoded")
    src, dst = Path(src), Path(dst)
    if src.resolve() == dst.resolve():
        raise ValueError("dst: must differ from src (sources are never changed)")
    folder = ImageFolder(src)
    root = os.path.abspath(folder.root)
    paths = [os.path.abspath(p) for p, _ in folder.samples]
    targets = [dst / (os.path.relpath(p, root) + ".bmp") for p in paths]
    return _write_decoded(paths, targets, shorter_side, num_workers)


def _write_decoded(paths: Sequence[str], targets: Sequence[Path], shorter_side: int,
                   num_workers: int) -> int:
    def one(job: Tuple[str, Path]) -> int:
        data = _bmp(_decode(job[0], shorter_side))
        job[1].parent.mkdir(parents=True, exist_ok=True)
        job[1].write_bytes(data)
        return len(data)

    with ThreadPoolExecutor(num_workers or _cores()) as pool:
        return sum(pool.map(one, zip(paths, targets)))


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def _decoded_bytes_estimate(path: str, shorter_side: int) -> int:
    """The BMP size of ``path`` decoded at ``shorter_side``, from its header alone."""
    from PIL import Image

    with Image.open(path) as im:
        w, h = im.size
    if min(w, h) > shorter_side:
        w, h = (shorter_side, int(shorter_side * h / w)) if w <= h else (
            int(shorter_side * w / h), shorter_side)
    return 54 + h * ((3 * w + 3) // 4 * 4)


# -- the pipeline, split -------------------------------------------------------------------------


@dataclass
class _SplitPipeline:
    """The user's pipeline, split where the geometry ends.

    ``geometric`` is the longest run of crop/resize/flip ops the pipeline starts with: what a
    cache of crops can hold; ``rest`` is every op after it, in the pipeline's order (so each
    random op still draws in turn, and tensor ops stay after the conversion)."""

    compose: T.Compose
    output: Output
    out_hw: Tuple[int, int]
    geometric: Sequence[Any]
    rest: Sequence[Any]

    def after_geometry(self) -> T.Compose:
        """The ops that run on a cached crop: a no-op ``CenterCrop`` as the geometry."""
        return T.Compose([T.CenterCrop(list(self.out_hw)), *self.rest])

    def geometry_uint8(self) -> T.Compose:
        return T.Compose([*self.geometric, T.PILToTensor()])

    def uint8_variant(self) -> Optional[T.Compose]:
        """The pipeline ending in ``PILToTensor``, normalization left to the GPU; ``None``
        when an op other than ``Normalize`` follows the conversion (it would see other
        values)."""
        convert = [i for i, t in enumerate(self.rest) if isinstance(t, T.ToTensor)]
        if not convert:
            return None
        after = self.rest[convert[0] + 1:]
        if not all(isinstance(t, T.Normalize) for t in after):
            return None
        return T.Compose([*self.geometric, *self.rest[:convert[0]], T.PILToTensor()])

    def normalize(self) -> Optional[T.Normalize]:
        found = [t for t in self.rest if isinstance(t, T.Normalize)]
        return found[0] if found else None

    def eval_resize(self) -> int:
        """The evaluation resize of the reference presets: 256 for a 224 crop."""
        return max(1, round(min(self.out_hw) * 256 / 224))

    def evaluation(self, dtype: Output = "uint8") -> T.Compose:
        to: T.Transform = T.PILToTensor() if dtype == "uint8" else T.ToTensor()
        return T.Compose([T.Resize(self.eval_resize()), T.CenterCrop(list(self.out_hw)), to])


def _flat(ops: Sequence[Any]) -> List[Any]:
    """The ops, a nested ``Compose`` standing for its own."""
    out: List[Any] = []
    for t in ops:
        out += _flat(t.transforms) if isinstance(t, T.Compose) else [t]
    return out


def _pipeline(transform: Any) -> _SplitPipeline:
    if transform is None:
        transform = T.Compose([
            T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(),
            T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]),
        ])
    elif isinstance(transform, str):
        from ferroloader import recipes

        if ":" in transform:
            transform = recipes.load_transform(transform)
        else:
            transform = recipes.recipe(transform)
    compose = T.as_compose(transform)
    ops = _flat(compose.transforms)
    output: Output = "uint8" if any(isinstance(t, T.PILToTensor) for t in ops) else "float32"
    shape = T.check(compose, output=output)["shape"]
    if shape[1] is None or shape[2] is None:
        # The strategies it measures (re-encoding smaller, caching after the crop) need one.
        raise ValueError(
            "transform: advise needs a pipeline whose output size is fixed, by a crop or a Resize "
            "(RandomResizedCrop, Resize + CenterCrop, ...); this one keeps each image's own size"
        )
    cut = 0
    while cut < len(ops) and isinstance(ops[cut], _GEOMETRIC):
        cut += 1
    return _SplitPipeline(compose, output, (int(shape[1]), int(shape[2])), ops[:cut], ops[cut:])


# -- measuring -----------------------------------------------------------------------------------


class _Runner:
    """Builds loaders with the shared settings and times them."""

    def __init__(self, batch_size: int, workers: Optional[int], seed: int, min_images: int,
                 progress: Optional[Progress], exif_transpose: bool = False) -> None:
        self.batch_size = batch_size
        # Every run's, whatever it reads: an image of the source turned upright as the
        # dataset's own reading turns it (a cached stage's BMP has no EXIF: a no-op there).
        self.exif_transpose = exif_transpose
        self.workers = workers
        self.seed = seed
        self.min_images = min_images
        self.progress = progress

    def loader(self, source: Any, compose: T.Compose, output: Output, *,
               workers: Optional[int] = None, shuffle: bool = True, **kw: Any) -> Loader:
        """A loader of ``source``; shuffled, its one epoch is the sample repeated (each pass
        in its own random order) to at least ``min_images``, so that a small sample is not
        timed as a string of epoch start-ups."""
        sampler = self.order(len(source)) if shuffle else None
        return Loader(
            source, batch_size=self.batch_size, sampler=sampler, seed=self.seed,
            num_workers=self.workers if workers is None else workers, transform=compose,
            output=output, tensor_type="numpy", exif_transpose=self.exif_transpose, **kw,
        )

    def order(self, n: int) -> List[int]:
        rng = random.Random(self.seed)
        indices: List[int] = []
        while len(indices) < max(n, self.min_images):
            indices += rng.sample(range(n), n)
        return indices

    def throughput(self, loader: Loader) -> float:
        """Images per second over one (long) epoch."""
        images = 0
        t0 = time.perf_counter()
        batch: Any
        for batch in loader:
            images += int(batch[0].shape[0])
        wall = time.perf_counter() - t0
        return images / max(wall, 1e-9)

    def timed(self, source: Any, compose: T.Compose, output: Output,
              workers: Optional[int] = None) -> Callable[[], float]:
        """A run of :meth:`throughput`, for :meth:`rounds`: each builds its own loader and
        drops it after, so that only one run's batch buffers are held at a time."""
        return lambda: self.throughput(self.loader(source, compose, output, workers=workers))

    def rounds(self, phase: str, runs: Dict[str, Callable[[], float]], rounds: int
               ) -> Dict[str, float]:
        """The median of ``rounds`` runs of each, alternating the order every round."""
        names = list(runs)
        got: Dict[str, List[float]] = {n: [] for n in names}
        total = rounds * len(names)
        done = 0
        for r in range(rounds):
            for name in names if r % 2 == 0 else reversed(names):
                got[name].append(runs[name]())
                done += 1
                if self.progress is not None:
                    self.progress(phase, done, total)
        return {n: statistics.median(v) for n, v in got.items()}


def _images(loader: Loader) -> Any:
    """One epoch of ``loader`` (unshuffled) as one ``N x C x H x W`` array."""
    return np.concatenate([x.copy() for x, _ in _arrays(loader)])


def _arrays(loader: Loader) -> Iterator[Tuple[Any, Any]]:
    """The batches of a ``tensor_type="numpy"`` loader, typed as the numpy arrays they are."""
    batches: Iterator[Tuple[Any, Any]] = iter(loader)
    return batches


def _level_errors(reference: Any, other: Any) -> Tuple[float, float]:
    """The largest and the mean absolute difference, in 8-bit levels."""
    diff = np.abs(reference.astype(np.float32) - other.astype(np.float32))
    return float(diff.max()), float(diff.mean())


def _replay(batches: Sequence[Tuple[Any, Any]], min_images: int) -> float:
    """Images per second a consumer gets from batches already in memory."""
    images = 0
    t0 = time.perf_counter()
    while images == 0 or images < min_images:
        for x, _labels in batches:
            images += int(x.shape[0])
    wall = time.perf_counter() - t0
    return images / max(wall, 1e-9)  # a finite figure: advice.json is strict JSON


def _ladder(run: _Runner, pipe: _SplitPipeline, sample: _Sample, rounds: int
            ) -> List[Dict[str, Any]]:
    files = sample.source()
    raw = sample.encoded()
    encoded = list(zip(raw, sample.labels))
    decoded = [(_bmp(_decode(b, None, sample.exif_transpose)), y)
               for b, y in zip(raw, sample.labels)]
    crops = _images(run.loader(files, pipe.geometry_uint8(), "uint8", shuffle=False))
    geometric = [(_bmp(c.transpose(1, 2, 0)), y) for c, y in zip(crops, sample.labels)]
    # One pass of the sample, replayed as often as the run needs: how many batches are held
    # does not change how fast a loop takes them.
    once = run.loader(files, pipe.compose, pipe.output, shuffle=False)
    batches = [(x.copy(), y.copy()) for x, y in _arrays(once)]
    after = pipe.after_geometry()
    runs = {
        "files": run.timed(files, pipe.compose, pipe.output),
        "bytes": run.timed(encoded, pipe.compose, pipe.output),
        "decoded": run.timed(decoded, pipe.compose, pipe.output),
        "geometric": run.timed(geometric, after, pipe.output),
    }
    runs["batches"] = lambda: _replay(batches, run.min_images)
    speed = run.rounds("ladder", runs, rounds)
    notes = {
        "files": "the source files as they are, read from disk or the page cache",
        "bytes": "the encoded files held in memory (handed to the loader as (bytes, label), "
                 "each fetched under the GIL)",
        "decoded": "decoded pixels held in memory as uncompressed BMP: decoding becomes a "
                   "header parse and a copy (the native decoder reads no raw pixels or PPM)",
        "geometric": "each sample's crop at the output size, as BMP in memory, behind a "
                     f"CenterCrop({pipe.out_hw[0]}x{pipe.out_hw[1]}); one epoch's random draws "
                     "frozen (random ops after it draw other values, with the same work); "
                     "then only "
                     + (", ".join(type(t).__name__ for t in pipe.rest) or "nothing"),
        "batches": "whole batches replayed from memory: the most the consumer loop itself "
                   "takes (the headspace)",
    }
    return [
        {"stage": s, "images_per_s": speed[s], "note": notes[s]} for s in LADDER
    ]


def _bottleneck(ladder: Sequence[Dict[str, Any]]) -> Dict[str, Any]:
    """The stage whose caching lifts throughput most: the one that saves the most time per
    image over the stage before it. (The ratio of throughputs would favour the last stages,
    whose remaining time is small whatever they save.) Sets each stage's ``lift`` (throughput
    over the stage before) and ``saves_ms_per_image``."""
    best: Optional[Dict[str, Any]] = None
    ladder[0]["lift"] = None
    ladder[0]["saves_ms_per_image"] = None
    for prev, cur in zip(ladder, ladder[1:]):
        a, b = prev["images_per_s"], cur["images_per_s"]
        cur["lift"] = b / a if a > 0 else None
        saves = (1e3 / a if a > 0 else 0.0) - (1e3 / b if b > 0 else 0.0)
        cur["saves_ms_per_image"] = saves
        if best is None or saves > best["saves_ms_per_image"]:
            best = {"stage": cur["stage"], "lift": cur["lift"], "saves_ms_per_image": saves}
    assert best is not None  # LADDER has five stages
    return best


_WHAT_CACHING_REMOVES = {
    "bytes": "reading the files",
    "decoded": "decoding",
    "geometric": "the crop and resize",
    "batches": "the remaining per-pixel ops and batch assembly",
}


def _strategies(run: _Runner, pipe: _SplitPipeline, sample: _Sample, tmp: Path,
                budget: Optional[int], rounds: int, progress: Optional[Progress]
                ) -> List[Dict[str, Any]]:
    files = sample.source()
    raw = sample.encoded()
    source_bytes = sum(len(b) for b in raw)
    evaluation = pipe.evaluation()
    reference = _images(run.loader(files, evaluation, "uint8", shuffle=False))
    out: List[Dict[str, Any]] = [{
        "name": "online", "bytes": int(source_bytes * sample.scale), "prepare_s": 0.0,
        "images_per_s": None, "max_level_error": 0.0, "mean_level_error": 0.0,
        "note": "the source as it is: the exact pipeline, every epoch",
    }]
    runs: Dict[str, Callable[[], float]] = {
        "online": run.timed(files, pipe.compose, pipe.output),
    }

    def over(full_bytes: int) -> Optional[str]:
        if budget is not None and full_bytes > budget:
            return (f"skipped: about {_bytes(full_bytes)} for the whole dataset, over the "
                    f"storage budget of {_bytes(budget)}")
        return None

    _offline_strategies(run, pipe, sample, tmp, reference, over, out, runs, progress)
    _uint8_strategy(run, pipe, files, reference, out, runs)
    speed = run.rounds("strategies", runs, rounds)
    for s in out:
        if s["name"] in speed:
            s["images_per_s"] = speed[s["name"]]
    uint8 = next(s for s in out if s["name"] == "uint8-output")
    if uint8["images_per_s"] is None and pipe.output == "uint8":
        uint8["images_per_s"] = speed["online"]
    return out


def _offline_strategies(run: _Runner, pipe: _SplitPipeline, sample: _Sample, tmp: Path,
                        reference: Any, over: Callable[[int], Optional[str]],
                        out: List[Dict[str, Any]], runs: Dict[str, Callable[[], float]],
                        progress: Optional[Progress]) -> None:
    """The strategies that prepare a copy of the data (``resized-*``, ``decoded-uint8``),
    measured on the sample's copy, appended to ``out`` and ``runs``."""
    evaluation = pipe.evaluation()
    paths, relative = sample.paths or [], sample.relative or []
    steps = 3
    for i, side in enumerate((256, 320)):
        name = f"resized-{side}"
        t0 = time.perf_counter()
        source, written = _prepare_sample(sample, tmp, side, run.workers or 0)
        prepare_s = (time.perf_counter() - t0) * sample.scale
        full = int(written * sample.scale)
        entry: Dict[str, Any] = {
            "name": name, "bytes": full, "prepare_s": prepare_s, "images_per_s": None,
            "max_level_error": None, "mean_level_error": None,
            "note": f"re-encoded once as JPEG (quality 90) at shorter side {side}: "
                    f"ferroloader prepare DATA DST --shorter-side {side}",
        }
        skip = over(full)
        if skip:
            entry["note"] = skip
        else:
            got = _images(run.loader(source, evaluation, "uint8", shuffle=False))
            entry["max_level_error"], entry["mean_level_error"] = _level_errors(reference, got)
            runs[name] = run.timed(source, pipe.compose, pipe.output)
        out.append(entry)
        if progress is not None:
            progress("preparing", i + 1, steps)

    if sample.rows is not None:
        # prepare_decoded writes BMP files beside an ImageFolder's; a dataset's rows have no
        # such command.
        out.append({
            "name": "decoded-uint8", "bytes": None, "prepare_s": None, "images_per_s": None,
            "max_level_error": None, "mean_level_error": None,
            "note": "not measured: prepare_decoded writes an ImageFolder's images as BMP files, "
                    "and a dataset's rows have no such copy",
        })
        if progress is not None:
            progress("preparing", 3, steps)
        return
    estimate = int(sum(_decoded_bytes_estimate(p, 256) for p in paths) * sample.scale)
    entry = {
        "name": "decoded-uint8", "bytes": estimate, "prepare_s": None, "images_per_s": None,
        "max_level_error": None, "mean_level_error": None,
        "note": "decoded once at shorter side 256 and stored as uncompressed BMP (8-bit RGB): "
                "loading parses and copies instead of decoding",
    }
    skip = over(estimate)
    if skip:
        entry["note"] = skip
    else:
        dst = tmp / "decoded-uint8"
        targets = [dst / (rel + ".bmp") for rel in relative]
        t0 = time.perf_counter()
        written = _write_decoded(paths, targets, 256, run.workers or 0)
        entry["prepare_s"] = (time.perf_counter() - t0) * sample.scale
        entry["bytes"] = int(written * sample.scale)
        source = PathList([os.fspath(t) for t in targets], sample.labels)
        got = _images(run.loader(source, evaluation, "uint8", shuffle=False))
        entry["max_level_error"], entry["mean_level_error"] = _level_errors(reference, got)
        runs["decoded-uint8"] = run.timed(source, pipe.compose, pipe.output)
    out.append(entry)
    if progress is not None:
        progress("preparing", 3, steps)


def _uint8_strategy(run: _Runner, pipe: _SplitPipeline, files: Any, reference: Any,
                    out: List[Dict[str, Any]], runs: Dict[str, Callable[[], float]]) -> None:
    """``uint8-output``, appended to ``out`` (and ``runs`` where it is measured)."""
    uint8: Dict[str, Any] = {
        "name": "uint8-output", "bytes": out[0]["bytes"], "prepare_s": 0.0,
        "images_per_s": None, "max_level_error": None, "mean_level_error": None,
        "note": 'Loader(output="uint8") with the pipeline ending in PILToTensor; convert '
                "and normalize on the GPU",
    }
    variant = pipe.uint8_variant()
    if pipe.output == "uint8":
        uint8["note"] = "the pipeline already yields uint8: the same as online"
        uint8["max_level_error"] = uint8["mean_level_error"] = 0.0
    elif variant is None:
        uint8["note"] = ("not applicable: an op other than Normalize follows ToTensor, and "
                         "would see uint8 values")
    else:
        scaled = _images(run.loader(files, pipe.evaluation("float32"), "float32", shuffle=False))
        # The loader's uint8 pixels, divided by 255 on the GPU, against its float32 output.
        uint8["max_level_error"], uint8["mean_level_error"] = _level_errors(
            scaled * 255.0, reference)
        runs["uint8-output"] = run.timed(files, variant, "uint8")
    out.append(uint8)


def _prepare_sample(sample: _Sample, tmp: Path, side: int, workers: int) -> Tuple[Any, int]:
    """The sample prepared by :func:`ferroloader.prepare` at shorter side ``side``, as the
    loader reads the copy (an ImageFolder's files, or the dataset's saved copy), and the bytes
    written."""
    dst = tmp / f"resized-{side}"
    if sample.rows is not None:
        # In this process: a sample is too small to pay for map's worker processes.
        report = prepare(sample.rows, dst, shorter_side=side, num_workers=1)
        return table_of(load_saved(dst)).with_mode("RGB"), report.bytes_out
    linked = tmp / "sample"
    if not linked.exists():
        _link_folder(sample, linked)
    report = prepare(linked, dst, shorter_side=side, num_workers=workers)
    return PathList(_prepared_paths(dst, sample), sample.labels), report.bytes_out


def _prepared_paths(dst: Path, sample: _Sample) -> List[str]:
    """Where :func:`ferroloader.prepare` put each sampled file: its name, or the name with
    ``.jpg`` appended when a non-JPEG source was re-encoded."""
    found = []
    for rel in sample.relative or []:
        same = dst / rel
        found.append(os.fspath(same if same.exists() else dst / (rel + ".jpg")))
    return found


def _worker_counts(cores: int) -> List[int]:
    if cores <= 8:
        return list(range(1, cores + 1))
    counts = {cores}
    w = 1
    while w < cores:
        counts.add(w)
        w *= 2
    return sorted(counts)


def _workers(run: _Runner, pipe: _SplitPipeline, sample: _Sample, rounds: int) -> Dict[str, Any]:
    files = sample.source()
    counts = _worker_counts(_cores())
    runs = {
        str(w): run.timed(files, pipe.compose, pipe.output, workers=w)
        for w in counts
    }
    speed = run.rounds("workers", runs, rounds)
    points: List[Dict[str, Any]] = [
        {"pipeline": "native", "workers": w, "images_per_s": speed[str(w)]} for w in counts
    ]
    mark_enough(points)
    enough = [p for p in points if p["enough"]]
    recommended = int(enough[0]["workers"]) if enough else counts[-1]
    return {
        "recommended": recommended,
        "sweep": [
            {"workers": p["workers"], "images_per_s": p["images_per_s"], "gain": p["gain"]}
            for p in points
        ],
        "rule": f"the count past which one more (the next count swept) gains under "
                f"{PAYS_OFF:.0%}",
    }


def _grade(share: float) -> str:
    if share < MODERATE_WAIT:
        return "none"
    return "moderate" if share <= HIGH_WAIT else "high"


def _training_loop(training: Any) -> Dict[str, Any]:
    """The step time and the wait share of the user's own training loop, recorded by
    ``fl.torch.profile`` (or a ``Loader(profile="spans")``): a ``Profile`` or its saved JSON.

    The step is the median time between a batch's delivery and the ``next()`` that asks for
    the following one (what the loop did with the batch: its compute), over consecutive
    batches of the first pipeline; the wait share is the profile's own summary's."""
    from ferroloader.profiling import Profile

    if isinstance(training, (str, os.PathLike)):
        training = Profile.load(training)
    if not isinstance(training, Profile):
        raise TypeError(
            "training: expected a ferroloader Profile of your training loop (fl.torch.profile "
            f"or Loader(profile='spans')) or the path of its saved JSON, got {training!r:.80}"
        )
    pipelines = training.pipelines
    if not pipelines:
        raise ValueError("training: the profile has no pipeline (was profiling off?)")
    # The consumer notes delivery and wait for every batch it received.
    delivered = [b for b in pipelines[0].batches if b.delivered_ns is not None]
    batches = sorted(delivered, key=lambda b: b.delivered_ns or 0)
    steps = [
        ((b.delivered_ns or 0) - (b.wait_ns or 0) - (a.delivered_ns or 0)) / 1e6
        for a, b in zip(batches, batches[1:])
    ]
    if len(steps) < 2:
        raise ValueError(
            f"training: the profile has {len(batches)} batches; at least 3 are needed to time "
            "the step between them"
        )
    summary = training.summary().pipelines[0]
    return {
        "label": pipelines[0].label,
        "step_ms": max(0.0, statistics.median(steps)),
        "wait_share": summary.consumer_wait_share,
        "batches": len(batches),
        "batch_size": pipelines[0].batch_size,
    }


def _verdict(run: _Runner, pipe: _SplitPipeline, sample: _Sample, step_ms: Optional[float],
             loop: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    """Graded from the user's own loop (``loop``) when given, else from the native loader
    with the simulated step; the native loader's wait at the step is measured either way."""
    files = sample.source()
    loader = run.loader(files, pipe.compose, pipe.output, profile="spans")
    if loop is not None:
        # The loop's step per image, at this run's batch size.
        step_s = loop["step_ms"] * run.batch_size / loop["batch_size"] / 1e3
    else:
        step_s = (step_ms or 0.0) / 1e3
    for _ in loader:
        if step_s:
            time.sleep(step_s)
    summary = loader.profile().summary().pipelines[0]
    native_share = summary.consumer_wait_share
    share = loop["wait_share"] if loop is not None else native_share
    verdict: Dict[str, Any] = {
        "input_bound": _grade(share),
        "wait_share": share,
        "source": "training_profile" if loop is not None else "simulated_step",
        "step_ms": loop["step_ms"] if loop is not None else step_ms,
        "native_wait_share": native_share,
        "pipeline_images_per_s": summary.images_per_s,
    }
    if loop is not None:
        verdict["consumer_images_per_s"] = (
            loop["batch_size"] * 1e3 / loop["step_ms"] if loop["step_ms"] > 0 else None
        )
        verdict["note"] = (
            f"your training loop ({loop['label']}, {loop['batches']} batches of "
            f"{loop['batch_size']}) computed {loop['step_ms']:.1f} ms per batch and waited for "
            f"data {share:.1%} of the time; ferroloader's loader here, at that step, made it "
            f"wait {native_share:.1%}"
        )
    elif step_ms:
        verdict["consumer_images_per_s"] = run.batch_size * 1e3 / step_ms
        verdict["note"] = (
            f"with a simulated training step of {step_ms:g} ms per batch of {run.batch_size}, "
            f"the loop waited for data {share:.1%} of the time"
        )
    else:
        verdict["consumer_images_per_s"] = None
        verdict["note"] = (
            "no step time given: this assumed no compute, so the loop is input-bound by "
            "construction. Pass --step-ms (step_ms=) with your training step's time, or "
            "record your own loop with fl.torch.profile and pass it (--training-profile, "
            "training=)"
        )
    return verdict


# -- actions -------------------------------------------------------------------------------------


def _actions(data: str, in_memory: bool, pipe: _SplitPipeline,
             strategies: Sequence[Dict[str, Any]],
             workers: Dict[str, Any], workers_used: int) -> List[Dict[str, Any]]:
    online = next(s for s in strategies if s["name"] == "online")["images_per_s"] or 0.0
    actions: List[Dict[str, Any]] = []
    for s in strategies:
        if s["name"] == "online" or s["images_per_s"] is None or online <= 0:
            continue
        gain = s["images_per_s"] / online
        if gain < WORTH:
            continue
        name = str(s["name"])
        if name.startswith("resized-"):
            side = name.split("-")[1]
            apply = f"ferroloader prepare {data} {data}-{side} --shorter-side {side}"
            if in_memory:
                apply = (f'fl.prepare(dataset, "DST", shorter_side={side}); '
                         'dataset = datasets.load_from_disk("DST")')
            what = f"Re-encode the dataset once at shorter side {side}, then load the copy"
        elif name == "decoded-uint8":
            apply = ("from ferroloader.cli.advisor import prepare_decoded; "
                     f'prepare_decoded("{data}", "{data}-decoded", shorter_side=256)')
            what = "Store the dataset decoded (BMP) at shorter side 256, then load the copy"
        else:
            norm = pipe.normalize()
            gpu = (f"x.cuda().float().div_(255).sub_(mean).div_(std) with mean={norm.mean}, "
                   f"std={norm.std}" if norm is not None else "x.cuda().float().div_(255)")
            apply = f'Loader(..., output="uint8") ending in PILToTensor; on the GPU: {gpu}'
            what = "Hand over uint8 pixels and normalize on the GPU"
        actions.append({
            "action": what, "apply": apply, "gain": gain, "strategy": name,
            "max_level_error": s["max_level_error"], "bytes": s["bytes"],
        })
    sweep = {int(p["workers"]): float(p["images_per_s"]) for p in workers["sweep"]}
    rec = int(workers["recommended"])
    if rec < workers_used and sweep.get(workers_used):
        actions.append({
            "action": f"Use {rec} worker thread{'s' if rec > 1 else ''}: each one past it "
                      f"gains under "
                      f"{PAYS_OFF:.0%}, and the cores it frees can run the training process",
            "apply": f"num_workers={rec}",
            "gain": sweep[rec] / sweep[workers_used],
            "strategy": None, "max_level_error": 0.0, "bytes": None,
        })
    actions.sort(key=lambda a: -float(a["gain"]))
    return actions


# -- the entry point ------------------------------------------------------------------------------


def advise(
    data: Any,
    *,
    transform: Any = None,
    step_ms: Optional[float] = None,
    storage_budget: Union[int, str, None] = None,
    sample: int = 256,
    batch_size: int = 64,
    workers: Optional[int] = None,
    out: PathLike = "advice",
    progress: Optional[Progress] = None,
    rounds: int = 3,
    seed: int = 0,
    training: Any = None,
) -> Advice:
    """Measures ``data`` (a random ``sample`` of its images) as the module doc says, and writes
    ``out/advice.json`` and ``out/report.html``.

    ``data``: an ImageFolder's path, or a Hugging Face ``datasets.Dataset`` with an ``Image()``
    column or the directory its ``save_to_disk`` wrote: its rows read natively, as
    ``fl.Loader`` reads them (images turned upright per their EXIF orientation, as ``datasets``
    decodes them). Every measurement is the same (``resized-*`` on :func:`ferroloader.prepare`'s
    copy of the sampled rows, saved and read natively); only ``decoded-uint8``, which writes an
    ImageFolder's BMP files, is left out for a dataset, with the reason in its note.

    ``transform``: a ferroloader or torchvision ``Compose``, a recipe name
    (``ferroloader.recipes.RECIPES``), ``"FILE.py:NAME"``, or ``None`` (the ImageNet training
    transform). ``step_ms``: the training step a batch feeds (simulated by sleeping), for the
    verdict. ``storage_budget``: bytes (or ``"50GB"``) a prepared copy of the whole dataset may
    take; strategies over it are skipped and say so. ``workers``: threads of every run but the
    sweep (``None``: every core). ``training``: a profile of your own training loop
    (``fl.torch.profile`` around it, or ``Loader(profile="spans")``), or its saved JSON: the
    verdict then grades its measured wait, and its measured step replaces ``step_ms``. Raises ``ValueError``/``TypeError`` naming a bad argument or
    the transform's refusal, and what the loader raises for the data.
    """
    from ferroloader._extras import require

    require(("PIL",), "fl.advise")
    if isinstance(data, (str, os.PathLike)):
        data = Path(data)
    elif not is_hugging_face(data):
        raise TypeError(
            "data: expected an ImageFolder's path, a saved Hugging Face dataset's directory or "
            f"a datasets.Dataset, got {type(data).__name__}"
        )
    if isinstance(sample, bool) or not isinstance(sample, int) or sample < 1:
        raise ValueError(f"sample: expected a positive int, got {sample!r}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size: expected a positive int, got {batch_size!r}")
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
        raise ValueError(f"rounds: expected a positive int, got {rounds!r}")
    if step_ms is not None and (isinstance(step_ms, bool) or not isinstance(step_ms, (int, float))
                                or step_ms < 0):
        raise ValueError(f"step_ms: expected a number >= 0, got {step_ms!r}")
    if training is not None and step_ms is not None:
        raise ValueError("step_ms: give step_ms or training (a profile of your loop), not both")
    loop = None if training is None else _training_loop(training)
    budget = None if storage_budget is None else parse_size(storage_budget)
    pipe = _pipeline(transform)
    chosen = _draw_sample(data, sample, seed)
    # Each run covers at least the sample and eight batches, so tiny samples still time more
    # than a start-up.
    run = _Runner(batch_size, workers, seed, max(len(chosen), 8 * batch_size), progress,
                  exif_transpose=chosen.exif_transpose)
    workers_used = workers if workers else _cores()
    with tempfile.TemporaryDirectory(prefix="ferroloader-advise-") as tmp:
        ladder = _ladder(run, pipe, chosen, rounds)
        bottleneck = _bottleneck(ladder)
        strategies = _strategies(run, pipe, chosen, Path(tmp), budget, rounds, progress)
    sweep = _workers(run, pipe, chosen, rounds)
    verdict = _verdict(run, pipe, chosen, step_ms, loop)
    verdict["bottleneck"] = bottleneck["stage"]
    verdict["bottleneck_lift"] = bottleneck["lift"]
    verdict["bottleneck_saves_ms_per_image"] = bottleneck["saves_ms_per_image"]
    verdict["bottleneck_is"] = _WHAT_CACHING_REMOVES[bottleneck["stage"]]
    advice: Dict[str, Any] = {
        "schema": "ferroloader.advice",
        "version": ADVICE_VERSION,
        "data": _describe(data),
        "dataset_images": chosen.dataset_images,
        "sample_images": len(chosen),
        "transform": repr(pipe.compose),
        "output": pipe.output,
        "output_size": list(pipe.out_hw),
        "batch_size": run.batch_size,
        "workers_used": workers_used,
        "storage_budget": budget,
        "error_pipeline": f"Resize({pipe.eval_resize()}), CenterCrop({pipe.out_hw[0]}x"
                          f"{pipe.out_hw[1]}), uint8",
        "machine": {"cpu": _cpu_name(), "cores": _cores(), "system": platform.system()},
        "verdict": verdict,
        "ladder": ladder,
        "strategies": strategies,
        "workers": sweep,
        "actions": _actions(_describe(data), not isinstance(data, Path), pipe, strategies, sweep,
                            workers_used),
    }
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    json_path = out / "advice.json"
    json_path.write_text(json.dumps(advice, indent=1) + "\n")
    html_path = out / "report.html"
    html_path.write_text(render_html(advice))
    return Advice(advice, json_path, html_path)


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


# -- the page ------------------------------------------------------------------------------------


def _n(x: Optional[float], digits: int = 0) -> str:
    return "–" if x is None else f"{x:,.{digits}f}"


def _bytes(x: Optional[int]) -> str:
    if x is None:
        return "–"
    return f"{x / 1e9:,.2f} GB" if x >= 1e8 else f"{x / 1e6:,.1f} MB" if x >= 1e5 else f"{x:,} B"


_VERDICT_TEXT = {
    "none": "Not input-bound: the training step, not the data, sets the pace.",
    "moderate": "Moderately input-bound: the step waits for data part of the time.",
    "high": "Highly input-bound: the step spends much of its time waiting for data.",
}


def render_html(advice: Dict[str, Any]) -> str:
    """``report.html`` for an ``advice.json`` dict: what to do first, then the measurements."""
    from ferroloader.cli.report import html_page, html_table

    v = advice["verdict"]
    e = _escape
    what = [
        f'<div class="card hero"><div class="k">verdict</div>'
        f'<div class="v">{e(v["input_bound"])} <small>{v["wait_share"]:.1%} waiting</small>'
        f'</div><div class="d">{e(_VERDICT_TEXT[v["input_bound"]])}</div></div>',
        f"<p>{e(v['note'][:1].upper() + v['note'][1:])}. The pipeline's bottleneck: "
        f"<b>{e(v['bottleneck_is'])}</b> "
        f"(caching at stage <code>{e(v['bottleneck'])}</code> saves "
        f"{v['bottleneck_saves_ms_per_image']:.3f} ms per image, "
        f"{_n(v['bottleneck_lift'], 2)}x the throughput).</p>",
    ]
    if v["input_bound"] == "none":
        what.append("<p>The actions below make loading cheaper (fewer cores) but will not "
                    "speed up this training step.</p>")
    if advice["actions"]:
        rows = [
            [str(i + 1), e(a["action"]), f"<code>{e(a['apply'])}</code>", f"{a['gain']:.2f}x",
             _n(a["max_level_error"], 1), _bytes(a["bytes"])]
            for i, a in enumerate(advice["actions"])
        ]
        what.append(html_table(["#", "action", "how", "measured gain", "max error (levels)",
                                "storage"], rows, raw=True, numeric_from=3))
    else:
        what.append("<p>No strategy measured faster than the online pipeline.</p>")
    ladder = html_table(
        ["stage", "what is cached", "images/s", "lift", "saves (ms/image)"],
        [[s["stage"], s["note"], _n(s["images_per_s"]),
          "–" if s["lift"] is None else f"{s['lift']:.2f}x", _n(s["saves_ms_per_image"], 3)]
         for s in advice["ladder"]],
        numeric_from=2,
    )
    strategies = html_table(
        ["strategy", "note", "storage (dataset)", "prepare (s, dataset)", "images/s",
         "max error (levels)", "mean error"],
        [[s["name"], s["note"], _bytes(s["bytes"]), _n(s["prepare_s"], 1),
          _n(s["images_per_s"]), _n(s["max_level_error"], 1), _n(s["mean_level_error"], 2)]
         for s in advice["strategies"]],
        numeric_from=2,
    )
    w = advice["workers"]
    workers = html_table(
        ["workers", "images/s", "gain over previous"],
        [[str(p["workers"]), _n(p["images_per_s"]),
          "–" if p["gain"] is None else f"{p['gain']:+.0%}"] for p in w["sweep"]],
    ) + f"<p>Recommended: <b>{w['recommended']}</b> ({e(w['rule'])}).</p>"
    sample = (f"{advice['sample_images']} of {advice['dataset_images']} images of "
              f"{advice['data']}, batch {advice['batch_size']}, output {advice['output']} "
              f"{advice['output_size'][0]}x{advice['output_size'][1]}; errors measured on "
              f"{advice['error_pipeline']}; storage and preparation time extrapolated to the "
              "whole dataset.")
    sections = [
        ("what-to-do", "What to do", "".join(what)),
        ("ladder", "Cache ladder: where the time goes",
         f"<p class=\"muted\">{e(sample)}</p>" + ladder),
        ("strategies", "Strategies: what to do offline", strategies),
        ("workers", "Worker threads", workers),
    ]
    return html_page("ferroloader advice", sections,
                     subtitle=f"{advice['machine']['cpu']} · {advice['machine']['cores']} cores")


def _escape(text: object) -> str:
    import html

    return html.escape(str(text), quote=True)
