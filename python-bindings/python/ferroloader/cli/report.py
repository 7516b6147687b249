"""The profile report: one self-contained HTML page, plus the trace, profile and summary files.

``write_html`` renders any profile (one pipeline or several, native or torchvision or both)
to a single HTML file that needs no network to view: the plots are matplotlib figures inlined
as SVG, the style sheet is inline, there is no script, font or image from anywhere else.
``write_report`` fills a report folder: ``report.html``, ``trace.json`` (Chrome/Perfetto trace
of every pipeline on one timeline), ``profile.json``, ``summary.json`` and ``summary.csv``.

The page answers, in order: how much faster is one pipeline than the other; which op takes the
time (per image, with torchvision's op names mapped onto the native ones); how long the consumer
waits for data; how batch latency moves over the run; what each worker did when (a timeline);
what the CPU counters say per op (and why some are missing); and, for a worker sweep, where
more workers stop paying off.

This module reads profiles and summaries through their typed views
(``ferroloader.profiling``: ``Pipeline``, ``PipelineSummary``, ``OpSummary``...) and must not
record or run anything; sweep points (from ``ferroloader.compare``) are plain dicts.
"""

from __future__ import annotations

import datetime as _dt
import html
import io
import os
import platform
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import (
    Any,
    Callable,
    Dict,
    Iterable,
    List,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    Union,
)

from ferroloader._native import CONSUMER, IO, PROFILE_SCHEMA, PROFILE_SCHEMA_VERSION
from ferroloader.profiling import Pipeline, PipelineSummary, Profile, Span, StrPath, Summary

__all__ = [
    "STAGES",
    "html_page",
    "html_table",
    "natural",
    "ReportFiles",
    "ratio",
    "stage_of",
    "stage_times",
    "view_times",
    "write_html",
    "write_report",
]


# -- op names -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Stage:
    """A step of the image-classification pipeline, and the op names each side records for it."""

    key: str
    title: str
    torchvision: Tuple[str, ...]
    native: Tuple[str, ...]
    color: str
    note: str = ""


#: The pipeline's steps in order. torchvision records one span per transform by class name;
#: the native loader records its own op names, and with the fused kernel one ``fused`` span
#: covers crop, resize, flip, to-tensor and normalize in a single pass over the pixels.
STAGES: Tuple[Stage, ...] = (
    Stage("first_touch", "first touch of batch memory", (), ("first_touch",), "#d4a6c8",
          "native: page faults of a new loader's batch buffers, in its first batches only"),
    Stage("read", "read file", ("read",), ("read",), "#9e9e9e"),
    Stage("decode", "decode JPEG", ("decode",), ("decode",), "#4e79a7",
          "native: libjpeg-turbo, decoding only the crop's region when it can"),
    Stage("crop_params", "draw crop box", (), ("crop_params",), "#9c755f",
          "torchvision draws it inside RandomResizedCrop"),
    Stage("crop", "crop and resize", ("RandomResizedCrop", "Resize", "CenterCrop",
          "RandomResizedCropAndInterpolation", "ResizeKeepRatio"), ("crop", "resize"), "#f28e2b"),
    Stage("flip", "horizontal flip", ("RandomHorizontalFlip",), ("flip",), "#76b7b2"),
    # v2 spells ToTensor as ToImage then ToDtype (or ConvertImageDtype).
    Stage("to_tensor", "to tensor", ("ToTensor", "PILToTensor", "ToImage", "ToDtype",
          "ConvertImageDtype"), ("to_tensor",), "#59a14f"),
    Stage("normalize", "normalize", ("Normalize",), ("normalize",), "#edc948"),
    Stage("fused", "fused crop…normalize", (), ("fused",), "#b07aa1",
          "crop + resize + flip + to-tensor + normalize in one pass"),
    Stage("collate", "collate batch", ("collate",), ("collate",), "#ff9da7"),
    Stage("getitem", "uninstrumented __getitem__", ("__getitem__",), (), "#c9b18a",
          "a custom dataset's own code outside its timed transform: split it with "
          "ferroloader.torch.span(name)"),
    # Named view0, view1... (:func:`stage_of` matches them): as many as the transform makes.
    Stage("views", "view spans (own time)", (), (), "#d7b5a6",
          "each view's span of a transform returning several (view0, view1...), less its ops, "
          "which their own rows count"),
    Stage("other", "per-sample overhead", ("process",), ("process",), "#bab0ac",
          "self time of the per-sample span: Python/bookkeeping outside the ops"),
)
_STAGE_BY_OP: Dict[str, Stage] = {
    op: s for s in STAGES for op in (*s.torchvision, *s.native)
}
#: Stages that together turn decoded pixels into a normalized tensor: compared as one total,
#: because the fused kernel does all of them in one span.
_TRANSFORM_STAGES = ("crop_params", "crop", "flip", "to_tensor", "normalize", "fused")
#: The span of one view of a transform returning several (both sides name them so).
_VIEW_SPAN = re.compile(r"view\d+")
_EXTRA_COLORS = ("#8cd17d", "#86bcb6", "#e15759", "#d37295", "#fabfd2", "#79706e")


def stage_of(op: str) -> str:
    """The stage key of an op name (``"RandomResizedCrop"`` and ``"resize"`` -> ``"crop"``);
    an op no stage knows is its own stage."""
    stage = _STAGE_BY_OP.get(op)
    if stage is None and _VIEW_SPAN.fullmatch(op):
        return "views"
    return stage.key if stage else op


def natural(name: str) -> Tuple[Any, ...]:
    """Sort key of an op name with its numbers as numbers: ``view2`` before ``view10``."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name))


def _stage_title(key: str) -> str:
    for s in STAGES:
        if s.key == key:
            return s.title
    return key


def _op_color(op: str, extra: Dict[str, str]) -> str:
    stage = _STAGE_BY_OP.get(op)
    if stage is not None:
        return stage.color
    if op not in extra:
        extra[op] = _EXTRA_COLORS[len(extra) % len(_EXTRA_COLORS)]
    return extra[op]


def stage_times(pipeline_summary: PipelineSummary) -> Dict[str, float]:
    """Self time per image in nanoseconds, by stage key, of one pipeline summary (worker ops
    and the consumer thread's ops together: both are the pipeline's cost)."""
    images = max(1, pipeline_summary.images)
    out: Dict[str, float] = {}
    for o in (*pipeline_summary.ops, *pipeline_summary.consumer_ops):
        key = stage_of(o.op)
        out[key] = out.get(key, 0.0) + o.self_ns / images
    return out


def view_times(pipeline_summary: PipelineSummary) -> Dict[str, float]:
    """Time per image in nanoseconds of each view span (``view0``, ``view1``...: a transform
    returning several views), its ops included, in view order; empty for a transform
    returning one tensor. Each sample makes each view once, so per image is per view made."""
    images = max(1, pipeline_summary.images)
    found = {o.op: o.total_ns / images for o in pipeline_summary.ops if _VIEW_SPAN.fullmatch(o.op)}
    return {k: found[k] for k in sorted(found, key=natural)}


# -- pipelines ---------------------------------------------------------------------------------


def _family(label: str) -> str:
    """``"native"`` for ``"native"``, ``"native#2"`` (a second round) or ``"native w=4"``."""
    return re.split(r"[#\s]", label, maxsplit=1)[0]


_FAMILY_COLORS = {"torchvision": "#e8710a", "timm": "#e8710a", "native": "#1a73e8"}
_OTHER_COLORS = ("#12b5cb", "#9334e6", "#188038", "#d93025", "#f9ab00", "#5f6368")


def _pipeline_color(label: str, order: Sequence[str]) -> str:
    fam = _family(label)
    if fam in _FAMILY_COLORS:
        return _FAMILY_COLORS[fam]
    others = [f for f in dict.fromkeys(_family(x) for x in order) if f not in _FAMILY_COLORS]
    return _OTHER_COLORS[others.index(fam) % len(_OTHER_COLORS)] if fam in others else "#5f6368"


@dataclass
class _Family:
    """The pipelines of one family (``native``, ``torchvision``) summed over rounds."""

    name: str
    images: int = 0
    wall_ns: int = 0
    wait_ns: int = 0
    cpu_s: float = 0.0
    cpu_images: int = 0
    labels: List[str] = field(default_factory=list)

    @property
    def images_per_s(self) -> float:
        return self.images / (self.wall_ns / 1e9) if self.wall_ns else 0.0

    @property
    def wait_share(self) -> float:
        return self.wait_ns / self.wall_ns if self.wall_ns else 0.0

    @property
    def cpu_ms_per_image(self) -> Optional[float]:
        return self.cpu_s / self.cpu_images * 1e3 if self.cpu_images else None


def _cpu_per_image(s: PipelineSummary, cpu: Mapping[str, float]) -> Tuple[Optional[float], str]:
    """CPU seconds per image of a pipeline, and where the figure comes from. "CPU per image"
    is always CPU time: the OS's count for the process and its workers when the caller
    measured it, else the workers' task-clock counter; never span time (a thread waiting for
    a core is in its span but not on a CPU), which the report calls worker time."""
    label = s.label
    if label in cpu:
        return float(cpu[label]), "process + workers, from the OS"
    value = s.cpu_seconds_per_image
    if value is None:
        return None, "not measured: no OS count, no task-clock"
    return float(value), "task-clock of the workers' spans"


def _families(summaries: Sequence[PipelineSummary],
              cpu_measured: Mapping[str, float]) -> List[_Family]:
    fams: Dict[str, _Family] = {}
    for s in summaries:
        label = s.label
        f = fams.setdefault(_family(label), _Family(_family(label)))
        f.labels.append(label)
        f.images += s.images
        f.wall_ns += s.wall_ns
        f.wait_ns += s.consumer_wait_ns
        cpu, _ = _cpu_per_image(s, cpu_measured)
        if cpu is not None:
            f.cpu_s += cpu * s.images
            f.cpu_images += s.images
    return list(fams.values())


def _baseline_and_other(fams: Sequence[_Family]) -> Optional[Tuple[_Family, _Family]]:
    """(baseline, other): ``torchvision`` and ``native`` when both ran, whatever else did;
    else the two families of a two-family profile, in the order they ran (a user's own labels,
    such as a merge of two of their runs); else None."""
    by = {f.name: f for f in fams}
    if "torchvision" in by and "native" in by:
        return by["torchvision"], by["native"]
    if len(fams) == 2:
        return fams[0], fams[1]
    return None


#: A run shorter than either of these includes too much start-up (the first touch of buffers,
#: the workers' first decodes) for its throughput to stand for the steady state.
MIN_BATCHES = 20
MIN_SECONDS = 2.0

#: Worker time per image above this multiple of the OS's CPU time per image means the worker
#: threads were runnable but waiting for a core, so every op's time is inflated.
OVERSUBSCRIBED = 1.5


def _recorded(pipeline: Pipeline, summary: PipelineSummary) -> bool:
    """Whether a pipeline was recorded at all (profiling on, some spans or batches)."""
    return summary.mode != "off" and bool(pipeline.spans or pipeline.batches)


def run_warnings(pipelines: Sequence[Pipeline], summaries: Sequence[PipelineSummary],
                 cpu_measured: Mapping[str, float]) -> List[str]:
    """What makes a profile's figures less than they seem, one plain sentence each: a pipeline
    recorded with profiling off (an empty profile), a run too short for its throughput, and
    worker time far above the CPU time the OS counted (more workers than free cores)."""
    notes: List[str] = []
    for p, s in zip(pipelines, summaries):
        label = s.label
        if not _recorded(p, s):
            notes.append(
                f"{label}: nothing was recorded (profiling was off: pass profile=\"spans\" to "
                "the Loader, or mode=\"spans\" to ferroloader.torch.profile)."
            )
            continue
        batches, seconds = s.batches, s.wall_ns / 1e9
        if batches < MIN_BATCHES or seconds < MIN_SECONDS:
            notes.append(
                f"{label}: {batches} batches in {seconds:.2f} s is too short for its "
                f"throughput (start-up is included): run at least {MIN_BATCHES} batches and "
                f"{MIN_SECONDS:g} s (--batches, --rounds) before trusting a ratio."
            )
        cpu, _ = _cpu_per_image(s, cpu_measured)
        worker = s.worker_seconds_per_image
        if cpu and worker:
            worker_ms, cpu_ms = worker * 1e3, cpu * 1e3
            if worker_ms > OVERSUBSCRIBED * cpu_ms:
                notes.append(
                    f"{label}: {worker_ms:.2f} ms of worker time per image against "
                    f"{cpu_ms:.2f} ms of CPU: the workers waited for a core (more workers than "
                    "free cores, or another load on this machine), so op times are inflated."
                )
    return notes


# -- formatting --------------------------------------------------------------------------------


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _ms(ns: Optional[float], digits: int = 2) -> str:
    if ns is None:
        return "–"
    ms = ns / 1e6
    if 0 < abs(ms) < 0.01:
        return f"{ms:.4f}"
    return f"{ms:,.{digits}f}"


def _us(ns: Optional[float]) -> str:
    return "–" if ns is None else f"{ns / 1e3:,.1f}"


def _pct(x: Optional[float], digits: int = 1) -> str:
    return "–" if x is None else f"{x * 100:.{digits}f}%"


def _num(x: Optional[float], digits: int = 1) -> str:
    return "–" if x is None else f"{x:,.{digits}f}"


def _table(
    headers: Sequence[str],
    rows: Iterable[Sequence[object]],
    *,
    cls: str = "",
    numeric_from: int = 1,
    raw: bool = False,
) -> str:
    """An HTML table; columns from ``numeric_from`` on are right-aligned numbers. Cells are
    escaped unless ``raw`` (for cells built from escaped fragments)."""
    cell = (lambda v: str(v)) if raw else _e
    head = "".join(
        f'<th class="{"num" if i >= numeric_from else ""}">{_e(h)}</th>'
        for i, h in enumerate(headers)
    )
    body = "".join(
        "<tr>"
        + "".join(
            f'<td class="{"num" if i >= numeric_from else ""}">{cell(v)}</td>'
            for i, v in enumerate(row)
        )
        + "</tr>"
        for row in rows
    )
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


# -- plots -------------------------------------------------------------------------------------

_RC: Dict[Any, Any] = {
    # Text stays text (selectable, crisp at any zoom, small files); the page's fonts draw it.
    "svg.fonttype": "none",
    "font.family": "sans-serif",
    "font.sans-serif": ["DejaVu Sans", "Liberation Sans", "Arial", "Helvetica"],
    "font.size": 10.0,
    "axes.titlesize": 11.0,
    "axes.titleweight": "bold",
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.color": "#e3e3e3",
    "grid.linewidth": 0.8,
    "axes.axisbelow": True,
    "legend.frameon": False,
}
#: Above this many spans a timeline draws its bars as one embedded bitmap (still inline, as a
#: data: URI) rather than one SVG path each, to keep the page light.
_RASTER_SPANS = 6000
_SVG_ID = re.compile(r'\bid="([^"]+)"')
_SVG_REF = re.compile(r'(url\(#|href="#)([^)"]+)')


def _svg(fig: Any, prefix: str) -> str:
    """The figure as an inline ``<svg>`` element. Ids get a per-figure prefix: matplotlib
    numbers its groups ``figure_1``, ``axes_1``... in every figure, and ids must be unique in
    one HTML document (clip paths are found by id)."""
    import matplotlib

    buf = io.StringIO()
    with matplotlib.rc_context(_RC):
        fig.savefig(
            buf,
            format="svg",
            bbox_inches="tight",
            pad_inches=0.08,
            # No RDF metadata block: nothing in the page should name another site.
            metadata={"Creator": None, "Date": None, "Format": None, "Type": None},
        )
    text = buf.getvalue()
    text = text[text.index("<svg") :]
    text = _SVG_ID.sub(lambda m: f'id="{prefix}-{m.group(1)}"', text)
    text = _SVG_REF.sub(lambda m: f"{m.group(1)}{prefix}-{m.group(2)}", text)
    # Let CSS size the plot: keep the viewBox, drop the fixed pt size.
    text = re.sub(r'<svg([^>]*?) width="[^"]+" height="[^"]+"', r"<svg\1", text, count=1)
    return text


def _new_figure(width: float, height: float) -> Any:
    import matplotlib
    from matplotlib.figure import Figure

    with matplotlib.rc_context(_RC):
        return Figure(figsize=(width, height), layout="constrained")


def _figure(fig_id: str, svg: str, caption: str) -> str:
    return (
        f'<figure class="plot" id="{_e(fig_id)}">{svg}'
        f"<figcaption>{caption}</figcaption></figure>"
    )


def _with_rc(fn: Any) -> Any:
    """Runs a plot function under the report's matplotlib settings (axes styles are read when
    axes are created)."""

    def run(*args: Any, **kwargs: Any) -> Any:
        import matplotlib

        with matplotlib.rc_context(_RC):
            return fn(*args, **kwargs)

    return run


def _stage_keys(times: Sequence[Mapping[str, float]]) -> List[str]:
    """Stages present in any pipeline, in pipeline order, then unknown ops by name."""
    keys = [s.key for s in STAGES if any(t.get(s.key, 0) > 0 for t in times)]
    known = {s.key for s in STAGES}
    return keys + sorted({k for t in times for k in t} - set(keys) - known)


def _stage_color(key: str, extra: Dict[str, str]) -> str:
    stage = next((s for s in STAGES if s.key == key), None)
    return stage.color if stage else _op_color(key, extra)


def _short(v: float) -> str:
    return "<0.01" if 0 < v < 0.005 else f"{v:.2f}"


@_with_rc
def _plot_ops_total(summaries: Sequence[PipelineSummary]) -> str:
    """One stacked bar per pipeline: the worker time per image, split by stage."""
    times = [stage_times(s) for s in summaries]
    keys = _stage_keys(times)
    labels = [s.label for s in summaries]
    n = len(labels)
    fig = _new_figure(11.0, 0.9 + 0.55 * n)
    ax = fig.add_subplot()
    extra: Dict[str, str] = {}
    ys = list(range(n))[::-1]
    starts = [0.0] * n
    for key in keys:
        widths = [t.get(key, 0.0) / 1e6 for t in times]
        ax.barh(ys, widths, left=starts, color=_stage_color(key, extra),
                label=_stage_title(key), height=0.62, edgecolor="white", linewidth=0.6)
        starts = [a + b for a, b in zip(starts, widths)]
    for y, total in zip(ys, starts):
        ax.text(total, y, f"  {total:.2f} ms", va="center", fontsize=9.5, fontweight="bold")
    ax.set_yticks(ys, labels)
    ax.set_xlabel("worker time per image (ms): self time of each op, summed over workers")
    ax.set_title("Where each image's time goes", loc="left")
    ax.margins(x=0.12)
    ax.grid(axis="y", visible=False)
    fig.legend(loc="outside right upper", fontsize=8.5)
    return _svg(fig, "ops-total")


@_with_rc
def _plot_ops(summaries: Sequence[PipelineSummary], order: Sequence[str]) -> str:
    """Stage by stage, the pipelines side by side."""
    times = [stage_times(s) for s in summaries]
    keys = _stage_keys(times)
    labels = [s.label for s in summaries]
    n = len(labels)
    fig = _new_figure(11.0, 0.9 + 0.22 * len(keys) * max(2, n))
    ax = fig.add_subplot()
    height = 0.8 / max(1, n)
    yk = list(range(len(keys)))[::-1]
    for i, (label, t) in enumerate(zip(labels, times)):
        pos = [y + 0.4 - height * (i + 0.5) for y in yk]
        vals = [t.get(k, 0.0) / 1e6 for k in keys]
        ax.barh(pos, vals, height=height * 0.92, color=_pipeline_color(label, order), label=label)
        for p, v in zip(pos, vals):
            if v > 0:
                ax.text(v, p, f" {_short(v)}", va="center", fontsize=8.5)
    ax.set_yticks(yk, [_stage_title(k) for k in keys])
    ax.set_xlabel("ms per image (worker time)")
    ax.set_title("Op by op", loc="left")
    ax.margins(x=0.08)
    ax.grid(axis="y", visible=False)
    ax.legend(loc="lower right")
    return _svg(fig, "ops")


@_with_rc
def _plot_throughput(summaries: Sequence[PipelineSummary], order: Sequence[str]) -> str:
    labels = [s.label for s in summaries]
    n = len(labels)
    fig = _new_figure(11.0, 0.9 + 0.5 * max(n, 2))
    left, right = fig.subplots(1, 2)
    ys = list(range(n))[::-1]
    rates = [s.images_per_s for s in summaries]
    colors = [_pipeline_color(x, order) for x in labels]
    left.barh(ys, rates, color=colors, height=0.6)
    for y, r in zip(ys, rates):
        left.text(r, y, f"  {r:,.0f} img/s", va="center", fontsize=9)
    left.set_yticks(ys, labels)
    left.set_xlabel("images per second (wall clock)")
    left.set_title("Throughput")
    left.margins(x=0.25)
    left.grid(axis="y", visible=False)
    waits = [s.consumer_wait_share for s in summaries]
    right.barh(ys, [w * 100 for w in waits], color="#d93025", height=0.6, label="waiting for data")
    right.barh(ys, [100 - w * 100 for w in waits], left=[w * 100 for w in waits],
               color="#c8e6c9", height=0.6, label="step / consumer work")
    for y, w in zip(ys, waits):
        right.text(min(w * 100, 97) + 1, y, f"{w * 100:.1f}% waiting", va="center", fontsize=9)
    right.set_yticks(ys, labels)
    right.set_xlim(0, 100)
    right.set_xlabel("share of the consumer's wall time (%)")
    right.set_title("Consumer waiting for data (GPU idle share)")
    right.grid(axis="y", visible=False)
    right.legend(loc="upper center", bbox_to_anchor=(0.5, -0.32 if n <= 2 else -0.2), ncols=2)
    return _svg(fig, "throughput")


def _batch_points(p: Pipeline) -> List[Tuple[float, Optional[float], Optional[float]]]:
    """Per batch in delivery order: (time since the run's start in s, latency ns, wait ns).

    Latency is completion minus first sample start (else minus plan), as in the summary."""
    start = p.start_ns
    pts = []
    for b in p.batches:
        t = b.delivered_ns or b.completed_ns
        if t is None:
            continue
        first = b.first_started_ns or b.planned_ns
        lat = (
            float(b.completed_ns - first)
            if b.completed_ns is not None and first is not None
            else None
        )
        wait = float(b.wait_ns) if b.wait_ns is not None else None
        pts.append(((t - start) / 1e9, lat, wait))
    pts.sort(key=lambda x: x[0])
    return pts


@_with_rc
def _plot_latency(pipelines: Sequence[Pipeline], order: Sequence[str]) -> Optional[str]:
    series = [(p.label, _batch_points(p)) for p in pipelines]
    if not any(pts for _, pts in series):
        return None
    fig = _new_figure(11.0, 5.2)
    grid = fig.add_gridspec(2, 2, width_ratios=[2.6, 1.0])
    ax_lat = fig.add_subplot(grid[0, 0])
    ax_wait = fig.add_subplot(grid[1, 0], sharex=ax_lat)
    ax_box = fig.add_subplot(grid[0, 1])
    ax_wbox = fig.add_subplot(grid[1, 1])
    box_lat: List[List[float]] = []
    box_wait: List[List[float]] = []
    box_labels: List[str] = []
    for label, pts in series:
        color = _pipeline_color(label, order)
        lat = [(t, v / 1e6) for t, v, _ in pts if v is not None]
        wait = [(t, w / 1e6) for t, _, w in pts if w is not None]
        if lat:
            ax_lat.plot(*zip(*lat), marker="o", ms=3, lw=1.2, color=color, label=label)
        if wait:
            ax_wait.plot(*zip(*wait), marker="o", ms=3, lw=1.2, color=color, label=label)
        box_lat.append([v for _, v in lat])
        box_wait.append([v for _, v in wait])
        box_labels.append(label)
    ax_lat.set_ylabel("batch latency (ms)")
    ax_lat.set_title("Batch latency over the run (first sample started → batch complete)")
    handles, names = ax_lat.get_legend_handles_labels()
    fig.legend(handles, names, loc="outside upper center", ncols=max(1, len(names)))
    ax_lat.set_ylim(bottom=0)
    ax_wait.set_ylabel("consumer wait (ms)")
    ax_wait.set_xlabel("time since the pipeline started (s)")
    ax_wait.set_title("How long next() blocked for each batch")
    ax_wait.set_ylim(bottom=0)
    for ax, data, title in ((ax_box, box_lat, "Latency spread"), (ax_wbox, box_wait, "Wait spread")):
        keep = [(d, lab) for d, lab in zip(data, box_labels) if d]
        if keep:
            bp = ax.boxplot([d for d, _ in keep], orientation="horizontal", widths=0.55, patch_artist=True,
                            medianprops={"color": "black"})
            for patch, (_, lab) in zip(bp["boxes"], keep):
                patch.set_facecolor(_pipeline_color(lab, order))
                patch.set_alpha(0.55)
            ax.set_yticks(range(1, len(keep) + 1), [lab for _, lab in keep])
        ax.set_title(title)
        ax.set_xlabel("ms")
        ax.set_xlim(left=0)
    return _svg(fig, "latency")


def _nest(spans: Sequence[Span]) -> List[Tuple[Span, int]]:
    """Spans of one worker with their nesting depth, found from the time intervals (Python
    writers leave ``depth`` out)."""
    ordered = sorted(spans, key=lambda s: (s.start_ns, -s.end_ns))
    stack: List[int] = []
    out: List[Tuple[Span, int]] = []
    for s in ordered:
        while stack and stack[-1] <= s.start_ns:
            stack.pop()
        out.append((s, len(stack)))
        stack.append(s.end_ns)
    return out


@_with_rc
def _plot_timeline(pipelines: Sequence[Pipeline], max_pipelines: int = 4) -> Optional[str]:
    shown = [p for p in pipelines if p.spans or p.batches][:max_pipelines]
    if not shown:
        return None
    rows_per = []
    for p in shown:
        workers = sorted({s.worker for s in p.spans if s.worker != CONSUMER})
        rows_per.append(workers)
    heights = [len(w) + 1 for w in rows_per]
    fig = _new_figure(11.0, 1.3 + 0.42 * sum(heights) + 0.45 * len(shown))
    axes = fig.subplots(len(shown), 1, sharex=True, height_ratios=heights, squeeze=False)[:, 0]
    extra: Dict[str, str] = {}
    seen_ops: Dict[str, str] = {}
    for ax, p, workers in zip(axes, shown, rows_per):
        start = p.start_ns
        row_of = {w: len(workers) - i for i, w in enumerate(workers)}
        row_of[CONSUMER] = 0
        spans = p.spans
        raster = len(spans) > _RASTER_SPANS
        by_worker: Dict[int, List[Span]] = {}
        for s in spans:
            by_worker.setdefault(s.worker, []).append(s)
        bars: Dict[Tuple[str, int, int], List[Tuple[float, float]]] = {}
        for w, ws in by_worker.items():
            for s, depth in _nest(ws):
                key = (s.op, row_of.get(w, 0), min(depth, 3))
                bars.setdefault(key, []).append(
                    ((s.start_ns - start) / 1e9, (s.end_ns - s.start_ns) / 1e9)
                )
        for (op, row, depth), xr in sorted(bars.items(), key=lambda kv: kv[0][2]):
            h = 0.8 * (0.62**depth)
            color = _op_color(op, extra)
            seen_ops.setdefault(op, color)
            ax.broken_barh(xr, (row - h / 2, h), facecolors=color, linewidth=0, rasterized=raster)
        waits = [
            ((b.delivered_ns - b.wait_ns - start) / 1e9, b.wait_ns / 1e9)
            for b in p.batches
            if b.delivered_ns is not None and b.wait_ns
        ]
        if waits:
            ax.broken_barh(waits, (-0.3, 0.6), facecolors="#d93025", linewidth=0, rasterized=raster)
            seen_ops.setdefault("consumer waiting", "#d93025")
        ax.set_yticks(
            [row_of[w] for w in workers] + [0],
            [f"worker {w}" for w in workers] + ["consumer"],
        )
        ax.set_ylim(-0.6, len(workers) + 0.6)
        ax.grid(axis="y", visible=False)
        ax.set_title(
            f"{p.label}: {_workers(p.num_workers)}, "
            f"{(p.end_ns - start) / 1e9:.2f} s",
            loc="left",
        )
    axes[-1].set_xlabel("time since the pipeline started (s); both on the same scale")
    axes[-1].set_xlim(left=0)
    from matplotlib.patches import Patch

    handles = [Patch(facecolor=c, label=op) for op, c in seen_ops.items()]
    fig.legend(handles=handles, loc="outside lower center", ncols=min(6, len(handles)), fontsize=8.5)
    return _svg(fig, "timeline")


@_with_rc
def _plot_counters(summaries: Sequence[PipelineSummary], order: Sequence[str]) -> Optional[str]:
    """Task-clock (CPU) time per image by stage, next to span self time: where they differ the
    op waited off CPU (I/O, preemption)."""
    rows: List[Tuple[str, Dict[str, float], Dict[str, float]]] = []
    for s in summaries:
        images = max(1, s.images)
        cpu: Dict[str, float] = {}
        for o in (*s.ops, *s.consumer_ops):
            task_clock = (o.counters or {}).get("task_clock")
            if task_clock is not None:
                key = stage_of(o.op)
                cpu[key] = cpu.get(key, 0.0) + task_clock / images
        if cpu:
            rows.append((s.label, cpu, stage_times(s)))
    if not rows:
        return None
    keys = _stage_keys([c for _, c, _ in rows])
    n = len(rows)
    fig = _new_figure(11.0, 1.0 + 0.34 * len(keys) * max(1, n))
    ax = fig.add_subplot()
    height = 0.8 / n
    yk = list(range(len(keys)))[::-1]
    for i, (label, cpu, wall) in enumerate(rows):
        pos = [y + 0.4 - height * (i + 0.5) for y in yk]
        color = _pipeline_color(label, order)
        ax.barh(pos, [wall.get(k, 0) / 1e6 for k in keys], height=height * 0.9, color=color,
                alpha=0.3, label=f"{label}: span self time")
        ax.barh(pos, [cpu.get(k, 0) / 1e6 for k in keys], height=height * 0.5, color=color,
                label=f"{label}: task-clock (on CPU)")
    ax.set_yticks(yk, [_stage_title(k) for k in keys])
    ax.set_xlabel("ms per image")
    ax.set_title("CPU time (task-clock counter) vs span time, per image")
    ax.grid(axis="y", visible=False)
    ax.legend(loc="lower right", fontsize=8.5)
    return _svg(fig, "counters")


@_with_rc
def _plot_sweep(points: Sequence[Mapping[str, Any]], order: Sequence[str]) -> str:
    fig = _new_figure(11.0, 4.4)
    ax_rate, ax_cpu = fig.subplots(1, 2)
    fams = list(dict.fromkeys(str(p["pipeline"]) for p in points))
    for fam in fams:
        pts = sorted((p for p in points if p["pipeline"] == fam), key=lambda p: int(p["workers"]))
        color = _pipeline_color(fam, order)
        ws = [int(p["workers"]) for p in pts]
        ax_rate.plot(ws, [float(p["images_per_s"]) for p in pts], marker="o", color=color, label=fam)
        cpu = [(int(p["workers"]), float(p["cpu_s_per_image"]) * 1e3) for p in pts
               if p.get("cpu_s_per_image") is not None]
        if cpu:
            ax_cpu.plot(*zip(*cpu), marker="o", color=color, label=fam)
        enough = [p for p in pts if p.get("enough")]
        if enough:
            ax_rate.plot([int(p["workers"]) for p in enough],
                         [float(p["images_per_s"]) for p in enough], marker="*", ms=17,
                         color=color, markeredgecolor="black", linestyle="none",
                         label=f"{fam}: more workers stop paying off")
    all_w = sorted({int(p["workers"]) for p in points})
    for ax in (ax_rate, ax_cpu):
        ax.set_xticks(all_w)
        ax.set_xlabel("workers")
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncols=2, fontsize=8.5)
    ax_rate.set_ylabel("images per second")
    ax_rate.set_title("Throughput vs workers")
    ax_rate.set_ylim(bottom=0)
    ax_cpu.set_ylabel("CPU ms per image (process + workers)")
    ax_cpu.set_title("CPU cost per image vs workers")
    ax_cpu.set_ylim(bottom=0)
    return _svg(fig, "sweep")


# -- sections ----------------------------------------------------------------------------------


def _best(points: Sequence[Mapping[str, Any]], pipeline: str) -> Optional[Mapping[str, Any]]:
    pts = [p for p in points if p["pipeline"] == pipeline]
    return max(pts, key=lambda p: float(p["images_per_s"])) if pts else None


def _overview(summaries: Sequence[PipelineSummary], order: Sequence[str],
              cpu_measured: Mapping[str, float],
              sweep: Optional[Sequence[Mapping[str, Any]]]) -> str:
    fams = _families(summaries, cpu_measured)
    cards = []
    pair = _baseline_and_other(fams)
    tv_best = _best(sweep or [], "torchvision")
    nat_best = _best(sweep or [], "native")
    if tv_best and nat_best and float(tv_best["images_per_s"]) > 0:
        # A sweep: compare each pipeline at its best worker count.
        a, b = float(nat_best["images_per_s"]), float(tv_best["images_per_s"])
        cards.append(
            '<div class="card hero"><div class="k">speedup, each at its best</div>'
            f'<div class="v">{a / b:.2f}×</div>'
            f'<div class="d">native {a:,.0f} img/s with {_workers(nat_best["workers"])} vs '
            f'torchvision {b:,.0f} img/s with {_workers(tv_best["workers"])}</div></div>'
        )
    elif pair:
        tv, nat = pair
        speed = nat.images_per_s / tv.images_per_s if tv.images_per_s else None
        cpu_ratio = (
            tv.cpu_ms_per_image / nat.cpu_ms_per_image
            if tv.cpu_ms_per_image and nat.cpu_ms_per_image
            else None
        )
        cards.append(
            '<div class="card hero"><div class="k">speedup</div>'
            f'<div class="v">{_num(speed, 2)}×</div>'
            f'<div class="d">{_e(nat.name)} {nat.images_per_s:,.0f} img/s vs {_e(tv.name)} '
            f"{tv.images_per_s:,.0f} img/s"
            + (f"; {_num(cpu_ratio, 2)}× less CPU per image" if cpu_ratio else "")
            + "</div></div>"
        )
    for s in summaries:
        label = s.label
        lat = s.batch_latency
        cpu, source = _cpu_per_image(s, cpu_measured)
        cards.append(
            f'<div class="card" style="border-top-color:{_pipeline_color(label, order)}">'
            f'<div class="k">{_e(label)}</div>'
            f'<div class="v">{s.images_per_s:,.0f} <small>img/s</small></div>'
            '<div class="d">'
            f'{_workers(s.num_workers)} · batch {_e(s.batch_size)} · '
            f'{_e(s.images)} images in {s.wall_ns / 1e9:.2f} s<br>'
            f'consumer waiting <b>{_pct(s.consumer_wait_share)}</b> of the time<br>'
            f'CPU per image {_ms(_opt_mul(cpu, 1e9))} ms'
            f' <span class="muted">({_e(source)})</span><br>'
            f'worker time per image {_ms(_opt_mul(s.worker_seconds_per_image, 1e9))} ms'
            ' <span class="muted">(inside spans, running or waiting for a core)</span><br>'
            f'batch latency {_ms(lat.mean_ns if lat else None)} ms ± '
            f'{_ms(lat.std_ns if lat else None)}<br>'
            f'bottleneck: <b>{_e(_stage_title(stage_of(s.bottleneck or "–")))}</b>'
            "</div></div>"
        )
    return f'<div class="cards">{"".join(cards)}</div>'


def ratio(a: float, b: float) -> str:
    """``a / b`` as ``"3.2×"``; ``"–"`` when either is missing, ``">100×"`` beyond that (an op
    that costs next to nothing on one side makes a big ratio that says nothing more)."""
    if a <= 0 or b <= 0:
        return "–"
    r = a / b
    return ">100×" if r >= 100 else f"{r:.1f}×"


def _workers(n: object) -> str:
    return "1 worker" if n == 1 else f"{_e(n)} workers"


def _opt_mul(x: Optional[float], k: float) -> Optional[float]:
    return None if x is None else float(x) * k


def _ops_section(summaries: Sequence[PipelineSummary], order: Sequence[str]) -> str:
    parts = [
        _figure(
            "fig-ops-total",
            _plot_ops_total(summaries),
            "Worker time per image, split by op. Self time: a parent span's time excludes its "
            "children. Worker time adds up over workers, so it is a CPU cost, not wall time "
            "(wall time per image is 1 / throughput).",
        ),
        _figure("fig-ops", _plot_ops(summaries, order),
                "The same, op by op: which op a faster pipeline wins on."),
    ]
    times = [stage_times(s) for s in summaries]
    labels = [s.label for s in summaries]
    keys = _stage_keys(times)
    op_names: Dict[str, Dict[str, List[str]]] = {}
    for s in summaries:
        for o in (*s.ops, *s.consumer_ops):
            op_names.setdefault(s.label, {}).setdefault(stage_of(o.op), []).append(o.op)
    pair = _baseline_and_other(_families(summaries, {}))
    rows: List[List[str]] = []
    for k in keys:
        st = next((x for x in STAGES if x.key == k), None)
        row = [f"<b>{_e(_stage_title(k))}</b>" + (f'<br><span class="muted">{_e(st.note)}</span>'
                                                  if st and st.note else "")]
        for label, t in zip(labels, times):
            names = sorted(set(op_names.get(label, {}).get(k, [])), key=natural)
            row.append(
                (f"{_ms(t[k], 3)}" if k in t else "–")
                + (f'<br><code>{_e(", ".join(names))}</code>' if names else "")
            )
        rows.append(row)
    total_row = ["<b>crop → normalize, all ops together</b>"]
    for t in times:
        total_row.append(f"<b>{_ms(sum(t.get(k, 0.0) for k in _TRANSFORM_STAGES), 3)}</b>")
    rows.append(total_row)
    all_row = ["<b>all ops</b>"] + [f"<b>{_ms(sum(t.values()), 3)}</b>" for t in times]
    rows.append(all_row)
    headers = ["stage (op names recorded)"] + [f"{x} (ms/image)" for x in labels]
    if pair and len(summaries) == 2 and labels == ["torchvision", "native"]:
        headers.append("torchvision / native")
        t_tv, t_nat = times
        for row, k in zip(rows, [*keys, "__transforms", "__all"]):
            if k == "__transforms":
                a = sum(t_tv.get(x, 0.0) for x in _TRANSFORM_STAGES)
                b = sum(t_nat.get(x, 0.0) for x in _TRANSFORM_STAGES)
            elif k == "__all":
                a, b = sum(t_tv.values()), sum(t_nat.values())
            else:
                a, b = t_tv.get(k, 0.0), t_nat.get(k, 0.0)
            row.append(ratio(a, b))
    views = [view_times(s) for s in summaries]
    if any(views):
        names = sorted({k for v in views for k in v}, key=natural)
        view_headers = ["view"] + [f"{x} (ms/image)" for x in labels]
        view_rows = [[k] + [_ms(v[k], 3) if k in v else "–" for v in views] for k in names]
        if pair and len(summaries) == 2 and labels == ["torchvision", "native"]:
            view_headers.append("torchvision / native")
            for row, k in zip(view_rows, names):
                row.append(ratio(views[0].get(k, 0.0), views[1].get(k, 0.0)))
        parts.append("<h3>Views</h3>")
        parts.append(
            "<p>The transform returns several views of each image: each view's span "
            "(<code>view0</code>, <code>view1</code>...) with the ops nested in it, per image. "
            "The ops above count each op over all views; throughput counts images, not "
            "views.</p>"
        )
        parts.append(_table(view_headers, view_rows))
    parts.append("<h3>Op names side by side</h3>")
    parts.append(
        "<p>torchvision records one span per transform, by class name; the native loader "
        "records its own op names. With the fused kernel, one <code>fused</code> span does "
        "the crop, resize, flip, to-tensor and normalize in a single pass over the pixels, so "
        "compare the <i>crop → normalize</i> totals.</p>"
    )
    parts.append(_table(headers, rows, cls="ops-map", raw=True))
    parts.append("<details><summary>Every op of every pipeline (count, percentiles)</summary>")
    for s in summaries:
        images = max(1, s.images)
        op_rows: List[List[object]] = []
        for o, where in [(o, "") for o in s.ops] + [(o, " (consumer)") for o in s.consumer_ops]:
            op_rows.append([
                f"{o.op}{where}", o.count, _us(o.mean_ns), _us(o.p50_ns),
                _us(o.p90_ns), _us(o.p99_ns), _us(o.max_ns),
                _ms(o.self_ns / images, 3), _pct(o.share),
            ])
        parts.append(f"<h4>{_e(s.label)}</h4>")
        parts.append(_table(
            ["op", "spans", "mean µs", "p50 µs", "p90 µs", "p99 µs", "max µs",
             "self ms/image", "share of busy"],
            op_rows,
        ))
    parts.append("</details>")
    return "".join(parts)


def _throughput_section(summaries: Sequence[PipelineSummary], order: Sequence[str],
                        config: Mapping[str, str]) -> str:
    step = config.get("step ms")
    intro = (
        f"<p>The consumer simulated a training step of {_e(step)} ms per batch; the time it "
        "spent blocked in <code>next()</code> is the time a GPU would sit idle waiting for "
        "data.</p>"
        if step and step not in ("0", "0.0")
        else "<p>The consumer did no work between batches (no <code>--step-ms</code>), so it "
        "waits almost all the time and throughput is the loader's own ceiling. Run with "
        "<code>--step-ms</code> to see how much of a training step the GPU would idle.</p>"
    )
    rows = []
    for s in summaries:
        b = s.wait_buckets
        rows.append([
            s.label, f"{s.images_per_s:,.1f}", _ms(float(s.consumer_wait_ns)),
            _pct(s.consumer_wait_share), _pct(b.near_zero, 0),
            _pct(b.under_1ms, 0), _pct(b.over_1ms, 0),
            _pct(b.over_500ms, 0), _pct(s.out_of_order_share, 0),
        ])
    table = _table(
        ["pipeline", "images/s", "wait ms (total)", "wait share", "batches ready (≈0)",
         "< 1 ms", "≥ 1 ms", "≥ 500 ms", "out of order"],
        rows,
    )
    fig = _figure("fig-throughput", _plot_throughput(summaries, order),
                  "Throughput over the whole run, and the share of the consumer's time spent "
                  "blocked waiting for the next batch.")
    return intro + fig + table


def _latency_section(pipelines: Sequence[Pipeline],
                     summaries: Sequence[PipelineSummary], order: Sequence[str]) -> str:
    svg = _plot_latency(pipelines, order)
    if svg is None:
        return "<p>No batch events were recorded.</p>"
    rows = []
    for s in summaries:
        lat = s.batch_latency
        rows.append([
            s.label, s.batches, _ms(lat.mean_ns if lat else None),
            _ms(lat.std_ns if lat else None), _num(lat.cv if lat else None, 2),
            _ms(lat.min_ns if lat else None), _ms(lat.max_ns if lat else None),
            _ms(s.batch_delay_mean_ns),
        ])
    return _figure(
        "fig-latency", svg,
        "Each point is one batch. Latency: from its first sample starting to its last sample "
        "finishing. A loader that works on one sample at a time across all workers keeps it "
        "short and even; a loader that gives each worker a whole batch makes it long.",
    ) + _table(
        ["pipeline", "batches", "mean ms", "std ms", "CV", "min ms", "max ms",
         "complete → delivered ms"],
        rows,
    )


def _timeline_section(pipelines: Sequence[Pipeline]) -> str:
    svg = _plot_timeline(pipelines)
    if svg is None:
        return "<p>No spans were recorded.</p>"
    more = len([p for p in pipelines if p.spans]) - 4
    note = f" {more} more pipelines are in trace.json." if more > 0 else ""
    return _figure(
        "fig-timeline", svg,
        "What each worker did, when. Nested spans are drawn inside their parent (thinner). "
        "Red on the consumer row: time blocked waiting for a batch. For a zoomable view of "
        "every span, open <code>trace.json</code> in Perfetto (ui.perfetto.dev) or "
        f"chrome://tracing.{_e(note)}",
    )


_COUNTER_COLUMNS: Tuple[Tuple[str, str, Callable[[float], str]], ...] = (
    ("task_clock_ns_per_op", "task-clock µs/op", lambda v: f"{v / 1e3:,.1f}"),
    ("cpu_utilization", "on CPU", lambda v: f"{v * 100:.0f}%"),
    ("page_faults_per_op", "page faults/op", lambda v: f"{v:,.2f}"),
    ("ipc", "IPC", lambda v: f"{v:.2f}"),
    ("cache_miss_rate", "cache miss", lambda v: f"{v * 100:.1f}%"),
    ("mpki", "MPKI", lambda v: f"{v:.2f}"),
    ("branch_miss_rate", "branch miss", lambda v: f"{v * 100:.2f}%"),
)


def _availability(p: Pipeline) -> str:
    c = p.counters
    mode = p.mode
    out = []
    if mode != "counters":
        return (
            f"<ul><li>Counters were not recorded: this run used profile mode "
            f"<code>{_e(mode)}</code>. Run with <code>--counters</code> "
            "(<code>profile=\"counters\"</code>) to read them per op.</li></ul>"
        )
    for group, g in (("hardware", c.hardware), ("software", c.software)):
        have = [e.counter for e in g.events if e.available]
        missing = [e for e in g.events if not e.available]
        text = f"<b>{group}</b>: "
        if have:
            text += "counted: " + ", ".join(f"<code>{_e(h)}</code>" for h in have)
            if g.exclude_kernel:
                text += " (kernel side excluded, so context switches read 0)"
            if missing:
                text += "; missing: " + ", ".join(f"<code>{_e(e.counter)}</code>" for e in missing)
        elif mode == "counters" or g.reason:
            text += "not available"
        else:
            continue
        reasons = sorted({e.reason for e in missing if e.reason})
        if g.reason:
            reasons = [g.reason] + [r for r in reasons if r != g.reason]
        if reasons and mode == "counters":
            text += " — " + "; ".join(_e(r) for r in reasons[:2])
        out.append(f"<li>{text}</li>")
    if c.perf_event_paranoid is not None:
        out.append(f"<li><code>perf_event_paranoid</code> = {_e(c.perf_event_paranoid)}</li>")
    return "<ul>" + "".join(out) + "</ul>"


def _io_section(pipelines: Sequence[Pipeline], summaries: Sequence[PipelineSummary],
                order: Sequence[str]) -> str:
    """Storage requests (spans of worker ``IO``: whole-shard reads) against the workers' decode
    time, per pipeline that made any; empty when none did (a folder is read inside ``read``)."""
    rows = []
    for p, s in zip(pipelines, summaries):
        requests = [sp for sp in p.spans if sp.worker == IO]
        if not requests:
            continue
        decode_ns = sum(o.total_ns for o in s.ops if o.op == "decode")
        io_ns = sum(sp.end_ns - sp.start_ns for sp in requests)
        mb = s.io_bytes / 1e6
        rows.append((
            p.label, len(requests), _num(mb, 1), _ms(io_ns / len(requests), 1),
            _num(mb / (io_ns / 1e9), 1) if io_ns else "n/a",
            _num(s.io_seconds, 2), _num(decode_ns / 1e9, 2),
            _num(s.io_seconds / (decode_ns / 1e9), 2) if decode_ns else "n/a",
        ))
    if not rows:
        return ""
    rows.sort(key=lambda r: order.index(str(r[0])) if r[0] in order else len(order))
    return (
        "<p>Each request reads a whole shard ahead of the workers; requests overlap one another "
        "and the decoding, so their summed time is an upper bound on what storage costs the "
        "run. Storage is the bottleneck when the workers wait in <code>read</code> (see the "
        "per-op table), not merely when I/O time exceeds decode time.</p>"
        + _table(["pipeline", "requests", "MB read", "ms per request", "MB/s per request",
                  "I/O s (summed)", "decode s", "I/O / decode"], rows)
    )


def _counters_section(pipelines: Sequence[Pipeline],
                      summaries: Sequence[PipelineSummary], order: Sequence[str]) -> str:
    parts = [
        "<p>Counters are read per op on each worker thread (Linux <code>perf_event_open</code>). "
        "Hardware counters (cycles, instructions, cache and branch misses) need a CPU "
        "performance monitoring unit that the kernel exposes: most virtual machines and "
        "containers expose none, and then only the kernel's software counters (task-clock, "
        "page faults, context switches) are there.</p>"
    ]
    svg = _plot_counters(summaries, order)
    if svg is not None:
        parts.append(_figure(
            "fig-counters", svg,
            "Thin bars: CPU time the op's thread actually ran (task-clock). Wide pale bars: the "
            "span's wall time. Where the wide bar is longer, the op waited off CPU (reading a "
            "file, preempted by another thread).",
        ))
    for p, s in zip(pipelines, summaries):
        parts.append(f"<h4>{_e(p.label)}</h4>")
        parts.append(_availability(p))
        ops = (*s.ops, *s.consumer_ops)
        cols = [c for c in _COUNTER_COLUMNS
                if any(getattr(o.derived, c[0]) is not None for o in ops)]
        if cols:
            rows = []
            for o in ops:
                values: List[Optional[float]] = [getattr(o.derived, key) for key, _, _ in cols]
                rows.append([o.op] + [
                    fmt(v) if v is not None else "–" for v, (_, _, fmt) in zip(values, cols)
                ])
            parts.append(_table(["op"] + [title for _, title, _ in cols], rows))
    return "".join(parts)


def _sweep_section(points: Sequence[Mapping[str, Any]], order: Sequence[str]) -> str:
    rows = []
    for p in sorted(points, key=lambda p: (str(p["pipeline"]), int(p["workers"]))):
        rows.append([
            p["pipeline"], p["workers"], f"{float(p['images_per_s']):,.1f}",
            _ms(_opt_mul(p.get("cpu_s_per_image"), 1e9), 2),
            _pct(p.get("gain")) if p.get("gain") is not None else "–",
            "★ enough" if p.get("enough") else "",
        ])
    return _figure(
        "fig-sweep", _plot_sweep(points, order),
        "Throughput and CPU seconds per image (the process and its worker processes, from the "
        "OS's resource usage) against the number of workers. The star marks the worker count "
        "after which one more step gains less than 10%.",
    ) + _table(
        ["pipeline", "workers", "images/s", "CPU ms/image", "gain over previous", ""], rows,
        numeric_from=1,
    )


def profile_warnings(profile: Profile, cpu_per_image: Optional[Mapping[str, float]] = None,
                     *, summary: Optional[Summary] = None) -> List[str]:
    """:func:`run_warnings` of a whole profile, for a command line to print what the report
    shows (``summary``: its summary when the caller has it already)."""
    if summary is None:
        summary = profile.summary()
    by_label = {s.label: s for s in summary.pipelines}
    pipelines = [p for p in profile.pipelines if p.label in by_label]
    return run_warnings(pipelines, [by_label[p.label] for p in pipelines],
                        dict(cpu_per_image or {}))


def _health(pipelines: Sequence[Pipeline], summaries: Sequence[PipelineSummary],
            warnings: Sequence[str]) -> str:
    notes = [_e(w) for w in warnings]
    for p, s in zip(pipelines, summaries):
        st = p.stats
        for count, what in (
            (st.dropped_spans, "spans were dropped (the recorder was full or nesting too deep)"),
            (st.unbalanced_exits, "span exits had no matching enter"),
            (st.counter_read_errors, "counter reads failed"),
            (st.unflushed_recorders, "recorders had not flushed when the profile was taken"),
        ):
            if count:
                notes.append(f"{_e(p.label)}: {_e(count)} {what}.")
        if s.failures:
            notes.append(f"{_e(p.label)}: {_e(s.failures)} samples failed or were skipped.")
    if not notes:
        return '<p class="ok">Recorder health: nothing dropped, no failed samples.</p>'
    return '<ul class="warn" id="warnings">' + "".join(f"<li>{n}</li>" for n in notes) + "</ul>"


_CSS = """
:root { --fg:#1f2328; --muted:#59636e; --line:#d1d9e0; --bg:#ffffff; --panel:#f6f8fa;
        --accent:#1a73e8; }
* { box-sizing: border-box; }
body { margin:0; color:var(--fg); background:var(--bg);
       font: 15px/1.5 system-ui, -apple-system, "Segoe UI", "DejaVu Sans", "Liberation Sans",
             Arial, sans-serif; }
header { background:#0f2a4a; color:#fff; padding:22px 32px 16px; }
header h1 { margin:0 0 4px; font-size:24px; font-weight:650; }
header .sub { color:#c9d7ea; font-size:13.5px; }
header code { color:#fff; background:rgba(255,255,255,.12); }
nav { position:sticky; top:0; z-index:2; background:#fff; border-bottom:1px solid var(--line);
      padding:8px 32px; font-size:14px; display:flex; flex-wrap:wrap; gap:2px 18px; }
nav a { color:var(--accent); text-decoration:none; white-space:nowrap; }
main { max-width:1180px; margin:0 auto; padding:8px 32px 48px; }
section { margin-top:30px; }
h2 { font-size:20px; border-bottom:2px solid var(--line); padding-bottom:4px; margin:0 0 10px; }
h3 { font-size:16px; margin:22px 0 6px; }
h4 { font-size:15px; margin:18px 0 6px; }
p { margin:6px 0 10px; max-width:95ch; }
code { font: 12.5px/1.3 ui-monospace, "DejaVu Sans Mono", "Liberation Mono", monospace;
       background:var(--panel); padding:1px 4px; border-radius:4px; }
.muted { color:var(--muted); font-size:12.5px; }
.cards { display:grid; grid-template-columns:repeat(auto-fit, minmax(250px, 1fr)); gap:14px;
         margin:14px 0; }
.card { border:1px solid var(--line); border-top:5px solid #5f6368; border-radius:8px;
        padding:12px 16px; background:#fff; }
.card .k { font-weight:650; color:var(--muted); text-transform:uppercase; font-size:12.5px;
           letter-spacing:.04em; }
.card .v { font-size:30px; font-weight:700; line-height:1.2; margin:2px 0 6px; }
.card .v small { font-size:15px; font-weight:500; color:var(--muted); }
.card .d { font-size:13.5px; color:#30363d; }
.card.hero { background:#e8f0fe; border-color:#aecbfa; border-top-color:var(--accent); }
.card.hero .v { color:#174ea6; font-size:40px; }
figure.plot { margin:12px 0 18px; padding:10px 12px 6px; border:1px solid var(--line);
              border-radius:8px; background:#fff; }
figure.plot svg { display:block; width:100%; height:auto; }
figcaption { color:var(--muted); font-size:13px; padding:6px 4px 4px; }
table { border-collapse:collapse; margin:8px 0 14px; font-size:13.5px; width:auto;
        max-width:100%; }
th, td { border-bottom:1px solid var(--line); padding:5px 10px; text-align:left;
         vertical-align:top; }
th { background:var(--panel); font-weight:600; }
td.num, th.num { text-align:right; font-variant-numeric:tabular-nums; }
tbody tr:nth-child(even) td { background:#fbfcfd; }
table.ops-map td code { font-size:11.5px; color:var(--muted); background:none; padding:0; }
dl.config { display:grid; grid-template-columns:max-content 1fr; gap:2px 16px; margin:8px 0;
            font-size:13.5px; }
dl.config dt { color:var(--muted); }
dl.config dd { margin:0; }
details { margin:10px 0; }
details summary { cursor:pointer; color:var(--accent); }
ul { margin:6px 0 10px; padding-left:22px; }
.ok { color:#188038; }
ul.warn { color:#b3261e; }
.files li code { font-weight:600; }
footer { color:var(--muted); font-size:12.5px; border-top:1px solid var(--line); margin-top:40px;
         padding-top:10px; }
"""


def _render(
    profile: Profile,
    summary: Summary,
    *,
    title: str,
    command: Optional[str],
    config: Mapping[str, str],
    sweep: Optional[Sequence[Mapping[str, Any]]],
    files: Sequence[Tuple[str, str]],
    cpu_per_image: Mapping[str, float],
) -> str:
    pipelines: List[Pipeline] = list(profile.pipelines)
    by_label = {s.label: s for s in summary.pipelines}
    summaries = [by_label[p.label] for p in pipelines if p.label in by_label]
    order = [p.label for p in pipelines]
    now = _dt.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    machine = f"{platform.node()} · {platform.machine()} · {os.cpu_count()} CPUs · {platform.system()}"
    sub = [f"{_e(now)} · {_e(machine)}"]
    if command:
        sub.append(f"<code>{_e(command)}</code>")
    sections: List[Tuple[str, str, str]] = []
    # Pipelines recorded with profiling off have nothing to plot; the overview says so.
    recorded = [(p, s) for p, s in zip(pipelines, summaries) if _recorded(p, s)]
    if summaries and not recorded:
        warnings = run_warnings(pipelines, summaries, cpu_per_image)
        sections.append(("overview", "Overview", _config_list(config)
                         + _health(pipelines, summaries, warnings)))
    elif summaries:
        warnings = run_warnings(pipelines, summaries, cpu_per_image)
        pipelines = [p for p, _ in recorded]
        summaries = [s for _, s in recorded]
        order = [p.label for p in pipelines]
        sections.append(("overview", "Overview", _overview(summaries, order, cpu_per_image, sweep)
                         + _config_list(config) + _health(pipelines, summaries, warnings)))
        sections.append(("ops", "Where the time goes, per op", _ops_section(summaries, order)))
        sections.append(("throughput", "Throughput and waiting for data",
                         _throughput_section(summaries, order, config)))
        sections.append(("latency", "Batch latency over time",
                         _latency_section(pipelines, summaries, order)))
        sections.append(("timeline", "Worker timeline", _timeline_section(pipelines)))
        io_html = _io_section(pipelines, summaries, order)
        if io_html:
            sections.append(("io", "Storage I/O against decode", io_html))
        sections.append(("counters", "CPU counters per op",
                         _counters_section(pipelines, summaries, order)))
    else:
        sections.append(("overview", "Overview", "<p>This profile has no pipelines.</p>"))
    if sweep:
        sections.insert(1, ("sweep", "Scaling with workers", _sweep_section(sweep, order)))
    if files:
        items = "".join(f"<li><code>{_e(n)}</code>: {_e(d)}</li>" for n, d in files)
        sections.append(("files", "Files of this report", f'<ul class="files">{items}</ul>'))
    footer = (
        f"<footer>Written by ferroloader's report module (profile schema "
        f"{_e(PROFILE_SCHEMA)} v{_e(PROFILE_SCHEMA_VERSION)}; times on "
        "CLOCK_MONOTONIC). Absolute times wander between runs "
        "on shared machines; compare pipelines within one report.</footer>"
    )
    return _page(title, "<br>".join(sub), sections, footer)


def _config_list(config: Mapping[str, str]) -> str:
    if not config:
        return ""
    items = "".join(f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in config.items())
    return f'<dl class="config">{items}</dl>'


# -- public API --------------------------------------------------------------------------------


def write_html(
    profile: Union[Profile, Mapping[str, Any]],
    path: StrPath,
    *,
    summary: Optional[Summary] = None,
    title: Optional[str] = None,
    command: Optional[str] = None,
    config: Optional[Mapping[str, str]] = None,
    sweep: Optional[Sequence[Mapping[str, Any]]] = None,
    files: Sequence[Tuple[str, str]] = (),
    cpu_per_image: Optional[Mapping[str, float]] = None,
) -> None:
    """Writes the self-contained HTML report of ``profile`` to ``path``.

    ``profile`` is a ``ferroloader.Profile`` (or its ``to_dict()``), with one pipeline or
    several. Optional extras: ``summary`` (its ``Summary``, computed from the profile when
    absent), ``title``, the ``command`` line that made it, a
    ``config`` shown as a list (``{"batch size": "64"}``), ``sweep`` points (dicts with
    ``pipeline``, ``workers``, ``images_per_s``, ``cpu_s_per_image``, ``gain``, ``enough``)
    the report folder's ``files`` as ``(name, description)``, and ``cpu_per_image``: CPU
    seconds per image by pipeline label as the OS counted them (shown instead of the
    summary's figure, which only sees time inside spans unless task-clock was counted).
    """
    if isinstance(profile, Mapping):
        profile = Profile.from_dict(profile)
    if summary is None:
        summary = profile.summary()
    labels = [p.label for p in profile.pipelines]
    if title is None:
        title = "ferroloader: " + (" vs ".join(labels) if labels else "empty profile")
    page = _render(
        profile, summary, title=title, command=command, config=dict(config or {}), sweep=sweep,
        files=files, cpu_per_image=dict(cpu_per_image or {}),
    )
    Path(path).write_text(page, encoding="utf-8")


@dataclass(frozen=True)
class ReportFiles:
    """Paths of a written report folder."""

    folder: Path
    html: Path
    trace: Path
    profile: Path
    summary_json: Path
    summary_csv: Path


def write_report(
    profile: Profile,
    folder: StrPath,
    *,
    title: Optional[str] = None,
    command: Optional[str] = None,
    config: Optional[Mapping[str, str]] = None,
    sweep: Optional[Sequence[Mapping[str, Any]]] = None,
    extra_files: Sequence[Tuple[str, str]] = (),
    cpu_per_image: Optional[Mapping[str, float]] = None,
) -> ReportFiles:
    """Writes the report folder: ``report.html``, ``trace.json``, ``profile.json``,
    ``summary.json`` and ``summary.csv`` (plus whatever the caller lists in ``extra_files``
    and wrote itself)."""
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    files = ReportFiles(
        folder=out,
        html=out / "report.html",
        trace=out / "trace.json",
        profile=out / "profile.json",
        summary_json=out / "summary.json",
        summary_csv=out / "summary.csv",
    )
    summary = profile.summary()
    profile.save(files.profile)
    profile.save_trace(files.trace)
    summary.save_json(files.summary_json)
    summary.save_csv(files.summary_csv)
    listed = [
        ("report.html", "this page"),
        ("trace.json", "every span of every pipeline on one timeline: open it in Perfetto "
         "(ui.perfetto.dev) or chrome://tracing"),
        ("profile.json", "the raw profile (ferroloader.Profile.load reads it back)"),
        ("summary.json", "per-pipeline and per-op figures"),
        ("summary.csv", "one row per pipeline and op"),
        *extra_files,
    ]
    write_html(
        profile, files.html, summary=summary, title=title, command=command,
        config=config, sweep=sweep, files=listed, cpu_per_image=cpu_per_image,
    )
    return files


def html_table(headers: Sequence[str], rows: Iterable[Sequence[object]], *,
               numeric_from: int = 1, raw: bool = False) -> str:
    """An HTML table in this page's style (cells escaped unless ``raw``), for other pages."""
    return _table(headers, rows, numeric_from=numeric_from, raw=raw)


def html_page(title: str, sections: Sequence[Tuple[str, str, str]], *, subtitle: str = "") -> str:
    """A self-contained page in this report's style: ``sections`` are ``(id, heading, html)``,
    in order, each a ``<section id=...>`` linked from the navigation bar."""
    now = _dt.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    return _page(title, _e(f"{now} · {subtitle}" if subtitle else now), sections)


def _page(title: str, sub_html: str, sections: Sequence[Tuple[str, str, str]],
          footer_html: str = "") -> str:
    """The self-contained page every report is: a header, a navigation bar linking each
    ``(id, heading, html)`` section, the sections, an optional footer."""
    nav = "\n".join(f'<a href="#{k}">{_e(t)}</a>' for k, t, _ in sections)
    body = "".join(f'<section id="{k}"><h2>{_e(t)}</h2>{c}</section>' for k, t, c in sections)
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        # The page fetches nothing: forbid it outright, so a stray reference cannot leak out.
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
        "style-src 'unsafe-inline'; img-src data:\">"
        f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>"
        f'<header><h1>{_e(title)}</h1><div class="sub">{sub_html}</div></header>'
        f"<nav>{nav}</nav><main>{body}{footer_html}</main></body></html>\n"
    )
