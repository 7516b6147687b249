"""``ferroloader.torch``: profile a stock ``torch.utils.data.DataLoader`` in ferroloader's schema.

>>> import ferroloader as fl
>>> loader = torch.utils.data.DataLoader(torchvision.datasets.ImageFolder(root, transform=tf),
...                                      batch_size=64, shuffle=True, num_workers=8)
>>> with fl.torch.profile(loader) as pdl:
...     for images, labels in pdl:          # exactly what ``loader`` yields
...         ...
>>> pdl.profile().summary()                 # or .merge(native_profile).save_trace("both.json")

:func:`profile` builds a :class:`ProfiledDataLoader`: a new ``DataLoader`` with the user's
loader's settings (sampler, workers, pinning, timeout, ``worker_init_fn``, start method,
generator...) over an *instrumented shallow copy* of its dataset. For a torchvision
``DatasetFolder`` (``ImageFolder``) the copy's ``loader`` is split into ``read`` (the file's
bytes) and ``decode`` (``PIL.Image.open(...).convert("RGB")``, the same pixels as torchvision's
``pil_loader``), any other loader is one ``load`` span, and each transform of a ``Compose`` is
timed on its own under its class name (``RandomResizedCrop``, ``ToTensor``...). timm's
``ImageDataset`` over a folder or a tar (``timm.data.create_dataset``) is split the same way:
its reader's file object is read in a ``read`` span and opened and converted to its
``input_img_mode`` in a ``decode`` span, handed to timm's own ``__getitem__`` (whose retry of
the next index on a bad file still runs), then each op of its transform. A Hugging
Face ``datasets.Dataset`` hands its ``Image()`` columns over undecoded to a format transform
that decodes each image with ``datasets``' own ``decode_example`` in a ``decode`` span, then runs
the dataset's ``with_transform`` function in a span of its name (the same rows). A ``process``
span (depth 0) covers each sample's whole ``__getitem__``, a ``collate`` span each batch. Any
other map-style dataset runs in a ``__getitem__`` span (depth 1), the transforms of its
``transform`` attribute timed inside it; :class:`span` times parts of the user's own code. An
``IterableDataset``'s stream has a ``process`` span per ``next()``, its samples numbered
``n * workers + worker`` in the epoch (no sampler, so no planned batches).

Spans are recorded where they happen, in the DataLoader's worker processes (fork, spawn or
forkserver): each process appends ``(op, sample, start, end, depth[, counters])`` tuples to a
buffer of its own, and the timed ``collate_fn`` hands the records gathered since the worker's
previous batch to the main process *inside the batch* (a small picklable :class:`_Carrier`,
which also survives ``pin_memory=True``); the main process's iterator takes the carrier off
again, and notes when each batch was delivered and how long ``next()`` blocked. A sample that
raises is recorded as a failure (sent from workers over a small side queue, since the batch it
belonged to never arrives) and the exception propagates unchanged. Batch numbers are delivery
ordinals, unique across epochs; timestamps are ``time.monotonic_ns()`` (CLOCK_MONOTONIC, the
native profiler's clock), so a ``torchvision`` and a ``native`` pipeline share one timeline.

With ``mode="counters"`` each worker process opens the native counter groups
(``ferroloader._native.CounterGroup``) once, lazily, for its own thread, and every span carries
its counter deltas. ``mode="off"`` iterates the user's loader itself and records nothing.

Batch events: ``planned_ns`` when torch took the batch's indices from the sampler (main
process), ``first_started_ns`` its first span, ``completed_ns``/``completed_by`` the end of its
collate and the worker, ``delivered_ns`` and ``wait_ns`` (how long ``next()`` blocked) in the
main process. ``out_of_order``: it finished before a batch delivered ahead of it (torch held it
back to keep order), or, with ``in_order=False``, it was delivered ahead of a batch the sampler
planned earlier. Without persistent workers each epoch starts new processes under the same
worker numbers: a thread entry names the first, ``meta["worker_pids"]`` all of them. Past
``max_spans`` spans only batch events are kept (``stats.dropped_spans`` counts the rest).
Datasets with ``__getitems__`` are fetched one sample at a time (each sample needs its spans).

What this module must not do: mutate the user's DataLoader, dataset, transforms or sampler
(it copies and wraps; samplers and the generator are shared, exactly as iterating the original
would use them); change what is yielded or the random stream; hold per-batch data (tensors)
beyond delivery; do anything on the per-op path but read the clock (and the counters) and
append one tuple; feed the records to the native profile builder before
:meth:`ProfiledDataLoader.profile` asks for them; declare any part of the profile schema (its
names, counters, defaults: ``ferroloader._native.ProfileBuilder`` and the profiler crate own
them). Summaries and traces are computed by :class:`ferroloader.Profile`, not here.
"""

from __future__ import annotations

import copy
import importlib
import inspect
import io
import multiprocessing
import operator
import os
import sys
import threading
import uuid
import weakref
from time import monotonic_ns as _now
from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    Dict,
    Iterable,
    Iterator,
    List,
    Optional,
    Tuple,
    Type,
)

import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset, Subset, get_worker_info

from ferroloader import _native
from ferroloader._views import with_views_replaced
from ferroloader.transforms import delegated_compose

if TYPE_CHECKING:
    from types import TracebackType

    from ferroloader.profiling import Profile

__all__ = ["profile", "ProfiledDataLoader", "MODES", "span"]

MODES = ("off", "spans", "counters")
"""The recording modes, as in the schema: nothing, spans and batch events, spans plus counters."""

# A span as recorded on the hot path: (op, sample, start_ns, end_ns, depth) in "spans" mode,
# plus (counters_before, counters_after) raw tuples in "counters" mode: what
# ``_native.ProfileBuilder`` takes, in the main process, when a profile is asked for.
Record = Tuple[Any, ...]
# Who recorded a batch: (worker, pid, tid, counter names, counter availability as the JSON
# ``CounterGroup.availability_json`` gives, or None when it did not count).
WorkerIdentity = Tuple[int, int, int, Tuple[str, ...], Optional[str]]
# A failed sample: (sample, t_ns, op, cause).
FailureRecord = Tuple[Any, int, str, str]
# What a process reports about a failed sample: who, the failure, the failed batch's spans.
FailureReport = Tuple[WorkerIdentity, FailureRecord, List[Record]]
CounterReader = Callable[[], Tuple[int, ...]]
# A span's start as a wrapper holds it: (start_ns, the counter read function when counting,
# the counters at the start).
SpanStart = Tuple[int, Optional[CounterReader], Tuple[int, ...]]


def _no_counters() -> Tuple[int, ...]:
    return ()


# -- per-process recording -------------------------------------------------------------------

# The recorders alive in this process, by session: wrappers unpickled in a spawned worker find
# their session's one here, and a forked child resets every one it inherited.
_LIVE: "weakref.WeakValueDictionary[str, _Recorder]" = weakref.WeakValueDictionary()


class _Recorder:
    """One profiling session's span buffer in one process (the main one or a worker).

    The wrappers of a session share it: the process span sets ``sample`` for the op spans
    nested in it, every span appends one tuple to ``records``, and the timed ``collate_fn``
    takes the records of the batch it just collated. Pickles by session (a spawned worker gets
    a fresh, empty recorder); a forked child clears what it inherited.
    """

    __slots__ = (
        "session",
        "counting",
        "queue",
        "records",
        "sample",
        "begun",
        "failed_op",
        "depth",
        "side",
        "_identity",
        "_read",
        "_names",
        "_availability",
        "_counters_pid",
        "__weakref__",
    )

    def __init__(self, session: str, counting: bool, queue: Any = None) -> None:
        self.session = session
        self.counting = counting
        self.queue: Any = queue
        """Where a worker process sends failure reports (a ``SimpleQueue``), when it has one."""
        self._reset()
        _LIVE[session] = self

    def _reset(self) -> None:
        self.records: List[Record] = []
        self.sample: Any = None
        self.begun = 0
        """How many samples' ``process`` spans this recorder has opened."""
        self.failed_op: Optional[str] = None
        self.depth = -1
        """Depth of the innermost open span (0: the sample's ``process`` span; -1: none)."""
        self.side: List[FailureReport] = []
        self._identity: Optional[WorkerIdentity] = None
        self._read: Optional[CounterReader] = None
        self._names: Tuple[str, ...] = ()
        self._availability: Optional[str] = None
        self._counters_pid = 0

    def __reduce__(self) -> Tuple[Callable[..., "_Recorder"], Tuple[Any, ...]]:
        return (_recorder_for, (self.session, self.counting, self.queue))

    def reader(self) -> CounterReader:
        """The counter read function of this process's thread, opening the groups once."""
        read = self._read
        if read is None or self._counters_pid != os.getpid():
            read = self._open_counters()
        return read

    def _open_counters(self) -> CounterReader:
        read: CounterReader
        try:
            group = _native.CounterGroup(hardware=True, software=True)
            self._names = tuple(group.names)
            self._availability = group.availability_json
            read = group.read
            read()  # a group that opens but cannot be read counts as unavailable
        except Exception as e:  # counters missing must never fail the pipeline
            reason = f"CounterGroup failed: {type(e).__name__}: {e}"
            self._names = ()
            self._availability = _native.counters_unavailable(reason)
            read = _no_counters
        self._read = read
        self._counters_pid = os.getpid()
        self._identity = None
        return read

    def identity(self) -> WorkerIdentity:
        """(worker, pid, tid, counter names, availability) of the calling process."""
        ident = self._identity
        if ident is None:
            if self.counting:
                self.reader()
            info = get_worker_info()
            ident = (
                0 if info is None else int(info.id),
                os.getpid(),
                threading.get_native_id(),
                self._names,
                self._availability,
            )
            self._identity = ident
        return ident

    def start(self) -> SpanStart:
        """Starts a span: the counters (when counting) are read before the clock, so that
        reading them falls outside the span."""
        if self.counting:
            read = self.reader()
            c0 = read()
            return (_now(), read, c0)
        return (_now(), None, ())

    def end(self, op: Any, sample: Any, depth: int, start: SpanStart) -> SpanStart:
        """Records the span of ``op`` from ``start`` to now; returns the start of a span that
        begins where this one ends (the same clock and counter readings)."""
        t1 = _now()
        t0, read, c0 = start
        if read is None:
            self.records.append((op, sample, t0, t1, depth))
            return (t1, None, ())
        c1 = read()
        self.records.append((op, sample, t0, t1, depth, c0, c1))
        return (t1, read, c1)

    def take(self) -> List[Record]:
        """The records gathered since the last take."""
        records = self.records
        self.records = []
        return records

    def fail(self, sample: Any, error: BaseException, op: str, path: Optional[str]) -> None:
        """Reports a failed sample (or collate, with ``sample=None``) with the spans recorded
        for its batch so far, which no batch will carry now."""
        cause = f"{type(error).__name__}: {error}"
        if path is not None:
            cause = f"{path}: {cause}"
        report: FailureReport = (self.identity(), (sample, _now(), op, cause), self.take())
        self.failed_op = None
        if get_worker_info() is None:
            self.side.append(report)
        elif self.queue is not None:
            try:
                self.queue.put(report)
            except Exception:  # the report is lost; the sample's own error still propagates
                pass


# The recorder of the sample being loaded in this process (set around each ``__getitem__``),
# which :func:`span` records into; None outside a profiled sample.
_ACTIVE: Optional[_Recorder] = None


class span:  # noqa: N801 (used as a function: ``with fl.torch.span("name"):``)
    """Times a block of the user's own code as an op of the sample being loaded::

        def __getitem__(self, i):
            with fl.torch.span("fetch"):
                data = self.store.get(self.keys[i])
            with fl.torch.span("parse"):
                image = decode(data)
            ...

    Inside a dataset profiled by :func:`profile` (in its worker processes too), the block
    becomes a span named ``name`` nested in whatever span is open (the sample's
    ``__getitem__``, a transform); anywhere else it does nothing, at the cost of one check.
    An exception leaving the block marks the sample as failed in ``name`` and propagates.
    """

    __slots__ = ("name", "_rec", "_start", "_depth")

    def __init__(self, name: str) -> None:
        self.name = name
        self._rec: Optional[_Recorder] = None

    def __enter__(self) -> "span":
        rec = _ACTIVE
        if rec is not None:
            self._rec = rec
            self._depth = rec.depth + 1
            rec.depth = self._depth
            self._start = rec.start()
        return self

    def __exit__(self, kind: Optional[type], error: Optional[BaseException], tb: Any) -> None:
        rec = self._rec
        if rec is None:
            return
        self._rec = None
        rec.depth = self._depth - 1
        if error is not None:
            _failed_in(rec, self.name, self._start, self._depth)
        else:
            rec.end(self.name, rec.sample, self._depth, self._start)


def _recorder_for(session: str, counting: bool, queue: Any = None) -> _Recorder:
    """This process's recorder of ``session`` (unpickling target)."""
    rec = _LIVE.get(session)
    if rec is None:
        rec = _Recorder(session, counting, queue)
    return rec


def _after_fork_in_child() -> None:
    for rec in list(_LIVE.values()):
        rec._reset()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


# -- the timed wrappers (module level, so spawn can pickle them) ------------------------------


class _TimedOp:
    """Calls ``fn`` inside a span named ``op`` (a transform, a loader), one level below the
    span open around it."""

    __slots__ = ("fn", "op", "rec")

    def __init__(self, fn: Callable[[Any], Any], op: str, rec: _Recorder) -> None:
        self.fn = fn
        self.op = op
        self.rec = rec

    def __call__(self, x: Any) -> Any:
        rec = self.rec
        depth = rec.depth + 1
        rec.depth = depth
        start = rec.start()
        try:
            y = self.fn(x)
        except Exception:
            _failed_in(rec, self.op, start, depth)
            raise
        finally:
            rec.depth = depth - 1
        rec.end(self.op, rec.sample, depth, start)
        return y

    def __getstate__(self) -> Tuple[Any, str, _Recorder]:
        return (self.fn, self.op, self.rec)

    def __setstate__(self, state: Tuple[Any, str, _Recorder]) -> None:
        self.fn, self.op, self.rec = state

    def __repr__(self) -> str:
        return f"timed({self.fn!r})"


def _failed_in(rec: _Recorder, op: str, start: SpanStart, depth: int) -> None:
    """Notes the innermost op that raised, and its span up to the failure (without counters)."""
    if rec.failed_op is None:
        rec.failed_op = op
        rec.records.append((op, rec.sample, start[0], _now(), depth))


class _TimedCompose:
    """Applies timed transforms in order: what torchvision's ``Compose`` does with one input."""

    __slots__ = ("transforms",)

    def __init__(self, transforms: List[_TimedOp]) -> None:
        self.transforms = transforms

    def __call__(self, x: Any) -> Any:
        for t in self.transforms:
            x = t(x)
        return x

    def __getstate__(self) -> List[_TimedOp]:
        return self.transforms

    def __setstate__(self, state: List[_TimedOp]) -> None:
        self.transforms = state

    def __repr__(self) -> str:
        return f"timed(Compose({[t.fn for t in self.transforms]!r}))"


class _TimedPilLoader:
    """torchvision's ``pil_loader`` in two spans: ``read`` (the file's bytes) and ``decode``
    (``Image.open(BytesIO(data)).convert("RGB")``, the same pixels)."""

    __slots__ = ("rec",)

    def __init__(self, rec: _Recorder) -> None:
        self.rec = rec

    def __call__(self, path: Any) -> Any:
        from PIL import Image

        return _read_and_decode(self.rec, path, lambda data: Image.open(io.BytesIO(data)).convert("RGB"))

    def __getstate__(self) -> _Recorder:
        return self.rec

    def __setstate__(self, state: _Recorder) -> None:
        self.rec = state


class _TimedImageOpen:
    """``PIL.Image.open`` for a training script's own dataset (:class:`_TimedReads`): ``read``
    (the file's bytes, or the rest of a file object's) then ``decode`` (Pillow's open and load
    of them): the native loader's two steps. The image keeps the file's name, as Pillow's
    open of a path does."""

    __slots__ = ("rec",)

    def __init__(self, rec: _Recorder) -> None:
        self.rec = rec

    def __call__(self, fp: Any, mode: str = "r", formats: Any = None) -> Any:
        from PIL import Image

        def opened(data: bytes) -> Any:
            img = Image.open(io.BytesIO(data), mode, formats)  # type: ignore[arg-type]  # Pillow checks mode
            img.load()
            return img

        img = _read_and_decode(self.rec, fp, opened)
        if isinstance(fp, (str, os.PathLike)):
            img.filename = os.fspath(fp)
        return img


class _TimedTensorRead:
    """A ``torchvision.io`` decoder (``decode_image``, ``decode_jpeg``...) for a training
    script's own dataset (:class:`_TimedReads`), ``read_image`` too: of a path, ``read`` (the
    file's bytes) then ``decode`` (``decode`` of them); of ``read_file``'s bytes, ``decode``. The
    same tensor."""

    __slots__ = ("rec", "decode")

    def __init__(self, rec: _Recorder, decode: Callable[..., Any]) -> None:
        self.rec = rec
        self.decode = decode

    def __call__(self, source: Any, *args: Any, **kwargs: Any) -> Any:
        def decoded(data: Any) -> Any:
            return self.decode(data, *args, **kwargs)

        if isinstance(source, torch.Tensor):
            return _TimedOp(decoded, "decode", self.rec)(source)
        # A bytearray: torch.frombuffer warns on a buffer it cannot write.
        return _read_and_decode(
            self.rec, source, lambda data: decoded(torch.frombuffer(bytearray(data), dtype=torch.uint8))
        )


def _timed_io(rec: _Recorder) -> Dict[str, Callable[..., Any]]:
    """``torchvision.io``'s reads in spans, by name (``_getitem.IO_NAMES``)."""
    import torchvision.io as tvio  # type: ignore[import-untyped]

    timed: Dict[str, Callable[..., Any]] = {
        name: _TimedTensorRead(rec, getattr(tvio, name)) for name in ("decode_image", "decode_jpeg", "decode_png")
    }
    return {**timed, "read_image": timed["decode_image"], "read_file": _TimedOp(tvio.read_file, "read", rec)}


def _read_and_decode(rec: _Recorder, fp: Any, decode: Callable[[bytes], Any]) -> Any:
    """``decode`` of the bytes of ``fp`` (a path, or a file object read on from where it
    stands), the read in a ``read`` span, the decode in a ``decode`` span, nested in the
    sample's current span (a failure recorded in the one it happened in)."""
    depth = rec.depth + 1
    start = rec.start()
    try:
        if isinstance(fp, (str, os.PathLike)):
            with open(fp, "rb") as f:
                data = f.read()
        else:
            data = fp.read()
    except Exception:
        _failed_in(rec, "read", start, depth)
        raise
    start = rec.end("read", rec.sample, depth, start)
    try:
        img = decode(data)
    except Exception:
        _failed_in(rec, "decode", start, depth)
        raise
    rec.end("decode", rec.sample, depth, start)
    return img


def _attempt_failed(rec: _Recorder, op: str, start: SpanStart, depth: int) -> None:
    """Records a failed attempt's span up to now and names ``op`` as the sample's failed op:
    unlike :func:`_failed_in`, every attempt, since timm's retries make one sample fail in
    several files (each a span; the last failure names the op if it gives up)."""
    rec.failed_op = op
    rec.records.append((op, rec.sample, start[0], _now(), depth))


class _Loaded:
    """What a :class:`_TimedTimmReader` hands timm's ``__getitem__`` in place of the file
    object: ``read()`` is the already decoded image (or the bytes, for ``load_bytes``)."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def read(self) -> Any:
        return self.value


class _TimedTimmReader:
    """timm's folder or tar reader (``ImageDataset.reader``) in an instrumented copy of the
    dataset whose ``load_bytes`` is set, so timm's own ``__getitem__`` takes ``reader[i][0]
    .read()`` as the image: ``reader[i]`` reads the sample's file object in a ``read`` span,
    then (unless the user's dataset loads bytes) opens it with PIL and converts it to
    ``input_img_mode`` in a ``decode`` span: what timm 1.0.31's ``__getitem__`` does to the
    file object, the same pixels. Errors are raised where timm's ``try`` catches them, so a
    bad file is logged and the next index loaded, by timm's own code; a failure timm recovers
    from leaves its span and no failed op behind."""

    __slots__ = ("reader", "mode", "load_bytes", "rec")

    def __init__(self, reader: Any, mode: Optional[str], load_bytes: bool, rec: _Recorder) -> None:
        self.reader = reader
        self.mode = mode
        self.load_bytes = load_bytes
        self.rec = rec

    def __getitem__(self, index: int) -> Tuple[Any, ...]:
        from PIL import Image

        rec = self.rec
        depth = rec.depth + 1
        start = rec.start()
        try:
            f, *rest = self.reader[index]
            try:
                data = f.read()
            finally:
                f.close()
        except Exception:
            _attempt_failed(rec, "read", start, depth)
            raise
        start = rec.end("read", rec.sample, depth, start)
        if self.load_bytes:
            rec.failed_op = None
            return (_Loaded(data), *rest)
        try:
            img: Any = Image.open(io.BytesIO(data))
            if self.mode:
                img = img.convert(self.mode)
        except Exception:
            _attempt_failed(rec, "decode", start, depth)
            raise
        rec.end("decode", rec.sample, depth, start)
        rec.failed_op = None
        return (_Loaded(img), *rest)

    def __len__(self) -> int:
        return len(self.reader)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in _TimedTimmReader.__slots__:
            raise AttributeError(name)
        return getattr(self.reader, name)

    def __getstate__(self) -> Tuple[Any, Optional[str], bool, _Recorder]:
        return (self.reader, self.mode, self.load_bytes, self.rec)

    def __setstate__(self, state: Tuple[Any, Optional[str], bool, _Recorder]) -> None:
        self.reader, self.mode, self.load_bytes, self.rec = state


#: timm's readers whose ``reader[i]`` is ``(file object, target)``: what
#: :class:`_TimedTimmReader` can time.
_TIMM_FILE_READERS = frozenset({"ReaderImageFolder", "ReaderImageInTar", "ReaderImageTar"})


def _timm_image_dataset(dataset: Any) -> bool:
    """Whether ``dataset`` is timm's ``ImageDataset`` over a folder or tar reader (checked
    without importing timm: a dataset of timm's has loaded it)."""
    module = sys.modules.get("timm.data.dataset")
    if module is None or not isinstance(dataset, module.ImageDataset):
        return False
    reader = type(getattr(dataset, "reader", None))
    return reader.__module__.startswith("timm.") and reader.__name__ in _TIMM_FILE_READERS


class _Carrier:
    """A collated batch on its way from a worker to the main process, with the spans recorded
    for it. Not a tensor, mapping or sequence, so torch's pinning calls our ``pin_memory``."""

    __slots__ = ("batch", "records", "identity", "done_ns")

    def __init__(
        self, batch: Any, records: List[Record], identity: WorkerIdentity, done_ns: int
    ) -> None:
        self.batch = batch
        self.records = records
        self.identity = identity
        self.done_ns = done_ns

    def pin_memory(self, device: Optional[str] = None) -> "_Carrier":
        """The same carrier around the pinned batch (called by torch's pin-memory thread)."""
        # torch's own recursive pinning, so the batch is pinned exactly as without us.
        pin: Callable[[Any, Optional[str]], Any] = importlib.import_module(
            "torch.utils.data._utils.pin_memory"
        ).pin_memory
        return _Carrier(pin(self.batch, device), self.records, self.identity, self.done_ns)

    def __getstate__(self) -> Tuple[Any, List[Record], WorkerIdentity, int]:
        return (self.batch, self.records, self.identity, self.done_ns)

    def __setstate__(self, state: Tuple[Any, List[Record], WorkerIdentity, int]) -> None:
        self.batch, self.records, self.identity, self.done_ns = state


class _TimedCollate:
    """The user's ``collate_fn`` in a ``collate`` span; returns a :class:`_Carrier` holding the
    batch and every record of this process since its previous batch."""

    __slots__ = ("fn", "rec")

    def __init__(self, fn: Callable[[Any], Any], rec: _Recorder) -> None:
        self.fn = fn
        self.rec = rec

    def __call__(self, data: Any) -> _Carrier:
        rec = self.rec
        start = rec.start()
        try:
            batch = self.fn(data)
        except Exception as e:
            rec.fail(None, e, "collate", None)
            raise
        done_ns = rec.end("collate", None, 0, start)[0]
        return _Carrier(batch, rec.take(), rec.identity(), done_ns)

    def __getstate__(self) -> Tuple[Any, _Recorder]:
        return (self.fn, self.rec)

    def __setstate__(self, state: Tuple[Any, _Recorder]) -> None:
        self.fn, self.rec = state


class _DatasetWrapper(Dataset[Any]):
    """A dataset around another (``_inner``, set by the subclass's ``__init__``) whose public
    attributes are the inner one's: read from and set on it, so a ``worker_init_fn`` that
    configures ``get_worker_info().dataset`` configures the dataset that loads."""

    _inner: Any

    def __len__(self) -> int:
        return len(self._inner)

    def __getattr__(self, name: str) -> Any:
        inner = self.__dict__.get("_inner")
        if inner is None or name.startswith("__"):
            raise AttributeError(name)
        return getattr(inner, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name.startswith("_"):
            object.__setattr__(self, name, value)
        else:
            setattr(self._inner, name, value)


class _TimedReads(_DatasetWrapper):
    """A training script's own dataset whose ``__getitem__`` opens its image as the native
    loader reads it (``ferroloader._getitem.trace_getitem``): run with ``Image.open``,
    torchvision's loaders and ``torchvision.io``'s reads timed as ``read`` and ``decode``
    (``_getitem.reading_copy``) and its ``transform`` timed op by op. Pickles as the dataset, the timed transform and the recorder,
    and is made again in each process (the copy's class is made at run time)."""

    def __init__(self, dataset: Any, transform: Any, rec: _Recorder) -> None:
        from ferroloader._getitem import reading_copy

        made = reading_copy(dataset, _TimedImageOpen(rec), _TimedPilLoader(rec), _timed_io(rec))
        if made is None:
            raise TypeError(f"{type(dataset).__name__}: its class cannot be copied")
        made.transform = transform
        object.__setattr__(self, "_state", (dataset, transform, rec))
        object.__setattr__(self, "_inner", made)

    def __getitem__(self, index: Any) -> Any:
        return self._inner[index]

    def __getstate__(self) -> Tuple[Any, Any, _Recorder]:
        return self._state  # type: ignore[no-any-return]

    def __setstate__(self, state: Tuple[Any, Any, _Recorder]) -> None:
        _TimedReads.__init__(self, *state)


class _ProfiledDataset(_DatasetWrapper):
    """The dataset torch's fetcher sees: each ``__getitem__`` of the instrumented copy inside a
    ``process`` span; its public attributes are the copy's. Defines no ``__getitems__``:
    samples are fetched one by one, each in its spans.

    A dataset whose loading is not instrumented (not a ``DatasetFolder``) runs in a
    ``__getitem__`` span inside ``process``: its self time is the user's own code, which
    :func:`span` can split further, and not the profiler's per-sample overhead."""

    def __init__(self, inner: Any, original: Any, rec: _Recorder, opaque: bool) -> None:
        object.__setattr__(self, "_inner", inner)
        object.__setattr__(self, "_original", original)
        object.__setattr__(self, "_rec", rec)
        object.__setattr__(self, "_opaque", opaque)

    def __getitem__(self, index: Any) -> Any:
        rec = self._rec

        def load() -> Any:
            if self._opaque:
                return _TimedOp(self._inner.__getitem__, "__getitem__", rec)(index)
            return self._inner[index]

        return _process_span(rec, index, load, lambda: _sample_path(self._original, index))


class _ProfiledIterable(IterableDataset[Any]):
    """An ``IterableDataset``'s stream as torch's fetcher sees it: each sample's ``next()`` in
    a ``process`` span, numbered ``n * workers + worker`` in the epoch (unique across the
    workers of one epoch). Draws nothing: the stream is the dataset's own."""

    def __init__(self, inner: Any, rec: _Recorder) -> None:
        self._inner = inner
        self._rec = rec

    def __iter__(self) -> Iterator[Any]:
        info = get_worker_info()
        worker, workers = (0, 1) if info is None else (int(info.id), int(info.num_workers))
        it = iter(self._inner)
        n = 0
        while True:
            try:
                sample = next_in_span(self._rec, it, n * workers + worker)
            except StopIteration:
                return
            yield sample
            n += 1

    def __len__(self) -> int:
        return len(self._inner)


def next_in_span(rec: _Recorder, it: Iterator[Any], index: int) -> Any:
    """``next(it)`` as sample ``index`` of a stream, in its ``process`` span;
    ``StopIteration`` passes through unrecorded."""
    return _process_span(rec, index, lambda: next(it), lambda: None)


def _process_span(
    rec: _Recorder, index: Any, load: Callable[[], Any], path: Callable[[], Optional[str]]
) -> Any:
    """``load()`` as sample ``index``, in its ``process`` span (depth 0, the spans of the ops
    it runs nested in it, :func:`span` recording into ``rec`` meanwhile); a failure is recorded
    and reported as the sample's, with ``path()`` when known, and raised. ``StopIteration``
    (a stream's end) passes through unrecorded."""
    global _ACTIVE
    rec.sample, rec.failed_op, rec.depth = index, None, 0
    rec.begun += 1
    _ACTIVE = rec
    start = rec.start()
    try:
        item = load()
    except StopIteration:
        raise
    except Exception as e:
        rec.records.append(("process", index, start[0], _now(), 0))
        rec.fail(index, e, rec.failed_op or "process", path())
        raise
    finally:
        rec.depth = -1
        _ACTIVE = None
    rec.end("process", index, 0, start)
    return item


def _sample_path(dataset: Any, index: Any) -> Optional[str]:
    """The file of sample ``index`` of a ``DatasetFolder`` (or a ``Subset`` of one), if known."""
    try:
        while isinstance(dataset, Subset):
            index = dataset.indices[index]
            dataset = dataset.dataset
        if _timm_image_dataset(dataset):
            return str(dataset.filename(index, absolute=True))
        samples = getattr(dataset, "samples", None)
        if samples is None:
            return None
        return str(os.fspath(samples[index][0]))
    except Exception:
        return None


# -- instrumenting a dataset ------------------------------------------------------------------


def _op_name(fn: Any) -> str:
    """A transform's span name: its class name (a plain function's own name)."""
    if inspect.isfunction(fn) or inspect.isbuiltin(fn):
        return str(fn.__name__)
    return type(fn).__name__


def _torchvision() -> Any:
    """The torchvision package, or None without it (any map-style dataset still works)."""
    try:
        return importlib.import_module("torchvision")
    except ImportError:
        return None


def _compose_types(tv: Any) -> Tuple[type, ...]:
    types: List[type] = [tv.transforms.Compose]
    try:
        types.append(importlib.import_module("torchvision.transforms.v2").Compose)
    except ImportError:
        pass
    return tuple(types)


def _timed_transform(transform: Any, rec: _Recorder, tv: Any) -> Any:
    """One timed op per transform of a (exactly) torchvision ``Compose``, or of the one an
    object only calls (torchvision's reference ``ClassificationPresetTrain``:
    ``transforms.delegated_compose``); for an object that returns several views
    (``ferroloader._views``: MoCo's, DINO's), a copy of it whose views are each timed so, in a
    ``view<k>`` span; else one for all."""
    transform = delegated_compose(transform) or transform
    if tv is not None and type(transform) in _compose_types(tv):
        return _TimedCompose(_timed_ops(transform, rec, _compose_types(tv)))
    counter = _ViewCounter()
    views = with_views_replaced(
        transform, lambda view: _TimedView(_timed_transform(view, rec, tv), rec, counter)
    )
    if views is not None:
        return views
    return _TimedOp(transform, _op_name(transform), rec)


def _timed_ops(compose: Any, rec: _Recorder, composes: Tuple[type, ...]) -> List[_TimedOp]:
    """A timed op per transform of ``compose``, a ``Compose`` nested in it (DINO's views
    share their flip-and-jitter and normalize ones) in its place: timed whole, its ops would
    all be one ``Compose`` row, not the names the native loader gives them."""
    ops: List[_TimedOp] = []
    for t in compose.transforms:
        if type(t) in composes:
            ops += _timed_ops(t, rec, composes)
        else:
            ops.append(_TimedOp(t, _op_name(t), rec))
    return ops


class _ViewCounter:
    """How many views of the current sample (``_Recorder.begun``) the views' transforms have
    made (shared by them)."""

    __slots__ = ("sample", "made")

    def __init__(self) -> None:
        self.sample = -1
        self.made = 0


class _TimedView:
    """One view's (timed) transform, in a ``view<k>`` span, ``k`` the number of views of the
    sample made before it: the names the native loader's views have."""

    __slots__ = ("fn", "rec", "counter")

    def __init__(self, fn: Callable[[Any], Any], rec: _Recorder, counter: _ViewCounter) -> None:
        self.fn = fn
        self.rec = rec
        self.counter = counter

    def __call__(self, x: Any) -> Any:
        counter = self.counter
        if counter.sample != self.rec.begun:
            counter.sample, counter.made = self.rec.begun, 0
        view = counter.made
        counter.made += 1
        return _TimedOp(self.fn, f"view{view}", self.rec)(x)

    def __getstate__(self) -> Tuple[Any, _Recorder, _ViewCounter]:
        return (self.fn, self.rec, self.counter)

    def __setstate__(self, state: Tuple[Any, _Recorder, _ViewCounter]) -> None:
        self.fn, self.rec, self.counter = state


def _is_folder(dataset: Any) -> bool:
    """Whether ``dataset`` is one whose loading :func:`_instrument` splits into timed steps: a
    torchvision ``DatasetFolder``, a Hugging Face dataset with images to decode
    (:func:`_hugging_face_images`), or a ``Subset`` of one."""
    while isinstance(dataset, Subset):
        dataset = dataset.dataset
    tv = _torchvision()
    if tv is not None and isinstance(dataset, tv.datasets.DatasetFolder):
        return True
    return _timm_image_dataset(dataset) or bool(_hugging_face_images(dataset))


def _hugging_face_images(dataset: Any) -> Dict[str, Any]:
    """The ``Image()`` features a Hugging Face ``datasets.Dataset`` decodes as it formats its
    rows, by column; empty for anything else, and for a dataset formatted as tensors or arrays
    (``set_format("torch")``...), whose formatter converts the images itself."""
    hf = sys.modules.get("datasets")
    if hf is None or not isinstance(dataset, hf.Dataset):
        return {}
    if dataset.format.get("type") not in (None, "custom"):
        return {}
    return {
        name: feature
        for name, feature in dataset.features.items()
        if isinstance(feature, hf.Image) and feature.decode
    }


class _TimedHuggingFaceRows:
    """A Hugging Face dataset's format transform over rows whose images come undecoded: each
    image decoded by its own feature's ``decode_example`` (what ``datasets`` would have run
    before the transform: the same image) in a ``decode`` span, then the dataset's
    ``with_transform`` function, if any, in a span of its name."""

    __slots__ = ("features", "transform", "rec")

    def __init__(self, features: Dict[str, Any], transform: Optional[Callable[[Any], Any]], rec: _Recorder) -> None:
        self.features = features
        self.transform = transform
        self.rec = rec

    def __call__(self, batch: Dict[str, List[Any]]) -> Any:
        rec = self.rec
        depth = rec.depth + 1
        for column, feature in self.features.items():
            decoded = []
            for value in batch[column]:
                start = rec.start()
                try:
                    decoded.append(None if value is None else feature.decode_example(value))
                except Exception:
                    _failed_in(rec, "decode", start, depth)
                    raise
                rec.end("decode", rec.sample, depth, start)
            batch[column] = decoded
        if self.transform is None:
            return batch
        return _TimedOp(self.transform, _op_name(self.transform), rec)(batch)

    def __getstate__(self) -> Tuple[Dict[str, Any], Any, _Recorder]:
        return (self.features, self.transform, self.rec)

    def __setstate__(self, state: Tuple[Dict[str, Any], Any, _Recorder]) -> None:
        self.features, self.transform, self.rec = state


def _instrument_hugging_face(dataset: Any, images: Dict[str, Any], rec: _Recorder) -> Any:
    """A copy of a Hugging Face dataset that hands its images over undecoded to a
    :class:`_TimedHuggingFaceRows` format transform, which decodes them and runs the dataset's
    own transform, each in its spans: the rows come out as the dataset's own."""
    hf = sys.modules["datasets"]
    fmt = dataset.format
    transform = fmt["format_kwargs"].get("transform") if fmt.get("type") == "custom" else None
    undecoded = dataset
    for name in images:
        undecoded = undecoded.cast_column(name, hf.Image(decode=False))
    return undecoded.with_transform(
        _TimedHuggingFaceRows(images, transform, rec),
        columns=fmt.get("columns"),
        output_all_columns=fmt.get("output_all_columns", False),
    )


def _time_view_makers(ds: Any, rec: _Recorder, tv: Any) -> None:
    """For the native loader's samples of a transform returning views (``ViewSamples``, in
    its worker processes), each view's Python ops timed too, in its ``view<k>`` span: they
    are its views' own transforms, not the dataset's (an empty chain). Asked of the dataset
    (``time_views``), since ``_pydataset`` imports this module."""
    time_views = getattr(ds, "time_views", None)
    if callable(time_views):
        time_views(lambda ops: _timed_transform(ops, rec, tv))


def _instrument(dataset: Any, rec: _Recorder, meta: Dict[str, str]) -> Any:
    """A shallow copy of ``dataset`` whose loader and transforms record spans (a
    ``DatasetFolder``, or a ``Subset`` of one); other datasets are returned as they are."""
    tv = _torchvision()
    if isinstance(dataset, Subset):
        sub = copy.copy(dataset)
        sub.dataset = _instrument(dataset.dataset, rec, meta)
        return sub
    images = _hugging_face_images(dataset)
    if images:
        meta["decoder"] = "datasets' Image.decode_example"
        meta["instrumented"] = "decode, the dataset's transform function, process, collate"
        return _instrument_hugging_face(dataset, images, rec)
    if _timm_image_dataset(dataset):
        return _instrument_timm(dataset, rec, meta, tv)
    if tv is None or not isinstance(dataset, tv.datasets.DatasetFolder):
        transform = getattr(dataset, "transform", None)
        if transform is None or not callable(transform):
            meta.setdefault("instrumented", "process, __getitem__ and collate (not a DatasetFolder)")
            return dataset
        reads = _timed_reads(dataset, transform, rec, tv)
        if reads is not None:
            meta.setdefault("decoder", "PIL (the dataset's Image.open)")
            meta.setdefault("instrumented", "process, __getitem__, read/decode, each transform, collate")
            return reads
        try:
            ds = copy.copy(dataset)
            ds.transform = _timed_transform(transform, rec, tv)
            _time_view_makers(ds, rec, tv)
        except Exception:  # a dataset that cannot be copied or set keeps its own transform
            meta.setdefault("instrumented", "process, __getitem__ and collate (not a DatasetFolder)")
            return dataset
        meta.setdefault(
            "instrumented", "process, __getitem__, each transform of .transform, collate"
        )
        return ds
    folder = importlib.import_module("torchvision.datasets.folder")
    ds = copy.copy(dataset)
    loader = dataset.loader
    pil = loader is folder.pil_loader or (
        loader is folder.default_loader and tv.get_image_backend() == "PIL"
    )
    if pil:
        import PIL

        ds.loader = _TimedPilLoader(rec)
        meta["decoder"] = f"PIL {PIL.__version__}"
    else:
        ds.loader = _TimedOp(loader, "load", rec)
        meta["decoder"] = f"loader {_op_name(loader)}"
    if dataset.transform is not None:
        ds.transform = _timed_transform(dataset.transform, rec, tv)
    if dataset.target_transform is not None:
        ds.target_transform = _TimedOp(dataset.target_transform, "target_transform", rec)
    standard = importlib.import_module("torchvision.datasets.vision").StandardTransform
    if isinstance(getattr(dataset, "transforms", None), standard):
        ds.transforms = standard(ds.transform, ds.target_transform)
    meta["instrumented"] = "read/decode, each transform, process, collate" if pil else (
        "load, each transform, process, collate"
    )
    return ds


def _timed_reads(dataset: Any, transform: Any, rec: _Recorder, tv: Any) -> Optional[_TimedReads]:
    """:class:`_TimedReads` of a training script's own dataset that the native loader reads
    (its ``__getitem__`` traces: it opens, converts and transforms one image); ``None`` for any
    other (its ``__getitem__`` is timed whole)."""
    from ferroloader._getitem import from_library, trace_getitem

    if from_library(getattr(type(dataset), "__getitem__", None)):
        return None
    traced = trace_getitem(dataset)
    if isinstance(traced, str) or traced.transform is not transform:
        return None
    try:
        return _TimedReads(dataset, _timed_transform(transform, rec, tv), rec)
    except TypeError:
        return None


def _instrument_timm(dataset: Any, rec: _Recorder, meta: Dict[str, str], tv: Any) -> Any:
    """A shallow copy of timm's ``ImageDataset`` whose own ``__getitem__`` (its retries on a bad
    file included) runs over a :class:`_TimedTimmReader` (``read``, ``decode``) and timed
    transforms: the same samples and draws, each step in its span."""
    import PIL

    ds = copy.copy(dataset)
    ds.reader = _TimedTimmReader(dataset.reader, dataset.input_img_mode, bool(dataset.load_bytes), rec)
    ds.load_bytes = True
    if dataset.transform is not None:
        ds.transform = _timed_transform(dataset.transform, rec, tv)
    if dataset.target_transform is not None:
        ds.target_transform = _TimedOp(dataset.target_transform, "target_transform", rec)
    meta["decoder"] = f"PIL {PIL.__version__}"
    meta["instrumented"] = "read/decode, each transform, process, collate"
    return ds


class _PlanningSampler:
    """Yields what the user's (batch) sampler yields, noting for each item when torch took it
    (the batch's ``planned_ns``) and which epoch it belongs to. Runs in the main process."""

    def __init__(self, inner: Iterable[Any], session: "_Session") -> None:
        self._inner = inner
        self._session = session

    def __iter__(self) -> Iterator[Any]:
        # A generator, like torch's samplers: nothing is drawn before the first next().
        session = self._session
        for item in self._inner:
            session.plans.append((session.epoch, _now(), _plan_samples(item)))
            yield item

    def __len__(self) -> int:
        return len(self._inner)  # type: ignore[arg-type]


# -- the main-process side --------------------------------------------------------------------

# What a batch's spans say about it: (its samples, when its first span started); the profile
# builder works it out from the spans, this stands in for a batch whose spans were dropped.
BatchFacts = Tuple[Tuple[Optional[int], ...], Optional[int]]
# A delivered batch: (epoch, records, identity, completed_ns, next() entered, next() returned,
# the facts of a batch whose records were dropped (over max_spans), else None).
DeliveredBatch = Tuple[int, List[Record], WorkerIdentity, int, int, int, Optional[BatchFacts]]


def _batch_facts(records: List[Record]) -> BatchFacts:
    """What ``ProfileBuilder`` reads from a batch's spans (``BatchFacts::observe`` in the
    profiler crate): the indices of the top-level spans that have one, the earliest start."""
    indices = (_as_index(r[1]) for r in records if r[4] == 0)
    samples = tuple(i for i in indices if i is not None)
    return samples, min((r[2] for r in records), default=None)


class _Session:
    """What the main process collects for one :class:`ProfiledDataLoader`: deliveries and
    plans as raw tuples (fed to the profile builder by :func:`_build_profile`), failures, run
    times."""

    def __init__(self, label: str, mode: str, max_spans: int) -> None:
        self.label = label
        self.mode = mode
        self.max_spans = max_spans
        self.spans = 0
        self.dropped_spans = 0
        self.id = f"{os.getpid()}-{uuid.uuid4().hex}"
        self.rec = _Recorder(self.id, mode == "counters")
        self.epoch = -1
        self.created_ns = _now()
        self.start_ns: Optional[int] = None
        self.end_ns: Optional[int] = None
        self.deliveries: List[DeliveredBatch] = []
        self.plans: List[Tuple[int, int, Optional[Tuple[Optional[int], ...]]]] = []
        """(epoch, planned_ns, the batch's sample indices) per batch the sampler gave."""
        self.reports: List[FailureReport] = []

    def drain(self) -> None:
        """Moves failure reports from the workers' queue and the main process's list here."""
        rec = self.rec
        if rec.side:
            self.reports.extend(rec.side)
            rec.side = []
        q = rec.queue
        if q is not None:
            try:
                while not q.empty():
                    self.reports.append(q.get())
            except (OSError, EOFError, ValueError):
                pass


class _ProfiledIter:
    """One epoch of the instrumented loader: yields the user's batches, noting each delivery."""

    def __init__(self, it: Iterator[Any], session: _Session) -> None:
        self._it = it
        self._session = session
        self._epoch = session.epoch

    def __iter__(self) -> "_ProfiledIter":
        return self

    def __next__(self) -> Any:
        session = self._session
        t0 = _now()
        try:
            out = next(self._it)
        except StopIteration:
            session.end_ns = _now()
            raise
        except Exception:
            session.end_ns = _now()
            session.drain()
            raise
        t1 = _now()
        session.end_ns = t1
        if type(out) is _Carrier:
            records = out.records
            facts: Optional[BatchFacts] = None
            session.spans += len(records)
            if session.spans > session.max_spans:
                # Keep the batch event, not its spans: memory stays bounded on long runs.
                facts = _batch_facts(records)
                session.dropped_spans += len(records)
                records = []
            session.deliveries.append(
                (self._epoch, records, out.identity, out.done_ns, t0, t1, facts)
            )
            return out.batch
        return out

    def __len__(self) -> int:
        return len(self._it)  # type: ignore[arg-type]


def _loader_kwargs(dl: DataLoader[Any]) -> Dict[str, Any]:
    """The settings of ``dl`` that a rebuilt DataLoader must share (those this torch has)."""
    params = inspect.signature(DataLoader.__init__).parameters
    kwargs: Dict[str, Any] = {
        "num_workers": dl.num_workers,
        "pin_memory": dl.pin_memory,
        "timeout": dl.timeout,
        "worker_init_fn": dl.worker_init_fn,
        "multiprocessing_context": dl.multiprocessing_context,
        "generator": dl.generator,
    }
    optional = {
        "prefetch_factor": getattr(dl, "prefetch_factor", None),
        "persistent_workers": getattr(dl, "persistent_workers", False),
        "pin_memory_device": getattr(dl, "pin_memory_device", ""),
        "in_order": getattr(dl, "in_order", True),
    }
    for name, value in optional.items():
        if name in params:
            kwargs[name] = value
    if dl.num_workers == 0:
        kwargs.pop("prefetch_factor", None)
        kwargs["multiprocessing_context"] = None
    return kwargs


class ProfiledDataLoader:
    """A profiled copy of a torch ``DataLoader``: iterate it instead of the original.

    Yields exactly what the original yields (same samplers, generator, workers, transforms);
    ``len()`` is the original's; several epochs accumulate into one profile. Use it plainly or
    as a context manager (leaving the ``with`` block calls :meth:`close`, which joins the
    worker processes). :meth:`profile` returns what was recorded so far; its run spans from
    the first ``iter()`` to the end of the last batch or epoch. Made by :func:`profile`.
    """

    def __init__(
        self, dataloader: DataLoader[Any], *, label: str, mode: str, max_spans: int = 8_000_000
    ) -> None:
        self.dataloader = dataloader
        """The user's DataLoader (never modified)."""
        self.label = label
        self.mode = mode
        self._session = _Session(label, mode, max_spans)
        self._meta = _meta(dataloader)
        self._inner: Optional[DataLoader[Any]] = None
        self._epoch_iter: Optional["weakref.ReferenceType[Any]"] = None
        if mode != "off":
            self._inner = self._build()

    def _build(self) -> DataLoader[Any]:
        dl = self.dataloader
        session = self._session
        collate = _TimedCollate(dl.collate_fn, session.rec)
        kwargs = _loader_kwargs(dl)
        if isinstance(dl.dataset, IterableDataset):
            # The stream's own order and batching: no sampler to note plans from.
            stream = _ProfiledIterable(_instrument(dl.dataset, session.rec, self._meta), session.rec)
            return DataLoader(
                stream, batch_size=dl.batch_size, drop_last=dl.drop_last, collate_fn=collate,
                **kwargs,
            )
        dataset = _ProfiledDataset(
            _instrument(dl.dataset, session.rec, self._meta), dl.dataset, session.rec,
            opaque=not _is_folder(dl.dataset),
        )
        if dl.batch_sampler is not None:
            return DataLoader(
                dataset,
                batch_sampler=_PlanningSampler(dl.batch_sampler, session),
                collate_fn=collate,
                **kwargs,
            )
        return DataLoader(
            dataset,
            batch_size=None,
            sampler=_PlanningSampler(dl.sampler, session),
            collate_fn=collate,
            **kwargs,
        )

    # -- iteration ----------------------------------------------------------------------------

    def __iter__(self) -> Iterator[Any]:
        session = self._session
        now = _now()
        if session.start_ns is None:
            session.start_ns = now
        session.end_ns = now
        if self._inner is None:
            return iter(self.dataloader)
        session.epoch += 1
        if self.dataloader.num_workers > 0 and session.rec.queue is None:
            # Made before the workers start (fork inherits it, spawn pickles it with the
            # dataset), from the context the workers are started with.
            ctx = self.dataloader.multiprocessing_context or multiprocessing.get_context()
            session.rec.queue = ctx.SimpleQueue()
        it = iter(self._inner)
        self._epoch_iter = weakref.ref(it)
        return _ProfiledIter(it, session)

    def __len__(self) -> int:
        return len(self.dataloader)

    @property
    def dataset(self) -> Any:
        """The user's dataset (never modified)."""
        return self.dataloader.dataset

    @property
    def batch_size(self) -> Optional[int]:
        """The original loader's ``batch_size``."""
        return self.dataloader.batch_size

    @property
    def num_workers(self) -> int:
        """The original loader's ``num_workers``."""
        return self.dataloader.num_workers

    @property
    def collate_fn(self) -> Any:
        """The original loader's ``collate_fn`` (what a wrapper, such as timm's prefetcher,
        reads it for)."""
        return self.dataloader.collate_fn

    @property
    def sampler(self) -> Any:
        """The original loader's ``sampler`` (``set_epoch`` on it reaches the profiled run)."""
        return self.dataloader.sampler

    @property
    def batch_sampler(self) -> Any:
        """The original loader's ``batch_sampler``."""
        return self.dataloader.batch_sampler

    def __enter__(self) -> "ProfiledDataLoader":
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional["TracebackType"],
    ) -> None:
        self.close()

    def close(self) -> None:
        """Ends the run: stops and joins the worker processes (persistent ones, or those of an
        epoch left unfinished), so their CPU time is the parent's to count. Iterating again
        starts new ones."""
        iterators = [self._epoch_iter() if self._epoch_iter is not None else None]
        if self._inner is not None:
            iterators.append(getattr(self._inner, "_iterator", None))
            self._inner._iterator = None
        for it in iterators:
            # torch's own shutdown (idempotent): what its iterator's __del__ would do, now.
            shutdown = getattr(it, "_shutdown_workers", None)
            if callable(shutdown):
                shutdown()
        self._session.drain()
        if self._session.end_ns is None:
            self._session.end_ns = _now()

    # -- results ------------------------------------------------------------------------------

    def profile_dict(self) -> Dict[str, Any]:
        """What was recorded so far, as plain data in the ``ferroloader.profile`` schema."""
        return self.profile().to_dict()

    def profile(self) -> "Profile":
        """What was recorded so far, as a :class:`ferroloader.Profile` (summary, trace...)."""
        session = self._session
        session.drain()
        return _build_profile(self.dataloader, session, self._meta)

    def __repr__(self) -> str:
        return (
            f"ProfiledDataLoader(label={self.label!r}, mode={self.mode!r}, "
            f"batches={len(self._session.deliveries)}, dataloader={self.dataloader!r})"
        )


class ProfiledWrapper(ProfiledDataLoader):
    """A profiled copy of an object that wraps a torch ``DataLoader`` in its ``loader``
    attribute and iterates it (timm's ``PrefetchLoader``): a shallow copy of the wrapper
    iterating a :class:`ProfiledDataLoader` of the inner loader, so it yields what the wrapper
    yields, its work on each batch (timm's normalize and erasing on the device) done in the
    consumer's loop as before. Attributes are the wrapper copy's (``mixup_enabled`` included);
    the profile is the inner loader's. Made by :func:`profile`."""

    def __init__(self, wrapper: Any, *, label: str, mode: str, max_spans: int = 8_000_000) -> None:
        super().__init__(wrapper.loader, label=label, mode=mode, max_spans=max_spans)
        self._meta["wrapper"] = type(wrapper).__name__
        copied = copy.copy(wrapper)
        copied.loader = _Batches(self)
        object.__setattr__(self, "wrapper", copied)

    def __iter__(self) -> Iterator[Any]:
        return iter(self.wrapper)

    def __len__(self) -> int:
        return len(self.wrapper)

    def __getattr__(self, name: str) -> Any:
        if name == "wrapper":  # not set yet (while __init__ runs)
            raise AttributeError(name)
        return getattr(self.wrapper, name)

    def __setattr__(self, name: str, value: Any) -> None:
        wrapper = self.__dict__.get("wrapper")
        if wrapper is not None and hasattr(wrapper, name) and name not in self.__dict__:
            setattr(wrapper, name, value)  # e.g. timm's mixup_enabled
        else:
            object.__setattr__(self, name, value)


class _Batches:
    """What a wrapper copy iterates: the profiled inner loader's batches, with the loader's
    attributes a wrapper reads (``collate_fn``, ``sampler``, ``dataset``...)."""

    def __init__(self, profiled: ProfiledDataLoader) -> None:
        self._profiled = profiled

    def __iter__(self) -> Iterator[Any]:
        return ProfiledDataLoader.__iter__(self._profiled)

    def __len__(self) -> int:
        return len(self._profiled.dataloader)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._profiled.dataloader, name)


def _wrapped_dataloader(obj: Any) -> bool:
    """Whether ``obj`` wraps a torch ``DataLoader`` in its ``loader`` attribute and iterates it
    (timm's ``PrefetchLoader``)."""
    return not isinstance(obj, DataLoader) and isinstance(getattr(obj, "loader", None), DataLoader) and hasattr(
        obj, "__iter__"
    )


def profile(
    dataloader: DataLoader[Any],
    *,
    label: str = "torchvision",
    mode: str = "spans",
    max_spans: int = 8_000_000,
) -> ProfiledDataLoader:
    """Profiles a stock torch ``DataLoader`` (any dataset, an ``IterableDataset`` too; per-op
    spans for a torchvision ``DatasetFolder``/``ImageFolder`` and ``Compose``): iterate the
    returned :class:`ProfiledDataLoader` instead, then call its ``profile()``. An object
    wrapping one in its ``loader`` attribute (timm's ``PrefetchLoader``, what
    ``timm.data.create_loader`` returns) is profiled through it: :class:`ProfiledWrapper`.

    ``label`` names the pipeline in the profile; ``mode`` is ``"spans"`` (spans and batch
    events), ``"counters"`` (plus CPU counter deltas per span, opened in each worker) or
    ``"off"`` (iterates ``dataloader`` itself, records nothing). Past ``max_spans`` spans
    (the native profiler's default cap; about 100 bytes each) only batch events are kept and
    the rest are counted in ``stats.dropped_spans``. The user's loader, dataset and
    transforms are not modified.
    """
    if not isinstance(dataloader, DataLoader) and not _wrapped_dataloader(dataloader):
        raise TypeError(
            f"dataloader: expected a torch.utils.data.DataLoader (or timm's PrefetchLoader of "
            f"one), got {type(dataloader).__name__}"
        )
    if not isinstance(label, str):
        raise TypeError(f"label: expected a str, got {type(label).__name__} {label!r}")
    if not label:
        raise ValueError("label: must not be empty")
    if not isinstance(mode, str):
        raise TypeError(f"mode: expected one of {MODES}, got {type(mode).__name__} {mode!r}")
    if mode not in MODES:
        raise ValueError(f"mode: expected one of {MODES}, got {mode!r}")
    if not isinstance(max_spans, int) or isinstance(max_spans, bool):
        raise TypeError(f"max_spans: expected an int, got {type(max_spans).__name__}")
    if max_spans < 0:
        raise ValueError(f"max_spans: must be at least 0, got {max_spans}")
    if _wrapped_dataloader(dataloader):
        return ProfiledWrapper(dataloader, label=label, mode=mode, max_spans=max_spans)
    return ProfiledDataLoader(dataloader, label=label, mode=mode, max_spans=max_spans)


# -- building the profile (only when asked) ---------------------------------------------------


def _meta(dl: DataLoader[Any], dataset: Any = None) -> Dict[str, str]:
    """What the profile says about ``dl``'s run; about ``dataset`` when ``dl``'s own is a wrapper
    of it (``ferroloader._pydataset``)."""
    if dataset is None:
        dataset = dl.dataset
    meta: Dict[str, str] = {
        "dataset": type(dataset).__name__,
        "torch": str(torch.__version__),
        "python": sys.version.split()[0],
        "pin_memory": str(bool(dl.pin_memory)),
        "in_order": str(getattr(dl, "in_order", True)),
        "persistent_workers": str(getattr(dl, "persistent_workers", False)),
    }
    tv = _torchvision()
    if tv is not None:
        meta["torchvision"] = str(tv.__version__)
    inner = dataset
    while isinstance(inner, Subset):
        inner = inner.dataset
    root = getattr(inner.reader if _timm_image_dataset(inner) else inner, "root", None)
    if root is not None:
        meta["dataset_root"] = os.fspath(root)
    try:
        meta["samples"] = str(len(dataset))
    except TypeError:
        pass
    transform = getattr(inner, "transform", None)
    if transform is not None:
        meta["transform"] = repr(transform)
    if dl.num_workers > 0 and dl.prefetch_factor is not None:
        meta["prefetch_factor"] = str(dl.prefetch_factor)
    return meta


def _start_method(dl: DataLoader[Any]) -> str:
    if dl.num_workers == 0:
        return "none (num_workers=0)"
    ctx = dl.multiprocessing_context
    if ctx is not None:
        return str(ctx.get_start_method())
    # Asking the default context would fix the start method; read it only if already fixed.
    return multiprocessing.get_start_method(allow_none=True) or "default"


def _as_index(sample: Any) -> Optional[int]:
    if sample is None:
        return None
    try:
        value = operator.index(sample)
    except TypeError:
        return None
    return value if value >= 0 else None


def _plan_samples(item: Any) -> Optional[Tuple[Optional[int], ...]]:
    """The sample indices of a sampler's item (a batch's list, or one index): a delivered batch
    is matched to its plan by the samples its spans name."""
    try:
        if isinstance(item, (list, tuple)) or (
            isinstance(item, torch.Tensor) and item.dim() == 1
        ):
            return tuple(_as_index(i) for i in item)
        return (_as_index(item),)
    except Exception:
        return None


def _build_profile(dl: DataLoader[Any], session: _Session, meta: Dict[str, str]) -> "Profile":
    """Feeds the session's raw tuples to the native profile builder: it numbers the batches,
    matches them to their plans, computes counter deltas and fills the schema's defaults."""
    from ferroloader.profiling import Profile

    start = session.start_ns if session.start_ns is not None else session.created_ns
    end = session.end_ns if session.end_ns is not None else _now()
    meta = dict(meta)
    meta["start_method"] = _start_method(dl)
    batch_size = dl.batch_size
    if batch_size is None:
        batch_size = getattr(dl.batch_sampler, "batch_size", None) or (
            1 if dl.batch_sampler is None else 0
        )
    builder = _native.ProfileBuilder(
        session.label, session.mode, pid=os.getpid(), num_workers=dl.num_workers,
        batch_size=batch_size, start_ns=start, end_ns=end, meta=meta,
        dropped_spans=session.dropped_spans,
    )
    processes: Dict[WorkerIdentity, int] = {}

    def process(identity: WorkerIdentity) -> int:
        number = processes.get(identity)
        if number is None:
            worker, pid, tid, names, availability = identity
            number = processes[identity] = builder.process(worker, pid, tid, names, availability)
        return number

    for epoch, planned_ns, samples in session.plans:
        builder.plan(epoch, planned_ns, samples)
    for epoch, records, identity, done_ns, t0, t1, facts in session.deliveries:
        builder.deliver(process(identity), epoch, records, done_ns, t0, t1, facts)
    for identity, (sample, t_ns, op, cause), orphans in session.reports:
        builder.failure(process(identity), sample, t_ns, op, cause, orphans)
    return Profile(builder.finish())
