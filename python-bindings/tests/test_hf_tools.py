"""The tools on a Hugging Face ``datasets.Dataset`` (or the directory ``save_to_disk`` wrote):
``fl.shard``/``ferroloader shard`` write its rows' bytes as shards that load as the dataset
does, ``fl.advise``/``ferroloader advise`` measure it read natively, and ``ferroloader compare
--on-error skip`` leaves the same bad rows out of both pipelines. Datasets are built here from
the decode fixtures and kept small, so each test takes seconds."""

from __future__ import annotations

import json
import sys
import tarfile
from pathlib import Path
from typing import Any, List

import datasets
import pytest
import torch
import torchvision.transforms as tvT
from click.testing import CliRunner
from datasets import ClassLabel, Dataset, Features, Image, Value

import ferroloader as fl
from ferroloader.cli.commands import main

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_hf_datasets import _decodable, _oriented_jpegs  # noqa: E402

datasets.disable_progress_bars()

EVAL = tvT.Compose([tvT.Resize(30), tvT.CenterCrop(24), tvT.ToTensor()])


def _dataset(tmp_path: Path, count: int = 12) -> Dataset:
    """Embedded JPEGs with EXIF orientations (most turn), other formats from the fixtures, and
    one row stored as a local file's path, labelled by a ClassLabel."""
    payloads = _oriented_jpegs(count)
    first = {}
    for p in _decodable():
        first.setdefault(p.suffix.lower(), p)
    others = [first[s] for s in (".png", ".gif", ".webp") if s in first]
    local = tmp_path / "local photo.jpg"
    local.write_bytes(payloads[1])
    rows = [{"bytes": b, "path": None} for b in payloads]
    rows += [{"bytes": p.read_bytes(), "path": p.name} for p in others]
    rows.append({"bytes": None, "path": str(local)})
    return Dataset.from_dict(
        {"image": rows, "label": [i % 3 for i in range(len(rows))]},
        features=Features({"image": Image(), "label": ClassLabel(names=["a", "b", "c"])}),
    )


def _shards(dst: Path) -> fl.WebDataset:
    return fl.WebDataset(sorted(str(p) for p in dst.glob("shard-*.tar")))


def _batches(source: Any) -> List[Any]:
    return list(fl.Loader(source, transform=EVAL, batch_size=4, num_workers=2))


def test_shards_of_a_dataset_load_as_the_dataset_does(tmp_path: Path) -> None:
    dataset = _dataset(tmp_path)
    report = fl.shard(dataset, tmp_path / "shards", max_samples_per_shard=5)
    assert report.samples == len(dataset) and report.shards == 4
    index = json.loads((tmp_path / "shards" / "index.json").read_text())
    # The rows' bytes as they are, under their format's extension, a local file under its name.
    assert index["exif_transpose"] is True and index["classes"] == ["a", "b", "c"]
    keys = [s["key"] for shard in index["shards"] for s in shard["samples"]]
    assert keys[0] == "000000_dataset_0_" and keys[-1].endswith("_local_photo"), keys
    members = []
    for shard in sorted((tmp_path / "shards").glob("shard-*.tar")):
        with tarfile.open(shard) as tar:
            members += tar.getnames()
    assert {m.rsplit(".", 1)[1] for m in members} >= {"jpg", "png", "gif", "cls"}
    shards = _shards(tmp_path / "shards")
    assert shards.exif_transpose and len(shards) == len(dataset)
    got, want = _batches(shards), _batches(dataset)
    assert len(got) == len(want)
    for (x, y), (a, b) in zip(got, want):
        assert torch.equal(x, a) and torch.equal(y, b)
    # Every row once: the labels, in order, are the dataset's.
    assert torch.cat([y for _, y in got]).tolist() == dataset["label"]
    # The turning is the index's doing: the same shards read as stored differ.
    stored = list(fl.Loader(shards, transform=EVAL, batch_size=4, exif_transpose=False))
    assert not all(torch.equal(x, a) for (x, _), (a, _) in zip(stored, want))


def test_shard_takes_a_saved_dataset_and_a_selection(tmp_path: Path) -> None:
    dataset = _dataset(tmp_path).shuffle(seed=1).select(range(9))
    dataset.save_to_disk(str(tmp_path / "saved"))
    result = CliRunner().invoke(main, ["shard", str(tmp_path / "saved"), str(tmp_path / "shards"),
                                       "--quiet"])
    assert result.exit_code == 0, result.output
    assert "9 samples in 1 shards (0 already written)" in result.output
    # Resumable as for files: the rows' names and labels are the source list.
    again = CliRunner().invoke(main, ["shard", str(tmp_path / "saved"), str(tmp_path / "shards"),
                                      "--quiet"])
    assert "9 samples in 1 shards (1 already written)" in again.output, again.output
    got, want = _batches(_shards(tmp_path / "shards")), _batches(dataset)
    assert all(torch.equal(x, a) and torch.equal(y, b) for (x, y), (a, b) in zip(got, want))


def test_a_row_that_cannot_be_read_is_named(tmp_path: Path) -> None:
    dataset = _dataset(tmp_path, count=4)
    (tmp_path / "local photo.jpg").unlink()
    with pytest.raises(Exception, match=r"dataset\[7\].*local photo\.jpg"):
        fl.shard(dataset, tmp_path / "shards")
    assert not (tmp_path / "shards" / "index.json").exists()
    with pytest.raises(TypeError, match="the datasets.Dataset itself"):
        fl.shard(torch.utils.data.Subset(dataset, [0, 1]), tmp_path / "other")


def _grayscale_dataset(count: int) -> Dataset:
    """PNGs of one channel (Pillow's L), as MNIST on the Hub: the loader gives one channel."""
    import io

    import numpy as np
    from PIL import Image as PILImage

    rng = np.random.default_rng(2)
    rows = []
    for _ in range(count):
        buf = io.BytesIO()
        PILImage.fromarray(rng.integers(0, 256, (20, 30), dtype=np.uint8), "L").save(buf, "PNG")
        rows.append({"bytes": buf.getvalue(), "path": None})
    return Dataset.from_dict({"image": rows, "label": [i % 2 for i in range(count)]},
                             features=Features({"image": Image(), "label": Value("int64")}))


def test_shards_of_a_grayscale_dataset_decode_to_one_channel(tmp_path: Path) -> None:
    dataset = _grayscale_dataset(6)
    fl.shard(dataset, tmp_path / "shards")
    shards = _shards(tmp_path / "shards")
    assert shards.mode == "L"
    assert fl.Loader(shards, transform=EVAL, batch_size=4).image_mode == "L"
    got, want = _batches(shards), _batches(dataset)
    assert got[0][0].shape[1] == 1
    assert all(torch.equal(x, a) and torch.equal(y, b) for (x, y), (a, b) in zip(got, want))
    # Shards of colour images stay RGB.
    fl.shard(_dataset(tmp_path, count=3), tmp_path / "colour")
    assert _shards(tmp_path / "colour").mode == "RGB"


def test_advise_measures_a_saved_dataset_read_natively(tmp_path: Path) -> None:
    dataset = _dataset(tmp_path)
    dataset.save_to_disk(str(tmp_path / "saved"))
    saved = sorted(p.name for p in (tmp_path / "saved").iterdir())
    transform = tvT.Compose([tvT.RandomResizedCrop(24), tvT.ToTensor(),
                             tvT.Normalize([0.5] * 3, [0.25] * 3)])
    advice = fl.advise(tmp_path / "saved", transform=transform, sample=8, batch_size=4, rounds=1,
                       workers=1, out=tmp_path / "advice").advice
    assert advice["dataset_images"] == len(dataset) and advice["sample_images"] == 8
    assert [s["stage"] for s in advice["ladder"]] == ["files", "bytes", "decoded", "geometric",
                                                       "batches"]
    assert all(s["images_per_s"] > 0 for s in advice["ladder"])
    assert advice["workers"]["sweep"] and advice["verdict"]["wait_share"] >= 0
    strategies = {s["name"]: s for s in advice["strategies"]}
    assert strategies["online"]["images_per_s"] > 0 and strategies["online"]["bytes"] > 0
    assert strategies["uint8-output"]["images_per_s"] > 0
    assert strategies["uint8-output"]["max_level_error"] <= 1.0
    # prepare's copy of the sampled rows, saved and read natively: measured like a folder's.
    for name in ("resized-256", "resized-320"):
        assert strategies[name]["images_per_s"] > 0 and strategies[name]["bytes"] > 0
        assert strategies[name]["max_level_error"] == 0.0  # no image is that large: copied
    assert strategies["decoded-uint8"]["images_per_s"] is None
    assert strategies["decoded-uint8"]["note"].startswith("not measured: prepare_decoded")
    assert not any(a["strategy"] == "decoded-uint8" for a in advice["actions"])
    assert "not measured" in (tmp_path / "advice" / "report.html").read_text()
    # Sampling and preparing the sample write nothing into the dataset's folder.
    assert sorted(p.name for p in (tmp_path / "saved").iterdir()) == saved
    result = CliRunner().invoke(main, ["advise", str(tmp_path / "saved"), "--sample", "4",
                                       "--batch-size", "4", "--workers", "1", "--quiet",
                                       "--out", str(tmp_path / "cli")])
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "cli" / "advice.json").read_text())["data"] == str(
        tmp_path / "saved")


def _photos(count: int) -> Dataset:
    """Photo-like JPEGs (smooth, so re-encoding changes them little) of 64x40, most with an
    EXIF orientation that turns them."""
    import io

    import numpy as np
    from PIL import Image as PILImage

    from conftest import natural_image

    rng = np.random.default_rng(3)
    rows = []
    for i in range(count):
        buf = io.BytesIO()
        exif = PILImage.Exif()
        exif[0x0112] = (6, 3, 8, 1)[i % 4]
        PILImage.fromarray(natural_image(rng, 64, 40)).save(buf, "JPEG", quality=95,
                                                             exif=exif.tobytes())
        rows.append({"bytes": buf.getvalue(), "path": None})
    return Dataset.from_dict({"image": rows, "label": [i % 2 for i in range(count)]},
                             features=Features({"image": Image(), "label": Value("int64")}))


def test_prepare_writes_a_dataset_copy_that_loads_as_the_dataset_resized(tmp_path: Path) -> None:
    """The copy's rows, resized upright (the orientation turned as datasets turns it: the JPEG
    keeps none), give the source's pixels within the re-encoding's error."""
    import numpy as np

    dataset = _photos(8)
    dataset.save_to_disk(str(tmp_path / "saved"))
    saved = sorted(p.name for p in (tmp_path / "saved").iterdir())
    result = CliRunner().invoke(main, ["prepare", str(tmp_path / "saved"), str(tmp_path / "copy"),
                                       "--shorter-side", "20", "--quiet"])
    assert result.exit_code == 0, result.output
    assert "8 resized, 0 copied" in result.output
    # The source's folder is not written to (map's cache goes to a temporary folder, removed).
    assert sorted(p.name for p in (tmp_path / "saved").iterdir()) == saved
    assert sorted(p.name for p in tmp_path.iterdir()) == ["copy", "saved"]
    copy = datasets.load_from_disk(str(tmp_path / "copy"))
    assert copy.features == dataset.features and copy["label"] == dataset["label"]
    assert all(min(row["image"].size) == 20 for row in copy)
    transform = tvT.Compose([tvT.Resize(20), tvT.CenterCrop(16), tvT.PILToTensor()])
    got = torch.cat([x for x, _ in fl.Loader(copy, transform=transform, batch_size=8,
                                               output="uint8")]).float()
    want = torch.cat([x for x, _ in fl.Loader(dataset, transform=transform, batch_size=8,
                                                output="uint8")]).float()
    # Per image: about 5-9 levels from re-encoding 20-pixel images, 35-65 where one was not
    # turned.
    assert all(float((a - b).abs().mean()) < 12.0 for a, b in zip(got, want))
    # Smaller rows keep their bytes (the EXIF too).
    report = fl.prepare(dataset, tmp_path / "same", shorter_side=40)
    assert (report.resized, report.copied, report.reused) == (0, 8, 0)
    assert report.bytes_in == report.bytes_out
    same = datasets.load_from_disk(str(tmp_path / "same"))
    assert all(np.array_equal(np.asarray(a["image"]), np.asarray(b["image"]))
               for a, b in zip(same, dataset))


def test_the_advisors_cached_stages_turn_images_as_the_dataset_does(tmp_path: Path) -> None:
    """The decoded stage caches the image upright, as the dataset's reading gives it: run
    through the pipeline it gives the pixels of the rows read natively."""
    import numpy as np

    from ferroloader.cli import advisor

    dataset = _dataset(tmp_path, count=9).select(range(9))
    sample = advisor._draw_sample(dataset, 9, 0)
    assert sample.exif_transpose and len(sample) == 9
    pipe = advisor._pipeline(EVAL)
    run = advisor._Runner(9, 1, 0, 9, None, exif_transpose=sample.exif_transpose)
    exact = advisor._images(run.loader(sample.source(), pipe.compose, pipe.output, shuffle=False))
    decoded = [(advisor._bmp(advisor._decode(b, None, True)), y)
               for b, y in zip(sample.encoded(), sample.labels)]
    cached = advisor._images(run.loader(decoded, pipe.compose, pipe.output, shuffle=False))
    assert np.array_equal(cached, exact)


def test_compare_skip_leaves_a_bad_row_out_of_both_pipelines(tmp_path: Path) -> None:
    from ferroloader.cli import compare

    rows = [{"bytes": b, "path": None} for b in _oriented_jpegs(7)]
    rows[3] = {"bytes": b"<html>not an image</html>", "path": "bad.jpg"}
    Dataset.from_dict(
        {"image": rows, "label": [i % 2 for i in range(7)]},
        features=Features({"image": Image(), "label": Value("int64")}),
    ).save_to_disk(str(tmp_path / "saved"))
    cfg = compare.RunConfig(data=tmp_path / "saved", batch_size=7, batches=1, workers=1,
                            on_error="skip", transform=EVAL, output="float32")
    for pipeline in ("native", "torchvision"):
        result = compare.run_pipeline(cfg, pipeline)
        assert result.images == 6, pipeline
    raising = compare.RunConfig(data=tmp_path / "saved", batch_size=7, batches=1, workers=1,
                                transform=EVAL, output="float32")
    with pytest.raises((compare.SampleFailure, fl.DecodeError)):
        compare.run_pipeline(raising, "torchvision")
    out = CliRunner().invoke(main, ["compare", str(tmp_path / "saved"), "--on-error", "skip",
                                    "--batch-size", "4", "--batches", "2", "--workers", "1",
                                    "--quiet", "--out", str(tmp_path / "report")])
    assert out.exit_code == 0, out.output


def test_the_skipping_dataset_pickles_for_spawned_workers(tmp_path: Path) -> None:
    import pickle

    from ferroloader.cli import compare

    dataset = compare.skipping(_dataset(tmp_path, count=3))
    copy = pickle.loads(pickle.dumps(dataset))
    assert type(copy) is type(dataset) and len(copy) == len(dataset)


def test_advise_measures_a_grayscale_dataset_in_rgb(tmp_path: Path) -> None:
    """The loader gives a grayscale dataset one channel; its cached stages hold RGB, so the
    advisor measures every stage in RGB."""
    dataset = _grayscale_dataset(4)
    assert fl.Loader(dataset, transform=EVAL, batch_size=4).image_mode == "L"
    advice = fl.advise(dataset, transform=EVAL, sample=4, batch_size=2, rounds=1, workers=1,
                       out=tmp_path / "advice").advice
    assert advice["data"] == "datasets.Dataset (4 rows)"
    assert all(s["images_per_s"] > 0 for s in advice["ladder"])
