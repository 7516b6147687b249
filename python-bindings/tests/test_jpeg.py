"""torchvision v2's ``JPEG`` augmentation run natively: libjpeg-turbo set as Pillow's
``save(format="JPEG", quality=q)`` sets it, so each sample equals torchvision's bit for bit on a
PIL image (Pillow's save and open) and after ``ToImage`` (``encode_jpeg``/``decode_jpeg``, which
configure libjpeg the same way), with the quality injected (``JPEG(q)`` draws only ``q``); the
quality draw follows ``torch.randint(min, max + 1)``; and a pipeline with it has no Python tail
and gives the same batches whatever the number of workers.
"""

from __future__ import annotations

import collections
import json
import warnings
from pathlib import Path
from typing import Any, Callable, Dict, List, Tuple, TypeVar

import numpy as np
import pytest
import torch
import torchvision
import torchvision.transforms.v2 as v2
import torchvision.transforms.v2.functional as F
from PIL import Image

import ferroloader as fl
from ferroloader import _native
from ferroloader import transforms as T

from conftest import natural_image

T_ = TypeVar("T_")

QUALITIES = [1, 2, 5, 10, 25, 50, 75, 90, 95, 99, 100]
SIZES: List[Tuple[int, int]] = [(1, 1), (7, 5), (5, 7), (2, 2), (17, 33), (224, 224)]


def _native_samples(images: np.ndarray, transform: Any, num_workers: int = 1, seed: int = 0) -> np.ndarray:
    """The loader's uint8 samples as ``[N, H, W, C]``, with no Python tail allowed."""
    loader = fl.Loader(fl.ImageArray(images, [0] * len(images)), batch_size=8, num_workers=num_workers,
                       transform=transform, output="uint8", shuffle=False, seed=seed, python_tail="error")
    return torch.cat([x for x, _ in loader]).permute(0, 2, 3, 1).numpy()


def _pil_reference(arr: np.ndarray, quality: int) -> np.ndarray:
    """torchvision's JPEG on the PIL image (Pillow's save, then open)."""
    mode = "L" if arr.ndim == 2 else "RGB"
    out = np.asarray(F.jpeg(Image.fromarray(arr, mode), quality))
    return out[..., None] if out.ndim == 2 else out


def _quiet(call: Callable[[], T_]) -> T_:
    """``call()`` without torchvision 0.29's deprecation warning for its image codecs."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "The image decoding and encoding", DeprecationWarning)
        return call()


def _tensor_reference(arr: np.ndarray, quality: int) -> np.ndarray:
    """torchvision's JPEG on the uint8 tensor (``encode_jpeg``, then ``decode_jpeg``)."""
    chw = torch.from_numpy(arr[..., None] if arr.ndim == 2 else arr).permute(2, 0, 1).contiguous()
    return _quiet(lambda: F.jpeg(chw, quality)).permute(1, 2, 0).numpy()


def _assert_equal(got: np.ndarray, want: np.ndarray, what: str) -> None:
    assert got.shape == want.shape, what
    if not np.array_equal(got, want):
        diff = np.abs(got.astype(np.int16) - want.astype(np.int16))
        raise AssertionError(f"{what}: {int((diff > 0).sum())} values differ, up to {int(diff.max())}")


def _images(size: Tuple[int, int], gray: bool, count: int = 3) -> np.ndarray:
    w, h = size
    rng = np.random.default_rng(w * 1000 + h + gray)
    out = []
    for k in range(count):
        arr = natural_image(rng, max(w, 32), max(h, 32))[:h, :w] if k else rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
        out.append(np.asarray(Image.fromarray(arr).convert("L")) if gray else arr)
    return np.stack(out)


@pytest.mark.parametrize("gray", [False, True], ids=["rgb", "L"])
@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_pil_and_tensor_paths_equal_torchvisions(size: Tuple[int, int], gray: bool) -> None:
    images = _images(size, gray)
    for quality in QUALITIES:
        on_pil = _native_samples(images, T.Compose([T.JPEG(quality), T.PILToTensor()]))
        on_tensor = _native_samples(images, T.Compose([T.ToImage(api="v2"), T.JPEG(quality), T.PILToTensor()]))
        for k, arr in enumerate(images):
            _assert_equal(on_pil[k], _pil_reference(arr, quality), f"PIL {size} q{quality} #{k}")
            _assert_equal(on_tensor[k], _tensor_reference(arr, quality), f"tensor {size} q{quality} #{k}")


@pytest.mark.parametrize("tensor", [False, True], ids=["pil", "tensor"])
def test_photos_through_torchvisions_pipeline(folder: Path, tensor: bool) -> None:
    """Fixture photos after a resize and a crop, converted from torchvision's own Compose."""
    for quality in (3, 60, 97):
        ops = [v2.Resize(64), v2.CenterCrop(48), v2.ToImage(), v2.JPEG(quality)] if tensor else [
            v2.Resize(64), v2.CenterCrop(48), v2.JPEG(quality), v2.PILToTensor()]
        transform = v2.Compose(ops)
        reference = torchvision.datasets.ImageFolder(str(folder), transform=transform)
        loader = fl.Loader(fl.ImageFolder(folder), batch_size=6, num_workers=2, transform=transform, output="uint8",
                           python_tail="error")
        seen = 0
        for images, _ in loader:
            for k in range(images.shape[0]):
                want, _ = _quiet(lambda: reference[seen])
                _assert_equal(images[k].numpy(), torch.as_tensor(want).numpy(), f"q{quality} sample {seen}")
                seen += 1
        assert seen == len(reference)


def _quality_of_each_sample(lo: int, hi: int, count: int, seed: int) -> List[int]:
    """Runs ``JPEG((lo, hi))`` natively on ``count`` copies of one noisy image and reads each
    sample's quality back from its pixels (each quality of the range gives other pixels)."""
    arr = np.random.default_rng(11).integers(0, 256, (16, 16, 3), dtype=np.uint8)
    by_pixels: Dict[bytes, int] = {}
    for q in range(lo, hi + 1):
        key = _pil_reference(arr, q).tobytes()
        assert key not in by_pixels, f"qualities {by_pixels.get(key)} and {q} give the same pixels"
        by_pixels[key] = q
    out = _native_samples(np.repeat(arr[None], count, 0), T.from_torchvision(v2.Compose([v2.JPEG((lo, hi)),
                                                                                            v2.PILToTensor()])),
                          seed=seed)
    return [by_pixels[sample.tobytes()] for sample in out]


def _chi_square(counts: "collections.Counter[int]", lo: int, hi: int) -> float:
    n = sum(counts.values())
    expected = n / (hi - lo + 1)
    return sum((counts.get(q, 0) - expected) ** 2 / expected for q in range(lo, hi + 1))


def test_the_quality_draw_follows_torchvisions() -> None:
    """Every quality of ``[lo, hi]``, both ends included, uniformly: the native draws and
    torchvision's own (``make_params``) pass the same chi-square test, and a draw from the
    other's range never appears."""
    lo, hi, n = 50, 90, 4100
    ours = collections.Counter(_quality_of_each_sample(lo, hi, n, seed=5))
    torch.manual_seed(0)
    reference = v2.JPEG((lo, hi))
    theirs = collections.Counter(int(reference.make_params([])["quality"]) for _ in range(n))
    assert set(ours) == set(theirs) == set(range(lo, hi + 1))
    # 40 degrees of freedom: 73.4 is the 0.999 quantile.
    assert _chi_square(ours, lo, hi) < 73.4
    assert _chi_square(theirs, lo, hi) < 73.4
    # A single quality is drawn as torchvision draws it: always that one.
    assert set(_quality_of_each_sample(77, 77, 20, seed=1)) == {77}


def test_a_pipeline_with_jpeg_runs_natively_the_same_whatever_the_workers(folder: Path) -> None:
    transform = v2.Compose([v2.RandomResizedCrop(40), v2.RandomHorizontalFlip(), v2.JPEG((50, 90)),
                            v2.ToImage(), v2.ToDtype(torch.float32, scale=True)])
    converted = T.from_torchvision(transform)
    assert [type(t).__name__ for t in converted.transforms] == ["RandomResizedCrop", "RandomHorizontalFlip", "JPEG",
                                                               "ToDtype"]
    assert not T.split_python_tail(transform).tail

    def batches(num_workers: int) -> torch.Tensor:
        loader = fl.Loader(fl.ImageFolder(folder), batch_size=4, num_workers=num_workers, transform=transform,
                           seed=3, python_tail="error")
        return torch.cat([x for x, _ in loader])

    first = batches(0)
    for workers in (1, 3):
        assert torch.equal(batches(workers), first), f"num_workers={workers}"


def test_the_class_takes_torchvisions_arguments_and_errors() -> None:
    assert T.JPEG(75).to_spec() == {"op": "JPEG", "quality": [75, 75]}
    assert T.JPEG((5, 50)).to_spec() == {"op": "JPEG", "quality": [5, 50]}
    assert T.from_torchvision([v2.JPEG([1, 100])]).transforms == [T.JPEG([1, 100])]
    assert repr(T.JPEG(9)) == "JPEG(quality=[9, 9])"
    for bad in (0, 101, (0, 5), (60, 50), (1, 101), (1.5, 3)):
        with pytest.raises(ValueError, match="quality must be an integer from 1 to 100"):
            T.JPEG(bad)  # type: ignore[arg-type]
        # torchvision refuses the same.
        with pytest.raises(ValueError, match="quality must be an integer from 1 to 100"):
            v2.JPEG(bad)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="quality can't be bool"):
        T.JPEG(True)
    with pytest.raises(ValueError, match="length should be one of"):
        T.JPEG((1, 2, 3))
    with pytest.raises(TypeError, match="sequence"):
        T.JPEG("50")  # type: ignore[arg-type]


@pytest.mark.parametrize("quality", [[0, 5], [50, 40], [100, 101], -3, 256])
def test_the_planner_refuses_bad_qualities(quality: Any) -> None:
    """A spec written by hand (not through the class) is checked natively, with torchvision's
    message."""
    spec = {"ops": [{"op": "JPEG", "quality": quality}, {"op": "PILToTensor"}], "output": "uint8"}
    with pytest.raises(ValueError, match="quality must be an integer from 1 to 100"):
        _native.check_pipeline(json.dumps(spec))
