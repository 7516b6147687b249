"""``ferroloader.Profile`` and ``ferroloader.Summary``: what a profiled run recorded.

A profile holds one or more *pipelines* (``"native"`` from ``Loader(profile=...)``,
``"torchvision"`` from ``ferroloader.torch.profile``) in the versioned ``ferroloader.profile``
schema (see ``profiler/src/schema.rs``): op spans per sample and worker, batch events, failed
samples and which CPU counters were available. Profiles merge, so a native and a torchvision run
land in one trace, one summary and one report.

``Profile.pipelines`` and ``Summary.pipelines`` are typed, read-only views (frozen dataclasses)
of the native profile and summary, built in one conversion from their JSON when first read.
They are dataclasses rather than native classes because every field must be declared for the
type checker anyway (a stub would repeat it), and because a dataclass read costs nothing per
attribute, where a native getter builds a new Python object on every read of a span list; a
test checks that they name exactly the fields the native JSON has.

This module must not compute anything from a profile itself (the summary and the trace come
from the native profiler crate, so both pipelines are measured by the same code), must not
declare the schema's names or defaults (``_native`` exports them), and must not import the
report (``ferroloader.cli.report``), which imports it: the report is a tool behind the ``cli``
extra, and a profile is recorded and saved without it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import typing
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple, Type, TypeVar, Union

from ferroloader import _native

__all__ = [
    "Batch",
    "CounterEvent",
    "CounterGroupStatus",
    "CounterStatus",
    "DerivedMetrics",
    "Distribution",
    "Failure",
    "OpSummary",
    "Pipeline",
    "PipelineStats",
    "PipelineSummary",
    "Profile",
    "Span",
    "Summary",
    "Thread",
    "ThreadStats",
    "WaitBuckets",
    "WorkerSummary",
]

StrPath = Union[str, "os.PathLike[str]"]

# -- typed views of the profile schema (profiler/src/schema.rs) -------------------------------


@dataclass(frozen=True)
class CounterEvent:
    """Whether one counter (``"cycles"``, ``"task_clock"``...) was counted, and why not."""

    counter: str
    available: bool
    reason: Optional[str] = None


@dataclass(frozen=True)
class CounterGroupStatus:
    """A counter group (hardware or software): counted at all, and each event's status."""

    available: bool = False
    reason: Optional[str] = None
    exclude_kernel: bool = False
    events: Tuple[CounterEvent, ...] = ()


@dataclass(frozen=True)
class CounterStatus:
    """Which counters a pipeline (or thread) could open, and why not."""

    hardware: CounterGroupStatus = CounterGroupStatus()
    software: CounterGroupStatus = CounterGroupStatus()
    perf_event_paranoid: Optional[int] = None


@dataclass(frozen=True)
class ThreadStats:
    """One worker's recorder health."""

    dropped_spans: int = 0
    unbalanced_exits: int = 0
    counter_read_errors: int = 0
    counter_running_fraction: Optional[float] = None
    moved_across_threads: bool = False


@dataclass(frozen=True)
class Thread:
    """A worker thread (native) or worker process (torch)."""

    worker: int
    name: str = ""
    pid: Optional[int] = None
    tid: Optional[int] = None
    counters: Optional[CounterStatus] = None
    stats: ThreadStats = ThreadStats()


@dataclass(frozen=True)
class Span:
    """One op span; ``worker`` is ``_native.CONSUMER`` for the consumer's own spans."""

    op: str
    worker: int
    start_ns: int
    end_ns: int
    batch: Optional[int] = None
    sample: Optional[int] = None
    depth: int = 0
    counters: Optional[Dict[str, int]] = None
    bytes: Optional[int] = None
    """Bytes an I/O span moved (a shard request); None for other spans."""


@dataclass(frozen=True)
class Batch:
    """One batch's life, from plan to delivery; each side records what it sees."""

    batch: int
    size: Optional[int] = None
    planned_ns: Optional[int] = None
    first_started_ns: Optional[int] = None
    completed_ns: Optional[int] = None
    completed_by: Optional[int] = None
    delivered_ns: Optional[int] = None
    wait_ns: Optional[int] = None
    out_of_order: bool = False
    queue_occupancy: Optional[int] = None


@dataclass(frozen=True)
class Failure:
    """A sample that was skipped or failed."""

    t_ns: int
    cause: str
    worker: Optional[int] = None
    batch: Optional[int] = None
    sample: Optional[int] = None
    op: Optional[str] = None


@dataclass(frozen=True)
class PipelineStats:
    """A pipeline's recorder health, summed over its threads."""

    dropped_spans: int = 0
    unbalanced_exits: int = 0
    counter_read_errors: int = 0
    unflushed_recorders: int = 0


@dataclass(frozen=True)
class Pipeline:
    """One labelled run: metadata, threads, spans, batches, failures."""

    label: str
    start_ns: int
    end_ns: int
    pid: Optional[int] = None
    mode: str = "off"
    num_workers: int = 0
    batch_size: int = 0
    meta: Dict[str, str] = dataclasses.field(default_factory=dict)
    counters: CounterStatus = CounterStatus()
    threads: Tuple[Thread, ...] = ()
    spans: Tuple[Span, ...] = ()
    batches: Tuple[Batch, ...] = ()
    failures: Tuple[Failure, ...] = ()
    stats: PipelineStats = PipelineStats()

    @property
    def wall_ns(self) -> int:
        """Wall time of the run."""
        return max(0, self.end_ns - self.start_ns)


# -- typed views of the summary (profiler/src/summary.rs) -------------------------------------


@dataclass(frozen=True)
class Distribution:
    """Mean, spread and extremes of a set of durations."""

    count: int
    mean_ns: float
    std_ns: float
    cv: float
    min_ns: int
    max_ns: int


@dataclass(frozen=True)
class WaitBuckets:
    """Shares of delivered batches by how long the consumer waited."""

    near_zero: float = 0.0
    under_1ms: float = 0.0
    over_1ms: float = 0.0
    over_500ms: float = 0.0


@dataclass(frozen=True)
class WorkerSummary:
    """One worker's activity."""

    worker: int
    spans: int
    busy_ns: int
    utilization: float


@dataclass(frozen=True)
class DerivedMetrics:
    """Ratios derived from an op's counters; ``None`` where an input was not counted."""

    ipc: Optional[float] = None
    cache_miss_rate: Optional[float] = None
    mpki: Optional[float] = None
    branch_miss_rate: Optional[float] = None
    page_faults_per_op: Optional[float] = None
    task_clock_ns_per_op: Optional[float] = None
    cpu_utilization: Optional[float] = None


@dataclass(frozen=True)
class OpSummary:
    """One op's figures: counts, inclusive and self time, percentiles, counters."""

    op: str
    count: int
    total_ns: int
    self_ns: int
    mean_ns: float
    p50_ns: int
    p90_ns: int
    p99_ns: int
    max_ns: int
    share: float
    counters: Optional[Dict[str, int]] = None
    derived: DerivedMetrics = DerivedMetrics()


@dataclass(frozen=True)
class PipelineSummary:
    """One pipeline's figures: throughput, waits, latency, CPU per image, per op and worker."""

    label: str
    mode: str
    num_workers: int
    batch_size: int
    wall_ns: int
    images: int
    images_per_s: float
    batches: int
    consumer_wait_ns: int
    consumer_wait_share: float
    out_of_order_share: float
    busy_ns: int
    cpu_time_source: str
    failures: int
    dropped_spans: int
    batch_latency: Optional[Distribution] = None
    batch_delay_mean_ns: Optional[float] = None
    wait_buckets: WaitBuckets = WaitBuckets()
    cpu_seconds_per_image: Optional[float] = None
    worker_seconds_per_image: Optional[float] = None
    bottleneck: Optional[str] = None
    counters_available: Tuple[str, ...] = ()
    workers: Tuple[WorkerSummary, ...] = ()
    ops: Tuple[OpSummary, ...] = ()
    consumer_ops: Tuple[OpSummary, ...] = ()
    io_seconds: float = 0.0
    """Seconds of I/O requests (shard reads), summed over requests that may overlap."""
    io_bytes: int = 0
    """Bytes those requests moved."""


# -- one conversion from JSON data to the views ------------------------------------------------

_View = TypeVar("_View")
_Converter = Callable[[Any], Any]
# Per view class, a converter per field name: built once, so a view of a large profile costs a
# dict lookup and a call per field.
_FIELDS: Dict[type, Dict[str, _Converter]] = {}


def _same(value: Any) -> Any:
    return value


def _converter(hint: Any) -> _Converter:
    """How a parsed JSON value becomes a value of the field type ``hint``."""
    origin = typing.get_origin(hint)
    if origin is Union:
        (inner,) = [a for a in typing.get_args(hint) if a is not type(None)]
        convert = _converter(inner)
        return _same if convert is _same else (lambda v: None if v is None else convert(v))
    if origin is tuple:
        item = _converter(typing.get_args(hint)[0])
        return lambda v: tuple(map(item, v))
    if origin is dict:
        value = _converter(typing.get_args(hint)[1])
        return lambda v: {str(k): value(x) for k, x in v.items()}
    if dataclasses.is_dataclass(hint):
        return lambda v: _view(hint, v)  # type: ignore[arg-type]
    if hint is float:
        return float
    return _same


def _view(cls: Type[_View], data: Mapping[str, Any]) -> _View:
    """A view of type ``cls`` from its JSON object; keys it does not declare are ignored, so
    a file from a later minor version still reads."""
    fields = _FIELDS.get(cls)
    if fields is None:
        hints = typing.get_type_hints(cls, vars(sys.modules[__name__]))
        fields = _FIELDS[cls] = {
            f.name: _converter(hints[f.name]) for f in dataclasses.fields(cls)  # type: ignore[arg-type]
        }
    return cls(**{k: fields[k](v) for k, v in data.items() if k in fields})


class Summary:
    """Per pipeline: throughput, the consumer's waits, per-op time per image, counters.

    ``str(summary)`` is a text table; ``to_dict()`` the JSON form (what ``save_json`` writes).
    """

    def __init__(self, native: _native.Summary) -> None:
        self._native = native
        self._pipelines: Optional[Tuple[PipelineSummary, ...]] = None

    @property
    def pipelines(self) -> Tuple[PipelineSummary, ...]:
        """One typed summary per pipeline, in profile order."""
        if self._pipelines is None:
            data = self.to_dict()
            self._pipelines = tuple(_view(PipelineSummary, p) for p in data["pipelines"])
        return self._pipelines

    def pipeline(self, label: str) -> PipelineSummary:
        """The summary of the pipeline labelled ``label`` (``KeyError`` if absent)."""
        for p in self.pipelines:
            if p.label == label:
                return p
        raise KeyError(f"no pipeline labelled {label!r}; have {[p.label for p in self.pipelines]}")

    def to_dict(self) -> Dict[str, Any]:
        """The summary as plain Python data."""
        data: Dict[str, Any] = json.loads(self._native.to_json())
        return data

    def to_json(self) -> str:
        """The summary as JSON text."""
        return self._native.to_json()

    def to_csv(self) -> str:
        """One CSV row per pipeline and op."""
        return self._native.to_csv()

    def save_json(self, path: StrPath) -> None:
        """Writes the JSON form to ``path``."""
        self._native.save_json(os.fspath(path))

    def save_csv(self, path: StrPath) -> None:
        """Writes the CSV form to ``path``."""
        self._native.save_csv(os.fspath(path))

    def table(self) -> str:
        """The text table."""
        return self._native.table()

    def __str__(self) -> str:
        return self._native.table()

    def __repr__(self) -> str:
        return f"Summary(pipelines={[p.label for p in self.pipelines]!r})"


class Profile:
    """A recorded profile: ``summary()``, ``save(path)``, ``save_trace(path)``; ``merge`` puts
    pipelines side by side. The HTML report of one is ``ferroloader.report.write_html(profile,
    path)`` (the ``cli`` extra), which builds on this class, never the reverse."""

    def __init__(self, native: _native.Profile) -> None:
        self._native = native
        self._pipelines: Optional[Tuple[Pipeline, ...]] = None

    @property
    def pipelines(self) -> Tuple[Pipeline, ...]:
        """The pipelines as typed views, in order."""
        if self._pipelines is None:
            data = self.to_dict()
            self._pipelines = tuple(_view(Pipeline, p) for p in data["pipelines"])
        return self._pipelines

    @classmethod
    def load(cls, path: StrPath) -> "Profile":
        """Reads a profile file (``FileNotFoundError``; ``ValueError`` if it is not one)."""
        return cls(_native.Profile.load(os.fspath(path)))

    @classmethod
    def from_json(cls, text: str) -> "Profile":
        """Parses profile JSON; ``ValueError`` naming what is wrong."""
        return cls(_native.Profile.loads(text))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Profile":
        """A profile from plain data in the schema (what the Python instrumentation builds)."""
        return cls.from_json(json.dumps(data))

    def to_dict(self) -> Dict[str, Any]:
        """The profile as plain Python data."""
        data: Dict[str, Any] = json.loads(self._native.to_json())
        return data

    def to_json(self) -> str:
        """The profile as JSON text."""
        return self._native.to_json()

    def save(self, path: StrPath) -> None:
        """Writes the profile as JSON (read it back with ``Profile.load``)."""
        self._native.save(os.fspath(path))

    def save_trace(self, path: StrPath, *, align: bool = False) -> None:
        """Writes a Chrome trace for Perfetto (https://ui.perfetto.dev) or chrome://tracing: a
        process per pipeline, a track per worker. ``align=True`` starts every pipeline at 0."""
        self._native.save_trace(os.fspath(path), align=align)

    def summary(self) -> Summary:
        """Throughput, waits and per-op statistics of each pipeline."""
        return Summary(self._native.summary())

    def merge(self, other: "Profile") -> "Profile":
        """This profile's pipelines followed by ``other``'s (a repeated label gets ``#2``)."""
        return Profile(self._native.merge(other._native))

    @property
    def labels(self) -> List[str]:
        """The pipelines' labels."""
        return self._native.labels

    def pipeline(self, label: str) -> Dict[str, Any]:
        """The pipeline labelled ``label``, as plain data (``KeyError`` if absent)."""
        for pipeline in self.to_dict()["pipelines"]:
            if pipeline["label"] == label:
                found: Dict[str, Any] = pipeline
                return found
        raise KeyError(f"no pipeline labelled {label!r}; have {self.labels}")

    def __len__(self) -> int:
        return len(self._native)

    def __repr__(self) -> str:
        return repr(self._native)

