"""A dataset that makes its own samples, run by ``Loader`` as DataLoader runs it.

A map-style dataset whose ``__getitem__`` opens and transforms images itself (and returns
tensors, dicts, anything), given with no ``transform=``, cannot be read natively: the samples
are its code's. :class:`PythonDataset` runs it in torch DataLoader worker *processes*, as
``DataLoader`` would (``worker_init_fn``, ``get_worker_info()``, the start method, pinning and
``collate_fn`` as there), and keeps what ``Loader`` promises on top:

- the epoch's order is the native loader's (``_native.epoch_indices``: shuffled from
  ``(seed, epoch)``, one rank's share), batched as it batches;
- before each ``dataset[i]``, torch's CPU generator, ``random`` and numpy's global generator
  are seeded from ``(seed, epoch, i, repeat)`` (``_native.python_seed``, a Python tail's
  seed; ``repeat`` numbers the copies of an index in the epoch's plan as the native loader
  does, ``_native.repeat_numbers``, so each copy of an index a sampler repeats draws its own),
  so a sample's random augmentations are the same whatever ``num_workers``, and a resumed epoch
  yields exactly the batches the first run would have; in the consumer's own process
  (``num_workers=0``) they are restored after each sample, so its draws do not move;
- ``state_dict`` resume (the batches delivered, by their number in the epoch's plan);
- ``on_error="skip"``: a sample that raises is left out of its batch and reported;
  ``"replace"``: it is replaced by the dataset's next sample (index + 1, wrapping, up to the
  loader's ``replace_retries`` in turn, drawing from the failed sample's seed), each failure
  reported;
- ``profile=`` spans in ferroloader's schema, recorded by ``ferroloader.torch``'s
  instrumentation (a ``__getitem__`` span per sample, each transform of the dataset's
  ``transform`` attribute, collate, batch events), under the label ``"python"``.

An ``IterableDataset`` streams the same way (:class:`_SeededIterable`): each worker's
iterator is seeded from ``(seed, epoch, worker)``, batches are numbered as they come, and a
resumed epoch replays the batches delivered before and drops them.

Each sample of a map-style dataset travels with its key ``(batch number, index, seed)``: the
batch sampler yields keys, the seeded dataset returns ``(batch number, sample)`` and the
collate unwraps them, so the main process learns which planned batch each delivery is
(``in_order=False`` included).

What this module must not do: read or decode images itself, or change what the dataset's
``__getitem__`` or the ``collate_fn`` return. It imports torch: ``Loader`` imports it only for
such a dataset.
"""

from __future__ import annotations

import copy
import logging
import multiprocessing
import os
import zlib
from time import monotonic_ns as _now
from typing import (
    Any,
    Callable,
    Dict,
    Iterator,
    List,
    NamedTuple,
    Optional,
    Tuple,
    cast,
)

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset, default_collate, default_convert
from torch.utils.data._utils.pin_memory import pin_memory as _torch_pin_memory

import ferroloader.torch as fl_torch
from ferroloader import _native
from ferroloader._views import view_seed
from ferroloader._tail import (
    map_views,
    read_sample,
    reseed_generators,
    restore_generators,
    save_generators,
    seed_generators,
)

__all__ = ["PythonDataset", "PythonDatasetIterator", "TailSamples", "ViewSamples", "LABEL"]

#: The pipeline label of a dataset run in Python, in profiles.
LABEL = "python"


class _Key(NamedTuple):
    """What the batch sampler yields for each sample."""

    batch: int
    """The batch's number in the epoch's plan."""
    dataset_index: int
    seed: int
    """The global generators' seed for the sample (``_native.python_seed``)."""
    epoch: int
    repeat: int = 0
    """Which copy of the index this is in the epoch's plan (``SampleKey::repeat``)."""


_log = logging.getLogger("ferroloader")


class _Failed:
    """A sample that raised under ``on_error="skip"``: what the collate leaves out."""

    __slots__ = ("index", "why")

    def __init__(self, index: int, why: str) -> None:
        self.index = index
        self.why = why

    def __getstate__(self) -> Tuple[int, str]:
        return (self.index, self.why)

    def __setstate__(self, state: Tuple[int, str]) -> None:
        self.index, self.why = state


class _Replaced:
    """A sample loaded in place of one that raised under ``on_error="replace"``: dataset
    ``index``'s, after the ``failures`` (dataset index and why) of those tried before it."""

    __slots__ = ("sample", "index", "failures")

    def __init__(self, sample: Any, index: int, failures: List[Tuple[int, str]]) -> None:
        self.sample = sample
        self.index = index
        self.failures = failures

    def __getstate__(self) -> Tuple[Any, int, List[Tuple[int, str]]]:
        return (self.sample, self.index, self.failures)

    def __setstate__(self, state: Tuple[Any, int, List[Tuple[int, str]]]) -> None:
        self.sample, self.index, self.failures = state


# The epoch and copy number of the sample being loaded in this process, set by
# ``_SeededDataset`` around each ``dataset[i]``: a ``TailSamples``' native prefix draws from
# ``(seed, epoch, index, repeat)``, as the native workers would, and ``dataset[i]`` has no other
# way to learn them.
_loading_epoch = 0
_loading_repeat = 0


class _SeededDataset(fl_torch._DatasetWrapper):
    """The dataset torch's fetcher sees: seeds the global generators for each key's sample;
    its public attributes are the dataset's."""

    def __init__(self, inner: Any, skip: bool, retries: Optional[int] = None) -> None:
        object.__setattr__(self, "_inner", inner)
        object.__setattr__(self, "_skip", skip)
        object.__setattr__(self, "_retries", retries)

    def __getitem__(self, key: _Key) -> Tuple[int, Any]:
        # In the consumer's process (num_workers=0) its own draws must not move.
        in_worker = torch.utils.data.get_worker_info() is not None
        saved = None
        if in_worker:
            reseed_generators(key.seed, torch)
        else:
            saved = seed_generators(key.seed, torch)
        global _loading_epoch, _loading_repeat
        _loading_epoch, _loading_repeat = key.epoch, key.repeat
        try:
            return key.batch, self._inner[key.dataset_index]
        except Exception as e:
            if self._skip:
                return key.batch, _Failed(key.dataset_index, f"{type(e).__name__}: {e}")
            if self._retries is not None:
                return key.batch, self._replacement(key, e)
            if hasattr(e, "add_note"):  # Python 3.11+
                e.add_note(f"ferroloader: raised by dataset[{key.dataset_index}]")
            raise
        finally:
            if saved is not None:
                restore_generators(saved, torch)

    def _replacement(self, key: _Key, error: Exception) -> _Replaced:
        """The next samples in turn after ``key``'s, which raised ``error``, each drawing from
        ``key``'s seed, as the native loader's ``on_error="replace"`` does; raises the last
        error when ``_retries`` of them fail too."""
        failures = [(key.dataset_index, f"{type(error).__name__}: {error}")]
        size = len(self._inner)
        for tried in range(1, self._retries + 1):
            index = (key.dataset_index + tried) % size
            reseed_generators(key.seed, torch)
            try:
                return _Replaced(self._inner[index], index, failures)
            except Exception as e:
                failures.append((index, f"{type(e).__name__}: {e}"))
                error = e
        if hasattr(error, "add_note"):  # Python 3.11+
            error.add_note(f"ferroloader: raised by dataset[{failures[-1][0]}] after {len(failures) - 1} replacements")
        raise error



class _SeededIterable(IterableDataset[Tuple[int, Any]]):
    """An ``IterableDataset``'s stream, seeded per ``(seed, epoch, worker)``: each worker's
    iterator starts from its key's seed, so the stream is the same for a given ``num_workers``
    whatever the machine (0 and 1 give one stream). In the consumer's own process
    (``num_workers=0``) the stream's generator states are swapped in around each ``next()``,
    so the consumer's draws and the stream's do not interleave. With ``rec`` (profiling), each
    sample is a ``process`` span numbered ``n * workers + worker`` in the epoch."""

    def __init__(self, inner: Any, seed: int, rec: Any) -> None:
        self.inner = inner
        self.seed = seed
        self.rec = rec
        self.epoch = 0
        """Set by the main process before each epoch's workers start (they copy it)."""

    def __iter__(self) -> Iterator[Tuple[int, Any]]:
        info = torch.utils.data.get_worker_info()
        worker, workers = (0, 1) if info is None else (info.id, info.num_workers)
        seed = _native.python_seed(self.seed, self.epoch, worker)
        in_worker = info is not None
        if in_worker:
            reseed_generators(seed, torch)
            ours = None
        else:
            consumer = seed_generators(seed, torch)
        it = iter(self.inner)
        if not in_worker:
            ours = save_generators(torch)
            restore_generators(consumer, torch)
        n = 0
        while True:
            if ours is not None:
                consumer = save_generators(torch)
                restore_generators(ours, torch)
            try:
                sample = self._next(it, n * workers + worker)
            except StopIteration:
                return
            finally:
                if ours is not None:
                    ours = save_generators(torch)
                    restore_generators(consumer, torch)
            yield -1, sample
            n += 1

    def _next(self, it: Iterator[Any], index: int) -> Any:
        if self.rec is None:
            return next(it)
        return fl_torch.next_in_span(self.rec, it, index)

    def __len__(self) -> int:
        return len(self.inner)


class TailCosts(NamedTuple):
    """Per-sample seconds of a transform with a Python tail (:meth:`TailSamples.costs`)."""

    #: The native prefix's (no GIL held).
    prefix: float
    #: The Python work the native threads would do under the GIL for it.
    python: float


class TailSamples(Dataset[Tuple[torch.Tensor, Any]]):
    """A transform with a Python tail, run in DataLoader's worker processes: each process reads
    the sample's bytes, runs the native prefix on them (``_native.Prefix``, planned once per
    process, with the sample's key: the native workers' draws) or, with no prefix, opens them
    with Pillow as torchvision's loader does, then the tail's ops in order; the result is
    converted as a tail's always is (``TailRunner.to_output``) and held to the first sample's
    shape and dtype (``expected``, set by :meth:`probe`). Errors name the sample and the op as
    the native tail's do; a profile has the native ops' spans (under ``native_prefix``) and
    each tail op's.

    ``source``: a list of ``(path, label)``, an ``ImageArray``, or a dataset of ``(path or
    bytes, label)``. ``prefix``: the native prefix's spec and the size to plan it with
    (``None``: no native op). ``transform`` holds the tail's ops (a torchvision ``Compose``
    of them when torchvision is there, so a profile times each). ``target_transform``, the
    dataset's, maps each label in the worker, as the dataset's ``__getitem__`` would."""

    def __init__(
        self,
        source: Any,
        ops: List[Any],
        names: List[str],
        runner: Any,
        seed: int,
        prefix: Optional[Tuple[str, Optional[Tuple[int, int]]]] = None,
        target_transform: Optional[Callable[[int], Any]] = None,
    ) -> None:
        self.source = source
        self.target_transform = target_transform
        self.runner = runner
        self.names = names
        self.seed = seed
        self.prefix = prefix
        self.transform = _chain(ops)
        self.expected: Optional[Tuple[Tuple[int, ...], str]] = None
        """The first sample's shape and dtype, when it is one array."""
        self.views: Optional[Any] = None
        """The first sample's layout (:func:`_layout`) when it is a list, tuple or dict of
        views (``TailRunner.to_views``); ``None`` otherwise."""
        self._native_prefix: Optional[Tuple[int, _native.Prefix]] = None
        if isinstance(source, list):
            self.samples = source
            """The files, for the path a skipped sample is reported with."""

    def __getstate__(self) -> Dict[str, Any]:
        state = dict(self.__dict__)
        state["_native_prefix"] = None  # planned again in each process
        return state

    def __len__(self) -> int:
        return len(self.source)

    def _planned(self) -> _native.Prefix:
        made = self._native_prefix
        if made is None or made[0] != os.getpid():
            assert self.prefix is not None
            spec, size = self.prefix
            made = self._native_prefix = (os.getpid(), _native.Prefix(spec, size))
        return made[1]

    def __getitem__(self, index: int) -> Tuple[torch.Tensor, Any]:
        where, data, label = self._read(index)
        sample = self._checked(where, index, self.runner.to_views(self._make(where, data, index)))
        target = label if self.target_transform is None else self.target_transform(label)
        return _to_torch(sample), target

    def _make(self, where: str, data: bytes, index: int, seed: Optional[int] = None) -> Any:
        """The prefix (drawing from ``seed``, the loader's by default) and the tail's ops on
        ``data``: the tail's result as it returned it."""
        if self.prefix is None:
            x = self.runner.to_input(data)
        else:
            with fl_torch.span("native_prefix"):
                try:
                    array, spans = self._planned().run(
                        data,
                        self.seed if seed is None else seed,
                        _loading_epoch,
                        index,
                        _loading_repeat,
                    )
                except Exception as e:
                    raise RuntimeError(
                        f"{where} (sample {index}): {type(e).__qualname__}: {e}"
                    ) from e
                _record_native_spans(spans)
            x = self.runner.to_input(array)
        # The instrumented copy's ops when profiled (they keep the order and the names).
        for k, op in enumerate(self.transform.transforms):
            try:
                x = op(x)
            except Exception as e:
                raise RuntimeError(
                    f"{where} (sample {index}): python_tail failed: tail op #{k} "
                    f"{self.names[k]} raised {type(e).__qualname__}: {e}"
                ) from e
        return x

    def _checked(self, where: str, index: int, sample: Any) -> Any:
        """``sample`` (converted), held to the first sample's layout."""
        got = _layout(sample)
        first = self.expected if self.views is None else self.views
        if first is not None and got != first:
            raise RuntimeError(
                f"{where} (sample {index}): python_tail failed: the tail returned "
                f"{_describe(got)}, but the first sample gave {_describe(first)} (every "
                "sample of a batch must have the same shape and dtype)"
            )
        return sample

    def _read(self, index: int) -> Tuple[str, bytes, int]:
        """``(where, encoded bytes, label)`` of sample ``index`` (``_tail.read_sample``)."""
        return read_sample(self.source, index)

    def costs(self, count: int) -> Optional["TailCosts"]:
        """Times up to ``count`` samples after the first as the native worker threads would
        run them: the native prefix (which runs without the GIL, in parallel) and the Python
        work that holds it (seeding and restoring the generators, the conversions, the tail's
        ops). Medians, in seconds; ``None`` when no sample loads. Runs in this process, as of
        epoch 0, the consumer's generators restored after each sample."""
        prefix_s: List[float] = []
        python_s: List[float] = []
        for index in range(1, min(len(self), count + 1)):
            try:
                _, data, _ = self._read(index)
                start = _now()
                array = self._planned().run(data, self.seed, 0, index)[0] if self.prefix else data
                native = _now()
                saved = seed_generators(_native.python_seed(self.seed, 0, index), torch)
                try:
                    x = self.runner.to_input(array)
                    for op in self.transform.transforms:
                        x = op(x)
                    self.runner.to_output(x)
                finally:
                    restore_generators(saved, torch)
                done = _now()
            except Exception:
                continue  # the sample's error is reported when the epoch reaches it
            prefix_s.append((native - start) / 1e9)
            python_s.append((done - native) / 1e9)
        if not python_s:
            return None
        return TailCosts(float(np.median(prefix_s)), float(np.median(python_s)))

    def probe(self, skip: bool) -> Any:
        """Runs the first sample (the first that loads, under ``skip``) in this process, as of
        epoch 0, its generators seeded and the consumer's restored after, and holds every later
        sample to its shape and dtype (each view's, for views: ``views``). Returns its
        :func:`_layout`."""
        global _loading_epoch, _loading_repeat
        _loading_epoch, _loading_repeat = 0, 0
        for index in range(len(self)):
            saved = seed_generators(_native.python_seed(self.seed, 0, index), torch)
            try:
                image, _ = self[index]
            except Exception:
                if not skip or index == len(self) - 1:
                    raise
                continue
            finally:
                restore_generators(saved, torch)
            if isinstance(image, torch.Tensor):
                self.expected = (tuple(image.shape), str(image.numpy().dtype))
            else:
                self.views = _layout(image)
            return _layout(image)
        raise ValueError("dataset: empty")


class ViewSamples(TailSamples):
    """A transform that returns several views of each image (``_views.trace_views``: MoCo's,
    SimCLR's, DINO's), each view's transform cut into its own native prefix and Python tail:
    each process reads a sample's bytes once and makes each view as a :class:`TailSamples` of
    that view's transform makes its sample (``makers[order[v]]``), its native ops drawing
    from the view's seed (``_views.view_seed``: two views of one transform differ) and its
    Python ops in view order from the generators seeded for the sample, each view in a
    ``view<v>`` span. The views come in the transform's container (list or tuple), held to
    the first sample's layout, collated as DataLoader collates them.

    ``shared_decode``: the file is decoded once (``Prefix.decode_pnm``, in a ``decode`` span)
    and every view with a native prefix reads that image, not the file (the same pixels; every
    such view must decode as the first does). Each view otherwise decodes its own crop of the
    file, which costs about what one whole decode and its copies cost for two views (measured
    on 500x375 JPEGs), and several times more for DINO's ten."""

    def __init__(
        self,
        source: Any,
        makers: List[TailSamples],
        order: List[int],
        container: type,
        seed: int,
        target_transform: Optional[Callable[[int], Any]] = None,
        shared_decode: bool = False,
    ) -> None:
        super().__init__(source, [], [], makers[0].runner, seed, None, target_transform)
        self.makers = makers
        self.order = order
        self.container = container
        self.shared_decode = shared_decode
        #: The maker whose prefix decodes the file for all, when shared.
        self._decoder = next((m for m in makers if m.prefix is not None), None)

    def time_views(self, timed: Callable[[Any], Any]) -> None:
        """Replaces each view's Python ops by ``timed(ops)`` (``fl.torch.profile``'s timed
        copy of them) in copies of the makers: called on the profiler's shallow copy of this
        dataset, so the makers this one holds stay untimed."""
        makers = []
        for maker in self.makers:
            made = copy.copy(maker)
            made.transform = timed(maker.transform)
            makers.append(made)
        self.makers = makers

    def __getitem__(self, index: int) -> Tuple[torch.Tensor, Any]:
        where, data, label = self._read(index)
        image = data
        if self.shared_decode and self._decoder is not None:
            with fl_torch.span("decode"):
                try:
                    image = self._decoder._planned().decode_pnm(data)
                except Exception as e:
                    raise RuntimeError(f"{where} (sample {index}): {type(e).__qualname__}: {e}") from e
        views = []
        for view, k in enumerate(self.order):
            maker = self.makers[k]
            with fl_torch.span(f"view{view}"):
                read = data if maker.prefix is None else image
                x = maker._make(where, read, index, view_seed(self.seed, view))
                views.append(maker.runner.to_views(x))
        sample = self._checked(where, index, self.container(views))
        target = label if self.target_transform is None else self.target_transform(label)
        return _to_torch(sample), target


def _record_native_spans(spans: List[Tuple[str, int, int, int]]) -> None:
    """The native prefix's op spans, nested in the open ``native_prefix`` span, when this
    process is recording spans (not counters: the native ops were not counted)."""
    rec = fl_torch._ACTIVE
    if rec is None or rec.counting:
        return
    for op, start, end, depth in spans:
        rec.records.append((op, rec.sample, start, end, rec.depth + 1 + depth))


def _layout(sample: Any) -> Any:
    """What every sample of a batch must share: an array's ``(shape, dtype)``; for a list,
    tuple or dict of views, the container's kind and each item's layout; another object's type
    name (a number, a string: the collate's to judge)."""
    if isinstance(sample, (np.ndarray, torch.Tensor)):
        dtype = sample.dtype if isinstance(sample, np.ndarray) else sample.numpy().dtype
        return (tuple(sample.shape), str(dtype))
    if isinstance(sample, dict):
        return ("dict", tuple((k, _layout(v)) for k, v in sample.items()))
    if isinstance(sample, (list, tuple)):
        return (type(sample).__name__, tuple(_layout(v) for v in sample))
    return type(sample).__name__


def _describe(layout: Any) -> str:
    """``(3, 224, 224) float32``, as the native tail says it; views as ``list [(3, 224, 224)
    float32, (3, 96, 96) float32]``."""
    if isinstance(layout, str):
        return layout
    kind, items = layout
    if kind == "dict":
        return "dict {" + ", ".join(f"{k!r}: {_describe(v)}" for k, v in items) + "}"
    if isinstance(kind, str):
        return f"{kind} [" + ", ".join(_describe(v) for v in items) + "]"
    dims = ", ".join(map(str, kind)) + ("," if len(kind) == 1 else "")
    return f"({dims}) {items}"


def _to_torch(sample: Any) -> Any:
    """The sample with each array in it made a tensor (sharing its memory)."""
    return map_views(lambda x: torch.from_numpy(x) if isinstance(x, np.ndarray) else x, sample)


def _chain(ops: List[Any]) -> Any:
    try:
        from torchvision.transforms import Compose  # type: ignore[import-untyped]
    except ImportError:
        return _Chain(ops)
    return Compose(ops)


class _Chain:
    """The ops applied in order (torchvision's ``Compose`` where torchvision is missing)."""

    def __init__(self, ops: List[Any]) -> None:
        self.transforms = ops

    def __call__(self, x: Any) -> Any:
        for op in self.transforms:
            x = op(x)
        return x


class _Delivery:
    """A collated batch on its way to the main process, with its batch number and the samples
    left out of it. Not a tensor, mapping or sequence, so torch's pinning thread calls our
    ``pin_memory`` (which pins the batch as torch would)."""

    __slots__ = ("batch_number", "batch", "failed", "replaced")

    def __init__(
        self,
        batch_number: int,
        batch: Any,
        failed: List[Tuple[int, str]],
        replaced: List[Tuple[int, int, List[Tuple[int, str]]]],
    ) -> None:
        self.batch_number = batch_number
        self.batch = batch
        """The collated batch; ``None`` when every sample failed."""
        self.failed = failed
        """The samples left out (``on_error="skip"``): dataset index and why."""
        self.replaced = replaced
        """The samples replaced (``"replace"``): the slot's dataset index, its replacement's,
        and the failures before it."""

    def pin_memory(self, device: Optional[str] = None) -> "_Delivery":
        # torch's own recursive pinning, so the batch is pinned exactly as without us.
        pin: Callable[[Any, Optional[str]], Any] = _torch_pin_memory
        batch = None if self.batch is None else pin(self.batch, device)
        return _Delivery(self.batch_number, batch, self.failed, self.replaced)

    def __getstate__(self) -> Tuple[int, Any, List[Tuple[int, str]], List[Tuple[int, int, List[Tuple[int, str]]]]]:
        return (self.batch_number, self.batch, self.failed, self.replaced)

    def __setstate__(self, state: Tuple[int, Any, List[Tuple[int, str]], List[Tuple[int, int, List[Tuple[int, str]]]]]) -> None:
        self.batch_number, self.batch, self.failed, self.replaced = state


class _KeyedCollate:
    """The user's ``collate_fn`` (or torch's default) over the samples that loaded."""

    def __init__(self, fn: Callable[[Any], Any], unbatched: bool) -> None:
        self.fn = fn
        self.unbatched = unbatched

    def __call__(self, items: List[Tuple[int, Any]]) -> _Delivery:
        samples = [s.sample if isinstance(s, _Replaced) else s for _, s in items if not isinstance(s, _Failed)]
        failed = [(s.index, s.why) for _, s in items if isinstance(s, _Failed)]
        replaced = [(s.failures[0][0], s.index, s.failures) for _, s in items if isinstance(s, _Replaced)]
        batch = None
        if samples:
            batch = self.fn(samples[0]) if self.unbatched else self.fn(samples)
        return _Delivery(items[0][0], batch, failed, replaced)


class _EpochBatches:
    """``DataLoader``'s batch sampler: the batches of the epoch being started, as keys made
    batch by batch as torch draws them (an ImageNet epoch's million keys at once would stall
    its start for a second)."""

    def __init__(self, batch_size: int) -> None:
        self.batch_size = batch_size
        """What the profile reports (torch's ``BatchSampler`` has it too)."""
        self.seed = 0
        self.epoch = 0
        self.batches: List[Tuple[int, List[int], List[int]]] = []
        """``(number in the plan, dataset indices, their repeat numbers)`` of the batches still
        to load."""
        self.on_plan: Optional[Callable[[List[_Key]], None]] = None

    def __iter__(self) -> Iterator[List[_Key]]:
        # A generator: torch draws each batch as it dispatches it, and its planned_ns is then.
        seed, epoch = self.seed, self.epoch
        for number, indices, repeats in self.batches:
            batch = [
                _Key(number, i, _native.python_seed(seed, epoch, i, r), epoch, r)
                for i, r in zip(indices, repeats)
            ]
            if self.on_plan is not None:
                self.on_plan(batch)
            yield batch

    def __len__(self) -> int:
        return len(self.batches)


class PythonDataset:
    """Runs ``dataset`` in torch's DataLoader worker processes for :class:`ferroloader.Loader`;
    answers what the loader asks of its native engine (epochs, batches, profiles)."""

    def __init__(
        self,
        dataset: Any,
        *,
        batch_size: int,
        unbatched: bool,
        shuffle: bool,
        drop_last: bool,
        seed: int,
        num_workers: int,
        collate_fn: Optional[Callable[[Any], Any]],
        pin_memory: bool,
        pin_memory_device: str,
        timeout: float,
        worker_init_fn: Optional[Callable[[int], None]],
        multiprocessing_context: Any,
        prefetch_factor: Optional[int],
        persistent_workers: bool,
        in_order: bool,
        on_error: str,
        profile_mode: str,
        rank: Optional[int],
        world_size: Optional[int],
        replace_retries: int = 10,
        sampler_rank: Optional[Tuple[int, int]] = None,
    ) -> None:
        self.dataset = dataset
        self.batch_size = batch_size
        self.unbatched = unbatched
        self.shuffle = shuffle
        self.drop_last = drop_last
        self.seed = seed
        self.rank = rank
        self.world_size = world_size
        self.sampler_rank = sampler_rank
        """``(rank, world_size)`` of the distributed job whose sampler gives the plans."""
        self.next_epoch = 0
        self.inherited = False
        """Never: DataLoader works in a forked child as it is (the native engine's flag)."""
        self._session = fl_torch._Session(LABEL, profile_mode, 8_000_000)
        self._profiling = profile_mode != "off"
        rec = self._session.rec
        self.iterable = isinstance(dataset, IterableDataset)
        """An ``IterableDataset``: its own iterator makes the samples, in its own order."""
        loaded: Any = dataset
        self._meta: Dict[str, str] = {}
        if self._profiling:
            loaded = fl_torch._instrument(dataset, rec, self._meta)
            if not self.iterable:
                loaded = fl_torch._ProfiledDataset(
                    loaded, dataset, rec, opaque=not fl_torch._is_folder(dataset)
                )
        fn: Callable[[Any], Any] = collate_fn if collate_fn is not None else (
            default_convert if unbatched else default_collate
        )
        if self._profiling:
            fn = fl_torch._TimedCollate(fn, rec)
        self._batches = _EpochBatches(batch_size)
        if self._profiling:
            self._batches.on_plan = self._note_plan
        kwargs: Dict[str, Any] = {}
        if num_workers > 0:
            kwargs = {
                "prefetch_factor": prefetch_factor,
                "persistent_workers": persistent_workers,
                "multiprocessing_context": multiprocessing_context,
                "timeout": timeout,
                "worker_init_fn": worker_init_fn,
            }
        elif worker_init_fn is not None:
            kwargs["worker_init_fn"] = worker_init_fn
        self._stream: Optional[_SeededIterable] = None
        batching: Dict[str, Any] = {"batch_sampler": self._batches}
        if self.iterable:
            # Each epoch's seed reaches the workers with the dataset, so they start per epoch.
            kwargs.pop("persistent_workers", None)
            self._stream = _SeededIterable(loaded, seed, rec if self._profiling else None)
            batching = {"batch_size": 1 if unbatched else batch_size, "drop_last": drop_last}
        self._dataloader: Any = DataLoader(
            cast(Any, self._stream if self._stream is not None else _SeededDataset(
                loaded, skip=on_error == "skip", retries=replace_retries if on_error == "replace" else None
            )),
            **batching,
            num_workers=num_workers,
            collate_fn=_KeyedCollate(fn, unbatched),
            pin_memory=pin_memory,
            pin_memory_device=pin_memory_device,
            in_order=in_order,
            # torch draws each epoch's worker base seed from this, not from the consumer's
            # global generator (every sample is seeded from its key anyway).
            generator=torch.Generator().manual_seed(seed % 2**63),
            **kwargs,
        )
        self._meta.update(fl_torch._meta(self._dataloader, dataset))
        self._meta["dataset_runs_in"] = "python (DataLoader worker processes)"

    # -- what the loader asks ---------------------------------------------------------------

    def set_epoch(self, epoch: int) -> None:
        self.next_epoch = epoch

    def order(self, epoch: int) -> List[int]:
        """The dataset indices of ``epoch`` in the native loader's order."""
        return _native.epoch_indices(
            len(self.dataset), shuffle=self.shuffle, seed=self.seed, epoch=epoch,
            rank=self.rank, world_size=self.world_size,
        )

    def repeats(self, plan: Optional[List[int]], count: int) -> List[int]:
        """The repeat number of each of the ``count`` positions of the epoch's plan
        (``plan``, or the loader's order when ``None``), as the native loader numbers them."""
        size = len(self.dataset)
        if plan is None:
            numbers = _native.repeat_numbers(size, rank=self.rank, world_size=self.world_size)
        else:
            rank, world = self.sampler_rank or (None, None)
            numbers = _native.repeat_numbers(size, indices=plan, rank=rank, world_size=world)
        return numbers or [0] * count

    def plan_batches(self, indices: List[int]) -> List[List[int]]:
        """``indices`` (ints: the native order, or the loader's plan, which converted them)
        cut into batches (the last short, or dropped with ``drop_last``)."""
        size = self.batch_size
        batches = [indices[k : k + size] for k in range(0, len(indices), size)]
        if self.drop_last and batches and len(batches[-1]) < size:
            batches.pop()
        return batches

    @property
    def num_samples(self) -> int:
        """Samples per epoch, as the native sampler counts them (a rank's share padded up);
        an ``IterableDataset``'s from its ``len()``, as DataLoader counts them."""
        try:
            samples = len(self.dataset)
        except TypeError:
            raise TypeError(
                f"len(loader): {type(self.dataset).__name__} is an IterableDataset without len()"
            ) from None
        if self.world_size is not None:
            samples = -(-samples // self.world_size)
        return samples

    @property
    def num_batches(self) -> int:
        """Batches per epoch, of :attr:`num_samples`."""
        full, rest = divmod(self.num_samples, self.batch_size)
        return full + (1 if rest and not self.drop_last else 0)

    def dataset_fingerprint(self) -> int:
        """The dataset's class and length, and its files' names where it lists them: what a
        state can be checked against without reading the samples (the dataset's code's)."""
        kind = type(self.dataset)
        try:
            size = str(len(self.dataset))
        except TypeError:  # an IterableDataset without len()
            size = "?"
        name = f"{kind.__module__}.{kind.__qualname__}:{size}"
        crc = zlib.crc32(name.encode())
        if isinstance(self.dataset, TailSamples) and isinstance(self.dataset.source, list):
            # Listed files (a transform with no native op over a folder): their names too.
            for path, _ in self.dataset.source:
                crc = zlib.crc32(os.fsencode(path) + b"\0", crc)
        return crc

    def iter(
        self,
        epoch: int,
        plan: Optional[List[int]],
        resume: Optional[Tuple[int, int, List[int]]],
        loader: Any,
    ) -> "PythonDatasetIterator":
        """Starts ``epoch`` over ``plan`` (the loader's order when ``None``), after the batches
        ``resume`` says were delivered; the epoch counter moves on past it. ``loader`` is the
        ``Loader`` whose ``_progress`` the iterator keeps."""
        self.next_epoch = epoch + 1
        if self._stream is not None:
            return self._iter_stream(epoch, resume, loader)
        indices = self.order(epoch) if plan is None else plan
        batches = self.plan_batches(indices)
        # Numbered over the whole plan, as the native loader numbers them, before any
        # delivered batch is left out.
        repeats = self.plan_batches(self.repeats(plan, len(indices)))
        position, delivered = 0, cast(List[int], [])
        if resume is not None:
            position, _, delivered = resume
            delivered = [int(b) for b in delivered]
            if any(not 0 <= b < len(batches) for b in delivered):
                raise ValueError(
                    f"state: delivered batches {delivered} do not fit the epoch's "
                    f"{len(batches)} batches"
                )
        done = set(delivered)
        self._batches.seed, self._batches.epoch = self.seed, epoch
        self._batches.batches = [
            (b, batch, repeats[b]) for b, batch in enumerate(batches) if b not in done
        ]
        deliveries, unwrapping = self._start(epoch)
        return PythonDatasetIterator(
            deliveries, unwrapping, epoch, batches, position, delivered, loader
        )

    def _iter_stream(
        self, epoch: int, resume: Optional[Tuple[int, int, List[int]]], loader: Any
    ) -> "PythonDatasetIterator":
        """An ``IterableDataset``'s epoch: its workers start now, with the epoch's seeds; a
        resumed epoch replays the batches delivered before and drops them."""
        assert self._stream is not None
        self._stream.epoch = epoch
        deliveries = self._start(epoch)
        replay = 0 if resume is None else len(resume[2])
        return PythonDatasetIterator(
            deliveries[0], deliveries[1], epoch, None, replay, list(range(replay)), loader,
            replay=replay,
        )

    def _start(self, epoch: int) -> Tuple[Iterator[Any], "_Unwrapping"]:
        """Starts torch's iterator for ``epoch`` (the profile session's bookkeeping first)."""
        session = self._session
        session.epoch = epoch
        if self._profiling:
            now = _now()
            if session.start_ns is None:
                session.start_ns = now
            session.end_ns = now
            if self._dataloader.num_workers > 0 and session.rec.queue is None:
                # Before the workers start (fork inherits it, spawn pickles it with the dataset).
                ctx = self._dataloader.multiprocessing_context or multiprocessing.get_context()
                session.rec.queue = ctx.SimpleQueue()
        unwrapping = _Unwrapping(iter(self._dataloader))
        deliveries: Iterator[Any] = unwrapping
        if self._profiling:
            deliveries = fl_torch._ProfiledIter(unwrapping, session)
        return deliveries, unwrapping

    def _note_plan(self, batch: List[_Key]) -> None:
        session = self._session
        session.plans.append((session.epoch, _now(), tuple(k.dataset_index for k in batch)))

    # -- profiles ---------------------------------------------------------------------------

    def profile(self) -> _native.Profile:
        session = self._session
        session.drain()
        built = fl_torch._build_profile(self._dataloader, session, self._meta)
        return built._native

    def take_profile(self) -> _native.Profile:
        profile = self.profile()
        session = self._session
        session.deliveries, session.plans, session.reports = [], [], []
        session.spans = session.dropped_spans = 0
        session.start_ns = session.end_ns = None
        return profile

    @property
    def sample_shape(self) -> List[int]:
        if isinstance(self.dataset, TailSamples) and self.dataset.expected is not None:
            return list(self.dataset.expected[0])
        raise TypeError(f"sample_shape: {self._no_single_layout()}")

    @property
    def dtype(self) -> str:
        if isinstance(self.dataset, TailSamples) and self.dataset.expected is not None:
            return self.dataset.expected[1]
        raise TypeError(f"dtype: {self._no_single_layout()}")

    def _no_single_layout(self) -> str:
        """Why a sample has no one shape and dtype."""
        if isinstance(self.dataset, TailSamples) and self.dataset.views is not None:
            return f"each sample is {_describe(self.dataset.views)} (the transform's views)"
        return (
            "the dataset makes its own samples (it runs in Python); their shape and dtype are "
            "whatever its __getitem__ returns"
        )

    @property
    def deferred_normalize(self) -> None:
        return None


class _Unwrapping:
    """Between torch's iterator and the profiler's: passes each delivery's payload on (a
    profiling carrier or the batch) and keeps the delivery's batch number and failures."""

    def __init__(self, it: Iterator[Any]) -> None:
        self._it = it
        self.last: Optional[_Delivery] = None

    def __iter__(self) -> "_Unwrapping":
        return self

    def __next__(self) -> Any:
        delivery: _Delivery = next(self._it)
        self.last = delivery
        return delivery.batch


class PythonDatasetIterator:
    """One epoch of a dataset run in Python: yields what its ``collate_fn`` makes of each batch
    (through ``batch_transform`` when the loader has one), in the plan's order unless
    ``in_order=False``. The same attributes as ``LoaderIterator``."""

    def __init__(
        self,
        deliveries: Iterator[Any],
        unwrapping: _Unwrapping,
        epoch: int,
        batches: Optional[List[List[int]]],
        position: int,
        delivered: List[int],
        loader: Any,
        *,
        replay: int = 0,
    ) -> None:
        """``batches``: the epoch's planned batches (``None`` for an ``IterableDataset``'s
        stream, whose batches are numbered as they come); ``replay``: stream batches to drop
        first (delivered before a resume)."""
        self._deliveries = deliveries
        self._unwrapping = unwrapping
        self._epoch = epoch
        self._batches = batches
        self._position = position
        self._delivered = delivered
        self._loader = loader
        self._batch_transform: Optional[Callable[[Any, Any], Any]] = loader.batch_transform
        self._skipped: List[Tuple[int, str, str]] = []
        self._replay = replay
        self.finished = False
        """Whether the epoch has ended (``StopIteration`` or an error)."""
        self.indices: Optional[Any] = None
        """Dataset indices of the last batch's samples (a numpy array)."""

    def __iter__(self) -> "PythonDatasetIterator":
        return self

    def __next__(self) -> Any:
        while True:
            try:
                batch = next(self._deliveries)
            except KeyboardInterrupt:
                raise  # torch's iterator keeps the batch it was waiting for
            except StopIteration:
                self._end()
                raise
            except BaseException:
                self._fail()
                raise
            delivery = self._unwrapping.last
            assert delivery is not None  # set by the next() that just returned
            if self._batches is None:
                # A stream's batches come in order, numbered as they come; those a resumed
                # epoch replays were delivered before.
                if self._replay > 0:
                    self._replay -= 1
                    continue
                self._delivered.append(len(self._delivered))
                self._position += 1
                self._note_progress()
                return self._transformed(batch)
            number = delivery.batch_number
            self._delivered.append(number)
            self._position += len(self._batches[number])
            failed = {index for index, _ in delivery.failed}
            for index, why in delivery.failed:
                self._skipped.append((index, self._dataset_path(index), why))
            for index, why in (f for _, _, failures in delivery.replaced for f in failures):
                self._skipped.append((index, self._dataset_path(index), why))
                # As the native loader logs them (LoaderIterator), as timm's ImageDataset does.
                _log.warning("Replaced sample (index %d, file %s) with the next one: %s", index, self._dataset_path(index), why)
            self._note_progress()
            if batch is None:
                continue  # every sample of it failed (on_error="skip"); all reported
            instead = {slot: index for slot, index, _ in delivery.replaced}
            self.indices = np.array(
                [instead.get(i, i) for i in self._batches[number] if i not in failed], dtype=np.int64
            )
            return self._transformed(batch)

    def _note_progress(self) -> None:
        progress = self._loader._progress
        if progress is not None and progress[0] == self._epoch:
            self._loader._progress = (
                self._epoch, (self._position, len(self._delivered), list(self._delivered))
            )

    def _transformed(self, batch: Any) -> Any:
        if self._batch_transform is None:
            return batch
        if not isinstance(batch, (tuple, list)) or len(batch) != 2:
            raise TypeError(
                "batch_transform: takes (images, labels); the dataset's batches are "
                f"{type(batch).__name__}, not a pair"
            )
        return self._batch_transform(batch[0], batch[1])

    def _dataset_path(self, index: int) -> str:
        return fl_torch._sample_path(self._loader.dataset, index) or ""

    def _end(self) -> None:
        self.finished = True
        progress = self._loader._progress
        if progress is not None and progress[0] == self._epoch:
            self._loader._progress = None

    def _fail(self) -> None:
        """Ends an epoch that failed, its worker processes shut down now. Left to the garbage
        collector (the error's traceback holds torch's iterator in a cycle), the iterator could
        be inherited by the next epoch's forked workers, whose collection of it then fails in
        DataLoader's ``__del__`` ("can only test a child process"). Not at an epoch's end:
        ``persistent_workers`` keeps them for the next."""
        self._end()
        shutdown = getattr(self._unwrapping._it, "_shutdown_workers", None)
        if shutdown is not None:
            shutdown()

    def __len__(self) -> int:
        if self._batches is None:
            return int(self._loader._loader().num_batches)
        return len(self._batches)

    @property
    def epoch(self) -> int:
        """The epoch being loaded."""
        return self._epoch

    @property
    def skipped(self) -> List[Tuple[int, str, str]]:
        """Samples skipped so far (``on_error="skip"``): ``(index, path or "", why)``."""
        return list(self._skipped)
