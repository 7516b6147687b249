"""The ``ferroloader`` command line (also ``python -m ferroloader``).

``compare`` profiles the torchvision DataLoader pipeline and ferroloader's on the same data
and writes a report folder; ``profile`` runs the native pipeline alone; ``sweep`` measures both
against the number of workers; ``demo`` does ``compare`` on a generated sample data set;
``sample-data`` writes that data set; ``report`` renders a saved profile again; ``prepare``
re-encodes an ImageFolder at a shorter side, once; ``shard`` writes a dataset as tar shards
for streaming; ``advise`` measures where the input
pipeline's time goes and says what to do.

Options are parsed by click, progress and tables drawn by rich. Progress goes to stderr, the
summary tables and the report's location to stdout. The runs themselves are in
``ferroloader.cli.compare``, the report in ``ferroloader.cli.report``; this module only wires
them up.
"""

from __future__ import annotations

import importlib
import os
import platform
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Mapping, Optional, Sequence, TypeVar

import click
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from ferroloader import __version__
from ferroloader.profiling import Summary
from ferroloader.recipes import RECIPES

__all__ = ["main"]

F = TypeVar("F", bound=Callable[..., Any])

_CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


def _stdout() -> Console:
    console = Console(highlight=False)
    if not console.is_terminal:
        # Piped or captured: a fixed width, so tables do not wrap at 80 columns.
        console = Console(highlight=False, width=120)
    return console


def _stderr() -> Console:
    return Console(stderr=True, highlight=False)


class _Bars:
    """Rich progress bars, one per run, fed by ``compare``'s progress callback."""

    def __init__(self, quiet: bool) -> None:
        self._progress = Progress(
            SpinnerColumn(),
            TextColumn("[bold]{task.description:<24}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[unit]}"),
            TimeElapsedColumn(),
            console=_stderr(),
            disable=quiet,
        )
        self._tasks: Dict[str, TaskID] = {}

    def __enter__(self) -> "_Bars":
        self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.stop()

    def batch(self, label: str, done: int, total: int) -> None:
        """``compare``'s progress callback."""
        task = self._tasks.get(label)
        if task is None:
            task = self._tasks[label] = self._progress.add_task(label, total=total, unit="batches")
        self._progress.update(task, completed=done)

    def files(self, description: str, unit: str = "images") -> Callable[[int, int], None]:
        """A progress callback for ``sample_data``; the bar appears with the first file (none
        when the data is already cached). ``unit`` names what is counted."""

        def update(done: int, total: int) -> None:
            task = self._tasks.get(description)
            if task is None:
                task = self._tasks[description] = self._progress.add_task(
                    description, total=total, unit=unit
                )
            self._progress.update(task, completed=done, total=total)

        return update


def _int_list(ctx: click.Context, param: click.Parameter, value: str) -> List[int]:
    """Parses a comma-separated list of positive integers (``1,2,4``), sorted, no repeats."""
    try:
        items = sorted({int(v) for v in value.split(",") if v.strip()})
    except ValueError:
        raise click.BadParameter(f"expected comma-separated integers, got {value!r}") from None
    if not items or items[0] < 1:
        raise click.BadParameter(f"expected positive integers, got {value!r}")
    return items


def _cpus() -> int:
    from ferroloader.cli.compare import _default_workers

    return _default_workers()


def _run_options(*, workers: bool = True, out: str = "report", timm: bool = False) -> Callable[[F], F]:
    """The options every run command shares (``--timm`` where ``timm``)."""

    def decorate(f: F) -> F:
        options = [
            click.option("--batch-size", "-b", type=click.IntRange(min=1), default=64,
                         show_default=True, help="Samples per batch."),
            click.option("--batches", "-n", type=click.IntRange(min=1), default=50,
                         show_default=True,
                         help="Batches per pipeline per round (epochs repeat on a small "
                         "data set)."),
            click.option("--decoder", type=click.Choice(["turbo", "zune"]), default="turbo",
                         show_default=True,
                         help="Native JPEG decoder: libjpeg-turbo (Pillow's pixels exactly) "
                         "or zune-jpeg (pure Rust)."),
            click.option("--output", type=click.Choice(["float32", "uint8"]), default="float32",
                         show_default=True,
                         help="float32: ToTensor + Normalize; uint8: PILToTensor, normalize "
                         "on the GPU (both pipelines). With --recipe or --transform: what the "
                         "transform yields."),
            click.option("--step-ms", type=click.FloatRange(min=0), default=0.0,
                         show_default=True,
                         help="Simulated training step: the consumer sleeps this long after "
                         "each batch; the report then shows how long it waits for data (the "
                         "GPU idle share)."),
            click.option("--step-busy", is_flag=True,
                         help="Spin on the CPU during the step instead of sleeping (a CPU-bound "
                         "training loop competing with the loader)."),
            click.option("--rounds", type=click.IntRange(min=1), default=1, show_default=True,
                         help="Run each pipeline this many times, alternating which goes first."),
            click.option("--counters", is_flag=True,
                         help="Also read CPU counters per op (profile mode 'counters'; "
                         "software counters only where the machine exposes no PMU)."),
            click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True,
                         help="Shuffle and augmentation seed."),
            click.option("--on-error", type=click.Choice(["raise", "skip"]), default="raise",
                         show_default=True,
                         help="A file that fails to load: stop with its name, or leave it "
                         "out (both pipelines)."),
            click.option("--size", type=click.IntRange(min=8), default=224, show_default=True,
                         help="RandomResizedCrop output size (of the default transform, "
                         "of --recipe and of --timm)."),
            click.option("--recipe", type=click.Choice(RECIPES), default=None, metavar="NAME",
                         help="Run a torchvision reference training preset instead of the "
                         "default transform: basic, ta_wide (TrivialAugmentWide), ra "
                         "(RandAugment), augmix, imagenet (AutoAugment); +re adds "
                         "RandomErasing(0.25), e.g. ta_wide+re."),
            click.option("--v2", "use_v2", is_flag=True,
                         help="Build --recipe from torchvision.transforms.v2 (ToImage first)."),
            click.option("--mix", is_flag=True,
                         help="Add torchvision's reference MixUp/CutMix (train.py's "
                         "--mixup-alpha 0.2 --cutmix-alpha 1.0: RandomChoice of the two in "
                         "its collate_fn) to both pipelines."),
            click.option("--transform", "transform_spec", metavar="FILE.py:NAME", default=None,
                         help="Run your own torchvision Compose: NAME in FILE.py, a Compose or "
                         "a function of no arguments returning one. Both pipelines run it; "
                         "its own conversion decides the output dtype. NAME may also return "
                         "several views of each image (MoCo's TwoCropsTransform, DINO's "
                         "multi-crop): both pipelines run it as it is, a view's ops ferroloader "
                         "cannot convert run in Python."),
            click.option("--views", type=click.IntRange(min=1), default=None, metavar="N",
                         help="Wrap the transform (the default, --recipe or --transform) in "
                         "an N-view generator on both sides, as MoCo's TwoCropsTransform "
                         "(N=2) and SimCLR's make views: each batch is N tensors of views. "
                         "images/s counts images, not views. Not with --timm, --mix, or a "
                         "--transform that returns views itself."),
            click.option("--out", "-o", type=click.Path(file_okay=False, path_type=Path),
                         default=Path(out), show_default=True,
                         help="Report folder (created; files in it are replaced)."),
            click.option("--quiet", "-q", is_flag=True, help="No progress bars."),
        ]
        if timm:
            options.insert(-2, click.option(
                "--timm", "timm_aa", metavar="AA", default=None,
                help="Run timm's train.py loaders instead (--aa AA, e.g. "
                "rand-m9-mstd0.5-inc1, --reprob 0.25): timm's create_dataset and "
                "create_loader, profiled per op, against ferroloader.timm.create_loader, on the "
                "CPU, measured below their prefetchers (uint8 batches; the prefetcher's "
                "normalize and erasing, a GPU's work in training, left out on both sides). "
                "With --mix: timm's FastCollateMixup(0.8, 1.0, label_smoothing 0.1). Not with "
                "--recipe, --transform, --v2, --output, --decoder or --on-error."))
        if workers:
            options.insert(1, click.option(
                "--workers", "-w", type=click.IntRange(min=0), default=0,
                help=f"Worker threads (native) and processes (torchvision); 0, the default: "
                f"one per available CPU ({_cpus()} here)."))
        for option in reversed(options):
            f = option(f)
        return f

    return decorate


def _data_argument(f: F) -> F:
    return click.argument(
        "data", type=click.Path(exists=True, file_okay=False, path_type=Path)
    )(f)


class DatasetSpec(str):
    """DATA given as ``FILE.py:NAME``: a training script's own dataset object (or a function
    of no arguments returning one), which holds its transform."""


if TYPE_CHECKING:
    _ParamType = click.ParamType[Any, Any]  # generic from click 8.2; the package takes 8.1
else:
    _ParamType = click.ParamType


class _DataOrDataset(_ParamType):
    """DATA: a folder (an ImageFolder, a saved Hugging Face dataset), or ``FILE.py:NAME``."""

    name = "DATA"

    def convert(self, value: Any, param: Optional[click.Parameter], ctx: Optional[click.Context]) -> Any:
        text = str(value)
        head, colon, name = text.rpartition(":")
        if colon and head.endswith(".py") and name.isidentifier():
            return DatasetSpec(text)
        return click.Path(exists=True, file_okay=False, path_type=Path).convert(value, param, ctx)


def _data_or_dataset_argument(f: F) -> F:
    return click.argument("data", type=_DataOrDataset())(f)


def _own_dataset(spec: DatasetSpec, kwargs: Mapping[str, Any]) -> Dict[str, Any]:
    """The ``RunConfig`` fields of DATA given as ``FILE.py:NAME``: the dataset object, which
    holds its transform (the options that choose one are refused)."""
    from ferroloader import recipes

    chosen = [
        option for option, key in (("--recipe", "recipe"), ("--transform", "transform_spec"),
                                   ("--views", "views"), ("--timm", "timm_aa"))
        if kwargs.get(key) is not None
    ] + [option for option, key in (("--mix", "mix"), ("--v2", "use_v2")) if kwargs.get(key)]
    chosen += [f"--{name}" for name in ("size", "output") if _given(name)]
    if kwargs.get("on_error") == "skip":
        chosen.append("--on-error skip")
    if chosen:
        raise click.UsageError(
            f"{', '.join(chosen)}: DATA {spec} is a dataset of your own, which holds its "
            "transform and runs as it is on both sides"
        )
    try:
        dataset = recipes.load_object(spec)
    except (FileNotFoundError, ImportError, ValueError) as e:
        raise click.BadParameter(str(e), param_hint="'DATA'") from e
    if not hasattr(dataset, "__getitem__") and callable(dataset):
        dataset = dataset()
    if not (hasattr(dataset, "__getitem__") and hasattr(dataset, "__len__")):
        raise click.BadParameter(
            f"{spec} is a {type(dataset).__name__}, not a map-style dataset (nor a function of "
            "no arguments returning one)",
            param_hint="'DATA'",
        )
    return {"dataset": dataset, "python_tail": "allow"}


def _given(name: str) -> bool:
    """Whether option ``name`` was given (on the command line or by the environment), not
    left at its default."""
    source = click.get_current_context().get_parameter_source(name)
    given = (click.core.ParameterSource.COMMANDLINE, click.core.ParameterSource.ENVIRONMENT)
    return source in given


def _chosen_transform(kwargs: Mapping[str, Any], data: Path) -> Dict[str, Any]:
    """The ``RunConfig`` fields for ``--recipe``/``--transform``/``--views`` (none without
    them): the torchvision transform, its name, the output it yields, and its views."""
    from ferroloader import recipes

    recipe, spec = kwargs.get("recipe"), kwargs.get("transform_spec")
    repeat: Optional[int] = kwargs.get("views")
    if recipe is not None and spec is not None:
        raise click.UsageError("--recipe and --transform: give one or the other")
    if kwargs.get("use_v2") and recipe is None:
        raise click.UsageError("--v2 builds a --recipe from transforms.v2; give --recipe")
    if spec is not None:
        if _given("size"):
            raise click.UsageError("--size: a --transform sets its own sizes")
        try:
            transform = recipes.load_transform(spec, views=True)
        except (FileNotFoundError, ImportError, ValueError, TypeError) as e:
            raise click.BadParameter(str(e), param_hint="'--transform'") from e
        name = spec
    elif recipe is not None:
        transform = recipes.recipe(recipe, crop_size=kwargs["size"], use_v2=kwargs["use_v2"])
        name = f"recipe {recipe}" + (" (v2)" if kwargs["use_v2"] else "")
    elif repeat is not None:
        from ferroloader.cli.compare import imagenet_train_transform

        transform = imagenet_train_transform(kwargs["size"], kwargs["output"])
        name = "the ImageNet training transform"
    else:
        return {}
    own_views = recipes.view_transforms(transform)
    fields: Dict[str, Any] = {}
    if own_views is not None:
        if repeat is not None:
            raise click.UsageError(
                f"--views: {name} returns {len(own_views)} views of each image itself; "
                "--views N wraps a transform returning one tensor"
            )
        # The user's own views object, run as it is: a view's Python ops (its own PIL
        # classes, a lambda) run in Python on the native side too, as on the DataLoader's.
        fields = {"views": len(own_views), "python_tail": "allow"}
    elif repeat is not None:
        transform = recipes.RepeatedViews(transform, repeat)
        name = f"{repeat} views of {name}"
        fields = {"views": repeat}
    if fields:
        _refuse_with_views(kwargs, data, name)
    try:
        output = recipes.output_of(transform)
    except ValueError as e:
        raise click.BadParameter(f"{name}: {e}", param_hint="'--transform'") from e
    if _given("output") and kwargs["output"] != output:
        raise click.UsageError(
            f"--output {kwargs['output']}: {name} yields {output} (its own conversion decides)"
        )
    return {"transform": transform, "transform_name": name, "output": output, **fields}


def _refuse_with_views(kwargs: Mapping[str, Any], data: Path, name: str) -> None:
    """Refuses what a transform returning views cannot be compared with."""
    from ferroloader._hfdatasets import saved_dataset

    if kwargs.get("mix"):
        raise click.UsageError(
            f"--mix: the transform ({name}) returns several views of each image, and the "
            "reference's MixUp/CutMix mixes batches of single images"
        )
    if saved_dataset(data):
        raise click.UsageError(
            f"{name}: views need DATA to be an ImageFolder (a saved Hugging Face dataset's "
            "DataLoader collation stacks one tensor per row)"
        )


#: What ``--timm`` decides itself, so cannot be given with it: option name -> why.
_NOT_WITH_TIMM = {
    "recipe": "timm's create_transform makes the transform",
    "transform_spec": "timm's create_transform makes the transform",
    "use_v2": "timm's create_transform makes the transform",
    "output": "timm's loaders yield uint8 batches below their prefetchers",
    "decoder": "ferroloader.timm.create_loader decodes with the default, turbo",
    "on_error": "timm's ImageDataset replaces a bad file by the next one (both sides)",
    "views": "timm's create_transform makes one view of each image",
}


def _timm_fields(kwargs: Mapping[str, Any], data: Path) -> Dict[str, Any]:
    """The ``RunConfig`` fields for ``--timm AA``, after refusing the options it decides."""
    from ferroloader._hfdatasets import saved_dataset

    aa = kwargs["timm_aa"]
    for name, why in _NOT_WITH_TIMM.items():
        if _given(name):
            flag = {"transform_spec": "transform", "use_v2": "v2"}.get(name, name)
            raise click.UsageError(f"--timm and --{flag.replace('_', '-')}: {why}")
    if not aa:
        raise click.BadParameter("expected timm's --aa policy, e.g. rand-m9-mstd0.5-inc1",
                                 param_hint="'--timm'")
    try:
        # timm checks the policy only as it builds the transform, with an assert.
        timm_data: Any = importlib.import_module("timm.data")  # untyped

        timm_data.create_transform((3, kwargs["size"], kwargs["size"]), is_training=True, auto_augment=aa)
    except ImportError as e:
        raise click.UsageError(f"--timm needs timm installed: {e}") from e
    except Exception as e:
        raise click.BadParameter(f"timm refuses the policy {aa!r}: {e}",
                                 param_hint="'--timm'") from e
    if saved_dataset(data):
        raise click.UsageError("--timm: DATA must be an ImageFolder (timm's create_dataset reads "
                               "a folder), not a saved Hugging Face dataset")
    return {"timm": aa, "output": "uint8"}


def _transform_args(kwargs: Mapping[str, Any]) -> List[str]:
    """``--recipe``/``--transform``/``--views`` as given, for the command line that reproduces
    a run."""
    if kwargs.get("timm_aa"):
        return ["--timm", str(kwargs["timm_aa"])]
    views = ["--views", str(kwargs["views"])] if kwargs.get("views") else []
    if kwargs.get("transform_spec"):
        return ["--transform", str(kwargs["transform_spec"]), *views]
    if kwargs.get("recipe"):
        return ["--recipe", str(kwargs["recipe"])] + (["--v2"] if kwargs.get("use_v2") else []) + views
    return views


def _config(kwargs: Mapping[str, Any], data: Path, **override: Any) -> Any:
    from ferroloader.cli.compare import RunConfig

    values = dict(
        data=data,
        batch_size=kwargs["batch_size"],
        workers=kwargs.get("workers", 0),
        batches=kwargs["batches"],
        decoder=kwargs["decoder"],
        output=kwargs["output"],
        step_ms=kwargs["step_ms"],
        step_busy=kwargs["step_busy"],
        rounds=kwargs["rounds"],
        mode="counters" if kwargs["counters"] else "spans",
        seed=kwargs["seed"],
        size=kwargs["size"],
        on_error=kwargs["on_error"],
        mix=kwargs.get("mix", False),
    )
    if isinstance(data, DatasetSpec):
        values.update(_own_dataset(data, kwargs))
        values["data"] = Path(data)
    elif kwargs.get("timm_aa") is not None:
        values.update(_timm_fields(kwargs, data))
    else:
        values.update(_chosen_transform(kwargs, data))
    values.update(override)
    return RunConfig(**values)


def _command_line(name: str, cfg: Any, extra: Sequence[str] = ()) -> str:
    """The command that reproduces a run, every setting spelled out."""
    args = [
        "ferroloader", name, os.fspath(cfg.data),
        "--batch-size", str(cfg.batch_size), "--batches", str(cfg.batches),
        *extra,
    ]
    if cfg.timm is None:
        args += ["--decoder", cfg.decoder, "--output", cfg.output]
    if cfg.step_ms:
        args += ["--step-ms", f"{cfg.step_ms:g}"] + (["--step-busy"] if cfg.step_busy else [])
    if cfg.rounds > 1:
        args += ["--rounds", str(cfg.rounds)]
    if cfg.mode == "counters":
        args.append("--counters")
    if cfg.seed:
        args += ["--seed", str(cfg.seed)]
    if cfg.size != 224:
        args += ["--size", str(cfg.size)]
    if cfg.on_error != "raise":
        args += ["--on-error", cfg.on_error]
    if cfg.mix:
        args.append("--mix")
    return shlex.join(args)


def _dataset_note(data: Path, dataset: Any = None) -> str:
    from ferroloader._hfdatasets import load_saved, saved_dataset

    if dataset is not None:
        from ferroloader.datasets import python_reason

        reason = python_reason(dataset)
        read = "read natively" if reason is None else f"run in Python by both: {reason}"
        return f"{data} ({type(dataset).__name__}, {len(dataset)} samples; ferroloader: {read})"

    if saved_dataset(data):
        return f"{data} (a saved Hugging Face dataset of {len(load_saved(data))} rows)"
    classes = [d for d in sorted(data.iterdir()) if d.is_dir()]
    images = sum(1 for c in classes for f in c.rglob("*") if f.is_file())
    return f"{data} ({images} files in {len(classes)} classes)"


def _report_config(cfg: Any, *, workers: Optional[str] = None) -> Dict[str, str]:
    import torch

    from ferroloader.cli.compare import _torchvision
    from ferroloader.recipes import describe

    torchvision = _torchvision()

    if cfg.timm is not None:
        import timm

        transform = (
            f"timm's train.py loaders (timm {timm.__version__}): create_dataset, create_loader("
            f"is_training=True, auto_augment={cfg.timm!r}, re_prob=0.25, input_size=(3, "
            f"{cfg.size}, {cfg.size}), device cpu), timm's own against "
            "ferroloader.timm.create_loader, measured below their prefetchers (uint8 batches; "
            "the prefetcher's normalize and random erasing left out on both sides)"
            + (", with FastCollateMixup(mixup_alpha=0.8, cutmix_alpha=1.0, "
               "label_smoothing=0.1) as collate_fn" if cfg.mix else "")
        )
    elif cfg.dataset is not None:
        own = getattr(cfg.dataset, "transform", None)
        transform = "the dataset's own" + ("" if own is None else f": {describe(own)}")
    else:
        transform = (
            f"RandomResizedCrop({cfg.size}), RandomHorizontalFlip(), "
            + ("PILToTensor()" if cfg.output == "uint8" else "ToTensor(), Normalize(ImageNet)")
            if cfg.transform is None
            else f"{cfg.transform_name}: {describe(cfg.transform)}"
        ) + (", then the reference MixUp(0.2)/CutMix(1.0) collate_fn" if cfg.mix else "")
    views = (
        {"views": f"{cfg.views} of each image, one tensor each per batch; images/s counts "
         "images, not views"}
        if cfg.views
        else {}
    )
    return {
        "data": _dataset_note(cfg.data, cfg.dataset),
        "transform": transform,
        **views,
        "batch size": str(cfg.batch_size),
        "workers": workers or str(cfg.num_workers),
        "batches per run": str(cfg.batches),
        "rounds": str(cfg.rounds),
        "native decoder": cfg.decoder,
        "output": "the dataset's" if cfg.dataset is not None else cfg.output,
        "step ms": f"{cfg.step_ms:g}" + (" (busy)" if cfg.step_busy and cfg.step_ms else ""),
        "profile mode": cfg.mode,
        "versions": f"ferroloader {__version__}, torch {torch.__version__}, "
        f"torchvision {torchvision.__version__}, Python {platform.python_version()}",
    }


# -- terminal summary --------------------------------------------------------------------------


def _summary_tables(
    summary: Summary,
    cpu_per_image: Mapping[str, float],
) -> List[Table]:
    """The pipelines table and the time-per-op table."""
    from ferroloader.cli.report import STAGES, natural, ratio, stage_times, view_times

    pipelines = list(summary.pipelines)
    base = next((p for p in pipelines if p.label.startswith(("torchvision", "timm"))), None)
    t = Table(title="Pipelines", title_justify="left", title_style="bold")
    t.add_column("pipeline")
    t.add_column("workers", justify="right")
    t.add_column("images/s", justify="right")
    if base is not None and len(pipelines) > 1:
        t.add_column("speedup", justify="right")
    t.add_column("CPU ms/image", justify="right")
    t.add_column("consumer waiting", justify="right")
    t.add_column("batch latency ms", justify="right")
    t.add_column("bottleneck")
    for p in pipelines:
        label = p.label
        row = [label, str(p.num_workers), f"{p.images_per_s:,.1f}"]
        if base is not None and len(pipelines) > 1:
            rate = base.images_per_s
            row.append(f"{p.images_per_s / rate:.2f}×" if rate else "–")
        cpu = cpu_per_image.get(label)
        if cpu is None:
            cpu = p.cpu_seconds_per_image
        row.append(f"{cpu * 1e3:.2f}" if cpu is not None else "–")
        row.append(f"{p.consumer_wait_share * 100:.1f}%")
        lat = p.batch_latency
        row.append(
            f"{lat.mean_ns / 1e6:.1f} ± {lat.std_ns / 1e6:.1f}" if lat else "–"
        )
        row.append(p.bottleneck or "–")
        t.add_row(*row)

    times = [stage_times(p) for p in pipelines]
    keys = [s.key for s in STAGES if any(x.get(s.key, 0) > 0 for x in times)]
    keys += sorted({k for x in times for k in x} - set(keys) - {s.key for s in STAGES})
    titles = {s.key: s.title for s in STAGES}
    ops = Table(title="Worker time per image, by op (ms)", title_justify="left",
                title_style="bold")
    ops.add_column("op")
    for p in pipelines:
        ops.add_column(p.label, justify="right")
    labels = [p.label for p in pipelines]
    pair = len(labels) == 2 and labels[0] in ("torchvision", "timm") and labels[1] == "native"
    if pair:
        ops.add_column(f"{labels[0]} / native", justify="right")
    for k in keys + ["__total"]:
        vals = [sum(x.values()) if k == "__total" else x.get(k, 0.0) for x in times]
        row = ["total" if k == "__total" else titles.get(k, k)]
        row += [f"{v / 1e6:.3f}" if v else "–" for v in vals]
        if pair:
            row.append(ratio(vals[0], vals[1]))
        ops.add_row(*row, style="bold" if k == "__total" else None)
    tables = [t, ops]
    views = [view_times(p) for p in pipelines]
    if any(views):
        by_view = Table(title="Each view, its ops included (ms/image)",
                        title_justify="left", title_style="bold")
        by_view.add_column("view")
        for p in pipelines:
            by_view.add_column(p.label, justify="right")
        if pair:
            by_view.add_column(f"{labels[0]} / native", justify="right")
        for name in sorted({k for v in views for k in v}, key=natural):
            vals = [v.get(name, 0.0) for v in views]
            row = [name] + [f"{v / 1e6:.3f}" if v else "–" for v in vals]
            if pair:
                row.append(ratio(vals[0], vals[1]))
            by_view.add_row(*row)
        tables.append(by_view)
    return tables


def _print_summary(
    console: Console, summary: Summary, cpu_per_image: Mapping[str, float]
) -> None:
    for table in _summary_tables(summary, cpu_per_image):
        console.print(table)
        console.print()


def _print_files(console: Console, files: Any, extra: Sequence[Path] = ()) -> None:
    html = files.html.resolve()
    console.print(f"[bold]Report:[/bold] {html}")
    console.print(f"        open it in a browser: file://{html}")
    others = [files.trace, files.profile, files.summary_json, files.summary_csv, *extra]
    console.print("        " + ", ".join(os.fspath(p) for p in others))
    console.print(f"        {files.trace} opens in Perfetto (ui.perfetto.dev) or chrome://tracing")


def _fail_cleanly(fn: Callable[[], Any]) -> Any:
    """Runs ``fn``, turning the errors a user can fix (bad data, bad arguments) into a one-line
    message and exit status 1, rather than a traceback. A transform ferroloader refuses is
    said as such: what it cannot run, and why."""
    from ferroloader.cli.compare import NativeRefusal, SampleFailure

    try:
        return fn()
    except (NativeRefusal, SampleFailure) as e:
        raise click.ClickException(str(e)) from e
    except (FileNotFoundError, ValueError, TypeError, OSError) as e:
        raise click.ClickException(f"{type(e).__name__}: {e}") from e


def _compare_and_report(
    cfg: Any, out: Path, quiet: bool, *, command: str, pipelines: Sequence[str]
) -> None:
    from ferroloader.cli import compare, report

    with _Bars(quiet) as bars:
        profile, runs = _fail_cleanly(
            lambda: compare.compare(cfg, pipelines=pipelines, progress=bars.batch)
        )
    cpu = {r.label: r.cpu_s_per_image for r in runs if r.cpu_s_per_image is not None}
    files = report.write_report(
        profile, out, command=command, config=_report_config(cfg), cpu_per_image=cpu
    )
    console = _stdout()
    console.print()
    summary = profile.summary()
    _print_summary(console, summary, cpu)
    for warning in report.profile_warnings(profile, cpu, summary=summary):
        console.print(f"[yellow]warning:[/yellow] {warning}")
    _print_files(console, files)


# -- commands ----------------------------------------------------------------------------------


@click.group(context_settings=_CONTEXT)
@click.version_option(__version__, "--version", "-V", prog_name="ferroloader",
                      message="%(prog)s %(version)s")
def main() -> None:
    """ferroloader: a native image-classification data loader for PyTorch, with a profiler in
    every op.

    \b
    Start with:
      ferroloader demo                 compare both pipelines on generated sample data
      ferroloader compare DATA         the same on your ImageFolder
      ferroloader advise DATA          what to do about its input pipeline, measured
    Each command has --help.
    """


@main.command(context_settings=_CONTEXT)
@_data_or_dataset_argument
@_run_options(timm=True)
def compare(data: Path, out: Path, quiet: bool, **kwargs: Any) -> None:
    """Profile torchvision's DataLoader and ferroloader on the same ImageFolder DATA (or a
    directory a Hugging Face dataset's save_to_disk wrote).

    Both run the ImageNet training transform (RandomResizedCrop, RandomHorizontalFlip,
    ToTensor, Normalize), or a torchvision reference recipe (--recipe ta_wide+re), or your own
    Compose (--transform FILE.py:NAME): torchvision's ImageFolder + DataLoader run it as is,
    instrumented per op, and ferroloader.Loader with the same Compose converted (a transform
    it cannot run yet is an error naming the op). With --timm AA both are timm's train.py
    loaders instead: timm's own create_loader (its ImageDataset's read, decode and each op of
    its transform profiled) against ferroloader.timm.create_loader. A --transform may return
    several views of each image (MoCo's, DINO's), and --views N wraps the transform in an
    N-view generator: both pipelines run it as it is, images/s counts images, not views, and
    the report times each view (view0, view1...). Runs alternate. Writes
    report.html (self-contained), trace.json (Perfetto), profile.json, summary.json and
    summary.csv to --out, and prints a summary.
    """
    cfg = _config(kwargs, data)
    _compare_and_report(
        cfg, out, quiet,
        command=_command_line(
            "compare", cfg, [*_transform_args(kwargs), "--workers", str(cfg.num_workers)]
        ),
        pipelines=("torchvision", "native"),
    )


@main.command(context_settings=_CONTEXT)
@_data_or_dataset_argument
@_run_options(timm=True)
def profile(data: Path, out: Path, quiet: bool, **kwargs: Any) -> None:
    """Profile ferroloader's native pipeline alone on the ImageFolder DATA (or a saved Hugging
    Face dataset).

    The same transform and report as `compare`, without the torchvision run.
    """
    cfg = _config(kwargs, data)
    _compare_and_report(
        cfg, out, quiet,
        command=_command_line(
            "profile", cfg, [*_transform_args(kwargs), "--workers", str(cfg.num_workers)]
        ),
        pipelines=("native",),
    )


@main.command(context_settings=_CONTEXT)
@_data_argument
@click.option("--workers", "-w", "worker_counts", callback=_int_list, default="1,2,4",
              metavar="N,N,...",
              show_default=True, help="Worker counts to measure, comma-separated.")
@click.option("--pipelines", type=click.Choice(["both", "torchvision", "native"]),
              default="both", show_default=True, help="Which pipelines to sweep.")
@_run_options(workers=False, timm=True)
def sweep(data: Path, worker_counts: List[int], pipelines: str, out: Path, quiet: bool,
          **kwargs: Any) -> None:
    """Throughput and CPU seconds per image against the number of workers, on DATA.

    Runs each pipeline at each worker count (alternating) and marks the count after which one
    more step gains less than 10% throughput: where more workers stop paying off. CPU seconds
    are the OS's (this process and its joined worker processes), per image.
    """
    from ferroloader.cli import compare as runs_mod
    from ferroloader.cli import report

    cfg = _config(kwargs, data)
    which = ("torchvision", "native") if pipelines == "both" else (pipelines,)
    with _Bars(quiet) as bars:
        result = _fail_cleanly(
            lambda: runs_mod.sweep(cfg, worker_counts, pipelines=which, progress=bars.batch)
        )
    out.mkdir(parents=True, exist_ok=True)
    sweep_json = out / "sweep.json"
    sweep_csv = out / "sweep.csv"
    _write_sweep(result.points, sweep_json, sweep_csv)
    counts = ",".join(str(w) for w in worker_counts)
    files = report.write_report(
        result.profile, out,
        title="ferroloader: scaling with workers",
        command=_command_line("sweep", cfg, [*_transform_args(kwargs), "--workers", counts]
                              + ([] if pipelines == "both" else ["--pipelines", pipelines])),
        config=_report_config(cfg, workers=counts),
        sweep=result.points,
        cpu_per_image={r.label: r.cpu_s_per_image for r in result.runs
                       if r.cpu_s_per_image is not None},
        extra_files=[("sweep.json", "the scaling points"), ("sweep.csv", "the same as CSV")],
    )
    console = _stdout()
    console.print()
    console.print(_sweep_table(result.points))
    console.print()
    _print_files(console, files, [sweep_json, sweep_csv])


def _write_sweep(points: Sequence[Mapping[str, Any]], json_path: Path, csv_path: Path) -> None:
    import csv
    import json

    json_path.write_text(json.dumps({"points": list(points)}, indent=2))
    fields = ["pipeline", "workers", "images", "wall_s", "cpu_s", "images_per_s",
              "cpu_s_per_image", "gain", "enough"]
    with csv_path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(points)


def _sweep_table(points: Sequence[Mapping[str, Any]]) -> Table:
    t = Table(title="Scaling with workers", title_justify="left", title_style="bold")
    for name, justify in (("pipeline", "left"), ("workers", "right"), ("images/s", "right"),
                          ("CPU ms/image", "right"), ("gain", "right"), ("", "left")):
        t.add_column(name, justify=justify)  # type: ignore[arg-type]
    for p in sorted(points, key=lambda p: (str(p["pipeline"]), int(p["workers"]))):
        cpu = p.get("cpu_s_per_image")
        gain = p.get("gain")
        t.add_row(
            str(p["pipeline"]), str(p["workers"]), f"{float(p['images_per_s']):,.1f}",
            f"{cpu * 1e3:.2f}" if cpu is not None else "–",
            f"{gain * 100:+.0f}%" if gain is not None else "",
            "← more workers stop paying off" if p.get("enough") else "",
        )
    return t


@main.command(context_settings=_CONTEXT)
@click.option("--data", type=click.Path(exists=True, file_okay=False, path_type=Path),
              default=None, help="Use this ImageFolder instead of the generated sample.")
@click.option("--classes", type=click.IntRange(min=1), default=8, show_default=True,
              help="Classes of the sample data set.")
@click.option("--per-class", type=click.IntRange(min=1), default=32, show_default=True,
              help="Images per class of the sample data set.")
@click.option("--batch-size", "-b", type=click.IntRange(min=1), default=32, show_default=True,
              help="Samples per batch.")
# 40 batches with the 60 ms step last at least 2.4 s on any machine: past the report's
# too-short-to-trust thresholds (20 batches, 2 s), so the demo does not warn about itself.
@click.option("--batches", "-n", type=click.IntRange(min=1), default=40, show_default=True,
              help="Batches per pipeline.")
@click.option("--workers", "-w", type=click.IntRange(min=0), default=0,
              help="Workers of each pipeline; 0, the default: one per available CPU.")
@click.option("--step-ms", type=click.FloatRange(min=0), default=60.0, show_default=True,
              help="Simulated training step per batch, in ms.")
@click.option("--counters/--no-counters", default=True, show_default=True,
              help="Read CPU counters per op (software ones where the machine has no PMU).")
@click.option("--out", "-o", type=click.Path(file_okay=False, path_type=Path),
              default=Path("report"), show_default=True, help="Report folder.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bars.")
def demo(data: Optional[Path], classes: int, per_class: int, batch_size: int, batches: int,
         workers: int, step_ms: float, counters: bool, out: Path, quiet: bool) -> None:
    """Compare both pipelines on a generated sample data set (no data needed).

    Generates, once, a deterministic ImageFolder of photo-like JPEGs with ImageNet's sizes and
    encodings into the cache folder ($FERROLOADER_CACHE, else $XDG_CACHE_HOME/ferroloader,
    else ~/.cache/ferroloader), then runs `compare` on it with a simulated training step, and
    prints where the report is.
    """
    from ferroloader.cli import sample_data
    from ferroloader.cli.compare import RunConfig

    err = _stderr()
    if data is None:
        with _Bars(quiet) as bars:
            data = sample_data.sample_dataset(
                classes, per_class, progress=bars.files("generating sample data")
            )
        err.print(f"sample data: {data}")
    cfg = RunConfig(data=data, batch_size=batch_size, workers=workers, batches=batches,
                    step_ms=step_ms, mode="counters" if counters else "spans")
    err.print(
        f"comparing torchvision and ferroloader: {cfg.batches} batches of {cfg.batch_size}, "
        f"{cfg.num_workers} workers each, a {cfg.step_ms:g} ms training step per batch"
    )
    _compare_and_report(
        cfg, out, quiet,
        command=_command_line("compare", cfg, ["--workers", str(cfg.num_workers)]),
        pipelines=("torchvision", "native"),
    )


@main.command("sample-data", context_settings=_CONTEXT)
@click.argument("out", type=click.Path(file_okay=False, path_type=Path))
@click.option("--classes", type=click.IntRange(min=1), default=8, show_default=True,
              help="Class folders.")
@click.option("--per-class", type=click.IntRange(min=1), default=32, show_default=True,
              help="Images per class.")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True,
              help="Another seed, other images.")
@click.option("--scale", type=click.FloatRange(min=0.01, max=8.0), default=1.0,
              show_default=True, help="Scale every image size by this (0.25: quick tests).")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar.")
def sample_data_cmd(out: Path, classes: int, per_class: int, seed: int, scale: float,
                    quiet: bool) -> None:
    """Write the sample ImageFolder to OUT: photo-like JPEGs of ImageNet's sizes and encodings
    (mostly 4:2:0, some 4:4:4, a few progressive and grayscale, quality 75-95), the same
    bytes on every run."""
    from ferroloader.cli import sample_data

    with _Bars(quiet) as bars:
        sample_data.write_image_folder(
            out, classes, per_class, seed=seed, scale=scale, progress=bars.files("writing")
        )
    _stdout().print(f"{classes * per_class} images in {classes} classes: {out}")


@main.command("report", context_settings=_CONTEXT)
@click.argument("profile_json", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--out", "-o", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Report folder (default: the profile's folder).")
def report_cmd(profile_json: Path, out: Optional[Path]) -> None:
    """Write the report (HTML, trace, summaries) of a saved PROFILE_JSON: any profile, from
    `compare`, `Loader.profile().save(...)` or `ferroloader.torch.profile`."""
    from ferroloader.cli import report
    from ferroloader.profiling import Profile

    prof = _fail_cleanly(lambda: Profile.load(profile_json))
    folder = out if out is not None else profile_json.parent
    files = report.write_report(prof, folder, command=f"ferroloader report {profile_json}")
    console = _stdout()
    _print_summary(console, prof.summary(), {})
    _print_files(console, files)


@main.command("prepare", context_settings=_CONTEXT)
@click.argument("src", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.argument("dst", type=click.Path(file_okay=False, path_type=Path))
@click.option("--shorter-side", type=click.IntRange(min=1), required=True,
              help="Resize images whose shorter side is longer to this (aspect kept).")
@click.option("--quality", type=click.IntRange(1, 100), default=90, show_default=True,
              help="JPEG quality of the re-encoded images.")
@click.option("--workers", "-w", type=click.IntRange(min=0), default=0,
              help="Threads (default: every core).")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar.")
def prepare_cmd(src: Path, dst: Path, shorter_side: int, quality: int, workers: int,
                quiet: bool) -> None:
    """Write the ImageFolder SRC to DST with every image larger than --shorter-side resized
    and re-encoded once (the rest copied), so each epoch decodes fewer pixels. Resumable: run
    it again after an interruption. Load DST as any ImageFolder. SRC may be a saved Hugging
    Face dataset (save_to_disk's directory): DST is then its copy, saved the same way (not
    resumable)."""
    from ferroloader.offline import prepare

    with _Bars(quiet) as bars:
        report = _fail_cleanly(lambda: prepare(
            src, dst, shorter_side=shorter_side, quality=quality, num_workers=workers,
            progress=bars.files("preparing"),
        ))
    console = _stdout()
    ratio = report.bytes_out / report.bytes_in if report.bytes_in else 1.0
    console.print(
        f"{report.resized} resized, {report.copied} copied, {report.reused} already done; "
        f"{report.bytes_in / 1e6:.1f} MB read, {report.bytes_out / 1e6:.1f} MB written "
        f"({ratio:.0%}): {dst}"
    )
    for path, reason in report.unreadable:
        console.print(f"[yellow]unreadable, copied as is:[/yellow] {path}: {reason}")


@main.command("shard", context_settings=_CONTEXT)
@click.argument("src", type=click.Path(exists=True, path_type=Path))
@click.argument("dst", type=click.Path(file_okay=False, path_type=Path))
@click.option("--shard-size", default="1GB", show_default=True, metavar="SIZE",
              help="Most bytes per shard: 1GB, 256MB (decimal), 1GiB (binary) or bytes.")
@click.option("--max-samples-per-shard", type=click.IntRange(min=1), default=None,
              help="Most samples per shard (default: no limit but the size).")
@click.option("--shuffle", is_flag=True,
              help="Write the samples in an order drawn from --seed (advised for streaming: "
              "readers shuffle only within a buffer).")
@click.option("--seed", type=click.IntRange(0, 2**64 - 1), default=0, show_default=True,
              help="The shuffle's seed.")
@click.option("--root", type=click.Path(exists=True, file_okay=False, path_type=Path),
              default=None, help="For a list SRC: the folder its paths are relative to "
              "(default: the list's folder).")
@click.option("--workers", "-w", type=click.IntRange(min=0), default=0,
              help="Threads reading files ahead (default: every core).")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar (none off a terminal).")
def shard_cmd(src: Path, dst: Path, shard_size: str, max_samples_per_shard: Optional[int],
              shuffle: bool, seed: int, root: Optional[Path], workers: int, quiet: bool) -> None:
    """Write SRC, an ImageFolder, a CSV/TSV/JSONL list of path,label or a saved Hugging Face
    dataset (save_to_disk's directory), to DST as tar shards in the WebDataset layout (KEY.EXT
    with the file's or row's bytes unchanged, KEY.cls with its label) and DST/index.json (each
    image's offset and size in its shard). Images are not decoded. Resumable: run it again
    after an interruption."""
    from ferroloader.shards import parse_size, shard

    try:
        size = parse_size(shard_size)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="'--shard-size'") from e
    try:
        with _Bars(quiet or not sys.stderr.isatty()) as bars:
            report = _fail_cleanly(lambda: shard(
                src, dst, shard_size=size, max_samples_per_shard=max_samples_per_shard,
                shuffle=shuffle, seed=seed, root=root, num_workers=workers,
                progress=bars.files("sharding", "samples"),
            ))
    except KeyboardInterrupt:
        _stderr().print("interrupted: run the same command again to resume")
        sys.exit(130)
    _stdout().print(
        f"{report.samples} samples in {report.shards} shards ({report.reused_shards} already "
        f"written); {report.bytes_written / 1e6:.1f} MB written: {report.index}",
        soft_wrap=True,
    )


@main.command("advise", context_settings=_CONTEXT)
@_data_argument
@click.option("--recipe", type=click.Choice(RECIPES), default=None, metavar="NAME",
              help="A torchvision reference training preset (as compare's --recipe).")
@click.option("--transform", "transform_spec", metavar="FILE.py:NAME", default=None,
              help="Your own torchvision Compose: NAME in FILE.py.")
@click.option("--step-ms", type=click.FloatRange(min=0), default=None,
              help="Your training step per batch, simulated by sleeping: the verdict is the "
              "share of it spent waiting for data. Without it, no compute is assumed.")
@click.option("--training-profile", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              default=None, metavar="PROFILE.json",
              help="A saved profile of your own training loop (fl.torch.profile around it): "
              "the verdict grades its measured wait for data, at its measured step.")
@click.option("--storage-budget", metavar="SIZE", default=None,
              help="The most a prepared copy of the whole dataset may take (50GB, 40GiB); "
              "strategies over it are skipped.")
@click.option("--sample", type=click.IntRange(min=1), default=256, show_default=True,
              help="Images sampled at random (same classes) for the measurements.")
@click.option("--batch-size", "-b", type=click.IntRange(min=1), default=64, show_default=True,
              help="Samples per batch.")
@click.option("--workers", "-w", type=click.IntRange(min=0), default=0,
              help="Worker threads of the ladder and strategies (0: every core).")
@click.option("--out", "-o", type=click.Path(file_okay=False, path_type=Path),
              default=Path("advice"), show_default=True,
              help="Folder for advice.json and report.html (created).")
@click.option("--quiet", "-q", is_flag=True, help="No progress bars.")
def advise_cmd(data: Path, recipe: Optional[str], transform_spec: Optional[str],
               step_ms: Optional[float], training_profile: Optional[Path],
               storage_budget: Optional[str], sample: int,
               batch_size: int, workers: int, out: Path, quiet: bool) -> None:
    """Measure where DATA's input pipeline spends its time and say what to do: a cache ladder
    (the bottleneck stage), offline strategies (throughput, storage, pixel error), a worker
    sweep and an input-bound verdict, on a sample. DATA: an ImageFolder or a saved Hugging Face
    dataset (save_to_disk's directory, its rows read natively; the decoded copy is left out for
    it). Writes OUT/advice.json and OUT/report.html."""
    from ferroloader.cli.advisor import advise, parse_size

    if recipe is not None and transform_spec is not None:
        raise click.UsageError("--recipe and --transform: give one or the other")
    if step_ms is not None and training_profile is not None:
        raise click.UsageError("--step-ms and --training-profile: give one or the other")
    try:
        budget = None if storage_budget is None else parse_size(storage_budget)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="'--storage-budget'") from e
    with _Bars(quiet) as bars:
        result = _fail_cleanly(lambda: advise(
            data, transform=transform_spec or recipe, step_ms=step_ms, training=training_profile,
            storage_budget=budget,
            sample=sample, batch_size=batch_size, workers=workers or None, out=out,
            progress=lambda phase, done, total: bars.files(phase, "runs")(done, total),
        ))
    verdict = result.advice["verdict"]
    console = _stdout()
    console.print(
        f"[bold]Input-bound: {verdict['input_bound']}[/bold] "
        f"({verdict['wait_share']:.1%} of the loop's time waiting for data). "
        f"{verdict['note'][:1].upper()}{verdict['note'][1:]}."
    )
    console.print(f"Bottleneck: {verdict['bottleneck_is']} (stage {verdict['bottleneck']}).")
    for i, action in enumerate(result.actions[:3]):
        console.print(f"{i + 1}. {action['action']} ({action['gain']:.2f}x measured): "
                      f"{action['apply']}", soft_wrap=True)
    if not result.actions:
        console.print("No strategy measured faster than the online pipeline.")
    console.print(f"[bold]Report:[/bold] {result.html_path.resolve()}  ({result.json_path})")


def run(argv: Optional[Sequence[str]] = None) -> None:
    """Runs the command line with ``argv`` (default: ``sys.argv[1:]``); exits."""
    main.main(args=list(argv) if argv is not None else None, prog_name="ferroloader")


if __name__ == "__main__":  # pragma: no cover
    run(sys.argv[1:])
