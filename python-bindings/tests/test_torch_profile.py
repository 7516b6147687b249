"""``ferroloader.torch.profile``: a stock torch DataLoader over a torchvision ImageFolder, profiled
in ferroloader's schema from its worker processes (fork and spawn), without changing what it
yields or the user's objects."""

from __future__ import annotations

import copy
import io
import json
import multiprocessing
import time
import warnings
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import pytest
import torch
import torchvision
import torchvision.transforms as tvT
from PIL import Image
from torch.utils.data import DataLoader

import ferroloader as fl
from ferroloader import torch as flt

from conftest import IMAGENET_MEAN, IMAGENET_STD, natural_image

CLASSES = ("ant", "bee", "cat")
PER_CLASS = 8
SAMPLES = len(CLASSES) * PER_CLASS  # 24
BATCH = 5  # 5 batches per epoch, the last one of 4
BATCHES = -(-SAMPLES // BATCH)
SLOW_SIZE = (61, 47)  # sample 0: SlowOn sleeps on it
BAD_SIZE = (77, 33)  # sample 11: Explode raises on it
BAD_INDEX = PER_CLASS + 3
TRANSFORM_OPS = ("RandomResizedCrop", "RandomHorizontalFlip", "ToTensor", "Normalize")
SAMPLE_OPS = ("read", "decode") + TRANSFORM_OPS


class Explode:
    """A transform that fails on one image (the one of size ``BAD_SIZE``)."""

    def __call__(self, img: Image.Image) -> Image.Image:
        if img.size == BAD_SIZE:
            raise ValueError("boom")
        return img


class SlowOn:
    """A transform that sleeps on one image (the one of size ``SLOW_SIZE``)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def __call__(self, img: Image.Image) -> Image.Image:
        if img.size == SLOW_SIZE:
            time.sleep(self.seconds)
        return img


class Manifest(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """A user's own map-style dataset: its own file reading, a span around part of it, and a
    torchvision ``transform`` attribute (what most custom datasets look like)."""

    def __init__(self, root: Path, transform: Any) -> None:
        self.items = [(p, i % len(CLASSES)) for i, p in enumerate(sorted(root.rglob("*.jpg")))]
        self.transform = transform

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> Tuple[Any, int]:
        path, label = self.items[index]
        with flt.span("fetch"):
            data = path.read_bytes()
        img = Image.open(io.BytesIO(data)).convert("RGB")
        return self.transform(img), label


def configure_worker(worker_id: int) -> None:
    """A ``worker_init_fn`` that reads and sets attributes of the worker's dataset."""
    info = torch.utils.data.get_worker_info()
    assert info is not None
    dataset: Any = info.dataset
    assert list(dataset.classes) == list(CLASSES)
    dataset.configured_by = worker_id
    assert dataset.configured_by == worker_id


@pytest.fixture(scope="module")
def tv_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """3 classes x 8 small JPEGs; sample 0 and sample 11 have sizes of their own."""
    root = tmp_path_factory.mktemp("tvfolder")
    rng = np.random.default_rng(5)
    for c, name in enumerate(CLASSES):
        (root / name).mkdir()
        for i in range(PER_CLASS):
            index = c * PER_CLASS + i
            size = {0: SLOW_SIZE, BAD_INDEX: BAD_SIZE}.get(index, (40 + 3 * index, 36 + 2 * i))
            Image.fromarray(natural_image(rng, *size)).save(root / name / f"img_{i:02d}.jpg")
    return root


def compose(*extra: Any) -> tvT.Compose:
    return tvT.Compose(
        [*extra, tvT.RandomResizedCrop(24), tvT.RandomHorizontalFlip(), tvT.ToTensor(),
         tvT.Normalize(IMAGENET_MEAN, IMAGENET_STD)]
    )


def make_loader(
    root: Path,
    num_workers: int = 0,
    *,
    transform: Optional[tvT.Compose] = None,
    seed: int = 0,
    **kw: Any,
) -> DataLoader[Any]:
    dataset = torchvision.datasets.ImageFolder(str(root), transform=transform or compose())
    kw.setdefault("shuffle", True)
    return DataLoader(
        dataset,
        batch_size=BATCH,
        num_workers=num_workers,
        generator=torch.Generator().manual_seed(seed),
        **kw,
    )


def pipeline_of(profile: Dict[str, Any]) -> Dict[str, Any]:
    check_schema(profile)
    (pipeline,) = profile["pipelines"]
    result: Dict[str, Any] = pipeline
    return result


def check_schema(profile: Dict[str, Any]) -> None:
    """The structure of schema ``ferroloader.profile`` v1 (profiler/src/schema.rs)."""
    json.dumps(profile)  # plain data only
    assert profile["schema"] == "ferroloader.profile" and profile["version"] == 1
    for p in profile["pipelines"]:
        assert isinstance(p["label"], str) and p["mode"] in ("off", "spans", "counters")
        assert p["start_ns"] <= p["end_ns"]
        assert all(isinstance(v, str) for v in p["meta"].values())
        for group in ("hardware", "software"):
            assert isinstance(p["counters"][group]["available"], bool)
        workers = {t["worker"] for t in p["threads"]}
        assert len(workers) == len(p["threads"])
        for s in p["spans"]:
            assert set(s) <= {"op", "worker", "batch", "sample", "start_ns", "end_ns", "depth", "counters"}
            assert isinstance(s["op"], str) and s["worker"] in workers
            assert 0 < s["start_ns"] <= s["end_ns"] and s["depth"] >= 0
            assert all(isinstance(v, int) and v >= 0 for v in s.get("counters", {}).values())
        numbers = [b["batch"] for b in p["batches"]]
        assert len(set(numbers)) == len(numbers)
        for b in p["batches"]:
            assert isinstance(b["out_of_order"], bool)
        for f in p["failures"]:
            assert isinstance(f["cause"], str) and isinstance(f["t_ns"], int)


def run_epochs(pdl: flt.ProfiledDataLoader, epochs: int) -> List[Tuple[torch.Tensor, torch.Tensor]]:
    out: List[Tuple[torch.Tensor, torch.Tensor]] = []
    for _ in range(epochs):
        out.extend((images, labels) for images, labels in pdl)
    return out


# -- spans from every op, in the worker processes ---------------------------------------------


@pytest.mark.parametrize(
    "num_workers,context", [(0, None), (2, "fork"), (2, "spawn")], ids=["main", "fork", "spawn"]
)
def test_spans_for_every_op_of_every_sample_in_the_workers(
    tv_folder: Path, num_workers: int, context: Optional[str]
) -> None:
    # Spawned workers import torch: keep them for both epochs (persistent workers).
    kw: Dict[str, Any] = {}
    if context is not None:
        kw = {"multiprocessing_context": context, "persistent_workers": context == "spawn"}
    loader = make_loader(tv_folder, num_workers, **kw)
    with flt.profile(loader) as pdl:
        assert len(pdl) == BATCHES
        batches = run_epochs(pdl, 2)
    assert len(batches) == 2 * BATCHES
    assert all(images.shape[1:] == (3, 24, 24) for images, _ in batches)

    data = pdl.profile_dict()
    p = pipeline_of(data)
    assert p["label"] == "torchvision" and p["mode"] == "spans"
    assert p["num_workers"] == num_workers and p["batch_size"] == BATCH
    assert p["meta"]["decoder"].startswith("PIL ")
    assert p["meta"]["dataset_root"] == str(tv_folder)
    assert p["meta"]["start_method"] == (context or "none (num_workers=0)")
    assert "RandomResizedCrop" in p["meta"]["transform"]

    # Threads: one per worker, worker processes apart from the main one.
    assert [t["worker"] for t in p["threads"]] == list(range(max(1, num_workers)))
    for t in p["threads"]:
        assert t["name"] == f"worker-{t['worker']}"
        assert (t["pid"] == p["pid"]) == (num_workers == 0)

    # Every sample of both epochs: one process span holding one span per op.
    spans = p["spans"]
    process = [s for s in spans if s["op"] == "process"]
    assert len(process) == 2 * SAMPLES
    for epoch in range(2):
        in_epoch = [s for s in process if epoch * BATCHES <= s["batch"] < (epoch + 1) * BATCHES]
        assert sorted(s["sample"] for s in in_epoch) == list(range(SAMPLES))
    by_sample_batch: Dict[Tuple[int, int], List[Dict[str, Any]]] = {}
    for s in spans:
        if s["op"] != "collate":
            by_sample_batch.setdefault((s["batch"], s["sample"]), []).append(s)
    for (batch, sample), group in by_sample_batch.items():
        ops = [s["op"] for s in sorted(group, key=lambda s: s["start_ns"])]
        assert ops == ["process", *SAMPLE_OPS], (batch, sample)
        (outer,) = [s for s in group if s["op"] == "process"]
        assert outer["depth"] == 0
        for s in group:
            assert s["worker"] == outer["worker"]
            if s is not outer:
                assert s["depth"] == 1
                assert outer["start_ns"] <= s["start_ns"] <= s["end_ns"] <= outer["end_ns"]

    # One collate per batch, in the worker that made it; batch events for each.
    collates = [s for s in spans if s["op"] == "collate"]
    assert sorted(s["batch"] for s in collates) == list(range(2 * BATCHES))
    assert all("sample" not in s for s in collates)
    events = p["batches"]
    assert [b["batch"] for b in events] == list(range(2 * BATCHES))
    for b in events:
        (collate,) = [s for s in collates if s["batch"] == b["batch"]]
        assert b["completed_by"] == collate["worker"] and b["completed_ns"] == collate["end_ns"]
        assert b["size"] == (BATCH if b["batch"] % BATCHES < BATCHES - 1 else SAMPLES % BATCH)
        assert b["planned_ns"] <= b["first_started_ns"] <= b["completed_ns"] <= b["delivered_ns"]
        assert b["wait_ns"] >= 0 and b["delivered_ns"] - b["wait_ns"] >= p["start_ns"]
        assert b["delivered_ns"] <= p["end_ns"]
        if num_workers == 0:
            assert not b["out_of_order"]
    assert p["failures"] == []

    # The native profiler reads it: a summary with every op.
    profile = pdl.profile()
    assert profile.labels == ["torchvision"]
    summary = str(profile.summary())
    for op in (*SAMPLE_OPS, "process", "collate"):
        assert op in summary, op


def test_yields_what_the_uninstrumented_loader_yields(tv_folder: Path) -> None:
    for num_workers in (0, 2):
        torch.manual_seed(7)
        loader = make_loader(tv_folder, num_workers, seed=3)
        plain = [batch for _ in range(2) for batch in loader]
        torch.manual_seed(7)
        pdl = flt.profile(make_loader(tv_folder, num_workers, seed=3))
        profiled = run_epochs(pdl, 2)
        assert len(plain) == len(profiled) == 2 * BATCHES
        for (x0, y0), (x1, y1) in zip(plain, profiled):
            assert type(x1) is torch.Tensor and type(y1) is torch.Tensor
            assert torch.equal(x0, x1) and torch.equal(y0, y1)


def test_the_users_loader_dataset_and_transforms_are_untouched(tv_folder: Path) -> None:
    loader = make_loader(tv_folder, 2, transform=compose(tvT.Lambda(lambda x: x)),
                         multiprocessing_context="fork", worker_init_fn=configure_worker)
    dataset = loader.dataset
    transform = dataset.transform  # type: ignore[attr-defined]
    ops = list(transform.transforms)
    before = (dict(vars(loader)), dict(vars(dataset)), [dict(vars(t)) for t in ops])
    samples = copy.deepcopy(dataset.samples)  # type: ignore[attr-defined]

    with flt.profile(loader, mode="counters") as pdl:
        run_epochs(pdl, 1)
    assert pdl.dataloader is loader and pdl.dataset is dataset

    assert dict(vars(loader)) == before[0]
    assert dict(vars(dataset)) == before[1]
    assert transform.transforms == ops and [dict(vars(t)) for t in ops] == before[2]
    assert dataset.loader is torchvision.datasets.folder.default_loader  # type: ignore[attr-defined]
    assert dataset.samples == samples  # type: ignore[attr-defined]
    assert type(dataset).__getitem__ is torchvision.datasets.DatasetFolder.__getitem__
    assert "Lambda" in {s["op"] for s in pipeline_of(pdl.profile_dict())["spans"]}
    # The original still works on its own.
    assert len(list(loader)) == BATCHES


# -- counters ----------------------------------------------------------------------------------


@pytest.mark.parametrize("num_workers", [0, 1])
def test_counters_mode_gives_counter_deltas_per_span(tv_folder: Path, num_workers: int) -> None:
    pdl = flt.profile(make_loader(tv_folder, num_workers), mode="counters", label="tv-counters")
    run_epochs(pdl, 1)
    p = pipeline_of(pdl.profile_dict())
    assert p["label"] == "tv-counters" and p["mode"] == "counters"
    availability = p["counters"]
    software = availability["software"]
    for group in ("hardware", "software"):
        g = availability[group]
        assert g["events"], group
        if not g["available"]:
            assert g["reason"], group
        for event in g["events"]:
            assert event["available"] or event["reason"], event
    (thread,) = p["threads"]
    assert thread["counters"] == availability
    task_clock = any(e["counter"] == "task_clock" and e["available"] for e in software["events"])
    for s in p["spans"]:
        assert ("task_clock" in s.get("counters", {})) == task_clock, s
    if task_clock:
        # The whole sample took CPU time; hardware counters appear only where they exist.
        assert all(s["counters"]["task_clock"] > 0 for s in p["spans"] if s["op"] == "process")
    if not availability["hardware"]["available"]:
        assert all("cycles" not in s.get("counters", {}) for s in p["spans"])
    pdl.profile().summary()


def test_spans_mode_says_counters_were_not_requested(tv_folder: Path) -> None:
    pdl = flt.profile(make_loader(tv_folder), mode="spans")
    run_epochs(pdl, 1)
    p = pipeline_of(pdl.profile_dict())
    assert not p["counters"]["software"]["available"] and p["counters"]["software"]["reason"]
    assert all("counters" not in s for s in p["spans"])
    assert all("counters" not in t for t in p["threads"])


# -- failures, ordering, pinning ---------------------------------------------------------------


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_failing_transform_is_reraised_and_recorded(tv_folder: Path, num_workers: int) -> None:
    kw: Dict[str, Any] = {"shuffle": False}
    if num_workers:
        kw["multiprocessing_context"] = "fork"
    loader = make_loader(tv_folder, num_workers, transform=compose(Explode()), **kw)
    bad_path = loader.dataset.samples[BAD_INDEX][0]  # type: ignore[attr-defined]
    pdl = flt.profile(loader)
    delivered = 0
    with pytest.raises(ValueError, match="boom") as raised:
        for _ in pdl:
            delivered += 1
    if num_workers == 0:
        assert str(raised.value) == "boom"  # the very exception, unchanged
    assert delivered == BAD_INDEX // BATCH

    p = pipeline_of(pdl.profile_dict())
    (failure,) = p["failures"]
    assert failure["sample"] == BAD_INDEX and failure["op"] == "Explode"
    assert failure["cause"] == f"{bad_path}: ValueError: boom"
    assert failure["worker"] in range(max(1, num_workers)) and "batch" not in failure
    # The failed batch's spans so far are kept, under no batch; delivered ones are intact.
    orphans = [s for s in p["spans"] if "batch" not in s]
    assert {"process", "Explode"} <= {s["op"] for s in orphans if s["sample"] == BAD_INDEX}
    assert [b["batch"] for b in p["batches"]] == list(range(delivered))
    assert len([s for s in p["spans"] if s["op"] == "process" and "batch" in s]) == delivered * BATCH
    assert pdl.profile().summary()


@pytest.mark.parametrize("mode", ["spans", "counters"])
def test_a_file_that_fails_to_decode_keeps_its_read_span(tmp_path: Path, mode: str) -> None:
    rng = np.random.default_rng(9)
    (tmp_path / "ant").mkdir()
    for i in range(3):
        Image.fromarray(natural_image(rng, 30, 20)).save(tmp_path / "ant" / f"img_{i}.jpg")
    bad = tmp_path / "ant" / "img_1.jpg"
    bad.write_bytes(b"not an image at all")
    pdl = flt.profile(make_loader(tmp_path, shuffle=False), mode=mode)
    with pytest.raises(Exception, match="cannot identify image file"):
        list(pdl)
    p = pipeline_of(pdl.profile_dict())
    (failure,) = p["failures"]
    assert failure["sample"] == 1 and failure["op"] == "decode"
    assert failure["cause"].startswith(f"{bad}: UnidentifiedImageError")
    spans = {s["op"]: s for s in p["spans"] if s["sample"] == 1}
    assert set(spans) == {"read", "decode", "process"}
    # The read finished before the decode started; its counters are kept when counting.
    assert spans["read"]["end_ns"] <= spans["decode"]["start_ns"]
    assert ("counters" in spans["read"]) == (mode == "counters")


@pytest.mark.parametrize("in_order", [True, False])
def test_batches_finished_ahead_of_an_earlier_one_are_out_of_order(
    tv_folder: Path, in_order: bool
) -> None:
    """Sample 0 is slow: batch 0 (worker 0) finishes after batch 1 (worker 1)."""
    loader = make_loader(tv_folder, 2, transform=compose(SlowOn(0.8)), shuffle=False,
                         multiprocessing_context="fork", in_order=in_order)
    pdl = flt.profile(loader)
    first_labels = [labels for _, labels in pdl]
    p = pipeline_of(pdl.profile_dict())
    planned = {b["batch"]: b["planned_ns"] for b in p["batches"]}
    events = sorted(p["batches"], key=lambda b: b["planned_ns"])  # in sampler order
    assert events[1]["completed_ns"] < events[0]["completed_ns"]
    assert events[1]["out_of_order"] and not events[0]["out_of_order"]
    if in_order:
        assert [b["batch"] for b in events] == list(range(BATCHES))
        assert events[1]["wait_ns"] < events[0]["wait_ns"]  # it was waiting already
    else:
        # Delivered first: its batch number (a delivery ordinal) is 0.
        assert events[1]["batch"] == 0 and events[0]["batch"] > 0
        first = [s["sample"] for s in p["spans"] if s["op"] == "process" and s["batch"] == 0]
        assert sorted(first) == list(range(BATCH, 2 * BATCH))
    assert len(first_labels) == len(planned) == BATCHES


def test_pin_memory_on_a_machine_without_an_accelerator(tv_folder: Path) -> None:
    loader = make_loader(tv_folder, 2, pin_memory=True, multiprocessing_context="fork")
    plain_loader = make_loader(tv_folder, 2, pin_memory=True, multiprocessing_context="fork")
    with warnings.catch_warnings():
        # torch warns that there is nothing to pin for (CPU-only machines, like CI).
        warnings.filterwarnings("ignore", message=".*pin_memory.*", category=UserWarning)
        plain = list(plain_loader)
        pdl = flt.profile(loader)
        profiled = list(pdl)
    assert all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(plain, profiled))
    assert len(pipeline_of(pdl.profile_dict())["batches"]) == BATCHES


def test_the_carrier_goes_through_torchs_pinning(
    tv_folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With an accelerator, torch pins each batch: it calls the carrier's ``pin_memory``, which
    pins the batch inside with torch's own function. Here pinning is faked (no accelerator)."""

    def fake_pin(self: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        pinned = self.clone()
        pinned.fake_pinned = True  # type: ignore[attr-defined]
        return pinned

    monkeypatch.setattr(torch.accelerator, "is_available", lambda: True)
    monkeypatch.setattr(torch.accelerator, "current_accelerator", lambda *a, **k: torch.device("cuda"))
    monkeypatch.setattr(torch.Tensor, "pin_memory", fake_pin)
    torch.manual_seed(1)
    plain = list(make_loader(tv_folder, pin_memory=True))
    torch.manual_seed(1)
    pdl = flt.profile(make_loader(tv_folder, pin_memory=True))
    profiled = list(pdl)
    for (x0, y0), (x1, y1) in zip(plain, profiled):
        assert getattr(x1, "fake_pinned", False) and getattr(y1, "fake_pinned", False)
        assert torch.equal(x0, x1) and torch.equal(y0, y1)
    assert len(pipeline_of(pdl.profile_dict())["batches"]) == BATCHES


# -- one trace with the native loader; the API around it ---------------------------------------


def test_merged_with_a_native_profile_in_one_trace(tv_folder: Path, tmp_path: Path) -> None:
    with flt.profile(make_loader(tv_folder, 2, multiprocessing_context="fork")) as pdl:
        run_epochs(pdl, 1)
    native = fl.Loader(
        fl.ImageFolder(tv_folder), batch_size=BATCH, num_workers=2, profile="spans",
        transform=fl.transforms.from_torchvision(compose()),
    )
    assert len(list(native)) == BATCHES
    merged = native.profile().merge(pdl.profile())
    assert merged.labels == ["native", "torchvision"]
    merged.save_trace(tmp_path / "trace.json")
    trace = json.loads((tmp_path / "trace.json").read_text())
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    names = {e["args"]["name"] for e in events if e.get("name") == "process_name"}
    assert {"native", "torchvision"} <= names
    ops = {e.get("name") for e in events if e.get("ph") == "X"}
    assert {"decode", "RandomResizedCrop", "collate"} <= ops
    merged.save(tmp_path / "both.json")
    again = fl.Profile.load(tmp_path / "both.json")
    assert again.labels == merged.labels
    summary = str(again.summary())
    assert "native" in summary and "torchvision" in summary


def test_off_mode_iterates_the_original_and_records_nothing(tv_folder: Path) -> None:
    loader = make_loader(tv_folder)
    pdl = flt.profile(loader, mode="off")
    torch.manual_seed(2)
    plain = list(make_loader(tv_folder))
    torch.manual_seed(2)
    profiled = list(pdl)
    assert len(profiled) == BATCHES
    assert all(torch.equal(a[0], b[0]) for a, b in zip(plain, profiled))
    p = pipeline_of(pdl.profile_dict())
    assert p["mode"] == "off" and p["spans"] == [] and p["batches"] == [] and p["threads"] == []
    assert pdl.profile().labels == ["torchvision"]


@pytest.mark.parametrize("persistent", [False, True])
def test_close_joins_the_workers_of_an_unfinished_epoch(tv_folder: Path, persistent: bool) -> None:
    loader = make_loader(tv_folder, 2, multiprocessing_context="fork", persistent_workers=persistent)
    pdl = flt.profile(loader)
    assert pipeline_of(pdl.profile_dict())["batches"] == []
    epoch = iter(pdl)
    for _ in range(2):
        next(epoch)
    pids = {t["pid"] for t in pipeline_of(pdl.profile_dict())["threads"]}
    assert len(pids) == 2 and pids <= {p.pid for p in multiprocessing.active_children()}
    pdl.close()
    assert not pids & {p.pid for p in multiprocessing.active_children()}
    run_epochs(pdl, 1)  # new workers; the next epoch goes on numbering
    pdl.close()
    p = pipeline_of(pdl.profile_dict())
    assert [b["batch"] for b in p["batches"]] == list(range(2 + BATCHES))
    assert [b["size"] for b in p["batches"]] == [BATCH] * (BATCHES + 1) + [SAMPLES % BATCH]
    del epoch


def test_past_max_spans_only_batch_events_are_kept(tv_folder: Path) -> None:
    per_batch = BATCH * (len(SAMPLE_OPS) + 1) + 1  # each sample's ops and process, a collate
    pdl = flt.profile(make_loader(tv_folder), max_spans=per_batch + 3)
    run_epochs(pdl, 1)
    p = pipeline_of(pdl.profile_dict())
    assert {s["batch"] for s in p["spans"]} == {0} and len(p["spans"]) == per_batch
    assert p["stats"]["dropped_spans"] == SAMPLES * (len(SAMPLE_OPS) + 1) + BATCHES - per_batch
    assert [b["size"] for b in p["batches"]] == [BATCH] * (BATCHES - 1) + [SAMPLES % BATCH]
    assert all("planned_ns" in b and "first_started_ns" in b for b in p["batches"])
    with pytest.raises(ValueError, match="max_spans"):
        flt.profile(make_loader(tv_folder), max_spans=-1)


class Preset:
    """torchvision's reference ClassificationPresetTrain's form: it only calls its Compose."""

    def __init__(self) -> None:
        self.transforms = compose()

    def __call__(self, img: Image.Image) -> torch.Tensor:
        return self.transforms(img)  # type: ignore[no-any-return]


def test_a_preset_object_is_timed_op_by_op_as_its_compose(tv_folder: Path) -> None:
    pdl = flt.profile(make_loader(tv_folder, transform=Preset()))  # type: ignore[arg-type]
    run_epochs(pdl, 1)
    assert {s["op"] for s in pipeline_of(pdl.profile_dict())["spans"]} == {*SAMPLE_OPS, "process", "collate"}


def test_works_with_batch_size_none_and_a_subset(tv_folder: Path) -> None:
    dataset = torchvision.datasets.ImageFolder(str(tv_folder), transform=compose())
    subset = torch.utils.data.Subset(dataset, [3, 1, 4])
    pdl = flt.profile(DataLoader(subset, batch_size=None))
    items = list(pdl)
    assert [label for _, label in items] == [0, 0, 0]
    p = pipeline_of(pdl.profile_dict())
    assert [b["size"] for b in p["batches"]] == [1, 1, 1]
    assert {s["op"] for s in p["spans"]} == {*SAMPLE_OPS, "process", "collate"}
    assert sorted({s["sample"] for s in p["spans"] if "sample" in s}) == [0, 1, 2]


def test_arguments_are_checked(tv_folder: Path) -> None:
    loader = make_loader(tv_folder)
    with pytest.raises(TypeError, match="dataloader"):
        flt.profile([1, 2, 3])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="mode"):
        flt.profile(loader, mode="everything")
    with pytest.raises(TypeError, match="label"):
        flt.profile(loader, label=3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="label"):
        flt.profile(loader, label="")
    assert fl.torch is flt


class Stream(torch.utils.data.IterableDataset[Tuple[torch.Tensor, int]]):
    """Splits itself across workers; its transform draws from torch's generator."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.transform = tvT.Compose([tvT.Lambda(lambda x: x + torch.rand(2))])

    def __iter__(self) -> Any:
        info = torch.utils.data.get_worker_info()
        worker, workers = (0, 1) if info is None else (info.id, info.num_workers)
        for i in range(worker, self.n, workers):
            with flt.span("make"):
                x = torch.full((2,), float(i))
            yield self.transform(x), i


@pytest.mark.parametrize("num_workers", [0, 2])
def test_an_iterable_dataset_is_profiled_per_sample_as_it_streams(num_workers: int) -> None:
    def loader() -> DataLoader[Any]:
        return DataLoader(Stream(10), batch_size=3, num_workers=num_workers,
                          generator=torch.Generator().manual_seed(4))

    torch.manual_seed(0)  # num_workers=0 draws from the consumer's generator, as DataLoader does
    want = list(loader())
    with flt.profile(loader()) as pdl:
        torch.manual_seed(0)
        got = list(pdl)
    assert len(got) == len(want) and all(
        torch.equal(x, wx) and torch.equal(y, wy) for (x, y), (wx, wy) in zip(got, want)
    )
    p = pipeline_of(pdl.profile_dict())
    process = [s for s in p["spans"] if s["op"] == "process"]
    assert sorted(s["sample"] for s in process) == list(range(10))
    ops = {s["op"] for s in p["spans"]}
    assert {"process", "make", "Lambda", "collate"} <= ops
    assert len(p["batches"]) == len(want)


@pytest.mark.parametrize("num_workers,context", [(0, None), (2, None), (1, "spawn")])
def test_a_custom_dataset_times_its_transform_and_the_users_spans(
    tv_folder: Path, num_workers: int, context: Optional[str]
) -> None:
    dataset = Manifest(tv_folder, compose())
    loader = DataLoader(dataset, batch_size=BATCH, num_workers=num_workers, multiprocessing_context=context)
    with flt.profile(loader) as pdl:  # a spawned worker gets the timed copy made again
        torch.manual_seed(0)
        got = run_epochs(pdl, 1)
        profile = pdl.profile_dict()
    torch.manual_seed(0)
    want = run_epochs(DataLoader(dataset, batch_size=BATCH, num_workers=num_workers, multiprocessing_context=context), 1)
    assert len(got) == len(want) and all(torch.equal(a[0], b[0]) for a, b in zip(got, want))
    pipeline = pipeline_of(profile)
    assert "transform" in pipeline["meta"]["instrumented"]
    by_sample: Dict[Any, Dict[str, Any]] = {}
    for s in pipeline["spans"]:
        if s.get("sample") is not None:
            by_sample.setdefault(s["sample"], {})[s["op"]] = s
    assert sorted(by_sample) == list(range(SAMPLES))
    for spans in by_sample.values():
        # Its Image.open, which the native loader reads (test_own_dataset.py), in read and
        # decode spans (the rest of the bytes fetched, Pillow's open and load of them).
        assert set(spans) == {"process", "__getitem__", "fetch", "read", "decode", *TRANSFORM_OPS}
        outer, getitem, fetch = spans["process"], spans["__getitem__"], spans["fetch"]
        assert (outer["depth"], getitem["depth"], fetch["depth"]) == (0, 1, 2)
        assert all(spans[op]["depth"] == 2 for op in ("read", "decode", *TRANSFORM_OPS))
        assert fetch["end_ns"] <= spans["read"]["start_ns"] <= spans["decode"]["start_ns"]
        assert spans["decode"]["end_ns"] <= spans["RandomResizedCrop"]["start_ns"]
        for inner in (fetch, *(spans[op] for op in ("read", "decode", *TRANSFORM_OPS))):
            assert getitem["start_ns"] <= inner["start_ns"] <= inner["end_ns"] <= getitem["end_ns"]
    # The report names the dataset's own time for what it is.
    from ferroloader.cli import report

    summary = fl.Profile.from_dict(profile).summary().pipelines[0]
    stages = report.stage_times(summary)
    assert stages["getitem"] > 0 and stages["fetch"] > 0
    assert report.stage_of("__getitem__") == "getitem"


def test_span_outside_a_profiled_sample_does_nothing() -> None:
    with flt.span("anything") as sp:
        pass
    assert sp.name == "anything"
    with pytest.raises(ValueError, match="propagates"):
        with flt.span("failing"):
            raise ValueError("propagates")
