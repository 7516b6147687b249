"""``fl.advise`` and ``ferroloader advise``: the cache ladder, the strategies, the worker sweep
and the verdict on a small folder of large-ish images (640x480, so that resizing to 256
matters). Checked for structure and consistency, not for machine-dependent figures: batch
replay is the fastest stage, a prepared dataset loads faster than its source, uint8 output is
exact and a re-encoded copy is not, a long step is not input-bound, the budget skips what does
not fit, ``advice.json``'s schema, the page's first section, the command line end to end."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Dict, List, Tuple

import numpy as np
import pytest
from click.testing import CliRunner
from PIL import Image

import ferroloader as fl
from ferroloader import transforms as T
from ferroloader.cli.advisor import LADDER, parse_size, prepare_decoded
from ferroloader.cli.commands import main

from conftest import natural_image

STRATEGIES = ["online", "resized-256", "resized-320", "decoded-uint8", "uint8-output"]


@pytest.fixture(scope="module")
def photos(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """2 classes x 6 JPEGs of 640x480 (one a PNG)."""
    root = tmp_path_factory.mktemp("photos")
    rng = np.random.default_rng(5)
    for c in ("cat", "dog"):
        (root / c).mkdir()
        for i in range(6):
            pixels = natural_image(rng, 640, 480) if i % 2 else natural_image(rng, 480, 640)
            suffix = "png" if (c, i) == ("dog", 3) else "jpg"
            Image.fromarray(pixels).save(root / c / f"{i}.{suffix}", quality=90)
    return root


@pytest.fixture(scope="module")
def advice(photos: Path, tmp_path_factory: pytest.TempPathFactory) -> Tuple[fl.Advice, List[Any]]:
    """One run with a long step (the verdict must be "none"), progress recorded."""
    seen: List[Any] = []
    out = tmp_path_factory.mktemp("advice")
    result = fl.advise(photos, step_ms=150, sample=10, batch_size=4, out=out,
                       progress=lambda *a: seen.append(a))
    return result, seen


def test_the_ladder_has_every_stage_and_batch_replay_is_fastest(advice: Any) -> None:
    ladder = advice[0].advice["ladder"]
    assert [s["stage"] for s in ladder] == list(LADDER)
    speeds = {s["stage"]: s["images_per_s"] for s in ladder}
    assert all(v > 0 for v in speeds.values())
    assert speeds["batches"] == max(speeds.values())
    # Caching after the crop leaves only ToTensor and Normalize: faster than decoding 640x480.
    assert speeds["geometric"] > speeds["files"]
    assert all(s["note"] for s in ladder)
    verdict = advice[0].advice["verdict"]
    assert verdict["bottleneck"] in LADDER[1:]
    saves = {s["stage"]: s["saves_ms_per_image"] for s in ladder[1:]}
    assert verdict["bottleneck_saves_ms_per_image"] == max(saves.values())


def test_strategies_are_measured_and_prepared_data_loads_faster(advice: Any) -> None:
    strategies = {s["name"]: s for s in advice[0].advice["strategies"]}
    assert list(strategies) == STRATEGIES
    for s in strategies.values():
        assert s["images_per_s"] > 0 and s["bytes"] > 0 and s["prepare_s"] >= 0
    online = strategies["online"]
    # A 256-pixel copy of 640x480 images decodes and resizes far fewer pixels.
    assert strategies["resized-256"]["images_per_s"] > online["images_per_s"]
    assert strategies["resized-256"]["bytes"] < online["bytes"]
    assert strategies["decoded-uint8"]["bytes"] > strategies["resized-256"]["bytes"]
    # uint8 output is the same pixels; a JPEG re-encoded copy is not.
    assert strategies["uint8-output"]["max_level_error"] == 0
    assert strategies["resized-256"]["max_level_error"] > 0
    assert strategies["resized-320"]["max_level_error"] > 0
    assert 0 < strategies["resized-256"]["mean_level_error"] < 10


def test_a_long_step_is_not_input_bound_and_actions_are_ranked(advice: Any) -> None:
    result = advice[0]
    verdict = result.advice["verdict"]
    assert result.input_bound == verdict["input_bound"] == "none"
    assert 0 <= verdict["wait_share"] < 0.05
    assert verdict["step_ms"] == 150
    gains = [a["gain"] for a in result.actions]
    assert gains == sorted(gains, reverse=True)
    resized = [a for a in result.actions if a["strategy"] == "resized-256"]
    assert resized and "ferroloader prepare" in resized[0]["apply"]
    assert "--shorter-side 256" in resized[0]["apply"]


def test_the_worker_sweep_recommends_a_swept_count(advice: Any) -> None:
    workers = advice[0].advice["workers"]
    counts = [p["workers"] for p in workers["sweep"]]
    assert counts[0] == 1 and counts == sorted(counts)
    assert workers["recommended"] in counts
    assert workers["sweep"][0]["gain"] is None


def test_advice_json_is_versioned_and_matches(advice: Any) -> None:
    result = advice[0]
    saved: Dict[str, Any] = json.loads(result.json_path.read_text())
    assert saved == json.loads(json.dumps(result.advice))
    assert saved["version"] == 1 and saved["schema"] == "ferroloader.advice"
    assert set(saved["verdict"]) >= {"input_bound", "wait_share"}
    assert all(set(s) >= {"stage", "images_per_s", "note"} for s in saved["ladder"])
    assert all(
        set(s) >= {"name", "bytes", "prepare_s", "images_per_s", "max_level_error"}
        for s in saved["strategies"]
    )
    assert set(saved["workers"]) >= {"recommended", "sweep"}
    assert saved["sample_images"] == 10 and saved["dataset_images"] == 12
    phases = {p for p, _, _ in advice[1]}
    assert {"ladder", "strategies", "workers"} <= phases


def test_the_report_opens_with_what_to_do(advice: Any) -> None:
    page = advice[0].html_path.read_text()
    sections = re.findall(r'<section id="([^"]+)"', page)
    assert sections[0] == "what-to-do"
    assert set(sections) >= {"ladder", "strategies", "workers"}
    first = page.split('<section id="what-to-do">', 1)[1].split("</section>", 1)[0]
    assert "none" in first and "--shorter-side 256" in first


def test_without_a_step_the_verdict_says_what_it_assumed(photos: Path, tmp_path: Path) -> None:
    budget = 1000  # bytes: no prepared copy fits
    result = fl.advise(photos, sample=6, batch_size=4, out=tmp_path, rounds=1,
                       storage_budget=budget, workers=1)
    verdict = result.advice["verdict"]
    assert verdict["step_ms"] is None and "assumed no compute" in verdict["note"]
    assert "--step-ms" in verdict["note"]
    strategies = {s["name"]: s for s in result.advice["strategies"]}
    for name in ("resized-256", "resized-320", "decoded-uint8"):
        assert strategies[name]["images_per_s"] is None
        note = strategies[name]["note"]
        assert note.startswith("skipped:") and "budget" in note
    assert strategies["uint8-output"]["images_per_s"] is not None
    assert not [a for a in result.actions if a["strategy"] in ("resized-256", "decoded-uint8")]


def test_the_verdict_grades_a_profile_of_your_own_loop(photos: Path, tmp_path: Path) -> None:
    import time

    import torch
    import torchvision
    from torchvision import transforms as tv

    tf = tv.Compose([tv.RandomResizedCrop(64), tv.ToTensor()])
    dl = torch.utils.data.DataLoader(torchvision.datasets.ImageFolder(photos, transform=tf),
                                     batch_size=2, num_workers=0)
    with fl.torch.profile(dl) as pdl:
        for _ in pdl:
            time.sleep(0.04)
    saved = tmp_path / "train.json"
    pdl.profile().save(saved)
    result = fl.advise(photos, training=saved, sample=6, batch_size=2, rounds=1, workers=1,
                       out=tmp_path / "adv")
    verdict = result.advice["verdict"]
    assert verdict["source"] == "training_profile"
    assert 35 <= verdict["step_ms"] < 200  # the 40 ms sleep, timed from the batch events
    own = pdl.profile().summary().to_dict()["pipelines"][0]["consumer_wait_share"]
    assert verdict["wait_share"] == pytest.approx(own)
    assert "your training loop" in verdict["note"] and 0 <= verdict["native_wait_share"] <= 1
    with pytest.raises(ValueError, match="not both"):
        fl.advise(photos, training=saved, step_ms=5, out=tmp_path)
    with pytest.raises(TypeError, match="Profile"):
        fl.advise(photos, training=42, out=tmp_path)


def test_the_command_line_end_to_end(photos: Path, tmp_path: Path) -> None:
    out = tmp_path / "adv"
    result = CliRunner().invoke(main, [
        "advise", str(photos), "--recipe", "basic", "--step-ms", "100", "--sample", "6",
        "--batch-size", "4", "--storage-budget", "1GB", "--out", str(out), "--quiet",
    ])
    assert result.exit_code == 0, result.output
    assert "Input-bound:" in result.output and "Bottleneck:" in result.output
    assert "report.html" in result.output
    saved = json.loads((out / "advice.json").read_text())
    assert saved["storage_budget"] == 10**9
    assert "RandomResizedCrop" in saved["transform"]
    assert (out / "report.html").is_file()


def test_the_command_line_refuses_bad_arguments(photos: Path, tmp_path: Path) -> None:
    bad_budget = CliRunner().invoke(main, ["advise", str(photos), "--storage-budget", "lots",
                                           "--out", str(tmp_path)])
    assert bad_budget.exit_code == 2 and "storage-budget" in bad_budget.output
    both = CliRunner().invoke(main, ["advise", str(photos), "--recipe", "basic", "--transform",
                                     "x.py:T", "--out", str(tmp_path)])
    assert both.exit_code == 2 and "one or the other" in both.output
    a_file = str(next(photos.rglob("*.jpg")))
    twice = CliRunner().invoke(main, ["advise", str(photos), "--step-ms", "5",
                                      "--training-profile", a_file, "--out", str(tmp_path)])
    assert twice.exit_code == 2 and "one or the other" in twice.output
    missing = CliRunner().invoke(main, ["advise", str(tmp_path / "none"), "--out", str(tmp_path)])
    assert missing.exit_code == 2


def test_arguments_are_checked(photos: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="sample"):
        fl.advise(photos, sample=0, out=tmp_path)
    with pytest.raises(ValueError, match="step_ms"):
        fl.advise(photos, step_ms=-1, out=tmp_path)
    with pytest.raises(ValueError, match="Resize"):
        fl.advise(photos, transform=T.Compose([T.ToTensor()]), out=tmp_path)


@pytest.mark.parametrize(
    "text,expected",
    [("50GB", 50 * 10**9), ("40GiB", 40 * 2**30), ("1.5T", 15 * 10**11), ("512", 512),
     ("2 mb", 2 * 10**6), (7, 7)],
)
def test_sizes_parse(text: Any, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "GB", "5XB", "-3"])
def test_bad_sizes_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="storage_budget"):
        parse_size(text)


def test_prepare_decoded_stores_pixels_the_loader_reads(photos: Path, tmp_path: Path) -> None:
    dst = tmp_path / "decoded"
    written = prepare_decoded(photos, dst, shorter_side=256, num_workers=2)
    files = sorted(dst.rglob("*.bmp"))
    assert len(files) == 12 and written == sum(f.stat().st_size for f in files)
    with Image.open(dst / "cat" / "1.jpg.bmp") as im:
        assert im.size == (341, 256)
    # Pixels as the loader's own Resize(256) of the source gives them.
    tf = T.Compose([T.Resize(256), T.CenterCrop(256), T.PILToTensor()])
    ours = fl.Loader(fl.ImageFolder(dst), batch_size=12, transform=tf, output="uint8",
                     tensor_type="numpy")
    theirs = fl.Loader(fl.ImageFolder(photos), batch_size=12, transform=tf, output="uint8",
                       tensor_type="numpy")
    (a, la), (b, lb) = next(iter(ours)), next(iter(theirs))
    assert np.array_equal(la, lb) and np.array_equal(a, b)
    with pytest.raises(ValueError, match="differ"):
        prepare_decoded(photos, photos)


def test_the_page_renders_in_chromium_what_to_do_first(advice: Any) -> None:
    from test_report import CHROMIUM, CHROMIUM_ARGS

    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail("playwright is not installed: pip install -r requirements-dev.txt")
    shot = Path(__file__).resolve().parents[2] / "target" / "advise-screenshot.png"
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            fetched: List[str] = []
            page.on("request", lambda r: fetched.append(r.url))
            page.goto(advice[0].html_path.as_uri())
            page.wait_for_load_state("load")
            assert [u for u in fetched if not u.startswith(("file:", "data:"))] == []
            headings = page.evaluate(
                "Array.from(document.querySelectorAll('h2')).map(h => h.textContent)")
            assert headings[0] == "What to do"
            top = page.evaluate(
                "document.getElementById('what-to-do').getBoundingClientRect().top")
            assert top < 300  # the verdict is on the first screen
            rows = page.evaluate("document.querySelectorAll('#what-to-do tbody tr').length")
            assert rows == len(advice[0].actions)
            assert page.evaluate("document.documentElement.scrollWidth") <= 1280
            shot.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(shot), full_page=True)
        finally:
            browser.close()


def _names(ops: Any) -> List[str]:
    return [type(t).__name__ for t in ops]


def test_the_geometry_cached_is_the_pipelines_leading_crop_and_flip() -> None:
    import sys

    split = sys.modules["ferroloader.cli.advisor"]._pipeline
    later_flip = split(T.Compose([T.RandomResizedCrop(96), T.ColorJitter(0.4),
                                  T.RandomHorizontalFlip(), T.ToTensor(),
                                  T.Normalize([0.5] * 3, [0.25] * 3)]))
    assert _names(later_flip.geometric) == ["RandomResizedCrop"]
    # Ops after the first non-geometric one keep their order (their draws come in turn).
    assert _names(later_flip.rest) == ["ColorJitter", "RandomHorizontalFlip", "ToTensor",
                                       "Normalize"]
    assert _names(later_flip.after_geometry())[0] == "CenterCrop"
    uint8 = later_flip.uint8_variant()
    assert uint8 is not None and _names(uint8)[-1] == "PILToTensor"
    assert "Normalize" not in _names(uint8)


GRAY_AFTER_FLIP = T.Compose([
    T.RandomResizedCrop(96), T.RandomHorizontalFlip(), T.Grayscale(3), T.ToTensor(),
    T.Normalize([0.5, 0.5, 0.5], [0.25, 0.25, 0.25]),
])


@pytest.mark.parametrize("transform", [None, GRAY_AFTER_FLIP], ids=["default", "gray"])
def test_each_cached_stage_gives_the_pipelines_own_pixels(photos: Path, transform: Any) -> None:
    """The ladder times the same work minus what is cached: the decoded images (BMP) and the
    cached crops, run through what remains of the pipeline, give the source's output exactly
    (the crops for the epoch whose draws they froze). With random ops after the crop the
    values differ (they draw other numbers from the sample's stream), the work does not."""
    import sys

    advise_module = sys.modules["ferroloader.cli.advisor"]
    pipe = advise_module._pipeline(transform)
    folder = fl.ImageFolder(photos)
    paths, labels = [p for p, _ in folder.samples], folder.targets

    def once(source: Any, compose: Any) -> Any:
        loader = fl.Loader(source, batch_size=len(paths), transform=compose, seed=3,
                           output=pipe.output, tensor_type="numpy")
        return next(iter(loader))[0]

    exact = once(fl.PathList(paths, labels), pipe.compose)
    decoded = [(advise_module._bmp(advise_module._decode(p, None)), y)
               for p, y in zip(paths, labels)]
    assert np.array_equal(once(decoded, pipe.compose), exact)
    crops = fl.Loader(fl.PathList(paths, labels), batch_size=len(paths), seed=3,
                      transform=pipe.geometry_uint8(), output="uint8", tensor_type="numpy")
    cached = [(advise_module._bmp(c.transpose(1, 2, 0)), y)
              for c, y in zip(next(iter(crops))[0], labels)]
    assert np.array_equal(once(cached, pipe.after_geometry()), exact)
