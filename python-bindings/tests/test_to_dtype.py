"""The float conversion's two arithmetics, each torchvision's to the bit.

torchvision v1's ``ToTensor()``/``ConvertImageDtype(torch.float32)`` compute ``x.float().div(255)``;
v2's ``ToDtype(torch.float32, scale=True)``/``ConvertImageDtype`` compute
``x.float().mul_(1.0 / 255)``, one ulp apart on 126 of the 256 levels. The converter keeps them
apart (``ToTensor`` and ``ToDtype`` in the spec), and every path that writes the float sample (the
fused pass, the staged and op-by-op passes, the tensor ops before ``Normalize``, a Python tail
after the conversion) follows the one written. No tolerance anywhere here: ``torch.equal``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, List

import numpy as np
import pytest
import torch
import torchvision
import torchvision.transforms as tvT
import torchvision.transforms.v2 as v2
from PIL import Image
from torchvision import tv_tensors

import ferroloader as fl
from ferroloader import _native
from ferroloader import transforms as T

MEAN = [0.485, 0.456, 0.406]
STD = [0.229, 0.224, 0.225]
HEAD = [v2.Resize(40), v2.CenterCrop(32)]  # on the PIL image: exact, nothing drawn


@pytest.fixture(scope="module")
def levels_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two 16x16 PNGs holding every level in every channel (in different places)."""
    root = tmp_path_factory.mktemp("levels")
    (root / "a").mkdir()
    v = np.arange(256, dtype=np.uint8).reshape(16, 16)
    for i, pixels in enumerate([np.stack([v, v.T, 255 - v], -1), np.stack([255 - v.T, v, v[::-1]], -1)]):
        Image.fromarray(pixels, "RGB").save(root / "a" / f"{i}.png")
    return root


def _epoch(folder: Path, transform: Any, *, workers: int = 2, python_tail: str = "error") -> torch.Tensor:
    loader = fl.Loader(fl.ImageFolder(folder), batch_size=5, num_workers=workers, transform=transform,
                       python_tail=python_tail, seed=3)  # type: ignore[arg-type]
    if python_tail == "error":
        assert loader.python_tail == []
    return torch.cat([x for x, _ in loader])


def _torchvisions(folder: Path, transform: Any) -> torch.Tensor:
    reference = torchvision.datasets.ImageFolder(str(folder), transform=transform)
    return torch.stack([torch.as_tensor(reference[i][0]).as_subclass(torch.Tensor) for i in range(len(reference))])


def _assert_equal(got: torch.Tensor, want: torch.Tensor) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype == torch.float32
    differ = int((got != want).sum())
    assert differ == 0, f"{differ} of {got.numel()} values differ, up to {float((got - want).abs().max())}"


def test_the_two_arithmetics_differ_where_torchvision_says() -> None:
    """The premise: torchvision's two conversions differ on 126 levels, and the converter names
    each (v2's deprecated ToTensor is v1's)."""
    x = torch.arange(256, dtype=torch.uint8)[None, None]
    v1 = tvT.ConvertImageDtype(torch.float32)(x)
    two = v2.ToDtype(torch.float32, scale=True)(tv_tensors.Image(x)).as_subclass(torch.Tensor)
    assert int((v1 != two).sum()) == 126
    assert torch.equal(v1, x.float() / 255)
    assert torch.equal(two, x.float() * np.float32(1.0 / 255))
    with pytest.warns(UserWarning, match="deprecated"):
        deprecated = v2.ToTensor()  # v1's to_tensor, a division
    for ops, op in [
        ([tvT.ToTensor()], "ToTensor"),
        ([tvT.PILToTensor(), tvT.ConvertImageDtype(torch.float32)], "ToTensor"),
        ([deprecated], "ToTensor"),
        ([v2.ToImage(), v2.ToDtype(torch.float32, scale=True)], "ToDtype"),
        ([v2.PILToTensor(), v2.ConvertImageDtype(torch.float32)], "ToDtype"),
        ([v2.ToImage(), v2.ToDtype({tv_tensors.Image: torch.float32, "others": None}, scale=True)], "ToDtype"),
        ([tvT.PILToTensor(), v2.ToDtype(torch.float32, scale=True)], "ToDtype"),
        ([v2.ToImage(), tvT.ConvertImageDtype(torch.float32)], "ToTensor"),
    ]:
        spec = T.from_torchvision([tvT.CenterCrop(8), *ops]).to_spec()
        assert spec[-1] == {"op": op}, ops
    assert T.check(T.Compose([T.CenterCrop(8), T.ToDtype(), T.Normalize(MEAN, STD)]))["shape"] == (3, 8, 8)


@pytest.mark.parametrize("normalize", [False, True], ids=["plain", "normalize"])
@pytest.mark.parametrize("v", ["v1", "v2"])
def test_every_level_is_torchvisions(levels_folder: Path, v: str, normalize: bool) -> None:
    """All 256 levels in every channel: v2's pipeline multiplies, v1's divides, both exact (the
    fused pass, with and without Normalize)."""
    norm = [v2.Normalize(MEAN, STD)] if normalize else []
    if v == "v2":
        tv = v2.Compose([v2.ToImage(), v2.ToDtype(torch.float32, scale=True), *norm])
    else:
        tv = tvT.Compose([tvT.ToTensor(), *([tvT.Normalize(MEAN, STD)] if normalize else [])])
    _assert_equal(_epoch(levels_folder, tv), _torchvisions(levels_folder, tv))


@pytest.mark.parametrize("normalize", [False, True], ids=["plain", "normalize"])
@pytest.mark.parametrize("stage", ["fused", "staged"])
def test_v2_pipelines_on_photos_are_torchvisions(folder: Path, stage: str, normalize: bool) -> None:
    """The fixture photos through v2's recommended form, fused and with a pixel op (the staged
    pass), each worker count giving the same batch."""
    ops: List[Any] = [*HEAD, v2.ToImage()]
    if stage == "staged":
        ops.append(v2.RandomInvert(p=1.0))
    ops.append(v2.ToDtype(torch.float32, scale=True))
    if normalize:
        ops.append(v2.Normalize(MEAN, STD))
    tv = v2.Compose(ops)
    got = _epoch(folder, tv, workers=0)
    assert torch.equal(_epoch(folder, tv, workers=3), got)
    _assert_equal(got, _torchvisions(folder, tv))


def test_v2_conversion_after_the_tensor_ops_is_torchvisions(folder: Path) -> None:
    """v2's ToImage first, a colour op on the tensor, then the conversion: the op-by-op path."""
    tv = v2.Compose([v2.ToImage(), v2.CenterCrop(48), v2.ColorJitter(contrast=(0.61, 0.61)),
                     v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)])
    _assert_equal(_epoch(folder, tv), _torchvisions(folder, tv))


def test_v1_conversion_after_pil_to_tensor_stays_on_the_division(folder: Path) -> None:
    tv = tvT.Compose([*HEAD, tvT.PILToTensor(), tvT.ConvertImageDtype(torch.float32), tvT.Normalize(MEAN, STD)])
    _assert_equal(_epoch(folder, tv), _torchvisions(folder, tv))


def test_gaussian_noise_before_normalize_is_torchvisions(folder: Path) -> None:
    """v2's GaussianNoise between ToDtype and Normalize (the plan converts without normalizing,
    then normalizes the slot): torchvision's pipeline given the sample's normals, bit for bit."""
    plain = v2.Compose([*HEAD, v2.ToImage(), v2.ToDtype(torch.float32, scale=True)])
    tv = v2.Compose([*plain.transforms, v2.GaussianNoise(0.02, 0.3), v2.Normalize(MEAN, STD)])
    got = _epoch(folder, tv, workers=0)
    reference = torchvision.datasets.ImageFolder(str(folder), transform=plain)
    spec = json.dumps(T.GaussianNoise(0.02, 0.3).to_spec())
    original = torch.randn_like
    try:
        for i in range(len(reference)):
            clean = reference[i][0]  # torchvision's own ToDtype values
            _, normals = _native.gaussian_noise_apply(spec, clean.as_subclass(torch.Tensor).numpy(), i, seed=3)
            z = torch.from_numpy(normals)
            torch.randn_like = lambda t, **kw: z.clone()  # type: ignore[assignment]
            want = v2.Normalize(MEAN, STD)(v2.GaussianNoise(0.02, 0.3)(clean))
            _assert_equal(got[i], want.as_subclass(torch.Tensor))
    finally:
        torch.randn_like = original  # type: ignore[assignment]


@pytest.mark.parametrize("before", [True, False], ids=["before-normalize", "after-normalize"])
def test_random_erasing_leaves_torchvisions_values_around_the_rectangle(folder: Path, before: bool) -> None:
    """v2's RandomErasing with a fixed rectangle size (its place is drawn): outside it every value
    is torchvision's without the erasing, inside it the fill as torchvision normalizes it."""
    erase = v2.RandomErasing(p=1.0, scale=(0.25, 0.25), ratio=(1.0, 1.0), value=0)
    norm = v2.Normalize(MEAN, STD)
    base = [*HEAD, v2.ToImage(), v2.ToDtype(torch.float32, scale=True)]
    tv = v2.Compose(base + ([erase, norm] if before else [norm, erase]))
    got = _epoch(folder, tv)
    want = _torchvisions(folder, v2.Compose(base + [norm]))
    fill = ((0 - torch.tensor(MEAN)) / torch.tensor(STD))[:, None, None] if before else torch.zeros(3, 1, 1)
    for i in range(got.shape[0]):
        erased = (got[i] != want[i]).any(0)
        rows, cols = torch.nonzero(erased, as_tuple=True)
        assert len(rows) > 0, i
        # Within one 16x16 rectangle (a quarter of 32x32), the rest torchvision's to the bit.
        assert int(rows.max() - rows.min()) < 16 and int(cols.max() - cols.min()) < 16, i
        assert torch.equal(got[i][:, erased], fill.expand(3, 32, 32)[:, erased]), i


def test_a_python_tail_after_the_conversion_gets_torchvisions_values(folder: Path) -> None:
    """A tail op the native planner does not know, after v2's ToDtype: the native prefix hands it
    torchvision's floats, and Normalize in the tail then gives torchvision's sample."""
    mark = v2.Lambda(lambda t: t.flip(-1))
    tv = v2.Compose([*HEAD, v2.ToImage(), v2.ToDtype(torch.float32, scale=True), mark, v2.Normalize(MEAN, STD)])
    split = T.split_python_tail(tv)
    assert split.input_kind == "float32" and split.tail[0] is mark
    assert split.prefix.to_spec()[-1] == {"op": "ToDtype"}
    _assert_equal(_epoch(folder, tv, python_tail="allow"), _torchvisions(folder, tv))


def test_resized_crop_takes_either_arithmetic(folder: Path) -> None:
    """The single-sample path: its uint8 pixels converted by torchvision's kernels."""
    path = fl.ImageFolder(folder).samples[2][0]
    data = Path(path).read_bytes()
    args = (data, 17, 31, 200, 150, (64, 48))
    pixels = torch.from_numpy(_native.resized_crop(*args, output="uint8"))
    for scaling, want in [
        ("divide", tvT.ConvertImageDtype(torch.float32)(pixels)),
        ("reciprocal", v2.ToDtype(torch.float32, scale=True)(tv_tensors.Image(pixels)).as_subclass(torch.Tensor)),
    ]:
        _assert_equal(torch.from_numpy(_native.resized_crop(*args, scaling=scaling)), want)
        normed = torch.from_numpy(_native.resized_crop(*args, mean=MEAN, std=STD, scaling=scaling))
        _assert_equal(normed, tvT.Normalize(MEAN, STD)(want))
    with pytest.raises(ValueError, match="scaling"):
        _native.resized_crop(*args, scaling="multiply")
