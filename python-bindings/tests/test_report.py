"""The report: ``ferroloader.cli.report.write_html``/``write_report`` (``fl.report``) on a
profile of both pipelines, checked as files and as a page rendered in headless Chromium (Debian's
``chromium``, driven by Playwright): it renders, every plot is there and has a size, and the
page fetches nothing but itself. The test saves a screenshot to target/report-screenshot.png.

The profile is hand-made (a deterministic imitation of real recordings, every section filled:
counters, a sweep) so that the page and the screenshot do not depend on the machine's speed;
``test_cli.py`` runs the real pipelines into a report.
"""

from __future__ import annotations

import json
import random
import re
import shutil
from pathlib import Path
from typing import Any, Dict, Iterator, List

import pytest

import ferroloader as fl
from ferroloader.cli import report

CHROMIUM = "/usr/bin/chromium"
# Where the screenshot goes: the repository's target/ folder.
SCREENSHOT = Path(__file__).resolve().parents[2] / "target" / "report-screenshot.png"
# Flags known to keep Chromium quiet on machines with no network (no background fetches).
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
FIGURES = ["fig-sweep", "fig-ops-total", "fig-ops", "fig-throughput", "fig-latency",
           "fig-timeline", "fig-counters"]

Json = Dict[str, Any]

# -- a profile of both pipelines ------------------------------------------------------------------

_SOFTWARE_ONLY = {
    "hardware": {
        "available": False,
        "reason": "perf_event_open(cycles): No such file or directory (os error 2): "
        "this machine exposes no hardware PMU (common in VMs and containers)",
        "exclude_kernel": False,
        "events": [
            {"counter": c, "available": False, "reason": "no hardware PMU"}
            for c in ("cycles", "instructions", "cache_references", "cache_misses",
                      "branch_instructions", "branch_misses")
        ],
    },
    "software": {
        "available": True,
        "exclude_kernel": True,
        "events": [
            {"counter": c, "available": True}
            for c in ("task_clock", "page_faults", "context_switches", "cpu_migrations")
        ],
    },
    "perf_event_paranoid": 2,
}

_MS = 1_000_000


def _torchvision(rng: random.Random, t0: int, batches: int, batch_size: int, step_ms: float) -> Json:
    workers = 2
    spans: List[Json] = []
    records: List[Json] = []
    free = [t0 + 40 * _MS + w * 3 * _MS for w in range(workers)]  # worker start-up
    completed: List[int] = []
    for b in range(batches):
        w = b % workers
        t = free[w]
        first = t
        for i in range(batch_size):
            sample = b * batch_size + i
            s0 = t
            ops = (("read", 0.08), ("decode", 3.1), ("RandomResizedCrop", 1.9),
                   ("RandomHorizontalFlip", 0.06), ("ToTensor", 0.9), ("Normalize", 0.45))
            t += int(0.02 * _MS)
            for op, ms in ops:
                d = int(ms * rng.uniform(0.7, 1.5) * _MS)
                spans.append({"op": op, "worker": w, "batch": b, "sample": sample,
                              "start_ns": t, "end_ns": t + d, "depth": 1})
                t += d
            t += int(0.03 * _MS)
            spans.append({"op": "process", "worker": w, "batch": b, "sample": sample,
                          "start_ns": s0, "end_ns": t, "depth": 0})
        d = int(0.6 * _MS * rng.uniform(0.8, 1.3))
        spans.append({"op": "collate", "worker": w, "batch": b, "start_ns": t, "end_ns": t + d})
        t += d
        free[w] = t
        completed.append(t)
        records.append({"batch": b, "size": batch_size, "first_started_ns": first,
                        "completed_ns": t, "completed_by": w})
    consumer = t0 + 2 * _MS
    for r in records:
        ready = r["completed_ns"] + int(1.5 * _MS)  # unpickling through the result queue
        wait = max(0, ready - consumer)
        r["delivered_ns"] = consumer + wait
        r["wait_ns"] = wait
        r["queue_occupancy"] = 0 if wait else 1
        consumer = r["delivered_ns"] + int(step_ms * _MS)
    return {
        "label": "torchvision", "pid": 1000, "mode": "spans", "num_workers": workers,
        "batch_size": batch_size, "start_ns": t0, "end_ns": consumer,
        "meta": {"decoder": "PIL"},
        "threads": [{"worker": w, "name": f"worker-{w}", "pid": 1001 + w, "tid": 1001 + w}
                    for w in range(workers)],
        "spans": sorted(spans, key=lambda s: s["start_ns"]), "batches": records,
        "failures": [], "stats": {},
    }


def _native(rng: random.Random, t0: int, batches: int, batch_size: int, step_ms: float) -> Json:
    workers = 2
    spans: List[Json] = []
    free = [t0 + 1 * _MS, t0 + int(1.2 * _MS)]
    first: Dict[int, int] = {}
    done: Dict[int, int] = {}
    left = {b: batch_size for b in range(batches)}
    for sample in range(batches * batch_size):
        b = sample // batch_size
        w = min(range(workers), key=lambda i: free[i])
        t = free[w]
        first.setdefault(b, t)
        d = int(0.03 * _MS * rng.uniform(0.7, 1.4))
        spans.append({"op": "read", "worker": w, "batch": b, "sample": sample, "start_ns": t,
                      "end_ns": t + d, "depth": 0,
                      "counters": {"task_clock": int(d * 0.6), "page_faults": 0,
                                   "context_switches": 0, "cpu_migrations": 0}})
        t += d
        p0 = t
        t += int(0.005 * _MS)
        for op, ms, faults in (("decode", 1.3, 2), ("crop_params", 0.004, 0), ("fused", 0.35, 0)):
            d = int(ms * rng.uniform(0.75, 1.35) * _MS)
            spans.append({"op": op, "worker": w, "batch": b, "sample": sample, "start_ns": t,
                          "end_ns": t + d, "depth": 1,
                          "counters": {"task_clock": int(d * 0.97), "page_faults": faults,
                                       "context_switches": 0, "cpu_migrations": 0}})
            t += d
        t += int(0.004 * _MS)
        spans.append({"op": "process", "worker": w, "batch": b, "sample": sample,
                      "start_ns": p0, "end_ns": t, "depth": 0,
                      "counters": {"task_clock": int((t - p0) * 0.97), "page_faults": 2,
                                   "context_switches": 0, "cpu_migrations": 0}})
        free[w] = t
        left[b] -= 1
        if left[b] == 0:
            done[b] = t
    records = []
    consumer = t0 + int(0.5 * _MS)
    for b in range(batches):
        wait = max(0, done[b] - consumer)
        delivered = consumer + wait
        records.append({"batch": b, "size": batch_size, "first_started_ns": first[b],
                        "completed_ns": done[b], "delivered_ns": delivered, "wait_ns": wait,
                        "out_of_order": False, "queue_occupancy": 0 if wait else 1})
        consumer = delivered + int(step_ms * _MS)
    return {
        "label": "native", "pid": 1000, "mode": "counters", "num_workers": workers,
        "batch_size": batch_size, "start_ns": t0, "end_ns": consumer,
        "meta": {"decoder": "turbo"}, "counters": _SOFTWARE_ONLY,
        "threads": [{"worker": w, "name": f"ferroloader-worker-{w}", "tid": 2001 + w}
                    for w in range(workers)],
        "spans": sorted(spans, key=lambda s: s["start_ns"]), "batches": records,
        "failures": [], "stats": {},
    }


def synthetic_profile(batches: int = 12, batch_size: int = 16, step_ms: float = 20.0) -> Json:
    """Both pipelines, one after the other on one clock, as ``ferroloader compare`` records
    them."""
    rng = random.Random(6)
    tv = _torchvision(rng, 10_000 * _MS, batches, batch_size, step_ms)
    nat = _native(rng, tv["end_ns"] + 50 * _MS, batches, batch_size, step_ms)
    return {"schema": "ferroloader.profile", "version": 1, "clock": "CLOCK_MONOTONIC",
            "pipelines": [tv, nat]}


SWEEP = [
    {"pipeline": "torchvision", "workers": 1, "images_per_s": 61.0, "cpu_s_per_image": 0.0162},
    {"pipeline": "torchvision", "workers": 2, "images_per_s": 104.0, "cpu_s_per_image": 0.0171},
    {"pipeline": "torchvision", "workers": 4, "images_per_s": 108.0, "cpu_s_per_image": 0.0190},
    {"pipeline": "native", "workers": 1, "images_per_s": 452.0, "cpu_s_per_image": 0.0021},
    {"pipeline": "native", "workers": 2, "images_per_s": 871.0, "cpu_s_per_image": 0.0022},
    {"pipeline": "native", "workers": 4, "images_per_s": 880.0, "cpu_s_per_image": 0.0023},
]


# -- tests ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> report.ReportFiles:
    from ferroloader.cli.compare import mark_enough

    points = [dict(p) for p in SWEEP]
    mark_enough(points)
    profile = fl.Profile.from_dict(synthetic_profile())
    return report.write_report(
        profile,
        tmp_path_factory.mktemp("report"),
        command="ferroloader compare /data/train --batch-size 16 --step-ms 20 --counters",
        config={"data": "/data/train (192 files in 8 classes)", "batch size": "16",
                "workers": "2", "step ms": "20", "profile mode": "counters"},
        sweep=points,
        cpu_per_image={"torchvision": 0.0081, "native": 0.0019},
    )


def test_the_folder_holds_every_file(written: report.ReportFiles) -> None:
    for path in (written.html, written.trace, written.profile, written.summary_json,
                 written.summary_csv):
        assert path.is_file() and path.stat().st_size > 0, path
    assert fl.Profile.load(written.profile).labels == ["torchvision", "native"]
    summary = json.loads(written.summary_json.read_text())
    assert [p["label"] for p in summary["pipelines"]] == ["torchvision", "native"]
    assert written.summary_csv.read_text().startswith("pipeline,op,count,")


def test_the_page_is_self_contained(written: report.ReportFiles) -> None:
    page = written.html.read_text()
    assert page.startswith("<!DOCTYPE html>")
    for fig in FIGURES:
        assert f'id="{fig}"' in page, fig
    assert "<script" not in page and "<link" not in page and "@import" not in page
    # Nothing is loaded from elsewhere: every src/xlink:href/url() is inline (data: or #id).
    refs = re.findall(r'(?:src|xlink:href)="([^"]*)"|url\(([^)]*)\)', page)
    for ref in (a or b for a, b in refs):
        assert ref.startswith(("data:", "#")), ref
    # The op-name mapping and the counters' availability are spelled out.
    assert "RandomResizedCrop" in page and "crop_params" in page and "fused" in page
    assert "no hardware PMU" in page and "task_clock" in page
    assert "more workers stop paying off" in page


def test_write_html_takes_a_single_pipeline_or_a_dict(tmp_path: Path) -> None:
    data = synthetic_profile()
    data["pipelines"] = data["pipelines"][1:]
    native = fl.Profile.from_dict(data)
    report.write_html(native, tmp_path / "native.html")
    page = (tmp_path / "native.html").read_text()
    assert 'class="card hero"' not in page  # no speedup without two pipelines to compare
    assert 'id="fig-timeline"' in page and 'id="fig-sweep"' not in page
    report.write_html(data, tmp_path / "from-dict.html", title="just native")
    assert "<title>just native</title>" in (tmp_path / "from-dict.html").read_text()
    # A profile with no pipelines still makes a page.
    empty = {"schema": "ferroloader.profile", "version": 1, "pipelines": []}
    report.write_html(empty, tmp_path / "empty.html")
    assert "no pipelines" in (tmp_path / "empty.html").read_text()


def test_op_names_map_to_one_stage() -> None:
    assert report.stage_of("RandomResizedCrop") == report.stage_of("resize") == "crop"
    assert report.stage_of("ToTensor") == report.stage_of("to_tensor")
    # An eval pipeline, and v2's spelling of the conversion, pair with the native ops.
    assert report.stage_of("Resize") == report.stage_of("CenterCrop") == "crop"
    assert report.stage_of("ResizeKeepRatio") == report.stage_of("RandomResizedCropAndInterpolation") == "crop"
    assert report.stage_of("ToImage") == report.stage_of("ToDtype") == "to_tensor"
    assert report.stage_of("my_custom_op") == "my_custom_op"
    assert report.ratio(3.0, 1.0) == "3.0×" and report.ratio(1.0, 0.0) == "–"
    assert report.ratio(500.0, 1.0) == ">100×"


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Headless Debian Chromium driven by Playwright. Missing pieces fail the test with what to
    install: CI installs both (`make deps`, requirements-dev.txt); a silent skip would hide a
    page that no longer renders."""
    if shutil.which(CHROMIUM) is None and not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} not found: install Debian's chromium package (`make deps` does)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail("playwright is not installed: pip install -r requirements-dev.txt")
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            yield b
        finally:
            b.close()


def test_the_page_renders_in_chromium_with_every_plot_and_no_network(
    written: report.ReportFiles, browser: Any
) -> None:
    # bypass_csp: the page forbids fetches itself; let any reference through to the router,
    # so that one would be seen (and aborted) here, not silently blocked.
    context = browser.new_context(viewport={"width": 1280, "height": 900}, bypass_csp=True)
    page = context.new_page()
    requests: List[str] = []
    errors: List[str] = []

    def route(r: Any) -> None:
        requests.append(r.request.url)
        if r.request.url.startswith(("file:", "data:")):
            r.continue_()
        else:
            r.abort()

    page.route("**/*", route)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.goto(written.html.as_uri())
    page.wait_for_load_state("load")

    outside = [u for u in requests if not u.startswith(("file:", "data:"))]
    assert outside == [], f"the report fetched {outside}"
    assert errors == []
    assert page.title().startswith("ferroloader")
    # Every plot is in the DOM, as an SVG with a real size on screen.
    sizes = page.evaluate(
        """() => Array.from(document.querySelectorAll('figure.plot')).map(f => {
               const s = f.querySelector('svg');
               const r = s ? s.getBoundingClientRect() : {width: 0, height: 0};
               return [f.id, r.width, r.height, s ? s.querySelectorAll('path').length : 0];
           })"""
    )
    ids = [s[0] for s in sizes]
    assert sorted(ids) == sorted(FIGURES)
    for fig_id, width, height, paths in sizes:
        assert width > 600 and height > 100, (fig_id, width, height)
        assert paths > 5, (fig_id, paths)
    # The page fits the window's width (no sideways scrolling) and has its sections.
    assert page.evaluate("document.documentElement.scrollWidth") <= 1280
    headings = page.evaluate("Array.from(document.querySelectorAll('h2')).map(h => h.textContent)")
    assert "Worker timeline" in headings and "CPU counters per op" in headings
    SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOT), full_page=True)
    assert SCREENSHOT.stat().st_size > 50_000
    context.close()


# -- honest reports ---------------------------------------------------------------------------------


def _relabel(data: Json, *labels: str) -> Json:
    out = dict(data)
    out["pipelines"] = [dict(p, label=label) for p, label in zip(data["pipelines"], labels)]
    return out


def test_a_short_run_is_flagged_and_a_long_one_is_not(tmp_path: Path) -> None:
    short = fl.Profile.from_dict(synthetic_profile(batches=6))
    warnings = report.profile_warnings(short)
    assert len(warnings) == 2 and all("too short" in w for w in warnings), warnings
    report.write_html(short, tmp_path / "short.html")
    page = (tmp_path / "short.html").read_text()
    assert 'id="warnings"' in page and "too short" in page and "nothing dropped" not in page
    long = fl.Profile.from_dict(synthetic_profile(batches=60, step_ms=60.0))
    assert report.profile_warnings(long) == []


def test_worker_time_far_above_cpu_time_is_flagged() -> None:
    profile = fl.Profile.from_dict(synthetic_profile(batches=60, step_ms=60.0))
    summary = profile.summary().to_dict()["pipelines"]
    worker_s = {s["label"]: s["busy_ns"] / s["images"] / 1e9 for s in summary}
    # The OS counted about as much CPU as the workers' spans: no note.
    assert report.profile_warnings(profile, worker_s) == []
    # A third of it: the workers waited for a core.
    third = {label: v / 3 for label, v in worker_s.items()}
    notes = report.profile_warnings(profile, third)
    assert len(notes) == 2 and all("waited for a core" in n for n in notes), notes


def test_an_empty_profile_says_profiling_was_off(tmp_path: Path) -> None:
    folder = tmp_path / "data"
    for c in range(2):
        (folder / f"c{c}").mkdir(parents=True)
        for i in range(2):
            from PIL import Image

            Image.new("RGB", (40, 30), (c * 90, i * 60, 20)).save(folder / f"c{c}" / f"{i}.jpg")
    loader = fl.Loader(
        fl.ImageFolder(folder), batch_size=2, num_workers=1, profile="off",
        transform=fl.transforms.Compose([fl.transforms.CenterCrop(16), fl.transforms.ToTensor()]),
    )
    for _ in loader:
        pass
    notes = report.profile_warnings(loader.profile())
    assert len(notes) == 1 and "profiling was off" in notes[0], notes
    report.write_html(loader.profile(), tmp_path / "off.html")
    page = (tmp_path / "off.html").read_text()
    assert "profiling was off" in page and "nothing dropped" not in page


def test_the_speedup_card_takes_any_two_labels(tmp_path: Path) -> None:
    data = _relabel(synthetic_profile(batches=60, step_ms=60.0), "before", "after")
    report.write_html(data, tmp_path / "mine.html")
    page = (tmp_path / "mine.html").read_text()
    assert 'class="card hero"' in page
    hero = page.split('class="card hero"', 1)[1].split("</div></div>", 1)[0]
    assert "after" in hero and "vs before" in hero
