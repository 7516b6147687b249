"""``ferroloader.prepare`` and ``ferroloader prepare``: an ImageFolder re-encoded once at a
shorter side. Checked: sizes as ``Resize(int)`` gives them, pixels within JPEG error of
Pillow's own resize, small and undecodable files copied byte for byte, the same classes and
samples as the source (the loader reads the result), resuming, refusals, progress, Ctrl-C."""

from __future__ import annotations

import json
from pathlib import Path
from typing import List, Tuple

import numpy as np
import pytest
from click.testing import CliRunner
from PIL import Image

import ferroloader as fl
from ferroloader import transforms as T
from ferroloader.cli.commands import main


def _photo(w: int, h: int, seed: int) -> Image.Image:
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    base = np.stack([x * 255 // w, y * 255 // h, (x + y) * 127 // (w + h) + 64], axis=-1)
    noise = rng.integers(-6, 7, size=(h, w, 3))
    return Image.fromarray(np.clip(base + noise, 0, 255).astype(np.uint8), "RGB")


def _save(img: Image.Image, path: Path, fmt: str = "JPEG") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    img.save(path, fmt, quality=95)


@pytest.fixture()
def src(tmp_path: Path) -> Path:
    root = tmp_path / "src"
    _save(_photo(480, 320, 1), root / "cat" / "big.jpg")
    _save(_photo(120, 90, 2), root / "cat" / "small.jpg")
    _save(_photo(300, 600, 3), root / "dog" / "tall.png", "PNG")
    (root / "dog" / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 truncated")
    (root / "empty").mkdir()
    return root


def _size(path: Path) -> Tuple[int, int]:
    with Image.open(path) as im:
        return im.size


def test_resizes_copies_and_keeps_the_folder(src: Path, tmp_path: Path) -> None:
    dst = tmp_path / "dst"
    seen: List[Tuple[int, int]] = []
    report = fl.prepare(src, dst, shorter_side=160, progress=lambda d, t: seen.append((d, t)))
    assert (report.resized, report.copied, report.reused) == (2, 1, 0)
    assert [Path(p).name for p, _ in report.unreadable] == ["broken.jpg"]
    assert seen and seen[-1] == (4, 4)
    assert _size(dst / "cat" / "big.jpg") == (240, 160)
    assert _size(dst / "dog" / "tall.png.jpg") == (160, 320)
    assert (dst / "cat" / "small.jpg").read_bytes() == (src / "cat" / "small.jpg").read_bytes()
    assert (dst / "dog" / "broken.jpg").read_bytes() == (src / "dog" / "broken.jpg").read_bytes()
    # Pixels: Pillow's resize of the source, up to the re-encoding's error.
    with Image.open(src / "cat" / "big.jpg") as im:
        want = np.asarray(im.convert("RGB").resize((240, 160), Image.BILINEAR), dtype=np.int16)
    with Image.open(dst / "cat" / "big.jpg") as im:
        got = np.asarray(im.convert("RGB"), dtype=np.int16)
    assert np.abs(got - want).mean() < 3.0
    # torchvision's ImageFolder lists the same classes and samples (extensions aside).
    a, b = fl.ImageFolder(src, allow_empty=True), fl.ImageFolder(dst, allow_empty=True)
    assert a.classes == b.classes
    assert [label for _, label in a] == [label for _, label in b]
    manifest = [json.loads(line) for line in (dst / "prepare-manifest.jsonl").read_text().splitlines()]
    assert manifest[0] == {"ferroloader_prepare": 1, "shorter_side": 160, "quality": 90}
    assert sorted(e["action"] for e in manifest[1:]) == ["copied", "resized", "resized", "unreadable"]


def test_the_loader_reads_the_prepared_folder(src: Path, tmp_path: Path) -> None:
    dst = tmp_path / "dst"
    fl.prepare(src, dst, shorter_side=160)
    (dst / "dog" / "broken.jpg").unlink()
    loader = fl.Loader(
        fl.ImageFolder(dst, allow_empty=True), batch_size=3, num_workers=1,
        transform=T.Compose([T.Resize(100), T.CenterCrop(96), T.ToTensor()]),
    )
    images, labels = next(iter(loader))
    assert tuple(images.shape) == (3, 3, 96, 96)
    assert labels.tolist() == [0, 0, 1]


def test_resumes_refuses_other_settings_and_bad_arguments(src: Path, tmp_path: Path) -> None:
    dst = tmp_path / "dst"
    fl.prepare(src, dst, shorter_side=160, num_workers=1)
    again = fl.prepare(src, dst, shorter_side=160)
    assert (again.reused, again.resized, again.copied) == (4, 0, 0)
    _save(_photo(500, 300, 9), src / "cat" / "big.jpg")
    third = fl.prepare(src, dst, shorter_side=160)
    assert (third.reused, third.resized) == (3, 1)
    assert _size(dst / "cat" / "big.jpg") == (266, 160)  # int(160 * 500 / 300), as Resize
    with pytest.raises(ValueError, match="shorter_side=160"):
        fl.prepare(src, dst, shorter_side=200)
    with pytest.raises(ValueError, match="quality"):
        fl.prepare(src, tmp_path / "other", shorter_side=160, quality=0)
    with pytest.raises(ValueError, match="shorter_side"):
        fl.prepare(src, tmp_path / "other", shorter_side=0)
    with pytest.raises(ValueError, match="dst"):
        fl.prepare(src, src, shorter_side=160)
    with pytest.raises(FileNotFoundError):
        fl.prepare(tmp_path / "missing", tmp_path / "other", shorter_side=160)


def test_an_exception_in_progress_cancels_and_a_rerun_finishes(src: Path, tmp_path: Path) -> None:
    dst = tmp_path / "dst"

    def interrupt(done: int, total: int) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        fl.prepare(src, dst, shorter_side=160, num_workers=1, progress=interrupt)
    report = fl.prepare(src, dst, shorter_side=160)
    assert report.resized + report.copied + len(report.unreadable) + report.reused == 4
    assert _size(dst / "cat" / "big.jpg") == (240, 160)


def test_command_line(src: Path, tmp_path: Path) -> None:
    dst = tmp_path / "dst"
    result = CliRunner().invoke(
        main, ["prepare", str(src), str(dst), "--shorter-side", "160", "--quiet"],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    assert "2 resized, 1 copied, 0 already done" in result.output
    assert "unreadable, copied as is" in result.output and "broken.jpg" in result.output
    result = CliRunner().invoke(main, ["prepare", str(src), str(dst), "--shorter-side", "200", "-q"])
    assert result.exit_code == 1 and "shorter_side=160" in result.output
