"""``ferroloader.shard`` and ``ferroloader shard``: a dataset written as tar shards in the
WebDataset layout with an index. Read back with Python's own ``tarfile``: every sample once,
the bytes of its source file, torchvision's labels and classes, offsets that locate the image
inside its tar, shards within their size; file lists; resuming, refusals, Ctrl-C; the CLI."""

from __future__ import annotations

import csv
import hashlib
import json
import tarfile
from pathlib import Path
from typing import Any, Dict, List, Tuple

import numpy as np
import pytest
import torchvision
from click.testing import CliRunner

import ferroloader as fl
from ferroloader.cli.commands import main
from ferroloader.shards import parse_size

REPO = Path(__file__).resolve().parents[2]
FIXTURE_FOLDER = REPO / "target" / "fixtures" / "folder"


def _index(dst: Path) -> Dict[str, Any]:
    data: Dict[str, Any] = json.loads((dst / "index.json").read_text())
    return data


def _read_back(dst: Path) -> List[Tuple[str, bytes, int]]:
    """Every sample as (key, image bytes, label), read with tarfile, each shard checked against
    the index: adjacent KEY.EXT + KEY.cls members, offsets and sizes, sizes of the files."""
    index = _index(dst)
    assert index["format"] == "ferroloader-shards" and index["version"] == 1
    samples: List[Tuple[str, bytes, int]] = []
    for number, entry in enumerate(index["shards"]):
        assert entry["url"] == f"shard-{number:06d}.tar"
        path = dst / entry["url"]
        raw = path.read_bytes()
        assert len(raw) == entry["bytes"]
        assert entry["num_samples"] == len(entry["samples"])
        with tarfile.open(path) as tar:
            members = tar.getmembers()
            assert all(m.isfile() for m in members)
            assert len(members) == 2 * len(entry["samples"])
            for j, sample in enumerate(entry["samples"]):
                key = sample["key"]
                assert "." not in key
                image, cls = members[2 * j], members[2 * j + 1]
                stem, ext = image.name.split(".", 1)
                assert stem == key and ext == ext.lower() and "." not in ext
                assert cls.name == f"{key}.cls"
                data = tar.extractfile(image).read()  # type: ignore[union-attr]
                label = tar.extractfile(cls).read()  # type: ignore[union-attr]
                assert int(label.decode("ascii")) == sample["label"]
                # One range read of the shard file gives the image.
                assert image.offset_data == sample["offset"] and image.size == sample["size"]
                assert raw[sample["offset"]:sample["offset"] + sample["size"]] == data
                samples.append((key, data, sample["label"]))
    assert index["num_samples"] == len(samples)
    return samples


def _shard_sizes_ok(dst: Path, limit: int) -> None:
    for entry in _index(dst)["shards"]:
        assert entry["bytes"] <= limit or entry["num_samples"] == 1


def test_an_image_folder_reads_back_as_torchvision_lists_it(folder: Path, tmp_path: Path) -> None:
    dst = tmp_path / "shards"
    seen: List[Tuple[int, int]] = []
    report = fl.shard(folder, dst, shard_size="64KB", progress=lambda d, t: seen.append((d, t)))
    reference = torchvision.datasets.ImageFolder(str(folder))
    assert (report.samples, report.reused_shards, report.cancelled) == (18, 0, False)
    assert report.index == str(dst / "index.json")
    assert report.shards == len(_index(dst)["shards"]) > 1
    assert seen and seen[-1] == (18, 18)
    samples = _read_back(dst)
    _shard_sizes_ok(dst, 64_000)
    # Source order, every file once, its bytes unchanged, torchvision's label.
    assert len(samples) == len(reference.samples)
    for position, ((key, data, label), (path, target)) in enumerate(zip(samples, reference.samples)):
        assert key == f"{position:06d}_{Path(path).stem}"
        assert data == Path(path).read_bytes()
        assert label == target
    assert _index(dst)["classes"] == reference.classes
    assert report.bytes_read == sum(len(d) for _, d, _ in samples)
    assert report.bytes_written == sum(p.stat().st_size for p in dst.glob("*.tar"))
    assert not list(dst.glob("*.partial")) and not list(dst.glob("*.tmp"))


def test_the_fixture_corpus_shuffled(tmp_path: Path) -> None:
    assert (FIXTURE_FOLDER / "class00").is_dir(), "run `make test-python`: it makes target/fixtures/folder"
    dst = tmp_path / "shards"
    report = fl.shard(FIXTURE_FOLDER, dst, shard_size="1MB", shuffle=True, seed=3)
    reference = torchvision.datasets.ImageFolder(str(FIXTURE_FOLDER))
    samples = _read_back(dst)
    _shard_sizes_ok(dst, 1_000_000)
    assert report.samples == len(reference.samples) and report.shards > 10
    # Every sample exactly once, with its label, in an order that is not the source's.
    want = sorted((hashlib.sha256(Path(p).read_bytes()).hexdigest(), t) for p, t in reference.samples)
    got = sorted((hashlib.sha256(d).hexdigest(), label) for _, d, label in samples)
    assert got == want
    labels = [label for _, _, label in samples]
    assert labels != sorted(labels)
    assert _index(dst)["classes"] == reference.classes
    # The same seed writes the same bytes.
    again = tmp_path / "again"
    fl.shard(FIXTURE_FOLDER, again, shard_size="1MB", shuffle=True, seed=3)
    assert (again / "shard-000003.tar").read_bytes() == (dst / "shard-000003.tar").read_bytes()


def test_file_lists_in_their_order_with_their_labels(folder: Path, tmp_path: Path) -> None:
    files = sorted(folder.rglob("*.*"), reverse=True)[:7]
    rows = [(str(p.relative_to(folder)), "zebra" if i % 2 else "aardvark") for i, p in enumerate(files)]
    listing = tmp_path / "train.csv"
    with listing.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["path", "label"])
        writer.writerows(rows)
    dst = tmp_path / "from-csv"
    fl.shard(listing, dst, root=folder, max_samples_per_shard=3)
    samples = _read_back(dst)
    assert [len(s["samples"]) for s in _index(dst)["shards"]] == [3, 3, 1]
    assert [d for _, d, _ in samples] == [p.read_bytes() for p in files]
    assert [label for _, _, label in samples] == [0 if i % 2 == 0 else 1 for i in range(7)]
    assert _index(dst)["classes"] == ["aardvark", "zebra"]
    # A FileList object carries its parsing options; integer labels give no class names.
    tsv = tmp_path / "list.tsv"
    tsv.write_text("".join(f"{i}\t{p}\n" for i, p in enumerate(files)))
    dst = tmp_path / "from-tsv"
    fl.shard(fl.FileList(tsv, root=folder, path_column=1, label_column=0), dst)
    assert [label for _, _, label in _read_back(dst)] == list(range(7))
    assert "classes" not in _index(dst)
    # torchvision's ImageFolder is listed as it is.
    dst = tmp_path / "from-torchvision"
    fl.shard(torchvision.datasets.ImageFolder(str(folder)), dst)
    assert len(_read_back(dst)) == 18 and _index(dst)["classes"] == ["ant", "bee", "cat"]


def _blobs(root: Path, count: int = 120, size: int = 300_000) -> Path:
    """A folder of files named .jpg holding random bytes: shards copy bytes and never decode
    them, and random bytes make a run long enough to interrupt."""
    rng = np.random.default_rng(5)
    for i in range(count):
        path = root / f"c{i % 3}" / f"blob{i:03d}.jpg"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(rng.integers(0, 256, size=size, dtype=np.uint8).tobytes())
    return root


def test_resumes_refuses_other_settings_and_bad_arguments(folder: Path, tmp_path: Path) -> None:
    whole = tmp_path / "whole"
    fl.shard(folder, whole, max_samples_per_shard=4)
    dst = tmp_path / "dst"
    fl.shard(folder, dst, max_samples_per_shard=4, num_workers=1)
    again = fl.shard(folder, dst, max_samples_per_shard=4)
    assert (again.reused_shards, again.shards, again.bytes_read) == (5, 5, 0)
    # A torn shard and everything after it are written again.
    torn = dst / "shard-000002.tar"
    torn.write_bytes(torn.read_bytes()[:1000])
    (dst / "index.json").unlink()
    report = fl.shard(folder, dst, max_samples_per_shard=4)
    assert (report.reused_shards, report.shards) == (2, 5)
    for name in (f"shard-{i:06d}.tar" for i in range(5)):
        assert (dst / name).read_bytes() == (whole / name).read_bytes()
    assert _index(dst) == _index(whole)
    with pytest.raises(ValueError, match="max_samples_per_shard=4"):
        fl.shard(folder, dst, max_samples_per_shard=5)
    with pytest.raises(ValueError, match="shuffle=false"):
        fl.shard(folder, dst, max_samples_per_shard=4, shuffle=True)
    for bad in ("12XB", "0", -5, "GiB"):
        with pytest.raises(ValueError, match="shard_size"):
            fl.shard(folder, tmp_path / "other", shard_size=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_samples_per_shard"):
        fl.shard(folder, tmp_path / "other", max_samples_per_shard=0)
    with pytest.raises(ValueError, match="seed"):
        fl.shard(folder, tmp_path / "other", shuffle=True, seed=-1)
    with pytest.raises(ValueError, match="dst"):
        fl.shard(folder, folder)
    with pytest.raises(FileNotFoundError):
        fl.shard(tmp_path / "missing", tmp_path / "other")
    with pytest.raises(TypeError, match="list paths"):
        fl.shard([(b"\xff\xd8", 0)], tmp_path / "other")
    assert parse_size("1GB") == 10**9 and parse_size("256MiB") == 256 << 20
    assert parse_size("1.5k") == 1500 and parse_size(4096) == 4096


def test_an_unreadable_file_is_named_and_leaves_no_index(folder: Path, tmp_path: Path) -> None:
    missing = folder / "ant" / "gone.jpg"
    pairs = [(str(folder / "ant" / "img_00.jpg"), 0), (str(missing), 1)]
    dst = tmp_path / "dst"
    with pytest.raises(FileNotFoundError, match="gone.jpg"):
        fl.shard(pairs, dst)
    assert not (dst / "index.json").exists()
    no_extension = tmp_path / "README"
    no_extension.write_bytes(b"x")
    with pytest.raises(ValueError, match="README"):
        fl.shard([(str(no_extension), 0)], tmp_path / "other")


def test_an_exception_in_progress_cancels_and_a_rerun_finishes(tmp_path: Path) -> None:
    src = _blobs(tmp_path / "blobs")
    whole = tmp_path / "whole"
    fl.shard(src, whole, shard_size="1MB")
    dst = tmp_path / "dst"

    def interrupt(done: int, total: int) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        fl.shard(src, dst, shard_size="1MB", num_workers=1, progress=interrupt)
    assert not (dst / "index.json").exists()
    assert (dst / "shard-manifest.jsonl").exists()
    report = fl.shard(src, dst, shard_size="1MB")
    assert report.samples == 120 and not report.cancelled
    assert report.reused_shards < report.shards
    assert _index(dst) == _index(whole)
    for path in whole.glob("*.tar"):
        assert (dst / path.name).read_bytes() == path.read_bytes()
    assert not list(dst.glob("*.partial"))


def test_command_line(folder: Path, tmp_path: Path) -> None:
    dst = tmp_path / "dst"
    result = CliRunner().invoke(main, ["shard", str(folder), str(dst), "--shard-size", "1MB"],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    shards = len(_index(dst)["shards"])
    assert f"18 samples in {shards} shards (0 already written)" in result.output
    assert "sharding" not in result.output  # no progress bar off a terminal
    assert len(_read_back(dst)) == 18
    result = CliRunner().invoke(main, ["shard", str(folder), str(dst), "--shard-size", "2MB"])
    assert result.exit_code == 1 and "shard_size=1000000" in result.output
    result = CliRunner().invoke(main, ["shard", str(folder), str(dst), "--shard-size", "lots"])
    assert result.exit_code == 2 and "--shard-size" in result.output
    listing = tmp_path / "list.jsonl"
    listing.write_text("".join(json.dumps({"path": f"bee/img_{i:02d}.jpg", "label": i}) + "\n"
                               for i in range(3)))
    out = tmp_path / "from-list"
    result = CliRunner().invoke(main, ["shard", str(listing), str(out), "--root", str(folder),
                                       "--shuffle", "--seed", "1", "-q"])
    assert result.exit_code == 0, result.output
    assert sorted(label for _, _, label in _read_back(out)) == [0, 1, 2]
