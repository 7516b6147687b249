"""``Loader.profile()`` and ``ferroloader.Profile``: what a profiled native run records, its
exports (JSON, trace, summary), merging, errors, and the counter groups Python code can open."""

from __future__ import annotations

import csv
import io
import json
import threading
import time
from pathlib import Path
from typing import Any, Dict, List

import pytest

import ferroloader as fl
from ferroloader import _native
from ferroloader import transforms as T

from conftest import IMAGENET_MEAN, IMAGENET_STD

# 18 samples in batches of 4: 5 batches, the last one short.
BATCHES = 5


def make(folder: Path, profile: str, **kw: Any) -> fl.Loader:
    transform = T.Compose(
        [T.RandomResizedCrop(32), T.RandomHorizontalFlip(), T.ToTensor(), T.Normalize(IMAGENET_MEAN, IMAGENET_STD)]
    )
    return fl.Loader(fl.ImageFolder(folder), batch_size=4, num_workers=2, transform=transform, profile=profile, **kw)


def worker_spans(pipeline: Dict[str, Any]) -> List[Dict[str, Any]]:
    return [s for s in pipeline["spans"] if s["worker"] < 2**32 - 1]


def test_off_records_nothing(folder: Path) -> None:
    loader = make(folder, "off")
    assert len(list(loader)) == BATCHES
    native = loader.profile().pipeline("native")
    assert native["spans"] == [] and native["batches"] == []


@pytest.mark.parametrize("mode", ["spans", "counters"])
def test_every_sample_has_its_op_spans_and_every_batch_its_events(folder: Path, mode: str) -> None:
    loader = make(folder, mode)
    for _ in range(2):
        assert len(list(loader)) == BATCHES
    profile = loader.profile()
    assert profile.labels == ["native"] and len(profile) == 1
    native = profile.pipeline("native")
    assert native["mode"] == mode and native["num_workers"] == 2 and native["batch_size"] == 4
    assert native["meta"]["decoder"] == "turbo"
    assert json.loads(native["meta"]["pipeline"])["ops"][0]["op"] == "RandomResizedCrop"
    spans = worker_spans(native)
    # Every sample of both epochs has one `process` span holding its ops.
    process = [s for s in spans if s["op"] == "process"]
    assert len(process) == 2 * 18
    for op in ("read", "decode", "fused"):
        assert sum(s["op"] == op for s in spans) >= 2 * 18, op
    # A new loader touches each new batch buffer's pages once, before the slot's other ops, so
    # that page faults do not land in `fused`. `list()` holds a whole epoch, so the first one
    # touches every slot; the second reuses the buffers the ring kept (all but one).
    touched = {(s["batch"], s["sample"]) for s in spans if s["op"] == "first_touch"}
    first_epoch = {(s["batch"], s["sample"]) for s in process if s["batch"] < BATCHES}
    assert first_epoch <= touched and len(touched) < 2 * 18
    for s in spans:
        assert s["start_ns"] <= s["end_ns"]
    # Batch numbers are unique across epochs; every batch was delivered with a wait.
    batches = native["batches"]
    assert sorted(b["batch"] for b in batches) == list(range(2 * BATCHES))
    assert all(b.get("delivered_ns") and b.get("wait_ns") is not None for b in batches)
    if mode == "counters":
        available = native["counters"]["software"]["available"]
        assert available == any("task_clock" in (s.get("counters") or {}) for s in spans)
        if not native["counters"]["hardware"]["available"]:
            assert native["counters"]["hardware"]["reason"]


def test_profile_after_breaking_out_has_the_workers_spans(folder: Path) -> None:
    """The epoch ends on its own thread after the loop is left: profile() waits for it."""
    loader = make(folder, "spans")
    for i, _ in enumerate(loader):
        if i == 1:
            break
    spans = worker_spans(loader.profile().pipeline("native"))
    assert sum(s["op"] == "process" for s in spans) >= 8


def test_take_profile_starts_afresh(folder: Path) -> None:
    loader = make(folder, "spans")
    list(loader)
    first = loader.take_profile().pipeline("native")
    assert len(first["batches"]) == BATCHES
    assert loader.profile().pipeline("native")["batches"] == []
    list(loader)
    assert len(loader.profile().pipeline("native")["batches"]) == BATCHES


def test_exports_round_trip_and_merge(folder: Path, tmp_path: Path) -> None:
    loader = make(folder, "spans")
    list(loader)
    profile = loader.profile()
    profile.save(tmp_path / "profile.json")
    again = fl.Profile.load(tmp_path / "profile.json")
    assert again.to_dict() == profile.to_dict()
    assert fl.Profile.from_dict(profile.to_dict()).to_dict() == profile.to_dict()

    merged = profile.merge(again)
    assert merged.labels == ["native", "native#2"]
    merged.save_trace(tmp_path / "trace.json")
    trace = json.loads((tmp_path / "trace.json").read_text())
    process_names = {
        e["args"]["name"] for e in trace["traceEvents"] if e.get("ph") == "M" and e.get("name") == "process_name"
    }
    assert {"native", "native#2"} <= process_names
    assert sum(e.get("ph") == "X" for e in trace["traceEvents"]) >= 2 * len(profile.pipeline("native")["spans"])

    summary = merged.summary()
    table = str(summary)
    assert "native" in table and "decode" in table
    data = summary.to_dict()
    assert [p["label"] for p in data["pipelines"]] == ["native", "native#2"]
    summary.save_json(tmp_path / "summary.json")
    assert json.loads((tmp_path / "summary.json").read_text()) == data
    summary.save_csv(tmp_path / "summary.csv")
    rows = list(csv.DictReader(io.StringIO((tmp_path / "summary.csv").read_text())))
    assert {r["op"] for r in rows} >= {"read", "decode", "fused", "process"}


def test_bad_profiles_are_refused_with_the_reason(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        fl.Profile.load(tmp_path / "missing.json")
    with pytest.raises(ValueError, match="not a ferroloader profile"):
        fl.Profile.from_dict({"schema": "chrome.trace", "version": 1, "pipelines": []})
    with pytest.raises(ValueError, match="newer"):
        fl.Profile.from_dict({"schema": "ferroloader.profile", "version": 99, "pipelines": []})
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ValueError, match="JSON"):
        fl.Profile.load(tmp_path / "bad.json")


def test_a_python_written_pipeline_loads_with_defaults() -> None:
    """The minimal pipeline a Python writer may produce: optional fields left out."""
    profile = fl.Profile.from_dict(
        {
            "schema": "ferroloader.profile",
            "version": 1,
            "pipelines": [
                {
                    "label": "torchvision",
                    "start_ns": 0,
                    "end_ns": 2_000,
                    "spans": [{"op": "ToTensor", "worker": 0, "start_ns": 10, "end_ns": 510}],
                    "batches": [{"batch": 0, "wait_ns": 100}],
                }
            ],
        }
    )
    pipeline = profile.pipeline("torchvision")
    assert pipeline["spans"][0]["depth"] == 0
    assert "ToTensor" in str(profile.summary())


def test_counter_group_counts_the_calling_thread() -> None:
    group = _native.CounterGroup()
    availability = group.availability
    assert set(availability) >= {"hardware", "software"}
    if not availability["software"]["available"]:
        pytest.skip(f"no software counters here: {availability['software'].get('reason')}")
    assert "task_clock" in group.names
    # Spin for 20 ms of this thread's CPU time, not of wall time: on a loaded machine the
    # thread may get only part of a wall-clock interval (CI once saw 8.6 ms of 20).
    cpu_before = time.thread_time_ns()
    before = group.read()
    while time.thread_time_ns() - cpu_before < 20_000_000:
        pass
    after = group.read()
    spun = time.thread_time_ns() - cpu_before
    assert len(before) == len(after) == len(group.names)
    task_clock = dict(zip(group.names, (b - a for a, b in zip(before, after))))["task_clock"]
    # The counter and the clock both count this thread's CPU time, read a moment apart.
    assert 0.5 * spun <= task_clock <= spun + 5_000_000

    errors: List[BaseException] = []

    def read_elsewhere() -> None:
        try:
            group.read()
        except RuntimeError as e:
            errors.append(e)

    thread = threading.Thread(target=read_elsewhere)
    thread.start()
    thread.join()
    assert errors and "thread" in str(errors[0])


def test_counter_group_reports_why_a_group_is_missing() -> None:
    group = _native.CounterGroup(hardware=False)
    hardware = group.availability["hardware"]
    assert hardware["available"] is False and "disabled" in hardware["reason"]
    assert not any(name in group.names for name in ("cycles", "instructions"))


def test_now_ns_is_the_clock_of_time_monotonic_ns() -> None:
    a = time.monotonic_ns()
    b = _native.now_ns()
    c = time.monotonic_ns()
    assert a <= b <= c


def test_batch_arrays_are_writable_views(folder: Path) -> None:
    loader = make(folder, "off", tensor_type="numpy")
    images, labels = next(iter(loader))
    assert images.flags.writeable and labels.flags.writeable
    images[0] = 0.0
    labels[:] = -1
    assert float(images[0].sum()) == 0.0 and (labels == -1).all()
