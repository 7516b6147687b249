"""The typed views of a profile and its summary (``ferroloader.profiling``) name exactly the
fields of the native JSON and carry its values; the native ``ProfileBuilder`` turns raw
records into a profile and refuses bad ones with an error naming the cause."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Dict, Literal, Mapping, Set

import pytest

import ferroloader as fl
from ferroloader import _native
from ferroloader import profiling as views
from ferroloader import transforms as T


def fields(cls: Any) -> Set[str]:
    return {f.name for f in dataclasses.fields(cls)}


def check_view(view: Any, data: Mapping[str, Any]) -> None:
    """Every key of ``data`` is a field of ``view`` with the same value (nested views too)."""
    assert set(data) <= fields(type(view)), (type(view).__name__, set(data) - fields(type(view)))
    plain = dataclasses.asdict(view)

    def same(a: Any, b: Any) -> bool:
        if isinstance(b, Mapping):
            return all(same(a[k], v) for k, v in b.items())
        if isinstance(b, list):
            return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
        return bool(a == b)

    for key, value in data.items():
        assert same(plain[key], value), (type(view).__name__, key)


def native_profile(folder: Path, mode: Literal["spans", "counters"]) -> fl.Profile:
    loader = fl.Loader(fl.ImageFolder(folder), batch_size=4, num_workers=2, profile=mode,
                       transform=T.Compose([T.RandomResizedCrop(16), T.ToTensor()]))
    assert len(list(loader)) == 5
    return loader.profile()


def test_summary_views_name_exactly_the_native_summary_fields(folder: Path) -> None:
    summary = native_profile(folder, "counters").summary()
    (data,) = summary.to_dict()["pipelines"]
    (view,) = summary.pipelines
    # The summary's JSON writes every field, so the names must match both ways.
    assert set(data) == fields(views.PipelineSummary)
    assert set(data["ops"][0]) == fields(views.OpSummary)
    assert set(data["ops"][0]["derived"]) == fields(views.DerivedMetrics)
    assert set(data["wait_buckets"]) == fields(views.WaitBuckets)
    assert set(data["batch_latency"]) == fields(views.Distribution)
    assert set(data["workers"][0]) == fields(views.WorkerSummary)
    check_view(view, data)
    assert summary.pipeline("native") is view
    assert view.images == 18 and view.ops[0].count > 0
    with pytest.raises(KeyError, match="torchvision"):
        summary.pipeline("torchvision")


def test_profile_views_carry_every_field_of_a_recorded_profile(folder: Path) -> None:
    profile = native_profile(folder, "counters")
    (data,) = profile.to_dict()["pipelines"]
    (view,) = profile.pipelines
    check_view(view, data)
    assert view.wall_ns == data["end_ns"] - data["start_ns"]
    assert isinstance(view.spans[0], views.Span) and isinstance(view.batches[0], views.Batch)
    assert {s.worker for s in view.spans} >= {0, 1}


def full_pipeline() -> Dict[str, Any]:
    """A pipeline with every optional field of every record set."""
    availability = {
        "hardware": {"available": False, "reason": "no PMU", "exclude_kernel": False,
                     "events": [{"counter": "cycles", "available": False, "reason": "no PMU"}]},
        "software": {"available": True, "exclude_kernel": True,
                     "events": [{"counter": "task_clock", "available": True}]},
        "perf_event_paranoid": 2,
    }
    return {
        "label": "mine", "pid": 7, "mode": "counters", "num_workers": 1, "batch_size": 2,
        "start_ns": 10, "end_ns": 500, "meta": {"decoder": "PIL"}, "counters": availability,
        "threads": [{"worker": 0, "name": "worker-0", "pid": 8, "tid": 9,
                     "counters": availability,
                     "stats": {"dropped_spans": 1, "unbalanced_exits": 2, "counter_read_errors": 3,
                               "counter_running_fraction": 0.5, "moved_across_threads": True}}],
        "spans": [{"op": "decode", "worker": 0, "batch": 0, "sample": 3, "start_ns": 20,
                   "end_ns": 40, "depth": 1, "counters": {"task_clock": 15}, "bytes": 4096}],
        "batches": [{"batch": 0, "size": 2, "planned_ns": 11, "first_started_ns": 20,
                     "completed_ns": 60, "completed_by": 0, "delivered_ns": 70, "wait_ns": 5,
                     "out_of_order": True, "queue_occupancy": 1}],
        "failures": [{"worker": 0, "batch": 0, "sample": 4, "t_ns": 50, "op": "decode",
                      "cause": "bad"}],
        "stats": {"dropped_spans": 1, "unbalanced_exits": 0, "counter_read_errors": 0,
                  "unflushed_recorders": 0},
    }


def test_a_record_with_every_field_set_reads_into_views_naming_them_all() -> None:
    profile = fl.Profile.from_dict({"schema": _native.PROFILE_SCHEMA,
                                    "version": _native.PROFILE_SCHEMA_VERSION,
                                    "pipelines": [full_pipeline()]})
    (data,) = profile.to_dict()["pipelines"]  # what the native side writes back
    (view,) = profile.pipelines
    for cls, record in (
        (views.Pipeline, data), (views.Thread, data["threads"][0]),
        (views.ThreadStats, data["threads"][0]["stats"]), (views.Span, data["spans"][0]),
        (views.Batch, data["batches"][0]), (views.Failure, data["failures"][0]),
        (views.PipelineStats, data["stats"]), (views.CounterStatus, data["counters"]),
        (views.CounterGroupStatus, data["counters"]["hardware"]),
        (views.CounterEvent, data["counters"]["hardware"]["events"][0]),
    ):
        assert set(record) == fields(cls), cls.__name__
    check_view(view, data)
    assert view.threads[0].counters == view.counters
    assert view.counters.software.events[0].counter == "task_clock"


def test_the_schema_constants_come_from_the_native_side() -> None:
    assert _native.PROFILE_SCHEMA == "ferroloader.profile"
    assert _native.CONSUMER == 2**32 - 1
    assert "task_clock" in _native.COUNTER_NAMES and len(set(_native.COUNTER_NAMES)) == 12
    unavailable = fl.Profile.from_dict({
        "schema": _native.PROFILE_SCHEMA, "version": 1,
        "pipelines": [{"label": "x", "start_ns": 0, "end_ns": 0,
                       "counters": __import__("json").loads(_native.counters_unavailable("why"))}],
    }).pipelines[0].counters
    events = unavailable.hardware.events + unavailable.software.events
    assert {e.counter for e in events} == set(_native.COUNTER_NAMES)
    assert all(not e.available and e.reason == "why" for e in events)


def builder(mode: str = "spans") -> _native.ProfileBuilder:
    return _native.ProfileBuilder("py", mode, pid=1, num_workers=1, batch_size=2, start_ns=5,
                                  end_ns=100, meta={"k": "v"}, dropped_spans=0)


def test_the_builder_makes_a_profile_from_raw_records() -> None:
    b = builder()
    w = b.process(0, 11, 12, (), None)
    b.plan(0, 6, (0, 1))
    records = [("process", 0, 10, 20, 0), ("decode", 0, 11, 19, 1), ("process", 1, 21, 30, 0),
               ("collate", None, 31, 40, 0)]
    assert b.deliver(w, 0, records, 40, 41, 45, None) == 0
    b.failure(w, "not-an-index", 50, "decode", "bad", [("process", "not-an-index", 46, 50, 0)])
    profile = views.Profile(b.finish())
    (p,) = profile.pipelines
    assert (p.label, p.mode, p.meta["k"], p.meta["worker_pids"]) == ("py", "spans", "v", "0:11")
    (batch,) = p.batches
    assert (batch.size, batch.planned_ns, batch.first_started_ns, batch.wait_ns) == (2, 6, 10, 4)
    assert [s.op for s in p.spans] == ["process", "decode", "process", "collate", "process"]
    assert p.spans[-1].batch is None and p.spans[-1].sample is None
    assert p.failures[0].sample is None and p.failures[0].cause == "bad"
    assert not p.counters.software.available
    assert p.counters.software.reason == "profiler mode is spans"


def test_the_builder_refuses_bad_input_naming_it() -> None:
    with pytest.raises(ValueError, match="mode"):
        builder("everything")
    b = builder("counters")
    with pytest.raises(ValueError, match='unknown counter name "tsc"'):
        b.process(0, 1, 1, ("tsc",), None)
    with pytest.raises(ValueError, match="JSON"):
        b.process(0, 1, 1, (), "{not json")
    w = b.process(0, 1, 1, ("task_clock",), _native.counters_unavailable("none"))
    with pytest.raises(ValueError, match="was not returned"):
        b.deliver(w + 1, 0, [], 1, 1, 1, None)
    with pytest.raises(TypeError, match="expected tuples"):
        b.deliver(w, 0, [["process", 0, 1, 2, 0]], 1, 1, 1, None)  # type: ignore[list-item]
    with pytest.raises(ValueError, match="5 or 7 items"):
        b.deliver(w, 0, [("process", 0, 1)], 1, 1, 1, None)
    with pytest.raises(ValueError, match="depth .* cannot be 300"):
        b.deliver(w, 0, [("process", 0, 1, 2, 300)], 1, 1, 1, None)
    with pytest.raises(ValueError, match="start_ns cannot be -1"):
        b.deliver(w, 0, [("process", 0, -1, 2, 0)], 1, 1, 1, None)
    with pytest.raises(ValueError, match="counter readings"):
        b.deliver(w, 0, [("process", 0, 1, 2, 0, (1, 2), (3, 4))], 1, 1, 1, None)
    with pytest.raises(ValueError, match="before its start"):
        b.failure(w, 0, 1, "decode", "x", [("decode", 0, 9, 2, 0)])
    b.finish()
    with pytest.raises(RuntimeError, match="already finished"):
        b.finish()
