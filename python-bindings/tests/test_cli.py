"""The ``ferroloader`` command: ``compare``, ``profile``, ``sweep``, ``demo`` and ``report`` run
the real pipelines on a small generated ImageFolder and write the report folder, whose files
are checked here (profile schema, both pipelines in the trace, summary keys and CSV header);
``sample-data`` and the generator behind it are deterministic and ImageNet-like.

Runs are kept tiny (16 small images, batches of 4, 2 batches, 1 worker) so the whole file takes
seconds on 2 cores: what is checked is the plumbing and the files, not the speed.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List, Sequence

import pytest
from click.testing import CliRunner, Result
from PIL import Image

import ferroloader as fl
from ferroloader.cli import sample_data
from ferroloader.cli.commands import main

SMALL = ["--batch-size", "4", "--batches", "2", "--quiet"]


def invoke(args: Sequence[str]) -> Result:
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """2 classes x 8 photo-like JPEGs at a quarter of ImageNet's sizes."""
    return sample_data.write_image_folder(
        tmp_path_factory.mktemp("data"), classes=2, per_class=8, scale=0.25
    )


def trace_labels(trace: Dict[str, Any]) -> Dict[str, int]:
    """Pipeline label -> number of span events, from a Chrome trace."""
    names = {
        e["pid"]: e["args"]["name"]
        for e in trace["traceEvents"]
        if e["ph"] == "M" and e["name"] == "process_name"
    }
    counts = {label: 0 for label in names.values()}
    for e in trace["traceEvents"]:
        if e["ph"] == "X" and e["pid"] in names:
            counts[names[e["pid"]]] += 1
    return counts


def check_report(out: Path, labels: List[str]) -> Dict[str, Any]:
    """The report folder's files are there and hold ``labels``' pipelines; returns the
    summary."""
    profile = fl.Profile.load(out / "profile.json")
    assert profile.labels == labels
    for label in labels:
        pipeline = profile.pipeline(label)
        delivered = [b for b in pipeline["batches"] if b.get("delivered_ns") is not None]
        # Batches prefetched but never asked for may be recorded too, undelivered.
        assert pipeline["spans"] and len(delivered) == 2, label
    counts = trace_labels(json.loads((out / "trace.json").read_text()))
    for label in labels:
        assert counts.get(label, 0) > 0, (label, counts)
    summary: Dict[str, Any] = json.loads((out / "summary.json").read_text())
    assert summary["schema"] == "ferroloader.summary"
    assert [p["label"] for p in summary["pipelines"]] == labels
    for p in summary["pipelines"]:
        for key in ("images", "images_per_s", "consumer_wait_share", "batch_latency", "ops",
                    "workers", "bottleneck"):
            assert key in p, key
        assert p["images"] == 8 and p["images_per_s"] > 0
    rows = list(csv.DictReader(io.StringIO((out / "summary.csv").read_text())))
    assert rows and {"pipeline", "op", "count", "self_ns", "p99_ns"} <= set(rows[0])
    assert {r["pipeline"] for r in rows} == set(labels)
    html = (out / "report.html").read_text()
    assert html.startswith("<!DOCTYPE html>") and 'id="fig-timeline"' in html
    return summary


def test_compare_and_profile_take_a_saved_hugging_face_dataset(data: Path, tmp_path: Path) -> None:
    import datasets

    datasets.disable_progress_bars()
    listed = fl.ImageFolder(data)
    saved = tmp_path / "saved"
    datasets.Dataset.from_dict(
        {
            "image": [{"bytes": Path(p).read_bytes(), "path": Path(p).name} for p, _ in listed.samples],
            "label": [label for _, label in listed.samples],
        },
        features=datasets.Features(
            {"image": datasets.Image(), "label": datasets.ClassLabel(names=list(listed.classes))}
        ),
    ).save_to_disk(str(saved))
    out = tmp_path / "report"
    result = invoke(["compare", str(saved), "--workers", "1", "--out", str(out), *SMALL])
    summary = check_report(out, ["torchvision", "native"])
    ops = {p["label"]: {o["op"] for o in p["ops"]} for p in summary["pipelines"]}
    # The DataLoader side is datasets' decode then the with_transform function; the native side
    # reads the rows' bytes (no file read) and decodes them.
    assert {"decode", "TransformImages"} <= ops["torchvision"]
    assert {"decode", "fused"} <= ops["native"] and "read" in ops["native"]
    assert "saved Hugging Face dataset of 16 rows" in (out / "report.html").read_text()
    assert "speedup" in result.output
    invoke(["profile", str(saved), "--workers", "1", "--out", str(tmp_path / "native"), *SMALL])
    # advise and compare --on-error skip take it too (test_hf_tools.py checks what they do).
    invoke(["compare", str(saved), "--on-error", "skip", "--workers", "1",
            "--out", str(tmp_path / "skip"), *SMALL])


def test_compare_writes_the_report_of_both_pipelines(data: Path, tmp_path: Path) -> None:
    out = tmp_path / "report"
    result = invoke(["compare", str(data), "--workers", "1", "--step-ms", "2", "--out", str(out),
                     *SMALL])
    summary = check_report(out, ["torchvision", "native"])
    ops = {p["label"]: {o["op"] for o in p["ops"]} for p in summary["pipelines"]}
    assert {"read", "decode", "RandomResizedCrop", "ToTensor", "Normalize"} <= ops["torchvision"]
    assert {"read", "decode", "fused"} <= ops["native"]
    # The terminal summary: both pipelines, the speedup, the per-op table, where the report is.
    assert "torchvision" in result.output and "native" in result.output
    assert "speedup" in result.output and "decode JPEG" in result.output
    assert str((out / "report.html").resolve()) in result.output
    page = (out / "report.html").read_text()
    assert "ferroloader compare" in page and "--step-ms 2" in page


OWN_DATASET = """
import os
import torch
import torchvision.transforms as T
import torchvision.transforms.v2 as v2
from PIL import Image
from torch.utils.data import Dataset
from torchvision.io import ImageReadMode, read_image

ROOT = {root!r}
TRANSFORM = T.Compose([T.RandomResizedCrop(32), T.RandomHorizontalFlip(), T.ToTensor()])


class Photos(Dataset):
    def __init__(self, transform):
        self.files = sorted(os.path.join(d, f) for d, _, fs in os.walk(ROOT) for f in fs)
        self.transform = transform

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        image = Image.open(self.files[i]).convert("RGB")
        return {{"image": self.transform(image), "label": i % 2, "path": self.files[i]}}


class Boxed(Photos):
    def __getitem__(self, i):
        image = Image.open(self.files[i]).convert("RGB").crop((0, 0, 40, 40))
        return self.transform(image), i % 2


class Tensors(Photos):
    # PyTorch's data tutorial's reads: torchvision.io's uint8 tensor, a v2 transform.

    def __getitem__(self, i):
        return self.transform(read_image(self.files[i], ImageReadMode.RGB)), i % 2


photos = Photos(TRANSFORM)
tensors = Tensors(v2.Compose([v2.RandomResizedCrop(32), v2.ToDtype(torch.float32, scale=True)]))


def boxed():
    return Boxed(TRANSFORM)
"""


@pytest.mark.filterwarnings("ignore:.*TorchCodec:DeprecationWarning")  # torchvision 0.29's decoders
def test_compare_and_profile_take_a_dataset_of_ones_own(data: Path, tmp_path: Path) -> None:
    """DATA as FILE.py:NAME: the script's own dataset object, run as it is by both; read
    natively where its __getitem__ traces, in Python by both where it does not."""
    script = tmp_path / "mine.py"
    script.write_text(OWN_DATASET.format(root=str(data)))
    out = tmp_path / "report"
    result = invoke(["compare", f"{script}:photos", "--workers", "1", "--out", str(out), *SMALL])
    summary = check_report(out, ["torchvision", "native"])
    ops = {p["label"]: {o["op"] for o in p["ops"]} for p in summary["pipelines"]}
    # The DataLoader side's Image.open in read and decode spans, as the native side's.
    assert {"__getitem__", "read", "decode", "RandomResizedCrop"} <= ops["torchvision"]
    assert {"read", "decode", "fused"} <= ops["native"]
    assert "speedup" in result.output
    page = (out / "report.html").read_text()
    assert "Photos, 16 samples; ferroloader: read natively" in page and f"{script}:photos" in page
    invoke(["profile", f"{script}:photos", "--workers", "1", "--out", str(tmp_path / "native"), *SMALL])

    # torchvision.io's reads, split alike on the DataLoader side; read natively.
    out = tmp_path / "tensors"
    invoke(["compare", f"{script}:tensors", "--workers", "1", "--out", str(out), *SMALL])
    summary = check_report(out, ["torchvision", "native"])
    ops = {p["label"]: {o["op"] for o in p["ops"]} for p in summary["pipelines"]}
    assert {"__getitem__", "read", "decode", "RandomResizedCrop", "ToDtype"} <= ops["torchvision"]
    assert "Tensors, 16 samples; ferroloader: read natively" in (out / "report.html").read_text()

    out = tmp_path / "boxed"
    invoke(["compare", f"{script}:boxed", "--workers", "1", "--out", str(out), *SMALL])
    page = (out / "report.html").read_text()
    assert "ferroloader: run in Python by both" in page and "uses the image&#x27;s .crop" in page

    runner = CliRunner()
    refused = runner.invoke(main, ["compare", f"{script}:photos", "--recipe", "ta_wide", *SMALL])
    assert refused.exit_code == 2 and "holds its transform" in refused.output
    missing = runner.invoke(main, ["compare", f"{script}:nothing", *SMALL])
    assert missing.exit_code == 2 and "defines no 'nothing'" in missing.output


def test_compare_mix_adds_the_reference_mixup_cutmix_to_both_pipelines(data: Path, tmp_path: Path) -> None:
    out = tmp_path / "report"
    invoke(["compare", str(data), "--mix", "--workers", "1", "--out", str(out), *SMALL])
    summary = check_report(out, ["torchvision", "native"])
    ops = {p["label"]: {o["op"] for o in p["ops"]} for p in summary["pipelines"]}
    # torchvision's mixing is inside its collate; ferroloader's is a span of its own per batch,
    # of the worker that completed the batch (of the consumer for one completed before its plan).
    assert "collate" in ops["torchvision"]
    consumer = {o["op"] for o in summary["pipelines"][1]["consumer_ops"]}
    assert (ops["native"] | consumer) & {"RandomChoice/MixUp", "RandomChoice/CutMix"}
    page = (out / "report.html").read_text()
    assert "MixUp(0.2)/CutMix(1.0)" in page and "--mix" in page


TIMM = ["--timm", "rand-m9-mstd0.5-inc1", "--size", "64", "--workers", "1"]


def test_compare_timm_profiles_timms_loaders_beside_ferroloaders(data: Path, tmp_path: Path) -> None:
    out = tmp_path / "report"
    result = invoke(["compare", str(data), *TIMM, "--out", str(out), *SMALL])
    summary = check_report(out, ["timm", "native"])
    ops = {p["label"]: {o["op"] for o in p["ops"]} for p in summary["pipelines"]}
    # timm's ImageDataset split into read, decode and each op of its create_transform.
    assert {"read", "decode", "RandomResizedCropAndInterpolation", "RandomHorizontalFlip",
            "RandAugment", "MaybePILToTensor", "collate"} <= ops["timm"]
    assert "__getitem__" not in ops["timm"]
    assert {"read", "decode", "TimmRandAugment"} <= ops["native"]
    assert "timm / native" in result.output and "speedup" in result.output
    page = (out / "report.html").read_text()
    assert "--timm rand-m9-mstd0.5-inc1" in page and "re_prob=0.25" in page
    assert "below their prefetchers" in page
    native = tmp_path / "native"
    invoke(["profile", str(data), *TIMM, "--out", str(native), *SMALL])
    check_report(native, ["native"])


def test_sweep_timm_scales_timms_loaders_and_ferroloaders(data: Path, tmp_path: Path) -> None:
    out = tmp_path / "sweep"
    invoke(["sweep", str(data), "--timm", "rand-m9-mstd0.5-inc1", "--size", "64", "--workers", "2,1",
            "--out", str(out), *SMALL])
    points = json.loads((out / "sweep.json").read_text())["points"]
    assert sorted((p["pipeline"], p["workers"]) for p in points) == [
        ("native", 1), ("native", 2), ("timm", 1), ("timm", 2)
    ]
    assert "--timm rand-m9-mstd0.5-inc1" in (out / "report.html").read_text()


def test_compare_timm_mix_is_timms_fast_collate_mixup_on_both_sides(data: Path, tmp_path: Path) -> None:
    out = tmp_path / "report"
    invoke(["compare", str(data), *TIMM, "--mix", "--out", str(out), *SMALL])
    summary = check_report(out, ["timm", "native"])
    ops = {p["label"]: {o["op"] for o in p["ops"]} for p in summary["pipelines"]}
    consumer = {o["op"] for o in summary["pipelines"][1]["consumer_ops"]}
    assert "collate" in ops["timm"]  # timm's mixing is inside its collate_fn
    assert "FastCollateMixup/batch" in ops["native"] | consumer
    assert "FastCollateMixup(mixup_alpha=0.8, cutmix_alpha=1.0" in (out / "report.html").read_text()


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--recipe", "basic"], "--timm and --recipe: timm's create_transform makes the transform"),
        (["--transform", "x.py:t"], "--timm and --transform"),
        (["--output", "float32"], "--timm and --output"),
        (["--on-error", "skip"], "--timm and --on-error"),
    ],
)
def test_compare_timm_refuses_what_timm_decides(data: Path, extra: List[str], message: str) -> None:
    result = CliRunner().invoke(main, ["compare", str(data), "--timm", "rand-m9", *extra, "-q"])
    assert result.exit_code == 2 and message in result.output, result.output


def test_compare_timm_names_a_policy_timm_refuses(data: Path) -> None:
    result = CliRunner().invoke(main, ["compare", str(data), "--timm", "bogus", "-q"])
    assert result.exit_code == 2 and "Unknown AA policy bogus" in result.output
    assert "Traceback" not in result.output


VIEWS_FILE = """
import torchvision.transforms as T


class Posterized:
    # A PIL op of the user's own, which ferroloader cannot convert: it runs in Python.
    def __call__(self, img):
        from PIL import ImageOps

        return ImageOps.posterize(img, 4)


class TwoCrops:
    # MoCo's TwoCropsTransform, with a view of its own.
    def __init__(self, first, second):
        self.first = first
        self.second = second

    def __call__(self, x):
        return [self.first(x), self.second(x)]


two = TwoCrops(
    # A Compose in the Compose, as DINO's views share theirs.
    T.Compose([T.RandomResizedCrop(32), T.Compose([T.RandomHorizontalFlip(), T.ToTensor()])]),
    T.Compose([T.RandomResizedCrop(32), Posterized(), T.ToTensor()]),
)
one = T.Compose([T.RandomResizedCrop(32), T.ToTensor()])
"""


@pytest.fixture(scope="module")
def views_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("views") / "views.py"
    path.write_text(VIEWS_FILE)
    return path


def check_views(out: Path, labels: List[str], views: int) -> Dict[str, Any]:
    """The report of a transform returning ``views`` views: each pipeline has the view spans
    (and ops nested in them), counts images (``check_report``: 8), and the summary's and the
    HTML's per-view tables are there."""
    summary = check_report(out, labels)
    names = [f"view{k}" for k in range(views)]
    for p in summary["pipelines"]:
        spans = {o["op"]: o for o in p["ops"]}
        assert set(names) <= set(spans), (p["label"], sorted(spans))
        for name in names:
            # Each view's ops are nested in its span: its inclusive time holds theirs. (How much
            # of it is theirs is the machine's business: a loaded CI runner made it half.)
            assert spans[name]["count"] >= 8 and spans[name]["total_ns"] > spans[name]["self_ns"]
    page = (out / "report.html").read_text()
    assert "<h3>Views</h3>" in page and "view spans (own time)" in page
    assert f"{views} of each image, one tensor each per batch" in page
    return summary


def test_compare_and_profile_run_a_transform_returning_views_as_it_is(
    data: Path, views_file: Path, tmp_path: Path
) -> None:
    out = tmp_path / "report"
    spec = f"{views_file}:two"
    result = invoke(["compare", str(data), "--transform", spec, "--workers", "1",
                     "--out", str(out), *SMALL])
    summary = check_views(out, ["torchvision", "native"], 2)
    ops = {p["label"]: {o["op"] for o in p["ops"]} for p in summary["pipelines"]}
    # The user's own PIL op runs in Python on both sides (allowed in a view), by its name.
    assert "Posterized" in ops["torchvision"] and "Posterized" in ops["native"]
    # The nested Compose's ops are timed one by one, as the native side names them.
    assert "RandomHorizontalFlip" in ops["torchvision"] and "Compose" not in ops["torchvision"]
    assert "Each view, its ops included" in result.output and "view1" in result.output
    page = (out / "report.html").read_text()
    assert f"--transform {spec}" in page and "2 views: view0: RandomResizedCrop(32" in page
    native = tmp_path / "native"
    invoke(["profile", str(data), "--transform", spec, "--workers", "1", "--out", str(native),
            *SMALL])
    check_views(native, ["native"], 2)


def test_compare_views_wraps_the_transform_in_a_view_generator(
    data: Path, views_file: Path, tmp_path: Path
) -> None:
    out = tmp_path / "report"
    invoke(["compare", str(data), "--transform", f"{views_file}:one", "--views", "2",
            "--workers", "1", "--out", str(out), *SMALL])
    check_views(out, ["torchvision", "native"], 2)
    page = (out / "report.html").read_text()
    assert f"2 views of {views_file}:one" in page and "--views 2" in page


def test_throughput_counts_images_not_views() -> None:
    import torch

    from ferroloader.cli.compare import _images_in

    batch = torch.zeros(4, 3, 8, 8)
    assert _images_in(batch) == 4
    assert _images_in([batch, torch.zeros(4, 3, 2, 2), batch]) == 4
    assert _images_in((batch, batch)) == 4
    assert _images_in({"global": batch, "local": torch.zeros(4, 3, 2, 2)}) == 4


def test_view_spans_sort_by_number() -> None:
    from ferroloader.cli.report import natural, stage_of

    assert sorted(["view10", "view2", "view1"], key=natural) == ["view1", "view2", "view10"]
    assert stage_of("view12") == "views"
    assert stage_of("preview1") == "preview1"


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--views", "2", "--timm", "rand-m9"],
         "--timm and --views: timm's create_transform makes one view of each image"),
        (["--views", "2", "--transform", "{file}:two"],
         "--views: {file}:two returns 2 views of each image itself"),
        (["--views", "2", "--mix"], "--mix: the transform (2 views of the ImageNet training "
         "transform) returns several views of each image"),
        (["--transform", "{file}:two", "--mix"], "--mix: the transform ({file}:two) returns"),
    ],
)
def test_compare_views_refuses_what_views_cannot_be_compared_with(
    data: Path, views_file: Path, extra: List[str], message: str
) -> None:
    args = [a.format(file=views_file) for a in extra]
    result = CliRunner().invoke(main, ["compare", str(data), *args, "-q"])
    output = " ".join(result.output.split())  # click wraps the message
    assert result.exit_code == 2 and message.format(file=views_file) in output, result.output


def test_views_need_a_folder_and_advise_refuses_them(views_file: Path, tmp_path: Path) -> None:
    saved = tmp_path / "saved"  # what saved_dataset recognises; refused before it is read
    saved.mkdir()
    (saved / "state.json").write_text("{}")
    (saved / "dataset_info.json").write_text("{}")
    runner = CliRunner()
    result = runner.invoke(main, ["compare", str(saved), "--views", "2", "-q"])
    assert result.exit_code == 2 and "views need DATA to be an ImageFolder" in result.output
    result = runner.invoke(main, ["advise", str(tmp_path), "--transform", f"{views_file}:two", "-q"])
    output = " ".join(result.output.split())
    assert result.exit_code == 1 and "returns 2 views of each image, not one tensor" in output


def test_profile_runs_the_native_pipeline_alone(data: Path, tmp_path: Path) -> None:
    out = tmp_path / "report"
    invoke(["profile", str(data), "--workers", "2", "--counters", "--out", str(out), *SMALL])
    summary = check_report(out, ["native"])
    native = summary["pipelines"][0]
    assert native["num_workers"] == 2 and native["mode"] == "counters"


def test_sweep_measures_each_worker_count(data: Path, tmp_path: Path) -> None:
    out = tmp_path / "sweep"
    result = invoke(["sweep", str(data), "--workers", "2,1", "--out", str(out), *SMALL])
    points = json.loads((out / "sweep.json").read_text())["points"]
    assert sorted((p["pipeline"], p["workers"]) for p in points) == [
        ("native", 1), ("native", 2), ("torchvision", 1), ("torchvision", 2)
    ]
    for p in points:
        assert p["images"] == 8 and p["images_per_s"] > 0 and p["cpu_s_per_image"] > 0
    assert sum(p["enough"] for p in points) <= 2
    with (out / "sweep.csv").open() as f:
        assert next(csv.reader(f))[:3] == ["pipeline", "workers", "images"]
    labels = fl.Profile.load(out / "profile.json").labels
    assert sorted(labels) == sorted(["torchvision w=1", "torchvision w=2", "native w=1",
                                     "native w=2"])
    assert 'id="fig-sweep"' in (out / "report.html").read_text()
    assert "Scaling with workers" in result.output


def test_demo_on_given_data_and_report_from_a_saved_profile(data: Path, tmp_path: Path) -> None:
    out = tmp_path / "demo"
    result = invoke(["demo", "--data", str(data), "--workers", "1", "--step-ms", "1",
                     "--no-counters", "--out", str(out), *SMALL])
    check_report(out, ["torchvision", "native"])
    assert "Report:" in result.output
    # `report` renders a saved profile again, into another folder.
    again = tmp_path / "again"
    invoke(["report", str(out / "profile.json"), "--out", str(again)])
    check_report(again, ["torchvision", "native"])


def test_mark_enough_finds_where_workers_stop_paying_off() -> None:
    from ferroloader.cli.compare import mark_enough

    points: List[Dict[str, Any]] = [
        {"pipeline": "native", "workers": w, "images_per_s": r}
        for w, r in ((1, 100.0), (2, 190.0), (4, 200.0), (8, 205.0))
    ]
    mark_enough(points)
    assert [p["enough"] for p in points] == [False, True, False, False]
    assert points[0]["gain"] is None and points[1]["gain"] == pytest.approx(0.9)
    still = [{"pipeline": "native", "workers": w, "images_per_s": 100.0 * w} for w in (1, 2)]
    mark_enough(still)
    assert not any(p["enough"] for p in still)


def test_every_command_has_help() -> None:
    runner = CliRunner()
    for args in ([], ["compare"], ["profile"], ["sweep"], ["demo"], ["sample-data"], ["report"]):
        result = runner.invoke(main, [*args, "--help"])
        assert result.exit_code == 0 and "Usage: " in result.output, args
    assert "--step-ms" in runner.invoke(main, ["compare", "--help"]).output


def test_bad_input_is_a_one_line_error(tmp_path: Path) -> None:
    runner = CliRunner()
    missing = runner.invoke(main, ["compare", str(tmp_path / "nope")])
    assert missing.exit_code == 2 and "does not exist" in missing.output
    (tmp_path / "empty" / "class0").mkdir(parents=True)
    empty = runner.invoke(main, ["profile", str(tmp_path / "empty"), "-q"])
    assert empty.exit_code == 1 and "Error:" in empty.output and "Traceback" not in empty.output
    bad = runner.invoke(main, ["sweep", str(tmp_path), "--workers", "1,x"])
    assert bad.exit_code == 2 and "comma-separated" in bad.output


def test_python_dash_m_runs_the_command_line() -> None:
    out = subprocess.run([sys.executable, "-m", "ferroloader", "--help"], capture_output=True,
                         text=True, check=True)
    assert out.stdout.startswith("Usage: ferroloader ") and "compare" in out.stdout


def _digest(root: Path) -> Dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*.jpg"))
    }


def test_sample_data_is_deterministic_and_imagenet_like(tmp_path: Path) -> None:
    invoke(["sample-data", str(tmp_path / "a"), "--classes", "4", "--per-class", "8",
            "--scale", "0.1", "--quiet"])
    sample_data.write_image_folder(tmp_path / "b", classes=4, per_class=8, scale=0.1)
    a, b = _digest(tmp_path / "a"), _digest(tmp_path / "b")
    assert len(a) == 32 and a == b
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == [f"class{i:02d}" for i in range(4)]
    # ImageNet's mix of encodings, spread so that even 32 images have some of each.
    kinds: Dict[str, int] = {}
    for path in sorted((tmp_path / "a").rglob("*.jpg")):
        with Image.open(path) as im:
            if im.mode == "L":
                kind = "gray"
            elif im.info.get("progressive"):
                kind = "progressive"
            else:
                # Pillow's JPEG layers: (component id, h, v sampling, table) per component.
                kind = {(2, 2): "4:2:0", (1, 1): "4:4:4"}[tuple(getattr(im, "layer")[0][1:3])]
            kinds[kind] = kinds.get(kind, 0) + 1
    assert kinds["4:2:0"] > kinds["4:4:4"] > 0 and kinds["gray"] >= 1 and kinds["progressive"] >= 1
    specs = [sample_data.image_spec(i) for i in range(200)]
    assert any(s.width > s.height for s in specs) and any(s.height > s.width for s in specs)
    assert {s.quality for s in specs} <= {75, 80, 85, 90, 95}


def test_sample_dataset_is_cached(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FERROLOADER_CACHE", str(tmp_path / "cache"))
    calls: List[int] = []
    first = sample_data.sample_dataset(2, 2, scale=0.1, progress=lambda d, t: calls.append(d))
    assert first.parent == tmp_path / "cache" and calls == [1, 2, 3, 4]
    again = sample_data.sample_dataset(2, 2, scale=0.1, progress=lambda d, t: calls.append(d))
    assert again == first and calls == [1, 2, 3, 4]  # nothing written the second time
    assert len(fl.ImageFolder(first)) == 4


@pytest.mark.parametrize("first", ["torchvision", "native"])
def test_a_bad_file_is_named_in_one_line_and_skip_leaves_it_out(
    data: Path, tmp_path: Path, first: str
) -> None:
    import shutil

    from ferroloader.cli import compare

    bad = tmp_path / "data"
    shutil.copytree(data, bad)
    victim = sorted((bad / sorted(p.name for p in bad.iterdir())[0]).iterdir())[0]
    victim.write_bytes(b"<html>not an image</html>")
    cfg = compare.RunConfig(data=bad, batch_size=4, batches=4, workers=1)
    with pytest.raises((compare.SampleFailure, fl.DecodeError)) as info:
        compare.run_pipeline(cfg, first)
    message = str(info.value)
    assert victim.name in message and "Traceback" not in message, message
    result = CliRunner().invoke(main, ["compare", str(bad), *SMALL, "--workers", "1",
                                       "--out", str(tmp_path / "r")])
    assert result.exit_code == 1 and victim.name in result.output
    assert "Traceback" not in result.output and len(result.output.splitlines()) <= 4, result.output
    skipped = CliRunner().invoke(main, ["compare", str(bad), *SMALL, "--workers", "1",
                                        "--on-error", "skip", "--batches", "4",
                                        "--out", str(tmp_path / "s")])
    assert skipped.exit_code == 0, skipped.output


def test_the_skipping_folder_pickles_for_spawned_workers(data: Path) -> None:
    import pickle

    import torchvision

    from ferroloader.cli import compare

    folder = compare._skipping_folder(torchvision)(str(data))
    copy = pickle.loads(pickle.dumps(folder))
    assert type(copy) is type(folder) and len(copy) == len(folder)
